"""User mistakes caught by runner.run itself (no subprocess), and what a re-run may touch."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from fedmoo.run.rundir import record_failure
from fedmoo.errors import UserError
from fedmoo.run.loop import run
from tests.conftest import small_cfg
from tests.conftest import declare_impl


class ImageOnly(nn.Module):
    """A model for 1x28x28 images (like the MNIST CNNs)."""

    def __init__(self, input_shape, num_classes):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 5)
        self.fc = nn.Linear(4 * 24 * 24, num_classes)

    def forward(self, x):
        return self.fc(self.conv(x.view(-1, 1, 28, 28)).flatten(1))


class FiveOutputs(nn.Module):
    def __init__(self, input_shape, num_classes):
        super().__init__()
        self.fc = nn.Linear(input_shape[0], 5)

    def forward(self, x):
        return self.fc(x)


@pytest.mark.parametrize("cls,needle", [
    (ImageOnly, "shape '[-1, 1, 28, 28]' is invalid for input of size 60"),
    (FiveOutputs, "it outputs shape [5] per sample"),
])
def test_model_that_does_not_fit_the_data(tmp_path, monkeypatch, cls, needle):
    declare_impl(monkeypatch, "model", "testnet", f"{__name__}:{cls.__name__}")
    with pytest.raises(UserError) as e:
        run(small_cfg(model={"name": "testnet"}), tmp_path)
    msg = str(e.value)
    assert msg.startswith("model=testnet does not fit data=synthetic (inputs of shape [60], "
                          "10 classes)")
    assert needle in msg and "fedmoo list model" in msg
    assert not (tmp_path / "rounds.csv").exists()


@pytest.mark.parametrize("key,value,needle", [
    ("seed", -1, "seed=-1 must be a non-negative integer"),
    ("eval_every", 0, "eval_every=0 must be a positive integer"),
    ("checkpoint_every", -2, "checkpoint_every=-2 must be a non-negative integer"),
    ("client.momentum", 1.0, "client.momentum=1.0 must be a number in [0.0, 1.0)"),
    ("client.epochs", 0, "client.epochs=0 must be a positive integer"),
    ("client.batch_size", "ten", "client.batch_size='ten' must be a positive integer or null"),
    ("diverge_norm", 0, "diverge_norm=0 must be a number in (0.0, inf)"),
    ("resume", "yes", "resume='yes' must be true or false"),
    ("client.foo", 1, "client.foo is not a setting of client"),
    ("partition", {"name": "iid", "seed": 0, "foo": 1},
     "partition.foo"),  # named whether the partitioner or the runner catches it
])
def test_bad_knobs(tmp_path, key, value, needle):
    cfg = small_cfg(**{key: value})
    with pytest.raises(UserError) as e:
        run(cfg, tmp_path)
    assert needle in str(e.value)


def test_unwritable_run_dir(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(UserError, match=r"output directory .*f/run is not writable"):
        run(small_cfg(), tmp_path / "f" / "run")


def test_rerun_skips_a_completed_run_and_refuses_another_config(tmp_path):
    first = run(small_cfg(resume=True, rounds=2), tmp_path)
    before = (tmp_path / "rounds.csv").stat().st_mtime_ns
    again = run(small_cfg(resume=True, rounds=2, progress=True, device="cpu"), tmp_path)
    assert again.skipped and again.status == "completed" and again.final == first.final
    assert (tmp_path / "rounds.csv").stat().st_mtime_ns == before
    with pytest.raises(UserError, match=r"another configuration \(client.lr: 0.05 -> 0.1\); "
                                        "use another hydra.run.dir"):
        run(small_cfg(resume=True, rounds=2, **{"client.lr": 0.1}), tmp_path)
    fresh = run(small_cfg(resume=False, rounds=3), tmp_path)  # resume=false starts over
    assert not fresh.skipped and [r["round"] for r in fresh.rows] == [1, 2, 3]


def test_a_failed_rerun_never_erases_a_result(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed"}))
    record_failure(tmp_path, "boom", "user")
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "completed"
    (tmp_path / "summary.json").unlink()
    record_failure(tmp_path, "bad value", "internal", "Traceback ...")
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s == {"status": "failed", "message": "bad value", "error": "internal",
                 "traceback": "Traceback ..."}


def test_final_model_is_saved_weights_only(tmp_path):
    res = run(small_cfg(rounds=2), tmp_path)
    sd = torch.load(tmp_path / "model.pt", weights_only=True)
    assert set(sd) == {"linear.weight", "linear.bias"} and sd["linear.weight"].shape == (10, 60)
    assert res.status == "completed" and not (tmp_path / "checkpoint.pt").exists()
