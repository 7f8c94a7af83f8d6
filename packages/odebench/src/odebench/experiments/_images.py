"""Which data sets the image experiments found or trained on, and how reports say so."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..training import DATASETS, find_data
from ._registry import Log, RunOptions

if TYPE_CHECKING:
    from ._template import Setup


def data_name(dataset: str) -> str:
    """How the reports name a data set: ``"CIFAR-10"`` for ``"cifar10"``.

    Example:
        >>> data_name("fashion-mnist"), data_name("svhn"), data_name("spirals")
        ('Fashion-MNIST', 'SVHN', 'spirals')
    """
    return DATASETS[dataset].label or dataset


def not_run(dataset: str) -> str:
    """What a report says of runs whose data set is not found (never a stand-in).

    Example:
        >>> not_run("cifar100")
        'not run here: needs CIFAR-100 (`odebench download cifar100`)'
    """
    return f"not run here: needs {data_name(dataset)} (`odebench download {dataset}`)"


def available_datasets(datasets: tuple[str, ...], options: RunOptions, log: Log) -> list[str]:
    """The data sets of ``datasets`` whose files are found; each other one is logged and
    skipped, but MNIST, whose absence training reports.

    Example:
        >>> from pathlib import Path
        >>> available_datasets(
        ...     ("cifar10",), RunOptions(out=Path("x"), data_dir="/nonexistent"), log=print
        ... )  # doctest: +ELLIPSIS
        cifar10 skipped: no cifar10 data in /nonexistent ...
        []
    """
    found: list[str] = []
    for dataset in datasets:
        try:
            if dataset != "mnist":
                find_data(dataset, options.data_dir)
        except FileNotFoundError as exc:
            log(f"{dataset} skipped: {exc}")
        else:
            found.append(dataset)
    return found


def trained_datasets(
    datasets: tuple[str, ...], setup: Setup[Any]
) -> tuple[list[str], dict[str, str]]:
    """``(trained, skipped)``: the data sets of ``datasets`` that runs named
    ``"<data set>/..."`` trained on, and ``{name: reason}`` for the others.

    Example:
        >>> from pathlib import Path
        >>> from odebench.experiments import Setup, Settings
        >>> setup = Setup("x", "quick", Settings(), RunOptions(out=Path("x")), (0,), print,
        ...               trained=("mnist/node", "mnist/anode"))
        >>> trained, skipped = trained_datasets(("mnist", "svhn"), setup)
        >>> trained, skipped["svhn"].removeprefix(not_run("svhn"))
        (['mnist'], ', or give its directory with --data-dir DIR')
    """
    trained = [d for d in datasets if any(run.startswith(f"{d}/") for run in setup.trained)]
    return trained, {
        d: f"{not_run(d)}, or give its directory with --data-dir DIR"
        for d in datasets
        if d not in trained
    }
