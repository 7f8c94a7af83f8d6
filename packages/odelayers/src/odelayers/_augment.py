"""Augmentation: more dimensions for the flow, and the readout that removes them.

Flows of an ODE cannot cross, so a Neural ODE on the input's own space cannot
represent some maps (Dupont et al. 2019). Augmenting the state gives the flow room:

* :class:`ZeroAugmentation`: append zeros (ANODE), features for vectors, channels
  for images;
* :class:`InputLayerAugmentation`: a learned map ``z(0) = h_x(x)`` into the larger
  space (IL-NODE, Massaroli et al. 2020, Sec. 4);
* :class:`HigherOrder`: second- or higher-order dynamics, for all or some dimensions;
* :class:`DropAugmented` and :class:`ProjectAugmented`: the readout after the solve.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn


def _check_rank(layer: str, x: Tensor, image: bool) -> None:
    """Refuse a state that the default layer would map along another dimension than 1.

    ``nn.Linear`` maps the last dimension, and ``nn.Conv2d`` takes an unbatched
    ``(c, h, w)`` too: a state of another rank would come out mapped along its last
    dimension (an image's width) or with its batch read as channels, without an error.
    """
    if x.dim() == (4 if image else 2):
        return
    expected = "(batch, channels, height, width)" if image else "(batch, features)"
    fix = "pass a batch of images" if image else "for images pass `image=True`"
    raise ValueError(
        f"`{layer}` with image={image} maps dim 1 of a state {expected}, got shape "
        f"{tuple(x.shape)}; {fix}."
    )


def _check_positive(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")
    return value


class ZeroAugmentation(nn.Module):
    """Appends ``extra`` zero features (dim 1): ``x -> [x, 0]``, the ANODE of Dupont et al.

    Works for vectors ``(batch, d)`` and images ``(batch, c, h, w)`` (``extra`` channels).

    Args:
        extra: the number of zero features or channels to append, positive.

    Example:
        >>> import torch
        >>> from odelayers import ZeroAugmentation
        >>> ZeroAugmentation(2)(torch.ones(1, 3))
        tensor([[1., 1., 1., 0., 0.]])
        >>> ZeroAugmentation(2)(torch.ones(1, 1, 4, 4)).shape
        torch.Size([1, 3, 4, 4])
    """

    def __init__(self, extra: int) -> None:
        super().__init__()
        self.extra = _check_positive("extra", extra)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 2:
            raise ValueError(f"`x` must be batched, (batch, features, ...), got {tuple(x.shape)}.")
        zeros = x.new_zeros(x.shape[0], self.extra, *x.shape[2:])
        return torch.cat([x, zeros], dim=1)

    def extra_repr(self) -> str:
        return f"extra={self.extra}"


class InputLayerAugmentation(nn.Module):
    """A learned input layer ``z(0) = h_x(x)`` into a larger space (IL-NODE).

    By default ``h_x`` is linear: ``nn.Linear(in_features, out_features)`` for vectors,
    or a ``kernel_size`` convolution for images (``image=True``). Zero augmentation is
    the special case ``h_x(x) = [x, 0]``; a learned ``h_x`` lets the flow start from
    a better place and typically needs fewer evaluations (Massaroli et al. 2020,
    Sec. 4).

    Args:
        in_features: features (channels) of the input.
        out_features: features (channels) of the augmented state, ``>= in_features``.
        image: inputs are images ``(batch, c, h, w)``; ``h_x`` is a convolution.
        kernel_size: the convolution's kernel size (odd, default 3), for images.
        layer: a custom ``h_x`` instead of the linear default; its output must have
            ``out_features`` features (dim 1), or the forward pass refuses it.

    Raises:
        ValueError: for ``kernel_size`` without ``image=True``, or ``image`` or
            ``kernel_size`` beside a ``layer`` (they choose the default layer, which a
            given one replaces); from ``forward``, for an input without
            ``in_features`` features (dim 1) or, with the default layer, of another
            shape than ``(batch, features)`` (``(batch, c, h, w)`` with ``image=True``),
            which that layer would map along another dimension.

    Example:
        >>> import torch
        >>> from odelayers import InputLayerAugmentation
        >>> InputLayerAugmentation(2, 5)(torch.randn(8, 2)).shape
        torch.Size([8, 5])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        image: bool = False,
        kernel_size: int | None = None,
        layer: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.in_features = _check_positive("in_features", in_features)
        self.out_features = _check_positive("out_features", out_features, in_features)
        if layer is not None and (image or kernel_size is not None):
            raise ValueError(
                "`image` and `kernel_size` choose the default layer, and a given `layer` "
                "is used as it is: leave them out."
            )
        if not image and kernel_size is not None:
            raise ValueError(
                f"`kernel_size` {kernel_size!r} is the kernel of the convolution for images; "
                "pass `image=True` too, or leave it out for the linear layer of vectors."
            )
        self.image = image
        self.default_layer = layer is None
        if layer is not None:
            self.layer = layer
        elif image:
            kernel_size = 3 if kernel_size is None else kernel_size
            if kernel_size % 2 != 1:
                raise ValueError(f"`kernel_size` must be odd, got {kernel_size!r}.")
            self.layer = nn.Conv2d(in_features, out_features, kernel_size, padding=kernel_size // 2)
        else:
            self.layer = nn.Linear(in_features, out_features)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 2 or x.shape[1] != self.in_features:
            raise ValueError(
                f"`InputLayerAugmentation` takes {self.in_features} features (dim 1), got "
                f"shape {tuple(x.shape)}."
            )
        if self.default_layer:
            _check_rank("InputLayerAugmentation", x, self.image)
        out: Tensor = self.layer(x)
        if out.dim() < 2 or out.shape[1] != self.out_features:
            raise ValueError(
                f"`InputLayerAugmentation` promises {self.out_features} features (dim 1), but "
                f"its layer gave shape {tuple(out.shape)}; give `out_features` the layer's "
                "output size."
            )
        return out


class DropAugmented(nn.Module):
    """Keeps the first ``keep`` features (dim 1): the readout that drops augmentation.

    Args:
        keep: the number of leading features (channels) to keep, positive.

    Raises:
        ValueError: from ``forward``, for an unbatched state or one with fewer than
            ``keep`` features.

    Example:
        >>> import torch
        >>> from odelayers import DropAugmented
        >>> DropAugmented(2)(torch.arange(4.0).reshape(1, 4))
        tensor([[0., 1.]])
    """

    def __init__(self, keep: int) -> None:
        super().__init__()
        self.keep = _check_positive("keep", keep)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 2:
            raise ValueError(f"`x` must be batched, (batch, features, ...), got {tuple(x.shape)}.")
        if x.shape[1] < self.keep:
            raise ValueError(f"Cannot keep {self.keep} features of a state with {x.shape[1]}.")
        return x[:, : self.keep]

    def extra_repr(self) -> str:
        return f"keep={self.keep}"


class ProjectAugmented(nn.Module):
    """A learned linear readout of the whole (augmented) state: ``nn.Linear`` or 1x1 conv.

    Args:
        in_features: features (channels) of the augmented state.
        out_features: features (channels) of the output.
        image: states are images; the projection is a 1x1 convolution.

    Raises:
        ValueError: from ``forward``, for a state of another shape than
            ``(batch, features)`` (``(batch, c, h, w)`` with ``image=True``): ``nn.Linear``
            would map its last dimension (an image's width) instead of dim 1.

    Example:
        >>> import torch
        >>> from odelayers import ProjectAugmented
        >>> ProjectAugmented(5, 2)(torch.randn(3, 5)).shape
        torch.Size([3, 2])
    """

    def __init__(self, in_features: int, out_features: int, *, image: bool = False) -> None:
        super().__init__()
        _check_positive("in_features", in_features)
        _check_positive("out_features", out_features)
        self.image = image
        self.layer: nn.Module = (
            nn.Conv2d(in_features, out_features, 1)
            if image
            else nn.Linear(in_features, out_features)
        )

    def forward(self, x: Tensor) -> Tensor:
        _check_rank("ProjectAugmented", x, self.image)
        out: Tensor = self.layer(x)
        return out


class HigherOrder(nn.Module):
    """Higher-order dynamics ``q^(m) = f(t, z)`` as a first-order vector field.

    The state (dim 1) holds the positions ``q`` (``features``) followed by the
    derivatives ``q', q'', ..., q^(m-1)`` of the first ``selected`` positions. The
    wrapped ``field`` sees the whole state and returns ``features`` values: the
    ``m``-th derivative of the ``selected`` positions first, then the first
    derivative of the others. With ``selected = features`` every dimension is of
    order ``m``; fewer is *selective* higher order (Massaroli et al. 2020, Sec. 4),
    which needs fewer extra dimensions: ``(order - 1) * selected``.

    Start it from ``ZeroAugmentation((order - 1) * selected)`` (zero velocities) or an
    input layer; read out with ``DropAugmented(features)``.

    Args:
        field: the vector field ``f(t, z)``, returning ``features`` values on dim 1.
        features: the number of positions.
        order: the order ``m >= 2``.
        selected: how many positions (the first ones) are of order ``m``; default all.

    Example:
        >>> import torch
        >>> from odelayers import HigherOrder
        >>> spring = HigherOrder(lambda t, z: -z[:, :1], features=1)   # q'' = -q
        >>> spring(torch.tensor(0.0), torch.tensor([[1.0, 0.5]]))      # z = [q, q']
        tensor([[ 0.5000, -1.0000]])
    """

    field: Callable[[Tensor, Tensor], Tensor]
    features: int
    order: int
    selected: int

    def __init__(
        self,
        field: Callable[[Tensor, Tensor], Tensor],
        *,
        features: int,
        order: int = 2,
        selected: int | None = None,
    ) -> None:
        super().__init__()
        if not callable(field):
            raise TypeError(f"`field` must be callable as field(t, z), got {field!r}.")
        self.field = field
        self.features = _check_positive("features", features)
        self.order = _check_positive("order", order, 2)
        chosen = features if selected is None else selected
        if isinstance(chosen, bool) or not isinstance(chosen, int) or not 1 <= chosen <= features:
            raise ValueError(f"`selected` must be in 1..{features}, got {selected!r}.")
        self.selected = chosen

    @property
    def state_features(self) -> int:
        """Size of the state on dim 1, the positions plus the extra derivatives."""
        return self.features + (self.order - 1) * self.selected

    def forward(self, t: Tensor, z: Tensor) -> Tensor:
        if z.shape[1] != self.state_features:
            raise ValueError(
                f"`HigherOrder` of order {self.order} with {self.features} features "
                f"({self.selected} selected) needs a state of {self.state_features} on dim 1, "
                f"got {z.shape[1]}."
            )
        out = self.field(t, z)
        if not isinstance(out, Tensor) or out.shape[1] != self.features:
            got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise ValueError(
                f"The field of `HigherOrder` must return {self.features} features, got {got}."
            )
        k, n = self.selected, self.features
        derivs = torch.split(z[:, n:], k, dim=1)  # q', q'', ..., q^(m-1) of the selected
        top, free = out[:, :k], out[:, k:]
        return torch.cat([derivs[0], free, *derivs[1:], top], dim=1)
