"""Download (md5-checked, via an injected opener / file:// URL) and safe extraction."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import urllib.error
import zipfile

import pytest

from fedmoo.data import adult, cifar, download, mnist
from fedmoo.data.download import Resource
from fedmoo.errors import UserError


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
        cifar.load_cifar10(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("data=cifar10:")
    assert str(tmp_path / "cifar-10-batches-py") in msg
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in msg


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
    src = cifar.load_cifar10(tmp_path / "data")
    assert len(src.y) == 12 and int(src.is_test.sum()) == 2
    assert (tmp_path / "data" / "cifar-10-python.tar.gz").is_file()
    spec["archive"] = Resource(archive.as_uri(), "f" * 32, extract=True)   # wrong checksum
    with pytest.raises(UserError, match="md5"):
        cifar.load_cifar10(tmp_path / "other")


def test_mnist_gz_files_downloaded_and_read(tmp_path, fmt, monkeypatch):
    staging = tmp_path / "mirror"
    fmt.write_mnist_family(staging, gz=True)
    md5 = {p.name: download.md5sum(p) for p in staging.iterdir()}
    monkeypatch.setattr(mnist, "MNIST_URL", staging.as_uri() + "/")
    monkeypatch.setattr(mnist, "MNIST_MD5", md5)
    src = mnist.load_mnist(tmp_path / "data")
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
    src = mnist.load_emnist(tmp_path / "data")
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
    src = adult.load(tmp_path / "data")
    assert src.y.tolist() == [0, 1] and src.owner.tolist() == [1, 0]


@pytest.mark.parametrize("name", ["../evil.txt", "/abs/evil.txt", "a/../../evil.txt"])
def test_tar_members_escaping_the_target_are_refused(tmp_path, name):
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(_tar_gz({"ok.txt": b"1", name: b"2"}))
    with pytest.raises(ValueError, match="escape"):
        download.extract(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()


def test_tar_symlink_is_refused(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("link")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tf.addfile(info)
    (tmp_path / "l.tar").write_bytes(buf.getvalue())
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
