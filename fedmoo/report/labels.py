"""What a metric column is, in words and units, for the axes of figures (``fedmoo plot``,
``fedmoo pareto``): ``test/acc_worst10`` -> ``test accuracy (%), worst 10% of clients``.

Column names follow ``split/name_stat`` (docs/architecture.md); a name this module does not know
is shown as it is.
"""

from __future__ import annotations

import re

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
