"""logger=mlflow / wandb / several: real offline records, read back."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest

from fedmoo.errors import UserError
from fedmoo.run import loggers
from fedmoo.run.loop import run
from tests.conftest import small_cfg


def test_unknown_logger_is_one_line(tmp_path):
    with pytest.raises(UserError, match=r"^logger='foo' is not valid; choose one or a list of: "
                                        r"none, tensorboard, mlflow, wandb$"):
        loggers.build(["tensorboard", "foo"], tmp_path)


def test_mlflow_local_store(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = run(small_cfg(rounds=3, logger="mlflow"), tmp_path)
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


def test_wandb_offline_and_several_at_once(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    result = run(small_cfg(rounds=3, logger=["wandb", "tensorboard"]), tmp_path)
    (log,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")

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
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
