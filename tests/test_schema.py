"""The run knobs' schema (fedmoo/schema.py): declared once, checked before torch and before any
directory, read by `fedmoo run --help`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedmoo.config import hparams, knobs, schema
from fedmoo.errors import UserError
from tests.conftest import ROOT, run_cli, small_cfg

PKG = ROOT / "fedmoo"


def test_every_knob_has_help_and_a_default_it_allows():
    assert len(schema.knobs()) == 23 + 6        # top level + client
    for k in schema.knobs():
        assert k.help and "\n" not in k.help, k.key
        assert schema.refusal(k.key, k.default) is None, k.key
    schema.check(schema.fill(small_cfg()))


def test_the_yaml_holds_no_second_default():
    """config.yaml and client/sgd.yaml state none of the knobs the schema declares."""
    top = yaml.safe_load((PKG / "conf" / "config.yaml").read_text())
    assert set(top) == {"defaults", "hydra"}
    assert top["defaults"][:2] == [schema.SCHEMA_NAME, "_self_"]
    assert yaml.safe_load((PKG / "conf" / "client" / "sgd.yaml").read_text()) is None


def test_no_code_restates_a_default():
    """The run's code reads the knobs as cfg[key]: no ``.get("rounds", <default>)``."""
    names = "|".join(k.key.rpartition(".")[2] for k in schema.knobs())
    fallback = re.compile(rf"""\.get\(\s*["']({names})["']\s*,""")
    paths = [*(PKG / "run").rglob("*.py"), *(PKG / "cli").rglob("*.py"), PKG / "api.py"]
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in paths
           for i, line in enumerate(p.read_text().splitlines(), 1) if fallback.search(line)]
    assert not bad, bad


def test_fill_gives_the_declared_defaults(monkeypatch):
    monkeypatch.setenv("FEDMOO_DATA", "/srv/data")
    cfg = schema.fill({"rounds": 5, "client": {"lr": 0.5}})
    assert cfg["rounds"] == 5 and cfg["resume"] is True and cfg["diverge_norm"] == 1e6
    assert cfg["client"] == {"lr": 0.5, "batch_size": 10, "epochs": 1, "local_steps": None,
                             "momentum": 0.0, "weight_decay": 0.0}
    assert cfg["data_dir"] == "/srv/data"


@pytest.mark.parametrize("key,value,message", [
    ("rounds", "abc", "rounds='abc' must be a positive integer; e.g. rounds=100"),
    ("rounds", 0, "rounds=0 must be a positive integer; e.g. rounds=100"),
    ("num_clients", -3, "num_clients=-3 must be a positive integer or null; e.g. num_clients=30"),
    ("client.lr", float("inf"), "client.lr=inf must be a number in (0.0, inf); e.g. client.lr=0.01"),
    ("client.momentum", 1, "client.momentum=1 must be a number in [0.0, 1.0); e.g. "
                           "client.momentum=0.0"),
    ("sampling", "size", "sampling='size' must be uniform or weighted; e.g. sampling=uniform"),
    ("precision", "float16", "precision='float16' must be float32 or float64"),
    ("device", "gpu", "device='gpu' must be auto, cpu, cuda or cuda:N"),
    ("threads", 0, "threads=0 must be a positive integer or auto; e.g. threads=auto"),
    ("logger", ["tensorboard", "x"], "logger=['tensorboard', 'x'] must be one of: none, "
                                     "tensorboard, mlflow, wandb, or a list of them"),
    ("engine", {"name": "fast"}, "engine={'name': 'fast'} must be one of: auto, sequential, batched"),
    ("resume", "maybe", "resume='maybe' must be true or false"),
])
def test_refusals_name_the_key_and_what_is_allowed(key, value, message):
    assert schema.refusal(key, value).startswith(message)
    with pytest.raises(UserError, match=re.escape(message)):
        schema.check(small_cfg(**{key: value}))


@pytest.mark.parametrize("key,value", [
    ("threads", 4), ("threads", "auto"), ("logger", ["tensorboard", "mlflow"]),
    ("engine", {"name": "batched", "compile": True}), ("device", "cuda:1"),
    ("num_clients", None), ("diverge_norm", None), ("client.batch_size", None)])
def test_allowed_values(key, value):
    schema.check(small_cfg(**{key: value}))


def test_more_clients_per_round_than_clients():
    with pytest.raises(UserError, match=r"^clients_per_round=9 is larger than num_clients=5"):
        schema.check(small_cfg(num_clients=5, clients_per_round=9))
    schema.check(small_cfg(num_clients=None, clients_per_round=9))   # known once data is read


def test_the_check_imports_neither_torch_nor_the_run():
    code = ("import sys\n"
            "from hydra import compose, initialize_config_module\n"
            "from fedmoo.cli.precheck import check_composed\n"
            "from fedmoo.errors import Refused\n"
            "with initialize_config_module(config_module='fedmoo.conf', version_base='1.3'):\n"
            "    cfg = compose('config', overrides=['rounds=0'])\n"
            "try:\n"
            "    check_composed(cfg)\n"
            "except Refused as e:\n"
            "    print(e)\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('fedmoo.run')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.splitlines() == [
        "rounds=0 must be a positive integer; e.g. rounds=100", "[]"], out.stderr


@pytest.mark.parametrize("args,needle", [
    (["rounds=abc"], "rounds='abc' must be a positive integer; e.g. rounds=100"),
    (["client.lr=inf"], "client.lr=inf must be a number in (0.0, inf)"),
    (["num_clients=5", "clients_per_round=9"], "clients_per_round=9 is larger than num_clients=5"),
    (["rounds=-2"], "rounds=-2 must be a positive integer"),
    (["sampling=size"], "sampling='size' must be uniform or weighted"),
    (["resume=maybe"], "resume='maybe' must be true or false"),
    (["-m", "rounds=0", "seed=0,1"], "rounds=0 must be a positive integer"),
    (["-m", "rounds=3,0"], "rounds=0 must be a positive integer"),
    (["algo=fedmgda_plus", "algo.eta=0"], "algo.eta=0 must be a number in (0.0, inf)"),
    (["algo=fedmgda_plus", "algo.eta=abc"], "algo.eta='abc' must be a number in (0.0, inf)"),
    (["algo=fedfv", "algo.order=lost"], "algo.order='lost' must be one of: loss, random"),
    (["-m", "algo=fedprox", "algo.mu=0.1,-1"], "algo.mu=-1 must be a number in [0.0, inf)"),
    (["-m", "attack=bias", "attack.malicious=0.2,1.5"], "attack.malicious=1.5 as a fraction must be in (0, 1]"), (["attack=label_flip", "+attack.c=2"], "attack.c is not a hyperparameter of attack=label_flip"), (["model=resnet18_gn", "model.groups=3"], "model.groups=3 must divide the narrowest layer's 64 channels"), (["model=mlp", "model.hidden=abc"], "model.hidden='abc' must be a list of positive layer widths"),
    (["partition=dirichlet", "partition.beta=-1"], "partition.beta=-1 must be a number in (0.0, inf)"),
    (["partition=one_class_per_client", "partition.classes=[0,2,0]"], "partition.classes=[0, 2, 0] names class 0 twice"),
    # engine=batched's options are knobs too: refused before anything is written
    (["engine={name: batched, program: fast}"], "engine.program='fast' must be one of: auto, lockstep, vmap"),
    (["engine={name: batched, compile: 1}"], "engine.compile=1 must be true or false"),
    (["engine={name: batched, graph: true}"], "engine.graph is not an option of engine=batched"),
    (["engine={name: sequential, program: vmap}"], "engine.program is not an option of engine=sequential"),
    (["partition=femnist_skewed", "partition.classes=[36,37,37]"], "partition.classes=[36, 37, 37] names class 37 twice"), (["-m", "partition.fractions=[0.8,0.1,0.1],[0.5,0.1,0.1]"], "partition.fractions=[0.5, 0.1, 0.1] must be three non-negative numbers"),
    (["data=cifar10", "data.normalize=z"], "data.normalize='z' must be one of: unit, standard, pixel_zscore"), (["+data.bogus=1"], "data.bogus is not a hyperparameter of data=synthetic; valid keys: input_shape, num_classes, num_users"),
])
def test_a_bad_value_is_one_line_and_leaves_nothing(tmp_path, args, needle):
    r = run_cli(["run", *args], tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fedmoo: error: {needle}"), r.stderr
    assert r.stdout == ""
    assert list(tmp_path.iterdir()) == []     # a swept value too: checked before the sweep dir


def test_run_help_reads_the_schema(capsys):
    from fedmoo.cli.run_help import run_help

    out = run_help()
    for k in schema.knobs():
        assert re.search(rf"^  {re.escape(k.key)}=\S+\s+{re.escape(k.help.split()[0])}", out,
                         re.M), k.key
    assert "  diverge_norm=1e+06 " in out and "  client.local_steps=null " in out


def test_old_results_get_the_schemas_defaults():
    from fedmoo.report.defaults import MISSING, default

    assert default("resume", {}) is True and default("checkpoint_every", {}) == 10
    assert default("data_dir", {}) is MISSING        # an interpolation says nothing
    assert default("nonsense", {}) is MISSING
    # a component's key: its declaration's default (the YAML starts from it); a YAML value wins
    assert default("algo.mu", {"algo.name": "fedprox"}) == 0.01
    assert default("algo.eta_decay", {"algo.name": "fedmgda_plus"}) == 0.1


@pytest.mark.parametrize("path", [Path(schema.__file__), Path(knobs.__file__),
                                  *Path(hparams.__file__).parent.glob("*.py")])
def test_the_declarations_are_torch_free(path):
    assert not re.search(r"^\s*(import|from)\s+(torch|fedmoo\.(run|engine|cli|algorithms|"
                         r"attacks|models|data|moo))", path.read_text(), re.M)


@pytest.mark.parametrize("override,refused", [
    ("logger=[tensorboard,mlflow]", None), ("engine={name:batched,compile:true}", None),
    ("logger=[tensorboard,x]", "logger=['tensorboard', 'x'] must be one of"),
    ("seed=${oc.env:FEDMOO_TEST_UNSET}", None),   # not resolvable yet: left to the run
])
def test_a_composed_config_is_checked_as_plain_values(override, refused):
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from fedmoo.cli.precheck import check_composed
    from fedmoo.errors import Refused

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="fedmoo.conf", version_base="1.3"):
            cfg = compose("config", overrides=[override])
    finally:
        GlobalHydra.instance().clear()
    if refused is None:
        check_composed(cfg)
    else:
        with pytest.raises(Refused, match=re.escape(refused)):
            check_composed(cfg)
