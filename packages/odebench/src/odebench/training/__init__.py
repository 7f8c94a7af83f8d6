"""Training runs: one model on one data set, with checkpoints that survive a crash.

:func:`fit` runs a :class:`Task` in a run folder; :func:`train` runs a
:class:`TrainConfig` so, and is ``odebench train`` (``torchrun --nproc_per_node=N -m
odebench train ...`` on several processes).
"""

from ._config import DATASETS, DatasetInfo, TrainConfig, default_out
from ._data import find_data, search_paths
from ._fit import (
    Epoch,
    Interrupted,
    Task,
    Training,
    TrainingFailedError,
    default_row,
    fit,
    resolve_device,
)
from ._loop import evaluate, load_model, train
from ._run_dir import RunExistsError

# isort: split
# For the layers above, not for users (not in __all__).
from ._config import MAX_SEED as MAX_SEED
from ._config import Optimizer as Optimizer
from ._config import check_device as check_device
from ._data import TOY_SIZES as TOY_SIZES
from ._data import download_root as download_root
from ._data import load_splits as load_splits
from ._run_dir import RunFolder as RunFolder
from ._run_dir import load_checkpoint as load_checkpoint

__all__ = [
    "DATASETS",
    "DatasetInfo",
    "Epoch",
    "Interrupted",
    "RunExistsError",
    "Task",
    "TrainConfig",
    "Training",
    "TrainingFailedError",
    "default_out",
    "default_row",
    "evaluate",
    "find_data",
    "fit",
    "load_model",
    "resolve_device",
    "search_paths",
    "train",
]
