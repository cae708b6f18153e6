"""Sweeps through fedmoo's Hydra launcher configs: joblib (4 jobs), submitit local, Ray."""

from __future__ import annotations

import csv
import json

import pytest

from fedmoo.run.launchers import plugin_available
from tests.inprocess import cli_in, fresh_joblib_workers

TINY = ["rounds=2", "num_clients=6", "clients_per_round=3", "data.max_samples=100",
        "progress=false"]


def _hydra_cfg(*overrides):
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    import fedmoo.cli.app  # noqa: F401  registers ${fedmoo.gpus:}

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="fedmoo.conf", version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides),
                           return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()


def _jobs(sweep_dir):
    out = {}
    for summary in sorted(sweep_dir.glob("*/summary.json")):
        job = summary.parent
        overrides = (job / ".hydra" / "overrides.yaml").read_text()
        with open(job / "rounds.csv", newline="") as f:
            rounds = [int(r["round"]) for r in csv.DictReader(f)]
        out[job.name] = (json.loads(summary.read_text())["status"], overrides, rounds)
    return out


@pytest.mark.skipif(not plugin_available("hydra_plugins.hydra_joblib_launcher"),
                    reason="hydra-joblib-launcher is not installed (pip install -e '.[launchers]')")
def test_local_gpus_config(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    launcher = _hydra_cfg("hydra/launcher=local_gpus").hydra.launcher
    assert launcher._target_.endswith("JoblibLauncher")
    assert launcher.n_jobs == 3 and launcher.prefer == "processes"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert _hydra_cfg("hydra/launcher=local_gpus").hydra.launcher.n_jobs == 1


@pytest.mark.skipif(not plugin_available("hydra_plugins.hydra_joblib_launcher"),
                    reason="hydra-joblib-launcher is not installed (pip install -e '.[launchers]')")
@pytest.mark.slow
def test_joblib_sweep_of_four_jobs(tmp_path):
    """Two joblib worker processes share the four jobs (the sweep is started in this process)."""
    fresh_joblib_workers()
    cli = cli_in(tmp_path)
    # an absolute sweep dir: joblib's worker processes outlive a test and keep its cwd
    r = cli("run", "-m", "hydra/launcher=local_gpus", "hydra.launcher.n_jobs=2", "seed=0,1,2,3",
            *TINY, f"hydra.sweep.dir={cli.cwd / 'sweep'}")
    assert r.returncode == 0, r.stderr
    assert "Joblib.Parallel(n_jobs=2" in r.stdout + r.stderr
    jobs = _jobs(cli.cwd / "sweep")
    assert sorted(jobs) == ["0", "1", "2", "3"]
    for num, (status, overrides, rounds) in jobs.items():
        assert status == "completed" and rounds == [1, 2]
        assert f"seed={num}" in overrides


@pytest.mark.skipif(not plugin_available("hydra_plugins.hydra_submitit_launcher"),
                    reason="hydra-submitit-launcher is not installed (pip install -e '.[launchers]')")
def test_slurm_config_requeues_one_gpu_jobs():
    launcher = _hydra_cfg("hydra/launcher=slurm").hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.gpus_per_node == 1 and launcher.tasks_per_node == 1
    assert launcher.max_num_timeout > 0 and launcher.signal_delay_s > 0


@pytest.mark.skipif(not plugin_available("hydra_plugins.hydra_submitit_launcher"),
                    reason="hydra-submitit-launcher is not installed (pip install -e '.[launchers]')")
@pytest.mark.slow
def test_submitit_local_sweep(tmp_path):
    """submitit's local executor runs the job in its own process, as on a Slurm node (the sweep
    is started in this process)."""
    cli = cli_in(tmp_path)
    r = cli("run", "-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5",
            "seed=7", *TINY, "hydra.sweep.dir=sweep")
    assert r.returncode == 0, r.stderr
    jobs = _jobs(cli.cwd / "sweep")
    assert list(jobs) == ["0"] and jobs["0"][0] == "completed" and "seed=7" in jobs["0"][1]
    assert list((cli.cwd / "sweep" / ".submitit").glob("*/*_result.pkl"))


RAY = plugin_available("hydra_plugins.hydra_ray_launcher") and plugin_available("ray")


def test_ray_config_composes():
    launcher = _hydra_cfg("hydra/launcher=ray").hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"
    assert launcher.ray.remote.num_gpus == 1 and launcher.ray.init.address is None


@pytest.mark.skipif(not RAY, reason="ray / hydra-ray-launcher are not installed here; "
                                    "pip install -e '.[ray]' to run this test")
def test_ray_local_sweep(cli):
    r = cli("run", "-m", "hydra/launcher=ray", "hydra.launcher.ray.remote.num_gpus=0",
            "+hydra.launcher.ray.init.num_cpus=2", "seed=0,1", *TINY, "hydra.sweep.dir=sweep")
    assert r.returncode == 0, r.stderr
    jobs = _jobs(cli.cwd / "sweep")
    assert sorted(jobs) == ["0", "1"] and all(j[0] == "completed" for j in jobs.values())


@pytest.mark.skipif(RAY, reason="the Ray plugin is installed")
def test_missing_ray_plugin_is_one_line_error(cli):
    r = cli("run", "-m", "hydra/launcher=ray", "seed=0,1", "hydra.sweep.dir=sweep")
    assert r.returncode == 2
    assert r.stderr.strip() == ("fedmoo: error: hydra/launcher=ray needs the hydra-ray-launcher "
                                "plugin, which is not installed; pip install -e \".[ray]\" in the "
                                "fedmoo checkout (or pip install hydra-ray-launcher)")
    assert not (cli.cwd / "sweep").exists()


def test_slurm_off_a_cluster_is_one_line(tmp_path, monkeypatch, capsys):
    from fedmoo.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))                # no sbatch here
    assert main(["run", "-m", "hydra/launcher=slurm", "seed=0,1", "rounds=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sbatch" in err and "hydra/launcher=local_gpus" in err, err
    assert not (tmp_path / "outputs").exists()
