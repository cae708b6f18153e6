"""No foreign code from overrides or config folders: every `_target_` Hydra would instantiate and
every class a logging config names is on fedmoo's list, checked on the configuration Hydra uses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedmoo.cli import trusted
from fedmoo.cli.hydra_run import check, plan
from fedmoo.cli.trusted import target_allowed
from fedmoo.errors import Refused


def check_targets(args: list[str]) -> str | None:
    """The refusal ``fedmoo run ARGS`` gets for foreign code (composed as the run would be)."""
    try:
        check(plan(args))
    except Refused as e:
        return str(e)
    return None


def test_allowlist():
    assert target_allowed("fedmoo.run.callbacks.SweepReport")
    assert target_allowed("hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher")
    assert not target_allowed("os.system")
    assert not target_allowed("hydra_plugins.evil.Launcher")
    assert not target_allowed("fedmoo_evil.x")          # a prefix is a package, not a string
    # a name a module only imports is not fedmoo's (Hydra follows every dot)
    assert not target_allowed("fedmoo.logs.os.makedirs")
    assert not target_allowed("fedmoo.run.rundir.shutil.rmtree")
    for path in (Path(trusted.__file__).parents[1] / "conf").rglob("*.yaml"):
        for target in re.findall(r"_target_:\s*(\S+)", path.read_text()):
            assert target_allowed(target), (path, target)      # fedmoo's own configs pass


@pytest.mark.parametrize("override,where", [
    ("+hydra.callbacks.x._target_=os.makedirs", "hydra.callbacks.x"),
    ("hydra.launcher._target_=os.system", "hydra.launcher"),
    ("hydra.sweeper._target_=shutil.copyfile", "hydra.sweeper"),
    # instantiate is recursive: a nested _target_ is called before fedmoo's own class
    ("+hydra.callbacks.check_config.x._target_=os.getcwd", "hydra.callbacks.check_config.x"),
    ("+hydra.launcher.x._target_=os.getcwd", "hydra.launcher.x"),
])
def test_foreign_targets_are_refused_before_composition_runs_them(override, where):
    err = check_targets(["rounds=2", "-m", "seed=0,1", override])
    assert err is not None and err.startswith(f"{where}._target_=")


def test_allowed_configs_pass():
    assert check_targets(["rounds=2"]) is None
    assert check_targets(["hydra/launcher=local_gpus", "-m", "seed=0,1"]) is None


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
    ("hydra.job_logging.handlers.file.filename=rounds.csv", "handlers.file.filename"),
    # a .log elsewhere (or through ..) could be any file: a symlink named x.log, mode w
    ("hydra.job_logging.handlers.file.filename=/tmp/x.log", "handlers.file.filename"),
    ("+hydra.job_logging.handlers.n={class: logging.handlers.SocketHandler, host: h, port: 1}",
     "handlers.n.class"),                       # the run's log sent to another host
    ("hydra.job_logging.handlers.file.filename=${hydra.runtime.output_dir}/../x.log",
     "handlers.file.filename"),
    ("+hydra.hydra_logging.handlers.f={class: logging.FileHandler, filename: summary.json, "
     "mode: w}", "hydra_logging.handlers.f.filename"),
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


EVIL_CALLBACK = """# @package _global_
hydra:
  callbacks:
    evil:
      _target_: os.makedirs
      name: {made}
"""


@pytest.fixture
def folder(tmp_path):
    """A config folder (as a user's --config-dir) whose files set hydra.* from inside: a logging
    option and an experiment that add a callback, a logging option whose handler is not the
    logging module's, and an experiment with a YAML tag that would call os.system."""
    root = tmp_path / "confs"
    (root / "hydra" / "job_logging").mkdir(parents=True)
    (root / "experiment").mkdir()
    (root / "hydra" / "job_logging" / "evil.yaml").write_text(
        EVIL_CALLBACK.format(made=tmp_path / "made_by_logging"))
    (root / "experiment" / "evil.yaml").write_text(
        EVIL_CALLBACK.format(made=tmp_path / "made_by_experiment") + "rounds: 1\n")
    (root / "hydra" / "job_logging" / "zip.yaml").write_text(
        "version: 1\nhandlers:\n  z:\n    class: zipfile.ZipFile\n"
        f"    file: {tmp_path / 'made.zip'}\n    mode: w\nroot:\n  handlers: [z]\n")
    (root / "experiment" / "dotted.yaml").write_text(     # fedmoo's name as a prefix: os
        EVIL_CALLBACK.replace("os.makedirs", "fedmoo.logs.os.makedirs")
        .format(made=tmp_path / "made_by_dotted") + "rounds: 1\n")
    for key in ("()", "class"):     # fedmoo.logs' name as a prefix reached its imports
        (root / "hydra" / "job_logging" / f"dotted{len(key)}.yaml").write_text(
            f"version: 1\nhandlers:\n  x:\n    '{key}': fedmoo.logs.os.makedirs\n"
            f"    name: {tmp_path / 'made_by_dotted'}\nroot:\n  handlers: [x]\n")
    (root / "experiment" / "envset.yaml").write_text(     # a sitecustomize.py on PYTHONPATH
        f"# @package _global_\nhydra:\n  job:\n    env_set:\n      PYTHONPATH: {root}\n")
    (root / "sitecustomize.py").write_text("open('made_by_sitecustomize', 'w')\n")
    (root / "experiment" / "setup.yaml").write_text(
        "# @package _global_\nhydra:\n  launcher:\n    setup: ['touch made_by_setup']\n")
    # values Hydra resolves before it uses them: a node made by an interpolation, and
    # overrides "given" by a file (Hydra adds the command line's to them)
    (root / "evil.pth").write_text("import os; os.makedirs('made_by_pth')\n")
    (root / "experiment" / "create.yaml").write_text(
        "# @package _global_\nhydra:\n  callbacks:\n    evil: \"${oc.create:{_target_: "
        f"site.addsitedir, _args_: ['{root}']}}}}\"\n")
    (root / "experiment" / "given.yaml").write_text(
        "# @package _global_\nhydra:\n  overrides:\n    task: ['hydra.job.env_set.PYTHONPATH=x']"
        f"\n  job:\n    env_set:\n      PYTHONPATH: {root}\n")
    (root / "experiment" / "tag.yaml").write_text(
        "# @package _global_\nrounds: !!python/object/apply:os.system ['touch made_by_tag']\n")
    (root / "experiment" / "fine.yaml").write_text("# @package _global_\nrounds: 1\n")
    (root / "mine.yaml").write_text(         # a primary config of the folder's (-cn mine)
        "defaults:\n  - config\n  - _self_\n" + EVIL_CALLBACK.format(made=tmp_path / "made_by_cn")
        .replace("# @package _global_\n", ""))
    (root / "ok.yaml").write_text("defaults:\n  - config\n  - _self_\nrounds: 2\n")
    return root


@pytest.mark.parametrize("args,refusal", [
    (["hydra/job_logging=evil"], "hydra.callbacks.evil._target_=os.makedirs is not"),
    (["experiment=evil"], "hydra.callbacks.evil._target_=os.makedirs is not"),
    (["experiment=evil", "-m", "seed=0,1"], "hydra.callbacks.evil._target_=os.makedirs is not"),
    (["experiment=evil", "--cfg", "job"], "hydra.callbacks.evil._target_=os.makedirs is not"),
    (["experiment=evil", "--hydra-help"], "hydra.callbacks.evil._target_=os.makedirs is not"),
    (["-m", "experiment=fine,evil"], "hydra.callbacks.evil._target_=os.makedirs is not"),
    (["hydra/job_logging=zip"], "hydra.job_logging.handlers.z.class=zipfile.ZipFile is refused"),
    (["experiment=dotted"], "hydra.callbacks.evil._target_=fedmoo.logs.os.makedirs is not"),
    (["hydra/job_logging=dotted2"], "handlers.x.()=fedmoo.logs.os.makedirs is refused"),
    (["hydra/job_logging=dotted5"], "handlers.x.class=fedmoo.logs.os.makedirs is refused"),
    (["experiment=tag"], "tag.yaml, line 2: could not determine a constructor for the tag"),
    (["experiment=create"], "hydra.callbacks.evil=${oc.create:{_target_: site.addsitedir"),
    (["experiment=given", "logger=mlflow"],
     "hydra.overrides holds 'hydra.job.env_set.PYTHONPATH=x', which the command line did not"),
    (["experiment=envset", "logger=mlflow"], "hydra.job.env_set.PYTHONPATH is set by a config"),
    (["experiment=envset", "-m", "seed=0,1"], "hydra.job.env_set.PYTHONPATH is set by a config"),
    (["-cn", "mine"], "hydra.callbacks.evil._target_=os.makedirs is not"),
])
@pytest.mark.parametrize("how", ["--config-dir", "-cd", "searchpath"])
def test_a_config_folders_code_is_refused_and_nothing_runs(cli, folder, args, refusal, how):
    given = ([f"hydra.searchpath=[file://{folder}]"] if how == "searchpath"
             else [how, str(folder)] if how == "-cd" else [f"{how}={folder}"])
    r = cli("run", *given, *args, "progress=false", f"hydra.sweep.dir={cli.cwd / 'sweep'}")
    if "-cn" in args and how == "searchpath":    # Hydra reads a primary config before its searchpath
        refusal = "Cannot find primary config 'mine'"
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and refusal in r.stderr, r.stderr
    assert sorted(p.name for p in cli.cwd.iterdir()) == ["confs"]     # nothing made, no outputs


def test_a_node_made_by_an_interpolation_is_refused_where_code_is_named(folder):
    (folder / "experiment" / "ref.yaml").write_text(
        "# @package _global_\nhydra:\n  job_logging:\n    spare: {class: logging.FileHandler, "
        "filename: rounds.csv, mode: w}\n    handlers:\n      file: ${hydra.job_logging.spare}\n")
    err = check_targets([f"--config-dir={folder}", "experiment=ref"])
    assert err.startswith("hydra.job_logging.handlers.file=${hydra.job_logging.spare} makes a "
                          "whole node through an interpolation")
    (folder / "experiment" / "named.yaml").write_text(
        "# @package _global_\nhydra:\n  callbacks:\n    x: {_target_: '${oc.decode:os.getcwd}'}\n")
    err = check_targets([f"--config-dir={folder}", "experiment=named"])
    assert err.startswith("hydra.callbacks.x._target_=${oc.decode:os.getcwd}: code named")
    # fedmoo's own interpolations pass: the log file's name, the launchers' ${fedmoo.gpus:}
    assert check_targets(["hydra/launcher=local_gpus", "-m", "seed=0,1"]) is None


def test_a_folders_config_yaml_is_not_the_primary_config_unless_named(tmp_path):
    (tmp_path / "None.yaml").write_text("")      # was read as "-cn None" given
    (tmp_path / "config.yaml").write_text("rounds: 2\n")
    assert plan([f"--config-dir={tmp_path}", "seed=1"]).config_path is None
    assert plan([f"--config-dir={tmp_path}", "-cn", "config"]).config_path == str(tmp_path)


@pytest.mark.parametrize("text,refusal", [
    ("hydra:\n  output_subdir: /elsewhere", "hydra.output_subdir=/elsewhere could put"),
    ("hydra:\n  sweep:\n    subdir: ../other_run", "hydra.sweep.subdir=../other_run could"),
    ("hydra:\n  job:\n    name: ../x", "hydra.job.name=../x could put"),
    ("resume: false", "resume=false is set by a config file: it would discard a finished"),
    ("hydra:\n  sweep:\n    dir: {folder}/out", "is inside the config folder"),
])
def test_a_config_file_cannot_write_or_wipe_elsewhere(folder, text, refusal):
    """A file that chose these wrote Hydra's record over another folder's files, or deleted
    another run's results (resume=false): the command line still may."""
    (folder / "experiment" / "place.yaml").write_text(
        "# @package _global_\n" + text.format(folder=folder) + "\n")
    args = [f"--config-dir={folder}", "experiment=place", "-m", "seed=0"]
    assert refusal in (check_targets(args) or "")
    key = text.split(":")[-2].split()[-1]
    if key in ("output_subdir", "subdir", "resume"):
        given = {"output_subdir": "hydra.output_subdir=/elsewhere", "resume": "resume=false",
                 "subdir": "hydra.sweep.subdir=../other_run"}[key]
        assert check_targets([*args, given]) is None


def test_launchers_shell_lines_and_clusters_come_from_the_command_line_only(folder):
    args = [f"--config-dir={folder}", "experiment=setup", "hydra/launcher=slurm", "-m", "seed=0"]
    assert check_targets(args).startswith("hydra.launcher.setup is set by a config file")
    assert check_targets([*args, "hydra.launcher.setup=[hostname]"]) is None
    (folder / "experiment" / "ray.yaml").write_text(
        "# @package _global_\nhydra:\n  launcher:\n    ray:\n      init:\n"
        "        address: ray://elsewhere:10001\n        runtime_env: {pip: [x]}\n")
    args = [f"--config-dir={folder}", "experiment=ray", "hydra/launcher=ray", "-m", "seed=0"]
    assert check_targets(args).startswith("hydra.launcher.ray.init.address is set by a config")
    args.append("hydra.launcher.ray.init.address=auto")
    assert check_targets(args).startswith("hydra.launcher.ray.init.runtime_env.pip is set by")


def test_the_command_line_may_set_a_jobs_environment(cli, folder):
    r = cli("run", f"--config-dir={folder}", "experiment=fine", "progress=false", "data=digits",
            "num_clients=4", "clients_per_round=2", "+hydra.job.env_set.FEDMOO_X=1",
            "hydra.run.dir=out")
    assert r.returncode == 0, r.stderr
    r = cli("run", f"--config-dir={folder}", "experiment=envset", "progress=false",
            "hydra.job.env_set.PYTHONPATH=.", "rounds=1", "data=digits", "num_clients=4",
            "clients_per_round=2",
            "hydra.run.dir=out2")
    assert r.returncode == 0, r.stderr        # the file's value replaced by the user's own


def test_a_config_folders_plain_options_run(cli, folder):
    r = cli("run", f"--config-dir={folder}", "experiment=fine", "progress=false", "data=digits",
            "num_clients=4", "clients_per_round=2")
    assert r.returncode == 0, r.stderr
    assert "done: 1 rounds" in r.stdout


def test_a_primary_config_of_the_folder_runs_and_a_missing_one_is_one_line(cli, folder):
    r = cli("run", "-cd", str(folder), "-cn", "ok", "progress=false", "data=digits",
            "num_clients=4", "clients_per_round=2")
    assert r.returncode == 0, r.stderr
    assert "done: 2 rounds" in r.stdout
    r = cli("run", "-cn", "nope", "rounds=1")
    assert r.returncode == 2 and r.stderr.strip() == (
        "fedmoo: error: Cannot find primary config 'nope'. Check that it's in your config search "
        "path. (a config folder of yours: --config-dir DIR or hydra.searchpath=[file:///abs/dir])")
