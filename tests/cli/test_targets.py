"""No foreign code from overrides: every `_target_` Hydra would instantiate is on fedmoo's list."""

from __future__ import annotations

import pytest

from fedmoo.cli.overrides import check_targets, target_allowed


def test_allowlist():
    assert target_allowed("fedmoo.run.callbacks.SweepReport")
    assert target_allowed("hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher")
    assert not target_allowed("os.system")
    assert not target_allowed("hydra_plugins.evil.Launcher")
    assert not target_allowed("fedmoo_evil.x")          # a prefix is a package, not a string


@pytest.mark.parametrize("override,where", [
    ("+hydra.callbacks.x._target_=os.makedirs", "hydra.callbacks.x"),
    ("hydra.launcher._target_=os.system", "hydra.launcher"),
    ("hydra.sweeper._target_=shutil.copyfile", "hydra.sweeper"),
])
def test_foreign_targets_are_refused_before_composition_runs_them(override, where):
    err = check_targets(["rounds=2", "seed=0,1", override])
    assert err is not None and err.startswith(f"{where}._target_=")


def test_allowed_configs_pass():
    assert check_targets(["rounds=2"]) is None                      # no hydra override: no compose
    assert check_targets(["hydra/launcher=local_gpus", "seed=0,1"]) is None


def test_cli_refuses_and_runs_nothing(cli):
    r = cli("run", "rounds=1", "progress=false", "+hydra.callbacks.x._target_=os.makedirs",
            "+hydra.callbacks.x.name=made_by_hydra")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert not (cli.cwd / "made_by_hydra").exists()
    assert not (cli.cwd / "outputs").exists()


def test_unknown_launcher_is_named(cli):
    r = cli("run", "rounds=1", "hydra/launcher=foo")
    assert r.returncode == 2
    assert r.stderr.strip() == ("fedmoo: error: unknown hydra/launcher 'foo'; choose one of: "
                                + r.stderr.split("choose one of: ")[1].strip())
    assert "local_gpus" in r.stderr and "writable" not in r.stderr


def test_logging_names_only_the_logging_modules_classes(cli):
    # dictConfig calls a handler's class: a zipfile.ZipFile "handler" wrote made.zip before
    # Hydra refused it
    r = cli("run", "rounds=1", "progress=false", "+hydra.job_logging.handlers.z.class=zipfile.ZipFile",
            "+hydra.job_logging.handlers.z.file=made.zip", "+hydra.job_logging.handlers.z.mode=w")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "hydra.job_logging.handlers.z.class=zipfile.ZipFile is refused" in r.stderr
    assert not (cli.cwd / "made.zip").exists() and not (cli.cwd / "outputs").exists()


@pytest.mark.parametrize("override,bad", [
    ("hydra.job_logging.handlers.console.stream=ext://os.sep", "handlers.console.stream"),
    ("hydra.job_logging.handlers.file.class=logging.Formatter", "handlers.file.class"),
    ("+hydra.job_logging.formatters.simple.class=zipfile.ZipFile", "formatters.simple.class"),
    ("hydra.hydra_logging.handlers.console.class=shutil.rmtree", "hydra_logging.handlers"),
])
def test_logging_configs_are_checked(override, bad):
    err = check_targets(["rounds=1", override])
    assert err is not None and bad in err.split(" is refused")[0]


@pytest.mark.parametrize("override", [
    "hydra/job_logging=default", "hydra/job_logging=disabled", "hydra/job_logging=stdout",
    "hydra/hydra_logging=default", "hydra/hydra_logging=disabled",
    "hydra.job_logging.handlers.file.class=logging.handlers.RotatingFileHandler",
])
def test_shipped_logging_configs_pass(override):
    assert check_targets(["rounds=1", override]) is None
