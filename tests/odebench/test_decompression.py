"""odebench.data: compressed files are inflated only as far as their headers declare."""

from __future__ import annotations

import gzip
import json
import os
import re
import struct
import subprocess
import sys
import tarfile
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from odebench.data import DataError, download, load_svhn, read_idx
from test_data import MNIST_DIR, _patch_cifar, _tarball, _write_svhn, needs_mnist

MNIST_SHAPE = (60000, 28, 28)
MNIST_BYTES = 60000 * 28 * 28  # 47,040,000: the data a MNIST training-image header declares
BOMB_EXTRA = 192 << 20  # zeros after the declared data, inflated; ~1 MB compressed


def idx_header(dims: tuple[int, ...], code: int = 0x08) -> bytes:
    return bytes([0, 0, code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims)


def write_gzip_bomb(path: Path, dims: tuple[int, ...], zeros: int) -> Path:
    """A gzip file: the IDX header ``dims`` then ``zeros`` zero bytes, compressed as a stream."""
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: gzip framing
    block = bytes(1 << 20)
    with path.open("wb") as out:
        out.write(packer.compress(idx_header(dims)))
        for start in range(0, zeros, len(block)):
            out.write(packer.compress(block[: min(len(block), zeros - start)]))
        out.write(packer.flush())
    return path


# ---------------------------------------------------------------------------------------
# IDX: a gzip bomb costs no more memory than the data its header declares

PEAK_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    from odebench.data import DataError, read_idx

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux

    read_idx(sys.argv[1])
    baseline = peak()
    try:
        read_idx(sys.argv[2])
        error = None
    except DataError as err:
        error = str(err)
    print(json.dumps({"baseline": baseline, "peak": peak(), "error": error}))
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in kilobytes on Linux")
def test_a_gzip_bomb_is_refused_within_twice_its_declared_size(tmp_path):
    bomb = write_gzip_bomb(tmp_path / "train-images-idx3-ubyte.gz", MNIST_SHAPE, BOMB_EXTRA)
    assert bomb.stat().st_size < 2 << 20  # ~1 MB on disk, ~240 MB inflated
    small = tmp_path / "small-idx3-ubyte.gz"
    small.write_bytes(gzip.compress(idx_header((10, 28, 28)) + bytes(10 * 784)))
    result = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, str(small), str(bomb)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # The whole stream inflated at once takes over 400 MB more than the baseline; read
    # against its header the bomb costs its declared 47 MB and a chunk.
    extra = report["peak"] - report["baseline"]
    assert extra < 2 * MNIST_BYTES, f"reading the bomb raised the peak by {extra >> 20} MiB"
    assert report["error"] is not None
    assert str(bomb) in report["error"]
    assert re.search(r"more than \d+ bytes after the 47040000 bytes of data", report["error"])


def test_a_header_declaring_more_than_the_gzip_file_can_hold_is_refused_unread(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(idx_header(MNIST_SHAPE) + bytes(100)))
    size = path.stat().st_size
    with pytest.raises(
        DataError,
        match=rf"{re.escape(str(path))} declares 60000 x 28 x 28 values of type unsigned byte "
        rf"\(47040016 bytes with the header\), but a gzip file of {size} bytes inflates to at "
        rf"most {1032 * size} bytes",
    ):
        read_idx(path)


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gzip"])
def test_absurd_dimensions_are_refused_before_allocating(tmp_path, gz):
    dims = (0xFFFFFFFF,) * 4  # 2**128 values: the product overflows any fixed-size integer
    data = idx_header(dims, 0x0E) + bytes(64)
    path = tmp_path / "absurd"
    path.write_bytes(gzip.compress(data) if gz else data)
    declared = (0xFFFFFFFF**4) * 8
    with pytest.raises(
        DataError,
        match=rf"{re.escape(str(path))} declares 4294967295 x 4294967295 x 4294967295 x "
        rf"4294967295 values of type double \({declared} bytes\), more than the 4294967296",
    ):
        read_idx(path)


def test_a_gzip_stream_shorter_than_its_header_declares_is_refused(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(idx_header((4, 28, 28)) + bytes(3 * 784)))
    with pytest.raises(
        DataError,
        match=r"is truncated: the header announces 4 x 28 x 28 values of type unsigned byte "
        r"\(3136 bytes\) but only 2352 bytes follow once decompressed",
    ):
        read_idx(path)


def test_a_cut_gzip_file_names_the_declared_and_found_sizes(tmp_path):
    data = idx_header((4, 28, 28)) + np.random.default_rng(0).bytes(4 * 784)
    packed = gzip.compress(data)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(
        DataError,
        match=rf"{re.escape(str(path))} starts like a gzip file but cannot be decompressed "
        r"\(.*\) after \d+ bytes of the 3152 it declares",
    ):
        read_idx(path)


@pytest.mark.parametrize(
    "extra, amount", [(5, "5"), (3 << 20, "more than 1048576")], ids=["few", "many"]
)
def test_a_gzip_stream_longer_than_its_header_declares_is_refused(tmp_path, extra, amount):
    path = write_gzip_bomb(tmp_path / "t10k-labels-idx1-ubyte.gz", (6,), 6 + extra)
    with pytest.raises(
        DataError,
        match=rf"{re.escape(str(path))} has {amount} bytes after the 6 bytes of data its "
        r"header announces \(6 values of type unsigned byte\) once decompressed, 14 bytes "
        r"in all; decompression stopped there",
    ):
        read_idx(path)


@needs_mnist
@pytest.mark.parametrize("name", sorted(p.name for p in MNIST_DIR.glob("*.gz")))
def test_the_shared_mnist_files_read_as_gzip_decompress_gives_them(name):
    raw = gzip.decompress((MNIST_DIR / name).read_bytes())
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    expected = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)
    tensor = read_idx(MNIST_DIR / name)
    assert tensor.dtype == torch.uint8 and torch.equal(tensor, torch.from_numpy(expected.copy()))


# ---------------------------------------------------------------------------------------
# CIFAR tarballs: members are checked against their declared sizes as they are read


def test_a_tarball_declaring_more_than_it_may_hold_is_refused_before_writing(tmp_path, monkeypatch):
    members = {f"cifar-10-batches-py/data_batch_{i}": bytes(600) for i in range(1, 4)}
    _patch_cifar(monkeypatch, _tarball(members), max_unpacked=1000)
    with pytest.raises(
        DataError,
        match=r"refusing to extract .*cifar-10-python.tar.gz: its members up to "
        r"'cifar-10-batches-py/data_batch_2' \(600 bytes\) declare 1200 bytes once unpacked, "
        r"more than the 1000 bytes",
    ):
        download("cifar10", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar-10-python.tar.gz"]


def test_a_member_header_declaring_gigabytes_is_refused_unread(tmp_path, monkeypatch):
    info = tarfile.TarInfo("cifar-10-batches-py/data_batch_1")
    info.size = 8 << 30  # 8 GiB declared, nothing follows
    archive = gzip.compress(info.tobuf(format=tarfile.GNU_FORMAT))
    _patch_cifar(monkeypatch, archive)
    with pytest.raises(
        DataError, match=rf"\({8 << 30} bytes\) declare {8 << 30} bytes once unpacked"
    ):
        download("cifar10", tmp_path)


def test_a_truncated_tarball_is_refused_naming_it(tmp_path, monkeypatch):
    data = np.random.default_rng(0).bytes(50_000)
    packed = _tarball({"cifar-10-batches-py/test_batch": data})
    _patch_cifar(monkeypatch, packed[: len(packed) // 2])
    with pytest.raises(DataError, match=r"cifar-10-python.tar.gz.*truncated or corrupt"):
        download("cifar10", tmp_path)
    assert not (tmp_path / "cifar-10-batches-py").exists()


# ---------------------------------------------------------------------------------------
# SVHN: compressed MATLAB variables must inflate to exactly their declared size


def _svhn_mat(path: Path) -> None:
    _write_svhn(path, np.zeros((32, 32, 3, 2), np.uint8), np.array([[1], [2]]), compress=True)


def _elements(blob: bytes) -> list[tuple[int, bytes]]:
    """The top-level (type, data) elements of a little-endian MATLAB 5 file."""
    out, position = [], 128
    while position < len(blob):
        mdtype, count = struct.unpack("<II", blob[position : position + 8])
        out.append((mdtype, blob[position + 8 : position + 8 + count]))
        position += 8 + count
    return out


def _rebuild(path: Path, blob: bytes, elements: list[tuple[int, bytes]]) -> None:
    body = b"".join(struct.pack("<II", t, len(d)) + d for t, d in elements)
    path.write_bytes(blob[:128] + body)


def _inflating_past(inflated: bytes) -> tuple[bytes, str]:
    packer = zlib.compressobj(1)
    bomb = packer.compress(inflated) + packer.compress(bytes(64 << 20)) + packer.flush()
    return bomb, rf"inflates to more than the {len(inflated)} bytes it declares"


def _declaring_gigabytes(inflated: bytes) -> tuple[bytes, str]:
    forged = zlib.compress(inflated[:4] + struct.pack("<I", 3 << 30) + inflated[8:])
    return forged, rf"declares {(3 << 30) + 8} bytes once decompressed, more than the \d+ bytes"


def _truncated(inflated: bytes) -> tuple[bytes, str]:
    short = len(inflated) // 2
    message = rf"is truncated: it declares {len(inflated)} bytes once decompressed but inflates to"
    return zlib.compress(inflated[:short]), rf"{message} {short}"


@pytest.mark.parametrize("forge", [_inflating_past, _declaring_gigabytes, _truncated])
def test_a_compressed_svhn_variable_must_inflate_to_what_it_declares(tmp_path, forge):
    path = tmp_path / "test_32x32.mat"
    _svhn_mat(path)
    blob = path.read_bytes()
    elements = _elements(blob)
    forged, message = forge(zlib.decompress(elements[0][1]))
    _rebuild(path, blob, [(15, forged), *elements[1:]])
    where = rf"{re.escape(str(path))}: the compressed variable at byte 128 \(\d+ bytes\) "
    with pytest.raises(DataError, match=where + ".*" + message):
        load_svhn(tmp_path, train=False)
