"""What the image experiments share: which data sets are there or were trained on, and
how reports say so."""

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


def mode_note(
    mode: str, epochs: int, train_size: int | None, batch_size: int, authors: str, tests: str
) -> str:
    """What a run of ``mode`` says about the published numbers, for the report.

    Args:
        mode: the mode that ran.
        epochs: its epochs.
        train_size: its training images (``None``: all).
        batch_size: its batch.
        authors: the authors' training, as a clause (``"the authors' configuration
            trains 20 epochs of all 60,000 at batch 256 (about 4,700 steps)"``).
        tests: what a short run still tests (``"the comparison of the models after
            the same training"``).
    """
    if mode == "quick":
        return (
            f"This is a quick run (`--quick`), a smoke test of the code path: {epochs} "
            f"epoch(s) of {train_size} images. Its accuracies and NFE say nothing about the "
            "published ones."
        )
    if train_size is None:
        return f"This run trains on all the images, where {authors}."
    steps = epochs * (train_size // batch_size)
    return (
        f"This run, sized for a CPU, trains {epochs} epoch(s) of {train_size} images "
        f"({steps} steps of batch {batch_size}), where {authors}: its models are briefly "
        f"trained and far from the published accuracies. What it tests is {tests}."
    )


def available_datasets(datasets: tuple[str, ...], options: RunOptions, log: Log) -> list[str]:
    """The data sets of ``datasets`` whose files are found: those to run.

    MNIST is never skipped: when it is missing, training raises the lookup's
    ``FileNotFoundError``. Any other data set without files is logged (with the
    places searched) and skipped; :func:`trained_datasets` says why, for the report.

    Args:
        datasets: names of :data:`odebench.training.DATASETS`.
        options: the run's options (``data_dir``).
        log: where the line about a skipped data set goes.

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
        if dataset == "mnist":
            found.append(dataset)
            continue
        try:
            find_data(dataset, options.data_dir)
        except FileNotFoundError as exc:
            log(f"{dataset} skipped: {exc}")
        else:
            found.append(dataset)
    return found


def trained_datasets(
    datasets: tuple[str, ...], setup: Setup[Any]
) -> tuple[list[str], dict[str, str]]:
    """The data sets of ``datasets`` that runs named ``"<data set>/..."`` of
    :attr:`~odebench.experiments.Setup.trained` trained on, and why the others did not:
    what :func:`available_datasets` found where the runs trained, not where the report
    is written.

    Returns:
        ``(trained, skipped)``: the names trained on, and ``{name: reason}`` for the
        others; the reason names no path.

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
