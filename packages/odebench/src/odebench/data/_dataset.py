"""The in-memory data set every loader and generator returns, and the errors of the subpackage."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .._io import whole

CHUNK = 1 << 20
"""Bytes read, inflated or copied at a time."""
DEFLATE_MAX_RATIO = 1032
"""The most bytes one byte of a deflate stream (gzip, zlib) can inflate to: at best it codes
258 repeated bytes in two bits."""


class DataError(ValueError):
    """A data file is missing, corrupt or not what its loader expects; the message names it.

    Example:
        >>> import odebench.data
        >>> try:
        ...     odebench.data.load_mnist("/nonexistent/mnist")
        ... except odebench.data.DataError as err:
        ...     print(str(err).split(":")[0])
        MNIST files are missing
    """


class DataNotFoundError(DataError, FileNotFoundError):
    """A data file or directory does not exist; also a :class:`FileNotFoundError`.

    The message lists the files that were expected.

    Example:
        >>> import odebench.data
        >>> try:
        ...     odebench.data.read_idx("/nonexistent/train-images-idx3-ubyte")
        ... except FileNotFoundError as err:
        ...     print(isinstance(err, odebench.data.DataError))
        True
    """


def file_digest(path: Path, algorithm: str) -> str:
    """The hex digest by ``algorithm`` (``"md5"``, ``"sha256"``) of ``path``, read in chunks."""
    with path.open("rb") as file:  # a checksum, not a secret
        digest = hashlib.file_digest(file, partial(hashlib.new, algorithm, usedforsecurity=False))
    return digest.hexdigest()


def file_sources(*paths: Path) -> tuple[dict[str, str], ...]:
    """``{"path": absolute path, "sha256": hex digest}`` of each file: :attr:`Dataset.sources`."""
    return tuple(
        {"path": str(path.resolve()), "sha256": file_digest(path, "sha256")} for path in paths
    )


def listing(directory: Path, limit: int = 12) -> str:
    """What ``directory`` holds, for error messages."""
    try:
        names = sorted(p.name for p in directory.iterdir())
    except OSError:
        return "it cannot be listed"
    if not names:
        return "it is empty"
    shown = ", ".join(names[:limit])
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return f"it holds {shown}{more}"


def find_files(
    root: Path, folders: tuple[str, ...], names: tuple[str, ...], what: str, hint: str
) -> list[Path]:
    """The files ``names`` in the first of ``root`` and ``root/<folder>`` that holds them all (a
    name ending ``[.gz]`` with or without ``.gz``, uncompressed first); else a
    :class:`DataNotFoundError`: ``what`` is missing, where it looked, what is there, ``hint``."""
    options = [(n[:-5], n[:-5] + ".gz") if n.endswith("[.gz]") else (n,) for n in names]
    places = (root, *(root / folder for folder in folders))
    for directory in places:
        found: list[Path] = []
        for opts in options:
            found += [directory / o for o in opts if (directory / o).is_file()][:1]
        if len(found) == len(names):
            return found
    if not root.is_dir():
        where = f"{root} {'is not a directory' if root.exists() else 'does not exist'}"
    else:
        where = ", and ".join(f"in {place} {listing(place)}" for place in places if place.is_dir())
    raise DataNotFoundError(
        f"{what} missing: expected {', '.join(names)} in "
        f"{' or in '.join(str(place) for place in places)}, but {where}. {hint}"
    )


def describe(value: object) -> str:
    """What ``value`` is, for messages: an array's dtype and shape, else its type."""
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    return "nothing" if value is None else f"a {type(value).__name__}"


@dataclass(frozen=True, eq=False)
class Dataset:
    """One split of a data set, held in memory as tensors; equal only to itself.

    Args:
        inputs: images ``(N, C, H, W)`` of dtype ``torch.uint8``; or, for the toy sets,
            float32 points ``(N, d)`` or trajectories ``(N, T, d)``.
        targets: class labels ``(N,)`` of dtype ``torch.int64``, or float32 regression
            targets ``(N, k)`` or ``(N, T, d)``.
        name: the data set's name, such as ``"mnist"`` or ``"annuli-2d"``.
        num_classes: the number of classes; ``None`` for a regression set.
        mean: per-channel mean of the images on the [0, 1] scale, for
            :meth:`normalize`; ``None`` for no centring.
        std: per-channel standard deviation on the [0, 1] scale; ``None`` for no
            scaling.
        sources: the files the set was read from, ``{"path", "sha256"}`` each (the
            absolute path, the file's SHA-256); empty for a generated set.

    Raises:
        TypeError: if ``inputs`` or ``targets`` is not a tensor.
        ValueError: if ``inputs`` and ``targets`` differ in length, ``num_classes`` is
            not positive, ``mean`` and ``std`` differ in length, a ``std`` entry is
            not positive and finite, or a ``mean`` entry is not finite.

    Example:
        >>> import torch
        >>> from odebench.data import Dataset
        >>> images = torch.zeros(4, 1, 2, 2, dtype=torch.uint8)
        >>> ds = Dataset(images, torch.tensor([0, 1, 0, 1]), "tiny", 2, (0.5,), (0.25,))
        >>> len(ds), ds.normalize(images)[0, 0, 0, 0].item()
        (4, -2.0)
    """

    inputs: Tensor
    targets: Tensor
    name: str
    num_classes: int | None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    sources: tuple[dict[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.inputs, Tensor) or not isinstance(self.targets, Tensor):
            raise TypeError(
                f"`inputs` and `targets` of Dataset {self.name!r} must be tensors, got "
                f"{type(self.inputs).__name__} and {type(self.targets).__name__}."
            )
        if self.inputs.dim() == 0 or self.targets.dim() == 0:
            raise ValueError(
                f"`inputs` and `targets` of Dataset {self.name!r} need a leading sample "
                f"dimension, got shapes {tuple(self.inputs.shape)} and "
                f"{tuple(self.targets.shape)}."
            )
        if self.inputs.shape[0] != self.targets.shape[0]:
            raise ValueError(
                f"Dataset {self.name!r} has {self.inputs.shape[0]} inputs but "
                f"{self.targets.shape[0]} targets; they must agree."
            )
        if self.num_classes is not None and self.num_classes < 1:
            raise ValueError(
                f"`num_classes` of Dataset {self.name!r} must be positive or None, "
                f"got {self.num_classes}."
            )
        if self.mean is not None and self.std is not None and len(self.mean) != len(self.std):
            raise ValueError(
                f"`mean` and `std` of Dataset {self.name!r} must have one entry per channel "
                f"each, got {len(self.mean)} and {len(self.std)}."
            )
        if self.std is not None and not all(0 < s < math.inf for s in self.std):
            raise ValueError(
                f"`std` of Dataset {self.name!r} must be positive and finite, got {self.std}."
            )
        if self.mean is not None and not all(math.isfinite(m) for m in self.mean):
            raise ValueError(f"`mean` of Dataset {self.name!r} must be finite, got {self.mean}.")

    def __len__(self) -> int:
        """The number of samples."""
        return int(self.inputs.shape[0])

    def to(self, device: torch.device | str) -> Dataset:
        """The same data set with both tensors on ``device``, dtypes kept.

        Args:
            device: where to put the tensors, e.g. ``"cuda"`` or ``torch.device("cpu")``.

        Returns:
            A new :class:`Dataset` (the same object's tensors when they are already
            there).

        Example:
            >>> import torch
            >>> from odebench.data import reflection
            >>> ds = reflection(8).to("cpu")
            >>> ds.inputs.device.type, ds.inputs.dtype
            ('cpu', torch.float32)
        """
        return dataclasses.replace(
            self, inputs=self.inputs.to(device), targets=self.targets.to(device)
        )

    def subset(self, n: int | None, *, generator: torch.Generator | None = None) -> Dataset:
        """A random subset of ``n`` samples (not stratified), the same for the same generator.

        Args:
            n: how many samples to keep; ``None``, or ``n >= len(self)``, keeps the
                whole set (``self`` is returned, not shuffled).
            generator: the source of the permutation, drawn on its device; the
                global generator when ``None``.

        Returns:
            A :class:`Dataset` of ``min(n, len(self))`` samples, on the same device.

        Raises:
            ValueError: if ``n`` is not a non-negative integer or ``None``.

        Example:
            >>> import torch
            >>> from odebench.data import nested_spirals
            >>> ds = nested_spirals(100, generator=torch.Generator().manual_seed(0))
            >>> small = ds.subset(10, generator=torch.Generator().manual_seed(1))
            >>> len(small), small.num_classes
            (10, 2)
        """
        if n is not None and not whole(0)(n):  # not True as 1, nor 10.0 as all
            raise ValueError(f"`n` must be a non-negative integer or None, got {n!r}.")
        if n is None or n >= len(self):
            return self
        device = generator.device if generator is not None else torch.device("cpu")
        perm = torch.randperm(len(self), generator=generator, device=device)[:n]
        perm = perm.to(self.inputs.device)
        return dataclasses.replace(
            self, inputs=self.inputs[perm], targets=self.targets[perm.to(self.targets.device)]
        )

    def normalize(self, images: Tensor) -> Tensor:
        """A batch of uint8 images as float32: scaled to [0, 1], minus ``mean``, over ``std``.

        Args:
            images: uint8 images ``(..., C, H, W)``, or any float tensor.

        Returns:
            A float32 tensor of the shape of ``images`` (``images`` itself if it is
            already floating).

        Raises:
            ValueError: if ``images`` is an integer tensor of another dtype than uint8,
                or its channel count differs from the length of ``mean`` / ``std``.

        Example:
            >>> import torch
            >>> from odebench.data import Dataset
            >>> ds = Dataset(torch.zeros(1, 1, 1, 1, dtype=torch.uint8), torch.zeros(1),
            ...              "x", None, mean=(0.5,), std=(0.5,))
            >>> ds.normalize(torch.tensor([[[[0, 255]]]], dtype=torch.uint8))
            tensor([[[[-1.,  1.]]]])
        """
        if images.is_floating_point():
            return images
        if images.dtype != torch.uint8:
            raise ValueError(
                f"`images` must be a uint8 batch (or already floating), got dtype {images.dtype}."
            )
        out = images.to(torch.float32).div_(255.0)
        for stats, what, apply in ((self.mean, "mean", out.sub_), (self.std, "std", out.div_)):
            if stats is None:
                continue
            if images.dim() < 3 or images.shape[-3] != len(stats):
                raise ValueError(
                    f"`images` of shape {tuple(images.shape)} do not have the {len(stats)} "
                    f"channel(s) of the {what} of {self.name!r} in dimension -3."
                )
            apply(torch.tensor(stats, dtype=out.dtype, device=out.device).view(-1, 1, 1))
        return out
