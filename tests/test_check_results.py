"""scripts/check_results.py: which CSVs of a results page it checks and which commands it re-runs
for a row of each."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_results", ROOT / "scripts" / "check_results.py")
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

PAGE = """# A page

```
OMP_NUM_THREADS=1 fedmoo run -m experiment=fmgda/fig1 seed=0 rounds=30 data_dir=DIR hydra.sweep.dir=runs/a
OMP_NUM_THREADS=1 fedmoo run -m experiment=fmgda/fig1 +row/fmgda/fig1=fsmgda_b16,fsmgda_b64 seed=1 rounds=30 data_dir=DIR progress=false hydra.sweep.dir=runs/b
fedmoo table runs/a runs/b --spec fmgda/fig1 --format md
fedmoo table runs/a runs/b --spec fmgda/fig1 --format csv --out docs/results/x.csv
```

Full scale (not what the CSV holds):

```
fedmoo run -m experiment=fmgda/fig1 data_dir=DIR
```
"""


def test_a_row_reruns_every_command_whose_sweep_the_csv_line_reads(tmp_path):
    page = tmp_path / "x.md"
    page.write_text(PAGE)
    [(csv_path, runs, table_args)] = check.page_csvs(page)
    assert len(runs) == 2                                     # the full-scale block is not used
    assert table_args == ["--spec", "fmgda/fig1", "--format", "csv"]
    assert csv_path == ROOT / "docs" / "results" / "x.csv"
    keys = ["row/fmgda/fig1"]
    b16 = check.commands_for(runs, {"row/fmgda/fig1": "fsmgda_b16"}, keys, "/d")
    assert b16 == [
        ["-m", "experiment=fmgda/fig1", "seed=0", "rounds=30", "data_dir=/d",
         "+row/fmgda/fig1=fsmgda_b16", "progress=false"],
        ["-m", "experiment=fmgda/fig1", "seed=1", "rounds=30", "data_dir=/d",
         "+row/fmgda/fig1=fsmgda_b16", "progress=false"]]
    b256 = check.commands_for(runs, {"row/fmgda/fig1": "fmgda_b256"}, keys, "/d")
    assert len(b256) == 1 and "seed=0" in b256[0]            # the seed-1 sweep lacks this row
    with pytest.raises(check.PageError, match="--data-dir"):
        check.commands_for(runs, {"row/fmgda/fig1": "fsmgda_b16"}, keys, None)


TWO_CSVS = """# A page with two CSVs

```
fedmoo run -m experiment=adafed/table12 hydra/launcher=lockstep progress=false
fedmoo table outputs/experiments/adafed/table12 --spec adafed/table12 --format md
fedmoo table outputs/experiments/adafed/table12 --spec adafed/table12 --format csv --out docs/results/a.csv
```

The variant, in a sweep directory beside the first (not under it):

```
fedmoo run -m experiment=adafed/table12 algo.normalize=false hydra.sweep.dir=outputs/experiments/adafed/table12_b/x
fedmoo run -m experiment=adafed/table12 algo.normalize=false seed=7 hydra.sweep.dir=outputs/experiments/adafed/table12_b/y
fedmoo table outputs/experiments/adafed/table12_b --metric test/acc_mean --include-failed --format csv --out docs/results/b.csv
```
"""


def test_each_csv_of_a_page_pairs_with_the_runs_its_table_line_reads(tmp_path):
    page = tmp_path / "two.md"
    page.write_text(TWO_CSVS)
    (a, runs_a, args_a), (b, runs_b, args_b) = check.page_csvs(page)
    assert (a.name, b.name) == ("a.csv", "b.csv")
    # the first run writes to its experiment's own sweep dir, outputs/experiments/adafed/table12
    assert runs_a == [["-m", "experiment=adafed/table12", "hydra/launcher=lockstep",
                       "progress=false"]]
    assert args_a == ["--spec", "adafed/table12", "--format", "csv"]
    assert [r[-1] for r in runs_b] == ["hydra.sweep.dir=outputs/experiments/adafed/table12_b/x",
                                       "hydra.sweep.dir=outputs/experiments/adafed/table12_b/y"]
    assert args_b == ["--metric", "test/acc_mean", "--include-failed", "--format", "csv"]
    # every CSV beside the page that no table line writes is reported
    for name in ("a.csv", "b.csv", "orphan.csv"):
        (tmp_path / name).write_text("k,m/mean\n")
    text = TWO_CSVS.replace("docs/results/", f"{tmp_path}/")
    page.write_text(text)
    assert [p.name for p in check.unwritten_csvs([page], tmp_path)] == ["orphan.csv"]


def test_a_page_without_a_csv_line_or_with_an_unread_one_cannot_be_checked(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("```\nfedmoo run -m experiment=adafed/table12\n"
                    "fedmoo table outputs/experiments/adafed/table12 --format csv > x.csv\n```\n")
    with pytest.raises(check.PageError, match="no `fedmoo table"):
        check.page_csvs(page)
    page.write_text("```\nfedmoo run -m experiment=adafed/table12\n"
                    "fedmoo table runs/elsewhere --format csv --out x.csv\n```\n")
    with pytest.raises(check.PageError, match="no `fedmoo run` line"):
        check.page_csvs(page)


def test_values_compare_as_the_page_prints_them():
    assert check.printed("80.004999", 2, False) == check.printed("80.0", 2, False) == "80.00"
    assert check.printed("80.006", 2, False) == "80.01"
    assert check.printed("nan", 2, False) == check.printed("", 2, False) == "—"
    assert check.printed("8.5", 2, True) == "8.5" and check.printed("8.0", 2, True) == "8"
