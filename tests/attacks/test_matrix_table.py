"""`fedmoo table --spec` with a pivot: one metric as an algorithm x attack matrix (real job layout)."""

from __future__ import annotations

import pytest

from fedmoo.errors import UserError
from fedmoo.report.jobs import find_jobs, group_jobs, label_keys
from fedmoo.report.tables import build_table, load_spec, main, pivot, render
from tests.report.test_tables import _job

ROW = "+row/robustness/matrix"


@pytest.fixture
def matrix(tmp_path):
    n = 0
    for algo, accs in (("fedavg", (90.0, 40.0)), ("krum", (85.0, 84.0))):
        for attack, acc in zip(("none", "sign_flip"), accs):
            for seed, jitter in ((0, -1.0), (1, 1.0)):
                _job(tmp_path, str(n), [f"{ROW}={algo}", f"attack={attack}"], seed,
                     {"benign/acc_mean": acc + jitter, "benign/acc_worst10": acc - 10})
                n += 1
    _job(tmp_path, str(n), [f"{ROW}=fedfv", "attack=none"], 0, {"benign/acc_mean": 88.0})
    _job(tmp_path, str(n + 1), [f"{ROW}=fedfv", "attack=sign_flip"], 0, {}, status="diverged")
    return tmp_path


def test_pivot_lays_one_metric_out_by_attack(matrix):
    jobs = find_jobs([matrix])
    keys = label_keys(group_jobs(jobs))
    spec = load_spec("robustness/matrix")
    recs, _ = build_table(jobs, spec)
    rows, new_spec, row_keys = pivot(recs, spec, keys)
    assert row_keys == ["row/robustness/matrix"]
    assert [r["_label"] for r in rows] == ["FedAvg", "FedFV", "Krum (f=4)"]  # the spec's row order
    fedavg = rows[0]
    assert fedavg["none/mean"] == 90.0 and fedavg["none/std"] == 1.0 and fedavg["sign_flip/mean"] == 40.0
    assert [m["key"] for m in new_spec["metrics"]][:4] == ["none", "bias", "loss_scaling", "sign_flip"]
    assert new_spec["metrics"][-1]["key"] == "zero_update"
    md = render(rows, new_spec, "md", row_keys)
    assert "| FedAvg | 90.00 | — | — | 40.00 | — | — | — | 2 |" in md
    assert "| FedFV | 88.00 | — | — | diverged | — | — | — | 1 |" in md


def test_pivot_cli_with_another_metric_and_a_bad_key(matrix, tmp_path, capsys):
    out = tmp_path / "m.md"
    assert main([str(matrix), "--spec", "robustness/matrix", "--metric", "benign/acc_worst10",
                 "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("**benign/acc_worst10 by attack**")
    assert "| Krum (f=4) | 75.00 | — | — | 74.00 | — | — | — | 2 |" in text
    with pytest.raises(UserError, match="pivot.columns='algo'"):
        pivot([], {"pivot": {"columns": "algo"}, "metrics": [{"key": "x"}]}, ["attack"])
