"""`fedmoo plot` as a reader sees it: the figures are inspected before they are saved."""

from __future__ import annotations

import math

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
    assert [ln.get_label() for ln in lines] == ["algo=fedavg (n=2)",
                                                "algo=fedprox, mu=0 (n=2) = algo=fedavg"]
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
    assert titles == ["algo=fedavg (2 clients, n=1)",
                      "algo=fedprox (2 clients, n=1) = algo=fedavg"]
