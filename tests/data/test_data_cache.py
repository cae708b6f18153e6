"""The preprocessed-source cache: damaged entries rebuilt, atomic writes, read-only data_dir."""

from __future__ import annotations

import logging
import os

import pytest
import torch

from fedmoo.data import cache
from fedmoo.data.federated import Source


class Builder:
    """A build function that counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self) -> Source:
        self.calls += 1
        return Source(x=torch.arange(6.0).reshape(3, 2), y=torch.tensor([0, 1, 1]),
                      is_test=torch.tensor([False, False, True]), num_classes=2,
                      input_shape=(2,), class_names=["a", "b"])


def _load(data_dir, raw, build):
    return cache.cached(data_dir, "toy", {"k": 1}, [raw], build)


@pytest.fixture
def raw(tmp_path):
    (tmp_path / "data").mkdir()
    p = tmp_path / "data" / "raw.txt"
    p.write_text("raw")
    return p


def _entries(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _written(tmp_path, raw):
    """A Builder that has built once, and the entry it wrote."""
    build = Builder()
    _load(tmp_path / "data", raw, build)
    [entry] = (tmp_path / "data" / ".fedmoo_cache").iterdir()
    return build, entry


def test_entry_is_written_once_and_read_back(tmp_path, raw):
    build = Builder()
    a = _load(tmp_path / "data", raw, build)
    b = _load(tmp_path / "data", raw, build)
    assert build.calls == 1 and b.y.tolist() == a.y.tolist() and b.input_shape == (2,)
    names = _entries(tmp_path / "data" / ".fedmoo_cache")
    assert len(names) == 1 and names[0].startswith("toy-") and names[0].endswith(".pt")


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "foreign"])
def test_unreadable_entry_is_rebuilt_with_one_warning(tmp_path, raw, caplog, damage):
    build, entry = _written(tmp_path, raw)
    blob = entry.read_bytes()
    if damage == "foreign":
        torch.save({"x": torch.zeros(2)}, entry)           # another version's fields
    else:
        entry.write_bytes({"truncate": blob[: len(blob) // 2], "garbage": b"\0junk" * 50,
                           "empty": b""}[damage])
    with caplog.at_level(logging.WARNING, logger="fedmoo.data.cache"):
        src = _load(tmp_path / "data", raw, build)
    assert build.calls == 2 and src.y.tolist() == [0, 1, 1]
    [record] = caplog.records
    msg = record.getMessage()
    assert "\n" not in msg and msg.startswith(f"cache entry {entry} is unreadable (")
    assert msg.endswith("; rebuilding it")
    assert _load(tmp_path / "data", raw, build) is not None and build.calls == 2   # rewritten


@pytest.mark.parametrize("field", ["y", "class_names"])
def test_an_entry_changed_after_it_was_written_is_rebuilt(tmp_path, raw, caplog, field):
    # a bit flipped on disk, an edit: torch.load reads it without complaint (was served as is)
    build, entry = _written(tmp_path, raw)
    fields = torch.load(entry, weights_only=True)
    if field == "y":
        fields["y"][0] = 1
    else:
        fields["class_names"] = ["b", "a"]
    torch.save(fields, entry)
    with caplog.at_level(logging.WARNING, logger="fedmoo.data.cache"):
        src = _load(tmp_path / "data", raw, build)
    assert build.calls == 2 and src.y.tolist() == [0, 1, 1] and src.class_names == ["a", "b"]
    assert caplog.records[0].getMessage() == (f"cache entry {entry} is unreadable (ValueError: "
                                              "its content is not the content written); "
                                              "rebuilding it")


@pytest.mark.parametrize("craft", ["deflated", "stride0"])
def test_a_crafted_entry_is_refused_before_it_blows_up_in_memory(tmp_path, raw, caplog, craft):
    # a deflated record unpacked 1000x by torch.load; a stride-0 tensor that the digest makes
    # contiguous (1,577 bytes on disk held 4 GB of x)
    import zipfile

    build, entry = _written(tmp_path, raw)
    fields = torch.load(entry, weights_only=True)
    if craft == "deflated":
        fields["x"] = torch.zeros(100_000)
        torch.save(fields, tmp_path / "plain.pt")
        with zipfile.ZipFile(tmp_path / "plain.pt") as zin, zipfile.ZipFile(entry, "w") as zout:
            for info in zin.infolist():
                zout.writestr(info.filename, zin.read(info), zipfile.ZIP_DEFLATED)
        why = "it unpacks to more than its own size"
    else:
        fields["x"] = torch.zeros(1).expand(100_000)
        torch.save(fields, entry)
        why = "its tensors hold more bytes than the entry"
    assert entry.stat().st_size < 20_000
    with caplog.at_level(logging.WARNING, logger="fedmoo.data.cache"):
        src = _load(tmp_path / "data", raw, build)
    assert build.calls == 2 and src.x.shape == (3, 2)
    assert caplog.records[0].getMessage() == (f"cache entry {entry} is unreadable "
                                              f"(ValueError: {why}); rebuilding it")


def test_an_entry_has_the_mode_of_any_new_file(tmp_path, raw):
    # others sharing data_dir read it (mkstemp made it 0600: their runs rebuilt it, warning)
    _, entry = _written(tmp_path, raw)
    (tmp_path / "probe").write_bytes(b"")
    assert entry.stat().st_mode & 0o777 == (tmp_path / "probe").stat().st_mode & 0o777


def test_an_entry_of_other_code_is_not_read(tmp_path, raw, monkeypatch):
    # another fedmoo (a changed loader or normalisation) keys its entries on its own code
    build = Builder()
    _load(tmp_path / "data", raw, build)
    monkeypatch.setattr(cache, "code_digest", lambda: "another fedmoo's")
    _load(tmp_path / "data", raw, build)
    assert build.calls == 2 and len(_entries(tmp_path / "data" / ".fedmoo_cache")) == 2


def test_killed_write_leaves_no_entry_and_no_temporary_file(tmp_path, raw, monkeypatch):
    folder, during, real_save = tmp_path / "data" / ".fedmoo_cache", [], torch.save

    def killed(obj, f):
        f.write(b"PK\x03\x04 half an entry")
        during.extend(_entries(folder))               # what a SIGKILL now would leave
        raise KeyboardInterrupt                       # the process dies mid-write

    monkeypatch.setattr(cache.torch, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        _load(tmp_path / "data", raw, Builder())
    assert len(during) == 1 and during[0].startswith(".toy-") and during[0].endswith(".tmp")
    assert _entries(folder) == []
    monkeypatch.setattr(cache.torch, "save", real_save)
    (folder / during[0]).write_bytes(b"PK half")      # a temp file left by a SIGKILL ...
    build = Builder()
    assert _load(tmp_path / "data", raw, build).y.tolist() == [0, 1, 1] and build.calls == 1


def test_read_only_data_dir_falls_back_to_the_user_cache(tmp_path, raw, monkeypatch, caplog):
    # data_dir/.fedmoo_cache cannot be created (a file is in the way: works as root too)
    (tmp_path / "data" / ".fedmoo_cache").write_text("in the way")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    build = Builder()
    with caplog.at_level(logging.WARNING, logger="fedmoo.data.cache"):
        _load(tmp_path / "data", raw, build)
        _load(tmp_path / "data", raw, build)
    assert build.calls == 1 and not caplog.records
    assert len(_entries(tmp_path / "xdg" / "fedmoo")) == 1


def test_fedmoo_cache_variable_chooses_the_folder(tmp_path, raw, monkeypatch):
    monkeypatch.setenv("FEDMOO_CACHE", str(tmp_path / "shared"))
    build = Builder()
    _load(tmp_path / "data", raw, build)
    _load(tmp_path / "data", raw, build)
    assert build.calls == 1 and len(_entries(tmp_path / "shared")) == 1
    assert not (tmp_path / "data" / ".fedmoo_cache").exists()


def test_no_writable_folder_is_not_fatal(tmp_path, raw, monkeypatch, caplog):
    (tmp_path / "blocked").write_text("a file, not a folder")
    monkeypatch.setenv("FEDMOO_CACHE", str(tmp_path / "blocked"))
    build = Builder()
    with caplog.at_level(logging.WARNING, logger="fedmoo.data.cache"):
        src = _load(tmp_path / "data", raw, build)
    assert src.y.tolist() == [0, 1, 1] and build.calls == 1
    [record] = caplog.records
    msg = record.getMessage()
    assert "\n" not in msg and msg.startswith("the data cache could not be written (")
    assert str(tmp_path / "blocked") in msg and "set FEDMOO_CACHE" in msg


def test_chmod_read_only_data_dir(tmp_path, raw, monkeypatch):
    data = tmp_path / "data"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    data.chmod(0o555)
    try:
        try:
            (data / ".probe").mkdir()
        except PermissionError:
            pass
        else:
            pytest.skip("chmod does not stop writes here (running as root)")
        build = Builder()
        _load(data, raw, build)
        assert build.calls == 1 and len(_entries(tmp_path / "xdg" / "fedmoo")) == 1
    finally:
        data.chmod(0o755)


def test_user_cache_dir_follows_xdg_and_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache.user_cache_dir() == tmp_path / "x" / "fedmoo"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.user_cache_dir() == tmp_path / "home" / ".cache" / "fedmoo"
    assert cache.cache_dirs(tmp_path) == [tmp_path / ".fedmoo_cache",
                                          tmp_path / "home" / ".cache" / "fedmoo"]
    assert os.environ.get("FEDMOO_CACHE") is None


def test_a_file_rewritten_with_its_size_and_mtime_rebuilds_the_entry(tmp_path, raw):
    """``cp -p`` / ``rsync -a`` / an archive with fixed timestamps: same size and mtime, other
    bytes; the entry is keyed on the content."""
    build = Builder()
    _load(tmp_path / "data", raw, build)
    st = raw.stat()
    raw.write_text("RAW")
    os.utime(raw, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert raw.stat().st_size == st.st_size and raw.stat().st_mtime_ns == st.st_mtime_ns
    _load(tmp_path / "data", raw, build)
    assert build.calls == 2
    _load(tmp_path / "data", raw, build)
    assert build.calls == 2


def test_a_file_changed_while_it_is_read_is_refused_not_cached(tmp_path, raw):
    """Rewritten between hashing it (the key) and parsing it: the new content was cached under
    the old content's key, and served stale once the old content came back."""
    from fedmoo.errors import UserError

    def rewritten_during_the_build():
        raw.write_text("new")
        return Builder()()

    with pytest.raises(UserError, match=f"^{raw} changed while it was read .* run again once"):
        _load(tmp_path / "data", raw, rewritten_during_the_build)
    assert _entries(tmp_path / "data" / ".fedmoo_cache") == []
    raw.write_text("raw")
    build = Builder()
    _load(tmp_path / "data", raw, build)
    assert build.calls == 1
