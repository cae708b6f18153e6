"""``fedmoo pareto DIR...``: the accuracy-fairness trade-off of runs and sweeps.

Every configuration (jobs grouped as ``fedmoo table`` groups them, one job per seed) is a point:
x = a utility metric (default ``test/acc_mean``), y = a fairness metric (default
``test/acc_worst10``; ``--minimize-y`` for one where lower is fairer, such as ``test/acc_std``),
each the mean over the configuration's completed seeds, with their standard deviation as error
bars. The configurations no other one beats on both axes (the Pareto front) are joined and listed,
with the hypervolume they dominate above a reference point (default: the worst x and the worst
y of all configurations; ``--ref X Y`` to fix it, so numbers compare across plots).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np

from fedmoo.errors import UserError
from fedmoo.report.jobs import find_jobs, group_jobs, label_keys

log = logging.getLogger(__name__)

USAGE = ("fedmoo pareto DIR... [--x METRIC] [--y METRIC] [--minimize-y] [--ref X Y] "
         "[--out FILE.png]")


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
    if not len(p):
        return 0.0
    p = p[front(p)]
    p = p[np.argsort(-p[:, 0])]               # x descending, so y ascends along the front
    area, y_done = 0.0, ref[1]
    for x, y in p:
        if y > y_done:
            area += (x - ref[0]) * (y - y_done)
            y_done = y
    return float(area)


def points(dirs: list[str], x: str, y: str) -> list[dict]:
    """One record per configuration with completed seeds: label, x/y means and stds, n."""
    groups = group_jobs(find_jobs(dirs))
    keys = label_keys(groups)
    out = []
    for g in groups:
        done = [j for j in g.jobs if j.status == "completed"]
        xs = [j.metric(x) for j in done]
        ys = [j.metric(y) for j in done]
        pairs = [(a, b) for a, b in zip(xs, ys) if a is not None and b is not None
                 and np.isfinite(a) and np.isfinite(b)]
        label = " ".join(f"{k}={g.value(k)}" for k in keys) or "(one configuration)"
        if not pairs:
            log.warning("%s: no completed seed reports %s and %s; left out", label, x, y,
                        extra={"prefix": "fedmoo pareto: "})
            continue
        a = np.array(pairs)
        out.append({"label": label, "x": a[:, 0].mean(), "x_std": a[:, 0].std(),
                    "y": a[:, 1].mean(), "y_std": a[:, 1].std(), "n": len(a)})
    return out


def render(recs: list[dict], x: str, y: str, hv: float, ref: tuple[float, float]) -> str:
    lines = [f"| configuration | {x} | {y} | seeds | front |", "|---|---|---|---|---|"]
    for r in sorted(recs, key=lambda r: (not r["front"], -r["x"])):
        lines.append(f"| {r['label']} | {r['x']:.2f} ± {r['x_std']:.2f} | {r['y']:.2f} ± "
                     f"{r['y_std']:.2f} | {r['n']} | {'yes' if r['front'] else ''} |")
    lines.append(f"\nhypervolume of the front above the reference ({ref[0]:.4g}, {ref[1]:.4g}): "
                 f"{hv:.4g}")
    return "\n".join(lines)


def plot(recs: list[dict], x: str, y: str, minimize_y: bool, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for r in recs:
        ax.errorbar(r["x"], r["y"], xerr=r["x_std"], yerr=r["y_std"], fmt="o", ms=6,
                    color="C0" if r["front"] else "0.6", capsize=3, zorder=3 if r["front"] else 2)
        ax.annotate(r["label"], (r["x"], r["y"]), textcoords="offset points", xytext=(5, 5),
                    fontsize=7, color="black" if r["front"] else "0.4")
    on = sorted((r for r in recs if r["front"]), key=lambda r: r["x"])
    ax.plot([r["x"] for r in on], [r["y"] for r in on], "-", color="C0", lw=1.5,
            label="Pareto front", zorder=1)
    ax.set_xlabel(f"{x} (higher is better)")
    ax.set_ylabel(f"{y} ({'lower' if minimize_y else 'higher'} is better)")
    ax.set_title("accuracy-fairness trade-off (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(args: list[str]) -> int:
    p = argparse.ArgumentParser(prog="fedmoo pareto", usage=USAGE,
                                description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("dirs", nargs="+", help="run or sweep directories")
    p.add_argument("--x", default="test/acc_mean", help="utility metric, higher is better")
    p.add_argument("--y", default="test/acc_worst10", help="fairness metric")
    p.add_argument("--minimize-y", action="store_true", help="lower y is fairer (test/acc_std)")
    p.add_argument("--ref", nargs=2, type=float, metavar=("X", "Y"),
                   help="reference point of the hypervolume (in the metrics' own units)")
    p.add_argument("--out", metavar="FILE.png", help="draw the trade-off")
    ns = p.parse_args(args)
    recs = points(ns.dirs, ns.x, ns.y)
    if not recs:
        raise UserError(f"no configuration below {', '.join(ns.dirs)} has completed runs that "
                        f"report {ns.x} and {ns.y} (see `fedmoo table` for the metrics)")
    sign = -1.0 if ns.minimize_y else 1.0
    pts = np.array([[r["x"], sign * r["y"]] for r in recs])
    for r, on in zip(recs, front(pts)):
        r["front"] = bool(on)
    ref = (ns.ref[0], ns.ref[1]) if ns.ref else (pts[:, 0].min(), sign * pts[:, 1].min())
    hv = hypervolume(pts, (ref[0], sign * ref[1]))
    print(render(recs, ns.x, ns.y, hv, ref))
    if ns.out:
        Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
        plot(recs, ns.x, ns.y, ns.minimize_y, ns.out)
        print(f"plot: {ns.out}")
    return 0
