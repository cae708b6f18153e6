"""Every `fedmoo run|prepare|describe ...` line in a fenced block of README.md and docs/ composes.

The overrides go through the CLI's own checks (unknown group options, new keys, launchers,
foreign targets) and ``fedmoo.cli.config.compose``, in-process. A sweep (``-m``) composes once per
value of each swept key. Left out: shell pipelines, placeholders (``<slug>``, ``...``), lines whose
block shows them failing (the next line is ``fedmoo: error: ...``), and the ``EXEMPT`` examples.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from fedmoo.cli import overrides as ov
from fedmoo.cli.config import compose
from fedmoo.cli import hydra_run
from fedmoo.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMANDS = ("run", "prepare", "describe")
FLAGS = {"-m", "--multirun", "--json", "--model-only"}
VALUED = {"--cfg", "-c", "--plot", "-p", "--package"}
# Examples of what a user adds to fedmoo (they compose once the user has written them).
EXEMPT = {"algo=lossavg": "a user's own algorithm (docs/plugins.md writes it)",
          "experiment=myproj/compare": "a user's own experiment file (docs/plugins.md)"}
# Launchers of an optional extra (fedmoo[launchers]): their lines compose where it is installed.
EXTRA_LAUNCHERS = {"submitit_local": "hydra_plugins.hydra_submitit_launcher",
                   "submitit_slurm": "hydra_plugins.hydra_submitit_launcher",
                   "joblib": "hydra_plugins.hydra_joblib_launcher"}


def doc_commands() -> list[tuple[str, int, str]]:
    """(file, line number, command) of every fenced fedmoo command worth composing."""
    out = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        fenced, i = False, 0
        while i < len(lines):
            line = lines[i].strip()
            i += 1
            if line.startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                continue
            text = line[2:] if line.startswith("$ ") else line
            if not re.match(rf"fedmoo ({'|'.join(COMMANDS)})\b", text):
                continue
            start = i
            while text.endswith("\\") and i < len(lines):        # continuation lines
                text = text[:-1] + " " + lines[i].strip()
                i += 1
            shown_failing = i < len(lines) and lines[i].strip().startswith("fedmoo: error")
            code = shlex.split(text, comments=True)
            if shown_failing or any(re.search(r"[|;&<>]|\.\.\.|^\[", w) for w in code):
                continue
            out.append((path.relative_to(ROOT).as_posix(), start, " ".join(code)))
    return out


def jobs(args: list[str], multirun: bool) -> list[list[str]]:
    """Override lists that together use every value of every swept key once."""
    if not multirun:
        return [args]
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from fedmoo.cli.overrides import grid

    all_jobs = grid(OverridesParser.create().parse_overrides(args))
    chosen, seen = [], set()
    for job in all_jobs:
        if set(job) - seen:
            chosen.append(job)
            seen |= set(job)
    return chosen


def check(command: str) -> None:
    words = command.split()[2:]
    multirun = any(w in ("-m", "--multirun") for w in words)
    args, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w in VALUED:
            skip = True
        elif w not in FLAGS:
            args.append(w)
    args = ov.aliases(args)
    from fedmoo.run.launchers import check_launcher

    launcher = check_launcher(args)
    if launcher and "not installed" in launcher:
        pytest.skip(launcher)            # e.g. hydra/launcher=ray without hydra-ray-launcher
    err = ov.check_overrides(args) or ov.check_new_keys(args) or launcher
    assert err is None, err
    hydra_run.check(hydra_run.plan([*(["-m"] if multirun else []), *args]))
    for job in jobs(args, multirun):
        cfg = compose(job)
        assert cfg["rounds"] >= 0 and cfg["data"]["name"], job


COMMAND_LINES = doc_commands()


def test_the_docs_show_commands():
    files = {f for f, _, _ in COMMAND_LINES}
    assert "README.md" in files and len(COMMAND_LINES) > 30, COMMAND_LINES


@pytest.mark.parametrize("where,command", [(f"{f}:{n}", c) for f, n, c in COMMAND_LINES],
                         ids=[f"{f}:{n}" for f, n, _ in COMMAND_LINES])
def test_doc_command_composes(where, command):
    for key, why in EXEMPT.items():
        if key in command.split():
            pytest.skip(f"{where}: {why}")
    for launcher, module in EXTRA_LAUNCHERS.items():
        if f"hydra/launcher={launcher}" in command.split() and importlib.util.find_spec(module) is None:
            pytest.skip(f"{where}: {module} (an optional extra) is not installed")
    try:
        check(command)
    except UserError as e:
        pytest.fail(f"{where}: `{command}` does not compose: {e}")


def test_the_docs_point_at_no_yaml_of_a_declared_group():
    """algo, attack, model and partition options are declarations (fedmoo/config/hparams), not
    files of fedmoo's config tree; only a plugin's own conf/ folder holds such YAML."""
    for path in DOCS:
        if path.name != "plugins.md":
            found = re.findall(r"conf/(?:algo|attack|model|partition)\b", path.read_text())
            assert not found, (path.relative_to(ROOT).as_posix(), found)
