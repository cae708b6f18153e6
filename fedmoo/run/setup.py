"""Building a run's parts from its config: device, algorithm, federation, attack, model, engine.

Every builder turns a mistake in the config into a one-line UserError that names the key.
Before the big allocations, a lower bound of the run's memory must fit (``check_fits``): the
model, its gradients and the global model (3 d, d counted on the ``meta`` device), the cohort's
[K, d] updates, the algorithm's kept vectors and a batch's activations (one sample's, counted
on a probe forward). Only that lower bound is refused, so there are no false alarms.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import re
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fedmoo
from fedmoo import algorithms, attacks, budget, models
from fedmoo import data as fdata
from fedmoo import engine as fengine
from fedmoo.engine.base import Engine, LocalSGD
from fedmoo.engine.cpu_layout import set_row_threads
from fedmoo.errors import UserError
from fedmoo.params import num_params
from fedmoo.run.tracker_child import first_line
from fedmoo.config.schema import cohort_size

log = logging.getLogger(__name__)

SMALL_MODEL = 100_000  # below this many parameters, CPU threads cost more than they give
LOADAVG = "/proc/loadavg"
_TORCH_THREADS = torch.get_num_threads()   # torch's own default, before a run changes it
PRECISIONS = {"float32": torch.float32, "float64": torch.float64}   # ``precision``'s choices


@dataclass
class Parts:
    """What one run trains with (built once; the run directory records their description)."""

    device: torch.device
    algo: Any
    federation: Any
    attack: Any
    model: torch.nn.Module
    engine: Engine
    num_clients: int = 0     # the federation's clients (num_clients: null = the data's own)
    per_round: int = 0       # clients per round

    def describe(self, cfg: dict[str, Any]) -> dict[str, Any]:
        """The run's description in summary.json."""
        device = self.device
        return {
            "algorithm": repr(self.algo),
            "algo": self.algo.name,
            "hparams": self.algo.hparams(),
            "data": cfg["data"]["name"],
            "model": cfg["model"]["name"],
            "num_params": num_params(self.model),
            "num_clients": self.federation.num_clients,
            "tasks": self.federation.task_names,
            "device": str(device),
            **({"tf32": cfg["tf32"]} if device.type == "cuda" else {}),
            "deterministic": cfg["deterministic"],
            "engine": self.engine.name,
            **({"engine_choice": self.engine.choice} if self.engine.choice else {}),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
            else platform.processor() or platform.machine(),
            "versions": {"fedmoo": fedmoo.__version__, "torch": torch.__version__,
                         "numpy": np.__version__, "python": platform.python_version(),
                         **({"fedmoo_git": commit} if (commit := git_commit()) else {})},
        }


@functools.cache
def git_commit(root: Path = Path(fedmoo.__file__).resolve().parent.parent) -> str | None:
    """HEAD of the git checkout fedmoo is imported from (the version stays the same between
    commits); None for an installed copy or without git."""
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out if re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", out) else None


def build_parts(cfg: dict[str, Any], num_clients: int | None, per_round: int | None,
                rundir) -> Parts:
    """Build everything in a fixed order (the model's initial weights come from ``seed``);
    ``rundir`` records the federation as soon as it exists. ``num_clients=None``: the
    federation's own clients."""
    device = resolve_device(cfg["device"])
    set_tf32(cfg["tf32"], device)
    set_deterministic(cfg["deterministic"])
    algo = algorithms.build(cfg["algo"], rounds=cfg["rounds"])
    sgd = LocalSGD.from_config(cfg["client"])
    if num_clients is not None:             # known before any data is read: fail fast
        algo.check_run(num_clients, per_round)
    federation = fdata.load_federated(cfg["data"], cfg["partition"], num_clients,
                                      cfg["data_dir"])      # it refuses keys it does not take
    if num_clients is None:
        num_clients = federation.num_clients
        per_round = cohort_size(num_clients, per_round)
        algo.check_run(num_clients, per_round)
    attack = attacks.build(cfg.get("attack") or {"name": "none"}, federation)
    rundir.write_federation(attack, federation)
    split = cfg["eval_split"]
    if split == "val" and federation.val is None:
        raise UserError("eval_split=val needs a validation split: set partition.split=pooled")
    if int(federation.split(split).sizes.sum()) == 0:   # the run would report nothing
        part = cfg["partition"]
        pooled = part.get("split") == "pooled"
        how = f" with partition.fractions={part.get('fractions')}" if pooled else ""
        fix = (f"give the {split} split a share, e.g. partition.fractions=[0.8,0.1,0.1]" if pooled
               else "choose a dataset with a test split, or partition.split=pooled")
        raise UserError(f"partition={part.get('name')}{how} gives no client any {split} samples, "
                        f"so the run would report nothing; {fix}")
    per_client, total = algo.kept_vectors   # model-sized vectors its state keeps besides w
    d, vectors = parameter_count(cfg, federation), per_client * num_clients + total
    check_fits(cfg, d, per_round, device, kept=vectors)   # before allocating the parameters
    torch.manual_seed(int(cfg["seed"]))
    one = federation.x[federation.train.index[:1].cpu()].cpu()
    model = build_model(cfg, federation, one)
    acts = activations_per_sample(model, one)
    check_fits(cfg, d, per_round, device, acts, vectors)  # before the first batch
    dtype = PRECISIONS[cfg["precision"]]
    model = model.to(device=device, dtype=dtype)
    set_threads(cfg["threads"], num_params(model))
    if federation.x.is_floating_point() and federation.x.dtype != dtype:
        federation.x = federation.x.to(dtype)
    federation = federation.to(device)
    engine = fengine.build(cfg["engine"], model, federation, sgd)
    log.debug("run parts: device %s, engine %s, model %s (%d parameters), %d clients (%s per "
              "round), %d CPU threads", device, engine.name, cfg["model"]["name"], d, num_clients,
              per_round, torch.get_num_threads())
    return Parts(device, algo, federation, attack, model, engine, num_clients, per_round)


def resolve_device(name: str) -> torch.device:
    """``device`` (auto, cpu, cuda or cuda:N), checked against the GPUs this process sees."""
    name = str(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device={name} but CUDA is not available here; use device=cpu or device=auto")
    if device.type == "cuda" and device.index is not None \
            and device.index >= (count := torch.cuda.device_count()):
        raise UserError(f"device={name} but {count} GPU(s) are visible; use cuda:0 to "
                        f"cuda:{count - 1} or device=auto")
    return device


def set_tf32(tf32: bool, device: torch.device) -> None:
    """``tf32``: whether float32 matrix products and cuDNN's convolutions on CUDA may round to
    TensorFloat-32 (off: the engines agree to float32 rounding on any GPU generation)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32


def set_deterministic(flag: bool) -> None:
    """``deterministic``: torch's deterministic kernels only (a kernel without one warns), with
    the cuBLAS workspace they need (CUBLAS_WORKSPACE_CONFIG, read once per process)."""
    if flag:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if flag or torch.are_deterministic_algorithms_enabled():
        # only when it changes something: the call imports torch._dynamo (about 2 s on a CPU)
        torch.use_deterministic_algorithms(flag, warn_only=True)


def set_threads(threads: Any, model_params: int) -> None:
    """``threads``: a count, or ``auto`` = one intra-op thread for models below SMALL_MODEL
    parameters (threading only adds overhead there), else torch's default capped at the CPUs
    free now; rows trained side by side (``fedmoo.engine.cpu_layout``) use the capped count."""
    if threads in (None, "auto"):
        count = max(1, min(_TORCH_THREADS, free_cpus()))
        torch.set_num_threads(1 if model_params < SMALL_MODEL else count)
        set_row_threads(count)
        log.debug("threads=auto: %d intra-op thread(s), rows side by side on %d",
                  torch.get_num_threads(), count)
        return
    torch.set_num_threads(threads)      # a positive integer (fedmoo.config.schema)
    set_row_threads(threads)


def free_cpus() -> int:
    """The CPUs this process may run on less the runnable tasks of /proc/loadavg other than
    this thread (the median of three readings 5 ms apart); at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    others = []
    for i in range(3):
        if i:
            time.sleep(0.005)
        try:
            others.append(int(Path(LOADAVG).read_text().split()[3].split("/")[0]) - 1)
        except (OSError, ValueError, IndexError):
            return cpus
    return max(1, cpus - max(0, statistics.median_low(others)))


def build_model(cfg: dict[str, Any], federation, one: torch.Tensor) -> torch.nn.Module:
    """Build the model and run it on ``one`` training sample, so that a model made for other
    data fails here in one line naming both, not with a shape error inside the first round."""
    m, d = cfg["model"].get("name"), cfg["data"].get("name")
    shape, classes = tuple(federation.input_shape), federation.num_classes
    try:
        model = models.build(cfg["model"], shape, classes, federation.num_tasks).eval()
        with torch.no_grad():
            out = model(one)
        if federation.task == "classification" and federation.y.dim() == 1 and (
                out.dim() != 2 or out.shape[1] != classes):
            raise ValueError(f"it outputs shape {list(out.shape[1:])} per sample")
    except (ValueError, RuntimeError, IndexError) as e:
        raise UserError(f"model={m} does not fit data={d} (inputs of shape {list(shape)}, "
                        f"{classes} classes): {first_line(e)}; choose a model made for {d} "
                        "(see `fedmoo list model`)") from e
    return model.train()


def parameter_count(cfg: dict[str, Any], federation) -> int | None:
    """Parameters of the configured model, without allocating them (None if it cannot tell)."""
    try:
        with torch.device("meta"):
            model = models.build(cfg["model"], tuple(federation.input_shape),
                                 federation.num_classes, federation.num_tasks)
        return sum(p.numel() for p in model.parameters())
    except Exception:  # noqa: BLE001 - the estimate is a guard, never a new failure
        return None


def activations_per_sample(model: torch.nn.Module, x1: torch.Tensor) -> int:
    """Numbers the leaf modules output for the one-sample batch ``x1`` (no gradients kept)."""
    total = 0

    def count(_module, _inputs, out):
        nonlocal total
        if isinstance(out, torch.Tensor):
            total += out.numel()

    hooks = [m.register_forward_hook(count) for m in model.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            model(x1)
    finally:
        for h in hooks:
            h.remove()
    return total


def available(device: torch.device) -> int | None:
    """Bytes fedmoo may still allocate on ``device`` (None if unknown; ``fedmoo.budget``)."""
    return budget.available(device)


def lower_bound(d: int, per_round: int, acts: int = 0, batch: int = 1, kept: int = 0) -> int:
    """Bytes: 3 d + K d parameters-sized tensors, the algorithm's ``kept`` model-sized vectors
    and a batch's activations with gradients."""
    return torch.get_default_dtype().itemsize * (d * (3 + per_round + kept) + 2 * acts * batch)


def check_fits(cfg: dict[str, Any], d: int | None, per_round: int, device: torch.device,
               acts: int = 0, kept: int = 0) -> None:
    free = available(device)
    if d is None or free is None:
        return
    batch = int(cfg["client"]["batch_size"] or 1)   # null = full batch
    need = lower_bound(d, per_round, acts, batch, kept)
    if need <= free:
        return
    what = f"{d:.3g} parameters" + (f" and {acts:,} activations per sample x batch {batch}"
                                    if acts else "")
    state = f" and the {kept:,} model-sized vectors algo={cfg['algo']['name']} keeps" if kept else ""
    need_s, free_s = budget.sizes(need, free)
    raise UserError(
        f"model={cfg['model'].get('name')} does not fit: {what} need at least {need_s} for a "
        f"round of {per_round} clients{state}, but {device.type} has {free_s} free; choose a "
        f"smaller model, fewer clients_per_round{' or num_clients,' if kept else ''} or a "
        "smaller client.batch_size")
