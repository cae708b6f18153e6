"""Every config value is checked before work starts: one line naming the key, never a traceback."""

from __future__ import annotations

import pytest
import torch

from fedmoo.cli.overrides import check_overrides
from fedmoo.errors import UserError
from fedmoo.run import setup
from fedmoo.config.schema import check
from fedmoo.run.loop import run
from tests.conftest import small_cfg


@pytest.mark.parametrize("key,value,message", [
    ("partition.seed", -1, "partition.seed=-1 must be a non-negative integer below 2**63"),
    ("data.seed", -1, "data.seed=-1 must be a non-negative integer below 2**63"),
    ("attack.seed", -1, "attack.seed=-1 must be a non-negative integer below 2**63"),
    ("partition.seed", "abc", "partition.seed='abc' must be a non-negative integer"),
    ("seed", 2**64, f"seed={2**64} must be a non-negative integer below 2**63"),
    ("seed", True, "seed=True must be a non-negative integer"),
    ("loss_threshold", -1, "loss_threshold=-1 must be a number in [0.0, inf)"),
    ("client.lr", float("inf"), "client.lr=inf must be a number in (0.0, inf)"),
    ("model.softmax_output", "maybe", "model.softmax_output='maybe' must be true or false"),
    ("progress", "maybe", "progress='maybe' must be true or false"),
    ("data.alpha", "abc", "data.alpha='abc' must be a number"),
    ("data.iid", "no", "data.iid='no' must be true or false"),
])
def test_bad_values(key, value, message):
    cfg = small_cfg(**{key: value})
    with pytest.raises(UserError) as e:
        check(cfg)
    assert str(e.value).startswith(message)


def test_removed_group():
    cfg = small_cfg()
    del cfg["algo"]
    with pytest.raises(UserError, match=r"no algo section \(removed with ~algo\?\)"):
        check(cfg)


def test_the_largest_seed_is_fine():
    check(small_cfg(seed=2**63 - 1, **{"partition.seed": 0}))


@pytest.mark.parametrize("algo,kept", [("fedavg", 0), ("ditto", 6), ("fedfv", 6), ("afl", 1)])
def test_the_estimate_counts_the_models_an_algorithm_keeps(tmp_path, monkeypatch, algo, kept):
    """Ditto's personal models and FedFV's history (one model each of the 6 clients), AFL's
    averaged iterate: without them a run accepted under a 300 MB limit used 3 GB."""
    k = 6 if algo == "afl" else 3                    # afl: every client each round
    cfg = small_cfg(algo={"name": algo}, clients_per_round=k)
    need = 4 * 610 * (3 + k + kept)                  # logreg 60 -> 10: d = 610, float32
    monkeypatch.setattr(setup, "available", lambda device: need - 1)
    with pytest.raises(UserError, match=rf" need at least {need:,} bytes for a round of {k} "
                                        rf"clients.*, but cpu has {need - 1:,} bytes free;"):
        run(cfg, tmp_path)
    if algo == "ditto":
        with pytest.raises(UserError) as e:
            run(cfg, tmp_path)
        assert str(e.value) == (
            "model=logreg does not fit: 610 parameters need at least 29,280 bytes for a round of "
            "3 clients and the 6 model-sized vectors algo=ditto keeps, but cpu has 29,279 bytes "
            "free; choose a smaller model, fewer clients_per_round or num_clients, or a smaller "
            "client.batch_size")


def test_a_model_that_cannot_fit_is_refused_before_allocation(tmp_path, monkeypatch):
    cfg = small_cfg(model={"name": "mlp", "hidden": [200]})
    d = setup.parameter_count(cfg, _fed(cfg))
    assert d == 60 * 200 + 200 + 200 * 10 + 10
    params_only = setup.lower_bound(d, 3)
    assert params_only == 4 * d * (3 + 3)
    monkeypatch.setattr(setup, "available", lambda device: params_only - 1)
    with pytest.raises(UserError, match=r"^model=mlp does not fit: 1.42e\+04 parameters need at "
                                        r"least .* for a round of 3 clients"):
        run(cfg, tmp_path)
    # the activations of a batch count too: 200 + 200 + 10 numbers per sample (leaf outputs)
    model = __import__("fedmoo").models.build(cfg["model"], (60,), 10)
    acts = setup.activations_per_sample(model, torch.zeros(1, 60))
    assert acts == sum(m.out_features for m in model.modules()
                       if isinstance(m, torch.nn.Linear)) + 200   # + the ReLU's output
    full = setup.lower_bound(d, 3, acts, batch=10)
    monkeypatch.setattr(setup, "available", lambda device: full - 1)
    with pytest.raises(UserError, match=r"activations per sample x batch 10"):
        run(cfg, tmp_path / "acts")
    monkeypatch.setattr(setup, "available", lambda device: full)
    run(cfg, tmp_path / "ok")


def _fed(cfg):
    from fedmoo import data

    return data.load_federated(cfg["data"], cfg["partition"], cfg["num_clients"], cfg["data_dir"])


def test_a_value_with_an_unquoted_space():
    err = check_overrides(["rounds=1", "data_dir=/data/my", "sets"])
    assert err == ("'sets' is not an override (key=value): a value with spaces must be quoted as "
                   "a whole, e.g. 'data_dir=\"/data/my sets\"' (single quotes for the shell, "
                   "double quotes for Hydra)")
    assert check_overrides(["--cfg", "job", "rounds=1"]) is None


def test_unknown_model_key_lists_the_valid_ones():
    from fedmoo import models

    with pytest.raises(UserError, match=r"^model.foo is not a hyperparameter of model=mlp; "
                                        r"valid keys: hidden$"):
        models.build({"name": "mlp", "foo": 1}, (60,), 10)
