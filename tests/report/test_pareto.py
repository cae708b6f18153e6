"""The Pareto front and hypervolume of known points, and `fedmoo pareto` on fixture sweeps."""

from __future__ import annotations

import numpy as np
import pytest

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


def test_hypervolume_of_dominated_tied_and_repeated_points_is_the_fronts():
    """Points a front point dominates, ties on x and repeated points add nothing, in any order
    (the area is the front's alone, summed in the same order: the same float)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        pts = rng.integers(0, 5, size=(8, 2)).astype(float) + rng.choice([0.0, 0.1, 1 / 3], (8, 2))
        on = np.unique(pts[front(pts)], axis=0)
        assert hypervolume(pts, (0.0, 0.0)) == hypervolume(on[np.argsort(-on[:, 0])], (0.0, 0.0))
    assert hypervolume(np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 2.0], [0.5, 2.0]]), (0, 0)) == 2.0


def test_cli_lists_the_front_with_error_bars(tmp_path, capsys):
    f = {"algo=fedavg": (80.0, 40.0), "algo=qfedavg": (78.0, 50.0), "algo=afl": (75.0, 45.0)}
    for i, (ov, (acc, worst)) in enumerate(f.items()):
        for seed, d in ((0, -1.0), (1, 1.0)):
            _job(tmp_path, f"{i}{seed}", [ov], seed,
                 {"test/acc_mean": acc + d, "test/acc_worst10": worst, "test/acc_std": 10.0 + i})
    out_png = tmp_path / "p" / "front.png"
    assert main(["pareto", str(tmp_path), "--out", str(out_png)]) == 0
    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("| ") and "±" in line]
    assert rows[0] == "| FedAvg | 80.00 ± 1.00 | 40.00 ± 0.00 | 2 | yes |"
    assert rows[1] == "| q-FedAvg | 78.00 ± 1.00 | 50.00 ± 0.00 | 2 | yes |"
    assert rows[2] == "| AFL | 75.00 ± 1.00 | 45.00 ± 0.00 | 2 |  |"
    # reference = worst x (75) and worst y (40): (80-75)*(40-40) + (78-75)*(50-40) = 30
    assert "above the reference (75, 40): 30" in text
    assert out_png.stat().st_size > 10_000
    # std as the fairness axis, lower is better: fedavg (std 10) dominates the others
    assert main(["pareto", str(tmp_path), "--y", "test/acc_std", "--minimize-y",
                 "--ref", "70", "20"]) == 0
    text = capsys.readouterr().out
    assert "| FedAvg | 80.00 ± 1.00 | 10.00 ± 0.00 | 2 | yes |" in text
    assert "| AFL | 75.00 ± 1.00 | 12.00 ± 0.00 | 2 |  |" in text
    assert "above the reference (70, 20): 100" in text      # (80-70) * (20-10)


def test_nothing_to_show_is_one_line(tmp_path, capsys):
    _job(tmp_path, "0", ["algo=fedavg"], 0, {"test/acc_mean": 80.0, "test/acc_worst10": 1.0},
         status="diverged")
    assert main(["pareto", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()   # the job left out, the count, the error
    assert err[0] == f"fedmoo pareto: not included: {tmp_path / '0'}: diverged"
    assert err[1].startswith("fedmoo pareto: left out 1 of 1 jobs (1 diverged)")
    assert err[2].startswith("fedmoo: error: no configuration below") and len(err) == 3


def _five(tmp_path, close=True):
    """Five configurations of two sweeps (fedfv's sweep sets algo.beta, the other does not)."""
    pts = {"fedavg": (56.5, 0.0), "fedprox": (56.9, 0.0), "qfedavg": (17.7, 0.0),
           "fedfv": (70.9, 5.1), "afl": (57.2, 0.4)} if close else {
        "fedavg": (50.0, 10.0), "fedfv": (60.0, 5.0)}
    for i, (algo, (acc, worst)) in enumerate(pts.items()):
        ov = [f"algo={algo}"] + (["algo.beta=0.5"] if algo == "fedfv" else [])
        _job(tmp_path, str(i), ov, 0, {"test/acc_mean": acc, "test/acc_worst10": worst})
    return pts


def test_labels_of_crowded_points_never_overlap_nor_leave_the_axes(tmp_path, capsys):
    from matplotlib.figure import Figure

    _five(tmp_path)
    saved = []
    real = Figure.savefig
    Figure.savefig = lambda fig, *a, **k: (saved.append(fig), real(fig, *a, **k))[1]
    try:
        assert main(["pareto", str(tmp_path), "--out", str(tmp_path / "f.svg")]) == 0
    finally:
        Figure.savefig = real
    text = capsys.readouterr().out
    assert "| FedFV beta=0.5 |" in text and "| FedAvg |" in text   # no "beta=" left
    ax = saved[0].axes[0]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    r = FigureCanvasAgg(saved[0]).get_renderer()
    frame = ax.get_window_extent(r)
    notes = [t for t in ax.texts]
    boxes = [t.get_window_extent(r) for t in notes]
    assert sorted(t.get_text() for t in notes) == ["AFL", "FedAvg", "FedFV beta=0.5", "FedProx",
                                                   "q-FedAvg"]
    legend = ax.get_legend().get_window_extent(r)
    for i, a in enumerate(boxes):
        assert not a.overlaps(legend)
        assert frame.x0 <= a.x0 and a.x1 <= frame.x1 and frame.y0 <= a.y0 and a.y1 <= frame.y1
        assert not any(a.overlaps(b) for b in boxes[i + 1:])
    # one configuration on the front: its legend entry is a marker, no line
    front = ax.get_legend().get_lines()[0]
    assert front.get_label() == "Pareto front (one point)" and front.get_linestyle() == "None"
    assert (tmp_path / "f.svg").read_text().startswith("<?xml")


def test_the_reference_point_is_stated_and_a_spec_fixes_it(tmp_path, capsys, monkeypatch):
    from fedmoo.report import tables

    _five(tmp_path, close=False)
    assert main(["pareto", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # worst x 50 and worst y 5: (60-50)*(5-5) + (50-50)*(10-5) = 0 -- it depends on who is shown
    assert "above the reference (50, 5): 0\nreference point: the worst x and worst y of these " \
           "configurations: it moves when configurations are added" in out
    spec = tmp_path / "specs" / "demo"
    spec.mkdir(parents=True)
    (spec / "front.yaml").write_text("metrics: [test/acc_mean]\npareto: {ref: [40, 0]}\n")
    monkeypatch.setattr(tables, "TABLE_DIR", tmp_path / "specs")
    assert main(["pareto", str(tmp_path), "--spec", "demo/front"]) == 0
    # (60-40)*5 + (50-40)*(10-5) = 150
    assert "above the reference (40, 0): 150\nreference point: fixed" in capsys.readouterr().out
    (spec / "front.yaml").write_text("pareto: {ref: [40]}\n")
    assert main(["pareto", str(tmp_path), "--spec", "demo/front"]) == 2
    assert "pareto.ref is [40]; give two numbers [X, Y]" in capsys.readouterr().err


def test_unknown_metrics_and_unwritable_outputs_are_one_line(tmp_path, capsys):
    _five(tmp_path, close=False)
    assert main(["pareto", str(tmp_path), "--y", "test/acc_wrst10"]) == 2
    assert capsys.readouterr().err == (
        f"fedmoo: error: --y test/acc_wrst10 is not a metric of any summary.json under {tmp_path}"
        "; did you mean test/acc_worst10?\n")
    (tmp_path / "file").write_text("")
    assert main(["pareto", str(tmp_path), "--out", str(tmp_path / "file" / "f.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedmoo: error: --out {tmp_path / 'file' / 'f.png'}: cannot write "
                          "there (") and err.count("\n") == 1


def test_points_too_close_to_label_are_numbered_with_a_key_beside(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from fedmoo.report.pareto import plot

    recs = [{"label": f"algo=fedfv alpha={i / 10}", "x": 70.0, "y": 10.0, "x_std": 0.0,
             "y_std": 0.0, "n": 1, "front": i == 0} for i in range(12)]
    assert plot(recs, "test/acc_mean", "test/acc_worst10", False, str(tmp_path / "f.png")) == \
        "numbered"
    assert (tmp_path / "f.png").stat().st_size > 10_000


@pytest.mark.parametrize("args,needle", [
    (["--x", "test/acc_mean", "--y", "test/acc_mean"],
     "--x and --y are both test/acc_mean: a trade-off needs two different metrics"),
    (["--ref", "inf", "inf"], "--ref inf inf: the reference point must be two finite numbers"),
    (["--ref", "40", "nan"], "--ref 40.0 nan: the reference point must be two finite numbers"),
    (["--dpi", "0", "--out", "f.png"], "--dpi 0 is out of range; give 10 to 2400"),   # was a
    (["--dpi", "100000", "--out", "f.png"], "--dpi 100000 is out of range"),   # traceback
])
def test_a_degenerate_trade_off_is_one_line(tmp_path, capsys, args, needle):
    _five(tmp_path, close=False)
    assert main(["pareto", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedmoo: error: {needle}") and err.count("\n") == 1, err


def test_left_out_jobs_are_named_as_table_names_them(tmp_path, capsys):
    # was silent: a diverged seed and a damaged summary.json vanished from the point's mean
    for seed in (0, 1):
        _job(tmp_path, f"a{seed}", ["algo=fedavg"], seed,
             {"test/acc_mean": 80.0 + seed, "test/acc_worst10": 40.0})
    _job(tmp_path, "a2", ["algo=fedavg"], 2, {"test/acc_mean": 10.0}, status="diverged")
    (_job(tmp_path, "a3", ["algo=fedavg"], 3, {}) / "summary.json").write_text("{bad")
    assert main(["pareto", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "| (one configuration) | 80.50 ± 0.50 | 40.00 ± 0.00 | 2 | yes |" in out
    lines = err.splitlines()
    assert f"fedmoo pareto: not included: {tmp_path / 'a2'}: diverged" in lines
    assert any(s.startswith(f"fedmoo pareto: not included: {tmp_path / 'a3'}: corrupt (summary"
                            ".json is not valid JSON") for s in lines)
    assert lines[-1] == ("fedmoo pareto: left out 2 of 4 jobs (1 corrupt, 1 diverged): only "
                         "completed jobs with intact files count")


def test_a_label_with_a_bar_keeps_the_markdown_table_whole():
    from fedmoo.report.pareto import render

    rec = {"label": "a|b", "x": 1.0, "x_std": 0.0, "y": 2.0, "y_std": 0.0, "n": 1, "front": True}
    assert "| a\\|b | 1.00 | 2.00 | 1 | yes |" in render([rec], "x", "y", 0.0, (0, 0))


def test_one_seed_is_its_value_without_a_spread():
    """As `fedmoo table` prints it: `93.84`, not `93.84 ± 0.00` (which reads as seeds agreeing)."""
    from fedmoo.report.pareto import render

    one = {"label": "A", "x": 1.0, "x_std": 0.0, "y": 2.0, "y_std": 0.0, "n": 1, "front": True}
    two = {**one, "label": "B", "x": 0.5, "x_std": 0.25, "n": 2, "front": False}
    assert render([one, two], "x", "y", 0.0, (0, 0)).splitlines()[2:4] == [
        "| A | 1.00 | 2.00 | 1 | yes |", "| B | 0.50 ± 0.25 | 2.00 ± 0.00 | 2 |  |"]
