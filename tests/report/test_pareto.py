"""The Pareto front and hypervolume of known points, and `fedmoo pareto` on fixture sweeps."""

from __future__ import annotations

import numpy as np

from fedmoo.cli.main import main
from fedmoo.report.pareto import front, hypervolume
from tests.report.test_tables import _job


def test_front_of_known_points():
    pts = np.array([[1, 5], [2, 4], [3, 1], [2, 2], [1, 5], [0, 6], [3, 0.5]])
    # [2,2] is beaten by [2,4]; [3,0.5] by [3,1]; equal points [1,5] are both kept
    assert front(pts).tolist() == [True, True, True, False, True, True, False]


def test_hypervolume_by_hand():
    pts = np.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0], [1.5, 1.5]])
    # staircase above (0, 0): 3*1 + 2*(2-1) + 1*(3-2) = 6; the dominated point adds nothing
    assert hypervolume(pts, (0.0, 0.0)) == 6.0
    assert hypervolume(pts, (1.0, 1.0)) == 1.0   # only (2,2) is above the reference on both axes
    assert hypervolume(pts, (5.0, 0.0)) == 0.0


def test_cli_lists_the_front_with_error_bars(tmp_path, capsys):
    f = {"algo=fedavg": (80.0, 40.0), "algo=qfedavg": (78.0, 50.0), "algo=afl": (75.0, 45.0)}
    for i, (ov, (acc, worst)) in enumerate(f.items()):
        for seed, d in ((0, -1.0), (1, 1.0)):
            _job(tmp_path, f"{i}{seed}", [ov], seed,
                 {"test/acc_mean": acc + d, "test/acc_worst10": worst, "test/acc_std": 10.0 + i})
    out_png = tmp_path / "p" / "front.png"
    assert main(["pareto", str(tmp_path), "--out", str(out_png)]) == 0
    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("| algo=")]
    assert rows[0] == "| algo=fedavg | 80.00 ± 1.00 | 40.00 ± 0.00 | 2 | yes |"
    assert rows[1] == "| algo=qfedavg | 78.00 ± 1.00 | 50.00 ± 0.00 | 2 | yes |"
    assert rows[2] == "| algo=afl | 75.00 ± 1.00 | 45.00 ± 0.00 | 2 |  |"
    # reference = worst x (75) and worst y (40): (80-75)*(40-40) + (78-75)*(50-40) = 30
    assert "above the reference (75, 40): 30" in text
    assert out_png.stat().st_size > 10_000
    # std as the fairness axis, lower is better: fedavg (std 10) dominates the others
    assert main(["pareto", str(tmp_path), "--y", "test/acc_std", "--minimize-y",
                 "--ref", "70", "20"]) == 0
    text = capsys.readouterr().out
    assert "| algo=fedavg | 80.00 ± 1.00 | 10.00 ± 0.00 | 2 | yes |" in text
    assert "| algo=afl | 75.00 ± 1.00 | 12.00 ± 0.00 | 2 |  |" in text
    assert "above the reference (70, 20): 100" in text      # (80-70) * (20-10)


def test_nothing_to_show_is_one_line(tmp_path, capsys):
    _job(tmp_path, "0", ["algo=fedavg"], 0, {"test/acc_mean": 80.0, "test/acc_worst10": 1.0},
         status="diverged")
    assert main(["pareto", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 2   # the left-out note and the error
