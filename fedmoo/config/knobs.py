"""A knob: one setting's type, default, allowed values and one-line help, declared once as a
dataclass field (``knob(default, help, **rule)``), and the check of a value against it.
Standard library only.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
import typing
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Rule:
    """What a knob's value may be, beyond its annotated type. ``kind``: the type of a value
    that is not one of ``words`` (``threads``: an integer or ``auto``); ``*_open``: the bound
    excluded; ``many``: a list of choices too; ``what``: how a message names the allowed values."""

    kind: type | None = None
    lo: float | None = None
    lo_open: bool = False
    hi: float | None = None
    hi_open: bool = False
    choices: tuple[str, ...] = ()
    pattern: str = ""
    words: tuple[str, ...] = ()
    many: bool = False
    mapping: bool = False       # a section ``{name: <choice>, ...}`` is allowed too (engine)
    what: str = ""
    test: Any = None            # value -> why it is refused, or None: judges every value itself


SEED_LIMIT = 2**63   # seeds go to numpy and torch as signed 64-bit integers


def seed_knob(help: str) -> Any:   # noqa: A002 - the field's help text
    """A seed: an integer in [0, 2**63), default 0 (the rule ``schema.check_seeds`` applies to
    every ``*seed`` key)."""
    return knob(0, help, lo=0, hi=SEED_LIMIT, hi_open=True,
                what="a non-negative integer below 2**63")


def knob(default: Any, help: str, **rule: Any) -> Any:   # noqa: A002 - the field's help text
    """A schema field: its default, its one-line help and its ``Rule``."""
    meta = {"help": help, "rule": Rule(**rule)}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Knob:
    key: str              # dotted: rounds, client.lr
    type: Any             # int, float, bool, str or Any
    nullable: bool
    default: Any
    help: str
    rule: Rule

    @property
    def leaf(self) -> str:
        """The key within its section: ``lr`` of ``client.lr``."""
        return self.key.rpartition(".")[2]


@functools.lru_cache(maxsize=None)
def of(cls: type, prefix: str = "") -> tuple[Knob, ...]:
    hints = typing.get_type_hints(cls)
    out: list[Knob] = []
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata:
            continue
        hint = hints[f.name]
        args = typing.get_args(hint)
        nullable = type(None) in args
        base = next((a for a in args if a is not type(None)), hint) if nullable else hint
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        out.append(Knob(prefix + f.name, base, nullable, default, f.metadata["help"],
                        f.metadata["rule"]))
    return tuple(out)


def integer(v: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def number(v: Any) -> bool:
    """An int or float that is not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _in_range(v: float, r: Rule) -> bool:
    if r.lo is not None and (v <= r.lo if r.lo_open else v < r.lo):
        return False
    return r.hi is None or (v < r.hi if r.hi_open else v <= r.hi)


def expected(k: Knob) -> str:
    """How a message names a knob's allowed values (``a positive integer``)."""
    r = k.rule
    kind = r.kind or k.type
    if r.what:
        text = r.what
    elif kind is bool:
        text = "true or false"
    elif kind is int:
        text = {0: "a non-negative integer", 1: "a positive integer"}.get(r.lo, "an integer")
    elif kind is float:
        lo = "-inf" if r.lo is None else r.lo
        hi = "inf" if r.hi is None else r.hi
        text = (f"a number in {'(' if r.lo_open or r.lo is None else '['}{lo}, "
                f"{hi}{')' if r.hi_open or r.hi is None else ']'}")
    elif r.choices:
        text = " or ".join(r.choices) if len(r.choices) <= 2 else \
            "one of: " + ", ".join(r.choices)
        if r.many:
            text += ", or a list of them"
    else:
        text = "a text"
    extra = [*r.words, *(["null"] if k.nullable else [])]
    return " or ".join([text, *extra]) if extra else text


def show(value: Any) -> str:
    """A value as a command line writes it (true, null, 1e+06, [train,val,test])."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(show(v) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return "null" if value is None else str(value).lower()
    if isinstance(value, float) and "e" in f"{value:g}":
        return f"{value:g}"
    return str(value)


def example(k: Knob) -> str | None:
    d = k.default
    if isinstance(d, str) and "${" in d:
        return None
    if d is None or isinstance(d, bool) or (number(d) and not _in_range(d, k.rule)):
        d = k.rule.lo if k.rule.lo is not None and not k.rule.lo_open else 1
    return show(d)


def problem(k: Knob, v: Any) -> bool:
    """Whether ``v`` is not a value ``k`` allows."""
    r = k.rule
    if r.test is not None:
        return r.test(v) is not None
    if v is None:
        return not k.nullable
    if isinstance(v, str) and v in r.words:
        return False
    if r.mapping and isinstance(v, dict):
        return problem(k, v.get("name"))
    if r.many and isinstance(v, (list, tuple)):
        return not v or any(problem(dataclasses.replace(k, nullable=False), x) for x in v)
    kind = r.kind or k.type
    if kind is bool:
        return not isinstance(v, bool)
    if kind is int:
        return not integer(v) or not _in_range(v, r)
    if kind is float:
        return not number(v) or not math.isfinite(v) or not _in_range(v, r)
    if kind is str:
        if not isinstance(v, str):
            return True
        if r.choices and v not in r.choices:
            return True
        return bool(r.pattern) and re.fullmatch(r.pattern, v) is None
    return False


def refusal(k: Knob, value: Any) -> str | None:
    """The one-line message for ``k.key=value`` if ``k`` refuses the value, else None."""
    if not problem(k, value):
        return None
    if k.rule.test is not None:
        return f"{k.key}={value!r} {k.rule.test(value)}"
    how = expected(k)
    ex = example(k)
    if (k.rule.kind or k.type) is not bool and ex is not None:
        how += f"; e.g. {k.key}={ex}"
    return f"{k.key}={value!r} must be {how}"
