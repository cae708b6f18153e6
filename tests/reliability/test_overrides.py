"""Override checks that run before Hydra (no subprocess)."""

from __future__ import annotations

from fedmoo.cli.hydra_run import argv, plan
from fedmoo.cli.overrides import check_new_keys


def test_hydra_options_move_first_and_group_booleans_are_quoted():
    args = ["seed=0,1", "-m", "debug=true", "--cfg", "job", "resume=false"]
    assert argv(plan(args)) == ["-m", "--cfg", "job", "seed=0,1", "debug='true'",
                                       "resume=false"]


def test_new_keys_only_inside_known_top_level_keys():
    assert check_new_keys(["+algo.mu=0.1", "+hydra.job.env_set.X=1", "rounds=3"]) is None
    msg = check_new_keys(["+rounds=3", "+roundz=3"])
    assert msg == ("'+roundz=3' adds a config key 'roundz' that fedmoo does not use; did you "
                   "mean rounds? remove it (`fedmoo run --cfg job` shows the valid keys)")
