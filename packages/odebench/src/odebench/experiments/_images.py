"""Which data sets the image experiments trained on, and how reports say so."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..training import DATASETS

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


def trained_datasets(setup: Setup[Any]) -> list[str]:
    """The data sets of the runs, named ``"<data set>/<model>"``, that trained, in order.

    Example:
        >>> from pathlib import Path
        >>> from odebench.experiments import RunOptions, Setup, Settings
        >>> setup = Setup("x", "quick", Settings(), RunOptions(out=Path("x")), (0,), print,
        ...               trained=("mnist/node", "mnist/anode", "svhn/node"))
        >>> trained_datasets(setup)
        ['mnist', 'svhn']
    """
    return list(dict.fromkeys(run.partition("/")[0] for run in setup.trained))
