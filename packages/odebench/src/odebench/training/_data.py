"""Finding and loading the data set of a run, and cutting it into batches."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from ..data import (
    Dataset,
    annuli,
    load_cifar,
    load_mnist,
    load_svhn,
    nested_spirals,
    reflection,
)
from ._config import DATASETS, TrainConfig

DATA_ENV = "ODEBENCH_DATA_DIR"
TOY_SIZES = {"train": 3000, "test": 1000}

#: The toy sets, each made from a size and a generator.
_TOYS: dict[str, Callable[..., Dataset]] = {
    "annuli-1d": functools.partial(annuli, dim=1),
    "annuli-2d": functools.partial(annuli, dim=2),
    "reflection": reflection,
    "spirals": functools.partial(nested_spirals, turns=0.5),  # why half a turn: the guide
}

#: The image sets: a reader ``read(root, train=...)``, and the names (globs) of which one
#: marks a folder that holds the set.
_IMAGE_SETS: dict[str, tuple[Callable[..., Dataset], tuple[str, ...]]] = {
    "mnist": (functools.partial(load_mnist, kind="mnist"), ("train-images-idx3-ubyte*",)),
    "fashion-mnist": (
        functools.partial(load_mnist, kind="fashion-mnist"),
        ("train-images-idx3-ubyte*",),
    ),
    "cifar10": (functools.partial(load_cifar, classes=10), ("data_batch_1", "cifar-10-batches-py")),
    "cifar100": (functools.partial(load_cifar, classes=100), ("train", "cifar-100-python")),
    "svhn": (load_svhn, ("train_32x32.mat",)),
}


def download_root() -> Path:
    """Where ``odebench download`` and the quickstart put data sets by default:
    ``$ODEBENCH_DATA_DIR`` when set, else ``~/.cache/odebench`` (both searched by
    :func:`search_paths`)."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    return Path.home() / ".cache" / "odebench"


def search_paths(data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The directories searched for data sets, in order.

    ``data_dir`` when given, ``$ODEBENCH_DATA_DIR``, ``~/.cache/odebench``,
    ``./data``, a ``shared/datasets`` folder beside the working directory, and
    ``/usr/share/datasets`` (where Debian's ``dataset-fashion-mnist`` installs).
    """
    paths = [Path(data_dir)] if data_dir is not None else []
    if os.environ.get(DATA_ENV):
        paths.append(Path(os.environ[DATA_ENV]))
    paths += [
        Path.home() / ".cache" / "odebench",
        Path("data"),
        Path("..") / "shared" / "datasets",
        Path("/usr/share/datasets"),
    ]
    return paths


def find_data(dataset: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The directory that holds the files of an image data set.

    With ``data_dir`` only that directory (or its sub-folder named after the data
    set) is considered; without it, every directory of :func:`search_paths`.

    Raises:
        ValueError: ``dataset`` is not an image data set.
        FileNotFoundError: naming the places searched and the files expected.

    Example:
        >>> find_data("cifar10", "/nonexistent")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        FileNotFoundError: no cifar10 data in /nonexistent (looked for CIFAR-10, ...--data-dir
    """
    if dataset not in _IMAGE_SETS:
        raise ValueError(
            f"`dataset` must be an image data set ({', '.join(_IMAGE_SETS)}), got {dataset!r}."
        )
    info, marks = DATASETS[dataset], _IMAGE_SETS[dataset][1]
    roots = [Path(data_dir)] if data_dir is not None else search_paths()
    for root in roots:
        for path in (root, *(root / name for name in info.folders)):
            if path.is_dir() and any(any(path.glob(mark)) for mark in marks):
                return path
    where = ", ".join(str(r) for r in roots)
    raise FileNotFoundError(
        f"no {dataset} data in {where} (looked for {info.description} in it and in its "
        f"sub-folders {', '.join(info.folders)}); give the directory with --data-dir"
    )


def load_splits(config: TrainConfig) -> tuple[Dataset, Dataset]:
    """The training and test sets of ``config``, cut to ``train_size``/``test_size``.

    Toy sets are generated from the run's seed (the test set from a different
    stream), image sets read from :func:`find_data`.
    """
    name = config.dataset
    if DATASETS[name].toy:
        train, test = (
            _TOYS[name](
                TOY_SIZES[split], generator=torch.Generator().manual_seed(2 * config.seed + i)
            )
            for i, split in enumerate(("train", "test"))
        )
    else:
        read = _IMAGE_SETS[name][0]
        root = find_data(name, config.data_dir)
        train, test = read(root, train=True), read(root, train=False)
    # a generator each: the test examples depend on the test set, its size and the seed
    # only, not on whether (and from how many) training examples were drawn first
    return (
        train.subset(config.train_size, generator=torch.Generator().manual_seed(config.seed)),
        test.subset(config.test_size, generator=torch.Generator().manual_seed(config.seed)),
    )


def epoch_order(n: int, seed: int, epoch: int) -> Tensor:
    """The order of the examples in ``epoch``: a permutation fixed by seed and epoch.

    It depends on nothing else, so a resumed run visits the examples in the same
    order as an uninterrupted one.
    """
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=gen)


def shard(batch: Tensor, rank: int, world: int) -> Tensor:
    """The contiguous slice of a global batch that process ``rank`` of ``world`` takes."""
    size = len(batch) // world
    return batch[rank * size : (rank + 1) * size]
