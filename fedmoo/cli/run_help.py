"""``fedmoo run --help``: fedmoo's own help (Hydra's generic one stays behind ``--hydra-help``).

The groups and their options are read from the config tree each time (plain text), the run knobs
from their declarations (``fedmoo.config.schema``; no Hydra or torch import), so the help cannot
fall behind either.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter

from fedmoo.config import schema
from fedmoo.cli.groups import CONF_DIR, GROUPS, group_options
from fedmoo.config.knobs import show

WIDTH = 100

USAGE = """\
usage: fedmoo run [OVERRIDES...] [-m] [--cfg job] [--hydra-help]

Train one configuration, or with -m a sweep (one run directory per job). OVERRIDES pick an
option of a config group (GROUP=OPTION) and set any key (KEY=VALUE); a comma list after -m
sweeps it (seed=0,1,2). Results: outputs/runs/<date>/<time>_<algo>_<data>/ (rounds.csv,
clients.csv, summary.json); run the same command in the same directory again to resume."""

EXAMPLES = """\
examples:
  fedmoo run                                    FedAvg on Synthetic(1,1): 100 rounds in seconds
  fedmoo run algo=fedfv algo.alpha=0.2 rounds=50 seed=3
  fedmoo run data=digits partition=dirichlet partition.beta=0.5 client.lr=0.05
  fedmoo run -m seed=0,1,2 algo=fedavg,fedfv    6 jobs, one directory each under outputs/multirun/
  fedmoo run -m experiment=fmgda/multifashion_demo   a paper-style sweep that runs offline
  fedmoo run -m hydra/launcher=lockstep seed=0,1,2   small runs trained together (other launchers:
                                                joblib, local_gpus, slurm, ray; docs/scaling.md)
  fedmoo run hydra.run.dir=outputs/mine         choose the run directory (re-running resumes)"""

MORE = """\
more help:
  fedmoo run --cfg job [OVERRIDES]   the composed config: every key you can set, with its value
  fedmoo list [GROUP]                every option of a group with a one-line description
  fedmoo describe [OVERRIDES]        the federation and the model, without training
  fedmoo run --hydra-help            Hydra's own flags (--multirun, --cfg, --package, --info, ...)
  README.md, docs/algorithms.md, docs/datasets.md, docs/experiments.md, docs/troubleshooting.md"""

# Each group's line: what choosing it does (the options come from the config tree).
GROUP_HELP = {
    "algo": "the server rule; its hyperparameters are algo.<key>=...",
    "data": "the dataset, with its paper's model, partition and client setup",
    "partition": "how samples are split among clients; partition.<key>=...",
    "setup": "a paper's setup, only when named: its data, partition and numbers (clients, rounds, "
             "client.*); e.g. setup=adafed_cifar10_dirichlet",
    "model": "the network (input shape and classes come from the dataset)",
    "client": "local training (sgd); its knobs client.<key>=... are listed below",
    "attack": "attacks on chosen clients: attack.malicious=..., attack.<key>=...",
    "experiment": "a paper's table or figure as a sweep: run with -m, e.g. -m experiment=fedfv/table3",
    "debug": "shortcuts for debugging",
}


def _item(head: str, text: str, col: int) -> str:
    """``head`` then ``text`` wrapped at WIDTH, continuation lines indented to ``col``."""
    pad = " " * col
    if not text:
        return head
    if len(head) >= col:                      # a long head gets the text on the next line
        return head + "\n" + textwrap.fill(text, WIDTH, initial_indent=pad, subsequent_indent=pad)
    body = textwrap.fill(text, WIDTH, initial_indent=pad, subsequent_indent=pad,
                         break_on_hyphens=False)
    return head.ljust(col) + body[col:]


def _items(items: list[str], col: int) -> str:
    """``items`` joined by ", " in lines of at most WIDTH, indented to ``col``; an item is
    never split (its spaces are held as NULs while textwrap fills the lines)."""
    text = ", ".join(item.replace(" ", "\0") for item in items)
    return textwrap.fill(text, WIDTH, initial_indent=" " * col, subsequent_indent=" " * col,
                         break_long_words=False, break_on_hyphens=False).replace("\0", " ") \
        or " " * col


def run_help() -> str:
    # group -> option of config.yaml's defaults list
    defaults = dict(re.findall(r"^[ \t]*-[ \t]*([a-z_]+)[ \t]*:[ \t]*([A-Za-z0-9_./]+)",
                               (CONF_DIR / "config.yaml").read_text(), re.M))
    parts = [USAGE, "", "config groups (GROUP=OPTION; `fedmoo list GROUP` describes each option):"]
    for group in GROUPS:
        options = [f"{o} (default)" if o == defaults.get(group) else o for o in group_options(group)]
        if group == "experiment":                 # 50-odd files: one entry per paper folder
            papers = Counter(name.split("/")[0] for name in options)
            options = [f"{p}/<name> ({n} file{'s' if n > 1 else ''})" for p, n in papers.items()]
        parts.append(_item(f"  {group}=", GROUP_HELP.get(group, ""), 14))
        parts.append(_items(options, 14))
    parts += ["", "run knobs (KEY=VALUE, shown with the default; `fedmoo run --cfg job` shows all):"]
    for k in (*schema.knobs(), *schema.engine_options()):
        parts.append(_item(f"  {k.key}={show(k.default)}", k.help, 30))
    parts += ["", EXAMPLES, "", MORE]
    return "\n".join(parts) + "\n"
