"""Shared fixtures: run the CLI of THIS checkout in a subprocess, tiny configs."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedmoo.engine.cpu_layout import set_row_threads

ROOT = Path(__file__).resolve().parents[1]

# Slow tests (`-m "not slow"` leaves them out) usually say so with @pytest.mark.slow; these are
# marked here because their files were being written by others when the marker was introduced.
# Move a name to a decorator in its file when you next edit it.
SLOW = {
    "tests/test_plugins.py::test_list_run_and_sweep_a_plugin_rule",        # CLI sweeps
    "tests/test_plugins.py::test_checks_work_for_plugins",
    "tests/test_python_api.py::test_run_writes_what_the_cli_writes_and_load_reads_it",
    "tests/test_python_api.py::test_the_documented_example_runs",
    "tests/run/test_trackers.py::test_mlflow_local_store",                 # mlflow, wandb imports
    "tests/run/test_trackers.py::test_wandb_offline_and_several_at_once",
    "tests/engine/test_engine_equivalence.py::test_paper_models_agree[resnet18_gn]",
    "tests/engine/test_engine_equivalence.py::test_compiled_vmap_program_agrees",  # torch.compile
    "tests/engine/test_sgd.py::test_no_dynamo_import",                     # a fresh interpreter
}


def pytest_configure(config):
    # pytest-xdist (--dist load, what -n picks) first sends each worker a contiguous chunk of a
    # quarter of its share of the collection: with the slow tests sorted first (below), one
    # worker would get every one of them (182 tests each of 1456 on 2 workers, 89 slow) while
    # the other ran short tests and then waited. One test at a time instead: a worker that
    # finishes a test gets the next one, so the long tests spread over the workers as they free
    # up.
    # An explicit --maxschedchunk N on the command line wins.
    if getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in SLOW:
            item.add_marker(pytest.mark.slow)
    # pytest-xdist hands tests out in this order, one at a time (pytest_configure): the slow
    # ones first (a stable sort), so the workers' last tests are short ones and they finish
    # together.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _run_process_settings():
    """Undo what a run (fedmoo.run.setup.set_threads, set_deterministic) does to the rows'
    thread count and to torch's deterministic mode."""
    yield
    set_row_threads(None)
    torch.use_deterministic_algorithms(False)


@pytest.fixture(autouse=True)
def _fedmoo_logger():
    """Undo what the CLI (fedmoo.logs.setup) or an in-process Hydra job does to the ``fedmoo``
    logger (stderr handler, no propagation), so caplog sees fedmoo's records in every test."""
    log = logging.getLogger("fedmoo")
    handlers, level, propagate = log.handlers[:], log.level, log.propagate
    yield
    log.handlers[:] = handlers
    log.setLevel(level)
    log.propagate = propagate


def run_cli(args: list[str], cwd: Path, timeout: int = 300, env: dict | None = None, **io):
    """Run ``python -m fedmoo ARGS`` with this checkout first on the path; ``io``: subprocess.run's
    ``stdout`` / ``stderr`` / ``preexec_fn`` (stdout and stderr are captured by default)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("FEDMOO_DATA", str(cwd / "data"))
    e.setdefault("OMP_NUM_THREADS", "1")  # tiny models: threads only add contention
    if env:
        e.update(env)
    io = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **io}
    return subprocess.run([sys.executable, "-m", "fedmoo", *args], cwd=cwd, env=e, text=True,
                          timeout=timeout, **io)


@pytest.fixture
def cli(tmp_path):
    def _run(*args: str, **kw):
        return run_cli(list(args), tmp_path, **kw)

    _run.cwd = tmp_path
    return _run


def small_cfg(**overrides) -> dict:
    """A resolved config for ``fedmoo.run.loop.run`` without Hydra: tiny synthetic federation
    (the knobs it does not set have their declared defaults, fedmoo.config.schema)."""
    from fedmoo.config.schema import fill

    cfg = {
        "seed": 0, "rounds": 3, "num_clients": 6, "clients_per_round": 3, "eval_every": 1,
        "eval_split": "test", "checkpoint_every": 0, "device": "cpu", "engine": "sequential",
        "data_dir": "./data", "progress": False, "traceback": False,
        "data": {"name": "synthetic", "input_shape": [60], "num_classes": 10, "num_users": 6,
                 "alpha": 1.0, "beta": 1.0, "iid": False, "seed": 0, "max_samples": 200},
        "partition": {"name": "natural", "seed": 0, "split": "dataset", "fractions": [0.8, 0.1, 0.1]},
        "model": {"name": "logreg", "softmax_output": False},
        "client": {"lr": 0.05, "batch_size": 10, "epochs": 1, "local_steps": None,
                   "momentum": 0.0, "weight_decay": 0.0},
        "algo": {"name": "fedavg", "weighting": "samples", "eta": 1.0},
        "attack": {"name": "none"},
    }
    for key, value in overrides.items():
        node = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = value
    return fill(cfg)


def declare_impl(monkeypatch, group: str, slug: str, impl, params=None, **defaults):
    """Declare (for one test) ``group=slug`` implemented by ``impl``: the declaration filed under
    that slug with ``params`` (default: the one it has, else no knobs) and ``defaults``."""
    import dataclasses

    from fedmoo.config import hparams

    found = hparams.declared(group, slug)
    if params is None:
        params = found.params if found is not None else dataclasses.make_dataclass("NoKnobs", [])
    entry = hparams.Declaration(group, slug, params, impl, f"test {group} {slug}",
                                tuple(defaults.items()) or (found.defaults if found else ()))
    monkeypatch.setitem(hparams._DECLARED, (group, slug), entry)
    return entry


def crash_in_round(monkeypatch, n: int):
    """Make runs' engines die (``RuntimeError: node lost``) in their ``n``-th round of training;
    returns the real ``fedmoo.engine.build``, to set back before resuming."""
    from fedmoo import engine

    real = engine.build

    def crashing_build(*args, **kw):
        eng, calls = real(*args, **kw), []
        train = eng.train

        def train_then_crash(*a, **k):
            calls.append(1)
            if len(calls) == n:
                raise RuntimeError("node lost")
            return train(*a, **k)

        eng.train = train_then_crash
        return eng

    monkeypatch.setattr(engine, "build", crashing_build)
    return real
