"""odebench.data: IDX and CIFAR files, downloads (without network), toy sets, augmentation."""

from __future__ import annotations

import builtins
import gzip
import hashlib
import io
import json
import math
import os
import pickle
import re
import struct
import tarfile
import urllib.error
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import odebench.data
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from odebench.data import (
    Augment,
    DataError,
    DataNotFoundError,
    Dataset,
    _download,
    annuli,
    download,
    horizontal_flip,
    load_cifar,
    load_mnist,
    nested_spirals,
    pendulum,
    random_crop,
    read_idx,
    reflection,
)

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]  # tests/odebench/test_data.py -> the repository root
MNIST_DIR = Path(
    os.environ.get("ODEBENCH_MNIST_DIR", HERE.parents[3] / "shared" / "datasets" / "mnist-10k")
)
FASHION_DIR = Path(
    os.environ.get("ODEBENCH_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
)
DOCS_PAGE = REPO / "docs" / "odebench" / "data.md"

# type code -> (big-endian numpy dtype, torch dtype)
IDX_TYPES = {
    0x08: (">u1", torch.uint8),
    0x09: (">i1", torch.int8),
    0x0B: (">i2", torch.int16),
    0x0C: (">i4", torch.int32),
    0x0D: (">f4", torch.float32),
    0x0E: (">f8", torch.float64),
}


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------
# Writing files in the formats


def idx_bytes(array: np.ndarray, code: int) -> bytes:
    """An IDX file holding ``array`` with type ``code``."""
    big = array.astype(IDX_TYPES[code][0])
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + big.tobytes()


def write_idx(path: Path, array: np.ndarray, code: int = 0x08, *, gz: bool = False) -> Path:
    data = idx_bytes(array, code)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def write_mnist(
    root: Path,
    images: np.ndarray,
    labels: np.ndarray,
    *,
    prefix: str = "train",
    gz: bool = True,
) -> None:
    root.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    write_idx(root / f"{prefix}-images-idx3-ubyte{suffix}", images, gz=gz)
    write_idx(root / f"{prefix}-labels-idx1-ubyte{suffix}", labels, gz=gz)


def random_images(n: int, seed: int = 0, shape: tuple[int, ...] = (28, 28)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


def write_batch(path: Path, data: np.ndarray, labels: list[int], key: bytes = b"labels") -> None:
    """A CIFAR batch file as Python 3 writes it with protocol 2 (bytes keys)."""
    batch = {b"batch_label": b"testing batch", b"data": data, key: labels}
    if key == b"fine_labels":
        batch[b"coarse_labels"] = [v // 5 for v in labels]
    with path.open("wb") as file:
        pickle.dump(batch, file, protocol=2)


def py2_batch(data: np.ndarray, labels: list[int]) -> bytes:
    """A CIFAR batch file byte for byte as Python 2's cPickle wrote it (str, not bytes)."""

    def s(b: bytes) -> bytes:  # SHORT_BINSTRING or BINSTRING: a Python 2 str
        return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<I", len(b)) + b

    def i(v: int) -> bytes:  # BININT
        return b"J" + struct.pack("<i", v)

    dtype = (
        b"cnumpy\ndtype\n" + s(b"u1") + i(0) + i(1) + b"\x87R("
        + i(3) + s(b"|") + b"NNN" + i(-1) + i(-1) + i(0) + b"tb"
    )  # fmt: skip
    shape = b"(" + b"".join(i(d) for d in data.shape) + b"t"
    array = (
        b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n" + i(0) + b"\x85" + s(b"b")
        + b"\x87R(" + i(1) + shape + dtype + b"\x89" + s(data.tobytes()) + b"tb"
    )  # fmt: skip
    label_list = b"](" + b"".join(i(v) for v in labels) + b"e"
    return (
        b"\x80\x02}(" + s(b"batch_label") + s(b"testing batch 1 of 1")
        + s(b"data") + array + s(b"labels") + label_list + b"u."
    )  # fmt: skip


def cifar_data(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 3072), dtype=np.uint8)


# ---------------------------------------------------------------------------------------
# read_idx


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gzip"])
@pytest.mark.parametrize("code", sorted(IDX_TYPES), ids=lambda c: f"0x{c:02X}")
def test_read_idx_round_trip(tmp_path, code, gz):
    rng = np.random.default_rng(code)
    if code in (0x0D, 0x0E):
        array = rng.normal(size=(3, 4, 5)) * 1e3
    elif code == 0x08:
        array = rng.integers(0, 256, (3, 4, 5))
    else:
        info = np.iinfo(IDX_TYPES[code][0])
        array = rng.integers(info.min, info.max, (3, 4, 5), endpoint=True)
    array = array.astype(IDX_TYPES[code][0])
    out = read_idx(write_idx(tmp_path / "file", array, code, gz=gz))
    assert out.dtype == IDX_TYPES[code][1]
    assert out.shape == (3, 4, 5)
    np.testing.assert_array_equal(out.numpy(), array.astype(array.dtype.newbyteorder("=")))


@pytest.mark.parametrize("shape", [(7,), (2, 3), (1, 2, 3, 2)])
def test_read_idx_keeps_the_number_of_dimensions(tmp_path, shape):
    array = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
    out = read_idx(write_idx(tmp_path / "f", array, 0x0C))
    assert out.tolist() == array.tolist()


@pytest.mark.parametrize("gz, name", [(True, "plain-name"), (False, "looks-compressed.gz")])
def test_read_idx_detects_gzip_by_content_not_name(tmp_path, gz, name):
    array = np.arange(6, dtype=np.uint8).reshape(2, 3)
    assert read_idx(write_idx(tmp_path / name, array, gz=gz)).tolist() == array.tolist()


def test_read_idx_rejects_a_wrong_magic_number(tmp_path):
    path = tmp_path / "bad"
    path.write_bytes(b"\x01\x02\x08\x01" + struct.pack(">I", 1) + b"\x00")
    with pytest.raises(DataError, match=rf"{re.escape(str(path))} is not an IDX file.*0x01020801"):
        read_idx(path)


def test_read_idx_rejects_an_unknown_type_code(tmp_path):
    path = tmp_path / "bad"
    path.write_bytes(b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x00")
    with pytest.raises(DataError, match=r"unknown type code 0x07; known codes: 0x08"):
        read_idx(path)


@pytest.mark.parametrize(
    "cut, message",
    [
        (-1, r"is truncated: the header announces 2 x 3 values .* \(6 bytes\) but only 5"),
        (6, r"is truncated: its header announces 2 dimensions \(12 header bytes\)"),
        (2, r"is truncated: 2 bytes, shorter than the 4-byte magic number"),
    ],
    ids=["data", "header", "magic"],
)
def test_read_idx_rejects_truncated_files(tmp_path, cut, message):
    data = idx_bytes(np.zeros((2, 3), np.uint8), 0x08)
    path = tmp_path / "short"
    path.write_bytes(data[:cut])
    with pytest.raises(DataError, match=re.escape(str(path)) + " " + message):
        read_idx(path)


def test_read_idx_rejects_trailing_bytes(tmp_path):
    path = tmp_path / "long"
    path.write_bytes(idx_bytes(np.zeros(3, np.uint8), 0x08) + b"\x00\x00")
    with pytest.raises(DataError, match=r"has 2 bytes after the 3 bytes of data"):
        read_idx(path)


def test_read_idx_names_a_missing_file_and_lists_its_directory(tmp_path):
    (tmp_path / "other-file").write_bytes(b"")
    path = tmp_path / "train-images-idx3-ubyte"
    with pytest.raises(DataNotFoundError, match=r"is missing.*it holds other-file") as info:
        read_idx(path)
    assert isinstance(info.value, FileNotFoundError)
    assert str(path) in str(info.value)


def test_read_idx_rejects_a_directory(tmp_path):
    with pytest.raises(DataError, match="is a directory"):
        read_idx(tmp_path)


# ---------------------------------------------------------------------------------------
# load_mnist


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "raw"])
@pytest.mark.parametrize("train, prefix", [(True, "train"), (False, "t10k")])
def test_load_mnist_on_written_files(tmp_path, gz, train, prefix):
    images, labels = random_images(12), np.arange(12, dtype=np.uint8) % 10
    write_mnist(tmp_path, images, labels, prefix=prefix, gz=gz)
    ds = load_mnist(tmp_path, train=train)
    assert ds.inputs.shape == (12, 1, 28, 28) and ds.inputs.dtype == torch.uint8
    assert ds.targets.dtype == torch.int64 and ds.targets.tolist() == labels.tolist()
    np.testing.assert_array_equal(ds.inputs[:, 0].numpy(), images)
    assert (ds.name, ds.num_classes, ds.mean, ds.std) == ("mnist", 10, (0.1307,), (0.3081,))


def test_load_mnist_fashion_kind_sets_name_and_statistics(tmp_path):
    write_mnist(tmp_path, random_images(3), np.array([0, 1, 2], np.uint8))
    ds = load_mnist(tmp_path, kind="fashion-mnist")
    assert (ds.name, ds.mean, ds.std) == ("fashion-mnist", (0.2860,), (0.3530,))


def test_load_mnist_prefers_the_uncompressed_file(tmp_path):
    write_mnist(tmp_path, random_images(4, seed=1), np.zeros(4, np.uint8), gz=True)
    write_mnist(tmp_path, random_images(4, seed=2), np.ones(4, np.uint8), gz=False)
    assert load_mnist(tmp_path).targets.tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize(
    ("n", "labels", "message"),
    [
        (3, [0, 0], r"holds 3 images but .*labels-idx1-ubyte.gz holds 2"),
        (2, [3, 10], r"labels-idx1-ubyte.gz holds the label 10; expected"),
    ],
    ids=["count", "range"],
)
def test_load_mnist_rejects_bad_labels(tmp_path, n, labels, message):
    write_mnist(tmp_path, random_images(n), np.array(labels, np.uint8))
    with pytest.raises(DataError, match=message):
        load_mnist(tmp_path)


@pytest.mark.parametrize("shape", [(32, 32), (20, 20), (28, 32)])
def test_load_mnist_refuses_images_of_another_size(tmp_path, shape):
    write_mnist(tmp_path, random_images(2, shape=shape), np.zeros(2, np.uint8))
    expected = rf"image file .*train-images-idx3-ubyte.gz .* shape \(2, {shape[0]}, {shape[1]}\)"
    with pytest.raises(DataError, match=expected + r"; expected uint8 images \(N, 28, 28\)"):
        load_mnist(tmp_path)


def test_load_mnist_rejects_swapped_files(tmp_path):
    write_mnist(tmp_path, random_images(2), np.zeros(2, np.uint8))
    images, labels = (
        tmp_path / "train-images-idx3-ubyte.gz",
        tmp_path / "train-labels-idx1-ubyte.gz",
    )
    images.rename(tmp_path / "tmp")
    labels.rename(images)
    (tmp_path / "tmp").rename(labels)
    with pytest.raises(DataError, match=r"image file .*images-idx3-ubyte.gz holds a torch.uint8 "):
        load_mnist(tmp_path)


def test_load_mnist_names_the_expected_files_of_a_missing_directory(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(DataNotFoundError) as info:
        load_mnist(missing, train=False)
    message = str(info.value)
    assert str(missing) in message
    assert "t10k-images-idx3-ubyte[.gz]" in message and "t10k-labels-idx1-ubyte[.gz]" in message
    assert "download('mnist'" in message


def test_load_mnist_names_a_missing_file_and_what_the_directory_holds(tmp_path):
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", random_images(2), gz=True)
    expected = r"MNIST files are missing: expected train-images-idx3-ubyte\[.gz\], train-labels"
    with pytest.raises(DataNotFoundError, match=expected):
        load_mnist(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"it holds train-images-idx3-ubyte.gz"):
        load_mnist(tmp_path)


def test_load_mnist_rejects_an_unknown_kind(tmp_path):
    with pytest.raises(ValueError, match=r"`kind` must be one of \['fashion-mnist', 'mnist'\]"):
        load_mnist(tmp_path, kind="kmnist")


needs_mnist = pytest.mark.skipif(
    not (MNIST_DIR / "train-images-idx3-ubyte.gz").is_file(),
    reason=f"the MNIST subset is not at {MNIST_DIR} (set ODEBENCH_MNIST_DIR)",
)
needs_fashion = pytest.mark.skipif(
    not (FASHION_DIR / "train-images-idx3-ubyte.gz").is_file(),
    reason=f"Fashion-MNIST is not at {FASHION_DIR} (apt-get install dataset-fashion-mnist)",
)


@pytest.fixture(scope="module")
def mnist_10k():
    if not (MNIST_DIR / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"the MNIST subset is not at {MNIST_DIR} (set ODEBENCH_MNIST_DIR)")
    return load_mnist(MNIST_DIR, train=True), load_mnist(MNIST_DIR, train=False)


def test_shared_mnist_subset_shapes_and_dtypes(mnist_10k):
    train, test = mnist_10k
    assert train.inputs.shape == (8004, 1, 28, 28) and test.inputs.shape == (1996, 1, 28, 28)
    assert train.inputs.dtype == torch.uint8 and train.targets.dtype == torch.int64
    assert int(train.inputs.max()) == 255 and int(train.inputs.min()) == 0
    # The subset's pixel statistics are close to full MNIST's published ones.
    pixels = train.inputs.double() / 255
    assert pixels.mean().item() == pytest.approx(train.mean[0], abs=0.003)
    assert pixels.std().item() == pytest.approx(train.std[0], abs=0.003)


def test_shared_mnist_subset_is_a_stratified_split(mnist_10k):
    train, test = mnist_10k
    train_counts = torch.bincount(train.targets, minlength=10)
    test_counts = torch.bincount(test.targets, minlength=10)
    assert len(train_counts) == len(test_counts) == 10  # labels 0..9 only
    assert bool((train_counts > 0).all()) and bool((test_counts > 0).all())
    assert int(train_counts.sum()) == 8004 and int(test_counts.sum()) == 1996
    # One fifth of each class held out: test ~ train / 4, to rounding.
    assert (4 * test_counts - train_counts).abs().max().item() <= 5


@needs_fashion
def test_fashion_mnist_from_the_debian_package():
    train = load_mnist(FASHION_DIR, kind="fashion-mnist")
    test = load_mnist(FASHION_DIR, train=False, kind="fashion-mnist")
    assert train.inputs.shape == (60000, 1, 28, 28) and test.inputs.shape == (10000, 1, 28, 28)
    assert torch.bincount(train.targets).tolist() == [6000] * 10
    assert torch.bincount(test.targets).tolist() == [1000] * 10
    # The published statistics are those of these training images.
    pixels = train.inputs.double() / 255
    assert pixels.mean().item() == pytest.approx(0.2860, abs=1e-4)
    assert pixels.std().item() == pytest.approx(0.3530, abs=1e-4)


# MNIST and Fashion-MNIST share file names: the images tell them apart.


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy_some(source: Path, dest: Path, n: int) -> Path:
    """The first ``n`` test images of ``source`` and their labels, written to ``dest``."""
    images = read_idx(source / "t10k-images-idx3-ubyte.gz")[:n].numpy()
    labels = read_idx(source / "t10k-labels-idx1-ubyte.gz")[:n].numpy()
    write_mnist(dest, images, labels, prefix="t10k")
    return dest


@needs_mnist
@pytest.mark.parametrize("n", [None, 150], ids=["the-subset", "150-of-it"])
def test_mnist_digits_asked_for_as_fashion_mnist_are_refused_in_one_line(tmp_path, n):
    root = MNIST_DIR if n is None else _copy_some(MNIST_DIR, tmp_path / "digits", n)
    with pytest.raises(DataError) as info:
        load_mnist(root, train=False, kind="fashion-mnist")
    message = str(info.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"{root} holds MNIST, not Fashion-MNIST: its t10k-images")
    assert "load these as 'mnist'" in message
    assert load_mnist(root, train=False, kind="mnist").name == "mnist"  # as what it is


@needs_fashion
@pytest.mark.parametrize("n", [None, 150], ids=["the-set", "150-of-it"])
def test_fashion_mnist_asked_for_as_mnist_is_refused(tmp_path, n):
    root = FASHION_DIR if n is None else _copy_some(FASHION_DIR, tmp_path / "clothes", n)
    with pytest.raises(DataError, match=r"holds Fashion-MNIST, not MNIST: .*as 'fashion-mnist'"):
        load_mnist(root, train=False, kind="mnist")
    assert load_mnist(root, train=False, kind="fashion-mnist").name == "fashion-mnist"


@pytest.mark.parametrize(
    ("images", "kind"),
    [
        (np.zeros((100, 28, 28), np.uint8), "mnist"),  # an empty frame: nothing on the border
        (np.zeros((99, 28, 28), np.uint8), None),  # too few to judge
        (random_images(200), None),  # noise looks like neither
        (np.zeros((200, 32, 32), np.uint8), None),  # not 28x28
    ],
)
def test_identify_mnist_kind_judges_only_what_it_can(images, kind):
    assert odebench.data._idx.identify_mnist_kind(torch.from_numpy(images)) == kind


@needs_mnist
def test_a_loaded_set_and_a_run_record_the_files_read(tmp_path):
    from odebench.experiments._runner import _data_files
    from odebench.training import TrainConfig, train

    test = load_mnist(MNIST_DIR, train=False)
    names = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    expected = [{"path": str(MNIST_DIR.resolve() / n), "sha256": _sha256(MNIST_DIR / n)}
                for n in names]  # fmt: skip
    assert list(test.subset(5).sources) == expected  # kept by subset
    config = TrainConfig(model="mlp", dataset="mnist", data_dir=str(MNIST_DIR), epochs=1,
                         train_size=64, test_size=64, batch_size=32, device="cpu",
                         progress=False)  # fmt: skip
    result = train(config, tmp_path / "run", log=lambda _: None)
    assert result["data_files"][2:] == expected  # train's two files, then test's
    assert (
        json.loads((tmp_path / "run" / "results.json").read_text())["data_files"]
        == (result["data_files"])
    )
    # An experiment's results.json names each file once, by its folder and name only.
    files = _data_files([SimpleNamespace(result=result)] * 2)
    assert [f["file"] for f in files] == [
        f"{MNIST_DIR.name}/{n}" for n in ("train-images-idx3-ubyte.gz",
                                          "train-labels-idx1-ubyte.gz", *names)
    ]  # fmt: skip
    assert files[2]["sha256"] == expected[0]["sha256"]


# ---------------------------------------------------------------------------------------
# load_cifar


@pytest.mark.parametrize("subfolder", [False, True], ids=["root", "cifar-10-batches-py"])
def test_load_cifar10_train_concatenates_the_five_batches(tmp_path, subfolder):
    directory = tmp_path / "cifar-10-batches-py" if subfolder else tmp_path
    directory.mkdir(exist_ok=True)
    batches = [cifar_data(2, seed=i) for i in range(5)]
    for i, data in enumerate(batches):
        write_batch(directory / f"data_batch_{i + 1}", data, [i, 9 - i])
    ds = load_cifar(tmp_path)
    assert ds.inputs.shape == (10, 3, 32, 32) and ds.inputs.dtype == torch.uint8
    assert ds.targets.dtype == torch.int64
    assert ds.targets.tolist() == [0, 9, 1, 8, 2, 7, 3, 6, 4, 5]
    np.testing.assert_array_equal(ds.inputs.reshape(10, -1).numpy(), np.concatenate(batches))
    assert (ds.name, ds.num_classes) == ("cifar10", 10)
    assert ds.mean == (0.4914, 0.4822, 0.4465) and ds.std == (0.2470, 0.2435, 0.2616)


def test_load_cifar_image_layout_is_channel_major_rows(tmp_path):
    data = np.zeros((1, 3072), np.uint8)
    data[0, :1024] = 10  # red plane
    data[0, 1024:2048] = 20  # green plane
    data[0, 2048:] = 30  # blue plane
    data[0, 1024 + 2 * 32 + 5] = 99  # green, row 2, column 5
    write_batch(tmp_path / "test_batch", data, [4])
    image = load_cifar(tmp_path, train=False).inputs[0]
    assert image[0].unique().tolist() == [10]
    assert image[2].unique().tolist() == [30]
    assert image[1, 2, 5].item() == 99 and image[1, 5, 2].item() == 20


def test_load_cifar_reads_python2_pickles(tmp_path):
    data = cifar_data(3)
    (tmp_path / "test_batch").write_bytes(py2_batch(data, [1, 2, 3]))
    ds = load_cifar(tmp_path, train=False)
    assert ds.targets.tolist() == [1, 2, 3]
    np.testing.assert_array_equal(ds.inputs.reshape(3, -1).numpy(), data)


@pytest.mark.parametrize("train, name", [(True, "train"), (False, "test")])
def test_load_cifar100_uses_the_fine_labels(tmp_path, train, name):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    write_batch(folder / name, cifar_data(4), [0, 42, 99, 7], key=b"fine_labels")
    ds = load_cifar(tmp_path, train=train, classes=100)
    assert ds.targets.tolist() == [0, 42, 99, 7]
    assert (ds.name, ds.num_classes, ds.inputs.shape) == ("cifar100", 100, (4, 3, 32, 32))
    assert ds.mean == (0.5071, 0.4865, 0.4409) and ds.std == (0.2673, 0.2564, 0.2762)


class _System:
    """Unpickling this calls os.system (a shell command)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Eval:
    """Unpickling this calls builtins.eval on code that creates a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (builtins.eval, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.mark.parametrize(
    "payload, refused",
    [(_System, r"(posix|os|nt)\.system"), (_Eval, r"builtins\.eval")],
    ids=["os.system", "builtins.eval"],
)
def test_load_cifar_refuses_pickled_code_without_running_it(tmp_path, payload, refused):
    marker = tmp_path / "marker"
    path = tmp_path / "test_batch"
    batch = {b"data": payload(marker), b"labels": [0]}
    path.write_bytes(pickle.dumps(batch, protocol=2))
    expected = rf"refusing to load {refused} from {re.escape(str(path))}: CIFAR batch files hold"
    with pytest.raises(DataError, match=expected):
        load_cifar(tmp_path, train=False)
    assert not marker.exists()


def test_the_eval_payload_would_run_under_plain_pickle(tmp_path):
    # The refusal above is meaningful: the same bytes run code under pickle.load.
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps({b"data": _Eval(marker)}, protocol=2))
    assert marker.exists()


def test_load_cifar_refuses_codecs_other_than_latin1(tmp_path):
    path = tmp_path / "test_batch"
    path.write_bytes(b"\x80\x02c_codecs\nencode\nX\x03\x00\x00\x00abcX\x05\x00\x00\x00rot13\x86R.")
    with pytest.raises(DataError, match=r"test_batch cannot be unpickled .*latin1"):
        load_cifar(tmp_path, train=False)


@pytest.mark.parametrize(
    "content, message",
    [
        ("truncated", r"cannot be unpickled \(.*\); it is truncated, corrupt"),
        ({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, r"expected \(N, 3072\)"),
        ({b"data": np.zeros((2, 3072), np.int64), b"labels": [0, 1]}, r"a int64 array"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, r"holds 2 images but"),
        ({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}, r"labels from 10 to 10"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [3.7, 1.0]}, r"not a list of int"),
        ({b"images": np.zeros((1, 3072), np.uint8)}, r"lacks b'data' or b'labels'"),
        ([1, 2, 3], r"holds a list; expected a dict"),
    ],
    ids=["truncated", "shape", "dtype", "count", "range", "float", "keys", "not-a-dict"],
)
def test_load_cifar_rejects_bad_batch_files(tmp_path, content, message):
    path = tmp_path / "test_batch"
    if content == "truncated":
        good = pickle.dumps({b"data": cifar_data(2), b"labels": [0, 1]}, protocol=2)
        path.write_bytes(good[: len(good) // 2])
    else:
        path.write_bytes(pickle.dumps(content, protocol=2))
    with pytest.raises(DataError, match=re.escape(str(path)) + ".*" + message):
        load_cifar(tmp_path, train=False)


def test_load_cifar_names_the_missing_batch_files(tmp_path):
    write_batch(tmp_path / "data_batch_1", cifar_data(1), [0])
    with pytest.raises(DataNotFoundError) as info:
        load_cifar(tmp_path)
    message = str(info.value)
    assert (
        "expected data_batch_1, data_batch_2, data_batch_3, data_batch_4, data_batch_5" in message
    )
    assert str(tmp_path / "cifar-10-batches-py") in message and "it holds data_batch_1" in message


def test_load_cifar_rejects_other_class_counts(tmp_path):
    with pytest.raises(ValueError, match=r"`classes` must be 10 or 100, got 20"):
        load_cifar(tmp_path, classes=20)


# ---------------------------------------------------------------------------------------
# download, without network: the fetch function is replaced


def _resource(files: dict[str, bytes], mirrors=("http://a.invalid/", "http://b.invalid/"), **kw):
    return _download._Resource(
        mirrors=mirrors,
        files=tuple((name, hashlib.md5(data).hexdigest()) for name, data in files.items()),
        **kw,
    )


def test_download_rejects_an_unknown_name(tmp_path):
    with pytest.raises(ValueError, match=r"`name` must be one of cifar10, cifar100, fashion-"):
        download("imagenet", tmp_path)


def test_download_svhn_fetches_both_splits_from_the_official_site(tmp_path, monkeypatch):
    official = _download._RESOURCES["svhn"]
    assert [name for name, _ in official.files] == ["train_32x32.mat", "test_32x32.mat"]
    files = {"train_32x32.mat": b"train", "test_32x32.mat": b"test"}
    resource = _resource(files, mirrors=official.mirrors)
    monkeypatch.setitem(_download._RESOURCES, "svhn", resource)
    calls = []

    def fetch(url, dest):
        calls.append(url)
        dest.write_bytes(files[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(_download, "_fetch", fetch)
    assert download("svhn", tmp_path) == tmp_path / "svhn"
    assert calls == [f"http://ufldl.stanford.edu/housenumbers/{name}" for name in files]


def test_download_refuses_a_file_with_the_wrong_checksum(tmp_path, monkeypatch):
    calls = []

    def fetch(url, dest):
        calls.append(url)
        dest.write_bytes(b"not the MNIST file")

    monkeypatch.setattr(_download, "_fetch", fetch)
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz .*nothing was kept.*MD5 "):
        download("mnist", tmp_path)
    assert calls == [
        "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz",
        "http://yann.lecun.com/exdb/mnist/train-images-idx3-ubyte.gz",
    ]
    assert list((tmp_path / "mnist").iterdir()) == []  # no partial or temporary file


def test_download_tries_the_next_mirror_and_keeps_good_files(tmp_path, monkeypatch):
    files = {"a.gz": b"first file", "b.gz": b"second file"}
    monkeypatch.setitem(_download._RESOURCES, "mnist", _resource(files))
    calls = []

    def fetch(url, dest):
        calls.append(url)
        if url.startswith("http://a.invalid/"):
            raise urllib.error.URLError("unreachable")
        dest.write_bytes(files[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(_download, "_fetch", fetch)
    directory = download("mnist", tmp_path)
    assert directory == tmp_path / "mnist"
    assert sorted(p.name for p in directory.iterdir()) == ["a.gz", "b.gz"]
    assert (directory / "b.gz").read_bytes() == b"second file"
    assert len(calls) == 4
    download("mnist", tmp_path)  # the files are there with the right MD5: nothing fetched
    assert len(calls) == 4
    download("mnist", tmp_path, force=True)
    assert len(calls) == 8


def _tarball(members: dict[str, bytes], extra: tarfile.TarInfo | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if extra is not None:
            tar.addfile(extra)
    return buffer.getvalue()


def _patch_cifar(monkeypatch, archive: bytes, **kw) -> None:
    resource = _resource(
        {"cifar-10-python.tar.gz": archive}, mirrors=("http://a.invalid/",),
        extract_to="cifar-10-batches-py", **kw,
    )  # fmt: skip
    monkeypatch.setitem(_download._RESOURCES, "cifar10", resource)
    monkeypatch.setattr(_download, "_fetch", lambda url, dest: dest.write_bytes(archive))


def test_download_cifar_extracts_the_batches(tmp_path, monkeypatch):
    data = cifar_data(2)
    archive = _tarball(
        {"cifar-10-batches-py/test_batch": pickle.dumps({b"data": data, b"labels": [5, 6]}, 2)}
    )
    _patch_cifar(monkeypatch, archive)
    directory = download("cifar10", tmp_path)
    assert directory == tmp_path / "cifar-10-batches-py"
    assert load_cifar(tmp_path, train=False).targets.tolist() == [5, 6]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "cifar-10-batches-py",
        "cifar-10-python.tar.gz",
    ]


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


@pytest.mark.parametrize(
    "members, extra",
    [
        ({"cifar-10-batches-py/../../evil": b"x"}, None),
        ({"/tmp/evil": b"x"}, None),
        ({"elsewhere/evil": b"x"}, None),
        ({}, _link("cifar-10-batches-py/link", "/etc/passwd", tarfile.SYMTYPE)),
        ({}, _link("cifar-10-batches-py/hard", "../../evil", tarfile.LNKTYPE)),
    ],
    ids=["dotdot", "absolute", "outside-folder", "symlink", "hardlink"],
)
def test_download_refuses_unsafe_tarballs(tmp_path, monkeypatch, members, extra):
    root = tmp_path / "root"
    _patch_cifar(monkeypatch, _tarball({"cifar-10-batches-py/ok": b"fine", **members}, extra))
    with pytest.raises(
        DataError, match=r"refusing to extract .*cifar-10-python.tar.gz: its member"
    ):
        download("cifar10", root)
    assert sorted(p.name for p in root.iterdir()) == ["cifar-10-python.tar.gz"]
    assert not (tmp_path / "evil").exists()


# ---------------------------------------------------------------------------------------
# Toy sets


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_annuli_points_lie_where_their_target_says(dim):
    ds = annuli(3000, dim=dim, generator=gen())
    assert ds.name == f"annuli-{dim}d" and ds.num_classes is None
    assert ds.inputs.shape == (3000, dim) and ds.inputs.dtype == torch.float32
    assert ds.targets.shape == (3000, 1) and ds.targets.dtype == torch.float32
    inner = ds.targets[:, 0] == -1
    outer = ds.targets[:, 0] == 1
    assert int(inner.sum()) == 1000 and int(outer.sum()) == 2000  # the paper's 1000 + 2000
    norms = ds.inputs.double().norm(dim=1)
    assert norms[inner].max().item() <= 0.5 + 1e-6
    assert norms[outer].min().item() >= 1.0 - 1e-6
    assert norms[outer].max().item() <= 1.5 + 1e-6
    # Shuffled: the ball's points are not all first.
    assert not bool(inner[:1000].all())


def test_annuli_are_uniform_in_volume():
    ds = annuli(30000, dim=2, generator=gen())
    norms = ds.inputs.double().norm(dim=1)
    inner = norms[ds.targets[:, 0] == -1]
    # In the disc of radius 0.5, P(|x| <= 0.25) = 1/4 (area), not 1/2 (radius).
    assert (inner <= 0.25).double().mean().item() == pytest.approx(0.25, abs=0.02)
    # Both half-planes are used: the directions cover the circle.
    assert (ds.inputs[:, 0] > 0).double().mean().item() == pytest.approx(0.5, abs=0.02)


def test_reflection_targets_are_minus_the_inputs():
    ds = reflection(500, dim=3, generator=gen())
    assert ds.inputs.shape == (500, 3) and ds.name == "reflection-3d"
    assert torch.equal(ds.targets, -ds.inputs)
    assert ds.inputs.abs().max().item() <= 1.0
    assert ds.inputs.min().item() < -0.9 and ds.inputs.max().item() > 0.9


@pytest.mark.parametrize("turns", [1.0, 2.5])
def test_nested_spirals_follow_their_arm(turns):
    ds = nested_spirals(1001, turns=turns, generator=gen())
    assert ds.inputs.shape == (1001, 2) and ds.targets.dtype == torch.int64
    assert torch.bincount(ds.targets).tolist() == [500, 501] and ds.num_classes == 2
    x = ds.inputs.double()
    radius = x.norm(dim=1)
    assert radius.min().item() >= 0.1 - 1e-6 and radius.max().item() <= 1.0 + 1e-6
    s = (radius - 0.1) / 0.9
    angle = 2 * math.pi * turns * s + math.pi * ds.targets.double()
    expected = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    torch.testing.assert_close(x, expected, atol=1e-5, rtol=0)


TOY = {
    "annuli": lambda g: annuli(60, dim=2, generator=g),
    "reflection": lambda g: reflection(60, generator=g),
    "spirals": lambda g: nested_spirals(60, generator=g),
    "pendulum": lambda g: pendulum(3, steps=5, noise=0.1, generator=g),
}


@pytest.mark.parametrize("make", TOY.values(), ids=TOY.keys())
def test_toy_sets_are_deterministic_for_a_seed(make):
    a, b, c = make(gen(7)), make(gen(7)), make(gen(8))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)
    assert a.inputs.dtype == torch.float32
    torch.set_default_dtype(torch.float64)
    try:  # the same set, in float32, whatever the default dtype
        d = make(gen(7))
    finally:
        torch.set_default_dtype(torch.float32)
    assert (d.inputs.dtype, d.targets.dtype) == (a.inputs.dtype, a.targets.dtype)
    assert torch.equal(a.inputs, d.inputs) and torch.equal(a.targets, d.targets)


@pytest.fixture(scope="module")
def swings():
    return pendulum(32, dt=0.1, steps=200, generator=gen(3))


def _energy(states: torch.Tensor, k: float = 9.81) -> torch.Tensor:
    theta, omega = states.double().unbind(-1)
    return 0.5 * omega**2 + k * (1 - torch.cos(theta))


def test_pendulum_shapes_and_name(swings):
    assert swings.inputs.shape == swings.targets.shape == (32, 201, 2)
    assert swings.name == "pendulum-dt0.1" and swings.num_classes is None
    assert torch.equal(swings.inputs, swings.targets)  # noise=0
    assert swings.inputs.data_ptr() != swings.targets.data_ptr()
    theta0, omega0 = swings.targets[:, 0].unbind(-1)
    assert theta0.abs().max().item() <= 0.75 * math.pi and omega0.abs().max().item() <= 1.0


def test_pendulum_conserves_energy(swings):
    energy = _energy(swings.targets)
    drift = (energy - energy[:, :1]).abs() / energy[:, :1]
    assert drift.max().item() < 1e-6
    # The motion is not trivial: the angle changes sign along every trajectory.
    theta = swings.targets[..., 0]
    assert bool(((theta.max(dim=1).values > 0) & (theta.min(dim=1).values < 0)).all())


def test_pendulum_matches_the_small_angle_solution():
    ds = pendulum(8, dt=0.05, steps=200, theta_max=1e-3, omega_max=1e-3, dtype=torch.float64,
                  generator=gen(1))  # fmt: skip
    w = math.sqrt(9.81)
    t = 0.05 * torch.arange(201, dtype=torch.float64)
    theta0, omega0 = ds.targets[:, 0, 0:1], ds.targets[:, 0, 1:2]
    theta = theta0 * torch.cos(w * t) + omega0 / w * torch.sin(w * t)
    omega = -theta0 * w * torch.sin(w * t) + omega0 * torch.cos(w * t)
    amplitude = torch.sqrt(theta0**2 + (omega0 / w) ** 2)
    assert ((ds.targets[..., 0] - theta).abs() / amplitude).max().item() < 1e-5
    assert ((ds.targets[..., 1] - omega).abs() / (w * amplitude)).max().item() < 1e-5


def test_pendulum_samples_every_dt():
    coarse = pendulum(4, dt=0.2, steps=10, generator=gen(5))
    fine = pendulum(4, dt=0.1, steps=20, generator=gen(5))
    assert fine.name == "pendulum-dt0.1" and coarse.name == "pendulum-dt0.2"
    torch.testing.assert_close(fine.targets[:, ::2], coarse.targets, atol=1e-6, rtol=0)


def test_pendulum_noise_is_added_to_the_inputs_only():
    ds = pendulum(64, steps=50, noise=0.05, generator=gen())
    noise = (ds.inputs - ds.targets).double()
    assert noise.std().item() == pytest.approx(0.05, rel=0.05)
    assert noise.mean().abs().item() < 0.005
    drift = (_energy(ds.targets) - _energy(ds.targets[:, :1])).abs().max().item()
    assert drift < 1e-4  # the targets stay clean


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: annuli(0), r"`n` must be a positive integer, got 0"),
        (lambda: annuli(10, dim=0), r"`dim` must be a positive integer, got 0"),
        (lambda: reflection(5, dim=-1), r"`dim` must be a positive integer"),
        (lambda: nested_spirals(5, turns=0), r"`turns` must be positive and finite, got 0"),
        (lambda: pendulum(0), r"`n_trajectories` must be a positive integer, got 0"),
        (lambda: pendulum(2, dt=0.0), r"`dt` must be positive and finite, got 0.0"),
        (lambda: pendulum(2, steps=0), r"`steps` must be a positive integer, got 0"),
        (lambda: pendulum(2, noise=-0.1), r"`noise` must be non-negative and finite"),
        (lambda: pendulum(2, dtype=torch.int32), r"`dtype` must be a floating dtype"),
    ],
)
def test_toy_sets_reject_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------------------------------
# Augmentation


def _ids(n: int = 6, c: int = 2, h: int = 7, w: int = 5) -> torch.Tensor:
    """Images whose every pixel holds a distinct positive id (0 is left for padding)."""
    return torch.arange(1, n * c * h * w + 1, dtype=torch.int64).view(n, c, h, w)


def test_random_crop_with_zero_padding_is_the_identity():
    images = _ids()
    assert random_crop(images, padding=0, generator=gen()) is images


@pytest.mark.parametrize("padding", [1, 3])
def test_random_crop_shifts_each_image_by_at_most_padding(padding):
    images = _ids(n=200)
    out = random_crop(images, padding=padding, generator=gen())
    assert out.shape == images.shape and out.dtype == images.dtype
    n, c, h, w = images.shape
    # Decode every kept pixel's source position from its id.
    src = out - 1
    src_row = (src % (h * w)) // w
    src_col = src % w
    rows = torch.arange(h).view(1, 1, h, 1)
    cols = torch.arange(w).view(1, 1, 1, w)
    kept = out > 0
    dy, dx = src_row - rows, src_col - cols
    # One shift per image, read off any kept pixel (padding < w, so every image keeps some).
    first = kept.flatten(1).to(torch.uint8).argmax(dim=1)
    dy_img = dy.flatten(1).gather(1, first[:, None]).view(n, 1, 1, 1)
    dx_img = dx.flatten(1).gather(1, first[:, None]).view(n, 1, 1, 1)
    assert bool(kept.flatten(1).any(dim=1).all())
    assert bool((dy == dy_img)[kept].all()) and bool((dx == dx_img)[kept].all())
    assert dy_img.abs().max().item() <= padding and dx_img.abs().max().item() <= padding
    # Channels come from the same channel.
    assert bool(((src // (h * w)) % c == torch.arange(c).view(1, c, 1, 1))[kept].all())
    # Exactly the pixels whose source falls outside the image are zero.
    inside = (rows + dy_img >= 0) & (rows + dy_img < h) & (cols + dx_img >= 0) & (cols + dx_img < w)
    assert torch.equal(kept, inside.expand_as(kept))
    # Every offset, the extremes included, turns up among 200 images.
    assert sorted(set(dy_img.flatten().tolist())) == list(range(-padding, padding + 1))
    assert sorted(set(dx_img.flatten().tolist())) == list(range(-padding, padding + 1))


def test_random_crop_keeps_uint8_and_is_reproducible():
    images = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    a = random_crop(images, padding=4, generator=gen(1))
    b = random_crop(images, padding=4, generator=gen(1))
    c = random_crop(images, padding=4, generator=gen(2))
    assert a.dtype == torch.uint8 and torch.equal(a, b) and not torch.equal(a, c)


def test_horizontal_flip_with_the_same_state_mirrors_pairs():
    images = torch.randint(0, 256, (64, 3, 8, 8), dtype=torch.uint8)
    g = gen(4)
    state = g.get_state()
    once = horizontal_flip(images, generator=g)
    g.set_state(state)
    mirrored = horizontal_flip(images.flip(-1), generator=g)
    assert torch.equal(once, mirrored.flip(-1))
    g.set_state(state)
    assert torch.equal(horizontal_flip(once, generator=g), images)  # flipping twice undoes it
    flipped = (once != images).flatten(1).any(dim=1)
    assert 16 < int(flipped.sum()) < 48  # about half, each image decided separately
    assert torch.equal(once[flipped], images[flipped].flip(-1))
    assert torch.equal(once[~flipped], images[~flipped])


@pytest.mark.parametrize("p, flipped", [(0.0, False), (1.0, True)])
def test_horizontal_flip_extreme_probabilities(p, flipped):
    images = _ids()
    out = horizontal_flip(images, p=p, generator=gen())
    assert torch.equal(out, images.flip(-1) if flipped else images)


def test_augment_composes_crop_then_flip_from_one_generator():
    images = torch.randint(0, 256, (10, 3, 16, 16), dtype=torch.uint8)
    g = gen(9)
    expected = horizontal_flip(random_crop(images, padding=2, generator=g), generator=g)
    assert torch.equal(Augment(crop_padding=2, flip=True)(images, gen(9)), expected)
    assert torch.equal(Augment(crop_padding=None, flip=False)(images, gen(9)), images)
    assert not torch.equal(Augment(2, True)(images, gen(9)), Augment(2, True)(images, gen(10)))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: random_crop(torch.zeros(3, 4, 4), padding=1), r"random_crop\(\) needs a batch"),
        (lambda: random_crop(torch.zeros(1, 1, 4, 4), padding=-1), r"`padding` must be a non-neg"),
        (lambda: horizontal_flip(torch.zeros(1, 1, 4, 4), p=1.5), r"`p` must be a probability"),
        (
            lambda: Augment(crop_padding=-2),
            r"`crop_padding` must be a non-negative integer or None",
        ),
    ],
)
def test_augmentation_rejects_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 4),
    c=st.integers(1, 3),
    h=st.integers(1, 9),
    w=st.integers(1, 9),
    padding=st.integers(0, 5),
    flip=st.booleans(),
    dtype=st.sampled_from([torch.uint8, torch.float32, torch.int64]),
    seed=st.integers(0, 2**31),
)
def test_augment_keeps_shape_dtype_and_values(n, c, h, w, padding, flip, dtype, seed):
    images = (torch.arange(n * c * h * w) % 250 + 1).to(dtype).view(n, c, h, w)
    out = Augment(crop_padding=padding, flip=flip)(images, gen(seed))
    assert out.shape == images.shape and out.dtype == dtype
    assert set(out.unique().tolist()) <= set(images.unique().tolist()) | {0}
    if padding == 0:  # nothing is cropped away: the same values, possibly mirrored
        assert torch.equal(out.sort(dim=-1).values, images.sort(dim=-1).values)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_augmentation_on_the_gpu_with_a_cpu_generator():
    images = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8)
    expected = Augment(4, True)(images, gen(3))
    out = Augment(4, True)(images.cuda(), gen(3))
    assert out.is_cuda and torch.equal(out.cpu(), expected)
    cuda_gen = torch.Generator(device="cuda").manual_seed(3)
    assert Augment(4, True)(images.cuda(), cuda_gen).is_cuda


# ---------------------------------------------------------------------------------------
# Dataset


def _numbered(n: int = 20) -> Dataset:
    """Sample i has input i (as an image) and target i: alignment is checkable."""
    inputs = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 3, 2, 2).clone()
    return Dataset(inputs, torch.arange(n), "numbered", n, (0.5, 0.4, 0.3), (0.2, 0.25, 0.5))


@pytest.mark.parametrize("n", [None, 20, 25])
def test_subset_of_everything_is_the_set_itself(n):
    ds = _numbered()
    assert ds.subset(n, generator=gen()) is ds


def test_subset_is_a_seeded_random_choice_of_aligned_samples():
    ds = _numbered()
    small = ds.subset(8, generator=gen(1))
    assert len(small) == 8 and small.name == ds.name and small.mean == ds.mean
    assert len(set(small.targets.tolist())) == 8
    assert torch.equal(small.inputs[:, 0, 0, 0].long(), small.targets)
    assert torch.equal(small.targets, ds.subset(8, generator=gen(1)).targets)
    assert not torch.equal(small.targets, ds.subset(8, generator=gen(2)).targets)
    assert small.targets.tolist() != list(range(8))
    assert len(ds.subset(0)) == 0


@pytest.mark.parametrize("n", [-1, True, 2.0, 100.0])
def test_subset_rejects_a_size_that_is_not_a_count(n):
    with pytest.raises(ValueError, match=rf"`n` must be a non-negative integer or None, got {n}"):
        _numbered().subset(n)


def test_normalize_scales_centres_and_divides_per_channel():
    ds = _numbered()
    images = torch.zeros(2, 3, 1, 2, dtype=torch.uint8)
    images[:, :, :, 1] = 255
    out = ds.normalize(images)
    assert out.dtype == torch.float32 and out.shape == images.shape
    expected_zero = torch.tensor([-0.5 / 0.2, -0.4 / 0.25, -0.3 / 0.5])
    expected_one = torch.tensor([0.5 / 0.2, 0.6 / 0.25, 0.7 / 0.5])
    torch.testing.assert_close(out[0, :, 0, 0], expected_zero)
    torch.testing.assert_close(out[1, :, 0, 1], expected_one)
    torch.testing.assert_close(ds.normalize(images[0]), out[0])  # a single image too


def test_normalize_without_statistics_only_scales():
    ds = Dataset(torch.zeros(1, 1, 1, 1, dtype=torch.uint8), torch.zeros(1), "x", None)
    out = ds.normalize(torch.tensor([[[[0, 51, 255]]]], dtype=torch.uint8))
    torch.testing.assert_close(out, torch.tensor([[[[0.0, 0.2, 1.0]]]]))


def test_normalize_leaves_float_inputs_alone():
    ds = reflection(4, generator=gen())
    assert ds.normalize(ds.inputs) is ds.inputs
    images = torch.rand(2, 3, 2, 2)
    assert _numbered().normalize(images) is images


@pytest.mark.parametrize(
    "images, message",
    [
        (torch.zeros(2, 1, 2, 2, dtype=torch.uint8), r"do not have the 3 channel\(s\) of the mean"),
        (
            torch.zeros(2, 3, 2, 2, dtype=torch.int32),
            r"must be a uint8 batch .* got dtype torch.int32",
        ),
    ],
)
def test_normalize_rejects_wrong_batches(images, message):
    with pytest.raises(ValueError, match=message):
        _numbered().normalize(images)


def test_to_moves_both_tensors_and_keeps_dtypes():
    ds = _numbered()
    moved = ds.to("meta")  # a device every machine has
    assert moved.inputs.device.type == moved.targets.device.type == "meta"
    assert moved.inputs.dtype == torch.uint8 and moved.targets.dtype == torch.int64
    assert (moved.name, moved.mean, moved.std) == (ds.name, ds.mean, ds.std)
    assert ds.inputs.device.type == "cpu"  # the original is unchanged


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_dataset_resident_on_the_gpu():
    ds = _numbered().to("cuda")
    small = ds.subset(5, generator=gen(0))
    assert small.inputs.is_cuda and torch.equal(small.inputs[:, 0, 0, 0].long(), small.targets)
    out = ds.normalize(ds.inputs[:4])
    assert out.is_cuda
    torch.testing.assert_close(out.cpu(), _numbered().normalize(_numbered().inputs[:4]))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"targets": torch.zeros(3)}, r"has 4 inputs but 3 targets"),
        ({"num_classes": 0}, r"`num_classes` of Dataset 'd' must be positive or None, got 0"),
        ({"mean": (0.5,), "std": (0.1, 0.2)}, r"one entry per channel each, got 1 and 2"),
        ({"std": (0.0,)}, r"`std` of Dataset 'd' must be positive"),
        ({"std": (math.inf,)}, r"`std` of Dataset 'd' must be positive and finite"),
        ({"mean": (math.nan,)}, r"`mean` of Dataset 'd' must be finite, got \(nan,\)"),
    ],
)
def test_dataset_validates_its_fields(kwargs, message):
    fields = {"inputs": torch.zeros(4, 2), "targets": torch.zeros(4), "name": "d"}
    fields["num_classes"] = None
    with pytest.raises(ValueError, match=message):
        Dataset(**{**fields, **kwargs})


def test_dataset_is_frozen():
    ds = _numbered()
    with pytest.raises(AttributeError):
        ds.name = "other"  # type: ignore[misc]


# ---------------------------------------------------------------------------------------
# Public API


@pytest.mark.parametrize("name", odebench.data.__all__)
def test_public_objects_have_docstrings_with_examples(name):
    doc = getattr(odebench.data, name).__doc__ or ""
    assert doc.strip() and ">>>" in doc


def test_errors_refine_the_builtins():
    assert issubclass(DataError, ValueError)
    assert issubclass(DataNotFoundError, DataError)
    assert issubclass(DataNotFoundError, FileNotFoundError)


@pytest.mark.skipif(not DOCS_PAGE.is_file(), reason=f"no docs page at {DOCS_PAGE}")
@pytest.mark.parametrize("name", odebench.data.__all__)
def test_docs_page_documents_every_public_name(name):
    text = DOCS_PAGE.read_text(encoding="utf-8")
    assert re.search(rf"\.\. auto(class|function|exception):: odebench\.data\.{name}\n", text)


# --- SVHN ----------------------------------------------------------------------------


def _write_svhn(path: Path, x: np.ndarray, y: np.ndarray, *, compress: bool = False) -> Path:
    scipy_io = pytest.importorskip("scipy.io")
    path.parent.mkdir(parents=True, exist_ok=True)
    scipy_io.savemat(path, {"X": x, "y": y}, do_compression=compress)
    return path


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "zlib"])
def test_svhn_reads_images_channel_first_and_label_10_as_digit_0(tmp_path, compress):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(32, 32, 3, 5), dtype=np.uint8)
    y = np.array([[10], [1], [9], [10], [4]])
    _write_svhn(tmp_path / "svhn" / "train_32x32.mat", x, y, compress=compress)
    train = odebench.data.load_svhn(tmp_path, train=True)  # found in root/svhn
    assert train.inputs.dtype == torch.uint8 and train.inputs.shape == (5, 3, 32, 32)
    # Image i, channel c, row r, column s is X[r, s, c, i].
    assert torch.equal(train.inputs, torch.from_numpy(x.transpose(3, 2, 0, 1)))
    assert train.targets.tolist() == [0, 1, 9, 0, 4]
    assert (train.name, train.num_classes) == ("svhn", 10)
    assert len(train.mean) == len(train.std) == 3


def test_svhn_missing_file_names_it_and_lists_the_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(DataNotFoundError, match=r"test_32x32\.mat is missing.*notes\.txt"):
        odebench.data.load_svhn(tmp_path, train=False)


@pytest.mark.parametrize(
    ("x", "y", "match"),
    [
        (np.zeros((32, 32, 3, 2), np.float64), np.array([[1], [2]]), "uint8"),
        (np.zeros((28, 28, 3, 2), np.uint8), np.array([[1], [2]]), r"\(32, 32, 3, N\)"),
        (np.zeros((32, 32, 3, 2), np.uint8), np.array([[1]]), "expected 2 labels"),
        (np.zeros((32, 32, 3, 2), np.uint8), np.array([[0], [11]]), r"1\.\.10"),
        # Neither read as the labels 3 and 2, nor as 10, 1, 5, 3 row by row.
        (np.zeros((32, 32, 3, 2), np.uint8), np.array([[3.5], [2.0]]), "whole numbers"),
        (np.zeros((32, 32, 3, 4), np.uint8), np.array([[10, 1], [5, 3]]), "as a vector"),
    ],
)
def test_svhn_rejects_malformed_content_naming_the_file(tmp_path, x, y, match):
    path = _write_svhn(tmp_path / "test_32x32.mat", x, y)
    with pytest.raises(DataError, match=match) as info:
        odebench.data.load_svhn(tmp_path, train=False)
    assert str(path) in str(info.value)


def test_svhn_refuses_a_file_that_is_not_matlab(tmp_path):
    pytest.importorskip("scipy.io")
    (tmp_path / "train_32x32.mat").write_bytes(b"<html>not found</html>")
    with pytest.raises(DataError, match=r"train_32x32\.mat is not a MATLAB file"):
        odebench.data.load_svhn(tmp_path)
