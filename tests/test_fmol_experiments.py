"""The FMGDA paper's experiment files: every swept row composes into a valid run config, and the
table specs name those rows."""

from __future__ import annotations

import pytest
import yaml

from fedmoo import algorithms, models
from fedmoo.cli.groups import CONF_DIR
from fedmoo.cli.config import compose
from fedmoo.report.tables import load_spec

EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment" / "fmgda").glob("*.yaml"))


def sweep_of(name):
    text = (CONF_DIR / "experiment" / "fmgda" / f"{name}.yaml").read_text()
    lines = text.splitlines()
    assert lines[0] == "# @package _global_"
    assert lines[1] == f"# fedmoo run -m experiment=fmgda/{name}"    # the exact command
    cfg = yaml.safe_load(text)
    assert cfg["hydra"]["sweep"]["dir"] == f"outputs/experiments/fmgda/{name}"
    return cfg["hydra"]["sweeper"]["params"]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_sweep_rows_compose(name):
    """The first and last swept row (every row file's existence is checked below)."""
    params = sweep_of(name)
    rows = [(k, v) for k, v in params.items() if k.startswith("+row/")]
    assert rows
    group, values = rows[0]
    values = str(values).split(",")
    files = {p.stem for p in (CONF_DIR / group[1:]).glob("*.yaml")}
    assert set(values) <= files
    for value in (values[0], values[-1]):
        cfg = compose([f"experiment=fmgda/{name}", f"{group}={value}"])
        algo = algorithms.build(cfg["algo"])
        assert algo.name in ("fmgda", "fsmgda")
        shape = cfg["data"]["input_shape"]
        n_tasks = 40 if cfg["data"]["name"] == "celeba" else (8 if cfg["data"]["name"] == "riverflow" else 2)
        if cfg["model"]["name"] != "mtl_resnet18":            # skip building the 11M-parameter net
            models.build(cfg["model"], shape, cfg["data"]["num_classes"], n_tasks)


@pytest.mark.parametrize("name", ["table2", "fig1", "fig2a", "fig2b", "fig3", "multifashion_demo"])
def test_table_spec_rows_are_sweep_rows(name):
    spec = load_spec(f"fmgda/{name}")
    row_group = next(k for k in sweep_of(name) if k.startswith("+row/"))[1:]
    files = {p.stem for p in (CONF_DIR / row_group).glob("*.yaml")}
    for key in spec["rows"]:
        parts = dict(p.split("=") for p in key.split()) if "=" in key else {row_group: key}
        assert parts[row_group] in files, key
