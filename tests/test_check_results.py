"""scripts/check_results.py: which command of a results page it re-runs for a row of the page's CSV."""

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
OMP_NUM_THREADS=1 fedmoo run -m experiment=fmgda/fig1 +row/fmgda/fig1=fsmgda_b16,fsmgda_b64 seed=1 rounds=30 data_dir=DIR progress=false
fedmoo table runs/a runs/b --spec fmgda/fig1 --format md
fedmoo table runs/a runs/b --spec fmgda/fig1 --format csv --out docs/results/x.csv
```

Full scale (not what the CSV holds):

```
fedmoo run -m experiment=fmgda/fig1 data_dir=DIR
```
"""


def test_a_row_reruns_every_command_of_the_csv_block_that_produces_it(tmp_path):
    page = tmp_path / "x.md"
    page.write_text(PAGE)
    runs, table_args, csv_path = check.page_commands(page)
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


def test_values_compare_as_the_page_prints_them():
    assert check.printed("80.004999", 2, False) == check.printed("80.0", 2, False) == "80.00"
    assert check.printed("80.006", 2, False) == "80.01"
    assert check.printed("nan", 2, False) == check.printed("", 2, False) == "—"
    assert check.printed("8.5", 2, True) == "8.5" and check.printed("8.0", 2, True) == "8"
