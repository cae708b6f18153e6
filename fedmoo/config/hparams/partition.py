"""The partitions' hyperparameters (``partition.*``): the keys every partition takes
(``Partition``: the partition seed, the train / val / test split, the labels, the multi-task
indicator, a cap per client), and each partitioner's own in a dataclass that extends it. The
partitioners' docstrings (fedmoo.data.partition) say what each knob does; ``fedmoo.data.federate``
reads the common keys. A plugin's partition declares a dataclass that extends ``Partition``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from fedmoo.config.hparams import declare, declares
from fedmoo.config.knobs import integer, knob, seed_knob

SPLITS = ("train", "val", "test")
FEMNIST_LETTERS = tuple(range(36, 46))   # a..j of the 62 FEMNIST / EMNIST-byclass classes


@dataclass
class Partition:
    """The keys of every partition."""

    seed: int = seed_knob("partition seed (separate from the training seed)")
    split: str = knob("dataset", "dataset = keep the dataset's own test split (natural: each "
                      "client's own train/test) | pooled = re-split by fractions",
                      choices=("dataset", "pooled"))
    fractions: Any = knob([0.8, 0.1, 0.1], "train / val / test shares when split=pooled",
                          kind=float, lo=0.0, many=True,
                          what="three non-negative numbers (train, val, test) summing to 1")
    order: Any = knob(list(SPLITS), "order in which each client's shuffled samples are cut "
                      "(split=pooled)", kind=str, choices=SPLITS, many=True,
                      what="a list of train, val and test, each once")
    pool: str = knob("all", "split=pooled: all = dataset's train+test samples | train = train "
                     "split only", choices=("all", "train"))
    compact_labels: bool = knob(False, "renumber the labels the clients use to 0..C'-1 (drops "
                                "unused samples)")
    tasks: Optional[Any] = knob("all", "multi-task data: all (every client holds every task) or one list "
                      "of task indices or names per client")
    tasks_per_client: Optional[int] = knob(None, "multi-task data: n = each client holds n "
                                           "random tasks (partition seed)", lo=1)
    max_per_client: Optional[int] = knob(None, "keep at most this many training samples per "
                                         "client (FMGDA Fig. 1: 256)", lo=1)

    @staticmethod
    def refuse(values: dict[str, Any]) -> str | None:
        """What the knobs' rules cannot say about a section: the line that refuses it, or None.
        ``values``: every key of the section (defaults filled in)."""
        fractions, order = values["fractions"], values["order"]
        if not isinstance(fractions, (list, tuple)) or len(fractions) != 3 \
                or abs(sum(fractions) - 1) > 1e-6:
            return (f"partition.fractions={fractions!r} must be three non-negative numbers "
                    "(train, val, test) summing to 1; e.g. partition.fractions=[0.8,0.1,0.1]")
        if not isinstance(order, (list, tuple)) or sorted(order) != sorted(SPLITS):
            return (f"partition.order={order!r} must list train, val and test once each (the "
                    "order in which each client's shuffled samples are cut); e.g. "
                    "partition.order=[train,val,test]")
        tasks = values["tasks"]
        if tasks is not None and tasks != "all" and not isinstance(tasks, (list, tuple)):
            return (f"partition.tasks={tasks!r} must be all or one list of tasks per client; "
                    "e.g. partition.tasks=all")
        if values["tasks_per_client"] is not None and tasks not in ("all", None):
            return ("partition.tasks and partition.tasks_per_client are both set; keep one "
                    "(tasks=all with tasks_per_client=n, or explicit lists)")
        return None


def classes_problem(classes: Any) -> str | None:
    """What is wrong with ``partition.classes`` (a list of class indices or null); None if
    nothing."""
    if classes is not None and (not isinstance(classes, (list, tuple)) or any(
            not integer(c) or c < 0 for c in classes)):
        return ("must be a list of class indices (non-negative integers) or null; e.g. "
                "partition.classes=[0,2,6]")
    twice = next((c for i, c in enumerate(classes or ()) if c in classes[:i]), None)
    if twice is not None:        # two clients would be dealt the same training samples
        return f"names class {twice} twice; each class may be dealt out once"
    return None


@declares("partition", "shards", "fedmoo.data.partition:shards",
          "McMahan shards: sort by label, cut num_shards equal shards, shards_per_client random "
          "ones each")
class Shards(Partition):
    shards_per_client: int = knob(2, "label shards each client gets", lo=1)
    num_shards: Optional[int] = knob(None, "equal shards the label-sorted pool is cut into; "
                                     "null = num_clients x shards_per_client", lo=1)


@declares("partition", "dirichlet", "fedmoo.data.partition:dirichlet",
          "Dirichlet(beta) label skew per class (NIID-Bench), every client gets at least min_size "
          "samples")
class Dirichlet(Partition):
    beta: float = knob(0.5, "Dirichlet concentration: smaller = more skewed (AdaFed: 0.5 and "
                       "0.05)", lo=0.0, lo_open=True)
    min_size: int = knob(10, "redraw until every client holds at least this many samples",
                         lo=0)
    max_tries: int = knob(1000, "draws before giving up on min_size", lo=1)


@declares("partition", "one_class_per_client", "fedmoo.data.partition:one_class_per_client",
          "Client k holds all samples of classes[k] (FedFV Table 3 / AdaFed Table 7: FMNIST 0, 2, "
          "6)", compact_labels=True)
class OneClassPerClient(Partition):
    classes: Optional[Any] = knob(None, "client k holds every sample of classes[k] (a list of "
                                  "class indices); null = class k for client k",
                                  test=classes_problem)


@declares("partition", "femnist_skewed", "fedmoo.data.partition:femnist_skewed",
          "FEMNIST-skewed: lower-case letters a-j, classes_per_client of them per client (100 "
          "devices)", compact_labels=True)
class FemnistSkewed(Partition):
    classes: Optional[Any] = knob(None, "the classes dealt out (a list of class indices); null = "
                                  "36..45, the letters a..j of the 62 FEMNIST / EMNIST classes",
                                  test=classes_problem)
    classes_per_client: int = knob(5, "classes each client holds (consecutive, wrapping)", lo=1)

    @staticmethod
    def refuse(values: dict[str, Any]) -> str | None:
        msg = Partition.refuse(values)
        if msg:
            return msg
        n = len(FEMNIST_LETTERS if values["classes"] is None else values["classes"])
        if values["classes_per_client"] > n:
            return (f"partition.classes_per_client={values['classes_per_client']} must be "
                    f"between 1 and the {n} classes")
        return None


declare("partition", "iid", Partition, "fedmoo.data.partition:iid",
        "Uniformly random equal-size clients")
declare("partition", "natural", Partition, None,
        "The dataset's own clients (synthetic users, LEAF writers / roles, Adult domains)")
