"""The run knobs, declared once: ``Config`` (the top-level keys) and ``Client`` (the ``client``
section), Hydra structured configs that ``register`` stores (config.yaml's defaults list starts
from them), so Hydra refuses a value of the wrong type while composing. ``check`` tests what a
type cannot say (ranges, choices, cohort size, finite numbers) before torch is imported and any
directory is made (``fedmoo.cli.precheck``, fedmoo's sweeper, ``fedmoo.run.loop``); ``fill``
gives a partial config the declared defaults. Torch-free.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from fedmoo.config import hparams
from fedmoo.errors import UserError
from fedmoo.config.knobs import SEED_LIMIT, Knob, integer, knob, of, seed_knob
from fedmoo.config.knobs import refusal as knobs_refusal

SCHEMA_NAME = "fedmoo_schema"
SECTIONS = ("data", "partition", "model", "client", "algo")   # every run needs these
LOGGERS = ("none", "tensorboard", "mlflow", "wandb")
ENGINES = ("auto", "sequential", "batched")


@dataclass
class Client:
    """Local training: minibatch SGD for ``epochs`` passes (or ``local_steps`` steps) over a
    client's data."""

    lr: float = knob(0.01, "local learning rate", lo=0.0, lo_open=True)
    batch_size: Optional[int] = knob(10, "minibatch size (null = full batch: one step per epoch)",
                                     lo=1)
    epochs: int = knob(1, "passes over the client's data per round", lo=1)
    local_steps: Optional[int] = knob(None, "if set, this many minibatch steps instead of epochs",
                                      lo=1)
    momentum: float = knob(0.0, "SGD momentum, in [0, 1)", lo=0.0, hi=1.0, hi_open=True)
    weight_decay: float = knob(0.0, "L2 penalty of local SGD", lo=0.0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_made", True)

    def __setattr__(self, name: str, value: Any) -> None:
        """A made record is not changed (engines and rows share it); not ``frozen=True``,
        which would make Hydra's ``client`` node read-only to overrides."""
        if getattr(self, "_made", False):
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    @classmethod
    def from_config(cls, section: dict[str, Any]) -> Client:
        """The record a run's engine trains with: a ``client`` section checked as a run's is,
        defaults filled, each value of its declared type (``lr: 1`` is 1.0)."""
        given = {k: v for k, v in section.items() if k != "description"}
        check_knobs({"client": given})
        kinds = {k.leaf: k.type for k in of(cls, "client.")}
        return cls(**{k: v if v is None or kinds[k] not in (float, int) else kinds[k](v)
                      for k, v in given.items()})


@dataclass
class EngineOptions:
    """The options of ``engine=batched``, written as a section: ``engine={name: batched,
    program: vmap}`` (an ``engine.program=...`` override alone is refused with that form)."""

    program: str = knob("auto", "auto (torch.fx lockstep program where the model traces, else "
                        "vmap) | lockstep | vmap", choices=("auto", "lockstep", "vmap"))
    compile: bool = knob(False, "run the vmap step through torch.compile")
    cuda_graph: bool = knob(False, "replay each step as a CUDA graph (device=cuda)")


@dataclass
class LockstepOptions:
    """The options of ``hydra/launcher=lockstep`` (``hydra.launcher.max_rows``), refused by the
    launcher when Hydra makes it, before any job or directory."""

    max_rows: int = knob(4096, "most clients per round one group trains (a larger sweep is "
                         "split into groups)", lo=1)


@dataclass
class Config:
    """The top-level keys of a run's config. The sections a group fills (``data``, ``algo``,
    ...) are declared as open mappings: their keys belong to the component each names."""

    seed: int = seed_knob("training seed (init, sampling, shuffles); partition.seed is separate")
    rounds: int = knob(100, "communication rounds", lo=1)
    num_clients: Optional[int] = knob(
        30, "clients in the federation (null = the dataset's own clients: partition=natural, "
        "LEAF writers, ...)", lo=1)
    clients_per_round: Optional[int] = knob(10, "clients trained per round (null = all clients "
                                            "every round)", lo=1)
    sampling: str = knob("uniform", "uniform | weighted (prob. proportional to training samples, "
                         "without replacement)", choices=("uniform", "weighted"))
    eval_every: int = knob(1, "evaluate (and write a rounds.csv row) every this many rounds", lo=1)
    track_improved: bool = knob(True, "round/improved_frac: share of the cohort whose train loss "
                                "did not rise")
    log_clients_every: int = knob(0, "> 0: per-client test/train metrics every N rounds -> "
                                  "clients_rounds.csv", lo=0)
    eval_split: str = knob("test", "test | val (val needs partition.split=pooled)",
                           choices=("test", "val"))
    checkpoint_every: int = knob(10, "write checkpoint.pt every this many rounds (0 = only on "
                                 "SIGTERM/SIGINT)", lo=0)
    resume: bool = knob(True, "same run dir: continue from checkpoint.pt, skip if already done; "
                        "false = start over")
    diverge_norm: Optional[float] = knob(1.0e6, "stop as diverged when the global model's L2 "
                                         "norm exceeds this (null = NaN/inf only)",
                                         lo=0.0, lo_open=True)
    threads: Any = knob("auto", "CPU threads: auto = 1 for models under 100k parameters (rows "
                        "trained side by side: the count below), else torch's default capped at "
                        "the CPUs free now (the load taken off)",
                        kind=int, lo=1, words=("auto",))
    loss_threshold: Optional[float] = knob(0.01, "multi-task data: summary's rounds until every "
                                           "task's train loss < this", lo=0.0)
    device: str = knob("auto", "auto | cpu | cuda | cuda:N", pattern=r"auto|cpu|cuda(:\d+)?",
                       what="auto, cpu, cuda or cuda:N")
    tf32: bool = knob(False, "CUDA: let float32 matmuls/convolutions use TensorFloat-32 (faster, "
                      "less exact)")
    deterministic: bool = knob(False, "true: torch's deterministic kernels (CUDA runs and resumes "
                               "repeat bit for bit where every kernel has one; slower)")
    precision: str = knob("float32", "float32 | float64 (model, samples and server math; float64 "
                          "for exact comparisons)", choices=("float32", "float64"))
    engine: Any = knob("auto", "auto (batched where faster: CUDA, or linear models on a CPU) | "
                       "sequential (reference loop) | batched (cohort in lockstep, "
                       "docs/PERFORMANCE.md)", kind=str, choices=ENGINES, mapping=True)
    data_dir: str = knob("${oc.env:FEDMOO_DATA,./data}", "where datasets are read and cached "
                         "(FEDMOO_DATA, else ./data)")
    progress: bool = knob(True, "progress bar on stderr")
    logger: Any = knob("none", "none | tensorboard | mlflow | wandb, or a list: "
                       "[tensorboard,mlflow] (rounds.csv stays the record)",
                       kind=str, choices=LOGGERS, many=True)
    traceback: bool = knob(False, "print full tracebacks for user errors (debug=true sets it)")
    # the groups' sections, in the order of config.yaml's defaults list; but for client, their
    # keys belong to the component each names (declared in fedmoo.config.hparams)
    model: Dict[str, Any] = field(default_factory=dict)
    partition: Dict[str, Any] = field(default_factory=dict)
    client: Client = field(default_factory=Client)
    data: Dict[str, Any] = field(default_factory=dict)
    algo: Dict[str, Any] = field(default_factory=dict)
    attack: Dict[str, Any] = field(default_factory=dict)


def register() -> None:
    """Store ``Config`` in Hydra's ConfigStore as ``fedmoo_schema`` (config.yaml's defaults
    list names it first)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SCHEMA_NAME, node=Config)
    hparams.store()    # the components' declarations, which the groups' YAML files start from


# -- reading the declarations ---------------------------------------------------------------

def knobs() -> tuple[Knob, ...]:
    """Every knob: the top-level ones in declaration order, then ``client.*``."""
    return of(Config) + of(Client, "client.")


def top_level_keys() -> set[str]:
    """The keys of the top level of a run's config (knobs and sections)."""
    return {f.name for f in dataclasses.fields(Config)}


def defaults() -> dict[str, Any]:
    """The declared defaults as a config: ``{"rounds": 100, ..., "client": {"lr": 0.01, ...}}``
    (an interpolation resolved: ``data_dir`` is ``FEDMOO_DATA``, else ``./data``)."""
    out: dict[str, Any] = {}
    for k in knobs():
        value = k.default
        if isinstance(value, str) and "${" in value:
            from omegaconf import OmegaConf

            value = OmegaConf.create({"v": value}).v
        head, _, leaf = k.key.rpartition(".")
        (out.setdefault(head, {}) if head else out)[leaf] = value
    return out


def fill(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with every knob it lacks (``client.*`` included) set to its declared default."""
    base = defaults()
    out = {**base, **cfg}
    client = cfg.get("client")
    if isinstance(client, dict):
        out["client"] = {**base["client"], **client}
    return out


# -- checking values ----------------------------------------------------------------------

def refusal(key: str, value: Any) -> str | None:
    """The one-line message for ``key=value`` (dotted key) if the schema refuses it, else None
    (also for keys it does not declare)."""
    k = next((k for k in knobs() if k.key == key), None)
    return None if k is None else knobs_refusal(k, value)


def check(cfg: dict[str, Any]) -> None:
    """Refuse (``UserError``, one line naming the key) a config a run cannot use; a partial
    config is checked as far as it goes."""
    missing = [s for s in SECTIONS if not isinstance(cfg.get(s), dict) or not cfg[s]]
    if missing:
        raise UserError(f"the config has no {missing[0]} section (removed with ~{missing[0]}?); "
                        f"every run needs one: {missing[0]}=<name> (see `fedmoo list {missing[0]}`)")
    check_seeds(cfg)
    check_knobs(cfg)
    n, per_round = cfg.get("num_clients"), cfg.get("clients_per_round")
    if isinstance(n, int) and isinstance(per_round, int):
        cohort_size(n, per_round)
    for group in hparams.GROUPS:     # each component's own keys, by its declaration
        if isinstance(cfg.get(group), dict):
            hparams.check(group, cfg[group])
    check_finite(cfg)   # after the knobs, whose messages say more


def engine_options() -> tuple[Knob, ...]:
    """``engine.program``, ``engine.compile``, ``engine.cuda_graph``: ``engine=batched``'s."""
    return of(EngineOptions, "engine.")


def check_launcher_options(values: dict[str, Any]) -> None:
    """``hydra/launcher=lockstep``'s options, each by its knob: UserError on the first bad one."""
    for k in of(LockstepOptions, "hydra.launcher."):
        msg = k.leaf in values and knobs_refusal(k, values[k.leaf])
        if msg:
            raise UserError(msg)


def check_knobs(cfg: dict[str, Any]) -> None:
    """Each knob ``cfg`` holds, alone: its type and range or choices, no ``client`` key that is
    not an SGD setting, and an ``engine`` section holding only ``engine=batched``'s options."""
    declared = {f.name for f in dataclasses.fields(Client)}
    unknown = sorted(set(cfg.get("client") or {}) - declared)
    if unknown:       # the section is declared whole (``+client.foo=1`` would reach the engine)
        raise UserError(f"client.{unknown[0]} is not a setting of client; remove it (its "
                        f"settings: {', '.join(sorted(declared))})")
    engine = cfg.get("engine")
    if isinstance(engine, dict):
        options = {k.leaf: k for k in engine_options()}
        name = engine.get("name")
        extra = sorted(set(engine) - {"name", *options}) or (
            sorted(set(engine) - {"name"}) if name != "batched" else [])
        if extra:
            raise UserError(f"engine.{extra[0]} is not an option of engine={name}; "
                            + ("engine=batched takes engine.program (auto, lockstep or vmap), "
                               "engine.compile and engine.cuda_graph (true or false)"
                               if name == "batched" else "its options are engine=batched's: "
                               "name the engine, engine=batched"))
        for key, value in engine.items():
            msg = key in options and knobs_refusal(options[key], value)
            if msg:
                raise UserError(msg)
    for k in knobs():
        head, _, leaf = k.key.rpartition(".")
        node = cfg.get(head) if head else cfg
        if isinstance(node, dict) and leaf in node:
            msg = knobs_refusal(k, node[leaf])
            if msg:
                raise UserError(msg)


def cohort_size(num_clients: int, clients_per_round: int | None) -> int:
    """``clients_per_round`` against the number of clients (null = all of them)."""
    k = num_clients if clients_per_round is None else clients_per_round
    if k > num_clients:
        raise UserError(f"clients_per_round={k} is larger than num_clients={num_clients}; "
                        f"set clients_per_round<={num_clients} (or null for all)")
    return k


def check_seeds(node: Any, path: str = "") -> None:
    """Every ``seed`` / ``*_seed`` key, at any depth: an integer in [0, 2**63)."""
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        where = f"{path}{key}"
        if isinstance(value, dict):
            check_seeds(value, where + ".")
        elif (key == "seed" or str(key).endswith("_seed")) and value is not None and (
                not integer(value) or not 0 <= value < SEED_LIMIT):
            raise UserError(f"{where}={value!r} must be a non-negative integer below 2**63; "
                            f"e.g. {where}=0")


def check_finite(node: Any, path: str = "") -> None:
    """Every number in the config, at any depth (lists included), is finite: ``nan`` or ``inf``
    is never a setting (``partition.beta=nan`` would draw NaN proportions)."""
    items = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, (list, tuple)) else ()
    for key, value in items:
        where = f"{path}[{key}]" if isinstance(node, (list, tuple)) else \
            f"{path}.{key}" if path else str(key)
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{where}={value} is not a finite number; give it a number "
                            "(`fedmoo run --cfg job` shows the defaults)")
        check_finite(value, where)


def cohort(cfg: dict[str, Any]) -> tuple[int | None, int | None]:
    """``(num_clients, clients_per_round)`` of a checked config, clients_per_round null = all
    the clients. ``num_clients: null`` (the dataset's own clients) is None here, with
    clients_per_round as given: the run checks both once the federation tells the count."""
    n, k = cfg["num_clients"], cfg["clients_per_round"]
    return n, (k if n is None else cohort_size(n, k))


def type_refusal(error: BaseException | None) -> str | None:
    """The knob's line for OmegaConf's refusal of a value of the wrong type (``rounds=abc``:
    ``full_key`` and ``value`` on ``error`` or its causes); None when no knob is named."""
    seen = 0
    while error is not None and seen < 8:
        key = getattr(error, "full_key", None)
        if isinstance(key, str) and key:
            return refusal(key, getattr(error, "value", None))
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None
