"""CIFAR-10 and CIFAR-100 from their "python version" batch files, without running pickled code."""

from __future__ import annotations

import _compat_pickle
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from ._dataset import DataError, Dataset, describe, file_sources, find_files


def _latin1_encode(text: object, encoding: object = "latin1") -> bytes:
    """``_codecs.encode(text, "latin1")``, how Python 3 writes bytes in a protocol-2 pickle,
    and no other use of it."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(
            f"_codecs.encode is only allowed on text with the latin1 codec, got "
            f"{type(text).__name__} and {encoding!r}"
        )
    return text.encode("latin1")


# numpy's array reconstructor, whichever module this numpy version keeps it in.
_RECONSTRUCT: Callable[..., Any] = np.empty(0).__reduce__()[0]  # type: ignore[assignment,index]

# The only globals a CIFAR batch file needs: numpy arrays (written by Python 2 as
# numpy.core.multiarray._reconstruct, by numpy 2 as numpy._core.multiarray._reconstruct),
# their dtype, and, for files re-pickled by Python 3 with protocol 2, bytes.
_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,
}


class _BatchUnpickler(pickle.Unpickler):
    """An unpickler that builds plain containers and numpy arrays and refuses any other
    global (``os.system``, ``builtins.eval``, any class) before it can be called."""

    def __init__(self, file: BinaryIO, path: Path) -> None:
        super().__init__(file, encoding="bytes")
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        # Python 2 names (``__builtin__``, ``copy_reg``) as Python 3 knows them, as
        # pickle itself maps them for protocols below 3.
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise DataError(
                f"refusing to load {module}.{name} from {self._path}: CIFAR batch files "
                "hold only plain containers and arrays (the allowed globals are "
                f"{', '.join(sorted(f'{m}.{n}' for m, n in _ALLOWED))})."
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise DataError(
            f"refusing to load a persistent id from {self._path}: CIFAR batch files hold "
            "only plain containers and arrays."
        )


@dataclass(frozen=True)
class _Cifar:
    classes: int
    name: str
    title: str
    folder: str
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    label_key: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


# Statistics of the training images (per pixel and channel, [0, 1] scale).
_CIFARS = {
    10: _Cifar(
        10,
        "cifar10",
        "CIFAR-10",
        "cifar-10-batches-py",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        ("test_batch",),
        "labels",
        (0.4914, 0.4822, 0.4465),
        (0.2470, 0.2435, 0.2616),
    ),
    100: _Cifar(
        100,
        "cifar100",
        "CIFAR-100",
        "cifar-100-python",
        ("train",),
        ("test",),
        "fine_labels",
        (0.5071, 0.4865, 0.4409),
        (0.2673, 0.2564, 0.2762),
    ),
}


def _get(batch: dict[Any, Any], key: str) -> Any:
    """``batch[key]`` under a bytes key (Python 2 files) or a str key; ``None`` under neither."""
    return batch.get(key.encode("ascii"), batch.get(key))


def _read_batch(path: Path, spec: _Cifar) -> tuple[np.ndarray, np.ndarray]:
    """The images ``(N, 3072)`` uint8 and labels ``(N,)`` int64 of one batch file."""
    try:
        with path.open("rb") as file:
            batch = _BatchUnpickler(file, path).load()
    except DataError:
        raise
    except Exception as err:  # unpickling fails in many ways; all mean a bad file
        raise DataError(
            f"CIFAR batch file {path} cannot be unpickled ({type(err).__name__}: {err}); "
            "it is truncated, corrupt or not a CIFAR python batch file."
        ) from err
    if not isinstance(batch, dict):
        raise DataError(
            f"CIFAR batch file {path} holds a {type(batch).__name__}; expected a dict "
            f"with keys b'data' and b'{spec.label_key}'."
        )
    data = _get(batch, "data")
    labels = _get(batch, spec.label_key)
    if data is None or labels is None:
        keys = ", ".join(repr(k) for k in batch)
        raise DataError(
            f"{spec.title} batch file {path} lacks b'data' or b'{spec.label_key}'; "
            f"its keys are {keys}."
        )
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.shape[1:] == (3072,)):
        raise DataError(
            f"{spec.title} batch file {path}: b'data' is {describe(data)}; expected (N, 3072) "
            "uint8, 3 colour planes of 32 x 32."
        )
    try:  # the labels as they are: no 3.7 read as 3, nor True as 1
        label_array = np.asarray(labels)
    except ValueError:  # a ragged list
        label_array = np.asarray(None)
    if label_array.size and label_array.dtype.kind not in "iu":
        raise DataError(
            f"{spec.title} batch file {path}: b'{spec.label_key}' is not a list of "
            f"integers; it makes {describe(label_array)}."
        )
    if label_array.shape != (data.shape[0],):
        raise DataError(
            f"{spec.title} batch file {path} holds {data.shape[0]} images but "
            f"b'{spec.label_key}' has shape {label_array.shape}; expected "
            f"{data.shape[0]} labels."
        )
    if label_array.size and (label_array.min() < 0 or label_array.max() >= spec.classes):
        raise DataError(
            f"{spec.title} batch file {path} holds labels from {label_array.min()} to "
            f"{label_array.max()}; expected 0..{spec.classes - 1}."
        )
    return data, label_array.astype(np.int64)


def load_cifar(root: str | os.PathLike[str], *, train: bool = True, classes: int = 10) -> Dataset:
    """Load CIFAR-10 or CIFAR-100 from the "python version" batch files, running no pickled code.

    Args:
        root: the directory holding the batch files, or the one above their folder
            (``cifar-10-batches-py``, ``cifar-100-python``).
        train: the training split or, with ``False``, the test split.
        classes: 10 for CIFAR-10, 100 for CIFAR-100.

    Returns:
        A :class:`Dataset` with ``inputs`` ``(N, 3, 32, 32)`` of dtype ``torch.uint8``,
        ``targets`` ``(N,)`` int64, ``num_classes`` equal to ``classes``.

    Raises:
        ValueError: if ``classes`` is not 10 or 100.
        DataNotFoundError: if a batch file is missing (the message lists the
            expected files and what the directories hold).
        DataError: if a file asks for anything but arrays and containers, cannot be
            unpickled, or does not hold uint8 ``data`` of shape ``(N, 3072)`` with
            ``N`` integer labels in range. The message names the file.

    Example:
        >>> import pickle, tempfile, pathlib, numpy as np
        >>> from odebench.data import load_cifar
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> batch = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [3, 8]}
        >>> with open(root / "test_batch", "wb") as f:
        ...     pickle.dump(batch, f, protocol=2)
        >>> test = load_cifar(root, train=False)
        >>> test.inputs.shape, test.targets.tolist(), test.name
        (torch.Size([2, 3, 32, 32]), [3, 8], 'cifar10')
    """
    if classes not in _CIFARS:
        raise ValueError(f"`classes` must be 10 or 100, got {classes!r}.")
    spec = _CIFARS[classes]
    files = spec.train_files if train else spec.test_files
    paths = find_files(
        Path(root),
        (spec.folder,),
        files,
        f"{spec.title} batch files are",
        f"Fetch them with odebench.data.download({spec.name!r}, ...) (the python version of "
        "the data set).",
    )
    parts = [_read_batch(path, spec) for path in paths]
    data = np.concatenate([p[0] for p in parts]).reshape(-1, 3, 32, 32)
    labels = np.concatenate([p[1] for p in parts])
    return Dataset(
        inputs=torch.from_numpy(data),
        targets=torch.from_numpy(labels),
        name=spec.name,
        num_classes=classes,
        mean=spec.mean,
        std=spec.std,
        sources=file_sources(*paths),
    )
