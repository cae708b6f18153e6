"""scripts/bench.py runs end to end and its --json line has the documented shape (no timing
assertions: speed is checked by running the benchmark, never by a test)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench.py"


def _bench():
    spec = importlib.util.spec_from_file_location("fedmoo_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_json_line(capsys, monkeypatch):
    bench = _bench()
    monkeypatch.setitem(bench.WORKLOADS, "logreg", ({"name": "logreg"}, (7,), 2, False, (40, 30), (5, 4)))
    assert bench.main(["--quick", "--workloads", "logreg", "--reps", "1", "--json",
                       "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    last = json.loads(out.strip().splitlines()[-1])
    assert last["device"].startswith("cpu")
    res = last["workloads"]["logreg"]
    for key in ("b0_round_s", "b1_round_s", "e_round_s", "e_vs_b0", "e_vs_b1", "eval_s",
                "server_fedavg_s", "server_fedmgda_plus_s"):
        assert res[key] > 0, key
    assert res["e_vs_b1"] == pytest.approx(res["b1_round_s"] / res["e_round_s"])
    assert "server step fedmgda_plus" in out and "2000 rounds" in out


def test_unknown_workload_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        _bench().main(["--workloads", "resnet"])
    assert e.value.code == 2
    assert "unknown workload 'resnet'" in capsys.readouterr().err


def test_bench_sweep_splits_the_grouped_time_into_phases(capsys):
    spec = importlib.util.spec_from_file_location("fedmoo_bench_sweep", BENCH.parent / "bench_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--runs", "3", "--rounds", "3", "--together-only", "--json",
                     "--set", "eval_every=1", "--set", "checkpoint_every=1"]) == 0
    out = capsys.readouterr().out           # the grid's base says eval_every=5, bench none
    last = json.loads(out.strip().splitlines()[-1])
    assert last["set"] == ["eval_every=1", "checkpoint_every=1"]
    res = last["results"][0]
    assert res["grouped"] == 3 and len(res["round_s"]) == 3 and res["evals"] == 3
    assert res["round_with_before"] == [True] * 3       # every round writes a row here
    assert res["checkpoints"] == 6          # rounds 1 and 2 of each run (not the last)
    parts = (res["setup_s"] + sum(res["round_s"]) + res["eval_s"] + res["checkpoint_s"]
             + res["server_s"] + res["other_s"])
    assert res["server_s"] > 0
    assert parts == pytest.approx(res["together_s"]) and res["other_s"] >= 0
    assert "together: set-up" in out


def test_gpu_checks_grid_estimate_by_hand():
    spec = importlib.util.spec_from_file_location("fedmoo_gpu_check", BENCH.parent / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = {"setup_s": 10, "other_s": 5, "round_s": [9, 1.5, 2], "server_s": 0.3, "eval_s": 3,
           "round_with_before": [False, False, True], "evals": 1, "checkpoint_s": 2.08,
           "checkpoints": 104, "runs": 104}
    # 10 + 5 once; the first call left out: 200 rounds with a row x 2 s, 1800 without x 1.5 s;
    # 2000 x 0.1 s server steps; 200 evaluations x 3 s; 199 rounds of checkpoints x 104 x 0.02 s
    assert mod.grid_estimate(res) == pytest.approx(15 + 400 + 2700 + 200 + 600 + 199 * 2.08)
    one_kind = {**res, "round_s": [9, 2], "round_with_before": [True, True], "server_s": 0.2}
    assert mod.grid_estimate(one_kind) == pytest.approx(15 + 4000 + 200 + 600 + 199 * 2.08)
    assert mod.grid_estimate({**res, "round_s": [], "round_with_before": []}) is None


def test_bench_startup_loggers_overheads(capsys, monkeypatch):
    """--loggers: the loggers take turns in each repetition; medians and overheads against
    the first, by hand (no process started: the timing of one run is replaced)."""
    spec = importlib.util.spec_from_file_location("fedmoo_bench_startup",
                                                  BENCH.parent / "bench_startup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    made = []
    times = {"none": [(10.0, 5.0), (12.0, 6.0), (11.0, 5.5)],
             "mlflow": [(11.0, 5.0), (13.2, 6.6), (12.1, 6.05)]}

    def one(cmd, cwd):
        name = cmd[-1].split("=")[1]
        made.append(name)
        return times[name][sum(1 for m in made if m == name) - 1]

    monkeypatch.setattr(mod, "one", one)
    monkeypatch.setattr(mod, "round_median", lambda cwd: None)
    monkeypatch.setattr(mod, "fedmoo_command", lambda: ["fedmoo"])
    assert mod.main(["--loggers", "none,mlflow", "--reps", "3"]) == 0
    assert made == ["none", "mlflow"] * 3
    out = capsys.readouterr().out
    # medians: none 11.0 / 5.5 s, mlflow 12.1 / 6.05 s: +10% both
    assert "logger=none: wall median 11.00 s (+0% against logger=none), run median 5.50 s (+0%)" in out
    assert ("logger=mlflow: wall median 12.10 s (+10% against logger=none), run median "
            "6.05 s (+10%)") in out


def test_bench_trackers_prints_both_tensorboard_ways(capsys, monkeypatch):
    """scripts/bench_trackers.py (the figures of docs/PERFORMANCE.md "Trackers") runs; its
    TensorBoard part times both ways twice (no timing is checked)."""
    pytest.importorskip("tensorboard")
    spec = importlib.util.spec_from_file_location(
        "fedmoo_bench_trackers", BENCH.with_name("bench_trackers.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr("sys.argv", ["bench_trackers.py", "--parts", "tensorboard", "--rows", "2"])
    mod.main()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "tensorboard one event a row", "tensorboard add_scalar per value"] * 2
