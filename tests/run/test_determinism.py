"""The `deterministic` and `tf32` knobs on a CPU (their CUDA effects: tests/cuda), and resuming
checkpoints written before a knob existed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from fedmoo.errors import UserError
from fedmoo.run import identity
from fedmoo.run.loop import run
from fedmoo.run.setup import set_deterministic
from tests.conftest import ROOT, small_cfg
from tests.reliability.helpers import rows_without_time


def test_set_deterministic_turns_torchs_mode_on_and_off_and_gives_cublas_its_workspace(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")      # restored (unset) after the test
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    set_deterministic(True)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    set_deterministic(False)
    assert not torch.are_deterministic_algorithms_enabled()


def test_a_users_cublas_workspace_is_kept(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    set_deterministic(True)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


@pytest.mark.parametrize("key,value", [("deterministic", "yes"), ("tf32", 1)])
def test_a_knob_that_is_not_a_boolean_is_refused(tmp_path, key, value):
    with pytest.raises(UserError, match=f"{key}={value!r} must be true or false"):
        run(small_cfg(**{key: value}), tmp_path)


def test_deterministic_changes_nothing_on_a_cpu_and_is_recorded(tmp_path):
    run(small_cfg(deterministic=True), tmp_path / "on")
    run(small_cfg(deterministic=False), tmp_path / "off")
    assert rows_without_time(tmp_path / "on" / "rounds.csv") == \
        rows_without_time(tmp_path / "off" / "rounds.csv")
    assert json.loads((tmp_path / "on" / "summary.json").read_text())["deterministic"] is True
    assert json.loads((tmp_path / "off" / "summary.json").read_text())["deterministic"] is False


def test_a_checkpoint_from_before_tf32_existed_compares_as_tf32_false():
    old = {"seed": 0, "client": {"lr": 0.1}}
    assert identity.config_diff(old, {**old, "tf32": False}) == ""
    assert identity.config_diff(old, {**old, "tf32": True}) == "tf32: False -> True"


def test_a_run_may_resume_with_deterministic_switched():
    """Deterministic kernels change results by rounding at most, as moving to another GPU does:
    the knob is volatile, like device."""
    cfg = small_cfg()
    assert identity.run_config(dict(cfg, deterministic=True)) == \
        identity.run_config(dict(cfg, deterministic=False))


def test_a_run_without_determinism_does_not_import_dynamo(tmp_path):
    """``torch.use_deterministic_algorithms`` imports torch._dynamo (about 2 s of every run's
    start on a CPU), so it is called only when it changes torch's mode."""
    code = ("import sys; from tests.conftest import small_cfg; from fedmoo.run.loop import run; "
            f"run(small_cfg(rounds=1), {str(tmp_path)!r}); print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
