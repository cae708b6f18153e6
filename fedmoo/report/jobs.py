"""Finding the jobs of runs and sweeps on disk and grouping them by configuration (for
``fedmoo table``, ``fedmoo plot`` and ``fedmoo pareto``).

A job is a directory holding ``.hydra/config.yaml`` or ``summary.json``; its configuration is
summary.json's ``config``, else Hydra's record. Jobs are grouped by that configuration, flattened,
less ``NOT_A_RESULT_KEY`` and the keys Hydra sets to ``${seed}``, with the defaults of the keys a
record lacks filled in (``fedmoo.report.defaults``) and the digest of the data it trained on:
jobs that differ in anything else are never averaged together. A group counts one job per seed.
A file that cannot be read makes its job ``corrupt`` with a ``reason``; nothing here raises for a
damaged job.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from fedmoo.config.knobs import number
from fedmoo.errors import UserError
from fedmoo.report import defaults
from fedmoo.report.results import SWEEP_NOTE, one_line, read_rounds_frame, sweep_info

# Keys (and their sub-keys) that never distinguish configurations: the seed and knobs that only
# change where or how a job runs (fedmoo.run.identity.VOLATILE_KEYS among them).
NOT_A_RESULT_KEY = ("seed", "hydra", "experiment", "debug", "progress", "device", "data_dir",
                    "threads", "logger", "resume", "checkpoint_every", "traceback",
                    "deterministic",
                    "algo.total_rounds")   # older records: FedMGDA's copy of ``rounds``
FINISHED = ("completed", "diverged")
DATA_KEY = "data_digest"   # summary.json's FederatedData.digest; its first 12 digits here
log = logging.getLogger(__name__)
_FOLLOWS_SEED = re.compile(r"^\$\{\.*seed\}$")


def is_result_key(key: str) -> bool:
    return not any(key == k or key.startswith(k + ".") for k in NOT_A_RESULT_KEY)


flatten = defaults.flatten   # {"algo": {"alpha": 0.1}} -> {"algo.alpha": 0.1}


def as_text(v: Any) -> str:
    """A config value as it is written in an override."""
    return json.dumps(v) if v is None or isinstance(v, (bool, list, dict)) else str(v)


@dataclass
class Job:
    path: Path
    overrides: dict[str, str]
    config: dict[str, Any] | None          # None: no readable configuration
    summary: dict[str, Any] | None
    status: str = "missing"
    reason: str | None = None              # what could not be read (or: no config recorded)
    rows_path: Path | None = None
    seed_keys: tuple[str, ...] = ()        # keys set to ${seed} in Hydra's record
    mtime: float = 0.0                     # of summary.json (else the directory)
    rounds_problem: str | None = None      # what is wrong with rounds.csv, once read
    rounds_note: str | None = None         # what was repaired in it (a round written twice)
    filled: dict[str, Any] = field(default_factory=dict)   # defaults of keys the record lacks
    bad_metrics: dict[str, str] = field(default_factory=dict)  # final metrics that are no number
    _rounds: Any = field(default=None, repr=False)

    @property
    def seed(self) -> Any:
        return (self.config or {}).get("seed")

    @cached_property
    def flat(self) -> dict[str, Any]:
        """The configuration with dotted keys, and ``DATA_KEY`` where summary.json records it."""
        digest = (self.summary or {}).get(DATA_KEY)
        return {**flatten(self.config or {}), **({DATA_KEY: str(digest)[:12]} if digest else {})}

    @property
    def build(self) -> str | None:
        """The fedmoo build that wrote summary.json (``0.1.0 (git 1a2b3c4d5e6f)``), if recorded."""
        v = (self.summary or {}).get("versions")
        if not isinstance(v, dict) or "fedmoo" not in v:
            return None
        return str(v["fedmoo"]) + (f" (git {str(v['fedmoo_git'])[:12]})"
                                   if v.get("fedmoo_git") else "")

    def identity(self) -> dict[str, Any]:
        """The flattened configuration that determines the results (no seed), defaults filled."""
        flat = {**self.flat, **self.filled}
        return {k: v for k, v in flat.items() if is_result_key(k) and k not in self.seed_keys}

    def metric(self, key: str) -> float | None:
        """summary.json's final ``key`` (a killed job's: its last rounds.csv row); None if
        missing or not a number (in ``bad_metrics``)."""
        final = (self.summary or {}).get("final")
        if final is None and self.status == "incomplete" and len(rows := self.rounds()):
            final = rows.iloc[-1].to_dict()
        v = (final or {}).get(key)
        if v is None:
            return None
        if not number(v):
            self.bad_metrics[key] = f"summary.json's final {key} is not a number: {v!r:.60}"
            return None
        return float(v)

    def expected_rows(self) -> int | None:
        """rounds.csv rows that summary.json's ``rounds_completed`` implies (None: unknown)."""
        try:
            done = int(self.summary["rounds_completed"])
            every = int(self.config["eval_every"])
            return done // every + (1 if self.status == "completed" and done % every else 0)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            return None

    def rounds(self):
        """rounds.csv's whole rows (read once; sets ``rounds_problem`` and ``rounds_note``)."""
        if self._rounds is None:
            if self.rows_path is None:
                import pandas as pd

                return pd.DataFrame()
            self._rounds, self.rounds_problem, self.rounds_note = read_rounds_frame(
                self.rows_path, self.expected_rows())
        return self._rounds


def _hydra_config(path: Path) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Hydra's record, resolved where possible, and the keys it sets to ``${seed}``; raises
    ValueError or TypeError for a file that is not a YAML mapping."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        node = OmegaConf.create(path.read_text())
    except (yaml.YAMLError, OmegaConfBaseException) as e:
        raise ValueError(str(e)) from e
    raw = OmegaConf.to_container(node, resolve=False)
    if not isinstance(raw, dict):
        raise TypeError("not a mapping")
    seed_keys = tuple(k for k, v in flatten(raw).items()
                      if isinstance(v, str) and _FOLLOWS_SEED.match(v))
    try:
        return OmegaConf.to_container(node, resolve=True), seed_keys
    except OmegaConfBaseException:  # an interpolation only Hydra resolves: compare it as written
        return raw, seed_keys


def load_job(path: Path) -> Job:
    job = Job(path=path, overrides={}, config=None, summary=None)
    problems = []
    hydra = path / ".hydra"
    try:
        if (hydra / "config.yaml").exists():
            job.config, job.seed_keys = _hydra_config(hydra / "config.yaml")
        if (hydra / "overrides.yaml").exists():
            for s in yaml.safe_load((hydra / "overrides.yaml").read_text()) or []:
                key, _, value = str(s).partition("=")
                job.overrides[key.lstrip("+~")] = value
    except (OSError, ValueError, TypeError, RecursionError, yaml.YAMLError) as e:
        problems.append(f".hydra is unreadable: {one_line(e) or type(e).__name__}")
    job.rows_path = path / "rounds.csv" if (path / "rounds.csv").exists() else None
    sp = path / "summary.json"
    job.mtime = (sp if sp.exists() else path).stat().st_mtime
    if sp.exists():
        try:
            job.summary = json.loads(sp.read_text())
            if not isinstance(job.summary, dict):
                raise TypeError("does not hold a JSON object")
            if not isinstance(job.summary.get("final", {}), (dict, type(None))):
                raise TypeError("holds a 'final' that is not an object")
            job.status = str(job.summary.get("status", "completed"))
            if isinstance(job.summary.get("config"), dict):
                job.config = job.summary["config"]
        except (OSError, ValueError, TypeError, RecursionError) as e:
            job.summary = None
            job.status = "corrupt"
            bad = (str(e) if isinstance(e, TypeError) else
                   "is nested too deeply to read" if isinstance(e, RecursionError) else
                   f"is unreadable: {one_line(e)}" if isinstance(e, OSError) else
                   f"is not valid JSON: {one_line(e)}")
            problems.insert(0, f"summary.json {bad}")
    elif (path / "error.json").exists():
        job.status = "failed"
    elif job.rows_path:
        job.status = "incomplete"
    if job.rows_path and job.status in (*FINISHED, "interrupted"):
        job.rounds()
        if job.rounds_problem:
            job.status = "corrupt"
            problems.append(f"rounds.csv: {job.rounds_problem}")
    if job.config is None and not problems:
        problems.append("no configuration recorded (.hydra/config.yaml or summary.json config)")
    if job.config is None and job.status in ("missing", "incomplete"):
        job.status = "corrupt"
    job.reason = "; ".join(problems) or None
    return job


def find_jobs(dirs: list[str | Path]) -> list[Job]:
    """Every job directory (holding ``.hydra/config.yaml`` or ``summary.json``) below ``dirs``,
    once (``fedmoo table sweep sweep/0`` names job 0 twice: it is no repeated seed)."""
    jobs: list[Job] = []
    seen: set[Path] = set()
    for d in dirs:
        d = Path(d)
        if not d.exists():
            raise UserError(f"no such directory: {d}")
        found = ({p.parent.parent for p in d.rglob(".hydra/config.yaml")}
                 | {p.parent for p in d.rglob("summary.json")})
        if not found:
            raise UserError(f"{d} holds no fedmoo run (no .hydra/config.yaml or summary.json "
                            "below it)")
        # not inside another job: trackers keep copies of a run's files in its directory
        # (MLflow's mlartifacts/<id>/artifacts/summary.json), which are not jobs
        for p in sorted(found):
            if not any(a in found for a in p.parents) and (real := p.resolve()) not in seen:
                seen.add(real)
                jobs.append(load_job(p))
        for note in d.rglob(str(SWEEP_NOTE)):
            sweep = note.parent.parent
            total = (sweep_info(sweep) or {}).get("jobs", 0)
            if (have := sum(sweep in p.parents for p in found)) < total:
                log.warning("%s: %d of the sweep's %d jobs have not started (no directory): "
                            "run its command again to finish it", sweep, total - have, total)
    fill_defaults(jobs)
    compare_data_and_builds(jobs)
    return jobs


def fill_defaults(jobs: list[Job]) -> None:
    """Give every job the default (``fedmoo.report.defaults``) of each result key that another
    job's configuration holds and its own lacks (``Job.filled``)."""
    keys = dict.fromkeys(k for j in jobs for k in j.flat if is_result_key(k))
    for j in (j for j in jobs if j.config is not None):
        for k in keys:
            if k not in j.flat and (v := defaults.default(k, j.flat)) is not defaults.MISSING:
                j.filled[k] = v


def _key(identity: dict[str, Any]) -> str:
    return json.dumps(identity, sort_keys=True, default=str)


def compare_data_and_builds(jobs: list[Job]) -> None:
    """A job that records no data digest takes that of its configuration's other jobs when they
    agree on one; then warn once of the configurations their data split (reported apart) and
    once of those whose seeds different fedmoo builds computed (averaged together)."""
    by: dict[str, list[Job]] = {}
    for j in (j for j in jobs if j.config is not None):
        by.setdefault(_key({k: v for k, v in j.identity().items() if k != DATA_KEY}), []).append(j)
    split = 0
    for same in by.values():
        digests = {j.flat[DATA_KEY] for j in same if DATA_KEY in j.flat}
        split += len(digests) > 1
        for j in same if len(digests) == 1 else []:
            j.filled.setdefault(DATA_KEY, *digests)
    if split:
        log.warning("%d configuration(s) split by %s: their jobs were trained on different data "
                    "(another data_dir or changed dataset files; none recorded by older jobs), "
                    "so each is reported apart", split, DATA_KEY)
    builds = [sorted({j.build for j in g.jobs if j.build}) for g in group_jobs(jobs)]
    mixed = [b for b in builds if len(b) > 1]
    if mixed:
        log.warning("%d configuration(s) average seeds computed by different fedmoo builds (%s): "
                    "numerics may differ between builds; rerun them with one build to compare "
                    "like with like", len(mixed), ", ".join(mixed[0]))


def counts(job: Job, include_failed: bool = False) -> bool:
    """Whether a report counts ``job``: completed, or (``--include-failed``) configured at all."""
    return job.status == "completed" or (include_failed and job.config is not None)


def final_metrics(jobs: list[Job]) -> list[str]:
    """The metric names of the jobs' summary.json ``final``, in order of first appearance."""
    return list(dict.fromkeys(str(k) for j in jobs for k in (j.summary or {}).get("final") or {}))


def left_out(jobs: list[Job], groups: list[Group], include_failed: bool = False) -> str:
    """``2 of 6 jobs (1 diverged, 1 failed)``: the jobs a report does not count because of their
    status (repeated seeds aside); ``""`` if none."""
    dropped = {id(j) for g in groups for j in g.dropped}
    out = Counter(j.status for j in jobs if id(j) not in dropped
                  and (j.config is None or not counts(j, include_failed)))
    if not out:
        return ""
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(out.items()))
    return f"{out.total()} of {len(jobs)} jobs ({statuses})"


def skipped_line(jobs: list[Job], groups: list[Group], include_failed: bool = False,
                 verb: str | None = "counts") -> str | None:
    """``left out 2 of 6 jobs (1 diverged, 1 failed): only completed jobs count; ...`` or None
    (``verb``: what ``--include-failed`` does, None for a command without it)."""
    if not (out := left_out(jobs, groups, include_failed)):
        return None
    why = ("they hold no readable configuration" if include_failed else
           "only completed jobs with intact files count" +
           (f"; --include-failed {verb} what they hold" if verb else ""))
    return f"left out {out}: {why}"


@dataclass
class Group:
    """Jobs of one configuration: ``jobs`` holds one per seed, ``dropped`` the other jobs of a
    seed already there (``dropped[i]`` duplicates the seed of ``kept_for[i]``)."""
    jobs: list[Job]
    dropped: list[Job] = field(default_factory=list)
    kept_for: list[Job] = field(default_factory=list)

    def counted(self, include_failed: bool = False) -> list[Job]:
        """The jobs (one per seed) whose results the reports use (``counts``)."""
        return [j for j in self.jobs if counts(j, include_failed)]

    def value(self, key: str) -> str:
        """``key`` of this configuration as text: the jobs' override of it, else its value in
        the config (``algo`` -> ``algo.name``), else ``""``."""
        for j in self.jobs + self.dropped:
            if key in j.overrides:
                return j.overrides[key]
        flat = {**self.jobs[0].flat, **self.jobs[0].filled}
        for k in (key, f"{key}.name"):
            if k in flat:
                return as_text(flat[k])
        return ""


def group_jobs(jobs: list[Job]) -> list[Group]:
    """Jobs grouped by ``Job.identity`` (jobs without a configuration are left out), in order of
    their first job. Of several jobs with the same seed, the group keeps the newest finished one
    (completed or diverged; by summary.json's mtime), else the newest, and drops the others."""
    by_config: dict[str, dict[str, list[Job]]] = {}
    for j in jobs:
        if j.config is not None:
            by_config.setdefault(_key(j.identity()), {}).setdefault(as_text(j.seed), []).append(j)
    groups = []
    for by_seed in by_config.values():
        g = Group(jobs=[])
        for same in by_seed.values():
            same.sort(key=lambda j: (j.status in FINISHED, j.mtime), reverse=True)
            g.jobs.append(same[0])
            g.dropped += same[1:]
            g.kept_for += [same[0]] * (len(same) - 1)
        groups.append(g)
    return groups


def override_keys(groups: list[Group]) -> list[str]:
    """Result keys overridden differently in different configurations, in order of appearance."""
    keys = dict.fromkeys(k for g in groups for j in g.jobs + g.dropped for k in j.overrides
                         if is_result_key(k))
    return [k for k in keys if len({g.value(k) for g in groups}) > 1]


def label_keys(groups: list[Group], primary: list[str] | None = None) -> list[str]:
    """``primary`` (default: ``override_keys``), then the config keys needed to tell the
    configurations apart: ``*.name`` keys first, each added only if it separates configurations
    the keys so far do not (a 50-round and a 3-round run of one sweep get ``rounds``)."""
    keys = list(override_keys(groups) if primary is None else primary)

    def distinct(ks: list[str]) -> int:
        return len({tuple(g.value(k) for k in ks) for g in groups})

    candidates = [k for k in dict.fromkeys(c for g in groups for c in g.jobs[0].identity())
                  if k not in keys]
    candidates.sort(key=lambda k: not k.endswith(".name"))  # stable: config order otherwise
    for k in candidates:
        if distinct(keys) == len(groups):
            break
        if distinct(keys + [k]) > distinct(keys):
            keys.append(k)
    return keys
