"""A resume is the run it claims to be: a checkpoint is checked whole against the run (its
data, its state's fields and shapes, RNG states, round and rows) before anything is used."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from fedmoo.errors import UserError
from fedmoo.run import checkpoint
from fedmoo.run.loop import run
from fedmoo.run.setup import git_commit
from tests.conftest import ROOT, crash_in_round, small_cfg
from tests.data.conftest import write_mnist_family
from tests.inprocess import run_main
from tests.reliability.helpers import rows_without_time, wait_rows

AFL = {"name": "afl", "gamma_lambda": 0.1, "eta": 1.0, "average_iterates": True}


def _cut(cfg, run_dir, monkeypatch, n: int = 5) -> None:
    with monkeypatch.context() as m:
        crash_in_round(m, n)
        with pytest.raises(RuntimeError, match="node lost"):
            run(cfg, run_dir)
    assert checkpoint.load(run_dir, torch.device("cpu"))["round"] == n - 1


def _mnist_dirs(tmp_path):
    """Two copies of one tiny MNIST: the same images, the second with other labels."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_mnist_family(a / "MNIST" / "raw", n_train=(4, 4, 4), n_test=(2, 2, 2))
    write_mnist_family(b / "MNIST" / "raw", n_train=(4, 4, 4), n_test=(2, 2, 2))
    labels = b / "MNIST" / "raw" / "train-labels-idx1-ubyte"
    raw = bytearray(labels.read_bytes())
    raw[8:] = bytes((v + 1) % 3 for v in raw[8:])      # header: 8 bytes
    labels.write_bytes(bytes(raw))
    return a, b


def _mnist_cfg():
    return dict(small_cfg(rounds=6, checkpoint_every=2, num_clients=3, clients_per_round=2,
                          data={"name": "mnist", "input_shape": [1, 28, 28], "num_classes": 10,
                                "normalize": "unit", "download": False},
                          partition={"name": "iid", "seed": 0}), resume=True)


def test_resume_on_other_data_is_refused_and_on_the_same_data_is_exact(tmp_path, monkeypatch):
    a, b = _mnist_dirs(tmp_path)
    cfg = _mnist_cfg()
    full = run(dict(cfg, data_dir=str(a)), tmp_path / "full")
    _cut(dict(cfg, data_dir=str(a)), tmp_path / "cut", monkeypatch)
    with pytest.raises(UserError, match="trained on other data .* resume=false"):
        run(dict(cfg, data_dir=str(b)), tmp_path / "cut")
    ckpt = checkpoint.load(tmp_path / "cut", torch.device("cpu"))
    assert ckpt["round"] == 4
    res = run(dict(cfg, data_dir=str(a)), tmp_path / "cut")   # the data it was trained on
    assert res.resumed_from == 4 and res.status == "completed"
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    # for the reports: the samples' digest, not the partition's (which follows the seed)
    assert len(summary["data_digest"]) == 64 and summary["data_digest"] != ckpt["data"]
    assert summary["versions"].get("fedmoo_git") == git_commit()
    assert rows_without_time(tmp_path / "cut" / "rounds.csv") == \
        rows_without_time(full.run_dir / "rounds.csv")


def test_data_rewritten_in_place_with_its_mtime_is_other_data(tmp_path, monkeypatch):
    """``cp -p`` of relabelled files over the run's own: same path, size and mtime, so only the
    data cache's content key lets the resume see other data."""
    a, b = _mnist_dirs(tmp_path)
    cfg = dict(_mnist_cfg(), data_dir=str(a))
    _cut(cfg, tmp_path / "cut", monkeypatch)
    labels = a / "MNIST" / "raw" / "train-labels-idx1-ubyte"
    st = labels.stat()
    labels.write_bytes((b / "MNIST" / "raw" / labels.name).read_bytes())
    os.utime(labels, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(UserError, match="trained on other data"):
        run(cfg, tmp_path / "cut")


def _damage(ckpt: dict, how: str) -> None:
    st = ckpt["state"]
    if how == "no-data":            # written by the previous version
        del ckpt["data"]
    elif how == "unknown-field":
        ckpt["notes"] = "x"
    elif how == "missing-state-field":
        del st["lam"]
    elif how == "no-weights":
        del st["w"]
    elif how == "unknown-state-field":
        st["velocity"] = torch.zeros(3)
    elif how == "short-weights":
        st["w"] = st["w"][:-1].clone()
    elif how == "wrong-dtype":
        st["lam"] = st["lam"].float()
    elif how == "nan-weights":
        st["w"] = st["w"].clone()
        st["w"][0] = float("nan")
    elif how == "rng-without-numpy":
        del ckpt["rng"]["numpy"]
    elif how == "short-numpy-rng":
        ckpt["rng"]["numpy"] = (ckpt["rng"]["numpy"][0], ckpt["rng"]["numpy"][1][:10],
                                *ckpt["rng"]["numpy"][2:])
    elif how == "forged-round":
        ckpt["round"] = 5
    elif how == "forged-rounds":    # both round numbers: the rows give it away
        ckpt["round"] = st["round"] = 5
    elif how == "round-past-end":
        ckpt["round"] = st["round"] = 99
    elif how == "negative-elapsed":
        ckpt["elapsed_s"] = -1.0
    elif how == "old-format":
        ckpt["format"] = 1
    elif how == "text-in-row":      # would be written to rounds.csv as it is
        ckpt["rows"][1]["test/acc_mean"] = "81.2\n5,junk"
    elif how == "inf-in-row":
        ckpt["rows"][2]["train/loss_mean"] = float("inf")
    elif how == "float-round":
        ckpt["rows"][0]["round"] = 1.0
    elif how == "lost-column":
        del ckpt["rows"][3]["test/acc_std"]
    elif how == "odd-column":
        ckpt["rows"][0]["a\nb"] = 1.0


DAMAGE = [
    ("no-data", "no field 'data' .* another fedmoo version"),
    ("unknown-field", "unknown field 'notes'"),
    ("missing-state-field", "no state field 'lam' of AFLState"),
    ("no-weights", "no state field 'w' of AFLState"),
    ("unknown-state-field", "unknown state field 'velocity'"),
    ("short-weights", r"state.w is a torch.float32 tensor of shape \[609\] .* shape \[610\]"),
    ("wrong-dtype", r"state.lam is a torch.float32 tensor .* torch.float64"),
    ("nan-weights", "weights state.w are not finite"),
    ("rng-without-numpy", "no RNG state 'numpy'"),
    ("short-numpy-rng", r"rng.numpy\[1\] is a torch.int64 tensor of shape \[10\]"),
    ("forged-round", "round 5 differs from its state's round 4"),
    ("forged-rounds", r"rows are of rounds \[1, 2, 3, 4\] where round 5"),
    ("round-past-end", r"round 99 is not a round of this run \(0..6\)"),
    ("negative-elapsed", "elapsed_s=-1.0"),
    ("old-format", "another fedmoo version .format 1; this one reads format 2"),
    ("text-in-row", r"row 2 holds '81.2\\n5,junk' in column 'test/acc_mean', not a finite number"),
    ("inf-in-row", "row 3 holds inf in column 'train/loss_mean', not a finite number or NaN"),
    ("float-round", "row 1 holds 1.0 in column 'round', not an integer"),
    ("lost-column", "row 4 has no column 'test/acc_std', which row 3 has"),
    ("odd-column", r"row 1 has a column named 'a\\nb'"),
]


@pytest.fixture(scope="module")
def cut_afl(tmp_path_factory):
    """An AFL run (state: w, round, lam, w_avg) cut after its checkpoint of round 4."""
    root = tmp_path_factory.mktemp("cut")
    cfg = dict(small_cfg(rounds=6, checkpoint_every=2, clients_per_round=None, algo=AFL),
               resume=True)
    mp = pytest.MonkeyPatch()
    try:
        _cut(cfg, root / "run", mp)
    finally:
        mp.undo()
    return cfg, root / "run"


@pytest.mark.parametrize("how,needle", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_a_checkpoint_that_does_not_fit_is_refused_by_name(tmp_path, cut_afl, how, needle):
    cfg, src = cut_afl
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for f in ("checkpoint.pt", "rounds.csv", "summary.json"):
        if (src / f).exists():
            (run_dir / f).write_bytes((src / f).read_bytes())
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    _damage(ckpt, how)
    torch.save(ckpt, run_dir / "checkpoint.pt")
    before = (run_dir / "checkpoint.pt").read_bytes()
    with pytest.raises(UserError, match=needle) as e:
        run(cfg, run_dir)
    assert "resume=false" in str(e.value) and "\n" not in str(e.value)
    assert (run_dir / "checkpoint.pt").read_bytes() == before   # nothing used, nothing lost
    assert not (run_dir / "model.pt").exists()


def test_the_undamaged_checkpoint_resumes(cut_afl, tmp_path):
    cfg, src = cut_afl
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoint.pt").write_bytes((src / "checkpoint.pt").read_bytes())
    assert run(cfg, run_dir).resumed_from == 4


def test_the_cli_refuses_a_damaged_checkpoint_in_one_line_exit_2(tmp_path, monkeypatch):
    args = ["run", "rounds=4", "checkpoint_every=2", "num_clients=6", "clients_per_round=3",
            "data.max_samples=100", "progress=false", "hydra.run.dir=run"]
    with monkeypatch.context() as m:       # a run that dies in round 3, after checkpoint 2
        crash_in_round(m, 3)
        with pytest.raises(RuntimeError, match="node lost"):   # a bug: its traceback
            run_main(args, tmp_path)
    path = tmp_path / "run" / "checkpoint.pt"
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["round"] == 2
    ckpt["state"]["w"] = ckpt["state"]["w"][:3].clone()
    torch.save(ckpt, path)
    r = run_main(args, tmp_path)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "state.w is a torch.float32 tensor of shape [3]" in lines[0], lines


@pytest.mark.slow
def test_a_killed_run_resumed_on_relabelled_data_is_refused(tmp_path):
    """The issue's case, two processes: a run SIGKILLed after its checkpoint of round 6 is
    started again on a copy of the dataset with other labels: refused in one line, exit 2, and
    nothing recorded as completed."""
    a, b = _mnist_dirs(tmp_path)
    args = ["run", "data=mnist", "data.download=false", "data.normalize=unit", "model=logreg",
            "partition=iid", "num_clients=3", "clients_per_round=2", "rounds=4000",
            "checkpoint_every=6", "progress=false", "hydra.run.dir=run"]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "fedmoo", *args, f"data_dir={a}"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait_rows(tmp_path / "run" / "rounds.csv", 8, proc)      # past the checkpoint of round 6
    proc.kill()
    proc.communicate(timeout=60)
    assert checkpoint.load(tmp_path / "run", torch.device("cpu"))["round"] >= 6
    r = run_main([*args, f"data_dir={b}"], tmp_path)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "trained on other data" in lines[0], lines
    path = tmp_path / "run" / "summary.json"
    assert not path.exists() or json.loads(path.read_text())["status"] != "completed"


def _algo_names():
    from fedmoo.cli.groups import group_options

    slow = ("fmgda", "fsmgda")     # MultiMNIST's LeNet with per-task training: 20 s each
    return [pytest.param(n, marks=pytest.mark.slow) if n in slow else n
            for n in group_options("algo")]


@pytest.mark.parametrize("name", _algo_names())
def test_every_algorithms_checkpoint_fits_its_own_run(tmp_path, monkeypatch, name):
    """After real rounds (states filled in, e.g. FMGDA's lambda), each algorithm's checkpoint
    passes the check and the resumed run ends as the uninterrupted one."""
    from fedmoo.cli.config import compose

    args = [f"algo={name}", "num_clients=6", "clients_per_round=null", "data.max_samples=60",
            "rounds=4", "checkpoint_every=2", "progress=false", "device=cpu"]
    if name in ("fmgda", "fsmgda"):           # multi-task data: MultiMNIST of a tiny MNIST
        write_mnist_family(tmp_path / "d" / "MNIST" / "raw", n_train=(6,) * 10, n_test=(2,) * 10)
        args = [a for a in args if not a.startswith("data.")] + [
            "data=multimnist", "data.download=false", f"data_dir={tmp_path / 'd'}"]
    cfg = compose(args)
    try:
        full = run(cfg, tmp_path / "full")
    except UserError as e:
        pytest.skip(f"algo={name} does not run on this small federation: {e}")
    _cut(cfg, tmp_path / "cut", monkeypatch, n=3)
    res = run(cfg, tmp_path / "cut")
    assert res.resumed_from == 2
    assert rows_without_time(tmp_path / "cut" / "rounds.csv") == \
        rows_without_time(full.run_dir / "rounds.csv")
