"""odebench: data sets, the papers' models, training runs and benchmarks.

The top layer of the monorepo, used mostly from the command line::

    odebench list
    odebench run quickstart
    odebench train --model odenet --dataset mnist --data-dir DIR
    odebench perf solvers [--quick] [--json PATH]

:func:`main` is the same command line called from Python. The sub-packages hold
what it runs: :mod:`odebench.data` (data sets), :mod:`odebench.models` (models),
:mod:`odebench.training` (the training loop), :mod:`odebench.experiments` (the
experiments of ``odebench run``) and :mod:`odebench.perf` (the benchmarks).
"""

__version__ = "0.1.0"

from .cli import main  # after __version__, which cli reads

__all__ = ["main"]
