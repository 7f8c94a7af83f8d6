"""What the image experiments share: which data sets are there, and seeded runs."""

from __future__ import annotations

from ..training import find_data
from ._registry import Log, RunOptions

DATASET_LABELS = {"mnist": "MNIST", "cifar10": "CIFAR-10", "svhn": "SVHN"}


def available_datasets(
    datasets: tuple[str, ...], options: RunOptions, log: Log
) -> tuple[list[str], dict[str, str]]:
    """The data sets of ``datasets`` whose files are found, and why the others are not.

    MNIST is never skipped: when it is missing, training raises the lookup's
    ``FileNotFoundError``. Any other data set without files is logged (with the
    places searched) and skipped; the reason kept for the report names no path.

    Args:
        datasets: names of :data:`odebench.training.DATASETS`.
        options: the run's options (``data_dir``).
        log: where the line about a skipped data set goes.

    Returns:
        ``(found, skipped)``: the names to run, and ``{name: reason}`` for the others.

    Example:
        >>> from pathlib import Path
        >>> found, skipped = available_datasets(
        ...     ("cifar10",), RunOptions(out=Path("x"), data_dir="/nonexistent"), log=print
        ... )  # doctest: +ELLIPSIS
        cifar10 skipped: no cifar10 data in /nonexistent ...
        >>> found, skipped
        ([], {'cifar10': 'no CIFAR-10 files found (give their directory with --data-dir DIR)'})
    """
    found: list[str] = []
    skipped: dict[str, str] = {}
    for dataset in datasets:
        if dataset == "mnist":
            found.append(dataset)
            continue
        try:
            find_data(dataset, options.data_dir)
        except FileNotFoundError as exc:
            label = DATASET_LABELS.get(dataset, dataset)
            skipped[dataset] = f"no {label} files found (give their directory with --data-dir DIR)"
            log(f"{dataset} skipped: {exc}")
        else:
            found.append(dataset)
    return found, skipped
