"""Finding the jobs of runs and sweeps on disk (for ``fedmoo table`` and ``fedmoo plot``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedmoo.errors import UserError

# Overrides that never distinguish configurations of a table (they vary across repetitions or
# only change where/how a job runs).
NOT_A_CONFIG_KEY = ("seed", "hydra.", "data_dir", "progress", "device", "traceback", "debug",
                    "experiment", "resume", "checkpoint_every")


@dataclass
class Job:
    path: Path
    overrides: dict[str, str]
    config: dict[str, Any]
    summary: dict[str, Any] | None
    status: str = "missing"
    rows_path: Path | None = None
    clients_path: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    def metric(self, key: str) -> float | None:
        if not self.summary:
            return None
        v = self.summary.get("final", {}).get(key)
        return None if v is None else float(v)


def _parse_override(s: str) -> tuple[str, str]:
    key, _, value = s.partition("=")
    return key.lstrip("+~"), value


def load_job(path: Path) -> Job:
    hydra_dir = path / ".hydra"
    config = yaml.safe_load((hydra_dir / "config.yaml").read_text()) or {}
    overrides: dict[str, str] = {}
    ov = hydra_dir / "overrides.yaml"
    if ov.exists():
        for s in yaml.safe_load(ov.read_text()) or []:
            k, v = _parse_override(str(s))
            overrides[k] = v
    summary = None
    status = "missing"
    sp = path / "summary.json"
    if sp.exists():
        try:
            summary = json.loads(sp.read_text())
            status = summary.get("status", "completed")
        except json.JSONDecodeError:
            status = "corrupt"
    elif (path / "error.json").exists():
        status = "failed"
    elif (path / "rounds.csv").exists():
        status = "incomplete"
    rows = path / "rounds.csv"
    clients = path / "clients.csv"
    return Job(path=path, overrides=overrides, config=config, summary=summary, status=status,
               rows_path=rows if rows.exists() else None,
               clients_path=clients if clients.exists() else None)


def find_jobs(dirs: list[str | Path]) -> list[Job]:
    """Every job directory (one holding ``.hydra/config.yaml``) below the given directories."""
    jobs: list[Job] = []
    for d in dirs:
        d = Path(d)
        if not d.exists():
            raise UserError(f"no such directory: {d}")
        found = sorted({p.parent.parent for p in d.rglob(".hydra/config.yaml")})
        if not found:
            raise UserError(f"{d} holds no fedmoo run (no .hydra/config.yaml below it)")
        jobs += [load_job(p) for p in found]
    return jobs


def config_keys(jobs: list[Job]) -> list[str]:
    """Override keys whose values differ between jobs (seed and run-location keys excluded)."""
    keys: list[str] = []
    for j in jobs:
        for k in j.overrides:
            if k not in keys and not k.startswith(NOT_A_CONFIG_KEY):
                keys.append(k)
    varying = [k for k in keys if len({j.overrides.get(k) for j in jobs}) > 1]
    return varying


def group_jobs(jobs: list[Job], keys: list[str]) -> dict[tuple, list[Job]]:
    groups: dict[tuple, list[Job]] = {}
    for j in jobs:
        groups.setdefault(tuple(j.overrides.get(k, "") for k in keys), []).append(j)
    return groups
