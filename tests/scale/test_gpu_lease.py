"""Per-GPU leases on CPU with fake GPU counts: distinct GPUs, release, stale locks, no CUDA."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fedmoo.errors import UserError
from fedmoo.run.gpu_lease import lease_device, try_acquire, visible_gpu_count
from fedmoo.run.locks import try_lock
from tests.conftest import ROOT


def held(locks: Path) -> list[str]:
    """The GPU lock files some process holds right now."""
    out = []
    for p in sorted(locks.glob("gpu*.lock")):
        got = try_lock(p)
        if got is None:
            out.append(p.name)
        else:
            got.release()
    return out


def test_visible_gpu_count(tmp_path):
    proc = tmp_path / "gpus"
    proc.mkdir()
    for bus in ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0"):
        (proc / bus).mkdir()
    assert visible_gpu_count({}, proc) == 3
    assert visible_gpu_count({}, tmp_path / "absent") == 0
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": "2,0"}, proc) == 2
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": ""}, proc) == 0
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": "-1"}, proc) == 0
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": "1,-1,2"}, proc) == 1
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": "GPU-5f3c,GPU-77aa"}, proc) == 2


def test_no_op_cases(tmp_path):
    locks = tmp_path / "locks"
    with lease_device("auto", num_gpus=1, lock_dir=locks) as dev:
        assert dev == "auto"
    with lease_device("auto", num_gpus=0, lock_dir=locks) as dev:
        assert dev == "auto"
    with lease_device("cuda:1", num_gpus=4, lock_dir=locks) as dev:
        assert dev == "cuda:1"
    with lease_device("cpu", num_gpus=4, lock_dir=locks) as dev:
        assert dev == "cpu"
    assert not locks.exists()


def test_leases_are_distinct_and_released(tmp_path):
    locks = tmp_path / "locks"
    with lease_device("auto", num_gpus=3, lock_dir=locks) as a:
        with lease_device("auto", num_gpus=3, lock_dir=locks) as b:
            with lease_device("auto", num_gpus=3, lock_dir=locks) as c:
                assert [a, b, c] == ["cuda:0", "cuda:1", "cuda:2"]
                assert held(locks) == ["gpu0.lock", "gpu1.lock", "gpu2.lock"]
                assert try_acquire(locks, 3) is None        # all busy
            assert held(locks) == ["gpu0.lock", "gpu1.lock"]
        with lease_device("auto", num_gpus=3, lock_dir=locks) as again:
            assert again == "cuda:1"                          # the first free one
    assert held(locks) == []


def test_released_on_exception(tmp_path):
    locks = tmp_path / "locks"
    with pytest.raises(RuntimeError), lease_device("auto", num_gpus=2, lock_dir=locks):
        raise RuntimeError("job failed")
    assert held(locks) == []


def test_lease_of_a_killed_process_is_free(tmp_path):
    """A job killed with SIGKILL while holding cuda:0 leaves no lease behind."""
    locks = tmp_path / "locks"
    script = textwrap.dedent(f"""
        import time
        from fedmoo.run.gpu_lease import lease_device
        with lease_device("auto", num_gpus=2, lock_dir={str(locks)!r}) as dev:
            print(dev, flush=True)
            time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "cuda:0"
    assert held(locks) == ["gpu0.lock"]
    p.kill()
    p.wait(timeout=30)
    with lease_device("auto", num_gpus=2, lock_dir=locks) as dev:
        assert dev == "cuda:0"
    assert held(locks) == []


def test_all_busy_times_out_with_user_error(tmp_path):
    locks = tmp_path / "locks"
    with lease_device("auto", num_gpus=2, lock_dir=locks), \
            lease_device("auto", num_gpus=2, lock_dir=locks), \
            pytest.raises(UserError, match="all 2 GPUs stayed leased"), \
            lease_device("auto", num_gpus=2, lock_dir=locks, timeout_s=0.2):
        pass


@pytest.mark.slow
def test_parallel_processes_get_different_gpus(tmp_path):
    """Four processes race for three GPUs: three distinct GPUs at once; the fourth waits for a
    release and then gets a GPU."""
    locks = tmp_path / "locks"
    script = textwrap.dedent(f"""
        import sys, time
        from fedmoo.run.gpu_lease import lease_device
        with lease_device("auto", num_gpus=3, lock_dir={str(locks)!r}) as dev:
            print(dev, time.monotonic(), flush=True)
            time.sleep(1.0)
        print("released", time.monotonic(), flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env=env) for _ in range(4)]
    outs = [p.communicate(timeout=60)[0].split("\n") for p in procs]
    assert all(p.returncode == 0 for p in procs)
    devices = [o[0].split()[0] for o in outs]
    assert set(devices) <= {"cuda:0", "cuda:1", "cuda:2"} and len(set(devices)) == 3
    # the process that shared a GPU started only after another released it
    starts = sorted((float(o[0].split()[1]), d) for o, d in zip(outs, devices))
    releases = sorted(float(o[1].split()[1]) for o in outs)
    assert starts[-1][0] >= releases[0] - 0.05
    assert held(locks) == []


def test_parent_process_does_no_cuda_work():
    """Resolving the launcher's ${fedmoo.gpus:} (what a sweep's parent does) imports no torch."""
    code = ("import sys, fedmoo.cli.app; from omegaconf import OmegaConf; "
            "c = OmegaConf.create({'n': '${fedmoo.gpus:}'}); "
            "print(c.n, 'torch' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "0,1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2", "False"]
