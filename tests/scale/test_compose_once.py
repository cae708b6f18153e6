"""fedmoo's sweeper composes each job of a sweep once (hydra_plugins/.../grid_sweeper.py):
the validation pass and the launcher's run share the configuration; a run is composed once
(fedmoo.cli.hydra_run). Hydra's config loader is wrapped here, in the tests only, to count."""

from __future__ import annotations

import json

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.types import RunMode

from tests.inprocess import run_main

TINY = ["rounds=1", "num_clients=4", "clients_per_round=2", "data.max_samples=40",
        "progress=false", "checkpoint_every=0"]


@pytest.fixture
def composes(monkeypatch) -> list[tuple[str, ...]]:
    """The overrides of every job configuration Hydra composes, in order."""
    calls: list[tuple[str, ...]] = []
    compose = ConfigLoaderImpl.load_sweep_config

    def counted(self, master_config, sweep_overrides):
        calls.append(tuple(sweep_overrides))
        return compose(self, master_config, sweep_overrides)

    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", counted)
    return calls


@pytest.mark.parametrize("launcher", [[], ["hydra/launcher=lockstep"]])
def test_each_job_composed_once(launcher, composes, tmp_path):
    done = run_main(["run", "-m", *TINY, "seed=0,1,2", *launcher,
                     f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(composes) == 3 and len(set(composes)) == 3    # 6 with Hydra's basic sweeper
    for job, seed in enumerate((0, 1, 2)):                    # each job got its own config
        cfg = json.loads((tmp_path / "sweep" / str(job) / "summary.json").read_text())["config"]
        assert cfg["seed"] == seed


def test_the_basic_sweeper_still_composes_twice(composes, tmp_path):
    """The count above is the sweeper's doing: with Hydra's own sweeper every job is composed
    for the validation and again for the launch."""
    done = run_main(["run", "-m", *TINY, "seed=0,1", "hydra/sweeper=basic",
                     f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(composes) == 4


def test_a_run_composes_its_configuration_once(monkeypatch, tmp_path):
    """@hydra.main's extra composition that only reads ``hydra.mode`` is not made (-m decides);
    ``hydra.mode`` on the command line still makes a sweep."""
    calls = []
    load = ConfigLoaderImpl.load_configuration

    def counted(self, *args, **kwargs):
        calls.append(kwargs.get("run_mode"))
        return load(self, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    done = run_main(["run", *TINY], tmp_path)
    assert done.returncode == 0, done.stderr
    assert calls == [RunMode.RUN]                             # 2 with @hydra.main
    calls.clear()
    done = run_main(["run", *TINY, "seed=0,1", "hydra.mode=MULTIRUN",
                     f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "sweep" / "1" / "summary.json").exists()
    # the sweep and its 2 jobs (checked as composed: no separate look at the hydra.* override)
    assert calls == [RunMode.MULTIRUN, RunMode.RUN, RunMode.RUN]


def test_sweeper_params_and_batches(composes, tmp_path):
    """hydra.sweeper.params adds to the command line's grid (the command line's value of a key
    wins); in batches (max_batch_size) every job is still composed once and numbered in order."""
    done = run_main(["run", "-m", *TINY, "seed=3,4", "hydra.sweeper.max_batch_size=2",
                     "+hydra.sweeper.params={seed: '0,1', sampling: 'uniform,weighted'}",
                     f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    jobs = [json.loads((tmp_path / "sweep" / str(j) / "summary.json").read_text())["config"]
            for j in range(4)]
    assert [(c["seed"], c["sampling"]) for c in jobs] == [
        (3, "uniform"), (3, "weighted"), (4, "uniform"), (4, "weighted")]
    assert not (tmp_path / "sweep" / "4").exists()
    assert len(composes) == 4


def test_a_key_of_a_swept_rows_rule_is_not_refused(tmp_path):
    """Hydra composes a sweep's configuration without its swept values: ``algo.q=1`` was refused
    as no key of algo=fedavg although every row of the sweep runs q-FedAvg."""
    done = run_main(["run", "-m", *TINY, "+row/fedfv/table3=qfedavg_q5,qfedavg_q15", "algo.q=1",
                     f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    jobs = [json.loads((tmp_path / "sweep" / str(j) / "summary.json").read_text())["config"]
            for j in range(2)]
    assert [(c["algo"]["name"], c["algo"]["q"]) for c in jobs] == [("qfedavg", 1), ("qfedavg", 1)]
    done = run_main(["run", "-m", *TINY, "+row/fedfv/table3=qfedavg_q5,qfedavg_q15", "algo.qq=1",
                     f"hydra.sweep.dir={tmp_path / 'sweep2'}"], tmp_path)
    assert done.returncode == 2 and "algo.qq is not a config key" in done.stderr
    assert not (tmp_path / "sweep2").exists()
