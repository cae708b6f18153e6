"""``fedmoo plot``: curves over rounds (mean ± band over seeds), client-accuracy histograms and,
for multi-task runs, a radar chart of the per-task losses (``--radar``).

One curve per configuration, grouped as ``fedmoo table`` groups them (the whole configuration but
the seed, one job per seed; see ``fedmoo.report.jobs``). Damaged files are warned about on stderr
and left out: a rounds.csv cut short is plotted up to its last whole row.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from fedmoo.errors import UserError
from fedmoo.report.jobs import Group, Job, as_text, find_jobs, group_jobs, label_keys


def _warn(msg: str) -> None:
    print(f"fedmoo plot: {msg}", file=sys.stderr)


def _label(keys, g: Group) -> str:
    def short(k: str) -> str:
        return k[: -len(".name")] if k.endswith(".name") else k.split(".")[-1]

    return ", ".join(f"{short(k)}={g.value(k)}" for k in keys) or "run"


def check_jobs(jobs: list[Job], groups: list[Group]) -> None:
    """Warn about every job that is left out or plotted in part; reads each rounds.csv once."""
    for j in jobs:
        if j.config is None:
            _warn(f"skipped {j.path}: {j.status} ({j.reason})")
    for g in groups:
        for d, k in zip(g.dropped, g.kept_for):
            _warn(f"not plotted: {d.path}: repeats seed {as_text(d.seed)} of {k.path}")
        for j in g.jobs:
            frame = j.rounds()
            if j.rounds_problem:
                _warn(f"{j.rows_path}: {j.rounds_problem}; plotting its {len(frame)} whole rows")
            elif j.status == "corrupt" and j.rows_path:
                _warn(f"{j.path}: {j.reason}; plotting its rounds.csv")


def _curves(group: Group, metric: str):
    import pandas as pd

    series = []
    for j in group.jobs:
        df = j.rounds()
        if metric in df.columns and "round" in df.columns:
            series.append(df.set_index("round")[metric].astype(float))
    if not series:
        return None
    frame = pd.concat(series, axis=1)
    return (frame.index.to_numpy(), frame.mean(axis=1).to_numpy(),
            frame.std(axis=1, ddof=0).to_numpy(), len(series))


def plot_metric(groups, keys, metric: str, out: Path, logy: bool = False) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = 0
    for group in groups:
        c = _curves(group, metric)
        if c is None:
            continue
        x, m, s, n = c
        line, = ax.plot(x, m, label=f"{_label(keys, group)} (n={n})")
        ax.fill_between(x, m - s, m + s, color=line.get_color(), alpha=0.2)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel("round")
    ax.set_ylabel(metric)
    if logy:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return True


def _client_accuracies(job: Job):
    """The ``accuracy`` column of clients.csv (None, with a warning, if it cannot be read)."""
    import pandas as pd

    if job.clients_path is None:
        return None
    try:
        return pd.read_csv(job.clients_path)["accuracy"].astype(float).to_numpy()
    except KeyError:
        _warn(f"{job.clients_path} has no accuracy column; left out")
    except (OSError, ValueError) as e:
        _warn(f"{job.clients_path} is unreadable ({' '.join(str(e).split())[:200]}); left out")
    return None


def plot_client_hist(groups, keys, out: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = 0
    bins = np.linspace(0, 100, 21)
    for group in groups:
        accs = [a for a in (_client_accuracies(j) for j in group.jobs) if a is not None]
        if not accs:
            continue
        ax.hist(np.concatenate(accs), bins=bins, alpha=0.5, label=_label(keys, group),
                density=True)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel("final test accuracy of a client (%)")
    ax.set_ylabel("density of clients")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
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


def plot_radar(groups, keys, pattern: str, out: Path) -> bool:
    """One closed polygon per configuration: the final per-task values (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = []
    for group in groups:
        per_job = [v for v in (_final_tasks(j, pattern) for j in group.jobs) if v]
        if per_job and len({len(v) for v in per_job}) == 1:
            series.append((_label(keys, group), np.mean(per_job, axis=0), group.jobs))
    if not series or len({len(m) for _, m, _ in series}) != 1:
        return False
    n = len(series[0][1])
    names = (series[0][2][0].summary or {}).get("tasks") or [f"task {s}" for s in range(n)]
    angles = np.linspace(0, 2 * np.pi, n, endpoint=False)
    fig, ax = plt.subplots(figsize=(6.5, 7.5), subplot_kw={"projection": "polar"})
    for label, m, _ in series:
        ax.plot(np.append(angles, angles[0]), np.append(m, m[0]), marker="o", label=label)
    ax.set_xticks(angles)
    ax.set_xticklabels(names[:n], fontsize=8 if n <= 10 else 6)
    ax.set_title(pattern.format("{s}") + " (final round)", fontsize=9, pad=18)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="fedmoo plot",
                                description="Plot metrics over rounds for runs and sweeps.")
    p.add_argument("dirs", nargs="+", help="sweep or run directories (searched recursively)")
    p.add_argument("--metric", action="append", help="rounds.csv column (repeatable; default "
                   "test/acc_mean and test/acc_std, plus round/improved_frac when logged)")
    p.add_argument("--out", required=True, help="directory for the PNG files")
    p.add_argument("--logy", action="store_true", help="logarithmic y axis for the curves")
    p.add_argument("--radar", nargs="?", const=RADAR_DEFAULT, metavar="PATTERN",
                   help="multi-task runs: radar chart of the final per-task values of PATTERN "
                   f"(a rounds.csv column with {{}} for the task index; default {RADAR_DEFAULT})")
    ns = p.parse_args(argv)
    jobs = find_jobs(ns.dirs)
    groups = group_jobs(jobs)
    keys = label_keys(groups)
    check_jobs(jobs, groups)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    metrics = ns.metric or ["test/acc_mean", "test/acc_std", "round/improved_frac"]
    written = []
    for m in metrics:
        f = out / (m.replace("/", "_") + ".png")
        if plot_metric(groups, keys, m, f, ns.logy):
            written.append(f)
        elif ns.metric:
            raise UserError(f"--metric {m} is not a column of any rounds.csv under {ns.dirs}")
    f = out / "client_accuracy_hist.png"
    if plot_client_hist(groups, keys, f):
        written.append(f)
    if ns.radar:
        f = out / "radar.png"
        if not plot_radar(groups, keys, ns.radar, f):
            raise UserError(f"--radar {ns.radar}: no rounds.csv under {ns.dirs} has the columns "
                            f"{ns.radar.format(0)}, {ns.radar.format(1)}, ... (multi-task runs)")
        written.append(f)
    for f in written:
        print(f"wrote {f}")
    return 0
