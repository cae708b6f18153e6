"""The run directory's lifecycle: one class that knows every file a run keeps there.

A run holds the directory's lock for its whole life (a second process is refused, naming the
holder), resumes from and saves checkpoints of its own configuration only, and finishes with
summary.json (always last, atomically). Hydra writes ``.hydra/`` even for a run fedmoo then
refuses, so an accepted run keeps a copy in ``.fedmoo/hydra/``, which a refused run puts back
(``restore_record``): the config record always belongs to the result beside it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
from pathlib import Path
from typing import Any

import torch

from fedmoo.errors import DivergenceError, UserError
from fedmoo.report.results import (atomic_write_text, csv_text, read_summary, to_jsonable,
                                   write_json)
from fedmoo.run import checkpoint, identity, locks
from fedmoo.data.federated import tensors_digest

log = logging.getLogger(__name__)
# Files a run writes; ``resume=false`` deletes them before starting over.
RESULT_FILES = ("summary.json", "rounds.csv", "clients.csv", "model.pt", checkpoint.FILENAME,
                "partition.npz", "attack.json")
FINISHED = ("completed", "diverged")
LOCK = ".fedmoo/run.lock"              # held for the run's whole life
RECORD = ".fedmoo/hydra"               # the accepted copy of Hydra's files
HYDRA_FILES = ("config.yaml", "overrides.yaml")


class RunDirBusy(UserError):
    """Another process holds the run directory: nothing there may be touched."""


class RunDir:
    def __init__(self, path: str | Path, cfg: dict[str, Any],
                 record: dict[str, str] | None = None):
        self.path = Path(path)
        self.cfg = cfg
        self.record = record or {}   # Hydra file name -> text, for the accepted run
        self.info: dict[str, Any] = {}   # the run's description, repeated in every summary
        self.resumed_from = 0
        self.data_digest: str | None = None   # what the run trains on (write_federation)
        self.source_digest: str | None = None  # the samples it was federated from
        self.accepted = False
        self._lock: locks.HeldLock | None = None

    def __enter__(self) -> RunDir:
        try:
            (self.path / ".fedmoo").mkdir(parents=True, exist_ok=True)
            probe = self.path / ".fedmoo-write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise UserError(f"output directory {self.path} is not writable ({e.strerror or e}); "
                            "set hydra.run.dir (or hydra.sweep.dir) to a writable path") from None
        self._lock = locks.try_lock(self.path / LOCK)
        if self._lock is None:
            raise RunDirBusy(
                f"{self.path} is in use by another fedmoo run ({locks.holder(self.path / LOCK)}); "
                "wait for it to end or stop it, or give this run another hydra.run.dir "
                "(hydra.sweep.dir for -m)")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None and not self.accepted:
                restore_record(self.path)
        finally:
            self._lock.release()

    def accept(self) -> None:
        """The run goes ahead here: its Hydra files become the directory's config record."""
        self.accepted = True
        if not self.record:
            return
        for folder in (self.path / ".hydra", self.path / RECORD):
            folder.mkdir(parents=True, exist_ok=True)
            for name, text in self.record.items():
                atomic_write_text(folder / name, text)

    def open(self, resume: bool) -> dict[str, Any] | None:
        """Make the directory usable; with ``resume``, the summary of this run's completed
        result if it is already here (a diverged one raises its DivergenceError again); without,
        discard whatever an earlier run left."""
        if not resume:
            for name in RESULT_FILES:
                (self.path / name).unlink(missing_ok=True)
            shutil.rmtree(self.path / RECORD, ignore_errors=True)
            return None
        summary = read_summary(self.path / "summary.json")
        if summary is None or summary.get("status") not in FINISHED:
            return None
        self.check_same_config(summary.get("config") or {}, summary["status"], as_json=True)
        if summary["status"] == "diverged":
            raise DivergenceError(f"{summary.get('message')} (recorded by an earlier run in "
                                  f"{self.path}; resume=false runs it again)")
        from fedmoo.report.jobs import load_job

        if (job := load_job(self.path)).status == "corrupt":   # as `fedmoo table` would say
            log.warning("%s: %s; running it again", self.path, job.reason)
            return self.open(resume=False)
        return summary

    def check_same_config(self, old: dict[str, Any], what: str, as_json: bool = False) -> None:
        """Never mix two runs in one directory: ``old`` (read back from JSON with ``as_json``)
        must be this run's configuration."""
        new = identity.run_config(self.cfg)
        diff = identity.config_diff(old, to_jsonable(new) if as_json else new)
        if diff:
            raise UserError(f"{self.path} already holds a {what} run of another configuration "
                            f"({diff}); use another hydra.run.dir / hydra.sweep.dir, or "
                            "resume=false to discard it")

    def write_federation(self, attack, federation) -> None:
        write_json(self.path / "attack.json", attack.describe())
        federation.save_partition(self.path / "partition.npz")
        self.data_digest = federation.digest()
        # the data's own identity, for the reports: the samples and labels, not the partition,
        # which follows the seed in most recipes (seeds of one configuration share it)
        self.source_digest = (federation.source_digest
                              or tensors_digest(federation.x, federation.y))

    def resume(self, state, device: torch.device) -> tuple[Any, list[dict[str, Any]], float]:
        """(state, rows so far, compute seconds so far) from this run's checkpoint, if any; the
        RNG states are restored too. ``state``: the run's initial state, the template the
        checkpoint must fit (``checkpoint.check``) before any of it is used."""
        ckpt = checkpoint.load(self.path, device)
        if ckpt is None:
            return state, [], 0.0
        checkpoint.check(ckpt, self.path / checkpoint.FILENAME, state, self.data_digest,
                         int(self.cfg["rounds"]), int(self.cfg["eval_every"]),
                         lambda config: self.check_same_config(config, "checkpointed"))
        state = dataclasses.replace(state, **ckpt["state"])   # its fields checked above
        checkpoint.set_rng_state(ckpt["rng"])
        self.resumed_from = int(state.round)
        return state, ckpt["rows"], float(ckpt["elapsed_s"])

    def save_checkpoint(self, state, rows: list[dict[str, Any]], elapsed: float) -> Path:
        return checkpoint.save(self.path, state, rows, self.cfg, elapsed, self.data_digest)

    def interrupted(self, stop, state, rows: list[dict[str, Any]], final: dict[str, Any],
                    elapsed: float) -> str:
        """Checkpoint and record ``status: interrupted``; returns what to tell the user."""
        path = self.save_checkpoint(state, rows, elapsed)
        msg = (f"stopped by {stop.name} after round {int(state.round)}; checkpoint saved to "
               f"{path}; to continue, run the same command again in the same directory "
               "(hydra.run.dir, or hydra.sweep.dir for -m)")
        self.summary("interrupted", state, final, elapsed, msg)
        return msg

    def summary(self, status: str, state, final: dict[str, Any], wall: float,
                message: str | None = None) -> None:
        write_json(self.path / "summary.json", {
            "status": status,
            "message": message,
            "rounds_completed": int(state.round),
            "resumed_from": self.resumed_from,
            "data_digest": self.source_digest,   # the reports never average runs on other data
            "final": final,
            "wall_time_s": wall,
            **self.info,
            "config": identity.run_config(self.cfg),
        })

    def complete(self, state, final: dict[str, Any], wall: float,
                 clients: list[dict[str, Any]], model: torch.nn.Module) -> None:
        """clients.csv and model.pt, then summary.json; the checkpoint is no longer needed."""
        atomic_write_text(self.path / "clients.csv",
                          csv_text(list(clients[0]) if clients else [], clients))
        checkpoint.atomic_torch_save({k: v.detach().cpu() for k, v in model.state_dict().items()},
                                     self.path / "model.pt")
        self.summary("completed", state, final, wall)
        (self.path / checkpoint.FILENAME).unlink(missing_ok=True)


def restore_record(run_dir: Path) -> None:
    """Put the accepted run's Hydra files back over those Hydra wrote for a refused run (no-op
    where no run was ever accepted)."""
    src, dst = Path(run_dir) / RECORD, Path(run_dir) / ".hydra"
    if not src.is_dir() or not dst.is_dir():
        return
    for name in HYDRA_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, dst / name)


def record_failure(run_dir: Path, message: str, error: str, trace: str | None = None) -> None:
    """Write ``status: failed`` to summary.json, unless it holds a finished or interrupted run
    (a bad re-run must not erase a good result). Best effort: the directory may be unwritable."""
    old = read_summary(Path(run_dir) / "summary.json")
    if old is not None and old.get("status") != "failed":
        return
    out = {"status": "failed", "message": message, "error": error}
    if trace:
        out["traceback"] = trace
    with contextlib.suppress(OSError):
        write_json(Path(run_dir) / "summary.json", out)
