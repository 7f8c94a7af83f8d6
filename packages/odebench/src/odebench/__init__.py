"""odebench: benchmarks for continuous-depth networks.

The top layer of the monorepo: it measures what the packages below it do. So far it
holds the solver benchmark, run from the command line::

    odebench perf solvers [--quick] [--json PATH]

which times :mod:`odecore` against torchdiffeq (and torchode and torchdyn where they
import) side by side and reports medians and ratios; :func:`main` is the same
command line called from Python, and :mod:`odebench.perf` holds the benchmark
itself and documents its JSON output.
"""

__version__ = "0.1.0"

from .cli import main  # after __version__, which cli reads

__all__ = ["main"]
