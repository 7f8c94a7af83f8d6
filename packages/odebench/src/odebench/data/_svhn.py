"""SVHN (cropped digits) from the official ``train_32x32.mat`` / ``test_32x32.mat`` files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from ._dataset import DataError, DataNotFoundError, Dataset
from ._idx import _listing

SVHN_FILES = {True: "train_32x32.mat", False: "test_32x32.mat"}
"""The file of each split (``train=True`` / ``False``), as the official site names them."""
SVHN_FOLDERS = ("svhn", "SVHN")
"""Sub-folders of ``root`` that are searched as well."""
SVHN_MEAN = (0.4377, 0.4438, 0.4728)
SVHN_STD = (0.1980, 0.2010, 0.1970)


def _svhn_file(root: Path, name: str) -> Path:
    """``root/name`` or ``root/<folder>/name``, whichever exists."""
    for directory in (root, *(root / folder for folder in SVHN_FOLDERS)):
        if (directory / name).is_file():
            return directory / name
    if not root.is_dir():
        where = f"{root} {'is not a directory' if root.exists() else 'does not exist'}"
    else:
        where = f"{root}: {_listing(root)}"
    raise DataNotFoundError(
        f"SVHN file {name} is missing: looked in {root} and its sub-folders "
        f"{', '.join(SVHN_FOLDERS)}; {where}. Fetch it with odebench.data.download('svhn', ...)."
    )


def load_svhn(root: str | os.PathLike[str], *, train: bool = True) -> Dataset:
    """Load SVHN's cropped 32 x 32 digits (the format-2 MATLAB files).

    Dupont et al. (2019) report NODE and ANODE on SVHN beside MNIST and CIFAR-10.
    The training split is ``train_32x32.mat`` (73,257 images), the test split
    ``test_32x32.mat`` (26,032), looked for in ``root`` and ``root/svhn``. Each file
    holds ``X``, uint8 of shape ``(32, 32, 3, N)``, and ``y``, the labels 1..10 of
    shape ``(N, 1)``, where 10 stands for the digit 0; the loader returns the digit
    itself (0..9) as the class. The files are MATLAB data, not code: reading them
    runs nothing. ``mean`` and ``std`` are the usual per-channel statistics of the
    training images on the [0, 1] scale.

    Reading them needs scipy (``pip install "odebench[svhn]"``).

    Args:
        root: the directory holding the ``.mat`` files, or the one above ``svhn/``.
        train: the training split or, with ``False``, the test split.

    Returns:
        A :class:`Dataset` with ``inputs`` ``(N, 3, 32, 32)`` of dtype ``torch.uint8``,
        ``targets`` ``(N,)`` int64 in 0..9, ``num_classes`` 10.

    Raises:
        DataNotFoundError: the file is missing (the message lists what ``root`` holds).
        DataError: the file is not a MATLAB file scipy reads, or does not hold uint8
            ``X`` of shape ``(32, 32, 3, N)`` and ``N`` labels in 1..10. The message
            names the file.
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
    path = _svhn_file(Path(root), SVHN_FILES[train])
    try:
        content = scipy.io.loadmat(path, variable_names=("X", "y"))
    except Exception as exc:  # scipy raises several types for a bad file
        raise DataError(f"{path} is not a MATLAB file scipy can read: {exc}") from exc
    x, y = content.get("X"), content.get("y")
    if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 4:
        raise DataError(f"{path}: expected `X` as uint8 of shape (32, 32, 3, N), got {_shape(x)}")
    if x.shape[:3] != (32, 32, 3):
        raise DataError(f"{path}: expected `X` of shape (32, 32, 3, N), got {x.shape}")
    n = x.shape[3]
    if not isinstance(y, np.ndarray) or y.size != n:
        raise DataError(f"{path}: expected {n} labels in `y`, got {_shape(y)}")
    labels = y.reshape(-1).astype(np.int64)
    if labels.size and (labels.min() < 1 or labels.max() > 10):
        raise DataError(
            f"{path}: labels must lie in 1..10 (10 for the digit 0), got "
            f"{labels.min()}..{labels.max()}"
        )
    images = np.ascontiguousarray(x.transpose(3, 2, 0, 1))  # (N, channel, row, column)
    return Dataset(
        inputs=torch.from_numpy(images),
        targets=torch.from_numpy(labels % 10),
        name="svhn",
        num_classes=10,
        mean=SVHN_MEAN,
        std=SVHN_STD,
    )


def _shape(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} of shape {value.shape}"
    return "nothing" if value is None else type(value).__name__
