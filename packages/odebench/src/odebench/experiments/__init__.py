"""Experiments that ``odebench run NAME`` runs, each writing its report and figures.

:data:`EXPERIMENTS` maps a name to an :class:`Experiment`; :func:`run_experiment` runs
one with :class:`RunOptions`. Each is declared on a :class:`Template`
(:func:`register_template`).
"""

# Each module registers its experiment; the quickstart first, then by name.
from . import _quickstart  # noqa: F401  # isort: skip
from . import _anode_images, _anode_toy, _chen, _chen_tolerance  # noqa: F401  # isort: skip
from . import _dissecting_augmentation, _dissecting_depth  # noqa: F401  # isort: skip
from . import _manifestation, _pendulum  # noqa: F401  # isort: skip
from . import _refinement_timing  # noqa: F401  # isort: skip
from . import _anode_resnet, _chen_cnf, _contnet_adjoint  # noqa: F401  # isort: skip
from .._metrics import Metric, Ref, Stat, Values
from .._provenance import Provenance
from .._tables import Col, Row, Source, Table
from ._claims import Claim
from ._index import reproductions_table
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
    "Source",
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
