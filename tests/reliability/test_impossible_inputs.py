"""Impossible inputs end with one line and exit status 2: a device that holds no data, a
lockstep group of no rows, and anything whose memory estimate exceeds the limit (checked
before allocating, in every command). The sizes here stay small enough to be harmless even if
a check were missing: FEDMOO_MEMORY_LIMIT makes them too big."""

from __future__ import annotations

import pytest
import torch

from fedmoo import budget, models
from fedmoo.errors import UserError
from fedmoo.config import schema
from fedmoo.run.setup import resolve_device
from tests.inprocess import cli_in
from tests.reliability.helpers import ONE_THREAD, SMALL, assert_no_result


def _one_line(r, *needles):
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedmoo: error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("name", ["meta", "mps", "xla:0", "nope"])
def test_only_cpu_and_cuda_devices(name):
    assert schema.refusal("device", name) == (f"device={name!r} must be auto, cpu, cuda or "
                                              "cuda:N; e.g. device=auto")


def test_cuda_index_must_be_visible():
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="CUDA is not available"):
            resolve_device("cuda:0")
        return
    n = torch.cuda.device_count()
    with pytest.raises(UserError, match=rf"device=cuda:{n} but {n} GPU\(s\) are visible"):
        resolve_device(f"cuda:{n}")


def test_device_meta_is_refused_not_completed(tmp_path):
    # device=meta once trained to a traceback (Cannot copy out of meta tensor)
    cli = cli_in(tmp_path)
    r = cli("run", *SMALL, "rounds=1", "device=meta", "hydra.run.dir=out", env=ONE_THREAD)
    _one_line(r, "device='meta' must be auto, cpu, cuda or cuda:N")
    assert not (tmp_path / "out").exists()     # refused before Hydra made the run directory


@pytest.mark.parametrize("value", ["0", "-3", "abc", "2.5"])
def test_lockstep_max_rows_must_be_positive(tmp_path, value):
    cli = cli_in(tmp_path)
    r = cli("run", "-m", "hydra/launcher=lockstep", f"hydra.launcher.max_rows={value}", *SMALL,
            "rounds=1", "seed=0,1", "hydra.sweep.dir=sw", env=ONE_THREAD)
    _one_line(r, f"hydra.launcher.max_rows={value if value != 'abc' else repr(value)} must be a "
                 "positive integer")
    assert not (tmp_path / "sw").exists()     # refused when Hydra made the launcher


@pytest.mark.parametrize("text,n", [("123", 123), ("8G", 8 * 2**30), ("1.5g", 3 * 2**29),
                                    ("512MiB", 2**29), ("64K", 2**16)])
def test_the_memory_limit_variable(monkeypatch, text, n):
    monkeypatch.setenv("FEDMOO_MEMORY_LIMIT", text)
    assert budget.env_limit() == n and budget.available() <= n


def test_a_malformed_memory_limit_is_one_line(tmp_path):
    r = cli_in(tmp_path)("describe", "--model-only", env={"FEDMOO_MEMORY_LIMIT": "lots"})
    _one_line(r, "FEDMOO_MEMORY_LIMIT='lots' is not a memory size")


def test_a_model_is_refused_before_its_parameters_exist(monkeypatch):
    monkeypatch.setenv("FEDMOO_MEMORY_LIMIT", "1M")
    made = []
    monkeypatch.setattr(torch.nn.Linear, "reset_parameters",
                        lambda self: made.append(self.weight.device.type))
    with pytest.raises(UserError, match=r"^model=mlp \(3\.55e\+05 parameters\) needs about "
                                        r"1\.35 MiB, more than the 1\.00 MiB of memory available "
                                        r"\(FEDMOO_MEMORY_LIMIT\); choose a smaller model"):
        models.build({"name": "mlp", "hidden": [5000]}, (60,), 10)
    assert set(made) == {"meta"}              # counted on the meta device only
    monkeypatch.setenv("FEDMOO_MEMORY_LIMIT", "2M")
    assert sum(p.numel() for p in models.build({"name": "mlp", "hidden": [5000]},
                                               (60,), 10).parameters()) == 355010


def test_a_tiny_limit_gives_sizes_that_differ(monkeypatch):
    # FEDMOO_MEMORY_LIMIT=100 said "needs about 0 MiB, more than the 0 MiB"
    monkeypatch.setenv("FEDMOO_MEMORY_LIMIT", "100")
    with pytest.raises(UserError, match=r"^model=mlp \(720 parameters\) needs about 2\.81 KiB, "
                                        r"more than the 100 bytes of memory available "):
        models.build({"name": "mlp", "hidden": [10]}, (60,), 10)      # 4 x 720 = 2880 bytes
    assert [budget.size(n) for n in (2**30 * 26.4, 2**20 * 271.4, 2**20 * 99.96, 1023)] == [
        "26.4 GiB", "271 MiB", "100.0 MiB", "1023 bytes"]
    assert budget.sizes(2**20 + 1, 2**20) == ("1,048,577 bytes", "1,048,576 bytes")


def test_describe_refuses_a_model_that_cannot_fit(tmp_path):
    # `fedmoo describe model=mlp "model.hidden=[100000000]"` was killed by the kernel while
    # `fedmoo run` refused it; 7.1e7 parameters (284 MB) against a 100 MB limit here
    r = cli_in(tmp_path)("describe", "model=mlp", "model.hidden=[1000000]", "--model-only",
                         env={"FEDMOO_MEMORY_LIMIT": "100M"})
    _one_line(r, "model=mlp (7.1e+07 parameters) needs about 271 MiB, more than the 100 MiB of "
                 "memory available (FEDMOO_MEMORY_LIMIT)")


@pytest.mark.parametrize("command", ["run", "describe"])
def test_generated_data_that_cannot_fit_is_refused_before_generating(tmp_path, command):
    # num_clients=100000 on synthetic grew to 23 GB and was killed; 3000 users' 1.3 million
    # samples (about 0.3 GiB) against a 100 MB limit here
    cli = cli_in(tmp_path)
    args = ["progress=false", "rounds=1", "hydra.run.dir=out"] if command == "run" else []
    r = cli(command, "data=synthetic", "num_clients=3000", *args,
            env={"FEDMOO_MEMORY_LIMIT": "100M", **ONE_THREAD})
    _one_line(r, "data=synthetic with 3000 users (1,", "samples of 60 features) needs about",
              "MiB, more than the 100 MiB of memory available (FEDMOO_MEMORY_LIMIT); set "
                 "fewer num_clients")
    assert_no_result(tmp_path)


def test_the_number_of_users_is_checked_before_any_draw(monkeypatch):
    from fedmoo.data import synthetic

    monkeypatch.setenv("FEDMOO_MEMORY_LIMIT", "1G")
    with pytest.raises(UserError, match=r"^data=synthetic with 1000000000000 users \(at least 20 "
                                        r"samples each\) needs about 4.*GiB, more than the 1\.00 "
                                        r"GiB"):
        synthetic.generate(num_users=10**12, max_samples=20)
