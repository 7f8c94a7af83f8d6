"""Experiments that ``odebench run NAME`` runs, each writing its report and figures.

:data:`EXPERIMENTS` maps a name to an :class:`Experiment`; :func:`run_experiment` runs
one with :class:`RunOptions`. ``quickstart`` is the first: the README's main job.

An experiment is declared on the template: a :class:`Template` of its settings per
mode (:class:`Settings`), the :class:`Run` objects it trains per seed, the
:class:`Measurement` of each trained run and its :class:`Claim` objects;
:func:`register_template` adds it, and :func:`run_template` trains, aggregates over
seeds (:class:`Stat`), checks the claims (:class:`Verdict`) and writes the report.
:func:`reproductions_table` gathers the claims of every published run into the
Reproductions index. Each claim is a claim of the paper or a check of our code
(:class:`Claim`'s ``kind``); a paper claim holds only on the mean and on most seeds
(:func:`verdict_status`); every run records its :class:`Provenance`.
"""

# Each module registers its experiment; the quickstart first, then by name.
from . import _quickstart  # noqa: F401  # isort: skip
from . import _anode_images, _anode_toy, _chen, _chen_tolerance  # noqa: F401  # isort: skip
from . import _dissecting_augmentation, _dissecting_depth  # noqa: F401  # isort: skip
from . import _manifestation, _pendulum  # noqa: F401  # isort: skip
from . import _continuousnet_cifar, _refinement_timing  # noqa: F401  # isort: skip
from . import _anode_resnet, _chen_cnf, _contnet_adjoint  # noqa: F401  # isort: skip
from .._provenance import Provenance
from ._claims import Claim
from ._index import reproductions_table
from ._metrics import Metric, Ref, Stat, Values
from ._registry import (
    DEFAULT_MODE,
    EXPERIMENTS,
    MODES,
    Experiment,
    RunOptions,
    combine_reports,
    publish,
    register,
    run_experiment,
)
from ._result import Result
from ._runner import TEMPLATES, check_declaration, register_template, rerender, run_template
from ._tables import Col, Row, Table
from ._template import (
    Figure,
    Measurement,
    Plot,
    Run,
    Settings,
    Setup,
    Template,
    Trained,
    TrainingSettings,
)
from ._verdicts import Verdict, verdict_status

__all__ = [
    "DEFAULT_MODE",
    "EXPERIMENTS",
    "MODES",
    "TEMPLATES",
    "Claim",
    "Col",
    "Experiment",
    "Figure",
    "Measurement",
    "Metric",
    "Plot",
    "Provenance",
    "Ref",
    "Result",
    "Row",
    "Run",
    "RunOptions",
    "Settings",
    "Setup",
    "Stat",
    "Table",
    "Template",
    "Trained",
    "TrainingSettings",
    "Values",
    "Verdict",
    "check_declaration",
    "combine_reports",
    "publish",
    "register",
    "register_template",
    "reproductions_table",
    "rerender",
    "run_experiment",
    "run_template",
    "verdict_status",
]
