"""Performance benchmarks: odecore against its peers, measured side by side in one run.

``odebench perf solvers`` (:func:`run_solvers` from Python) times odecore against
torchdiffeq, and torchode and torchdyn where they import, on five problems, three solver
configurations and every gradient method; measures peak memory in fresh processes; and
checks gradients against finite differences. ``odebench perf contnet``
(:func:`run_contnet`) times ContinuousNet against its own ResNet export. What the solver
benchmark measures is described in :doc:`/odebench/index`, and the JSON document it
writes (``--json PATH``), which :func:`plot_solvers` draws, in :doc:`/odebench/perf`.
"""

from .._figures import Bars, Lines
from ._contnet import ContnetConfig, format_contnet_report, run_contnet
from ._plot import plot_solvers, solver_panels
from ._report import format_report
from ._solvers import SolversConfig, run_solvers

# isort: split
# For the layers above, not for users (not in __all__).
from ._contnet import saved_bytes as saved_bytes
from ._libraries import LIBRARIES as LIBRARIES

__all__ = [
    "Bars",
    "ContnetConfig",
    "Lines",
    "SolversConfig",
    "format_contnet_report",
    "format_report",
    "plot_solvers",
    "run_contnet",
    "run_solvers",
    "solver_panels",
]
