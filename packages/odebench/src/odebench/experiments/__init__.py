"""Experiments that ``odebench run NAME`` runs, each writing its report and figures.

:data:`EXPERIMENTS` maps a name to an :class:`Experiment`; :func:`run_experiment` runs
one with :class:`RunOptions`. ``quickstart`` is the first: the README's main job.
"""

from . import _quickstart  # noqa: F401  (registers the experiment)
from ._registry import EXPERIMENTS, Experiment, RunOptions, register, run_experiment

__all__ = ["EXPERIMENTS", "Experiment", "RunOptions", "register", "run_experiment"]
