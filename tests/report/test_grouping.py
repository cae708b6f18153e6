"""`fedmoo table` / `fedmoo plot` never merge configurations, count a seed once and survive damaged
files (job directories written by the test)."""

from __future__ import annotations

import os
import shutil

import yaml

from fedmoo.cli.main import main
from fedmoo.report.jobs import find_jobs, group_jobs, label_keys
from fedmoo.report.tables import build_table
from tests.report.test_tables import _job, config_of

SPEC = {"metrics": [{"key": "test/acc_mean"}]}


def _digits(rounds, seed=0):
    return {**config_of(["data=digits"], seed), "rounds": rounds, "eval_every": 1}


def _table(capsys, *args):
    rc = main(["table", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_runs_of_different_length_are_two_configurations(tmp_path):
    _job(tmp_path, "a", ["data=digits"], 0, {"test/acc_mean": 90.0}, config=_digits(50))
    _job(tmp_path, "b", ["data=digits", "debug=fast"], 0, {"test/acc_mean": 20.0},
         config=_digits(3))
    jobs = find_jobs([tmp_path])
    assert label_keys(group_jobs(jobs)) == ["rounds"]
    recs, problems = build_table(jobs, SPEC)
    assert [(r["_label"], r["n_seeds"], r["test/acc_mean/mean"]) for r in recs] == [
        ("rounds=3", 1, 20.0), ("rounds=50", 1, 90.0)]
    assert problems == []
    # a spec finds its row by the overrides; the key that tells the rest apart joins the label
    recs, _ = build_table(jobs, {**SPEC, "group_by": ["data"], "rows": {"digits": {"label": "D"}}})
    assert sorted(r["_label"] for r in recs) == ["D (rounds=3)", "D (rounds=50)"]


def test_seeds_and_keys_that_follow_the_seed_are_one_configuration(tmp_path):
    for seed in (0, 1):
        cfg = {**_digits(50, seed), "partition": {"name": "shards", "seed": seed}}
        d = _job(tmp_path, str(seed), ["data=digits"], seed, {"test/acc_mean": 80.0 + seed},
                 config=cfg)
        hydra = {**cfg, "partition": {"name": "shards", "seed": "${seed}"}}  # Hydra's record
        (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(hydra))
    recs, _ = build_table(find_jobs([tmp_path]), SPEC)
    assert len(recs) == 1 and recs[0]["n_seeds"] == 2 and recs[0]["test/acc_mean/mean"] == 80.5


def test_a_repeated_seed_counts_once_and_is_reported(tmp_path, capsys):
    old = _job(tmp_path, "old", ["algo=fedavg"], 0, {"test/acc_mean": 70.0})
    _job(tmp_path, "new", ["algo=fedavg"], 0, {"test/acc_mean": 80.0})
    os.utime(old / "summary.json", (1e9, 1e9))
    rc, out, err = _table(capsys, str(tmp_path), "--metric", "test/acc_mean")
    assert rc == 0
    assert "| all | 80.00 | 1 | seed 0 repeated: 1 job(s) not counted |" in out
    assert err.strip() == (f"fedmoo table: not included: {old}: repeats seed 0 of "
                           f"{tmp_path / 'new'} (the one counted)")


def test_a_truncated_summary_is_a_corrupt_job_not_a_traceback(tmp_path, capsys):
    _job(tmp_path, "0", ["algo=fedavg"], 0, {"test/acc_mean": 80.0})
    bad = _job(tmp_path, "1", ["algo=fedavg"], 1, {"test/acc_mean": 90.0})
    text = (bad / "summary.json").read_text()
    (bad / "summary.json").write_text(text[: len(text) // 2])
    rc, out, err = _table(capsys, str(tmp_path), "--metric", "test/acc_mean")
    assert rc == 0
    assert "| all | 80.00 | 1 | 1 corrupt |" in out
    assert err.startswith(f"fedmoo table: not included: {bad}: corrupt (summary.json is not "
                          "valid JSON: ")
    # nothing readable at all: exit status 2 and one line
    shutil.rmtree(tmp_path / "0")
    shutil.rmtree(bad / ".hydra")
    rc, out, err = _table(capsys, str(tmp_path))
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"fedmoo: error: nothing readable under {tmp_path}: 1 job(s), all "
                          "corrupt")


def test_a_truncated_rounds_csv_makes_a_finished_job_corrupt(tmp_path):
    rows = [{"round": r, "test/acc_mean": 10.0 * r} for r in (1, 2, 3)]
    for seed in (0, 1):
        _job(tmp_path, str(seed), ["data=digits"], seed, {"test/acc_mean": 30.0},
             config=_digits(3, seed), summary={"rounds_completed": 3}, rounds=rows)
    cut = tmp_path / "1" / "rounds.csv"
    cut.write_bytes(cut.read_bytes()[:-3])  # the last row loses "0\r\n": "3,30."
    recs, problems = build_table(find_jobs([tmp_path]), SPEC)
    assert recs[0]["n_seeds"] == 1 and recs[0]["_notes"] == ["1 corrupt"]
    assert problems == [(f"{tmp_path / '1'}: corrupt (rounds.csv: its last line is cut mid-row; "
                         "2 rows where summary.json implies 3)")]


def test_jobs_made_from_python_are_found(tmp_path):
    for seed in (0, 1):
        d = _job(tmp_path, str(seed), [], seed, {"test/acc_mean": 50.0 + seed},
                 config={**_digits(50, seed), "algo": {"name": "fedfv", "alpha": 0.1}})
        shutil.rmtree(d / ".hydra")
    _job(tmp_path, "2", [], 0, {"test/acc_mean": 40.0},
         config={**_digits(50), "algo": {"name": "fedavg", "eta": 1.0}})
    shutil.rmtree(tmp_path / "2" / ".hydra")
    recs, _ = build_table(find_jobs([tmp_path]), SPEC)
    assert [(r["_label"], r["n_seeds"]) for r in recs] == [("algo.name=fedavg", 1),
                                                           ("algo.name=fedfv", 2)]


def test_plot_warns_about_a_truncated_rounds_csv_and_plots_the_rest(tmp_path, capsys):
    rows = [{"round": r, "test/acc_mean": 10.0 * r} for r in (1, 2, 3, 4)]
    d = _job(tmp_path, "0", ["data=digits"], 0, {"test/acc_mean": 40.0}, config=_digits(4),
             summary={"rounds_completed": 4}, rounds=rows)
    (d / "rounds.csv").write_text("round,test/acc_mean\n1,10.0\n2,20.0\n3,3")
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "png"),
                 "--metric", "test/acc_mean"]) == 2      # a table would not count it either
    assert capsys.readouterr().err.splitlines()[-1] == (
        "fedmoo: error: --metric test/acc_mean: only jobs that did not complete have it; "
        "--include-failed plots them")
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "png"),
                 "--metric", "test/acc_mean", "--include-failed"]) == 0
    err = capsys.readouterr().err
    assert err == (f"fedmoo plot: {d / 'rounds.csv'}: its last line is cut mid-row; 2 rows where "
                   "summary.json implies 4; plotting its 2 whole rows\n")
    assert (tmp_path / "png" / "test_acc_mean.png").stat().st_size > 1000


def test_keys_a_record_lacks_take_their_defaults_and_never_split_a_configuration(tmp_path):
    cfg = {**_digits(3), "algo": {"name": "fedprox", "mu": 0.01}, "tf32": False}
    _job(tmp_path, "0", ["algo=fedprox"], 0, {"test/acc_mean": 80.0}, config=cfg)
    older = {**_digits(3, 1), "algo": {"name": "fedprox"}}   # before tf32 and algo.mu existed
    _job(tmp_path, "1", ["algo=fedprox"], 1, {"test/acc_mean": 90.0}, config=older)
    # killed: no summary.json, only Hydra's record, which also holds the volatile knobs
    _job(tmp_path, "2", ["algo=fedprox"], 2, {}, status=None,
         config={**cfg, "seed": 2, "deterministic": False, "progress": True})
    other = {**cfg, "seed": 0, "algo": {"name": "fedprox", "mu": 0.1}}   # not a default: apart
    _job(tmp_path, "3", ["algo=fedprox", "algo.mu=0.1"], 0, {"test/acc_mean": 10.0}, config=other)
    jobs = find_jobs([tmp_path])
    assert jobs[1].filled == {"tf32": False, "algo.mu": 0.01}
    recs, problems = build_table(jobs, SPEC)
    assert [(r["_label"], r["n_seeds"], r["test/acc_mean/mean"]) for r in recs] == [
        ("algo.mu=0.01", 2, 85.0), ("algo.mu=0.1", 1, 10.0)]
    assert problems == [f"{tmp_path / '2'}: missing"]


def test_the_run_layers_volatile_knobs_are_not_result_keys():
    from fedmoo.report.jobs import is_result_key
    from fedmoo.run.identity import VOLATILE_KEYS

    assert [k for k in VOLATILE_KEYS if is_result_key(k)] == []


def test_a_trackers_copy_of_summary_json_inside_a_run_is_not_a_job(tmp_path):
    """logger=mlflow keeps the run's summary.json as an artifact in the run's own directory
    (mlartifacts/<id>/artifacts/): one job, not a second one repeating seed 0."""
    _job(tmp_path, "a", ["data=digits"], 0, {"test/acc_mean": 90.0}, config=_digits(50))
    copy = tmp_path / "a" / "mlartifacts" / "0123" / "artifacts"
    copy.mkdir(parents=True)
    shutil.copy(tmp_path / "a" / "summary.json", copy / "summary.json")
    assert [j.path for j in find_jobs([tmp_path])] == [tmp_path / "a"]


def _on(data_dir, digest, seed, acc, **summary):
    """A digits job of data_dir (not a result key) whose summary.json records ``digest``."""
    cfg = {**_digits(3, seed), "data_dir": data_dir}
    return cfg, {"test/acc_mean": acc}, {**({"data_digest": digest} if digest else {}), **summary}


def test_runs_on_other_data_are_apart_and_older_jobs_join_theirs(tmp_path, capsys):
    from fedmoo.api import load
    from fedmoo.report.pareto import points

    for name, (cfg, final, summary) in {"a0": _on("/a", "a" * 64, 0, 80.0),
                                         "a1": _on("/a", "a" * 64, 1, 82.0),
                                         "b0": _on("/b", "b" * 64, 0, 20.0)}.items():
        _job(tmp_path / "split", name, ["data=digits"], cfg["seed"], final, config=cfg,
             summary=summary)
    rc, out, err = _table(capsys, str(tmp_path / "split"), "--metric", "test/acc_mean")
    assert rc == 0 and "| data_digest=aaaaaaaaaaaa | 81.00 ± 1.00 | 2 |" in out
    assert "| data_digest=bbbbbbbbbbbb | 20.00 | 1 |" in out
    assert err == ("fedmoo: 1 configuration(s) split by data_digest: their jobs were trained on "
                   "different data (another data_dir or changed dataset files; none recorded by "
                   "older jobs), so each is reported apart\n")
    assert sorted(load(tmp_path / "split")["data_digest"]) == ["a" * 12] * 2 + ["b" * 12]
    assert [p["n"] for p in points([str(tmp_path / "split")], "test/acc_mean", "test/acc_mean")
            ] == [2, 1]
    capsys.readouterr()
    for name, (cfg, final, summary) in {"new": _on("/a", "a" * 64, 0, 80.0),
                                         "old": _on("/b", None, 1, 82.0)}.items():
        _job(tmp_path / "older", name, ["data=digits"], cfg["seed"], final, config=cfg,
             summary=summary)
    rc, out, err = _table(capsys, str(tmp_path / "older"), "--metric", "test/acc_mean")
    assert rc == 0 and "| all | 81.00 ± 1.00 | 2 |" in out and err == ""


def test_seeds_of_different_builds_are_averaged_with_one_warning(tmp_path, capsys):
    for seed, commit in ((0, "1" * 40), (1, "2" * 40), (2, "2" * 40)):
        _job(tmp_path, str(seed), ["algo=fedavg"], seed, {"test/acc_mean": 80.0 + seed},
             summary={"versions": {"fedmoo": "0.1.0", "fedmoo_git": commit}})
    rc, out, err = _table(capsys, str(tmp_path), "--metric", "test/acc_mean")
    assert rc == 0 and "| all | 81.00 ± 0.82 | 3 |" in out
    assert err == ("fedmoo: 1 configuration(s) average seeds computed by different fedmoo builds "
                   "(0.1.0 (git 111111111111), 0.1.0 (git 222222222222)): numerics may differ "
                   "between builds; rerun them with one build to compare like with like\n")


def test_the_build_commit_is_read_from_fedmoo_s_own_checkout_only(tmp_path):
    import subprocess

    from fedmoo.run.setup import git_commit
    from tests.conftest import ROOT

    assert git_commit(tmp_path) is None                      # an installed copy: no .git
    (tmp_path / ".git").write_text("gitdir: /nowhere\n")    # a broken checkout: never fails
    assert git_commit(tmp_path) is None
    if (ROOT / ".git").exists():
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], text=True,
                              capture_output=True).stdout.strip()
        assert git_commit(ROOT) == head


def test_seeds_whose_partition_follows_the_seed_are_one_configuration(tmp_path):
    """The digest the reports split on is the samples' (not the partition's): with
    ``partition.seed=${seed}``, as most paper recipes, each seed has its own partition."""
    from tests.inprocess import run_main

    sweep = tmp_path / "sweep"
    r = run_main(["run", "-m", "seed=0,1", "partition=iid", "partition.seed=${seed}", "rounds=1",
                  "num_clients=4", "clients_per_round=2", "data.max_samples=40",
                  "progress=false", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert r.returncode == 0, r.stderr
    t = run_main(["table", str(sweep), "--format", "csv"], tmp_path)
    assert t.returncode == 0 and "split by data_digest" not in t.stderr, t.stderr
    assert [row.split(",")[-1] for row in t.stdout.strip().splitlines()[1:]] == ["2"]


def test_a_job_named_twice_is_one_job(tmp_path):
    """`fedmoo table sweep sweep/0` (or the sweep twice) names job 0 twice: no repeated seed."""
    _job(tmp_path, "a", ["data=digits"], 0, {"test/acc_mean": 90.0}, config=_digits(50))
    assert [j.path for j in find_jobs([tmp_path, tmp_path / "a", tmp_path])] == [tmp_path / "a"]
