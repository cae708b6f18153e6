"""The data sources' settings (``data.*``): one dataclass of knobs per kind of source of
fedmoo.data, declared under each source's slug. Every source has the keys that describe its
samples (``Dataset``: ``input_shape``, ``num_classes``, which the loader fixes: another value is
refused when the data is loaded); the rest are its loader's options, which the loader receives
resolved (``fedmoo.data.load_source``). The help here is what ``fedmoo list data NAME`` and
the override checks show; docs/datasets.md says more."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import List, Optional

from fedmoo.config.hparams import declares
from fedmoo.config.knobs import knob, seed_knob

NORMALIZE = ("unit", "standard", "pixel_zscore")    # fedmoo.data.pixels' modes
# Label range of each EMNIST split (letters are labelled 1..26): the splits data.split may name
EMNIST_NUM_CLASSES = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 27, "digits": 10,
                      "mnist": 10}
ADULT_TRAIN_ROWS = ("domains", "authors_code")
FMNIST_SYSTEM_DIR = "/usr/share/datasets/fashion-mnist"   # Debian's dataset-fashion-mnist
MNIST = {"input_shape": (1, 28, 28), "num_classes": 10}


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


@declares("data", "tinyimagenet", "fedmoo.data.imagefolder:load_tinyimagenet",
          "Tiny-ImageNet (200 classes, 64x64; AdaFed Table 9: ResNet-18-GN, 20 clients, "
          "Dirichlet; its 0.05: setup=adafed_tinyimagenet_dirichlet)",
          input_shape=(3, 64, 64), num_classes=200)
@declares("data", "mnist", "fedmoo.data.mnist:load_mnist",
          "MNIST (IDX files): 200 clients x 2 label shards, CNN (FedFV's 80/20 client split: "
          "setup=fedfv_mnist_shards)", **MNIST)
class Images(Downloaded):
    normalize: str = knob("standard", "pixels: unit (x/255) | standard ((x/255 - mean) / std "
                          "per channel) | pixel_zscore ((x - mu) / (sigma + 0.001) per pixel, "
                          "train statistics)", choices=NORMALIZE)


def _system_dir() -> Optional[str]:
    return knob(FMNIST_SYSTEM_DIR, "also read the Fashion-MNIST gzip files in this folder "
                "(null = off)")


@declares("data", "fmnist", "fedmoo.data.mnist:load_fmnist",
          "Fashion-MNIST (IDX files or Debian's dataset-fashion-mnist): 100 label-shard clients "
          "(FedMGDA+'s: setup=fedmgda_plus_fmnist_shards)", normalize="pixel_zscore", **MNIST)
class FashionMnist(Images):
    system_dir: Optional[str] = _system_dir()


@declares("data", "emnist", "fedmoo.data.mnist:load_emnist",
          "EMNIST byclass (62 classes, IDX files from NIST's gzip.zip), FEMNIST-skewed: 100 "
          "devices x 5 of letters a-j", normalize="unit", input_shape=(1, 28, 28), num_classes=62)
class Emnist(Images):
    split: str = knob("byclass", "NIST's split (byclass: 62 classes)", choices=tuple(EMNIST_NUM_CLASSES))


@declares("data", "cifar100", "fedmoo.data.cifar:load_cifar100",
          "CIFAR-100 (python pickles; AdaFed setup 1: ResNet-18-GN, 10 clients, Dirichlet 0.5, "
          "all per round)", input_shape=(3, 32, 32), num_classes=100)
@declares("data", "cifar10", "fedmoo.data.cifar:load_cifar10",
          "CIFAR-10 (python pickles): cnn_cifar, 100 label-shard clients, 10 per round "
          "(FedMGDA+'s 5 of 500 shards: setup=fedmgda_plus_cifar10_shards)",
          input_shape=(3, 32, 32), num_classes=10)
class Cifar(Images):
    verify: bool = knob(False, "md5-check every local batch file")


@declares("data", "cinic10", "fedmoo.data.imagefolder:load_cinic10",
          "CINIC-10 image folders (AdaFed Table 8: ResNet-18-GN, 50 clients, Dirichlet 0.5, all "
          "per round)", input_shape=(3, 32, 32), num_classes=10)
class Cinic10(Images):
    use_valid: bool = knob(False, "the valid folder joins training")


@declares("data", "multimnist", "fedmoo.data.multimnist:load_multimnist",
          "MultiMNIST (Sener & Koltun): two MNIST digits on a 36x36 canvas resized to 28x28, "
          "tasks L and R (needs the MNIST IDX files)", **MNIST)
class MultiMnist(Images):
    seed: int = seed_knob("draws each left image's right partner (train and test separately)")
    train_samples: Optional[int] = knob(None, "keep this many training canvases (random, "
                                        "seeded); null = all 60,000", lo=1)
    test_samples: Optional[int] = knob(None, "same for the 10,000 test canvases", lo=1)


@declares("data", "multifashion_mnist", "fedmoo.data.multimnist:load_multifashion_mnist",
          "MultiFashion+MNIST: an MNIST digit (left) and a Fashion-MNIST image (right) on the "
          "MultiMNIST canvas", **MNIST)
@declares("data", "multifashion", "fedmoo.data.multimnist:load_multifashion",
          "MultiFashion: two Fashion-MNIST images on the MultiMNIST canvas, tasks L and R "
          "(offline via Debian's dataset-fashion-mnist)", **MNIST)
class MultiFashion(MultiMnist):
    system_dir: Optional[str] = _system_dir()


@declares("data", "adult", "fedmoo.data.adult:load",
          "UCI Adult, 99 one-hot features, two clients: phd and non-phd (AFL / q-FFL / FedMGDA+)",
          input_shape=(99,), num_classes=2)
class Adult(Downloaded):
    train_rows: str = knob("domains", "domains | authors_code (the FedMGDA+ authors' off-by-one "
                           "rows: docs/results/fedmgda_plus_adult_bias.md)",
                           choices=ADULT_TRAIN_ROWS)


@declares("data", "shakespeare", "fedmoo.data.leaf:load_shakespeare",
          "LEAF Shakespeare next-character prediction (80-char vocabulary), one client per role",
          root="shakespeare", input_shape=(80,), num_classes=80)
@declares("data", "femnist", "fedmoo.data.leaf:load_femnist",
          "LEAF FEMNIST (JSON from LEAF's preprocess.sh), natural writer clients, 62 classes",
          root="femnist", input_shape=(1, 28, 28), num_classes=62)
class Leaf(Dataset):
    root: str = knob("", "folder under data_dir holding LEAF's train/ and test/")
    users: Optional[List[str]] = knob(None, "a list of user ids keeps only those clients "
                                      "(null = all)")


@declares("data", "celeba", "fedmoo.data.celeba:load",
          "CelebA aligned faces, one binary attribute (or all 40 as a multi-task target), 64x64",
          input_shape=(3, 64, 64), num_classes=2)
class CelebA(Dataset):
    target: str = knob("Smiling", "an attribute name, or all (40 binary targets, task "
                       "multitask)")
    size: int = knob(64, "images resized to size x size", lo=1)
    keep_valid: bool = knob(False, "the official validation split joins training")


@declares("data", "digits", "fedmoo.data.digits:load",
          "scikit-learn's 8x8 handwritten digits: 1,797 real images, 10 classes, bundled (no "
          "download)", input_shape=(1, 8, 8), num_classes=10)
class Digits(Dataset):
    test_fraction: float = knob(0.25, "stratified share of each class held out as the test "
                                "split, in [0, 1)", lo=0.0, hi=1.0, hi_open=True)
    split_seed: int = seed_knob("draws the held-out images")


@declares("data", "riverflow", "fedmoo.data.riverflow:load",
          "River Flow 1 (Mulan rf1.arff): 64 flow features, 8 sites' flow 48 h ahead as 8 "
          "regression tasks", input_shape=(64,), num_classes=1)
class RiverFlow(Dataset):
    missing: str = knob("drop", "rows with a missing value: drop (EPO) | zero",
                        choices=("drop", "zero"))
    test_fraction: float = knob(0.3, "held-out rows (no official split), drawn with data.seed",
                                lo=0.0, lo_open=True, hi=1.0, hi_open=True)
    seed: int = seed_knob("draws the held-out rows")
    standardize: bool = knob(True, "z-score inputs and targets with the training rows' "
                             "statistics")


@declares("data", "synthetic", "fedmoo.data.synthetic:load",
          "FedProx Synthetic(alpha, beta): generated users, 60 features, 10 classes (no download)",
          input_shape=(60,), num_classes=10)
class Synthetic(Dataset):
    num_users: Optional[int] = knob(30, "users generated (the YAML passes ${num_clients})", lo=1)
    alpha: float = knob(1.0, "variance of the users' models (FedProx's alpha)", lo=0.0)
    beta: float = knob(1.0, "variance of the users' inputs (FedProx's beta)", lo=0.0)
    iid: bool = knob(False, "one model and input distribution for every user")
    seed: int = seed_knob("generator seed")
    max_samples: Optional[int] = knob(None, "cap on samples per user (null = FedProx's "
                                      "heavy-tailed sizes)", lo=1)


