"""A sweep's jobs trained together: the runs of a group advance round by round in one program.

``run_jobs`` starts every job's session (as ``fedmoo run`` alone), groups the sessions that
can share one program (``Plan``) and drives each group with fedmoo.run.loop.drive: every
round the rows of all the group's cohorts (run x client) train in one call of the batched
engine; each run's attack, server rule, evaluation and files go on as alone, and its numbers
are those of the job alone, bit for bit (docs/scaling.md). A run that fits no group trains
alone, in the same process.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fedmoo import data as fdata
from fedmoo.engine.base import StackingEngine
from fedmoo.engine.common import sharing_gathers
from fedmoo.params import num_params
from fedmoo.run.loop import RunResult, Session, drive, train_each
from fedmoo.run.progress import open_bar
from fedmoo.run.setup import set_deterministic, set_threads, set_tf32


@dataclass
class Job:
    cfg: dict[str, Any]
    run_dir: Path
    record: dict[str, str] | None = None


def run_jobs(jobs: list[Job], max_rows: int = 4096,
             on_plan=None) -> list[RunResult | Exception]:
    """Run ``jobs``, grouping those that can train together; one outcome per job, in order:
    its RunResult, or the exception that ended it (as ``fedmoo.run.loop.run`` would raise it).
    A RunInterrupted is raised after every running job has checkpointed. ``on_plan(plan)`` is
    told the grouping before training starts."""
    outcomes: list[RunResult | Exception | None] = [None] * len(jobs)
    with contextlib.ExitStack() as held:   # every started run's directory, until the sweep ends
        held.enter_context(fdata.sharing_sources())   # each dataset is read once
        sessions: dict[int, Session] = {}
        plan = Plan(max_rows, total=len(jobs))
        for i, job in enumerate(jobs):
            session = Session(job.cfg, job.run_dir, job.record, progress=False)
            try:
                with contextlib.ExitStack() as one:   # a refused run: its record put back
                    one.enter_context(session)
                    done = session.start()
                    held.push(one.pop_all())
            except Exception as e:  # noqa: BLE001 - reported per job by the caller
                outcomes[i] = e
                continue
            if done is not None:
                outcomes[i] = done
            else:
                sessions[i] = session
                plan.add(i, session)
        for g in (g for g in plan.groups if len(g) > 1):
            for i in g:
                sessions[i].rundir.info["trained_with"] = f"lockstep group of {len(g)} runs"
        if on_plan is not None:
            on_plan(plan)
        for indices in plan.groups + [[i] for i, _ in plan.alone]:
            _run_group([sessions[i] for i in indices], indices, outcomes)
    return outcomes   # type: ignore[return-value]


def _run_group(group: list[Session], indices: list[int], outcomes: list) -> None:
    lead = group[0]
    # a group of several runs has a StackingEngine (Plan, _why_alone)
    train = train_each if len(group) == 1 else lead.parts.engine.train_many
    set_threads(lead.cfg["threads"], num_params(lead.parts.model))   # as `fedmoo run` alone
    set_tf32(lead.cfg["tf32"], lead.parts.device)   # process-wide: every run was
    set_deterministic(lead.cfg["deterministic"])    # built first, the last one's set
    show = any(s.cfg["progress"] for s in group)
    desc = (f"{len(group)} runs together" if len(group) > 1
            else f"{group[0].parts.algo.name} on {group[0].cfg['data']['name']}")
    first = min(s.next_round for s in group)
    with open_bar(max(s.rounds for s in group), first, desc, show) as bar:
        for s in group:
            s.clock()
        with sharing_gathers() if len(group) > 1 else contextlib.nullcontext():
            failures = drive(group, train, bar)
    for i, s in zip(indices, group):   # each completed when its last round was recorded
        outcomes[i] = failures.get(s, s.result)


class Plan:
    """How a sweep is split: started sessions are sorted into classes of compatible runs as
    they come (so each run's copy of the samples is dropped at once for its class's), which
    ``groups`` cuts into lists of job indices trained together, at most ``max_rows`` clients per
    round; ``alone``: the jobs that train on their own, with the reason. Compatible: the
    uncompiled batched engine, the same program, model architecture, dtype and device, and
    equal sample tensors."""

    def __init__(self, max_rows: int, total: int):
        self.max_rows = max_rows
        self.total = total      # jobs of the sweep, including those done already or refused
        self.classes: list[tuple[tuple, Session, list[tuple[int, Session]]]] = []
        self.alone: list[tuple[int, str]] = []

    def add(self, i: int, s: Session) -> None:
        why = _why_alone(s)
        if why is not None:
            self.alone.append((i, why))
            return
        sig = _signature(s)
        for key, rep, members in self.classes:
            mine, theirs = s.parts.federation, rep.parts.federation
            if key == sig and ((mine.x is theirs.x and mine.y is theirs.y) or (
                    torch.equal(mine.x, theirs.x) and torch.equal(mine.y, theirs.y))):
                mine.x, mine.y = theirs.x, theirs.y   # one copy of the samples per class
                members.append((i, s))
                return
        self.classes.append((sig, s, [(i, s)]))

    @property
    def groups(self) -> list[list[int]]:
        groups: list[list[int]] = []
        for _, _, members in self.classes:
            current: list[int] = []
            rows = 0
            for i, s in members:
                n = int(s.parts.per_round)
                if current and rows + n > self.max_rows:
                    groups.append(current)
                    current, rows = [], 0
                current.append(i)
                rows += n
            groups.append(current)
        return groups

    @property
    def grouped(self) -> int:
        return sum(len(g) for g in self.groups if len(g) > 1)

    @property
    def single(self) -> int:
        """Started jobs that train on their own."""
        return len(self.alone) + sum(1 for g in self.groups if len(g) == 1)


# Leaf modules whose arithmetic in a group is proven bit for bit that of a run alone
# (tests/run/test_group.py: logistic regression and MLPs of odd widths). A model with any other
# layer (a convolution: float sums in another order; dropout: masks drawn from the group's
# stream) trains alone, so a job's numbers never depend on how it was launched.
PROVEN = (nn.Linear, nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.LeakyReLU, nn.ELU, nn.Softmax,
          nn.LogSoftmax, nn.Flatten, nn.Identity)
DROPOUT = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)   # with p = 0: the identity


def _why_alone(s: Session) -> str | None:
    engine = s.parts.engine
    if not isinstance(engine, StackingEngine):
        return f"engine: {engine.choice or engine.name}"
    if engine.compiled:
        return "engine.compile=true"
    unproven = sorted({type(m).__name__ for m in s.parts.model.modules()
                       if not list(m.children()) and not isinstance(m, PROVEN)
                       and not (isinstance(m, DROPOUT) and m.p == 0)})
    if unproven:
        return (f"its {', '.join(unproven)} layers are not proven to give in a group the numbers "
                "of a run alone")
    return None


def _signature(s: Session) -> tuple:
    """What must be equal for two runs to share a program (the samples are compared apart)."""
    parts = s.parts
    model, data, engine = parts.model, parts.federation, parts.engine
    params = tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in model.named_parameters())
    modules = tuple((n, type(m).__module__, type(m).__qualname__) for n, m in model.named_modules())
    return (str(parts.device), s.cfg["tf32"], s.cfg["deterministic"],
            params, modules, repr(model), engine.name, data.task,
            tuple(data.x.shape), data.x.dtype, tuple(data.y.shape), data.y.dtype)
