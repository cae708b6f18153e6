"""Every user mistake ends with exit status 2, one `fedmoo: error:` line, and no fake result.

The table runs ``fedmoo.cli.main.main`` in-process (tests.inprocess: no interpreter and torch
start-up per case); test_unwritable_output_directory checks the real process's exit status."""

from __future__ import annotations

import pytest

from fedmoo.cli.groups import group_options
from tests.inprocess import cli_in
from tests.reliability.helpers import ONE_THREAD, SMALL, assert_no_result


def _needs(group: str, option: str):
    return pytest.mark.skipif(option not in group_options(group),
                              reason=f"{group}={option} is not in this checkout")


CASES = [
    # unknown names (checked before Hydra runs)
    pytest.param(["algo=nope"], ["unknown algo 'nope'", "fedavg"], id="algo"),
    pytest.param(["data=nope"], ["unknown data 'nope'", "synthetic"], id="data"),
    pytest.param(["model=nope"], ["unknown model 'nope'", "logreg"], id="model"),
    pytest.param(["partition=nope"], ["unknown partition 'nope'", "iid"], id="partition"),
    pytest.param(["attack=nope"], ["unknown attack 'nope'", "none"], id="attack"),
    pytest.param(["data=digits", "data.name=nope"], ["unknown data 'nope'", "digits"],
                 id="data.name"),   # (it named digits' first key as not declared by nope)
    # keys Hydra would add silently or reject with a multi-line block
    pytest.param(["+foo=bar"], ["'+foo=bar'", "'foo'", "remove it"], id="new-top-key"),
    pytest.param(["engine=batched", "engine.program=vmap"],
                 ["engine.program cannot be set on its own",
                  "'engine={name:batched,program:VALUE}'"], id="engine-option-alone"),
    pytest.param(["-m", "seed=interval(0,1)"],     # was a traceback and exit status 1
                 ["seed: fedmoo's sweeper does not sweep INTERVAL_SWEEP", "range(...)"],
                 id="interval-sweep"),
    pytest.param(["client.lrr=0.1"], ["client.lrr is not a config key", "did you mean client.lr",
                                      "weight_decay"], id="unknown-key"),
    pytest.param(["-m", "hydra/launcher=lockstep", "hydra.launcher.maxrows=5", "seed=0,1"],
                 ["hydra.launcher.maxrows is not a config key"],   # was Hydra's "Sweeping over
                 id="unknown-launcher-key"),                       # Hydra's configuration"
    # wrong types and out-of-range values
    pytest.param(["rounds=abc"], ["rounds='abc'", "positive integer"], id="type"),
    pytest.param(["client.lr=-0.5"], ["client.lr=-0.5", "(0.0, inf)"], id="negative-lr"),
    pytest.param(["clients_per_round=9"], ["clients_per_round=9", "num_clients=6",
                                           "clients_per_round<=6"], id="k-gt-n"),
    pytest.param(["algo.eta=0"], ["algo.eta=0 must be a number in (0.0, inf)"], id="algo-hparam"),
    # an interpolation in an override, resolved with the job's config (once a traceback)
    pytest.param(["data_dir=${oc.env:FEDMOO_TEST_UNSET}"], [
        "invalid configuration: ", "Environment variable 'FEDMOO_TEST_UNSET' not found"],
        id="unset-env"),
    # data that cannot be partitioned: 5 samples (4 for training) for 6 clients
    pytest.param(["partition=iid", "data.num_users=1", "data.max_samples=5"],
                 ["partition=iid", "6 clients", "4 samples", "lower num_clients"], id="too-few-samples"),
    # after merging the data helper's datasets and models
    pytest.param(["data=cifar10", "partition=iid", "data.download=false"],   # (no setup note)
                 ["data=cifar10", "files not found", "nodata"], id="missing-dataset",
                 marks=_needs("data", "cifar10")),
    pytest.param(["model=cnn_cifar"], ["model=cnn_cifar", "[60]"],
                 id="model-shape", marks=_needs("model", "cnn_cifar")),
]


@pytest.mark.parametrize("args,needles", CASES)
def test_user_error_is_one_line_exit_2(tmp_path, args, needles):
    cli = cli_in(tmp_path)
    other_data = any(a.startswith("data=") for a in args)  # synthetic's keys would not fit
    base = [a for a in SMALL if not (other_data and a.startswith("data."))]
    r = cli("run", *base, "rounds=2", "hydra.run.dir=out", *args,
            env={"FEDMOO_DATA": str(cli.cwd / "nodata"), **ONE_THREAD})
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("fedmoo: error: ")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in r.stdout
    assert_no_result(cli.cwd)


def test_unwritable_output_directory(cli):   # a real `python -m fedmoo` process
    (cli.cwd / "afile").write_text("")  # a file where a directory should be (works as root too)
    r = cli("run", *SMALL, "rounds=2", "hydra.run.dir=afile/run", env=ONE_THREAD)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot write the output directory afile/run" in lines[0]
    assert "hydra.run.dir" in lines[0]


def test_debug_true_shows_the_traceback(tmp_path):
    cli = cli_in(tmp_path)
    r = cli("run", *SMALL, "hydra.run.dir=out", "rounds=abc", "debug=true", env=ONE_THREAD)
    assert r.returncode == 2
    assert "Traceback" in r.stderr and r.stderr.strip().splitlines()[-1].startswith(
        "fedmoo: error: rounds='abc'")


def test_a_multi_data_sweeps_hint_names_only_keys_every_option_has(tmp_path):
    """It said "did you mean data.seed? valid keys: ..., seed" from the default data's keys
    although data=digits has no data.seed."""
    r = cli_in(tmp_path)("run", "-m", "data=digits,synthetic", "data.sed=1")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "fedmoo: error: data.sed is not a config key; valid keys of data (in every "
        "data=digits,synthetic): input_shape, name, num_classes; see `fedmoo run --cfg job`")
    assert not any(tmp_path.iterdir())
