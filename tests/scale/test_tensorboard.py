"""logger=tensorboard mirrors every numeric rounds.csv column as a TensorBoard scalar."""

from __future__ import annotations

import csv

import pytest

from fedmoo.errors import UserError
from fedmoo.run.loop import run
from tests.conftest import small_cfg

pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install -e '.[tensorboard]')")


def _scalars(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_events_match_rounds_csv(tmp_path):
    run(small_cfg(logger="tensorboard", rounds=3, eval_every=2), tmp_path)
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    with open(tmp_path / "rounds.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["round"]) for r in rows] == [2, 3]
    scalars = _scalars(tmp_path / "tensorboard")
    numeric = [k for k in rows[0] if k != "round"]
    per_round = {k for k in scalars if not k.startswith("final/")}   # final/: the hparams' metrics
    assert per_round == set(numeric)
    assert "final/test/acc_mean" in scalars
    for tag in ("test/acc_mean", "test/acc_std", "test/acc_worst10", "train/loss_mean",
                "server/d_norm", "time/round_s"):
        assert tag in scalars
    for tag in numeric:
        assert [s for s, _ in scalars[tag]] == [2, 3]
        assert [v for _, v in scalars[tag]] == pytest.approx([float(r[tag]) for r in rows],
                                                              rel=1e-6, abs=1e-6)


def test_logger_none_writes_no_events_and_bad_logger_is_user_error(tmp_path):
    run(small_cfg(logger="none", rounds=1), tmp_path / "a")
    assert not (tmp_path / "a" / "tensorboard").exists()
    with pytest.raises(UserError, match="logger='comet' must be one of: none, tensorboard, "
                                        "mlflow, wandb, or a list of them"):
        run(small_cfg(logger="comet", rounds=1), tmp_path / "b")
