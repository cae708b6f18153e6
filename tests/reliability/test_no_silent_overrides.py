"""Overrides that would change nothing but the record are refused: a key the dataset fixes set
to another value, and a number that is not finite anywhere in the config."""

from __future__ import annotations

import functools

import pytest
import torch

from fedmoo.cli.config import compose
from fedmoo.data.federated import Source
from fedmoo.errors import UserError
from tests.reliability.test_error_table import test_user_error_is_one_line_exit_2 as one_line

CASES = [
    pytest.param(["data.num_classes=1"], ["data.num_classes=1 does not describe data=synthetic",
                                          "num_classes 10", "remove the override"], id="classes"),
    pytest.param(["data.input_shape=[1000]"], ["data.input_shape=[1000]", "input_shape [60]"],
                 id="shape"),
    pytest.param(["+data.task=multitask"], ["data.task is not a hyperparameter of data=synthetic"],
                 id="task"),        # the loader fixes the task: it is no setting
    pytest.param(["partition=dirichlet", "partition.beta=nan"],
                 ["partition.beta=nan must be a number in (0.0, inf)"], id="beta-nan"),
    pytest.param(["partition.split=pooled", "partition.fractions=[0.8,nan,0.1]"],
                 ["partition.fractions=[0.8, nan, 0.1] must be three non-negative numbers"],
                 id="list-nan"),
    pytest.param(["algo=qfedavg", "algo.q=inf"], ["algo.q=inf must be a number in [0.0, inf)"],
                 id="hparam-inf"),
    pytest.param(["data.alpha=-inf"], ["data.alpha=-inf must be a number in [0.0, inf)"],
                 id="data-inf"),
]


@pytest.mark.parametrize("args,needles", CASES)
def test_refused_in_one_line_exit_2(tmp_path, args, needles):
    one_line(tmp_path, args, needles)


def _source(shape=(2, 3), classes=4, task="classification") -> Source:
    return Source(x=torch.zeros(1, *shape), y=torch.zeros(1, dtype=torch.long),
                  is_test=torch.zeros(1, dtype=torch.bool), num_classes=classes,
                  input_shape=shape, task=task)


def test_described_keys_must_match_the_samples():
    from fedmoo.data import check_described

    src = _source()
    check_described("d", {"input_shape": [2, 3], "num_classes": 4}, src)
    check_described("d", {"name": "d"}, src)          # not given: nothing to compare
    with pytest.raises(UserError, match=r"data.input_shape=\[3, 2\] does not describe data=d"):
        check_described("d", {"input_shape": [3, 2]}, src)
    with pytest.raises(UserError, match="data.num_classes=5 .* num_classes 4"):
        check_described("d", {"num_classes": 5}, src)


def test_celebas_input_shape_follows_its_size():
    assert compose(["data=celeba", "data.size=32"])["data"]["input_shape"] == [3, 32, 32]


def test_samples_that_are_not_finite_are_refused_at_load(tmp_path, monkeypatch):
    """A damaged file's NaN feature is a one-line refusal naming the sample, not a NaN run."""
    from fedmoo.data import synthetic
    from tests.reliability.test_error_table import test_user_error_is_one_line_exit_2 as one

    real = synthetic.load

    @functools.wraps(real)                  # the loader's options stay visible
    def damaged(*a, **k):
        src = real(*a, **k)
        x = src.x.clone()
        x[7, 3] = float("nan")
        return Source(**{**{f: getattr(src, f) for f in src.__dataclass_fields__}, "x": x})

    monkeypatch.setattr(synthetic, "load", damaged)
    one(tmp_path, [], ["data=synthetic: its features hold 1 values that are not finite",
                       "sample 7"])
