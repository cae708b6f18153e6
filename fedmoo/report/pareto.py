"""``fedmoo pareto DIR...``: the accuracy-fairness trade-off of runs and sweeps.

Every configuration (jobs grouped as ``fedmoo table`` groups them, one job per seed) is a point:
x = a utility metric (default ``test/acc_mean``), y = a fairness metric (default
``test/acc_worst10``; ``--minimize-y`` for one where lower is fairer, such as ``test/acc_std``),
each the mean over the configuration's completed seeds, with their standard deviation as error
bars. The configurations no other one beats on both axes (the Pareto front) are joined and listed,
with the hypervolume they dominate above a reference point. By default that point is the worst x
and the worst y of the configurations shown, so the number changes when configurations are added;
``--ref X Y``, or ``pareto: {ref: [X, Y]}`` in a table spec (``--spec``), fixes it for a paper.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from fedmoo.config.knobs import number
from fedmoo.errors import Parser, UserError
from fedmoo.report.checks import check_dpi, check_figure, require_known, writing
from fedmoo.report.jobs import final_metrics, find_jobs, group_jobs, skipped_line
from fedmoo.report.plots import axis_label, labeller, metric_range, pyplot
from fedmoo.report.results import save_figure
from fedmoo.report.tables import MD_ESCAPES, load_spec, problems

log = logging.getLogger(__name__)

USAGE = ("fedmoo pareto DIR... [--x METRIC] [--y METRIC] [--minimize-y] [--ref X Y] "
         "[--spec NAME] [--out FILE.png|pdf|svg] [--dpi N]")


def front(points: np.ndarray) -> np.ndarray:
    """Mask of the non-dominated rows of ``points [n, 2]`` (both coordinates maximised): a point
    is dominated when another is at least as good on both and better on one. Equal points are
    both on the front."""
    p = np.asarray(points, dtype=float)
    ge = (p[None, :, :] >= p[:, None, :]).all(-1)        # ge[i, j]: j at least as good as i
    gt = (p[None, :, :] > p[:, None, :]).any(-1)
    return ~(ge & gt).any(1)


def hypervolume(points: np.ndarray, ref: tuple[float, float]) -> float:
    """Area dominated by ``points [n, 2]`` (maximised) and bounded below by ``ref``: the union of
    the rectangles [ref_x, x] x [ref_y, y]. Points not above ``ref`` on both axes add nothing."""
    p = np.asarray(points, dtype=float)
    p = p[(p[:, 0] > ref[0]) & (p[:, 1] > ref[1])]
    p = p[np.lexsort((-p[:, 1], -p[:, 0]))]   # x descending (ties: y descending): a dominated
    area, y_done = 0.0, ref[1]                # point comes after one that dominates it, adds 0
    for x, y in p:
        if y > y_done:
            area += (x - ref[0]) * (y - y_done)
            y_done = y
    return float(area)


def points(dirs: list[str], x: str, y: str, spec: dict | None = None) -> list[dict]:
    """One record per configuration with completed seeds: label (as ``fedmoo plot`` labels its
    curve), x/y means and stds, n."""
    jobs = find_jobs(dirs)
    groups = group_jobs(jobs)
    known = final_metrics(jobs)
    where = f"a metric of any summary.json under {' '.join(dirs)}"
    require_known("--x", [x], known, where)
    require_known("--y", [y], known, where)
    label_of = labeller(groups, spec, fallback="(one configuration)")
    out = []
    for g in groups:
        pairs = [(a, b) for a, b in ((j.metric(x), j.metric(y)) for j in g.counted())
                 if a is not None and b is not None and np.isfinite(a) and np.isfinite(b)]
        label = label_of(g)
        if not pairs:
            if g.counted():           # (jobs not counted are named below)
                log.warning("%s: no completed seed reports %s and %s; left out", label, x, y,
                            extra={"prefix": "fedmoo pareto: "})
            continue
        a = np.array(pairs)
        out.append({"label": label, "x": a[:, 0].mean(), "x_std": a[:, 0].std(),
                    "y": a[:, 1].mean(), "y_std": a[:, 1].std(), "n": len(a)})
    lines = [f"not included: {p}" for p in problems(jobs, groups)]     # as fedmoo table's
    for line in [*lines, skipped_line(jobs, groups, verb=None)]:
        if line:
            log.warning("%s", line, extra={"prefix": "fedmoo pareto: "})
    return out


def render(recs: list[dict], x: str, y: str, hv: float, ref: tuple[float, float],
           fixed: bool = True) -> str:
    lines = [f"| configuration | {x} | {y} | seeds | front |", "|---|---|---|---|---|"]
    for r in sorted(recs, key=lambda r: (not r["front"], -r["x"])):
        x_text, y_text = (f"{r[k]:.2f}" + (f" ± {r[k + '_std']:.2f}" if r["n"] > 1 else "")
                          for k in ("x", "y"))    # one seed: its value, no spread (fedmoo table)
        lines.append(f"| {r['label'].translate(MD_ESCAPES)} | {x_text} | {y_text} | {r['n']} | "
                     f"{'yes' if r['front'] else ''} |")
    lines.append(f"\nhypervolume of the front above the reference ({ref[0]:.4g}, {ref[1]:.4g}): "
                 f"{hv:.4g}\nreference point: " + ("fixed" if fixed else "the worst x and worst y "
                 "of these configurations: it moves when configurations are added; fix it with "
                 "--ref X Y or the spec's pareto.ref"))
    return "\n".join(lines)


# Offsets (points) and alignments tried for a label, nearest first.
OFFSETS = [(6, 6, "left", "bottom"), (6, -6, "left", "top"), (-6, 6, "right", "bottom"),
           (-6, -6, "right", "top"), (0, 10, "center", "bottom"), (0, -10, "center", "top"),
           (12, 0, "left", "center"), (-12, 0, "right", "center"),
           (10, 18, "left", "bottom"), (-10, -18, "right", "top")]


# Labels sit on a faint white box, above the error bars they may cross.
PAPER = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.75}


def _annotate(ax, text: str, r: dict, front: bool, fits) -> Any:
    """``text`` at point ``r``, at the first of OFFSETS whose box ``fits(box, last)`` (``last``:
    the last offset): (box, text), or (None, None) when none fits."""
    renderer = ax.figure.canvas.get_renderer()
    for dx, dy, ha, va in OFFSETS:
        t = ax.annotate(text, (r["x"], r["y"]), textcoords="offset points", xytext=(dx, dy),
                        ha=ha, va=va, fontsize=7, zorder=5, bbox=PAPER,
                        color="black" if front else "0.35")
        box = t.get_window_extent(renderer)
        if fits(box, (dx, dy) == OFFSETS[-1][:2]):
            return box, t
        t.remove()
    return None, None


def place_labels(ax, recs: list[dict]) -> str:
    """Label every point next to it, inside the axes and clear of other labels, points and the
    legend; where some label finds no such place, number the points instead and list the labels
    beside the axes. Returns ``"beside"`` or ``"numbered"``."""
    from matplotlib.transforms import Bbox

    ax.figure.canvas.draw()
    frame = ax.get_window_extent()
    centres = ax.transData.transform([[r["x"], r["y"]] for r in recs])
    dots = [Bbox.from_extents(cx - 5, cy - 5, cx + 5, cy + 5) for cx, cy in centres]
    legend = ax.get_legend()
    placed: list[Any] = [legend.get_window_extent()] if legend is not None else []
    texts = []
    for i, r in enumerate(recs):
        box, t = _annotate(ax, r["label"], r, r["front"], lambda box, _: (
            frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
            and not any(box.fully_overlaps(o) for o in placed + dots[:i] + dots[i + 1:])))
        if box is None:
            for t in texts:
                t.remove()
            return _numbered(ax, recs)
        placed.append(box)
        texts.append(t)
    return "beside"


def _numbered(ax, recs: list[dict]) -> str:
    """Numbers at the points (points within a few pixels of each other share one note,
    ``1,4,7``) and a key of ``number  label`` to the right of the axes."""
    px = ax.transData.transform([[r["x"], r["y"]] for r in recs])
    spots: list[tuple[Any, list[int]]] = []
    for i, p in enumerate(px):
        near = next((s for s in spots if abs(s[0][0] - p[0]) < 12 and abs(s[0][1] - p[1]) < 8),
                    None)
        if near is None:
            spots.append((p, [i]))
        else:
            near[1].append(i)
    notes: list[Any] = []
    for _, members in spots:             # each at the first place clear of the other notes
        notes.append(_annotate(ax, ",".join(str(i + 1) for i in members), recs[members[0]],
                               any(recs[i]["front"] for i in members),
                               lambda box, last: last or not any(box.fully_overlaps(o)
                                                                 for o in notes))[0])
    key = "\n".join(f"{i}  {r['label']}" for i, r in enumerate(recs, 1))
    ax.text(1.03, 1.0, key, transform=ax.transAxes, fontsize=7, va="top", ha="left")
    return "numbered"


def plot(recs: list[dict], x: str, y: str, minimize_y: bool, path: str, dpi: int = 130,
         hv: float | None = None, ref: tuple[float, float] | None = None,
         fixed: bool = True) -> str:
    """Draw the trade-off; returns how the points are labelled (``place_labels``)."""
    plt = pyplot()
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(6.4, 4.8))

    (xlo, xhi), (ylo, yhi) = metric_range(x), metric_range(y)
    for r in recs:       # bars clipped to what the metric can be (no accuracy below 0 %)
        xerr = [[min(r["x_std"], r["x"] - xlo)], [min(r["x_std"], xhi - r["x"])]]
        yerr = [[min(r["y_std"], r["y"] - ylo)], [min(r["y_std"], yhi - r["y"])]]
        ax.errorbar(r["x"], r["y"], xerr=xerr, yerr=yerr, fmt="o", ms=6,
                    color="C0" if r["front"] else "0.6", capsize=3, zorder=3 if r["front"] else 2)
    on = sorted((r for r in recs if r["front"]), key=lambda r: r["x"])
    handles = [Line2D([], [], color="C0", marker="o", linestyle="-" if len(on) > 1 else "none",
                      label="Pareto front" if len(on) > 1 else "Pareto front (one point)")]
    if len(on) > 1:
        ax.plot([r["x"] for r in on], [r["y"] for r in on], "-", color="C0", lw=1.5, zorder=1)
    if len(on) < len(recs):
        handles.append(Line2D([], [], color="0.6", marker="o", linestyle="none",
                              label="dominated"))
    if ref is not None:
        ax.plot([ref[0]], [ref[1]], "x", color="C3", ms=7, zorder=4)
        handles.append(Line2D([], [], color="C3", marker="x", linestyle="none",
                              label=f"reference ({'fixed' if fixed else 'worst x, worst y'})"
                              + (f": HV {hv:.4g}" if hv is not None else "")))
    ax.margins(0.12)
    ax.set_xlabel(f"{axis_label(x)} (higher is better)", fontsize=9)
    ax.set_ylabel(f"{axis_label(y)} ({'lower' if minimize_y else 'higher'} is better)",
                  fontsize=9)
    ax.set_title("accuracy-fairness trade-off (mean ± std over seeds)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, loc="best", fontsize=7)
    fig.tight_layout()
    how = place_labels(ax, recs)
    if how == "numbered":
        fig.set_size_inches(9.6, 4.8)
        fig.tight_layout()
    save_figure(fig, path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return how


def spec_settings(name: str | None, spec: dict[str, Any] | None) -> dict[str, Any]:
    """The ``pareto:`` section of table spec ``name`` (x, y, minimize_y, ref), checked."""
    if not spec:
        return {}
    section = spec.get("pareto") or {}
    bad = [k for k in section if k not in ("x", "y", "minimize_y", "ref")]
    if not isinstance(section, dict) or bad:
        raise UserError(f"table spec {name}: pareto holds {bad or section!r}; it takes x, y, "
                        "minimize_y and ref: [X, Y]")
    ref = section.get("ref")
    if ref is not None and not (isinstance(ref, list) and len(ref) == 2 and all(number(v) for v in ref)):
        raise UserError(f"table spec {name}: pareto.ref is {ref!r}; give two numbers [X, Y]")
    return section


def main(args: list[str]) -> int:
    about = __doc__.split("\n\n")[1].replace("\n", " ").replace("``", "`")
    p = Parser(prog="fedmoo pareto", usage=USAGE, description=about)
    p.add_argument("dirs", nargs="+", help="run or sweep directories")
    p.add_argument("--x", help="utility metric, higher is better (default test/acc_mean)")
    p.add_argument("--y", help="fairness metric (default test/acc_worst10)")
    p.add_argument("--minimize-y", action="store_true", default=None,
                   help="lower y is fairer (test/acc_std)")
    p.add_argument("--ref", nargs=2, type=float, metavar=("X", "Y"),
                   help="reference point of the hypervolume (in the metrics' own units)")
    p.add_argument("--spec", help="table spec whose pareto: section sets x, y, minimize_y and "
                   "ref (the command line wins)")
    p.add_argument("--out", metavar="FILE", help="draw the trade-off (.png, .pdf or .svg)")
    p.add_argument("--dpi", type=int, default=130, help="resolution of a PNG (default 130)")
    ns = p.parse_args(args)
    spec = load_spec(ns.spec) if ns.spec else None
    conf = spec_settings(ns.spec, spec)
    x = ns.x or conf.get("x") or "test/acc_mean"
    y = ns.y or conf.get("y") or "test/acc_worst10"
    minimize_y = bool(ns.minimize_y if ns.minimize_y is not None else conf.get("minimize_y"))
    given = ns.ref or conf.get("ref")
    check_dpi(ns.dpi)
    if x == y:
        raise UserError(f"--x and --y are both {x}: a trade-off needs two different metrics "
                        "(e.g. --x test/acc_mean --y test/acc_worst10)")
    if given and not all(math.isfinite(float(v)) for v in given):
        raise UserError(f"--ref {given[0]} {given[1]}: the reference point must be two finite "
                        "numbers (the hypervolume would be infinite or undefined)")
    check_figure("--out", ns.out)
    recs = points(ns.dirs, x, y, spec)
    if not recs:
        raise UserError(f"no configuration below {', '.join(ns.dirs)} has completed runs that "
                        f"report {x} and {y} (see `fedmoo table` for the metrics)")
    sign = -1.0 if minimize_y else 1.0
    pts = np.array([[r["x"], sign * r["y"]] for r in recs])
    for r, on in zip(recs, front(pts)):
        r["front"] = bool(on)
    ref = (float(given[0]), float(given[1])) if given else (pts[:, 0].min(),
                                                            sign * pts[:, 1].min())
    hv = hypervolume(pts, (ref[0], sign * ref[1]))
    print(render(recs, x, y, hv, ref, fixed=given is not None))
    if ns.out:
        with writing("--out", ns.out):
            Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
            plot(recs, x, y, minimize_y, ns.out, ns.dpi, hv, ref, fixed=given is not None)
        print(f"plot: {ns.out}")
    return 0
