"""Data sets of the papers, held in memory as tensors: images, toy tasks, augmentation.

Every loader and generator returns a :class:`Dataset`, one split with its ``inputs``
and ``targets`` tensors; images stay uint8 until a batch is normalised. The data page
(docs/odebench/data.md) describes each loader, generator and augmentation.

Example:
    >>> import torch
    >>> from odebench import data
    >>> ds = data.annuli(30, dim=2, generator=torch.Generator().manual_seed(0))
    >>> ds.name, len(ds), ds.num_classes
    ('annuli-2d', 30, None)
"""

from ._augment import Augment, horizontal_flip, random_crop
from ._cifar import load_cifar
from ._dataset import DataError, DataNotFoundError, Dataset
from ._download import download
from ._idx import load_mnist, read_idx
from ._svhn import load_svhn
from ._toy import annuli, nested_spirals, pendulum, reflection

# isort: split
# For the layers above, not for users (not in __all__).
from ._download import DOWNLOADABLE as DOWNLOADABLE

__all__ = [
    "Augment",
    "DataError",
    "DataNotFoundError",
    "Dataset",
    "annuli",
    "download",
    "horizontal_flip",
    "load_cifar",
    "load_mnist",
    "load_svhn",
    "nested_spirals",
    "pendulum",
    "random_crop",
    "read_idx",
    "reflection",
]
