"""Experiments that ``odebench run NAME`` runs, each writing its report and figures.

:data:`EXPERIMENTS` maps a name to an :class:`Experiment`; :func:`run_experiment` runs
one with :class:`RunOptions`. ``quickstart`` is the first: the README's main job.
"""

# Each module registers its experiment; the quickstart first, then by name.
from . import _quickstart  # noqa: F401  # isort: skip
from . import _anode_images, _anode_toy, _chen, _chen_tolerance  # noqa: F401  # isort: skip
from . import _dissecting_augmentation, _dissecting_depth  # noqa: F401  # isort: skip
from . import _manifestation, _pendulum  # noqa: F401  # isort: skip
from . import _continuousnet_cifar, _refinement_timing  # noqa: F401  # isort: skip
from ._registry import (
    EXPERIMENTS,
    Experiment,
    RunOptions,
    combine_reports,
    publish,
    register,
    run_experiment,
)

__all__ = [
    "EXPERIMENTS",
    "Experiment",
    "RunOptions",
    "combine_reports",
    "publish",
    "register",
    "run_experiment",
]
