"""Whole runs through ``fedmoo.run.loop.run``: engine=batched gives the sequential engine's models.

The runs are float64 (``precision=float64``); every round's global model, the last cohort and the
logged metrics must agree.
"""

from __future__ import annotations

import pytest
import torch

from fedmoo.engine.base import LocalSGD
from fedmoo import algorithms
from fedmoo.run import loop, setup
from fedmoo.errors import UserError
from tests.conftest import small_cfg
from tests.engine.helpers import rel

TOL = 1e-10


def _recording_run(monkeypatch, tmp_path, cfg):
    """Run ``cfg`` in float64; return the global model at the start of every round and the rows."""
    cfg = {**cfg, "precision": "float64"}
    build_engine, seen = setup.fengine.build, []

    def build(*a, **k):
        eng = build_engine(*a, **k)
        train = eng.train

        def recorded(ids, w, spec, seed):
            out = train(ids, w, spec, seed)
            seen.append((ids.clone(), w.clone(), out))
            return out

        eng.train = recorded
        return eng

    monkeypatch.setattr(setup.fengine, "build", build)
    result = loop.run(cfg, tmp_path)
    monkeypatch.undo()
    return seen, result.rows


CASES = {
    "logreg": {},
    "mlp_momentum_wd": {"model": {"name": "mlp", "hidden": [12]},
                        "client.momentum": 0.9, "client.weight_decay": 0.001},
    "logreg_full_batch": {"client.batch_size": None, "client.epochs": 2},
    "mlp_local_steps": {"model": {"name": "mlp", "hidden": [8, 8]}, "client.local_steps": 7},
}


def _compare(monkeypatch, tmp_path, overrides):
    seq, rows_s = _recording_run(monkeypatch, tmp_path / "s", small_cfg(engine="sequential", **overrides))
    bat, rows_b = _recording_run(monkeypatch, tmp_path / "b", small_cfg(engine="batched", **overrides))
    assert len(seq) == len(bat) == overrides.get("rounds", 3)
    for (ids_s, w_s, out_s), (ids_b, w_b, out_b) in zip(seq, bat):
        assert ids_s.tolist() == ids_b.tolist()
        assert w_s.dtype == torch.float64
        assert rel(w_b, w_s) < TOL
        assert rel(out_b.deltas, out_s.deltas) < TOL
        assert rel(out_b.loss_after, out_s.loss_after) < TOL
    assert rel(seq[-1][1], seq[0][1]) > 1e-4  # the model moved
    for r_s, r_b in zip(rows_s, rows_b):
        for key, v in r_s.items():
            if not key.startswith("time/"):
                assert r_b[key] == pytest.approx(v, rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("case", sorted(CASES))
def test_runs_agree_fedavg(monkeypatch, tmp_path, case):
    _compare(monkeypatch, tmp_path, {"rounds": 4, **CASES[case]})


ALGOS = {
    "fedprox": {"name": "fedprox", "mu": 0.1},
    "ditto": {"name": "ditto", "lam": 0.5},
    "fedmgda_plus": {"name": "fedmgda_plus", "epsilon": 0.5},
}


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_runs_agree_other_algorithms(monkeypatch, tmp_path, algo):
    if algo not in algorithms.names():
        pytest.skip(f"algo={algo} is not in this checkout; its client side is tested via ClientSpec")
    _compare(monkeypatch, tmp_path, {"algo": ALGOS[algo], "model": {"name": "mlp", "hidden": [6]}})


@pytest.mark.parametrize("engine,needle", [
    ("turbo", "engine='turbo' must be one of: auto, sequential, batched"),   # fedmoo.config.schema
    ({"name": "batched", "fast": True}, "engine.fast is not an option of engine=batched"),
    ({"name": "batched", "compile": "yes"}, "engine.compile='yes' must be true or false"),
    ({"name": "sequential", "compile": True}, "engine.compile is not an option of engine=sequential"),
])
def test_bad_engine_config_is_a_user_error(tmp_path, engine, needle):
    with pytest.raises(UserError, match=needle):
        loop.run(small_cfg(engine=engine), tmp_path)


def test_models_the_batched_engine_cannot_run_are_refused():
    from fedmoo.engine.batched import BatchedEngine
    from tests.engine.helpers import federation

    data = federation([4, 4], (3,), 2)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    with pytest.raises(UserError, match="module '1' is BatchNorm1d"):
        BatchedEngine(model, data, LocalSGD(lr=0.1, batch_size=2))


def test_engine_auto_picks_the_faster_engine_for_the_model_and_device(tmp_path):
    """Issue "fast by default on a CPU": linear models run batched on a CPU too, convolutions and
    LSTMs sequentially; on CUDA every model the batched engine can train runs batched."""
    import json

    from fedmoo.engine import resolve_auto
    from fedmoo.models.cnn import CNNFmnist
    from fedmoo.models.linear import MLP, LogReg
    from fedmoo.models.lstm import LSTMShakespeare

    loop.run(small_cfg(engine="auto", rounds=1), tmp_path)     # logreg on the CPU
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["engine"] == "batched (closed-form softmax regression)"
    assert summary["engine_choice"] == ("auto: on a CPU, linear layers train several times "
                                        "faster batched")
    assert resolve_auto(MLP((4,), 3), "cpu")[0] == "batched"
    assert resolve_auto(LogReg((4,), 3), "cpu")[0] == "batched"
    cnn = CNNFmnist((1, 28, 28), 10)
    assert resolve_auto(cnn, "cpu") == ("sequential", "auto: on a CPU, Conv2d layers "
                                                      "gain nothing from batching clients")
    assert resolve_auto(cnn, "cuda")[0] == "batched"
    assert resolve_auto(LSTMShakespeare((80,), 80), "cpu")[0] == "sequential"
    assert resolve_auto(MLP((4,), 3), "cuda")[0] == "batched"
    bn = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    assert resolve_auto(bn, "cuda")[0] == "sequential"    # running statistics: the reference loop
    with pytest.raises(UserError, match="engine.compile is not an option of engine=auto"):
        loop.run(small_cfg(engine={"name": "auto", "compile": True}), tmp_path / "x")


def test_engine_auto_falls_back_to_sequential_when_the_batched_engine_fails_to_build(
        tmp_path, monkeypatch, caplog):
    """A device error while the batched engine builds (its program runs the model on the device)
    must not end an engine=auto run: the sequential engine runs, with one warning, and
    summary.json says why. engine=batched named by the user still fails."""
    import json

    from fedmoo.engine import batched

    def broken(*a, **k):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(batched, "BatchedEngine", broken)
    result = loop.run(small_cfg(engine="auto", rounds=2), tmp_path / "auto")
    summary = json.loads((tmp_path / "auto" / "summary.json").read_text())
    assert summary["engine"] == "sequential" and len(result.rows) == 2
    assert summary["engine_choice"] == ("auto: the batched engine failed to build (RuntimeError: "
                                        "CUDA error: an illegal memory access was encountered)")
    assert caplog.text.count("the batched engine failed to build") == 1
    with pytest.raises(RuntimeError, match="illegal memory access"):
        loop.run(small_cfg(engine="batched", rounds=1), tmp_path / "batched")


def test_summary_names_the_batched_program(tmp_path):
    import json

    loop.run(small_cfg(engine="batched", rounds=1), tmp_path)            # logreg
    assert json.loads((tmp_path / "summary.json").read_text())["engine"] == \
        "batched (closed-form softmax regression)"
    loop.run(small_cfg(engine={"name": "batched", "program": "lockstep"}, rounds=1),
             tmp_path / "generic")
    assert json.loads((tmp_path / "generic" / "summary.json").read_text())["engine"] == \
        "batched (lockstep program)"


def test_engine_names():
    from fedmoo.engine.batched import BatchedEngine
    from fedmoo.models.linear import MLP
    from tests.engine.helpers import federation

    data, sgd = federation([4, 4], (3,), 2), LocalSGD(lr=0.1, batch_size=2)
    assert BatchedEngine(MLP((3,), 2), data, sgd, program="vmap").name == "batched (vmap program)"
    assert BatchedEngine(MLP((3,), 2), data, sgd).name == "batched (lockstep program)"
