"""Download (md5-checked, via an injected opener / file:// URL) and safe extraction."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import urllib.error
import zipfile

import pytest

from fedmoo.data import adult, cifar, download, imagefolder, mnist
from fedmoo.data.download import Resource
from fedmoo.errors import UserError
from tests.data.sources import source


def _md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


def test_md5sum_of_known_bytes(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    assert download.md5sum(tmp_path / "f") == "900150983cd24fb0d6963f7d28e17f72"


def test_download_checks_md5_and_keeps_good_file(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"payload")
    res = Resource(src.as_uri(), _md5(b"payload"))
    out = download.download(res, tmp_path / "dl")
    assert out.read_bytes() == b"payload" and not list((tmp_path / "dl").glob("*.part"))
    with pytest.raises(ValueError, match="md5"):
        download.download(Resource(src.as_uri(), "0" * 32), tmp_path / "dl2")
    assert not list((tmp_path / "dl2").iterdir())


def test_no_network_gives_one_line_with_dataset_path_and_url(tmp_path, monkeypatch):
    def offline(url):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(download, "urlopen", offline)
    with pytest.raises(UserError) as e:
        source("cifar10", tmp_path / "data")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("data=cifar10:")
    assert str(tmp_path / "data" / "cifar-10-batches-py") in msg
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in msg
    with pytest.raises(UserError, match="data=mnist: files not found"):
        source("mnist", tmp_path / "data")
    assert not (tmp_path / "data").exists()        # a failed try leaves no empty folders


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_cifar10_from_local_archive_with_injected_md5(tmp_path, fmt, monkeypatch):
    staging = tmp_path / "staging"
    fmt.write_cifar10(staging, rows=2)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(staging / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    spec = dict(cifar.DATASETS["cifar10"])
    spec["archive"] = Resource(archive.as_uri(), download.md5sum(archive), extract=True)
    monkeypatch.setitem(cifar.DATASETS, "cifar10", spec)
    src = source("cifar10", tmp_path / "data")
    assert len(src.y) == 12 and int(src.is_test.sum()) == 2
    assert (tmp_path / "data" / "cifar-10-python.tar.gz").is_file()
    spec["archive"] = Resource(archive.as_uri(), "f" * 32, extract=True)   # wrong checksum
    with pytest.raises(UserError, match="md5"):
        source("cifar10", tmp_path / "other")


def test_mnist_gz_files_downloaded_and_read(tmp_path, fmt, monkeypatch):
    staging = tmp_path / "mirror"
    fmt.write_mnist_family(staging, gz=True)
    md5 = {p.name: download.md5sum(p) for p in staging.iterdir()}
    monkeypatch.setattr(mnist, "MNIST_URL", staging.as_uri() + "/")
    monkeypatch.setattr(mnist, "MNIST_MD5", md5)
    src = source("mnist", tmp_path / "data")
    assert len(src.y) == 13
    assert sorted(p.name for p in (tmp_path / "data" / "MNIST" / "raw").iterdir()) == sorted(md5)


def test_emnist_zip_extracted_into_raw(tmp_path, fmt, monkeypatch):
    staging = tmp_path / "st"
    fmt.write_mnist_family(staging / "gzip", gz=True, prefix="emnist-byclass-")
    archive = tmp_path / "gzip.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in (staging / "gzip").iterdir():
            zf.write(p, f"gzip/{p.name}")
    monkeypatch.setattr(mnist, "EMNIST_ZIP", Resource(archive.as_uri(), download.md5sum(archive),
                                                      extract=True))
    src = source("emnist", tmp_path / "data")
    assert len(src.y) == 13 and src.num_classes == 62


def test_adult_plain_files_downloaded(tmp_path, monkeypatch):
    mirror = tmp_path / "uci"
    mirror.mkdir()
    (mirror / "adult.data").write_text(
        "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, "
        "Male, 2174, 0, 40, United-States, <=50K\n\n")
    (mirror / "adult.test").write_text(
        "|1x3 Cross validator\n25, Private, 226802, Doctorate, 16, Never-married, "
        "Prof-specialty, Own-child, Black, Female, 0, 0, 40, ?, >50K.\n")
    monkeypatch.setattr(adult, "URL", mirror.as_uri() + "/")
    monkeypatch.setattr(adult, "MD5", {p.name: download.md5sum(p) for p in mirror.iterdir()})
    src = source("adult", tmp_path / "data")
    assert src.y.tolist() == [0, 1] and src.owner.tolist() == [1, 0]


@pytest.mark.parametrize("name", ["../evil.txt", "/abs/evil.txt", "a/../../evil.txt", ".", ""])
def test_tar_members_escaping_the_target_are_refused(tmp_path, name, monkeypatch):
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(_tar_gz({"ok.txt": b"1", name: b"2"}))
    opened = []
    monkeypatch.setattr(download, "open", lambda p, *a: opened.append(p) or open(p, *a),
                        raising=False)
    with pytest.raises(ValueError, match="escape"):
        download.extract(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists() and opened == []   # "." wrote beside out/


def _link_tar(path, kind, target: str):
    """A tar holding one link member of ``kind`` (tarfile.SYMTYPE or LNKTYPE) to ``target``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("link")
        info.type = kind
        info.linkname = target
        tf.addfile(info)
    path.write_bytes(buf.getvalue())
    return path


def test_tar_symlink_is_refused(tmp_path):
    _link_tar(tmp_path / "l.tar", tarfile.SYMTYPE, "/etc/passwd")
    with pytest.raises(ValueError, match="link"):
        download.extract(tmp_path / "l.tar", tmp_path / "out")


def test_zip_slip_is_refused_and_good_archives_extract(tmp_path):
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as zf:
        zf.writestr("../evil.txt", "x")
    with pytest.raises(ValueError, match="escape"):
        download.extract(tmp_path / "bad.zip", tmp_path / "out")
    (tmp_path / "good.tar.gz").write_bytes(_tar_gz({"d/a.txt": b"A"}))
    download.extract(tmp_path / "good.tar.gz", tmp_path / "out")
    assert (tmp_path / "out" / "d" / "a.txt").read_bytes() == b"A"
    (tmp_path / "f.txt.gz").write_bytes(gzip.compress(b"G"))
    download.extract(tmp_path / "f.txt.gz", tmp_path / "out")
    assert (tmp_path / "out" / "f.txt").read_bytes() == b"G"


# --- every download verified, failures deleted ------------------------------------------------

def test_every_download_has_an_md5_and_https_where_the_host_offers_it():
    resources = [cifar.DATASETS[n]["archive"] for n in cifar.DATASETS]
    resources += [mnist.EMNIST_ZIP, imagefolder.CINIC_URL, imagefolder.TINY_URL]
    resources += [Resource(adult.URL + n, adult.MD5[n]) for n in ("adult.data", "adult.test")]
    assert all(r.md5 and len(r.md5) == 32 and r.url.startswith("https://") for r in resources)
    assert adult.MD5 == {"adult.data": "5d7c39d7b8804f071cdd1f2a7c460872",
                         "adult.test": "35238206dfdf7f1fe215bbb874adecdc"}
    assert imagefolder.CINIC_URL.md5 == "6ee4d0c996905fe93221de577967a372"
    assert imagefolder.TINY_URL.md5 == "90528d7ca1a48142e341f4ef8d21d0de"
    assert mnist.MNIST_URL.startswith("https://") and len(mnist.MNIST_MD5) == 4
    assert len(mnist.FMNIST_MD5) == 4          # its S3 website host has no https: md5 only


def test_adult_download_with_wrong_md5_is_deleted(tmp_path, monkeypatch):
    mirror = tmp_path / "uci"
    mirror.mkdir()
    for n in ("adult.data", "adult.test"):
        (mirror / n).write_text("not the UCI file\n")
    monkeypatch.setattr(adult, "URL", mirror.as_uri() + "/")
    with pytest.raises(UserError) as e:
        source("adult", tmp_path / "data")
    msg = str(e.value)
    assert "\n" not in msg and "is not the published 5d7c39d7b8804f071cdd1f2a7c460872" in msg
    assert "the download was deleted" in msg
    assert list((tmp_path / "data" / "adult").iterdir()) == []


class _Broken:
    """A response that delivers some bytes, then loses the connection."""

    def __init__(self):
        self.calls = 0

    def read(self, n):
        self.calls += 1
        if self.calls > 1:
            raise ConnectionResetError("connection reset by peer")
        return b"x" * 100

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_interrupted_download_leaves_no_part_file(tmp_path, monkeypatch):
    monkeypatch.setattr(download, "urlopen", lambda url: _Broken())
    with pytest.raises(UserError, match="connection reset by peer"):
        download.ensure("x", tmp_path, [Resource("https://h/f.bin", "0" * 32)], tmp_path, True,
                        lambda: False)
    assert list(tmp_path.iterdir()) == []


def test_download_larger_than_the_limit_is_refused_and_deleted(tmp_path, monkeypatch):
    src = tmp_path / "big.bin"
    src.write_bytes(b"y" * 5000)
    monkeypatch.setattr(download, "MAX_BYTES", 4096)
    with pytest.raises(ValueError, match="exceeds 4096 bytes"):
        download.download(Resource(src.as_uri(), _md5(b"y" * 5000)), tmp_path / "dl")
    assert list((tmp_path / "dl").iterdir()) == []


# --- decompression bombs and archive members ----------------------------------------------------

ZEROS = b"\0" * (1 << 20)          # 1 MiB of zeros: ~1 KB compressed, a ~1000x ratio


def _zip(path, members: dict[str, bytes], method=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _bomb(tmp_path, kind: str):
    """A tar.gz, zip or gz archive of ``ZEROS`` (1 MiB of zeros)."""
    archive = tmp_path / f"bomb.{kind}"
    if kind == "tar.gz":
        archive.write_bytes(_tar_gz({"a.bin": ZEROS}))
    elif kind == "zip":
        _zip(archive, {"a.bin": ZEROS})
    else:
        archive = tmp_path / "a.bin.gz"
        archive.write_bytes(gzip.compress(ZEROS))
    return archive


@pytest.mark.parametrize("kind", ["tar.gz", "zip", "gz"])
@pytest.mark.parametrize("limit,value,message", [
    ("MAX_BYTES", 1 << 19, "unpacks to more than 524288 bytes"),
    ("RATIO_FLOOR", 1 << 16, "decompression bomb"),
])
def test_bombs_are_refused_before_writing(tmp_path, monkeypatch, kind, limit, value, message):
    monkeypatch.setattr(download, limit, value)
    with pytest.raises(ValueError, match=message):
        download.extract(_bomb(tmp_path, kind), tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_bomb_through_ensure_is_one_line(tmp_path, monkeypatch):
    archive = tmp_path / "bomb.tar.gz"
    archive.write_bytes(_tar_gz({"a.bin": ZEROS}))
    monkeypatch.setattr(download, "MAX_BYTES", 1 << 19)
    res = Resource(archive.as_uri(), download.md5sum(archive), extract=True)
    with pytest.raises(UserError) as e:
        download.ensure("x", tmp_path / "d", [res], tmp_path / "d", True, lambda: False)
    assert "\n" not in str(e.value) and "unpacks to more than" in str(e.value)
    assert not (tmp_path / "d" / "a.bin").exists()


def test_member_count_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(download, "MAX_MEMBERS", 2)
    (tmp_path / "many.tar.gz").write_bytes(_tar_gz({"a": b"1", "b": b"2", "c": b"3"}))
    with pytest.raises(ValueError, match="more than 2 members"):
        download.extract(tmp_path / "many.tar.gz", tmp_path / "out")
    _zip(tmp_path / "many.zip", {"a": b"1", "b": b"2", "c": b"3"})
    with pytest.raises(ValueError, match="more than 2 members"):
        download.extract(tmp_path / "many.zip", tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_tar_hard_link_and_zip_symlink_are_refused(tmp_path):
    _link_tar(tmp_path / "h.tar", tarfile.LNKTYPE, "../../etc/passwd")
    with pytest.raises(ValueError, match="is a link or special file"):
        download.extract(tmp_path / "h.tar", tmp_path / "out")
    with zipfile.ZipFile(tmp_path / "s.zip", "w") as zf:
        info = zipfile.ZipInfo("link")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(ValueError, match="is a link or special file"):
        download.extract(tmp_path / "s.zip", tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_zip_with_other_compression_is_refused(tmp_path):
    _zip(tmp_path / "b.zip", {"a.txt": b"A"}, zipfile.ZIP_BZIP2)
    with pytest.raises(ValueError, match="compression method 12"):
        download.extract(tmp_path / "b.zip", tmp_path / "out")


def test_failed_extraction_removes_the_files_it_wrote(tmp_path, monkeypatch):
    (tmp_path / "two.tar.gz").write_bytes(_tar_gz({"d/a.txt": b"A", "d/b.txt": b"B"}))
    real, calls = download.shutil.copyfileobj, []

    def failing(src, dst, n):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(src, dst, n)

    monkeypatch.setattr(download.shutil, "copyfileobj", failing)
    with pytest.raises(OSError, match="No space left"):
        download.extract(tmp_path / "two.tar.gz", tmp_path / "out")
    assert not (tmp_path / "out" / "d" / "a.txt").exists()
    assert not (tmp_path / "out" / "d" / "b.txt").exists()


def test_files_left_by_a_killed_extraction_are_unpacked_again(tmp_path, monkeypatch):
    # CINIC-10 is "present" once its folders exist; a job killed while unpacking left some files
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(_tar_gz({"d/a.txt": b"A", "d/b.txt": b"B", "d/c.txt": b"C"}))
    res, folder = Resource(archive.as_uri(), download.md5sum(archive), extract=True), tmp_path / "f"
    real, calls = download.shutil.copyfileobj, []

    def killed(src, dst, n):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt        # with the cleanup below, a SIGKILL
        real(src, dst, n)

    monkeypatch.setattr(download.shutil, "copyfileobj", killed)
    monkeypatch.setattr(download.Path, "unlink", lambda self, missing_ok=False: None)
    with pytest.raises(KeyboardInterrupt):
        download.ensure("x", folder, [res], folder, True, lambda: (folder / "d").is_dir())
    monkeypatch.undo()
    assert sorted(p.name for p in (folder / "d").iterdir() if not p.name.startswith(".")) \
        == ["a.txt", "b.txt"]
    download.ensure("x", folder, [res], folder, True, lambda: (folder / "d").is_dir())
    assert [(folder / "d" / n).read_bytes() for n in ("a.txt", "b.txt", "c.txt")] \
        == [b"A", b"B", b"C"]                       # was: c.txt missing, taken for complete
    assert not list(folder.glob(".*.extracting"))


def test_two_jobs_downloading_the_same_file_at_once_both_get_it(tmp_path, monkeypatch):
    data = b"0123456789" * 1000
    res = Resource("https://h/f.bin", _md5(data))

    class Slow(io.BytesIO):            # the second job starts while the first is downloading
        def read(self, n=-1):
            if self.tell() == 0 and not started:
                started.append(1)
                with monkeypatch.context() as other_process:
                    other_process.setattr(download.os, "getpid", lambda: 4_000_000)
                    assert download.download(res, tmp_path).read_bytes() == data
            return super().read(min(n, 4000))

    started = []
    monkeypatch.setattr(download, "urlopen", lambda url: Slow(data))
    assert download.download(res, tmp_path).read_bytes() == data    # was FileNotFoundError
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]
