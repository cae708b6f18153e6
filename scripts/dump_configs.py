"""Dump the composed config of every option of every group (and of every row of every paper
table) as JSON, to show a refactoring of the config tree changes no configuration:

    python scripts/dump_configs.py > before.json   # on the old commit
    python scripts/dump_configs.py > after.json    # on the new one
    diff before.json after.json
"""

from __future__ import annotations

import json
import sys

from fedmoo.cli.config import compose
from fedmoo.cli.groups import CONF_DIR, GROUPS, group_options
from fedmoo.errors import UserError


def cases() -> list[list[str]]:
    out = [[]]
    for group in GROUPS:
        out += [[f"{group}={option}"] for option in group_options(group)]
    rows = CONF_DIR / "row"
    for table in sorted({p.parent for p in rows.rglob("*.yaml")}):
        key = table.relative_to(CONF_DIR).as_posix()
        experiment = table.relative_to(rows).as_posix()
        base = [f"experiment={experiment}"] if (CONF_DIR / "experiment" / f"{experiment}.yaml"
                                                ).exists() else []
        out += [[*base, f"+{key}={p.stem}"] for p in sorted(table.glob("*.yaml"))]
    return out


def main() -> None:
    dumped = {}
    for overrides in cases():
        try:
            dumped[" ".join(overrides) or "(default)"] = compose(overrides)
        except UserError as e:
            dumped[" ".join(overrides)] = f"refused: {e}"
    json.dump(dumped, sys.stdout, indent=1, sort_keys=True, default=str)
    print()


if __name__ == "__main__":
    main()
