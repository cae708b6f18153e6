"""UCI Adult as in AFL / q-FFL: 99 one-hot categorical features, two domains (phd, non-phd).

``data_dir/adult/adult.data`` (training) and ``adult.test`` (its first line ``|1x3 Cross
validator``, labels ending in a dot): comma + space separated records of 15 fields, ``?`` for a
missing value (an all-zero one-hot block). Continuous columns are dropped; label 1 = ``>50K``.
Client 0 ``phd`` holds the Doctorate records, client 1 ``non-phd`` the rest: 413 / 32,148
training and 181 / 16,100 test records, the FedMGDA+ paper's counts.

``train_rows="authors_code"`` picks the training rows as the FedMGDA+ authors' Adult code does
(``authors_code_rows``); the test records are unchanged. It shows why the paper's Table B.2
differs from a run on the real domains (docs/results/fedmgda_plus_adult_bias.md).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from fedmoo.data.checks import read_text
from fedmoo.data.download import Resource, ensure
from fedmoo.data.federated import Source
from fedmoo.errors import UserError

URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/"
MD5 = {"adult.data": "5d7c39d7b8804f071cdd1f2a7c460872",     # UCI's files, as pinned by
       "adult.test": "35238206dfdf7f1fe215bbb874adecdc"}     # common loaders (not UCI itself)
LABELS = {"<=50K": 0, ">50K": 1}
FIELDS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
          "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
          "hours-per-week", "native-country", "income"]
VOCAB = {
    "workclass": ["Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
                  "State-gov", "Without-pay", "Never-worked"],
    "education": ["Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm",
                  "Assoc-voc", "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th",
                  "Doctorate", "5th-6th", "Preschool"],
    "marital-status": ["Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                       "Married-spouse-absent", "Married-AF-spouse"],
    "occupation": ["Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                   "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                   "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                   "Armed-Forces"],
    "relationship": ["Wife", "Own-child", "Husband", "Not-in-family", "Other-relative",
                     "Unmarried"],
    "race": ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"],
    "sex": ["Female", "Male"],
    "native-country": [
        "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
        "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba", "Iran",
        "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico", "Portugal",
        "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan", "Haiti", "Columbia",
        "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand", "Yugoslavia", "El-Salvador",
        "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands"],
}
FEATURE = {cv: i for i, cv in enumerate((c, v) for c, vs in VOCAB.items() for v in vs)}  # one-hot
NUM_FEATURES = len(FEATURE)   # 99
DOMAINS = ["phd", "non-phd"]
RECORDS = {"adult.data": 32_561, "adult.test": 16_281}   # UCI's files (a cut one still parses)
log = logging.getLogger(__name__)


def parse(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Adult file -> (features [n, 99] float32, labels [n], domain [n] 0=phd / 1=non-phd)."""
    rows, labels, domain = [], [], []
    for lineno, line in enumerate(read_text(path, "re-download the file").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("|"):
            continue
        vals = [v.strip() for v in line.split(",")]
        if len(vals) != len(FIELDS):
            raise UserError(f"{path}:{lineno}: {len(vals)} fields, Adult records have "
                            f"{len(FIELDS)}; re-download the file")
        rec = dict(zip(FIELDS, vals))
        known = [(col, rec[col]) for col in VOCAB if rec[col] != "?"]    # ?: missing, no feature
        for col, v in known:
            if (col, v) not in FEATURE:
                raise UserError(f"{path}:{lineno}: unknown {col} value {v!r}; "
                                "re-download the file")
        income = rec["income"].rstrip(".")
        if income not in LABELS:
            raise UserError(f"{path}:{lineno}: income {rec['income']!r} is neither <=50K nor "
                            ">50K; re-download the file")
        rows.append([FEATURE[cv] for cv in known])
        labels.append(LABELS[income])
        domain.append(0 if rec["education"] == "Doctorate" else 1)
    x = np.zeros((len(rows), NUM_FEATURES), np.float32)
    for i, hot in enumerate(rows):
        x[i, hot] = 1.0
    return x, np.array(labels, np.int64), np.array(domain, np.int64)


def authors_code_rows(domain: np.ndarray) -> np.ndarray:
    """Owner of each adult.data record as the FedMGDA+ authors' code trains it (-1 = unused): for
    each domain c, ``set(i + 1 for records i of c)`` used as 0-based indices into the training
    records, the first 80% in the set's iteration order (CPython iterates a set of ints by hash
    slot): each client trains on the records that FOLLOW its domain's records."""
    n = len(domain)
    owner = np.full(n, -1, np.int64)
    for c in (0, 1):
        numbers = list(set(int(i) + 1 for i in np.flatnonzero(domain == c)))
        train = numbers[: int(0.8 * len(numbers))]
        train = [j for j in train if j < n]        # number n has no record (never in the 80%)
        owner[train] = c
    return owner


def load(data_dir: Path, *, download: bool, train_rows: str) -> Source:
    root = data_dir / "adult"
    names = ("adult.data", "adult.test")
    ensure("adult", root, [Resource(URL + n, MD5[n]) for n in names], root, download,
           lambda: all((root / n).is_file() for n in names))
    (xtr, ytr, dtr), (xte, yte, dte) = parse(root / names[0]), parse(root / names[1])
    for name, y in zip(names, (ytr, yte)):    # (a hand-placed copy is not md5-checked)
        if len(y) != RECORDS[name]:
            log.warning("%s has %d records, UCI's %d (a partial copy? re-download it): results "
                        "will not be Adult's", root / name, len(y), RECORDS[name])
    if train_rows == "authors_code":
        dtr = authors_code_rows(dtr)
    return Source(
        x=np.concatenate([xtr, xte]), y=np.concatenate([ytr, yte]),
        is_test=np.concatenate([np.zeros(len(ytr), bool), np.ones(len(yte), bool)]),
        owner=np.concatenate([dtr, dte]),
        num_classes=2, input_shape=(NUM_FEATURES,), client_names=list(DOMAINS),
        class_names=["<=50K", ">50K"],
    )
