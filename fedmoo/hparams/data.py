"""The data sources' settings (``data.*``): one dataclass of knobs per kind of source of
fedmoo.data, declared under each source's slug. Every source has the keys that describe its
samples (``Dataset``: ``input_shape``, ``num_classes``, which the loader fixes: another value is
refused when the data is loaded); the rest are its loader's options, which the loader receives
resolved (fedmoo.data's ``_load_source``). The help here is what ``fedmoo list data NAME`` and
the override checks show; docs/datasets.md says more."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import List, Optional

from fedmoo.hparams import declare
from fedmoo.knobs import knob, seed_knob

NORMALIZE = ("unit", "standard", "pixel_zscore")    # fedmoo.data.pixels' modes
# Label range of each EMNIST split (letters are labelled 1..26): the splits data.split may name
EMNIST_NUM_CLASSES = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 27, "digits": 10,
                      "mnist": 10}
ADULT_TRAIN_ROWS = ("domains", "authors_code")
FMNIST_SYSTEM_DIR = "/usr/share/datasets/fashion-mnist"   # Debian's dataset-fashion-mnist


@dataclass
class Dataset:
    """What a source's samples are. Its loader fixes both; they are stated for the record (and
    for ``fedmoo describe``), and a value that does not describe the loaded samples is refused."""

    input_shape: List[int] = knob([], "shape of one sample; fixed by the dataset")
    num_classes: int = knob(1, "classes (outputs per task); fixed by the dataset", lo=1)


DESCRIBED = tuple(f.name for f in fields(Dataset))    # not the loader's settings


@dataclass
class Downloaded(Dataset):
    download: bool = knob(True, "fetch missing files (false: refuse instead)")


@dataclass
class Images(Downloaded):
    normalize: str = knob("standard", "pixels: unit (x/255) | standard ((x/255 - mean) / std "
                          "per channel) | pixel_zscore ((x - mu) / (sigma + 0.001) per pixel, "
                          "train statistics)", choices=NORMALIZE)


def _system_dir() -> Optional[str]:
    return knob(FMNIST_SYSTEM_DIR, "also read the Fashion-MNIST gzip files in this folder "
                "(null = off)")


@dataclass
class FashionMnist(Images):
    system_dir: Optional[str] = _system_dir()


@dataclass
class Emnist(Images):
    split: str = knob("byclass", "NIST's split (byclass: 62 classes)", choices=tuple(EMNIST_NUM_CLASSES))


@dataclass
class Cifar(Images):
    verify: bool = knob(False, "md5-check every local batch file")


@dataclass
class Cinic10(Images):
    use_valid: bool = knob(False, "the valid folder joins training")


@dataclass
class MultiMnist(Images):
    seed: int = seed_knob("draws each left image's right partner (train and test separately)")
    train_samples: Optional[int] = knob(None, "keep this many training canvases (random, "
                                        "seeded); null = all 60,000", lo=1)
    test_samples: Optional[int] = knob(None, "same for the 10,000 test canvases", lo=1)


@dataclass
class MultiFashion(MultiMnist):
    system_dir: Optional[str] = _system_dir()


@dataclass
class Adult(Downloaded):
    train_rows: str = knob("domains", "domains | authors_code (the FedMGDA+ authors' off-by-one "
                           "rows: docs/results/fedmgda_plus_adult_bias.md)",
                           choices=ADULT_TRAIN_ROWS)


@dataclass
class Leaf(Dataset):
    root: str = knob("", "folder under data_dir holding LEAF's train/ and test/")
    users: Optional[List[str]] = knob(None, "a list of user ids keeps only those clients "
                                      "(null = all)")


@dataclass
class CelebA(Dataset):
    target: str = knob("Smiling", "an attribute name, or all (40 binary targets, task "
                       "multitask)")
    size: int = knob(64, "images resized to size x size", lo=1)
    keep_valid: bool = knob(False, "the official validation split joins training")


@dataclass
class Digits(Dataset):
    test_fraction: float = knob(0.25, "stratified share of each class held out as the test "
                                "split, in [0, 1)", lo=0.0, hi=1.0, hi_open=True)
    split_seed: int = seed_knob("draws the held-out images")


@dataclass
class RiverFlow(Dataset):
    missing: str = knob("drop", "rows with a missing value: drop (EPO) | zero",
                        choices=("drop", "zero"))
    test_fraction: float = knob(0.3, "held-out rows (no official split), drawn with data.seed",
                                lo=0.0, lo_open=True, hi=1.0, hi_open=True)
    seed: int = seed_knob("draws the held-out rows")
    standardize: bool = knob(True, "z-score inputs and targets with the training rows' "
                             "statistics")


@dataclass
class Synthetic(Dataset):
    num_users: Optional[int] = knob(30, "users generated (the YAML passes ${num_clients})", lo=1)
    alpha: float = knob(1.0, "variance of the users' models (FedProx's alpha)", lo=0.0)
    beta: float = knob(1.0, "variance of the users' inputs (FedProx's beta)", lo=0.0)
    iid: bool = knob(False, "one model and input distribution for every user")
    seed: int = seed_knob("generator seed")
    max_samples: Optional[int] = knob(None, "cap on samples per user (null = FedProx's "
                                      "heavy-tailed sizes)", lo=1)


MNIST = {"input_shape": (1, 28, 28), "num_classes": 10}

declare("data", "synthetic", Synthetic, input_shape=(60,), num_classes=10)
declare("data", "digits", Digits, input_shape=(1, 8, 8), num_classes=10)
declare("data", "mnist", Images, **MNIST)
declare("data", "fmnist", FashionMnist, normalize="pixel_zscore", **MNIST)
declare("data", "emnist", Emnist, normalize="unit", input_shape=(1, 28, 28), num_classes=62)
declare("data", "cifar10", Cifar, input_shape=(3, 32, 32), num_classes=10)
declare("data", "cifar100", Cifar, input_shape=(3, 32, 32), num_classes=100)
declare("data", "femnist", Leaf, root="femnist", input_shape=(1, 28, 28), num_classes=62)
declare("data", "shakespeare", Leaf, root="shakespeare", input_shape=(80,), num_classes=80)
declare("data", "adult", Adult, input_shape=(99,), num_classes=2)
declare("data", "celeba", CelebA, input_shape=(3, 64, 64), num_classes=2)
declare("data", "cinic10", Cinic10, input_shape=(3, 32, 32), num_classes=10)
declare("data", "tinyimagenet", Images, input_shape=(3, 64, 64), num_classes=200)
declare("data", "multimnist", MultiMnist, **MNIST)
declare("data", "multifashion", MultiFashion, **MNIST)
declare("data", "multifashion_mnist", MultiFashion, **MNIST)
declare("data", "riverflow", RiverFlow, input_shape=(64,), num_classes=1)
