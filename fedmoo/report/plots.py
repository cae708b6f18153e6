"""``fedmoo plot``: curves over rounds (mean ± band over seeds), client-accuracy histograms and,
for multi-task runs, the final per-task values (``--radar``: a radar chart, bars below 3 tasks).

One curve per configuration of the jobs ``fedmoo table`` counts (``fedmoo.report.jobs``), labelled
like its rows (``labeller``); the jobs left out are counted in the legend and under the figure,
damaged files are warned about on stderr (``check_jobs``). Figures are PNG, PDF or SVG. The
axes name metrics in words and units (``axis_label``, for ``fedmoo pareto`` too).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pandas as pd

from fedmoo.errors import Parser, UserError
from fedmoo.report import tables
from fedmoo.report.jobs import (Group, Job, as_text, counts, find_jobs, group_jobs, label_keys,
                                left_out, skipped_line)
from fedmoo.report.results import one_line, save_figure
from fedmoo.report.checks import check_dpi, require_known, writing

log = logging.getLogger(__name__)

MARKERS_UP_TO = 30          # rounds on a curve up to which every point gets a marker
# (pattern, low, high) of a metric's possible values; the first match wins.
RANGES = [(r"improved_frac$", 0.0, 1.0),
          (r"/acc_(mean|pooled|worst\d+|best\d+|p\d+|client\d+|std)$", 0.0, 100.0),
          (r"task\d+_acc_mean$|/task\d+_acc", 0.0, 100.0),
          (r"lambda_task\d+$", 0.0, 1.0),
          (r"min_cos$", -1.0, 1.0),
          (r"(^|/|_)(loss|norm)|_var$|_kl$|_std$|_angle$|harmed$|tasks_present$|^time/", 0.0,
           np.inf)]

# What a metric column (``split/name_stat``, docs/architecture.md) is, in words and units, for the
# axes of figures: ``test/acc_worst10`` -> ``test accuracy (%), worst 10% of clients``; a name not
# known here is shown as it is.
SPLITS = {"test": "test", "val": "validation", "train": "training", "benign": "benign clients'",
          "attackers": "attackers'"}
QUANTITIES = {"acc": ("accuracy", "%"), "loss": ("loss", "")}
WHOLE = {
    "round/improved_frac": "share of the cohort whose training loss did not rise",
    "time/round_s": "time per round (s)",
    "time/elapsed_s": "elapsed time (s)",
    "server/d_norm": "norm of the server's update direction",
    "server/d_norm_sq": "squared norm of the server's update direction",
    "server/min_cos": "least cosine between a client's update and the server's",
    "server/harmed": "clients whose update the server's direction opposes",
    "train/lambda_grad_norm_sq": "squared norm of the λ-weighted full gradient",
}
# A statistic over the clients (a regular expression) -> its words; UNITS: how it changes the unit
STATS = {"mean": "mean over clients", "std": "std over clients", "var": "variance over clients",
         "pooled": "pooled over all test samples", "angle": "angle to the uniform vector",
         "kl": "KL divergence from uniform", r"(worst|best)(\d+)": "{0} {1}% of clients",
         r"p(\d+)": "{0}th percentile of clients", r"client(\d+)": "client {0}"}
UNITS = {"var": lambda u: f"{u}²" if u else "", "angle": lambda u: "°", "kl": lambda u: ""}


def _stat(stat: str, unit: str) -> tuple[str, str]:
    """(words, unit) of a statistic over the clients; the unit may change (variance: unit²)."""
    for pattern, words in STATS.items():
        if m := re.fullmatch(pattern, stat):
            return words.format(*m.groups()), UNITS.get(stat, lambda u: u)(unit)
    return stat, unit


def axis_label(metric: str) -> str:
    """``metric`` in words with its unit: ``test accuracy (%), mean over clients``."""
    if metric in WHOLE:
        return WHOLE[metric]
    split, _, name = metric.partition("/")
    if split in SPLITS and (m := re.fullmatch(r"(acc|loss)_(\w+)", name)):
        what, unit = QUANTITIES[m.group(1)]
        stat, unit = _stat(m.group(2), unit)
        return f"{SPLITS[split]} {what}" + (f" ({unit})" if unit else "") + f", {stat}"
    if split in SPLITS and (m := re.fullmatch(r"task(\d+)_(acc|loss)(?:_(\w+))?", name)):
        what, unit = QUANTITIES[m.group(2)]
        stat = f", {m.group(3)}" if m.group(3) else ""
        return f"{SPLITS[split]} task {m.group(1)} {what}{stat}" + (f" ({unit})" if unit else "")
    return metric


def _warn(msg: str) -> None:
    log.warning("%s", msg, extra={"prefix": "fedmoo plot: "})


def pyplot():
    """matplotlib's pyplot, headless, writing TrueType fonts into PDF and PS: venues refuse the
    Type 3 fonts that are matplotlib's default."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"pdf.fonttype": 42, "ps.fonttype": 42})
    import matplotlib.pyplot as plt

    return plt


def rule_name(slug: str) -> str:
    """The algorithm's own name, from its declaration (``FedFV: project away ...`` -> ``FedFV``);
    the slug when the description does not start with one."""
    from fedmoo.config import hparams

    d = hparams.declared("algo", slug)
    name, sep, _ = (d.description if d else "").partition(": ")
    return name if sep and " " not in name else slug


def _label(keys, g: Group, fallback: str = "run") -> str:
    """``FedFV alpha=0.5``: when the rule or its hyperparameters differ, the rule's name, then
    ``key=value`` of the other keys the configuration sets (``algo.name`` as ``algo``, other
    dotted keys by their last part)."""
    rule = g.value("algo.name") if any(k.split(".")[0] == "algo" for k in keys) else ""
    parts = [rule_name(rule)] if rule else []
    for k in keys:
        if k not in ("algo", "algo.name") and g.value(k) != "":
            short = k[: -len(".name")] if k.endswith(".name") else k.split(".")[-1]
            parts.append(f"{short}={g.value(k)}")
    return " ".join(parts) or fallback


def metric_range(metric: str) -> tuple[float, float]:
    """The values ``metric`` can take (``-inf, inf`` when unknown)."""
    for pattern, lo, hi in RANGES:
        if re.search(pattern, metric):
            return lo, hi
    return -np.inf, np.inf


def default_spec(jobs: list[Job]) -> str | None:
    """The table spec named like the jobs' common ``experiment`` override, if there is one."""
    names = {j.overrides.get("experiment") for j in jobs if j.config is not None}
    name = names.pop() if len(names) == 1 else None
    return name if name and (tables.TABLE_DIR / f"{name}.yaml").is_file() else None


def labeller(groups: list[Group], spec: dict | None, fallback: str = "run"):
    """``label(group)``: the spec's row label (as ``fedmoo table`` prints it) where it has one,
    else ``_label``. Sorts ``groups`` in the spec's row order (the others after them)."""
    if not spec or not spec.get("rows"):
        keys = label_keys(groups)
        return lambda g: _label(keys, g, fallback)
    primary, keys = tables.table_keys(groups, spec)
    rows = {id(g): tables._row(spec["rows"], primary, keys, {k: g.value(k) for k in keys})
            for g in groups}
    groups.sort(key=lambda g: rows[id(g)][1])

    def label(g: Group) -> str:
        text, order, _ = rows[id(g)]
        return text if order < 10**6 else _label(keys, g, fallback)

    return label


def check_jobs(jobs: list[Job], groups: list[Group], include_failed: bool = False) -> None:
    """Warn about every job that is left out or plotted in part; reads each rounds.csv once."""
    for j in jobs:
        if j.config is None:
            _warn(f"skipped {j.path}: {j.status} ({j.reason})")
    for g in groups:
        for d, k in zip(g.dropped, g.kept_for):
            _warn(f"not plotted: {d.path}: repeats seed {as_text(d.seed)} of {k.path}")
        for j in g.jobs:
            if not counts(j, include_failed):
                _warn(f"not plotted: {j.path}: {j.status}" + (f" ({j.reason})" if j.reason else ""))
                continue
            frame = j.rounds()
            if j.rounds_problem:
                _warn(f"{j.rows_path}: {j.rounds_problem}; plotting its {len(frame)} whole rows")
            elif j.status == "corrupt" and j.rows_path:
                _warn(f"{j.path}: {j.reason}; plotting its rounds.csv")
            if j.rounds_note:
                _warn(f"{j.rows_path}: {j.rounds_note}")
    if line := skipped_line(jobs, groups, include_failed, verb="plots"):
        _warn(line)


def _finish(fig, out: Path, dpi: int, note: str = "") -> None:
    """Save ``fig`` with ``note`` (the jobs left out) along its bottom edge."""
    if note:
        fig.text(0.01, 0.005, note, fontsize=7, color="0.3", ha="left", va="bottom")
        fig.tight_layout(rect=(0, 0.035, 1, 1))
    else:
        fig.tight_layout()
    save_figure(fig, out, dpi=dpi)
    pyplot().close(fig)


def _curves(group: Group, metric: str, include_failed: bool = False):
    series = []
    for j in group.counted(include_failed):
        df = j.rounds()
        if metric in df.columns and "round" in df.columns:
            series.append(df.set_index("round")[metric].astype(float))
    if not series:
        return None
    frame = pd.concat(series, axis=1)
    return (frame.index.to_numpy(), frame.mean(axis=1).to_numpy(),
            frame.std(axis=1, ddof=0).to_numpy(), len(series))


def _styles(i: int, n: int = 10) -> dict:
    """Colour and line style of the i-th of ``n`` curves: matplotlib's ten colours, beyond ten
    curves tab20's twenty (dark tones, then light ones), then the same with other dashes."""
    import matplotlib

    k = 10 if n <= 10 else 20
    j = i % k
    color = f"C{j}" if k == 10 else matplotlib.colormaps["tab20"](2 * j if j < 10 else 2 * j - 19)
    return {"color": color, "linestyle": ["-", "--", ":", "-."][(i // k) % 4]}


def log_axis(ax) -> None:
    """A logarithmic y axis whose ticks read as plain numbers (0.01, 0.5, 2), never 2x10^0: the
    decades when the data span many, else a few evenly spaced values."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter, NullLocator

    ax.set_yscale("log")
    low, high = ax.get_ylim()
    if high / max(low, 1e-300) < 20:
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6))
        ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.4g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def covers(ax, legend) -> bool:
    """Whether ``legend`` (inside ``ax``) lies over a curve or band: any point of a line,
    sampled along its segments, or of a band's outline, inside the legend's box."""
    fig = ax.figure
    fig.canvas.draw()
    box = legend.get_window_extent()
    pts = []
    for line in ax.get_lines():
        xy = ax.transData.transform(np.asarray(line.get_xydata(), dtype=float))
        xy = xy[np.isfinite(xy).all(1)]
        if len(xy) > 1:          # 20 points along each segment: a line may cross between points
            t = np.linspace(0, 1, 20)[:, None, None]
            xy = (xy[:-1][None] * (1 - t) + xy[1:][None] * t).reshape(-1, 2)
        pts.append(xy)
    for band in ax.collections:
        for path in band.get_paths():
            pts.append(ax.transData.transform(path.vertices))
    if not pts:
        return False
    xy = np.concatenate(pts)
    return bool(((xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1)
                 & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)).any())


def place_legend(ax, fontsize: float = 8, title: str | None = None) -> None:
    """The legend where matplotlib finds room inside the axes, else beside them (the figure
    grows by the legend's width)."""
    opts = {"fontsize": fontsize, "title": title, "title_fontsize": fontsize}
    legend = ax.legend(loc="best", **opts)
    if not covers(ax, legend):
        return
    legend.remove()
    fig = ax.figure
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **opts)
    fig.canvas.draw()
    width = legend.get_window_extent().width / fig.dpi
    w, h = fig.get_size_inches()
    fig.set_size_inches(w + width + 0.2, h)


def plot_metric(groups, label, metric: str, out: Path, logy: bool = False,
                include_failed: bool = False, dpi: int = 120, note: str = "") -> bool:
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn: list[tuple[np.ndarray, np.ndarray, str]] = []
    lo, hi = metric_range(metric)
    for group in groups:
        c = _curves(group, metric, include_failed)
        if c is None:
            continue
        x, m, s, n = c
        missing = len(group.jobs) - len(group.counted(include_failed))
        name = f"{label(group)} (n={n}" + (f", {missing} left out)" if missing else ")")
        style = _styles(len(drawn), len(groups))
        same = next((lab for x0, m0, lab in drawn if len(x0) == len(x) and np.array_equal(x0, x)
                     and np.allclose(m0, m, rtol=1e-9, atol=1e-12, equal_nan=True)), None)
        if same is not None:          # would hide under the earlier curve: dashed, and said so
            style["linestyle"] = (0, (4, 3))
            name += f" = {same.rsplit(' (n=', 1)[0]}"
        marker = {} if len(x) > MARKERS_UP_TO else \
            {"marker": "o", "markersize": 3.5 if len(x) > 1 else 7}
        ax.plot(x, m, label=name, linewidth=1.6, **style, **marker)
        if n > 1:
            ax.fill_between(x, np.clip(m - s, lo, hi), np.clip(m + s, lo, hi),
                            color=style["color"], alpha=0.15, linewidth=0)
        drawn.append((x, m, name))
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel("round")
    ax.set_ylabel(axis_label(metric).replace(", ", "\n", 1), fontsize=9)
    rounds = np.concatenate([x for x, _, _ in drawn])
    if rounds.max() - rounds.min() < 2:        # one or two rounds: whole-number ticks around them
        ax.set_xlim(rounds.min() - 1, rounds.max() + 1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if logy and not any((m > 0).any() for _, m, _ in drawn):
        _warn(f"--logy: {metric} has no positive value; its plot keeps a linear axis")
        logy = False
    if logy:
        log_axis(ax)
    elif hi == 1.0 and lo == 0.0:
        ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.3)
    place_legend(ax, title="mean ± std over seeds" if any("(n=1" not in lab for _, _, lab in drawn)
                 else None)
    if any(" = " in lab for _, _, lab in drawn):
        ax.set_title("dashed: the same curve as the one its legend names after '='", fontsize=8)
    _finish(fig, out, dpi, note)
    return True


def _client_accuracies(job: Job):
    """The ``accuracy`` column of clients.csv (None, with a warning, if it cannot be read)."""
    path = job.path / "clients.csv"
    if not path.exists():
        return None
    try:
        return pd.read_csv(path)["accuracy"].astype(float).to_numpy()
    except KeyError:
        _warn(f"{path} has no accuracy column; left out")
    except (OSError, ValueError) as e:
        _warn(f"{path} is unreadable ({one_line(e)}); left out")
    return None


PANELS_UP_TO = 12           # configurations up to which the histogram is one panel each


def plot_client_hist(groups, label, out: Path, include_failed: bool = False, dpi: int = 120,
                     note: str = "") -> bool:
    """The clients' final test accuracies, pooled over seeds, as the share of clients per
    5-point bin: one panel per configuration, or outlines in one panel beyond PANELS_UP_TO."""
    plt = pyplot()

    data = []
    for group in groups:
        accs = [a for a in (_client_accuracies(j) for j in group.counted(include_failed))
                if a is not None]
        if accs:
            data.append((label(group), np.clip(np.concatenate(accs), 0, 100), len(accs)))
    if not data:
        return False
    bins = np.linspace(0, 100, 21)
    counts = [np.histogram(a, bins)[0] * 100 / len(a) for _, a, _ in data]
    names = []
    for i, (name, accs, n) in enumerate(data):
        text = f"{name} ({len(accs) // n} clients, n={n})"
        same = next((names[j] for j in range(i) if np.array_equal(counts[j], counts[i])), None)
        names.append(text + (f" = {same.rsplit(' (', 1)[0]}" if same else ""))
    panels = len(data) <= PANELS_UP_TO
    fig, axes = plt.subplots(len(data) if panels else 1, 1, sharex=True, sharey=True,
                             figsize=(7, 1.0 + 1.45 * len(data) if panels else 4.5),
                             squeeze=False)
    for i, (name, c) in enumerate(zip(names, counts)):
        ax = axes[i, 0] if panels else axes[0, 0]
        style = _styles(i, len(data))
        if panels:
            ax.stairs(c, bins, fill=True, color=style["color"], alpha=0.6)
            ax.set_title(name, fontsize=8, loc="left", pad=3)
        else:
            ax.stairs(c, bins, color=style["color"], linestyle=style["linestyle"],
                      linewidth=1.6, label=name)
        ax.grid(alpha=0.3)
        ax.set_xlim(0, 100)
    axes[-1, 0].set_xlabel("final test accuracy of a client (%)")
    fig.supylabel("clients (%)", fontsize=10)
    if not panels:
        place_legend(axes[0, 0], fontsize=7)
    _finish(fig, out, dpi, note)
    return True


RADAR_DEFAULT = "train/task{}_loss_norm"


def _final_tasks(job: Job, pattern: str) -> list[float]:
    """``pattern.format(s)`` for s = 0, 1, ... from the job's last rounds.csv row (until missing)."""
    df = job.rounds()
    if df.empty:
        return []
    last = df.iloc[-1]
    vals = []
    while pattern.format(len(vals)) in last.index:
        vals.append(float(last[pattern.format(len(vals))]))
    return vals


def plot_radar(groups, label, pattern: str, out: Path, include_failed: bool = False,
               dpi: int = 120, note: str = "") -> bool:
    """The final per-task values (mean over seeds) of each configuration on a radar chart, or
    as grouped bars below 3 tasks (a radar of 2 axes is a line)."""
    plt = pyplot()

    series = []
    for group in groups:
        per_job = [v for v in (_final_tasks(j, pattern) for j in group.counted(include_failed))
                   if v]
        if per_job and len({len(v) for v in per_job}) == 1:
            series.append((f"{label(group)} (n={len(per_job)})", np.mean(per_job, axis=0),
                           group.jobs))
    if not series or len({len(m) for _, m, _ in series}) != 1:
        return False
    n = len(series[0][1])
    names = (series[0][2][0].summary or {}).get("tasks") or [f"task {s}" for s in range(n)]
    what = pattern.replace("{}", "*")          # train/task*_loss_norm: one value per task
    title = f"{what} at the final round, per task (mean over seeds)"
    if n < 3:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        width = 0.8 / len(series)
        for i, (name, m, _) in enumerate(series):
            ax.bar(np.arange(n) + (i - (len(series) - 1) / 2) * width, m, width, label=name,
                   color=_styles(i, len(series))["color"], hatch=["", "//", "..", "xx"][(i // 10) % 4])
        ax.set_xticks(np.arange(n))
        ax.set_xticklabels(names[:n])
        ax.set_ylabel(what)
        ax.grid(alpha=0.3, axis="y")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08),
                  ncol=min(3, len(series)))
    else:
        angles = np.linspace(0, 2 * np.pi, n, endpoint=False)
        fig, ax = plt.subplots(figsize=(6.5, 7.5), subplot_kw={"projection": "polar"})
        for i, (name, m, _) in enumerate(series):
            ax.plot(np.append(angles, angles[0]), np.append(m, m[0]), marker="o", markersize=3,
                    label=name, **_styles(i, len(series)))
        ax.set_xticks(angles)
        ax.set_xticklabels(names[:n], fontsize=8 if n <= 10 else 6)
        ax.set_title(title, fontsize=9, pad=18)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=2)
    _finish(fig, out, dpi, note)
    return True


def main(argv: list[str]) -> int:
    p = Parser(prog="fedmoo plot",
                                description="Plot metrics over rounds for runs and sweeps.")
    p.add_argument("dirs", nargs="+", help="sweep or run directories (searched recursively)")
    p.add_argument("--metric", action="append", help="rounds.csv column (repeatable; default "
                   "test/acc_mean and test/acc_std, plus round/improved_frac when logged)")
    p.add_argument("--out", required=True, help="directory for the figures")
    p.add_argument("--format", default="png", choices=("png", "pdf", "svg"),
                   help="file format of the figures (default png; pdf and svg are vector)")
    p.add_argument("--dpi", type=int, default=120, help="resolution of PNG figures (default 120)")
    p.add_argument("--logy", action="store_true", help="logarithmic y axis for the curves")
    p.add_argument("--include-failed", action="store_true", help="also plot jobs that did not "
                   "complete (diverged, killed, failed, damaged files): the rows they wrote")
    p.add_argument("--spec", help="table spec whose row labels name the curves, e.g. "
                   "fmgda/multifashion_demo (default: the jobs' experiment, when it has one)")
    p.add_argument("--radar", nargs="?", const=RADAR_DEFAULT, metavar="PATTERN",
                   help="multi-task runs: radar chart of the final per-task values of PATTERN "
                   f"(a rounds.csv column with {{}} for the task index; default {RADAR_DEFAULT})")
    ns = p.parse_args(argv)
    check_dpi(ns.dpi)
    jobs = find_jobs(ns.dirs)
    groups = group_jobs(jobs)
    check_jobs(jobs, groups, ns.include_failed)
    spec_name = ns.spec or default_spec(jobs)
    label = labeller(groups, tables.load_spec(spec_name) if spec_name else None)
    out = Path(ns.out)
    with writing("--out", out):
        out.mkdir(parents=True, exist_ok=True)
    metrics = ns.metric or ["test/acc_mean", "test/acc_std", "round/improved_frac"]
    if ns.metric:
        known = columns(groups, ns.include_failed)
        for m in ns.metric:
            if m not in known and not ns.include_failed and m in columns(groups, True):
                raise UserError(f"--metric {m}: only jobs that did not complete have it; "
                                "--include-failed plots them")
            require_known("--metric", [m], known, "a column of any rounds.csv of the jobs "
                          f"plotted under {' '.join(ns.dirs)}")
    # the line under every figure that counts the jobs it does not show
    note = left_out(jobs, groups, ns.include_failed)
    if note:
        note = f"not shown: {note}" + ("" if ns.include_failed else
                                       ": only completed jobs are shown (--include-failed)")
    opts = {"include_failed": ns.include_failed, "dpi": ns.dpi, "note": note}
    ext = f".{ns.format}"
    written = []
    with writing("--out", out):
        for m in metrics:
            f = out / (m.replace("/", "_") + ext)
            if plot_metric(groups, label, m, f, ns.logy, **opts):
                written.append(f)
        f = out / f"client_accuracy_hist{ext}"
        if plot_client_hist(groups, label, f, **opts):
            written.append(f)
        if ns.radar:
            f = out / f"radar{ext}"
            if not plot_radar(groups, label, ns.radar, f, **opts):
                raise UserError(f"--radar {ns.radar}: no rounds.csv under {' '.join(ns.dirs)} has "
                                f"the columns {ns.radar.format(0)}, {ns.radar.format(1)}, ... "
                                "(multi-task runs)")
            written.append(f)
    if not written:
        raise UserError(f"nothing to plot under {' '.join(ns.dirs)}: no completed job wrote "
                        "rounds.csv rows" + ("" if ns.include_failed else
                                             " (--include-failed plots the others)"))
    for f in written:
        print(f"wrote {f}")
    return 0


def columns(groups: list[Group], include_failed: bool = False) -> list[str]:
    """The rounds.csv columns of the jobs a plot shows, in order of first appearance."""
    return list(dict.fromkeys(str(c) for g in groups for j in g.counted(include_failed)
                              for c in j.rounds().columns))
