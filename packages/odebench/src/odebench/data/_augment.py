"""Image augmentation in torch alone, on the batch's device, from a given generator."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .._io import whole


def _check_batch(images: Tensor, what: str) -> None:
    if not isinstance(images, Tensor) or images.dim() != 4:
        shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
        raise ValueError(f"{what}() needs a batch of images (N, C, H, W), got {shape}.")


def _draw_device(images: Tensor, generator: torch.Generator | None) -> torch.device:
    """Where the random numbers are drawn: on the generator's device, else the batch's."""
    return generator.device if generator is not None else images.device


def random_crop(
    images: Tensor, *, padding: int = 4, generator: torch.Generator | None = None
) -> Tensor:
    """Pad each image with zeros, then crop it back to its size at a random offset of its own.

    Args:
        images: a batch ``(N, C, H, W)`` of any dtype (uint8 images before
            :meth:`Dataset.normalize`, so that the padding is black).
        padding: how many pixels to pad on each side; 0 returns ``images`` itself.
        generator: the source of the offsets, drawn on its device and moved to the
            batch's; ``None`` uses the global generator of the batch's device.

    Returns:
        The cropped batch, of the shape, dtype and device of ``images``.

    Raises:
        ValueError: if ``images`` is not 4-dimensional or ``padding`` is negative.

    Example:
        >>> import torch
        >>> from odebench.data import random_crop
        >>> images = torch.arange(16, dtype=torch.uint8).view(1, 1, 4, 4)
        >>> out = random_crop(images, padding=1, generator=torch.Generator().manual_seed(0))
        >>> out.shape, out.dtype
        (torch.Size([1, 1, 4, 4]), torch.uint8)
    """
    _check_batch(images, "random_crop")
    if not whole(0)(padding):
        raise ValueError(f"`padding` must be a non-negative integer, got {padding!r}.")
    if padding == 0:
        return images
    n, _, height, width = images.shape
    offsets = torch.randint(
        0, 2 * padding + 1, (2, n), generator=generator, device=_draw_device(images, generator)
    ).to(images.device)
    padded = torch.nn.functional.pad(images, (padding, padding, padding, padding))
    rows = offsets[0, :, None] + torch.arange(height, device=images.device)  # (N, H)
    cols = offsets[1, :, None] + torch.arange(width, device=images.device)  # (N, W)
    batch = torch.arange(n, device=images.device)[:, None, None]
    # Advanced indices around a slice: the result is (N, H, W, C).
    out = padded[batch, :, rows[:, :, None], cols[:, None, :]]
    return out.permute(0, 3, 1, 2).contiguous()


def horizontal_flip(
    images: Tensor, *, p: float = 0.5, generator: torch.Generator | None = None
) -> Tensor:
    """Mirror each image left to right with probability ``p``, independently.

    Args:
        images: a batch ``(N, C, H, W)``.
        p: the probability that an image is flipped, in ``[0, 1]``.
        generator: the source of the coin flips, as in :func:`random_crop`.

    Returns:
        The batch with the chosen images flipped; shape, dtype and device of
        ``images``.

    Raises:
        ValueError: if ``images`` is not 4-dimensional or ``p`` is not in ``[0, 1]``.

    Example:
        >>> import torch
        >>> from odebench.data import horizontal_flip
        >>> images = torch.tensor([[[[1, 2, 3]]]])
        >>> horizontal_flip(images, p=1.0)
        tensor([[[[3, 2, 1]]]])
    """
    _check_batch(images, "horizontal_flip")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"`p` must be a probability in [0, 1], got {p}.")
    coins = torch.rand(images.shape[0], generator=generator, device=_draw_device(images, generator))
    flip = (coins < p).to(images.device)[:, None, None, None]
    return torch.where(flip, images.flip(-1), images)


@dataclass(frozen=True)
class Augment:
    """:func:`random_crop`, then :func:`horizontal_flip` with ``p = 0.5``, from one generator.

    Args:
        crop_padding: the padding of the random crop; ``None`` for no crop.
        flip: whether to flip images horizontally with probability one half.

    Raises:
        ValueError: if ``crop_padding`` is negative.

    Example:
        >>> import torch
        >>> from odebench.data import Augment
        >>> augment = Augment(crop_padding=4, flip=True)
        >>> images = torch.zeros(8, 3, 32, 32, dtype=torch.uint8)
        >>> augment(images, torch.Generator().manual_seed(0)).shape
        torch.Size([8, 3, 32, 32])
    """

    crop_padding: int | None = 4
    flip: bool = True

    def __post_init__(self) -> None:
        if self.crop_padding is not None and not whole(0)(self.crop_padding):
            raise ValueError(
                f"`crop_padding` must be a non-negative integer or None, got {self.crop_padding!r}."
            )

    def __call__(self, images: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Augment a batch ``(N, C, H, W)``.

        Args:
            images: the batch, on any device.
            generator: the source of randomness; see :func:`random_crop`.

        Returns:
            The augmented batch, of the shape, dtype and device of ``images``.
        """
        if self.crop_padding is not None:
            images = random_crop(images, padding=self.crop_padding, generator=generator)
        if self.flip:
            images = horizontal_flip(images, p=0.5, generator=generator)
        return images
