"""`fedmoo table` / `fedmoo plot` on job directories written by the test (real on-disk layout)."""

from __future__ import annotations

import csv
import io
import json

import pytest
import yaml

from fedmoo.report.jobs import find_jobs, group_jobs, label_keys
from fedmoo.report.tables import build_table, render
from tests.inprocess import cli_in


def config_of(overrides, seed):
    """A resolved config that reflects ``overrides``: ``algo=fedfv`` sets ``algo.name``."""
    cfg = {"seed": seed}
    for o in overrides:
        key, _, value = o.lstrip("+").partition("=")
        path = key.replace("/", ".").split(".") + ([] if "." in key else ["name"])
        node = cfg
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = yaml.safe_load(value)
    return cfg


def _job(root, name, overrides, seed, final, status="completed", rounds=None, clients=None,
         config=None, summary=None):
    """A job directory as fedmoo writes it: Hydra's record, summary.json with the run's config."""
    d = root / name
    config = config_of(overrides, seed) if config is None else config
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides + [f"seed={seed}"]))
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    if status is not None:
        (d / "summary.json").write_text(json.dumps({"status": status, "final": final,
                                                    "config": config, **(summary or {})}))
    if rounds:
        with open(d / "rounds.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rounds[0]))
            w.writeheader()
            w.writerows(rounds)
    if clients:
        (d / "clients.csv").write_text("client,accuracy\n" + "".join(f"{i},{a}\n" for i, a in enumerate(clients)))
    return d


@pytest.fixture
def sweep(tmp_path):
    _job(tmp_path, "0", ["algo=fedavg"], 0, {"test/acc_mean": 80.0, "test/acc_std": 10.0})
    _job(tmp_path, "1", ["algo=fedavg"], 1, {"test/acc_mean": 82.0, "test/acc_std": 12.0})
    _job(tmp_path, "2", ["algo=fedfv", "algo.alpha=0.5"], 0, {"test/acc_mean": 79.0, "test/acc_std": 2.0})
    _job(tmp_path, "3", ["algo=fedfv", "algo.alpha=0.5"], 1, {"test/acc_mean": float("nan")}, status="diverged")
    _job(tmp_path, "4", ["algo=fedfv", "algo.alpha=0.5"], 2, {}, status=None)
    return tmp_path


def test_groups_by_varying_overrides_and_aggregates_seeds(sweep):
    jobs = find_jobs([sweep])
    assert len(jobs) == 5
    keys = label_keys(group_jobs(jobs))
    assert keys == ["algo", "algo.alpha"]
    spec = {"metrics": [{"key": "test/acc_mean"}, {"key": "test/acc_std", "label": "Var."}],
            "rows": {"algo=fedavg algo.alpha=": {"label": "FedAvg", "paper": [80.4, 11.5]}}}
    recs, problems = build_table(jobs, spec)
    fedavg = next(r for r in recs if r["algo"] == "fedavg")
    assert fedavg["test/acc_mean/mean"] == 81.0 and fedavg["test/acc_mean/std"] == 1.0
    assert fedavg["n_seeds"] == 2 and fedavg["_label"] == "FedAvg"
    assert fedavg["test/acc_mean/paper"] == 80.4
    fedfv = next(r for r in recs if r["algo"] == "fedfv")
    assert fedfv["n_seeds"] == 1 and fedfv["test/acc_mean/mean"] == 79.0   # diverged job excluded
    assert sorted(p.split(": ")[1] for p in problems) == ["diverged", "missing"]

    md = render(recs, spec, "md", keys)
    assert "| FedAvg | 81.00 ± 1.00 (paper 80.40, Δ +0.60) | 11.00 ± 1.00 (paper 11.50, Δ -0.50) | 2 |" in md
    rows = list(csv.DictReader(io.StringIO(render(recs, spec, "csv", keys))))
    assert rows[0]["algo"] == "fedavg" and float(rows[0]["test/acc_mean/mean"]) == 81.0
    assert list(rows[0])[:2] == ["algo", "algo.alpha"] and "n_seeds" in rows[0]
    assert r"\begin{tabular}" in render(recs, spec, "latex", keys)


@pytest.mark.slow
def test_cli_table_and_plot(sweep, tmp_path):
    cli = cli_in(tmp_path)   # in-process (tests.inprocess)
    for name, seed, acc in (("0", 0, [10, 20]), ("1", 1, [12, 22])):
        with open(sweep / name / "rounds.csv", "w") as f:
            f.write("round,test/acc_mean\n1,%d\n2,%d\n" % tuple(acc))
        (sweep / name / "clients.csv").write_text("client,accuracy\n0,50\n1,70\n")
    r = cli("table", str(sweep), "--format", "csv", "--out", str(sweep / "t.csv"))
    assert r.returncode == 0, r.stderr
    assert "not included" in r.stderr and (sweep / "t.csv").exists()
    r = cli("plot", str(sweep), "--out", str(sweep / "plots"), "--metric", "test/acc_mean")
    assert r.returncode == 0, r.stderr
    assert (sweep / "plots" / "test_acc_mean.png").stat().st_size > 1000
    assert (sweep / "plots" / "client_accuracy_hist.png").exists()


def test_table_errors_are_one_line(cli, tmp_path):
    r = cli("table", str(tmp_path / "nope"))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no such directory" in r.stderr
    r = cli("table", str(tmp_path), "--spec", "nope/nope")
    assert r.returncode == 2


def _records(tmp_path, finals, rounds=40):
    """One configuration per entry of ``finals`` (label -> one final dict per seed)."""
    for i, (algo, per_seed) in enumerate(finals.items()):
        for seed, final in enumerate(per_seed):
            cfg = {"seed": seed, "rounds": rounds, "algo": {"name": algo}}
            _job(tmp_path, f"{i}_{seed}", [f"algo={algo}"], seed, final, config=cfg)
    jobs = find_jobs([tmp_path])
    return jobs, label_keys(group_jobs(jobs))


def test_cells_counts_single_seeds_and_escapes(tmp_path):
    jobs, keys = _records(tmp_path, {
        "fedavg": [{"n/rounds_to_threshold": 8.0, "server/d_norm_sq": 1.0},
                   {"n/rounds_to_threshold": 9.0, "server/d_norm_sq": 3.0}],
        "fedfv": [{"n/rounds_to_threshold": 8.0, "server/d_norm_sq": 2.0}]})
    spec = {"title": "A & B, round {rounds}", "decimals": 3,
            "metrics": [{"key": "n/rounds_to_threshold", "label": "rounds"},
                        {"key": "server/d_norm_sq", "label": "||d||^2 (50%)"}],
            "rows": {"fedavg": {"label": "Fed_Avg #1"}, "fedfv": {"label": "FedFV"}}}
    from fedmoo.report.tables import fill_title

    spec["title"] = fill_title(spec["title"], group_jobs(jobs))
    assert spec["title"] == "A & B, round 40"
    recs, _ = build_table(jobs, spec)
    md = render(recs, spec, "md", keys)
    assert "| configuration | rounds | \\|\\|d\\|\\|^2 (50%) | seeds |" in md
    assert "| Fed_Avg #1 | 8.5 ± 0.5 | 2.000 ± 1.000 | 2 |" in md       # counts: no decimals
    assert "| FedFV | 8 | 2.000 | 1 |" in md                                # one seed: no ±
    assert "1 seed: the value of that one run (no ± spread)." in md
    # 8 and 9 rounds: 0.5 is the population std (the sample std would be 0.71), and it says so
    assert ("\nmean ± std over seeds, std = population standard deviation (ddof=0, divisor n). "
            "1 seed:") in md
    tex = render(recs, spec, "latex", keys)
    assert r"% A \& B, round 40" not in tex and "% A & B, round 40" in tex   # a comment line
    assert r"\textbar{}\textbar{}d\textbar{}\textbar{}\textasciicircum{}2 (50\%)" in tex
    assert r"Fed\_Avg \#1 & 8.5 $\pm$ 0.5 & 2.000 $\pm$ 1.000 & 2 \\" in tex
    assert "% mean ± std over seeds, std = population standard deviation" in tex


def test_title_lists_every_value_of_a_key(tmp_path):
    from fedmoo.report.tables import fill_title

    _job(tmp_path, "a", ["rounds=20"], 0, {"test/acc_mean": 1.0}, config={"seed": 0, "rounds": 20})
    _job(tmp_path, "b", ["rounds=100"], 0, {"test/acc_mean": 1.0}, config={"seed": 0, "rounds": 100})
    groups = group_jobs(find_jobs([tmp_path]))
    assert fill_title("after {rounds} rounds ({nope})", groups) == "after 20/100 rounds ({nope})"


def test_damaged_summaries_and_mistakes_are_lines_not_tracebacks(tmp_path, capsys):
    from fedmoo.cli.main import main

    _job(tmp_path, "0", ["algo=fedavg"], 0, {"test/acc_mean": 80.0, "test/acc_std": 4.0})
    _job(tmp_path, "1", ["algo=fedavg"], 1, {"test/acc_mean": "n/a", "test/acc_std": 6.0})
    (tmp_path / "2" / "summary.json").mkdir(parents=True)            # a directory
    deep = tmp_path / "3"
    _job(tmp_path, "3", ["algo=fedavg"], 3, {})
    (deep / "summary.json").write_text("[" * 100_000 + "]" * 100_000)   # nested too deeply
    assert main(["table", str(tmp_path), "--metric", "test/acc_mean", "--metric",
                 "test/acc_std"]) == 0
    out, err = capsys.readouterr()
    assert "| all | 80.00 | 5.00 ± 1.00 | 2 | 1 corrupt |" in out   # "n/a" is left out of its column
    assert f"{tmp_path / '1'}: summary.json's final test/acc_mean is not a number: 'n/a'; left " \
           "out of that column" in err
    assert f"{tmp_path / '2'}: corrupt (summary.json is unreadable: " in err
    assert f"{tmp_path / '3'}: corrupt (summary.json is nested too deeply to read)" in err
    assert "Traceback" not in err
    assert main(["pareto", str(tmp_path), "--y", "test/acc_std", "--minimize-y"]) == 0
    capsys.readouterr()
    for args, line in (
            (["--metric", "test/acc_sdt"], "--metric test/acc_sdt is not a metric of any "
             f"summary.json under {tmp_path}; did you mean test/acc_std"),
            (["--spec", "fedfv/tabel3"], "unknown table spec 'fedfv/tabel3'; did you mean "
             "fedfv/table3"),
            (["--out", str(tmp_path / "0" / "summary.json" / "t.md")],
             f"--out {tmp_path / '0' / 'summary.json' / 't.md'}: cannot write there (")):
        assert main(["table", str(tmp_path), *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"fedmoo: error: {line}") and err.count("\n") == 1, err


def test_a_spec_key_that_no_job_has_is_refused_with_the_nearest(tmp_path, monkeypatch, capsys):
    from fedmoo.cli.main import main
    from fedmoo.report import tables

    _job(tmp_path, "0", ["algo=fedavg"], 0, {"test/acc_mean": 80.0})
    spec = tmp_path / "specs" / "demo"
    spec.mkdir(parents=True)
    (spec / "t.yaml").write_text("group_by: [alog]\n")
    monkeypatch.setattr(tables, "TABLE_DIR", tmp_path / "specs")
    assert main(["table", str(tmp_path / "0"), "--spec", "demo/t"]) == 2
    assert capsys.readouterr().err == (
        f"fedmoo: error: table spec demo/t group_by: alog is not a config key of the jobs under "
        f"{tmp_path / '0'}; did you mean algo?\n")


def test_a_key_a_configuration_does_not_set_is_not_in_its_label(sweep):
    recs, _ = build_table(find_jobs([sweep]), {"metrics": [{"key": "test/acc_mean"}]})
    assert sorted(r["_label"] for r in recs) == ["algo=fedavg", "algo=fedfv algo.alpha=0.5"]


@pytest.mark.parametrize("other", [[], ["rounds=2", "client.lr=0.5"]])
def test_paper_values_only_for_the_papers_recipe(tmp_path, other, caplog):
    """A spec's paper values belong to its experiment's recipe: rows run with other settings
    (2 rounds at another learning rate) once printed "paper 71.29, delta -46.00"."""
    from fedmoo.cli.config import compose

    for i, row in enumerate(["fedavg", "qfedavg_q5"]):
        overrides = [f"+row/fedfv/table3={row}", *other]
        _job(tmp_path, str(i), overrides, 0, {"test/acc_mean": 30.0},
             config=compose(["experiment=fedfv/table3", *overrides, "seed=0"]))
    from fedmoo.report.tables import load_spec

    spec = load_spec("fedfv/table3")
    assert spec["experiment"] == "fedfv/table3"
    recs, _ = build_table(find_jobs([tmp_path]), spec, compose=compose)
    assert [r["_label"].split(" ")[0] for r in recs] == ["FedAvg", "q-FedAvg"]
    if not other:
        assert [r["test/acc_mean/paper"] for r in recs] == [80.42, 78.53]
        assert all(not r["_notes"] for r in recs)
        return
    for r in recs:
        assert "test/acc_mean/paper" not in r
        assert r["_notes"] == ["not the paper's recipe: rounds=2 (recipe 200), client.lr=0.5 "
                               "(recipe 0.1)"]
    assert "not the recipe of experiment=fedfv/table3 (rounds=2 (recipe 200)" in caplog.text


def test_a_sweep_stopped_before_some_jobs_started_says_so(tmp_path, capsys):
    """An interrupted sweep's unstarted jobs have no directory: the table names how many, so a
    configuration missing from it does not read as never swept."""
    from fedmoo.cli.main import main

    _job(tmp_path, "0", ["algo=fedavg"], 0, {"test/acc_mean": 80.0})
    (tmp_path / ".fedmoo").mkdir()
    (tmp_path / ".fedmoo" / "sweep.json").write_text('{"jobs": 3, "start": 0, "swept": []}')
    assert main(["table", str(tmp_path), "--metric", "test/acc_mean"]) == 0
    assert capsys.readouterr().err == (
        f"fedmoo: {tmp_path}: 2 of the sweep's 3 jobs have not started (no directory): run its "
        "command again to finish it\n")
    _job(tmp_path, "1", ["algo=fedfv"], 0, {"test/acc_mean": 81.0})
    _job(tmp_path, "2", ["algo=qfedavg"], 0, {"test/acc_mean": 82.0})
    assert main(["table", str(tmp_path), "--metric", "test/acc_mean"]) == 0
    assert capsys.readouterr().err == ""


def test_rows_of_numbers_are_in_numeric_order(tmp_path):
    """algo.q=1, 2, 10 (a string sort put 10 before 2)."""
    for name, q in (("a", 10), ("b", 2), ("c", 1)):
        config = {**config_of(["algo=qfedavg"], 0), "algo": {"name": "qfedavg", "q": q}}
        _job(tmp_path, name, ["algo=qfedavg", f"algo.q={q}"], 0, {"test/acc_mean": 1.0 * q},
             config=config)
    records, _ = build_table(find_jobs([tmp_path]), {"metrics": [{"key": "test/acc_mean"}]})
    assert [r["_label"] for r in records] == ["algo.q=1", "algo.q=2", "algo.q=10"]
