"""fedmoo prepare: expand a sweep, load each distinct dataset once, before jobs fan out."""

from __future__ import annotations

import pytest

from fedmoo.config import hparams
from fedmoo.cli import prepare
from fedmoo.data.synthetic import generate
from fedmoo.errors import UserError
from tests.inprocess import cli_in
from tests.conftest import declare_impl

CALLS: list[tuple[str, int, int | None]] = []


def fake_load(data_dir, num_users=30, alpha=1.0, beta=1.0, seed=0, iid=False, max_samples=None):
    """A loader that 'downloads' into data_dir once (a marker file) and records each call."""
    target = data_dir / "fake" / f"users{num_users}_seed{seed}.txt"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("downloaded\n")
        CALLS.append(("download", seed, max_samples))
    CALLS.append(("load", seed, max_samples))
    return generate(num_users=num_users, seed=seed, max_samples=max_samples)


def test_expand_sweeps_like_hydra():
    jobs = prepare.expand(["seed=0,1", "data.max_samples=50,60", "rounds=3",
                           "hydra/launcher=local_gpus", "hydra.sweep.dir=x"], multirun=True)
    assert jobs == [["seed=0", "data.max_samples=50", "rounds=3"],
                    ["seed=0", "data.max_samples=60", "rounds=3"],
                    ["seed=1", "data.max_samples=50", "rounds=3"],
                    ["seed=1", "data.max_samples=60", "rounds=3"]]
    assert len(prepare.expand(["seed=range(0,5)"], multirun=True)) == 5
    assert prepare.expand(["rounds=3"], multirun=False) == [["rounds=3"]]
    with pytest.raises(UserError, match="seed=0,1 is a sweep; add -m"):
        prepare.expand(["seed=0,1"], multirun=False)
    # a bad fixed value is refused by its knob, in the words `fedmoo run -m` uses
    with pytest.raises(UserError, match=r"^rounds='abc' must be a positive integer; e\.g\. "):
        prepare.expand(["rounds=abc", "seed=0,1"], multirun=True)


def test_datasets_are_deduplicated():
    jobs = prepare.expand(["seed=0,1,2", "data.max_samples=50,60", "algo=fedavg"], True)
    pairs = prepare.datasets(jobs)
    assert len(jobs) == 6 and len(pairs) == 2
    assert [p[0]["max_samples"] for p in pairs] == [50, 60]


@pytest.mark.slow
def test_prepare_downloads_each_dataset_once(tmp_path, monkeypatch, capsys):
    declare_impl(monkeypatch, "data", "fake", f"{__name__}:fake_load",
                 hparams.declared("data", "synthetic").params,
                 **dict(hparams.declared("data", "synthetic").defaults))
    monkeypatch.setenv("FEDMOO_DATA", str(tmp_path / "data"))
    CALLS.clear()
    args = ["-m", "data.name=fake", "num_clients=5", "data.seed=3,4", "seed=0,1,2"]
    assert prepare.main(args) == 0
    assert sorted(CALLS) == [("download", 3, None), ("download", 4, None), ("load", 3, None),
                             ("load", 4, None)]
    assert sorted(p.name for p in (tmp_path / "data" / "fake").iterdir()) == \
        ["users5_seed3.txt", "users5_seed4.txt"]
    out = capsys.readouterr().out
    assert out.count("ready: data=fake in ") == 2
    assert out.strip().endswith("prepared 2 dataset(s) for 6 job(s)")
    CALLS.clear()
    assert prepare.main(args) == 0                      # cached: loads, no download
    assert [c[0] for c in CALLS] == ["load", "load"]


@pytest.mark.slow
def test_prepare_cli(tmp_path):
    cli = cli_in(tmp_path)   # in-process (tests.inprocess)
    r = cli("prepare", "-m", "data.max_samples=50,60", "seed=0,1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("ready: data=synthetic") == 2
    assert "prepared 2 dataset(s) for 4 job(s)" in r.stdout
    r = cli("prepare", "algo=nope")
    assert r.returncode == 2 and "unknown algo 'nope'" in r.stderr
    assert "prepare [overrides] [-m]" in cli("--help").stdout
