"""`fedmoo plot` as a reader sees it: the figures are inspected before they are saved."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from fedmoo.report import plots
from fedmoo.report.jobs import find_jobs, group_jobs
from tests.report.test_tables import _job


@pytest.fixture
def figures(monkeypatch):
    """The matplotlib figures ``fedmoo plot`` saves, in order (the files are written too)."""
    from matplotlib.figure import Figure

    saved = []
    real = Figure.savefig

    def keep(fig, *args, **kwargs):
        saved.append(fig)
        return real(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def rounds(values, column="test/acc_mean"):
    return [{"round": i + 1, column: v} for i, v in enumerate(values)]


def test_metric_ranges():
    assert plots.metric_range("round/improved_frac") == (0.0, 1.0)
    assert plots.metric_range("test/acc_worst10") == (0.0, 100.0)
    assert plots.metric_range("train/loss_mean") == (0.0, math.inf)
    assert plots.metric_range("server/lambda_task0") == (0.0, 1.0)
    assert plots.metric_range("server/min_cos") == (-1.0, 1.0)
    assert plots.metric_range("server/custom") == (-math.inf, math.inf)


def test_every_built_in_rule_is_labelled_by_its_name():
    # a legend must not show "FedFV" beside "fedavg": each rule's description starts "Name: "
    from fedmoo.config import hparams

    slugs = [s for g, s in hparams.all_declared() if g == "algo"]
    names = {s: plots.rule_name(s) for s in slugs}
    assert len(slugs) >= 19 and all(names[s] != s for s in slugs), names
    assert plots.rule_name("fedavg") == "FedAvg" and plots.rule_name("qfedavg") == "q-FedAvg"


def test_curves_markers_clipped_bands_and_identical_curves(tmp_path, figures):
    _job(tmp_path, "a0", ["algo=fedavg"], 0, {}, rounds=rounds([0.9, 1.0], "round/improved_frac"))
    _job(tmp_path, "a1", ["algo=fedavg"], 1, {}, rounds=rounds([0.7, 1.0], "round/improved_frac"))
    _job(tmp_path, "b0", ["algo=fedprox", "algo.mu=0"], 0, {},
         rounds=rounds([0.9, 1.0], "round/improved_frac"))
    _job(tmp_path, "b1", ["algo=fedprox", "algo.mu=0"], 1, {},
         rounds=rounds([0.7, 1.0], "round/improved_frac"))
    groups = group_jobs(find_jobs([tmp_path]))
    label = plots.labeller(groups, None)
    assert plots.plot_metric(groups, label, "round/improved_frac", tmp_path / "f.png")
    ax = figures[-1].axes[0]
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == ["FedAvg (n=2)",
                                                "FedProx mu=0 (n=2) = FedAvg"]
    assert lines[0].get_marker() == "o" and lines[1].get_linestyle() != lines[0].get_linestyle()
    assert "same curve" in ax.get_title()
    for band in ax.collections:                  # mean 1.0 +- 0 and 0.8 +- 0.1, never above 1
        ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
        assert ys.max() <= 1.0 and ys.min() >= 0.7 - 1e-9


def test_one_point_is_a_marker_on_whole_rounds(tmp_path, figures):
    _job(tmp_path, "r", ["algo=fedavg"], 0, {}, rounds=rounds([42.0]))
    groups = group_jobs(find_jobs([tmp_path]))
    assert plots.plot_metric(groups, plots.labeller(groups, None), "test/acc_mean",
                             tmp_path / "f.png")
    ax = figures[-1].axes[0]
    line = ax.get_lines()[0]
    assert line.get_marker() == "o" and line.get_markersize() >= 6
    assert ax.get_xlim() == (0.0, 2.0)
    assert all(float(t).is_integer() for t in ax.get_xticks())


def test_log_ticks_read_as_numbers(tmp_path, figures):
    _job(tmp_path, "r", ["algo=fedavg"], 0, {}, rounds=rounds([2.8, 2.0, 1.5], "train/loss_mean"))
    groups = group_jobs(find_jobs([tmp_path]))
    assert plots.plot_metric(groups, plots.labeller(groups, None), "train/loss_mean",
                             tmp_path / "f.png", logy=True)
    ax = figures[-1].axes[0]
    fmt = ax.yaxis.get_major_formatter()
    assert fmt(2.0, 0) == "2" and fmt(0.01, 0) == "0.01"
    assert len([t for t in ax.get_yticks() if 1.5 <= t <= 2.8]) >= 3   # ticks inside the decade


def test_log_axis_without_a_positive_value_stays_linear_and_says_so(tmp_path, figures, caplog):
    _job(tmp_path, "r", ["algo=fedavg"], 0, {}, rounds=rounds([0.0, 0.0], "test/acc_worst5"))
    groups = group_jobs(find_jobs([tmp_path]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # matplotlib's UserWarning once reached stderr
        assert plots.plot_metric(groups, plots.labeller(groups, None), "test/acc_worst5",
                                 tmp_path / "f.png", logy=True)
    assert figures[-1].axes[0].get_yscale() == "linear"
    assert [r.getMessage() for r in caplog.records] == [
        "--logy: test/acc_worst5 has no positive value; its plot keeps a linear axis"]


def test_spec_labels_name_the_curves(tmp_path):
    for name, row in (("0", "k1"), ("1", "k5")):
        _job(tmp_path, name, ["experiment=fmgda/multifashion_demo", "algo=fmgda",
                              f"+row/fmgda/table2={row}"], 0, {})
    jobs = find_jobs([tmp_path])
    assert plots.default_spec(jobs) == "fmgda/multifashion_demo"
    from fedmoo.report.tables import load_spec

    groups = group_jobs(jobs)
    label = plots.labeller(groups, load_spec("fmgda/multifashion_demo"))
    assert sorted(label(g) for g in groups) == ["FMGDA K=1", "FMGDA K=5"]


@pytest.mark.parametrize("tasks", [2, 3])
def test_radar_is_bars_below_three_tasks(tmp_path, figures, tasks):
    row = {"round": 5, **{f"train/task{s}_loss_norm": 0.5 + s / 10 for s in range(tasks)}}
    _job(tmp_path, "r", ["algo=fmgda"], 0, {}, rounds=[row])
    groups = group_jobs(find_jobs([tmp_path]))
    assert plots.plot_radar(groups, plots.labeller(groups, None), plots.RADAR_DEFAULT,
                            tmp_path / "radar.png")
    ax = figures[-1].axes[0]
    assert ax.get_title() == "train/task*_loss_norm at the final round, per task (mean over seeds)"
    if tasks < 3:
        assert ax.name != "polar" and [p.get_height() for p in ax.patches] == [0.5, 0.6]
    else:
        assert ax.name == "polar"


def test_histogram_panels_say_which_are_identical(tmp_path, figures):
    for name, algo in (("a", "fedavg"), ("b", "fedprox")):
        d = _job(tmp_path, name, [f"algo={algo}"], 0, {})
        (d / "clients.csv").write_text("client,accuracy\n0,10\n1,95\n")
    groups = group_jobs(find_jobs([tmp_path]))
    assert plots.plot_client_hist(groups, plots.labeller(groups, None), tmp_path / "h.png")
    titles = [ax.get_title(loc="left") for ax in figures[-1].axes]
    assert titles == ["FedAvg (2 clients, n=1)",
                      "FedProx (2 clients, n=1) = FedAvg"]


def _mixed(tmp_path):
    """One configuration: 3 completed seeds, a diverged one and a killed one (no summary)."""
    for seed in range(5):
        status = {3: "diverged", 4: None}.get(seed, "completed")
        _job(tmp_path, str(seed), ["algo=fedavg"], seed, {"test/acc_mean": 10.0 * seed},
             status=status, rounds=rounds([10.0 * seed, 10.0 * seed + 1]))


def test_plot_and_table_count_the_same_jobs_and_say_what_they_left_out(tmp_path, figures,
                                                                        capsys):
    from fedmoo.cli.main import main

    _mixed(tmp_path)
    assert main(["table", str(tmp_path), "--metric", "test/acc_mean"]) == 0
    out, err = capsys.readouterr()
    assert "| all | 10.00 ± 8.16 | 3 |" in out                     # seeds 0, 1, 2
    assert err.splitlines()[-1] == (
        "fedmoo table: left out 2 of 5 jobs (1 diverged, 1 incomplete): only completed jobs "
        "with intact files count; --include-failed counts what they hold")
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "p"),
                 "--metric", "test/acc_mean"]) == 0
    ax = figures[-1].axes[0]
    assert [ln.get_label() for ln in ax.get_lines()] == ["run (n=3, 2 left out)"]
    assert ax.get_lines()[0].get_ydata().tolist() == [10.0, 11.0]        # mean of seeds 0-2
    assert figures[-1].texts[0].get_text() == (
        "not shown: 2 of 5 jobs (1 diverged, 1 incomplete): only completed jobs are shown "
        "(--include-failed)")
    assert "fedmoo plot: left out 2 of 5 jobs (1 diverged, 1 incomplete)" in capsys.readouterr().err
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "p"),
                 "--metric", "test/acc_mean", "--include-failed"]) == 0
    ax = figures[-1].axes[0]
    assert ax.get_lines()[0].get_label().endswith("(n=5)")
    assert ax.get_lines()[0].get_ydata().tolist() == [20.0, 21.0]
    assert main(["table", str(tmp_path), "--metric", "test/acc_mean", "--include-failed"]) == 0
    out = capsys.readouterr().out
    # the killed job (no summary.json) counts with its last rounds.csv row, 41
    assert "| all | 20.20 ± 14.43 | 5 | 1 diverged (counted); 1 incomplete (counted) |" in out


def test_a_round_written_twice_is_plotted_once_with_its_last_row(tmp_path, figures, capsys):
    from fedmoo.cli.main import main

    d = _job(tmp_path, "0", ["algo=fedavg"], 0, {"test/acc_mean": 30.0})
    (d / "rounds.csv").write_text("round,test/acc_mean\n1,10\n2,20\n3,30\n2,25\n3,35\n")
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "p"),
                 "--metric", "test/acc_mean"]) == 0
    line = figures[-1].axes[0].get_lines()[0]
    assert line.get_xdata().tolist() == [1, 2, 3] and line.get_ydata().tolist() == [10, 25, 35]
    assert capsys.readouterr().err == (
        f"fedmoo plot: {d / 'rounds.csv'}: rounds 2, 3 written more than once (5 rows for 3 "
        "rounds): using the last row of each round\n")


def test_formats_resolution_units_and_a_legend_that_would_cover_a_curve(tmp_path, figures):
    from PIL import Image

    from fedmoo.cli.main import main

    for i, algo in enumerate(("fedavg", "fedprox", "qfedavg", "afl", "fedfv")):
        _job(tmp_path, algo, [f"algo={algo}"], 0, {},
             rounds=rounds([5.0 + 20 * i + (r % 3) * 8 for r in range(12)], "test/acc_std"))  # zig-zags at every height: no room for the legend
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "p"),
                 "--metric", "test/acc_std", "--format", "pdf"]) == 0
    assert (tmp_path / "p" / "test_acc_std.pdf").read_bytes()[:5] == b"%PDF-"
    fig = figures[-1]
    ax = fig.axes[0]
    assert ax.get_ylabel() == "test accuracy (%)\nstd over clients"
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    r = FigureCanvasAgg(fig).get_renderer()
    assert ax.get_legend().get_window_extent(r).x0 > ax.get_window_extent(r).x1   # beside
    assert main(["plot", str(tmp_path / "fedavg"), "--out", str(tmp_path / "q"), "--dpi", "200",
                 "--metric", "test/acc_std"]) == 0
    r = FigureCanvasAgg(figures[-1]).get_renderer()
    ax = figures[-1].axes[0]
    assert ax.get_legend().get_window_extent(r).x1 < ax.get_window_extent(r).x1   # room inside
    w, h = Image.open(tmp_path / "q" / "test_acc_std.png").size
    assert (w, h) == (1400, 900)                                        # 7 x 4.5 in at 200 dpi


def test_report_mistakes_are_one_line(tmp_path, capsys):
    from fedmoo.cli.main import main

    _job(tmp_path, "0", ["algo=fedavg"], 0, {}, rounds=rounds([1.0, 2.0]))
    (tmp_path / "file").write_text("")
    for args, line in (
            (["--out", str(tmp_path / "file")], f"--out {tmp_path / 'file'}: cannot write there ("),
            (["--out", str(tmp_path / "p"), "--metric", "test/acc_maen"],
             "--metric test/acc_maen is not a column of any rounds.csv of the jobs plotted under "
             f"{tmp_path}; did you mean test/acc_mean?"),
            (["--out", str(tmp_path / "p"), "--dpi", "0"], "--dpi 0 is out of range")):
        assert main(["plot", str(tmp_path), *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"fedmoo: error: {line}") and err.count("\n") == 1, err


def test_thirteen_curves_keep_the_specs_order_distinct_colours_and_truetype(tmp_path, figures,
                                                                          monkeypatch, capsys):
    from fedmoo.cli.main import main
    from fedmoo.report import tables

    alphas = [f"0.{i:02d}" for i in range(1, 14)]
    for i, a in enumerate(alphas):
        _job(tmp_path / "runs", str(i), ["algo=fedfv", f"algo.alpha={a}"], 0,
             {"test/acc_mean": 50.0 + i, "test/acc_worst10": 40.0 - i}, rounds=rounds([1.0 + i]))
    spec = tmp_path / "specs" / "demo"
    spec.mkdir(parents=True)
    rows = "".join(f"  '{a}': {{label: FedFV a{a}}}\n" for a in reversed(alphas))
    (spec / "many.yaml").write_text(f"metrics: [test/acc_mean]\nrows:\n{rows}")
    monkeypatch.setattr(tables, "TABLE_DIR", tmp_path / "specs")
    assert main(["plot", str(tmp_path / "runs"), "--out", str(tmp_path / "p"), "--format", "pdf",
                 "--metric", "test/acc_mean", "--spec", "demo/many"]) == 0
    lines = figures[0].axes[0].get_lines()
    assert [ln.get_label() for ln in lines] == [f"FedFV a{a} (n=1)" for a in reversed(alphas)]
    assert len({str(ln.get_color()) for ln in lines}) == 13
    pdf = (tmp_path / "p" / "test_acc_mean.pdf").read_bytes()
    assert b"/Subtype /Type3" not in pdf and b"/CIDFontType2" in pdf   # TrueType glyphs
    assert main(["pareto", str(tmp_path / "runs"), "--spec", "demo/many"]) == 0
    assert "| FedFV a0.13 | 62.00" in capsys.readouterr().out      # the spec's labels, as plot's


def test_a_full_disk_leaves_no_cut_figure_or_table(tmp_path, monkeypatch, capsys):
    """A figure or table that cannot be written whole is not there at all; an older file of that
    name stays as it was (a cut PNG, or an empty table.tex, read as a result)."""
    from matplotlib.figure import Figure

    from fedmoo.cli.main import main

    _job(tmp_path / "runs", "0", ["algo=fedavg"], 0, {"test/acc_mean": 2.0,
                                                      "test/acc_worst10": 1.0},
         rounds=rounds([1.0, 2.0]))
    out = tmp_path / "out"
    out.mkdir()
    (out / "t.tex").write_text("the old table\n")

    def full(fig, f, **kwargs):          # half a figure, then the disk is full
        if isinstance(f, (str, Path)):
            Path(f).write_bytes(b"\x89PNG half")
        else:
            f.write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full)
    assert main(["plot", str(tmp_path / "runs"), "--out", str(out / "p")]) == 2
    assert main(["pareto", str(tmp_path / "runs"), "--out", str(out / "x.png")]) == 2

    def no_sync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("fedmoo.report.results.os.fsync", no_sync)
    assert main(["table", str(tmp_path / "runs"), "--format", "latex", "--out",
                 str(out / "t.tex")]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert sorted(p.name for p in out.rglob("*")) == ["p", "t.tex"]
    assert (out / "t.tex").read_text() == "the old table\n"


def test_radar_without_task_columns_names_the_folders_plainly(tmp_path, figures, capsys):
    from fedmoo.cli.main import main

    _job(tmp_path, "r", ["algo=fedavg"], 0, {}, rounds=rounds([10.0, 20.0]))
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "p"), "--radar"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"fedmoo: error: --radar train/task{{}}_loss_norm: no rounds.csv under {tmp_path} has the "
        "columns train/task0_loss_norm, train/task1_loss_norm, ... (multi-task runs)")
