"""Data sets of the papers, held in memory as tensors: images, toy tasks, augmentation.

Every loader and generator returns a :class:`Dataset`, one split with its ``inputs``
and ``targets`` tensors, its name, its number of classes and, for images, the
per-channel statistics that :meth:`Dataset.normalize` uses. Images stay uint8 until a
batch is normalised, so a whole split fits on a GPU (:meth:`Dataset.to`).

- Image files: :func:`read_idx` (one IDX file), :func:`load_mnist` (MNIST and
  Fashion-MNIST), :func:`load_cifar` (CIFAR-10 and CIFAR-100, read without running
  pickled code), :func:`download` (from the official mirrors, checked by MD5).
- Toy sets generated in code: :func:`annuli` (Dupont et al.'s g(x)),
  :func:`reflection`, :func:`nested_spirals`, :func:`pendulum` (trajectories of the
  nonlinear pendulum).
- Augmentation in torch on the batch's device: :func:`random_crop`,
  :func:`horizontal_flip`, and :class:`Augment` composing them.

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
