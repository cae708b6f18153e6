"""UCI Adult text files with their quirks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedmoo.data import adult
from fedmoo.errors import UserError
from tests.data.sources import source

TRAIN = (
    "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K\n"
    "50, Self-emp-not-inc, 83311, Doctorate, 16, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, 13, ?, >50K\n"
    "38, ?, 215646, HS-grad, 9, Divorced, ?, Not-in-family, Black, Female, 0, 0, 40, Holand-Netherlands, <=50K\n"
    "\n"
)
TEST = (
    "|1x3 Cross validator\n"
    "25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Male, 0, 0, 40, United-States, <=50K.\n"
    "44, Private, 160323, Doctorate, 16, Married-civ-spouse, Prof-specialty, Husband, Asian-Pac-Islander, Male, 7688, 0, 40, India, >50K.\n"
)


def test_adult_99_one_hot_features_labels_and_domains(tmp_path):
    (tmp_path / "adult").mkdir()
    (tmp_path / "adult" / "adult.data").write_text(TRAIN)
    (tmp_path / "adult" / "adult.test").write_text(TEST)
    src = source("adult", tmp_path, download=False)
    assert tuple(src.x.shape) == (5, 99) and src.input_shape == (99,)
    assert src.y.tolist() == [0, 1, 0, 0, 1]
    assert src.is_test.tolist() == [False, False, False, True, True]
    assert src.owner.tolist() == [1, 0, 1, 1, 0] and src.client_names == ["phd", "non-phd"]
    x = src.x.numpy()
    # row 0: workclass State-gov (5), education Bachelors (8), never-married (24+2=26),
    # Adm-clerical (31+8=39), Not-in-family (45+3=48), White (51), Male (56+1=57), US (58)
    assert np.flatnonzero(x[0]).tolist() == [5, 8, 26, 39, 48, 51, 57, 58]
    assert x[1, 8 + 13] == 1                     # Doctorate = feature 21
    assert x[2].sum() == 6 and x[2, 98] == 1     # two "?" blocks empty; Holand-Netherlands last


def test_a_file_with_other_than_ucis_record_count_is_warned_about(tmp_path, monkeypatch, caplog):
    # a copy cut at a line end parses (was read silently as Adult; downloads are md5-checked)
    (tmp_path / "adult").mkdir()
    (tmp_path / "adult" / "adult.data").write_text(TRAIN)
    (tmp_path / "adult" / "adult.test").write_text(TEST)
    monkeypatch.setattr(adult, "RECORDS", {"adult.data": 3, "adult.test": 3})
    with caplog.at_level("WARNING", logger="fedmoo.data.adult"):
        source("adult", tmp_path, download=False)
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'adult' / 'adult.test'} has 2 records, UCI's 3 (a partial copy? re-download "
        "it): results will not be Adult's"]


@pytest.mark.parametrize("test_text,needle", [
    (TEST.replace("Black, Male", "Bl\xe4ck, Male"),
     "adult.test:2: byte 98 (0xe4) is not UTF-8 text"),
    (TEST.replace("<=50K.", "maybe."), "adult.test:2: income 'maybe.' is neither <=50K nor >50K"),
    (TEST.replace("India", "Atlantis"), "adult.test:3: unknown native-country value 'Atlantis'"),
])
def test_damaged_adult_lines_are_one_line_errors(tmp_path, test_text, needle):
    (tmp_path / "adult").mkdir()
    (tmp_path / "adult" / "adult.data").write_text(TRAIN)
    (tmp_path / "adult" / "adult.test").write_bytes(test_text.encode("latin1"))
    with pytest.raises(UserError) as e:
        source("adult", tmp_path, download=False)
    msg = str(e.value)
    assert "\n" not in msg and needle in msg and msg.endswith("re-download the file")


def test_authors_code_rows_train_the_record_after_each_domain_record():
    # records 0..9; Doctorate at 2 and 6. The authors' numbers are i + 1: phd -> {3, 7},
    # non-phd -> {1, 2, 4, 5, 6, 8, 9, 10}; the first 80% of each set trains (int(0.8 * n)):
    # phd int(1.6) = 1 -> record 3; non-phd int(6.4) = 6 -> records 1, 2, 4, 5, 6, 8.
    domain = np.array([1, 1, 0, 1, 1, 1, 0, 1, 1, 1])
    owner = adult.authors_code_rows(domain)
    assert owner.tolist() == [-1, 1, 1, 0, 1, 1, 1, -1, 1, -1]


def test_authors_code_rows_follow_set_order_not_value_order():
    # Numbers above the set's table size wrap around: {5000, 3} iterates 3 first only by
    # luck of the slot; 100 phd numbers spread over 0..32560 do not come out sorted.
    domain = np.ones(32561, np.int64)
    rng = np.random.default_rng(0)
    domain[np.sort(rng.choice(32561, 100, replace=False))] = 0
    owner = adult.authors_code_rows(domain)
    numbers = list(set(int(i) + 1 for i in np.flatnonzero(domain == 0)))
    assert numbers != sorted(numbers)                       # the order matters
    assert np.flatnonzero(owner == 0).tolist() == sorted(numbers[:80])


def test_unknown_train_rows_is_one_line(tmp_path):
    (tmp_path / "adult").mkdir()
    (tmp_path / "adult" / "adult.data").write_text(TRAIN)
    (tmp_path / "adult" / "adult.test").write_text(TEST)
    with pytest.raises(UserError, match="data.train_rows='paper' must be domains or authors_code"):
        source("adult", tmp_path, download=False, train_rows="paper")


def test_authors_code_rows_federate_without_the_unused_records(tmp_path):
    from fedmoo.data import federate

    line = TRAIN.splitlines()[0] + "\n"                       # a Bachelors record
    records = [line.replace("Bachelors", "Doctorate") if i in (2, 6) else line for i in range(10)]
    (tmp_path / "adult").mkdir()
    (tmp_path / "adult" / "adult.data").write_text("".join(records))
    (tmp_path / "adult" / "adult.test").write_text(TEST)
    src = source("adult", tmp_path, download=False, train_rows="authors_code")
    # as in the hand-computed case above: phd trains record 3; non-phd 1, 2, 4, 5, 6, 8;
    # records 0, 7 and 9 train nobody (owner -1) and the natural partition leaves them out
    fed = federate(src, {"name": "natural"}, None)
    assert fed.train.of(0).tolist() == [3] and fed.train.of(1).tolist() == [1, 2, 4, 5, 6, 8]
    assert fed.test.of(0).tolist() == [11] and fed.test.of(1).tolist() == [10]


@pytest.mark.parametrize("partition", [{"name": "iid"}, {"name": "shards"}])
def test_authors_code_rows_only_federate_naturally(tmp_path, partition):
    """Another partition would deal out the records the authors' rows leave to no client, and the
    run would be recorded as train_rows=authors_code although the option did nothing."""
    from fedmoo.data import federate

    (tmp_path / "adult").mkdir()
    (tmp_path / "adult" / "adult.data").write_text(TRAIN.splitlines()[0] + "\n" + TRAIN)
    (tmp_path / "adult" / "adult.test").write_text(TEST)
    src = source("adult", tmp_path, download=False, train_rows="authors_code")
    with pytest.raises(UserError, match="the data leaves 2 samples to no client .*use "
                                        "partition=natural"):
        federate(src, partition, 2)


def test_an_unreadable_file_is_one_line_naming_it(tmp_path, monkeypatch):
    (tmp_path / "adult").mkdir()
    (tmp_path / "adult" / "adult.data").write_text(TRAIN)
    (tmp_path / "adult" / "adult.test").write_text(TEST)
    real = Path.read_bytes

    def read_bytes(self):      # (root reads a chmod 000 file, so the refusal is simulated)
        if self.name == "adult.test":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with pytest.raises(UserError) as e:                  # was a traceback, status "internal"
        source("adult", tmp_path, download=False)
    path = tmp_path / "adult" / "adult.test"
    assert str(e.value) == (f"{path} cannot be read (PermissionError: [Errno 13] Permission "
                            f"denied: '{path}'); re-download the file")
