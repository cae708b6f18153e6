"""The attack experiment files compose, and the Adult bias sweep runs end to end on a fixture."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from fedmoo.cli.config import compose
from fedmoo.report.tables import load_spec
from tests.inprocess import cli_in

CONF = Path(__file__).resolve().parents[2] / "fedmoo" / "conf"
EXPERIMENTS = ["fedmgda_plus/adult_bias", "fedmgda_plus/adult_bias_authors_code",
               "fedmgda_plus/cifar10_scaling", "robustness/matrix"]


def rows_of(experiment: str) -> list[str]:
    return sorted(p.stem for p in (CONF / "row" / experiment).glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_file_command_rows_and_table_spec_agree(experiment):
    text = (CONF / "experiment" / f"{experiment}.yaml").read_text().splitlines()
    assert text[0] == "# @package _global_"
    assert text[1].startswith("# ") and f"experiment={experiment}" in text[1]
    assert f"--spec {experiment}" in text[1]
    swept = next(line for line in text if line.strip().startswith(f"+row/{experiment}:"))
    assert sorted(swept.split(":", 1)[1].split("#")[0].strip().split(",")) == rows_of(experiment)
    spec = load_spec(experiment)
    assert sorted(spec["rows"]) == rows_of(experiment)


def test_adult_rows_set_the_paper_settings():
    for row in ("afl_b0.1", "qfedavg_q2_b5000", "fedmgda_plus_b10000"):
        cfg = compose(["experiment=fedmgda_plus/adult_bias", f"+row/fedmgda_plus/adult_bias={row}"])
        assert cfg["rounds"] == 500 and cfg["client"]["lr"] == 0.01 and cfg["client"]["batch_size"] == 10
        assert cfg["clients_per_round"] is None and cfg["data"]["name"] == "adult"
        assert cfg["attack"]["name"] == "bias" and cfg["attack"]["malicious"] == "phd"
        assert cfg["attack"]["always_participate"] is True
        assert cfg["attack"]["b"] == float(row.rsplit("_b", 1)[1])
    spec = load_spec("fedmgda_plus/adult_bias")
    assert spec["rows"]["qfedavg_q2_b10000"]["paper"] == [82.50, 75.69, 82.58]


def test_adult_bias_variants_differ_from_the_paper_setup_in_their_named_keys_only():
    row = "+row/fedmgda_plus/adult_bias=qfedavg_q5_b1000"
    paper = compose(["experiment=fedmgda_plus/adult_bias", row])
    assert paper["partition"]["split"] == "dataset" and paper["data"]["train_rows"] == "domains"
    pooled = compose(["experiment=fedmgda_plus/adult_bias_pooled", row])
    assert pooled["partition"]["split"] == "pooled" and pooled["partition"]["fractions"] == [0.8, 0.1, 0.1]
    code = compose(["experiment=fedmgda_plus/adult_bias_authors_code",
                    row.replace("adult_bias=", "adult_bias_authors_code=")])
    assert code["data"]["train_rows"] == "authors_code" and code["client"]["momentum"] == 0.5
    # the authors' q-FFL: the batch-sum loss with L = 1; nothing else of the algorithm differs
    assert code["algo"] == {**paper["algo"], "L": 1.0, "loss_report": "batch_sum"}
    assert paper["algo"]["loss_report"] == "mean" and paper["algo"]["L"] is None
    for cfg in (pooled, code):
        for key in ("rounds", "client", "algo", "attack", "seed", "eval_every"):
            if (key != "client" or cfg is pooled) and (key != "algo" or cfg is pooled):
                assert cfg[key] == paper[key], key


@pytest.mark.parametrize("row", rows_of("fedmgda_plus/adult_bias"))
def test_the_authors_code_rows_are_the_paper_rows_with_their_q_ffl(row):
    paper = compose(["experiment=fedmgda_plus/adult_bias", f"+row/fedmgda_plus/adult_bias={row}"])
    code = compose(["experiment=fedmgda_plus/adult_bias_authors_code",
                    f"+row/fedmgda_plus/adult_bias_authors_code={row}"])
    changed = {"L": 1.0, "loss_report": "batch_sum"} if row.startswith("qfedavg") else {}
    assert code["algo"] == {**paper["algo"], **changed}
    assert code["attack"] == paper["attack"]
    assert {k: v for k, v in code["data"].items() if k != "train_rows"} == \
        {k: v for k, v in paper["data"].items() if k != "train_rows"}
    for key in ("rounds", "seed", "eval_every", "clients_per_round", "partition", "model"):
        assert code[key] == paper[key], key
    assert {**code["client"], "momentum": 0.0} == paper["client"]
    ours, theirs = (load_spec(f"fedmgda_plus/{e}")["rows"][row] for e in
                    ("adult_bias_authors_code", "adult_bias"))
    assert ours == theirs          # the same labels and paper values


ROW = "{age}, Private, 100000, {edu}, {num}, Never-married, Sales, Not-in-family, White, {sex}, 0, 0, 40, United-States, {y}\n"


def write_adult(root: Path) -> None:
    """40 PhD and 80 other records (labels alternate) in the two UCI files."""
    d = root / "adult"
    d.mkdir(parents=True)
    lines = []
    for i in range(120):
        edu, num = ("Doctorate", 16) if i % 3 == 0 else ("HS-grad", 9)
        lines.append(ROW.format(age=20 + i % 50, edu=edu, num=num, sex="Male" if i % 2 else "Female",
                                y=">50K" if (i // 3) % 2 else "<=50K"))
    (d / "adult.data").write_text("".join(lines[:100]) + "\n")
    (d / "adult.test").write_text("|1x3 Cross validator\n" + "".join(
        line.replace("K\n", "K.\n") for line in lines[100:]))


@pytest.mark.slow
def test_adult_bias_sweep_and_table_end_to_end(tmp_path):
    cli = cli_in(tmp_path)   # in-process (tests.inprocess)
    write_adult(cli.cwd / "data")
    sweep = cli.cwd / "sweep"
    r = cli("run", "-m", "experiment=fedmgda_plus/adult_bias",
            "+row/fedmgda_plus/adult_bias=afl_b0,afl_b1", "seed=0", "rounds=3", "eval_every=1",
            "data.download=false", "progress=false", f"hydra.sweep.dir={sweep}")
    assert r.returncode == 0, r.stderr[-2000:]
    finals = {}
    for job in sorted(sweep.glob("[0-9]*")):
        summary = json.loads((job / "summary.json").read_text())
        assert json.loads((job / "attack.json").read_text())["attackers"] == [0]  # phd is client 0
        f = summary["final"]
        assert f["attackers/acc_mean"] == f["test/acc_client0"] and f["benign/acc_mean"] == f["test/acc_client1"]
        finals[job.name] = f
    assert finals["0"]["test/loss_mean"] != finals["1"]["test/loss_mean"]  # AFL follows the bias
    t = cli("table", str(sweep), "--spec", "fedmgda_plus/adult_bias", "--format", "csv")
    assert t.returncode == 0, t.stderr
    recs = list(csv.DictReader(io.StringIO(t.stdout)))
    assert [x["row/fedmgda_plus/adult_bias"] for x in recs] == ["afl_b0", "afl_b1"]
    # 3 rounds are not the paper's recipe: no paper column, and the note says why
    assert not recs[1].get("test/acc_client0/paper")
    assert recs[1]["notes"].startswith("not the paper's recipe: rounds=3 (recipe ")
    assert float(recs[0]["test/acc_client0/mean"]) == finals["0"]["test/acc_client0"]
