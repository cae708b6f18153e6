"""logger=mlflow / wandb / several: real offline records, read back."""

from __future__ import annotations

import json
import logging
import re
import select
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedmoo.errors import UserError
from fedmoo.run import loggers, tracker_process
from fedmoo.run.launchers import plugin_available
from fedmoo.run.loop import run
from tests.conftest import crash_in_round, small_cfg
from tests.inprocess import cli_in, fresh_joblib_workers


def _written(run_dir: Path, name: str, timeout: float = 180) -> str:
    """The writer's log once it says how it ended: it finishes after the run, in the
    background (fedmoo.run.tracker_process)."""
    log, end = Path(run_dir) / f"tracker-{name}.log", time.time() + timeout
    while time.time() < end:
        text = log.read_text() if log.exists() else ""
        if re.search(r"^(done|error )", text, re.M):
            return text
        time.sleep(0.1)
    raise AssertionError(f"{log}: no done line in {timeout} s")


def test_unknown_logger_is_one_line(tmp_path):
    with pytest.raises(UserError, match=r"^logger=\['tensorboard', 'foo'\] must be one of: none, "
                                        r"tensorboard, mlflow, wandb, or a list of them"):
        run({**small_cfg(), "logger": ["tensorboard", "foo"]}, tmp_path)   # schema.check


class Breaks(loggers.NullLogger):
    """A tracker that fails once the run has logged its first row."""

    def __init__(self, *args):
        self.rows = 0

    def log(self, row):
        self.rows += 1
        if self.rows > 1:
            raise OSError("the tracking server went away")


def _one_warning(caplog, text: str) -> None:
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == [text]


def test_a_tracker_that_fails_after_it_started_is_one_warning(tmp_path, monkeypatch, caplog):
    """It stopped the training (rounds since the last checkpoint lost, status failed)."""
    monkeypatch.setitem(loggers.KINDS, "tensorboard", Breaks)
    result = run(small_cfg(rounds=3, logger="tensorboard"), tmp_path)
    assert result.status == "completed" and [r["round"] for r in result.rows] == [1, 2, 3]
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "completed"
    assert len((tmp_path / "rounds.csv").read_text().splitlines()) == 4
    _one_warning(caplog, "logger=tensorboard stopped: the tracking server went away; the run "
                         "goes on without it (rounds.csv has every round)")


WRITER = "import sys; {}print('error logger=mlflow: {}', flush=True); sys.stdin.readline()"
STARTED = "import sys; sys.stdin.readline(); {}print('error logger=mlflow: {}', flush=True)"


def _answered(code: str) -> subprocess.Popen:
    """A fake writer whose lines are out before the run starts: the run waits for none."""
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, bufsize=1)
    select.select([proc.stdout], [], [], 60)
    return proc


@pytest.mark.parametrize("started", [True, False])
def test_a_writer_fails_the_run_only_before_its_run_started(tmp_path, monkeypatch, caplog,
                                                            started):
    """A writer's error line after its ready line is one warning; before it, a refusal (when
    it came before the run's end: the run waits for no writer)."""
    pytest.importorskip("mlflow")
    code = (STARTED if started else WRITER).format("print('ready 7', flush=True); " if started else "",
                         "writing failed: database is locked" if started else "no store")
    monkeypatch.setattr(tracker_process, "_spawn", lambda module: _answered(code))
    if not started:
        with pytest.raises(UserError, match="^logger=mlflow: no store$"):
            run(small_cfg(rounds=3, logger="mlflow"), tmp_path)
        return
    assert run(small_cfg(rounds=3, logger="mlflow"), tmp_path).status == "completed"
    _one_warning(caplog, "logger=mlflow stopped: writing failed: database is locked; the run "
                         "goes on without it (rounds.csv has every round)")


def test_mlflow_local_store(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = run(small_cfg(rounds=3, logger="mlflow"), tmp_path)
    assert _written(tmp_path, "mlflow").splitlines()[-1] == "done"
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (r,) = client.search_runs([client.get_experiment_by_name("fedmoo").experiment_id])
    assert r.info.status == "FINISHED" and r.info.run_name == tmp_path.name
    assert r.data.params["algo.name"] == "fedavg" and r.data.params["client.lr"] == "0.05"
    history = client.get_metric_history(r.info.run_id, "test/acc_mean")
    assert [m.step for m in history] == [1, 2, 3]
    assert [m.value for m in history] == [row["test/acc_mean"] for row in result.rows]
    assert r.data.metrics["final/test/acc_mean"] == result.final["test/acc_mean"]
    artifacts = Path(r.info.artifact_uri.removeprefix("file://"))
    assert json.loads((artifacts / "summary.json").read_text())["status"] == "completed"
    assert not (Path.cwd() / "mlruns").exists()


def test_a_resumed_run_goes_on_in_its_mlflow_run(tmp_path, monkeypatch):
    """A run that crashed after its round-4 checkpoint, resumed: one MLflow run, KILLED after
    rounds 1-4, then FINISHED with rounds 1-6 (a second run held 5-6 before)."""
    mlflow = pytest.importorskip("mlflow")
    from fedmoo import engine

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = dict(small_cfg(rounds=6, checkpoint_every=2, logger="mlflow"), resume=True)
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    real_build = crash_in_round(monkeypatch, 5)      # dies in round 5 (after checkpoint 4)
    with pytest.raises(RuntimeError, match="node lost"):
        run(cfg, tmp_path)
    assert _written(tmp_path, "mlflow").splitlines()[-1] == "done"
    (r,) = client.search_runs([client.get_experiment_by_name("fedmoo").experiment_id])
    assert r.info.status == "KILLED"
    (tmp_path / "tracker-mlflow.log").unlink()
    monkeypatch.setattr(engine, "build", real_build)
    assert run(cfg, tmp_path).resumed_from == 4
    assert _written(tmp_path, "mlflow").splitlines()[-1] == "done"
    (again,) = client.search_runs([client.get_experiment_by_name("fedmoo").experiment_id])
    assert again.info.run_id == r.info.run_id and again.info.status == "FINISHED"
    history = client.get_metric_history(r.info.run_id, "test/acc_mean")
    assert [m.step for m in history] == [1, 2, 3, 4, 5, 6]
    assert again.data.params["algo.name"] == "fedavg"


def test_mlflow_artifacts_are_the_runs_files(tmp_path, caplog):
    """`fedmoo run` ends before its writer (it says where the data goes); the writer then logs
    the config, rounds.csv, clients.csv and summary.json as the MLflow run's artifacts, in
    <run dir>/mlartifacts/<run id>/artifacts/ (the layout the docs give)."""
    mlflow = pytest.importorskip("mlflow")
    r = cli_in(tmp_path)("run", "logger=mlflow", "rounds=2", "num_clients=6",
                         "clients_per_round=3", "data.max_samples=100", "progress=false",
                         "hydra.run.dir=run", env={"MLFLOW_TRACKING_URI": ""})
    assert r.returncode == 0, r.stderr
    job = tmp_path / "run"
    assert _written(job, "mlflow").splitlines()[-1] == "done"
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{job / 'mlflow.db'}")
    (x,) = client.search_runs([client.get_experiment_by_name("fedmoo").experiment_id])
    artifacts = job / "mlartifacts" / x.info.run_id / "artifacts"
    assert Path(x.info.artifact_uri.removeprefix("file://")) == artifacts.resolve()
    assert sorted(p.name for p in artifacts.iterdir()) == [
        "clients.csv", "config.yaml", "rounds.csv", "summary.json"]
    for name in ("clients.csv", "rounds.csv", "summary.json"):
        assert (artifacts / name).read_bytes() == (job / name).read_bytes()
    assert (artifacts / "config.yaml").read_bytes() == (job / ".hydra/config.yaml").read_bytes()


def test_prestarted_mlflow_writer_is_the_runs_writer(tmp_path, monkeypatch):
    """`fedmoo run` starts the writer before importing torch; the run's logger takes it (one
    writer process), and its run is recorded as a writer started by the logger would record it."""
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    loggers.prestart(["tensorboard", "mlflow"])
    spare = tracker_process._spare[loggers.WRITERS["mlflow"]]
    loggers.prestart("mlflow")                      # one spare at most
    assert list(tracker_process._spare.values()) == [spare]
    result = run(small_cfg(rounds=2, logger="mlflow"), tmp_path)
    assert tracker_process._spare == {} and spare.wait(timeout=60) == 0
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (r,) = client.search_runs([client.get_experiment_by_name("fedmoo").experiment_id])
    assert r.info.status == "FINISHED"
    assert [m.value for m in client.get_metric_history(r.info.run_id, "test/acc_mean")] == [
        row["test/acc_mean"] for row in result.rows]


def test_untaken_prestarted_writer_ends_without_a_store(tmp_path, monkeypatch):
    """A run refused before its logger exists leaves its prestarted writer unused: end of
    input ends it, with status 0 and nothing written (in its working directory either)."""
    pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)                     # the writer starts here
    loggers.prestart("mlflow")
    spare = tracker_process._spare.pop(loggers.WRITERS["mlflow"])
    spare.stdin.close()
    assert spare.wait(timeout=60) == 0 and spare.stdout.read() == ""
    assert list(tmp_path.iterdir()) == []


def test_mlflow_file_store_is_one_line(tmp_path):
    """MLflow 3 refuses file stores: `fedmoo run` stops with one line naming the two fixes."""
    pytest.importorskip("mlflow")
    uri = (tmp_path / "mlruns").as_uri()
    r = cli_in(tmp_path)("run", "logger=mlflow", "rounds=2", "num_clients=6",
                         "clients_per_round=3", "data.max_samples=100", "progress=false",
                         "hydra.run.dir=run",
                         env={"MLFLOW_TRACKING_URI": uri, "MLFLOW_ALLOW_FILE_STORE": "false"})
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"fedmoo: error: logger=mlflow: MLFLOW_TRACKING_URI={uri} is a file store, which this "
        "MLflow refuses; use a database (MLFLOW_TRACKING_URI=sqlite:///<path>/mlflow.db, or "
        "unset it for <run dir>/mlflow.db) or set MLFLOW_ALLOW_FILE_STORE=true")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "failed"


def test_wandb_refusal_is_one_line(tmp_path):
    """W&B's writer process refuses a bad setting (read when it starts, before the run asks
    for its W&B run): one line, exit 2, the run recorded as failed."""
    pytest.importorskip("wandb")
    r = cli_in(tmp_path)("run", "logger=wandb", "rounds=2", "num_clients=6",
                         "clients_per_round=3", "data.max_samples=100", "progress=false",
                         "hydra.run.dir=run", env={"WANDB_MODE": "bogus"})
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("fedmoo: error: logger=wandb: W&B refused the run: ")
    assert "'bogus'" in line and "'offline'" in line   # W&B's (pydantic's) own words vary
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "failed"


@pytest.mark.skipif(not plugin_available("hydra_plugins.hydra_joblib_launcher"),
                    reason="hydra-joblib-launcher is not installed (pip install -e '.[launchers]')")
@pytest.mark.slow
def test_mlflow_store_shared_by_parallel_jobs(tmp_path):
    """Two joblib worker processes log to one new SQLite store at once: both runs are there,
    named by their overrides, tagged with the sweep, each with its own artifacts."""
    mlflow = pytest.importorskip("mlflow")
    fresh_joblib_workers()       # workers of an earlier test would keep its environment
    db = tmp_path / "shared" / "mlflow.db"
    r = cli_in(tmp_path)("run", "-m", "hydra/launcher=local_gpus", "hydra.launcher.n_jobs=2",
                         "seed=0,1", "algo=fedavg", "logger=mlflow", "rounds=2", "num_clients=6",
                         "clients_per_round=3", "data.max_samples=100", "progress=false",
                         f"hydra.sweep.dir={tmp_path / 'sweep'}",   # absolute: joblib's workers
                         env={"MLFLOW_TRACKING_URI": f"sqlite:///{db}"})   # keep an old cwd
    assert r.returncode == 0, r.stderr
    for job in ("0", "1"):
        _written(tmp_path / "sweep" / job, "mlflow")
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{db}")
    runs = client.search_runs([client.get_experiment_by_name("fedmoo").experiment_id])
    assert sorted(x.info.run_name for x in runs) == ["seed=0", "seed=1"]   # what the sweep varies
    sweep = str((tmp_path / "sweep").resolve())
    folders = set()
    for x in runs:
        assert x.info.status == "FINISHED"
        assert x.data.tags["fedmoo.sweep"] == sweep
        job = Path(x.data.tags["fedmoo.run_dir"])
        assert job.parent == Path(sweep)
        assert x.data.params["seed"] == x.info.run_name[-1]
        assert x.data.tags["fedmoo.overrides"].startswith(x.info.run_name + " algo=fedavg ")
        assert len(client.get_metric_history(x.info.run_id, "test/acc_mean")) == 2
        artifacts = Path(x.info.artifact_uri.removeprefix("file://"))
        assert artifacts.parent.name == x.info.run_id
        assert artifacts.is_relative_to(db.parent / "mlartifacts")
        summary = json.loads((artifacts / "summary.json").read_text())
        assert summary == json.loads((job / "summary.json").read_text())
        folders.add(artifacts)
    assert len(folders) == 2


def test_new_sqlite_store_is_a_copy_of_an_empty_one(tmp_path, monkeypatch):
    """The empty store is made once per MLflow version (in the cache), and a copy of it is a
    store MLflow accepts as its own (its schema check passes, runs can be logged)."""
    mlflow = pytest.importorskip("mlflow")
    from fedmoo.run import mlflow_writer

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first, second = tmp_path / "a" / "mlflow.db", tmp_path / "b" / "mlflow.db"
    for db in (first, second):
        db.parent.mkdir()
        mlflow_writer._copy_empty_store(db, mlflow)
    empty = tmp_path / "cache" / "fedmoo" / f"mlflow-{mlflow.__version__}.db"
    assert first.read_bytes() == second.read_bytes() == empty.read_bytes()
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{second}")
    run_id = client.create_run(client.create_experiment("x")).info.run_id
    client.log_metric(run_id, "m", 1.5, step=2)
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "m")] == [(2, 1.5)]
    assert first.read_bytes() == empty.read_bytes()      # copies, not links


def test_tensorboard_hparams(tmp_path):
    """The config and the final metrics in the HParams plugin's records of the run's events."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    result = run(small_cfg(rounds=2, logger="tensorboard"), tmp_path)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["algo.name"].string_value == "fedavg"
    assert start.hparams["client.lr"].number_value == 0.05
    assert "_hparams_/experiment" not in content    # TensorBoard makes it from all the runs
    (scalar,) = events.Scalars("final/test/acc_mean")
    assert scalar.value == pytest.approx(result.final["test/acc_mean"])
    rows = events.Scalars("test/acc_mean")          # every rounds.csv row, one event each
    assert [(e.step, e.value) for e in rows] == [
        (r["round"], pytest.approx(r["test/acc_mean"])) for r in result.rows]


def test_tensorboard_hparams_of_a_mixed_sweep(tmp_path):
    """An algo=fedavg,fedfv sweep: no run writes an experiment header (TensorBoard would keep
    the first, FedAvg's, and drop FedFV's columns), so the HParams view takes the union of the
    runs' session records, which holds algo.alpha (FedFV's) beside the keys both have."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
    from tensorboard.plugins.hparams import plugin_data_pb2

    r = cli_in(tmp_path)("run", "-m", "algo=fedavg,fedfv", "logger=tensorboard", "rounds=2",
                         "num_clients=6", "clients_per_round=3", "data.max_samples=100",
                         "progress=false", "hydra.sweep.dir=sweep")
    assert r.returncode == 0, r.stderr
    runs = EventMultiplexer().AddRunsFromDirectory(str(tmp_path / "sweep"))
    runs.Reload()
    content = runs.PluginRunToTagToContent("hparams")
    assert len(content) == 2 and not any("_hparams_/experiment" in c for c in content.values())
    starts = {}
    for tags in content.values():
        start = plugin_data_pb2.HParamsPluginData.FromString(
            tags["_hparams_/session_start_info"]).session_start_info
        starts[start.hparams["algo.name"].string_value] = set(start.hparams)
    assert "algo.alpha" in starts["fedfv"] and "algo.alpha" not in starts["fedavg"]
    assert {"seed", "client.lr"} <= starts["fedavg"] & starts["fedfv"]


def _wandb_records(path: Path) -> list:
    """The protobuf records of a W&B offline ``.wandb`` file (a LevelDB-style log: 32 KiB
    blocks of [crc32, length, type] framed chunks after a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, out, pos, chunk = path.read_bytes(), [], 7, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:                  # block trailer
            pos += 32768 - pos % 32768
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if n == 0 and kind == 0:
            break
        chunk += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):                           # a full record, or its last piece
            rec = pb.Record()
            rec.ParseFromString(chunk)
            out.append(rec)
            chunk = b""
    return out


def test_wandb_group_is_the_sweeps_name():
    """Not the sweep's absolute path (machine-specific, up to 128 characters)."""
    assert loggers.sweep_name("/srv/me/sweeps/lr") == "lr"
    assert loggers.sweep_name("/x/multirun/2026-11-28/08-37-37") == "2026-11-28/08-37-37"
    assert loggers.sweep_name(None) is None


def test_wandb_offline_and_several_at_once(tmp_path, monkeypatch, capfd):
    """Offline, with WANDB_DIR set: W&B's files go there, not under the run directory."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    capfd.readouterr()
    result = run(small_cfg(rounds=3, logger=["wandb", "tensorboard"]), tmp_path / "run")
    _written(tmp_path / "run", "wandb")
    out, err = capfd.readouterr()
    assert not re.search(r"^wandb:", out + err, re.M)   # W&B's own lines: not in ours
    assert not (tmp_path / "run" / "wandb").exists()
    (log,) = (tmp_path / "elsewhere" / "wandb").glob("offline-run-*/run-*.wandb")

    def items(update):
        return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in update}

    # wandb's writer is a separate service process: on a busy machine its last records can land
    # just after run.finish() returns, so read the file until they are there (at most 20 s)
    end = time.time() + 20
    while True:
        recs = _wandb_records(log)
        history = [items(r.history.item) for r in recs
                   if r.WhichOneof("record_type") == "history"]
        if len(history) >= len(result.rows) or time.time() > end:
            break
        time.sleep(0.2)
    assert [h["test/acc_mean"] for h in history] == [row["test/acc_mean"] for row in result.rows]
    summaries = [items(r.summary.update) for r in recs if r.WhichOneof("record_type") == "summary"]
    assert any(s.get("test/acc_mean") == result.final["test/acc_mean"] for s in summaries)
    (run_rec,) = [r.run for r in recs if r.WhichOneof("record_type") == "run"]
    config = {i.key: json.loads(i.value_json) for i in run_rec.config.update}
    algo = config["algo"]
    assert (algo.get("value") or algo)["name"] == "fedavg"
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
