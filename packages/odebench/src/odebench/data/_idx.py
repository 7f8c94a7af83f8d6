"""IDX files (the format of MNIST and Fashion-MNIST) and the MNIST-style loader."""

from __future__ import annotations

import gzip
import io
import math
import os
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import torch

from ._dataset import CHUNK, DEFLATE_MAX_RATIO, DataError, Dataset, file_sources, find_files

_GZIP_MAGIC = b"\x1f\x8b"

MAX_IDX_BYTES = 1 << 32
"""The most data bytes an IDX header may declare (4 GiB); a larger one is refused unread."""
TRAILING_SCAN = 1 << 20
"""How far past its declared end a gzip file is inflated to report its excess."""

# type code -> (big-endian numpy dtype as stored, what the format calls it)
_IDX_TYPES: dict[int, tuple[str, str]] = {
    0x08: (">u1", "unsigned byte"),
    0x09: (">i1", "signed byte"),
    0x0B: (">i2", "short"),
    0x0C: (">i4", "int"),
    0x0D: (">f4", "float"),
    0x0E: (">f8", "double"),
}
_KNOWN_TYPES = ", ".join(f"0x{code:02X} ({what})" for code, (_, what) in _IDX_TYPES.items())

# kind -> (name in messages, mean, std) of the training images on the [0, 1] scale
_MNIST_KINDS: dict[str, tuple[str, float, float]] = {
    "mnist": ("MNIST", 0.1307, 0.3081),
    "fashion-mnist": ("Fashion-MNIST", 0.2860, 0.3530),
}


IDENTIFY_MIN_IMAGES = 100
"""The fewest 28x28 images :func:`identify_mnist_kind` judges; fewer are not judged."""


def pixel_fractions(images: torch.Tensor) -> tuple[float, float]:
    """``(filled, border)``: the fraction of nonzero pixels of uint8 ``images``
    ``(N, [1,] H, W)``, ``H, W >= 5``, overall and within two pixels of an edge."""
    images = images.reshape(images.shape[0], *images.shape[-2:])
    inner = images[:, 2:-2, 2:-2]
    total, inside = images.numel(), inner.numel()
    nonzero, nonzero_inside = int(images.count_nonzero()), int(inner.count_nonzero())
    return nonzero / max(total, 1), (nonzero - nonzero_inside) / max(total - inside, 1)


def identify_mnist_kind(images: torch.Tensor) -> str | None:
    """``"mnist"`` or ``"fashion-mnist"`` by the :func:`pixel_fractions` of uint8 28x28
    ``images``; ``None`` for neither, another size or fewer than :data:`IDENTIFY_MIN_IMAGES`
    (the bounds and where they were measured: the data page).

    Example:
        >>> import torch
        >>> digits = torch.zeros(100, 28, 28, dtype=torch.uint8)
        >>> digits[:, 6:22, 12:16] = 255  # a stroke in the middle
        >>> identify_mnist_kind(digits), identify_mnist_kind(digits[:10])
        ('mnist', None)
    """
    if images.shape[-2:] != (28, 28) or images.shape[0] < IDENTIFY_MIN_IMAGES:
        return None
    filled, border = pixel_fractions(images)
    if border <= 0.04 and filled <= 0.35:
        return "mnist"
    if 0.08 <= border <= 0.5 and 0.25 <= filled <= 0.8:
        return "fashion-mnist"
    return None


def read_idx(path: str | os.PathLike[str]) -> torch.Tensor:
    """Read one IDX file, gzip-compressed or not, into a tensor of its own shape and type.

    Args:
        path: the file.

    Returns:
        A tensor of the shape the header gives, in native byte order.

    Raises:
        DataNotFoundError: if ``path`` does not exist (the message lists what its
            directory holds).
        DataError: if the file is not IDX (wrong magic number, unknown type code), is
            truncated or has trailing bytes (before or after decompression), declares
            more data than it can hold, or is gzip-compressed but cannot be
            decompressed. The message names the file and the declared and found sizes.

    Example:
        >>> import struct, tempfile, pathlib
        >>> from odebench.data import read_idx
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "tiny-idx2-ubyte"
        >>> _ = path.write_bytes(bytes([0, 0, 0x08, 2]) + struct.pack(">II", 2, 3)
        ...                      + bytes(range(6)))
        >>> read_idx(path)
        tensor([[0, 1, 2],
                [3, 4, 5]], dtype=torch.uint8)
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"IDX file {path} is a directory; expected a file.")
    if not path.is_file():  # a DataNotFoundError listing what the folder holds
        find_files(path.parent, (), (path.name,), f"IDX file {path} is", "Give an existing file.")
    try:
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            compressed = file.read(2) == _GZIP_MAGIC
            file.seek(0)
            if not compressed:
                return _read_idx_stream(_Reader(file, path, None), size)
            reader = _Reader(gzip.GzipFile(fileobj=file, mode="rb"), path, size)
            try:
                return _read_idx_stream(reader, size)
            except (OSError, EOFError, zlib.error) as err:
                declared = (
                    "" if reader.declared is None else f" of the {reader.declared} it declares"
                )
                raise DataError(
                    f"IDX file {path} starts like a gzip file but cannot be decompressed "
                    f"({err}) after {reader.count} bytes{declared}; it is probably truncated "
                    "or corrupt: fetch it again."
                ) from err
    except OSError as err:
        raise DataError(f"Cannot read IDX file {path}: {err}.") from err


class _Reader:
    """A stream read in chunks of :data:`CHUNK` bytes, counting the bytes it gave."""

    def __init__(self, stream: io.BufferedIOBase, path: Path, compressed: int | None) -> None:
        self.stream = stream
        self.path = path
        self.compressed = compressed  # the size of the gzip file; None when not compressed
        self.count = 0  # bytes read (after decompression)
        self.declared: int | None = None  # header and data, once the header is read
        self.once = "" if compressed is None else " once decompressed"  # for sizes in messages

    def readinto(self, buffer: memoryview) -> int:
        done = 0
        while done < len(buffer):
            n = self.stream.readinto(buffer[done : done + CHUNK])
            if not n:
                break
            done += n
            self.count += n
        return done

    def read(self, size: int) -> bytes:
        buffer = bytearray(size)
        return bytes(buffer[: self.readinto(memoryview(buffer))])

    def excess(self) -> int:
        """How many bytes follow, counted up to a chunk past :data:`TRAILING_SCAN`."""
        return self.readinto(memoryview(bytearray(TRAILING_SCAN + CHUNK)))


def _read_header(reader: _Reader) -> tuple[int, tuple[int, ...]]:
    """The type code and the dimensions of the IDX header of ``reader``, checked."""
    path = reader.path
    head = reader.read(4)
    if len(head) < 4:
        raise DataError(
            f"IDX file {path} is truncated: {len(head)} bytes{reader.once}, shorter than the "
            "4-byte magic number."
        )
    if head[0] != 0 or head[1] != 0:
        magic = int.from_bytes(head, "big")
        raise DataError(
            f"{path} is not an IDX file: its magic number is 0x{magic:08X}; an IDX file "
            "starts with two zero bytes, then a type code (0x08 for unsigned bytes) and "
            "the number of dimensions, e.g. 0x00000803 for MNIST images."
        )
    code, ndim = head[2], head[3]
    if code not in _IDX_TYPES:
        raise DataError(
            f"IDX file {path} has the unknown type code 0x{code:02X}; known codes: {_KNOWN_TYPES}."
        )
    if ndim == 0:
        raise DataError(f"IDX file {path} declares 0 dimensions; expected at least 1.")
    sizes = reader.read(4 * ndim)
    if len(sizes) < 4 * ndim:
        raise DataError(
            f"IDX file {path} is truncated: its header announces {ndim} dimensions "
            f"({4 + 4 * ndim} header bytes) but the file has {4 + len(sizes)} bytes{reader.once}."
        )
    return code, struct.unpack(f">{ndim}I", sizes)


def _check_declared(reader: _Reader, size: int, header: int, expected: int, values: str) -> None:
    """Refuse ``expected`` data bytes, before they are allocated, that the file of ``size``
    bytes cannot hold (compressed: inflate to; uncompressed: hold exactly)."""
    path = reader.path
    if expected > MAX_IDX_BYTES:
        raise DataError(
            f"IDX file {path} declares {values} ({expected} bytes), more than the "
            f"{MAX_IDX_BYTES} bytes an IDX file may hold; its header is corrupt: fetch the "
            "file again."
        )
    if reader.compressed is not None:
        bound = DEFLATE_MAX_RATIO * reader.compressed
        if header + expected > bound:
            raise DataError(
                f"IDX file {path} declares {values} ({header + expected} bytes with the "
                f"header), but a gzip file of {reader.compressed} bytes inflates to at most "
                f"{bound} bytes; its header is corrupt: fetch the file again."
            )
        return
    got = size - header
    if got < expected:
        raise DataError(
            f"IDX file {path} is truncated: the header announces {values} ({expected} bytes) "
            f"but only {got} bytes follow."
        )
    if got > expected:
        raise DataError(
            f"IDX file {path} has {got - expected} bytes after the {expected} bytes of data "
            f"its header announces ({values}); it is not a well-formed IDX file."
        )


def _read_idx_stream(reader: _Reader, size: int) -> torch.Tensor:
    """The tensor of the IDX data of ``reader``, a file of ``size`` bytes (see :func:`read_idx`)."""
    path = reader.path
    code, dims = _read_header(reader)
    stored, what = _IDX_TYPES[code]
    dtype = np.dtype(stored)
    count = math.prod(dims)
    header = 4 + 4 * len(dims)
    expected = count * dtype.itemsize
    values = f"{' x '.join(str(d) for d in dims)} values of type {what}"
    reader.declared = header + expected
    _check_declared(reader, size, header, expected, values)
    array = np.empty(count, dtype=dtype.newbyteorder("="))
    got = reader.readinto(array.data.cast("B"))
    if got < expected:
        raise DataError(
            f"IDX file {path} is truncated: the header announces {values} ({expected} bytes) "
            f"but only {got} bytes follow{reader.once}."
        )
    extra = 0 if reader.compressed is None else reader.excess()
    if extra:
        amount = f"more than {TRAILING_SCAN}" if extra > TRAILING_SCAN else str(extra)
        raise DataError(
            f"IDX file {path} has {amount} bytes after the {expected} bytes of data its "
            f"header announces ({values}) once decompressed, {header + expected} bytes in "
            "all; decompression stopped there. It is not a well-formed IDX file: fetch it again."
        )
    if dtype.itemsize > 1 and sys.byteorder == "little":
        array.byteswap(inplace=True)  # the file is big-endian
    return torch.from_numpy(array.reshape(dims))


def load_mnist(root: str | os.PathLike[str], *, train: bool = True, kind: str = "mnist") -> Dataset:
    """Load MNIST or Fashion-MNIST from the standard IDX files (``.gz`` or not) in a directory.

    The uncompressed file is used where both are there; images that look like the
    other data set are refused (the data page says how they are told apart).

    Args:
        root: the directory holding the files.
        train: the training split (60,000 images) or, with ``False``, the test split
            (10,000).
        kind: ``"mnist"`` or ``"fashion-mnist"``; it sets the name and the statistics,
            the files being the same format.

    Returns:
        A :class:`Dataset` with ``inputs`` of shape ``(N, 1, 28, 28)``, dtype
        ``torch.uint8``, ``targets`` ``(N,)`` int64 in 0..9, ``num_classes`` 10.

    Raises:
        ValueError: for an unknown ``kind``.
        DataNotFoundError: if ``root`` or one of the two files is missing (the
            message lists the expected file names and what the directory holds).
        DataError: if a file is corrupt, the images are not a uint8 ``(N, 28, 28)``
            array, the labels not uint8 ``(N,)`` in 0..9, their counts differ, or the
            images look like the other data set (MNIST digits asked for as
            Fashion-MNIST, or the reverse).

    Example:
        >>> import struct, tempfile, pathlib
        >>> from odebench.data import load_mnist
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (root / "t10k-images-idx3-ubyte").write_bytes(
        ...     bytes([0, 0, 8, 3]) + struct.pack(">III", 2, 28, 28) + bytes(2 * 784))
        >>> _ = (root / "t10k-labels-idx1-ubyte").write_bytes(
        ...     bytes([0, 0, 8, 1]) + struct.pack(">I", 2) + bytes([7, 1]))
        >>> test = load_mnist(root, train=False)
        >>> test.inputs.shape, test.targets.tolist(), test.num_classes, test.mean
        (torch.Size([2, 1, 28, 28]), [7, 1], 10, (0.1307,))
    """
    if kind not in _MNIST_KINDS:
        raise ValueError(f"`kind` must be one of {sorted(_MNIST_KINDS)}, got {kind!r}.")
    title, mean, std = _MNIST_KINDS[kind]
    root, prefix = Path(root), "train" if train else "t10k"
    names = (f"{prefix}-images-idx3-ubyte[.gz]", f"{prefix}-labels-idx1-ubyte[.gz]")
    hint = f"Fetch them with odebench.data.download({kind!r}, ...) or give their directory."
    image_path, label_path = find_files(root, (), names, f"{title} files are", hint)
    images = read_idx(image_path)
    labels = read_idx(label_path)
    if images.dtype != torch.uint8 or images.dim() != 3 or images.shape[1:] != (28, 28):
        raise DataError(
            f"{title} image file {image_path} holds a {images.dtype} array of shape "
            f"{tuple(images.shape)}; expected uint8 images (N, 28, 28)."
        )
    if labels.dtype != torch.uint8 or labels.dim() != 1:
        raise DataError(
            f"{title} label file {label_path} holds a {labels.dtype} array of shape "
            f"{tuple(labels.shape)}; expected uint8 labels (N,)."
        )
    if images.shape[0] != labels.shape[0]:
        raise DataError(
            f"{title} files disagree: {image_path} holds {images.shape[0]} images but "
            f"{label_path} holds {labels.shape[0]} labels."
        )
    if labels.numel() and int(labels.max()) > 9:
        raise DataError(
            f"{title} label file {label_path} holds the label {int(labels.max())}; "
            "expected labels 0..9."
        )
    found = identify_mnist_kind(images)
    if found is not None and found != kind:
        filled, border = pixel_fractions(images)
        raise DataError(
            f"{root} holds {_MNIST_KINDS[found][0]}, not {title}: its {image_path.name} "
            f"images have {filled:.0%} nonzero pixels and {border:.1%} of their two-pixel "
            f"border (MNIST's digits about 19% and 0.2%, Fashion-MNIST's clothes 50% and 20%); "
            f"the two share file names: give the folder of the {title} files, or load "
            f"these as {found!r}."
        )
    return Dataset(
        inputs=images.unsqueeze(1),
        targets=labels.to(torch.int64),
        name=kind,
        num_classes=10,
        mean=(mean,),
        std=(std,),
        sources=file_sources(image_path, label_path),
    )
