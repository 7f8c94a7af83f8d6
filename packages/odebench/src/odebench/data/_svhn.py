"""SVHN (cropped digits) from the official ``train_32x32.mat`` / ``test_32x32.mat`` files."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from ._dataset import CHUNK, DataError, Dataset, describe, file_sources, find_files

SVHN_FILES = {True: "train_32x32.mat", False: "test_32x32.mat"}
"""The file of each split (``train=True`` / ``False``), as the official site names them."""
SVHN_FOLDERS = ("svhn", "SVHN")
"""Sub-folders of ``root`` that are searched as well."""
SVHN_MEAN = (0.4377, 0.4438, 0.4728)
SVHN_STD = (0.1980, 0.2010, 0.1970)
SVHN_MAX_BYTES = 1 << 31
"""The most bytes the compressed variables of an SVHN file may declare in all (2 GiB; the
official training file holds 225 MB, the ``extra`` split 1.6 GB)."""

_MI_COMPRESSED = 15  # the MATLAB 5 type of a zlib-compressed element
_MAT_HEADER = 128


def load_svhn(root: str | os.PathLike[str], *, train: bool = True) -> Dataset:
    """Load SVHN's cropped 32 x 32 digits from ``train_32x32.mat`` or ``test_32x32.mat``.

    The label 10 of the files (the digit 0) is class 0. Needs scipy
    (``pip install "odebench[svhn]"``).

    Args:
        root: the directory holding the ``.mat`` files, or the one above ``svhn/``.
        train: the training split or, with ``False``, the test split.

    Returns:
        A :class:`Dataset` with ``inputs`` ``(N, 3, 32, 32)`` of dtype ``torch.uint8``,
        ``targets`` ``(N,)`` int64 in 0..9, ``num_classes`` 10.

    Raises:
        DataNotFoundError: the file is missing (the message lists what ``root`` holds).
        DataError: the file is not a MATLAB file scipy reads, its compressed variables
            declare more than ``SVHN_MAX_BYTES`` (2 GiB) or inflate to more or less than
            they declare, or it does not hold uint8 ``X`` of shape
            ``(32, 32, 3, N)`` and a vector ``y`` of ``N`` whole numbers in 1..10. The
            message names the file.
        ImportError: scipy is not installed.

    Example:
        >>> import tempfile, pathlib, numpy as np, scipy.io
        >>> from odebench.data import load_svhn
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> x = np.zeros((32, 32, 3, 2), np.uint8)
        >>> scipy.io.savemat(root / "test_32x32.mat", {"X": x, "y": np.array([[10], [3]])})
        >>> test = load_svhn(root, train=False)
        >>> test.inputs.shape, test.targets.tolist(), test.name
        (torch.Size([2, 3, 32, 32]), [0, 3], 'svhn')
    """
    try:
        import scipy.io  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError as exc:  # pragma: no cover - scipy is a test dependency
        raise ImportError(
            "reading SVHN's .mat files needs scipy: pip install 'odebench[svhn]'"
        ) from exc
    name = SVHN_FILES[train]
    hint = "Fetch it with odebench.data.download('svhn', ...)."
    (path,) = find_files(Path(root), SVHN_FOLDERS, (name,), f"SVHN file {name} is", hint)
    _check_mat_sizes(path, SVHN_MAX_BYTES)
    try:
        content = scipy.io.loadmat(path, variable_names=("X", "y"))
    except Exception as exc:  # scipy raises several types for a bad file
        raise DataError(f"{path} is not a MATLAB file scipy can read: {exc}") from exc
    x, y = content.get("X"), content.get("y")
    images_ok = isinstance(x, np.ndarray) and x.ndim == 4 and x.shape[:3] == (32, 32, 3)
    if not images_ok or x.dtype != np.uint8:
        raise DataError(f"{path}: expected `X` as uint8 of shape (32, 32, 3, N), got {describe(x)}")
    n = x.shape[3]
    if not (isinstance(y, np.ndarray) and y.shape in ((n, 1), (1, n)) and y.dtype.kind in "iuf"):
        raise DataError(f"{path}: expected {n} labels as a vector `y`, got {describe(y)}")
    if not np.isin(y, np.arange(1, 11)).all():  # a label 3.5 or NaN is no class
        raise DataError(
            f"{path}: labels must be the whole numbers 1..10 (10 for the digit 0), got "
            f"{describe(y)} from {y.min()} to {y.max()}"
        )
    labels = y.reshape(-1).astype(np.int64)
    images = np.ascontiguousarray(x.transpose(3, 2, 0, 1))  # (N, channel, row, column)
    return Dataset(
        inputs=torch.from_numpy(images),
        targets=torch.from_numpy(labels % 10),
        name="svhn",
        num_classes=10,
        mean=SVHN_MEAN,
        std=SVHN_STD,
        sources=file_sources(path),
    )


def _check_mat_sizes(path: Path, max_bytes: int) -> None:
    """Refuse a MATLAB 5 file whose compressed variables declare more than ``max_bytes`` in all,
    or inflate to other than they declare: scipy inflates whatever they declare. Any other
    file is left to scipy."""
    try:
        with path.open("rb") as file:
            header = file.read(_MAT_HEADER)
            if len(header) < _MAT_HEADER or header[126:128] not in (b"IM", b"MI"):
                return
            order = "<" if header[126:128] == b"IM" else ">"
            position, budget = _MAT_HEADER, max_bytes
            while len(tag := file.read(8)) == 8:
                mdtype, count = struct.unpack(order + "II", tag)
                if mdtype == _MI_COMPRESSED:
                    where = f"{path}: the compressed variable at byte {position} ({count} bytes)"
                    budget -= _inflated_size(file, count, where, order, budget)
                    position += 8 + count
                else:  # a small element holds its data in its 8-byte tag
                    position += 8 if mdtype >> 16 else 8 + count + (-count % 8)
                file.seek(position)
    except OSError as exc:
        raise DataError(f"Cannot read {path}: {exc}.") from exc


def _inflated_size(file: BinaryIO, count: int, where: str, order: str, budget: int) -> int:
    """The bytes the compressed element of ``count`` bytes declares, once checked that it
    inflates to exactly that, at most ``budget``, in chunks that are not kept."""
    inflater = zlib.decompressobj()
    head = b""
    declared: int | None = None
    found = 0
    remaining = count
    try:
        while True:
            data = inflater.unconsumed_tail
            if not data and remaining and not inflater.eof:
                data = file.read(min(CHUNK, remaining))
                remaining -= len(data)
            if not data:
                break
            out = inflater.decompress(data, CHUNK)
            found += len(out)
            if declared is None:
                head += out[: 8 - len(head)]
                if len(head) == 8:
                    declared = 8 + struct.unpack(order + "II", head)[1]
                    if declared > budget:
                        raise DataError(
                            f"{where} declares {declared} bytes once decompressed, more than "
                            f"the {budget} bytes an SVHN file may still hold; it is not an "
                            "SVHN file: fetch it again."
                        )
            if declared is not None and found > declared:
                raise DataError(
                    f"{where} inflates to more than the {declared} bytes it declares "
                    f"(at least {found}); decompression stopped there. It is corrupt: "
                    "fetch it again."
                )
    except zlib.error as exc:
        raise DataError(
            f"{where} cannot be decompressed ({exc}) after {found} bytes"
            + ("" if declared is None else f" of the {declared} it declares")
            + "; it is truncated or corrupt: fetch it again."
        ) from exc
    if declared is None or found != declared:
        raise DataError(
            f"{where} is truncated: it declares {declared} bytes once decompressed but "
            f"inflates to {found}; fetch it again."
        )
    return declared
