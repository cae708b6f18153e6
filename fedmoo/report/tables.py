"""``fedmoo table``: aggregate a sweep over seeds and lay it out like a paper's table.

Rows are configurations (one job per seed), labelled by the override keys that vary (or the
spec's ``group_by``) and the config keys that tell the rest apart; columns are metrics as
``mean ± std`` over the seeds of the completed jobs (``--include-failed``: of every job with
readable final metrics). Jobs not counted are listed on stderr. A table spec
(``conf/table/<paper>/<table>.yaml``) chooses and labels the metrics and rows and may carry the
paper's values, shown beside ours; ``pivot`` lays one metric out as a matrix (algorithm x attack).
"""

from __future__ import annotations

import logging
import math
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from fedmoo.errors import Parser, UserError
from fedmoo.report.checks import did_you_mean, require_known, writing
from fedmoo.report.jobs import (Group, Job, as_text, counts, final_metrics, find_jobs, flatten,
                                group_jobs, is_result_key, label_keys, override_keys,
                                skipped_line)
from fedmoo.report.results import atomic_write_text, csv_text

log = logging.getLogger(__name__)

TABLE_DIR = Path(__file__).resolve().parents[1] / "conf" / "table"
DEFAULT_METRICS = ["test/acc_mean", "test/acc_std", "test/acc_worst10", "test/acc_best10"]
# Metrics that count something (rounds, tasks): whole numbers, printed without decimals.
COUNT_METRIC = re.compile(r"(rounds_to_threshold|tasks_present|harmed)$")
# Which std ``mean ± std`` is: every table that prints a ± says so under it.
STD_NOTE = "mean ± std over seeds, std = population standard deviation (ddof=0, divisor n)."
# ``{key}`` in a spec title: the configurations' value of a config key (``{rounds}``).
TITLE_KEY = re.compile(r"\{([A-Za-z_][A-Za-z0-9_./]*)\}")


def load_spec(name: str) -> dict[str, Any]:
    path = TABLE_DIR / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.relative_to(TABLE_DIR).with_suffix("").as_posix()
                       for p in TABLE_DIR.rglob("*.yaml"))
        raise UserError(f"unknown table spec {name!r}" + (did_you_mean(name, known) or
                        f"; choose one of: {', '.join(known) or '(none)'}"))
    spec = yaml.safe_load(path.read_text()) or {}
    if (TABLE_DIR.parent / "experiment" / f"{name}.yaml").is_file():
        spec.setdefault("experiment", name)     # the recipe its paper values are for
    spec.setdefault("metrics", [{"key": m} for m in DEFAULT_METRICS])
    spec["metrics"] = [m if isinstance(m, dict) else {"key": m} for m in spec["metrics"]]
    return spec


def _row_label(keys: list[str], values, shown: bool = False) -> str:
    """``k=v k2=v2``: how a spec names a row (a key the configuration does not set: ``k=``);
    ``shown``: as the table labels it, without the keys the configuration does not set (fedavg's
    row of a sweep that also ran fedfv with ``algo.beta`` has no ``algo.beta=``)."""
    pairs = list(zip(keys, values))
    if shown:
        pairs = [(k, v) for k, v in pairs if v != ""] or pairs
    return " ".join(f"{k}={v}" for k, v in pairs) or "all"


def table_keys(groups: list[Group], spec: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(primary, keys): the keys whose values find a row of the spec (``group_by``, else the
    varying override keys), and those plus the config keys that tell the rest apart."""
    primary = list(spec.get("group_by") or override_keys(groups))
    return primary, label_keys(groups, primary)


def _row(rows_spec: Any, primary: list[str], keys: list[str],
         rec: dict[str, Any]) -> tuple[str, int, dict[str, Any]]:
    """(label, order, spec entry) of a record. The spec's row is found by the ``primary``
    values (the value itself for one key, else ``k=v k2=v2``); keys beyond ``primary`` are
    appended to the spec's label."""
    values = [rec[k] for k in primary]
    row_key = str(values[0]) if len(values) == 1 else _row_label(primary, values)
    info = rows_spec.get(row_key, {}) if isinstance(rows_spec, dict) else {}
    order = list(rows_spec).index(row_key) if row_key in rows_spec else 10**6
    if "label" not in info:
        return _row_label(keys, [rec[k] for k in keys], shown=True), order, info
    extra = [k for k in keys if k not in primary and rec[k] != ""]
    suffix = f" ({_row_label(extra, [rec[k] for k in extra])})" if extra else ""
    return info["label"] + suffix, order, info


def _notes(g: Group, include_failed: bool = False) -> list[str]:
    notes = []
    corrupt = sum(j.status == "corrupt" for j in g.jobs)
    if corrupt:
        notes.append(f"{corrupt} corrupt" + (" (counted)" if include_failed else ""))
    if include_failed:
        other = [j.status for j in g.counted(True) if j.status not in ("completed", "corrupt")]
        notes += [f"{other.count(s)} {s} (counted)" for s in sorted(set(other))]
    if g.dropped:
        seeds = ", ".join(sorted({as_text(j.seed) for j in g.dropped}))
        notes.append(f"seed {seeds} repeated: {len(g.dropped)} job(s) not counted")
    return notes


def problems(jobs: list[Job], groups: list[Group], include_failed: bool = False) -> list[str]:
    """``path: why`` for every job that is not counted."""
    dup = {id(d): k for g in groups for d, k in zip(g.dropped, g.kept_for)}
    out = []
    for j in jobs:
        if id(j) in dup:
            out.append(f"{j.path}: repeats seed {as_text(j.seed)} of {dup[id(j)].path} (the one "
                       "counted)")
        elif not counts(j, include_failed):
            out.append(f"{j.path}: {j.status}" + (f" ({j.reason})" if j.reason else ""))
        out += [f"{j.path}: {why}; left out of that column" for why in j.bad_metrics.values()]
    return out


def build_table(jobs: list[Job], spec: dict[str, Any], include_failed: bool = False,
                compose: Callable[[list[str]], dict[str, Any]] | None = None,
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """(records, problems): one record per configuration, a metric's mean and std over the
    counted jobs that report it as a finite number; ``path: why`` per job not counted."""
    groups = group_jobs(jobs)
    primary, keys = table_keys(groups, spec)
    metrics = [m["key"] for m in spec["metrics"]]
    rows_spec: dict[str, Any] = spec.get("rows") or {}
    records = []
    for g in groups:
        done = g.counted(include_failed)
        rec: dict[str, Any] = {k: g.value(k) for k in keys}
        rec["_label"], rec["_order"], info = _row(rows_spec, primary, keys, rec)
        rec["_primary"] = primary
        paper = info.get("paper")
        gaps = recipe_gaps(g, spec.get("experiment"), primary, compose) if paper else []
        if gaps:          # another recipe: the paper's values are not this row's
            paper = None
            log.warning("%s: not the recipe of experiment=%s (%s); its paper values are left "
                        "out", rec["_label"], spec["experiment"], ", ".join(gaps))
        for i, m in enumerate(metrics):
            vals = np.array([v for v in (j.metric(m) for j in done)
                             if v is not None and math.isfinite(v)], dtype=float)
            rec[f"{m}/mean"] = float(vals.mean()) if len(vals) else math.nan
            rec[f"{m}/std"] = float(vals.std(ddof=0)) if len(vals) else math.nan
            rec[f"{m}/n"] = len(vals)
            if paper is not None and i < len(paper) and paper[i] is not None:
                rec[f"{m}/paper"] = float(paper[i])
        rec["n_seeds"] = len(done)
        rec["_statuses"] = sorted({j.status for j in g.jobs})
        rec["_notes"] = _notes(g, include_failed) + (
            [f"not the paper's recipe: {', '.join(gaps)}"] if gaps else [])
        records.append(rec)
    records.sort(key=lambda r: (r["_order"], [_natural(r[k]) for k in keys], r["_label"]))
    return records, problems(jobs, groups, include_failed)


def recipe_gaps(g: Group, experiment: str | None, primary: list[str],
                compose: Callable[[list[str]], dict[str, Any]] | None) -> list[str]:
    """``key=ours (recipe theirs)`` for each result key where ``g``'s configuration differs from
    ``experiment`` composed with the row's overrides (its paper values are then not the row's)."""
    if not experiment or compose is None:
        return []
    row = tuple(f"{'+' if k.startswith('row/') else ''}{k}={g.value(k)}" for k in primary
                if g.value(k) != "")
    job = g.jobs[0]
    ours = job.identity()
    return [f"{k}={as_text(ours[k])} (recipe {as_text(v)})"
            for k, v in _recipe(compose, experiment, row).items()
            if k in ours and is_result_key(k) and k not in job.seed_keys and not _same(ours[k], v)]


@lru_cache(maxsize=None)
def _recipe(compose: Callable, experiment: str, row: tuple[str, ...]) -> dict[str, Any]:
    """``experiment`` composed with a row's overrides, flattened (composed once a process)."""
    try:
        return flatten(compose([f"experiment={experiment}", *row]))
    except UserError:
        return {}


def _same(a: Any, b: Any) -> bool:
    """Equal as config values (1 and 1.0 alike, as ``==`` has them; lists and tuples alike)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def pivot(records: list[dict[str, Any]], spec: dict[str, Any],
          keys: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    """The first metric as a matrix (spec ``pivot: {columns: KEY, order: [...]}``): rows are the
    configurations of the other keys, columns the values of ``KEY``; (records, spec, keys)."""
    col_key = spec["pivot"]["columns"]
    if col_key not in keys:
        raise UserError(f"table spec pivot.columns={col_key!r} is not a key that varies between "
                        f"these jobs ({', '.join(keys) or 'none'}); fix the spec or the sweep")
    metric = spec["metrics"][0]["key"]
    row_keys = [k for k in keys if k != col_key]
    rows_spec = spec.get("rows") or {}
    order = [str(v) for v in spec["pivot"].get("order") or []]
    cols = order + sorted({str(r[col_key]) for r in records} - set(order), key=_natural)
    empty = dict.fromkeys([f"{c}/{s}" for c in cols for s in ("mean", "std")], math.nan)
    out: dict[tuple, dict[str, Any]] = {}
    primary = [k for k in (records[0]["_primary"] if records else keys) if k != col_key]
    for r in records:
        values = tuple(r[k] for k in row_keys)
        label, row_order, _ = _row(rows_spec, primary, row_keys, r)
        rec = out.setdefault(values, {**empty, **dict(zip(row_keys, values)), "_label": label,
                                      "_order": row_order, "n_seeds": r["n_seeds"], "_notes": []})
        c = r[col_key]
        rec[f"{c}/mean"], rec[f"{c}/std"] = r[f"{metric}/mean"], r[f"{metric}/std"]
        rec[f"{c}/n"] = r.get(f"{metric}/n", r["n_seeds"])
        if not r["n_seeds"]:  # no completed job in this cell: say why (e.g. diverged)
            rec[f"{c}/note"] = "/".join(r.get("_statuses") or ["missing"])
        rec["n_seeds"] = max(rec["n_seeds"], r["n_seeds"])
        rec["_notes"] += [f"{c}: {n}" for n in r.get("_notes") or []]
    labels = spec["pivot"].get("labels") or {}
    title = spec.get("title") or f"{metric} by {col_key}"
    new_spec = {**spec, "title": title,
                "metrics": [{"key": c, "label": str(labels.get(c, c))} for c in cols]}
    return sorted(out.values(), key=lambda r: (r["_order"], r["_label"])), new_spec, row_keys


def fill_title(title: str | None, groups: list[Group]) -> str | None:
    """``{key}`` in a spec title -> the configurations' value of that config key: one value,
    or the distinct values joined by "/" (``{rounds}`` -> ``40``, or ``20/40``)."""
    if not title:
        return title

    def value(m: re.Match) -> str:
        vals = sorted({g.value(m.group(1)) for g in groups} - {""}, key=_natural)
        return "/".join(vals) if vals else m.group(0)

    return TITLE_KEY.sub(value, title)


def _natural(v: str):
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)


def is_count(key: str, m: dict[str, Any]) -> bool:
    """Whether a table prints metric ``key`` (spec entry ``m``) as a count (no decimals)."""
    return "decimals" not in m and COUNT_METRIC.search(key) is not None


def fmt_value(x: float | None, decimals: int, count: bool = False) -> str:
    """One number as a table prints it: ``—`` for none; a count as ``8`` or ``8.5``."""
    if x is None or math.isnan(x):
        return "—"
    if count:
        return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"
    return f"{x:.{decimals}f}"


def cell(r: dict[str, Any], m: dict[str, Any], dec: int, std: bool = True) -> str:
    """``mean ± std`` of one metric of one record; one value (no ±) from a single seed."""
    k = m["key"]
    mean, sd = r[f"{k}/mean"], r[f"{k}/std"]
    n = r.get(f"{k}/n", r.get("n_seeds", 2))
    count, places = is_count(k, m), int(m.get("decimals", dec))
    text = fmt_value(mean, places, count)
    if std and n != 1 and text != "—":
        text += f" ± {fmt_value(sd, places, count)}"
    return text


# A markdown table cell's: ``|`` would end the cell
MD_ESCAPES = str.maketrans({"\\": "\\\\", "|": "\\|", "\n": " "})
# LaTeX's special characters, escaped in one pass (``str.translate``: escapes are not re-escaped)
LATEX_ESCAPES = str.maketrans({
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}",
    "±": r"$\pm$", "Δ": r"$\Delta$", "—": "---", "≥": r"$\geq$", "≤": r"$\leq$"})


def render(records: list[dict[str, Any]], spec: dict[str, Any], fmt: str, keys: list[str]) -> str:
    """The table as ``fmt`` (csv, md or latex) text."""
    metrics = spec["metrics"]
    dec = int(spec.get("decimals", 2))
    show_std = spec.get("std", True)
    notes = any(r.get("_notes") for r in records)
    if fmt == "csv":
        cols = list(keys)
        for k in (m["key"] for m in metrics):
            cols += [f"{k}/mean", f"{k}/std"] + [f"{k}/paper"] * any(f"{k}/paper" in r
                                                                   for r in records)
        cols += ["n_seeds"] + ["notes"] * notes
        rows = ({**r, "notes": "; ".join(r.get("_notes") or [])} for r in records)
        return csv_text(cols, ({c: r[c] for c in cols if c in r} for r in rows))
    lines = [["configuration"] + [m.get("label", m["key"]) for m in metrics] + ["seeds"]
             + ["notes"] * notes]
    for r in records:
        cells = [r["_label"]]
        for m in metrics:
            k = m["key"]
            text = r.get(f"{k}/note") or cell(r, m, dec, show_std)
            if f"{k}/paper" in r:
                p = r[f"{k}/paper"]
                text += f" (paper {fmt_value(p, dec)}, Δ {r[f'{k}/mean'] - p:+.{dec}f})"
            cells.append(text)
        lines.append(cells + [str(r["n_seeds"])] + ["; ".join(r.get("_notes") or [])] * notes)
    footnote = " ".join(
        ([STD_NOTE] if show_std and any(r["n_seeds"] > 1 for r in records) else [])
        + (["1 seed: the value of that one run (no ± spread)."]
           if show_std and any(r["n_seeds"] == 1 for r in records) else []))
    title = spec.get("title")
    if fmt == "md":
        out = ["| " + " | ".join(str(c).translate(MD_ESCAPES) for c in cells) + " |"
               for cells in lines]
        out.insert(1, "|" + "---|" * len(lines[0]))
        return ((f"**{title}**\n\n" if title else "") + "\n".join(out) + "\n"
                + (f"\n{footnote}\n" if footnote else ""))
    out = [" & ".join(str(c).translate(LATEX_ESCAPES) for c in cells) + r" \\" for cells in lines]
    out = ([f"% {title}"] if title else []) + [
        r"\begin{tabular}{l" + "c" * (len(lines[0]) - 1) + "}", r"\toprule", out[0], r"\midrule",
        *out[1:], r"\bottomrule", r"\end{tabular}"] + ([f"% {footnote}"] if footnote else [])
    return "\n".join(out) + "\n"


def check_names(jobs: list[Job], groups: list[Group], spec: dict[str, Any], ns) -> None:
    """``--metric`` names a metric some job reports, the spec's ``group_by`` and
    ``pivot.columns`` name config keys of the jobs: else one line, with the nearest names."""
    where = f"under {' '.join(ns.dirs)}"
    if ns.metric:
        require_known("--metric", ns.metric, final_metrics(jobs),
                      f"a metric of any summary.json {where}")
    keys = dict.fromkeys(k for g in groups for j in g.jobs + g.dropped
                         for k in [*j.overrides, *j.identity()])
    keys.update(dict.fromkeys(k[: -len(".name")] for k in list(keys) if k.endswith(".name")))
    spec_name = f"table spec {ns.spec}" if ns.spec else "table spec"
    require_known(f"{spec_name} group_by:", spec.get("group_by") or [], keys,
                  f"a config key of the jobs {where}")
    if spec.get("pivot"):
        require_known(f"{spec_name} pivot.columns:", [spec["pivot"].get("columns")], keys,
                      f"a config key of the jobs {where}")


def main(argv: list[str], compose: Callable[[list[str]], dict[str, Any]] | None = None) -> int:
    p = Parser(
        prog="fedmoo table",
        description="Aggregate runs/sweeps over seeds into a paper-style table.")
    p.add_argument("dirs", nargs="+", help="sweep or run directories (searched recursively)")
    p.add_argument("--spec", help="table spec in conf/table, e.g. fedfv/table3")
    p.add_argument("--format", default="md", choices=("csv", "md", "latex"))
    p.add_argument("--out", help="write the table to this file instead of stdout")
    p.add_argument("--metric", action="append", help="metric column (repeatable; default: "
                   "mean, std, worst10, best10 of test accuracy)")
    p.add_argument("--include-failed", action="store_true", help="also count jobs that did not "
                   "complete (diverged, killed, failed, damaged files): their final metrics, "
                   "where readable")
    ns = p.parse_args(argv)
    spec = load_spec(ns.spec) if ns.spec else {"metrics": [{"key": m} for m in DEFAULT_METRICS]}
    if ns.metric:
        spec["metrics"] = [{"key": m} for m in ns.metric]
        if spec.get("pivot"):
            spec.pop("title", None)  # the spec's title names its own metric
    jobs = find_jobs(ns.dirs)
    if not any(j.config is not None and j.status != "corrupt" for j in jobs):
        raise UserError(f"nothing readable under {' '.join(ns.dirs)}: {len(jobs)} job(s), all "
                        f"corrupt or without a configuration ({jobs[0].path}: {jobs[0].reason})")
    groups = group_jobs(jobs)
    check_names(jobs, groups, spec, ns)
    records, problems = build_table(jobs, spec, ns.include_failed, compose)
    keys = table_keys(groups, spec)[1]
    spec = {**spec, "title": fill_title(spec.get("title"), groups)}
    if spec.get("pivot"):
        records, spec, keys = pivot(records, spec, keys)
    text = render(records, spec, ns.format, keys)
    if ns.out:
        with writing("--out", ns.out):
            Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(Path(ns.out), text)
        print(f"wrote {ns.out} ({len(records)} configurations, {len(jobs)} jobs)")
    else:
        sys.stdout.write(text)
    for prob in problems:
        log.warning("not included: %s", prob, extra={"prefix": "fedmoo table: "})
    if line := skipped_line(jobs, groups, ns.include_failed):
        log.warning("%s", line, extra={"prefix": "fedmoo table: "})
    return 0
