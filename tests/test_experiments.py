"""Paper experiments: every conf/experiment file composes, every row of its sweep composes, and
every table spec names rows the sweep produces and metrics that rounds.csv has."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from fedmoo.algorithms.fmgda import STATIONARITY
from fedmoo.cli.config import compose
from fedmoo.report.metrics import accuracy_metrics, rounds_to_threshold, task_metrics

CONF = Path(__file__).resolve().parents[1] / "fedmoo" / "conf"
EXPERIMENTS = sorted(p.relative_to(CONF / "experiment").with_suffix("").as_posix()
                     for p in (CONF / "experiment").rglob("*.yaml"))
SPECS = sorted(p.relative_to(CONF / "table").with_suffix("").as_posix()
               for p in (CONF / "table").rglob("*.yaml"))
PAPERS = ("fedmgda_plus", "fedfv", "adafed")


def sweep_params(name: str) -> dict[str, list[str]]:
    """The experiment's swept values; a variant that extends another experiment (its defaults
    name it) and sweeps nothing of its own sweeps what that one does."""
    doc = yaml.safe_load((CONF / "experiment" / f"{name}.yaml").read_text())
    params = doc["hydra"].get("sweeper", {}).get("params")
    if params is None:
        base = [d for d in doc.get("defaults", []) if isinstance(d, str) and d != "_self_"]
        assert len(base) == 1, f"{name} sweeps nothing and extends {base}"
        return sweep_params(base[0])
    return {k: [s.strip() for s in str(v).split(",")] for k, v in params.items()}


def row_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_every_paper_has_experiments_and_specs():
    for paper in PAPERS:
        assert any(e.startswith(f"{paper}/") for e in EXPERIMENTS), paper
        assert any(s.startswith(f"{paper}/") for s in SPECS), paper
    # every paper table has a spec, and every spec an experiment whose jobs it lays out
    tables = {e for e in EXPERIMENTS if e.split("/")[1].startswith("table")}
    assert tables <= set(SPECS) <= set(EXPERIMENTS), (tables - set(SPECS), set(SPECS) - set(EXPERIMENTS))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_header_composes_and_sweeps_deterministically(name):
    lines = (CONF / "experiment" / f"{name}.yaml").read_text().splitlines()
    assert lines[0] == "# @package _global_"
    assert lines[1].startswith("# ") and f"fedmoo run -m experiment={name}" in lines[1]  # the command
    assert lines[2].startswith("# ") and len(lines[2]) > 10        # then what it reproduces
    doc = yaml.safe_load("\n".join(lines))
    assert doc["hydra"]["sweep"]["dir"] == f"outputs/experiments/{name}"
    assert doc["hydra"]["sweep"]["subdir"] == "${hydra.job.num}"
    params = sweep_params(name)
    assert "seed" in params and len(params) >= 2


def composition_plan() -> tuple[dict[str, list[list[str]]], dict[str, set[str]]]:
    """The override lists to compose, per experiment: each row option once (with the first
    experiment sweeping it), each experiment at least once (with a row if it sweeps rows); and
    the row options each row group's experiments use."""
    plan: dict[str, list[list[str]]] = {}
    used: dict[str, set[str]] = {}
    for name in EXPERIMENTS:
        jobs = []
        params = sweep_params(name)
        if not any(k.startswith("+row/") for k in params):          # else via its rows
            jobs.append([f"experiment={name}"])
        for key, values in params.items():
            if not key.startswith("+row/"):
                continue
            group = key[1:]
            for row in values:
                if row in used.setdefault(group, set()) and jobs:
                    continue
                used[group].add(row)
                jobs.append([f"experiment={name}", f"+{group}={row}"])
        plan[name] = jobs
    return plan, used


PLAN, USED = composition_plan()


def test_rows_exist_and_none_is_orphaned():
    for name in EXPERIMENTS:
        for key, values in sweep_params(name).items():
            if key.startswith("+row/"):
                missing = set(values) - set(row_options(key[1:]))
                assert not missing, f"{name}: {key[1:]} has no option {sorted(missing)}"
    assert sum(len(jobs) for jobs in PLAN.values()) > 100
    # no row file is orphaned: each is swept by some experiment
    for group in {p.parent.relative_to(CONF).as_posix() for p in (CONF / "row").rglob("*.yaml")}:
        assert set(row_options(group)) == USED.get(group, set()), group


def test_compose_is_the_public_path():
    assert compose([f"experiment={EXPERIMENTS[0]}"])["rounds"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_and_its_rows_compose(name):
    """The experiment's share of ``PLAN``, in one Hydra context (about 0.2 s a composition)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="fedmoo.conf", version_base="1.3"):
            for overrides in PLAN[name]:
                cfg = OmegaConf.to_container(
                    hydra_compose(config_name="config", overrides=overrides), resolve=True)
                assert cfg["rounds"] > 0 and cfg["data"]["name"] and cfg["model"]["name"], name
                if len(overrides) == 1:
                    continue
                group, _, row = overrides[1].lstrip("+").partition("=")
                doc = yaml.safe_load((CONF / group / f"{row}.yaml").read_text())
                for d in doc.get("defaults", []):
                    if isinstance(d, dict) and "override /algo" in d:
                        assert cfg["algo"]["name"] == d["override /algo"], (name, row)
                for k, v in (doc.get("algo") or {}).items():
                    if not (isinstance(v, str) and v.startswith("${")):
                        assert cfg["algo"][k] == v, (name, row, k)
    finally:
        GlobalHydra.instance().clear()


def test_row_files_describe_themselves():
    for path in (CONF / "row").rglob("*.yaml"):
        lines = path.read_text().splitlines()
        assert lines[0] == "# @package _global_", path
        assert lines[1].startswith("# ") and len(lines[1]) > 8, path


MAX_TASKS = 40  # CelebA's attributes
VALID_METRICS = {k for prefix in ("test", "val", "global", "benign", "attackers")
                 for k in accuracy_metrics(np.array([50.0, 60.0, 70.0]), np.array([5, 6, 7]),
                                           np.array([10, 10, 10]), np.array([1.0, 0.8, 0.6]),
                                           prefix=prefix)}
# multi-task runs (FMGDA / FSMGDA): per-task columns, rounds to threshold, the server's d and lambda
VALID_METRICS |= {k for prefix in ("test", "val", "train")
                  for k in task_metrics(np.ones((3, MAX_TASKS)), np.ones((3, MAX_TASKS)),
                                        np.array([10, 10, 10]), None, prefix,
                                        reference=np.ones(MAX_TASKS))}
VALID_METRICS |= set(rounds_to_threshold([], MAX_TASKS, 0.01))
VALID_METRICS |= {"server/d_norm", "server/d_norm_sq"} | {f"server/lambda_task{s}" for s in range(MAX_TASKS)}
VALID_METRICS |= {STATIONARITY}   # FMGDA's gradient_probe on evaluated rounds


@pytest.mark.parametrize("name", SPECS)
def test_spec_rows_are_swept_and_metrics_exist(name):
    spec = yaml.safe_load((CONF / "table" / f"{name}.yaml").read_text())
    assert spec["title"] and int(spec["decimals"]) >= 0
    metrics = [m["key"] for m in spec["metrics"]]
    assert metrics and set(metrics) <= VALID_METRICS, set(metrics) - VALID_METRICS
    params = sweep_params(name)
    varying = [k for k in params if k != "seed"]
    if spec.get("group_by"):                   # rows are the values of the first group_by key
        assert {g.lstrip("+") for g in spec["group_by"]} <= {k.lstrip("+") for k in varying}
        row_key = next(k for k in varying if k.lstrip("+") == spec["group_by"][0].lstrip("+"))
    else:                                      # one swept key, so `fedmoo table` rows are its values
        assert len(varying) == 1, varying
        row_key = varying[0]
    swept = params[row_key]
    if row_key.startswith("+row/"):
        assert set(swept) <= set(row_options(row_key[1:]))
    rows = spec.get("rows")
    if rows is None:                           # labels come from the swept values themselves
        assert spec.get("group_by"), name
        return
    group_by = spec.get("group_by") or [row_key]
    if len(group_by) == 1 or spec.get("pivot"):   # a pivot's rows: the first key's values
        assert set(map(str, rows)) == set(swept), name
    else:                                      # row keys "k1=v1 k2=v2": every value is swept
        by_key = {k.lstrip("+"): v for k, v in params.items()}
        for key in rows:
            for part in str(key).split(" "):
                k, _, v = part.partition("=")
                assert v in by_key[k.lstrip("+")], (name, key)
    for key, row in rows.items():
        assert row["label"], (name, key)
        assert len(row.get("paper", metrics)) <= len(metrics), (name, key)


def test_unknown_row_is_a_one_line_error(cli):
    r = cli("run", "--cfg", "job", "experiment=fedfv/table3", "+row/fedfv/table3=nope")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "unknown row/fedfv/table3 'nope'" in r.stderr and "fedfv_a2_3" in r.stderr
