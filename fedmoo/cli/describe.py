"""``fedmoo describe [overrides] [--json] [--model-only] [--plot FILE.png]``.

Composes the same Hydra config as ``fedmoo run`` (same overrides), then, without training,
reports the dataset sizes, the model's parameter count and, per client, the train / val / test
sizes and the label histogram of its training samples.
"""

from __future__ import annotations

import json
from typing import Any

from fedmoo.cli.config import compose
from fedmoo.cli.overrides import check_overrides
from fedmoo.errors import Parser, UserError
from fedmoo.report.checks import check_figure, writing
from fedmoo.report.results import save_figure

def describe(cfg: dict[str, Any], model_only: bool = False) -> dict[str, Any]:
    """Everything ``describe`` prints, as one JSON-ready dict (plus private text-only keys)."""
    import numpy as np

    from fedmoo import data as fdata
    from fedmoo import models
    from fedmoo.params import num_params

    n = cfg["num_clients"]                  # null: the dataset's own clients
    info: dict[str, Any] = {"num_params": 0, "num_clients": None if n is None else int(n),
                            "clients": []}
    meta = {"data": cfg["data"]["name"], "model": cfg["model"]["name"],
            "partition": cfg["partition"]["name"]}
    if model_only:
        shape = tuple(int(s) for s in cfg["data"]["input_shape"])
        part = cfg["partition"]     # compact labels: the classes the partition keeps
        n_cls = (len(part["classes"]) if part.get("compact_labels") and part.get("classes")
                 else int(cfg["data"]["num_classes"]))
        n_tasks = None
    else:
        source = fdata.load_source(cfg["data"], cfg["data_dir"])
        fed = fdata.federate(source, cfg["partition"], info["num_clients"])
        info["num_clients"] = fed.num_clients
        shape, n_cls, n_tasks = fed.input_shape, fed.num_classes, fed.num_tasks
        n_test = int(source.is_test.sum())
        meta["samples"] = (int(source.y.shape[0]), int(source.y.shape[0]) - n_test, n_test)
        # label histograms: the labels, or the first task's on multi-task classification data
        y = fed.y.numpy() if fed.y.dim() == 1 else \
            (fed.y[:, 0].numpy() if fed.task == "multitask" else None)
        sizes = {s: (None if getattr(fed, s) is None else getattr(fed, s).sizes.tolist())
                 for s in ("train", "val", "test")}
        for k in range(fed.num_clients):
            counts = [] if y is None else np.bincount(y[fed.train.of(k).numpy()], minlength=n_cls)
            info["clients"].append({
                "id": k, **{s: (0 if v is None else int(v[k])) for s, v in sizes.items()},
                "labels": {str(c): int(n) for c, n in enumerate(counts) if n}})
        meta["has_val"] = fed.val is not None
    model = models.build(cfg["model"], shape, n_cls, n_tasks)
    meta.update(input_shape=list(shape), num_classes=n_cls)
    return {**info, "num_params": num_params(model), "_meta": meta}


def render_text(info: dict[str, Any]) -> str:
    m = info["_meta"]
    lines = []
    if "samples" in m:
        total, train, test = m["samples"]
        lines.append(f"data: {m['data']}  {total} samples ({train} train / {test} test in the "
                     f"dataset's split)  input {m['input_shape']}  classes {m['num_classes']}")
    else:
        lines.append(f"data: {m['data']}  input {m['input_shape']}  classes {m['num_classes']} "
                     "(declared; no data loaded)")
    lines.append(f"model: {m['model']}  {info['num_params']:,} parameters")
    n = info["num_clients"]
    lines.append(f"partition: {m['partition']}  "
                 f"{'the dataset' + chr(39) + 's own' if n is None else n} clients")
    if info["clients"]:
        tr = [c["train"] for c in info["clients"]]
        lines.append(f"train samples per client: min {min(tr)}  max {max(tr)}  total {sum(tr)}")
        lines.append(f"{'client':>6} {'train':>7} {'val':>6} {'test':>6}  labels (train: label x count)")
        for c in info["clients"]:
            hist = " ".join(f"{lab}x{n}" for lab, n in c["labels"].items())
            val = c["val"] if m.get("has_val") else "-"
            lines.append(f"{c['id']:>6} {c['train']:>7} {val:>6} {c['test']:>6}  {hist}")
    return "\n".join(lines)


def plot(info: dict[str, Any], path: str) -> None:
    """Clients x classes heat map of the training label counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    m = info["_meta"]
    if not info["clients"]:
        raise UserError("--plot needs the data: drop --model-only")
    grid = np.zeros((len(info["clients"]), m["num_classes"]))
    for c in info["clients"]:
        for lab, n in c["labels"].items():
            grid[c["id"], int(lab)] = n
    fig, ax = plt.subplots(figsize=(max(4.0, 0.3 * grid.shape[1] + 2), 4.5))
    im = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis")
    if grid.shape[1] <= 20:                    # every class gets its tick
        ax.set_xticks(np.arange(grid.shape[1]))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))   # client ids, never 2.5
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title(f"{m['data']} / {m['partition']}: training labels per client")
    fig.colorbar(im, ax=ax, label="samples")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def main(args: list[str]) -> int:
    p = Parser(
        prog="fedmoo describe", description=__doc__.split("\n\n")[1].replace("``", "`"),
        usage="fedmoo describe [overrides] [--json] [--model-only] [--plot FILE.png]")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--model-only", action="store_true",
                   help="build the model from the declared input shape and classes; load no data")
    p.add_argument("--plot", metavar="FILE.png", help="draw the clients x classes label heat map")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for `fedmoo run`")
    ns = p.parse_args(args)
    if err := check_overrides(ns.overrides):
        raise UserError(err)       # fedmoo.cli.main: one line, exit status 2
    check_figure("--plot", ns.plot)
    info = describe(compose(ns.overrides), model_only=ns.model_only)
    if ns.plot:
        with writing("--plot", ns.plot):
            plot(info, ns.plot)
    if ns.json:
        print(json.dumps({k: v for k, v in info.items() if not k.startswith("_")}))
    else:
        print(render_text(info))
        if ns.plot:
            print(f"plot: {ns.plot}")
    return 0
