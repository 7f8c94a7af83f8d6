"""Vector-field building blocks: layers that see the depth ``t`` or the layer's input.

A vector field is an ``nn.Module`` whose ``forward(t, x)`` returns ``dx/dt``. The
layers here take ``(t, x)`` too; :class:`DepthSequential` chains them with plain
layers (``nn.Linear``, ``nn.Tanh``, ...) that take ``x`` alone.

``t`` is a 0-dim tensor, or a tensor of shape ``(batch,)`` when every sample has its
own depth (:class:`~odelayers.AdaptiveDepthNODE`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from .basis import AbstractBasis, SavesBasis


class DepthLayer(nn.Module):
    """Base of the layers whose ``forward(t, x)`` reads the depth ``t``.

    :class:`DepthSequential` passes ``t`` to these and ``x`` alone to every other layer.
    """

    def forward(self, t: Tensor, x: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def jump_ts(self) -> tuple[float, ...]:
        """Depths where this layer's weights jump (the solver must land there)."""
        return ()

    def kink_ts(self) -> tuple[float, ...]:
        """Depths where this layer's weights are continuous but not smooth (an adaptive
        solver must land there: a step across a kink fools its error estimate)."""
        return ()


def _depth_like(t: Tensor, x: Tensor) -> Tensor:
    """``t`` as one feature (or channel) per sample: shape ``(batch, 1, *x.shape[2:])``."""
    t = t.to(dtype=x.dtype, device=x.device)
    if t.dim() == 0:
        t = t.expand(x.shape[0])
    elif t.shape != (x.shape[0],):
        raise ValueError(
            f"The depth `t` must be 0-dim or of shape (batch,) = ({x.shape[0]},), got "
            f"{tuple(t.shape)}."
        )
    return t.reshape(x.shape[0], 1, *([1] * (x.dim() - 2))).expand(x.shape[0], 1, *x.shape[2:])


class DepthConcat(DepthLayer):
    """Appends the depth ``t`` to ``x`` as one more feature (dim 1): the "concat" field.

    For a batch of vectors ``(batch, d)`` the result is ``(batch, d + 1)``; for images
    ``(batch, c, h, w)`` it is ``(batch, c + 1, h, w)``, the depth as a constant channel.

    Example:
        >>> import torch
        >>> from odelayers import DepthConcat
        >>> DepthConcat()(torch.tensor(0.5), torch.zeros(2, 3))
        tensor([[0.0000, 0.0000, 0.0000, 0.5000],
                [0.0000, 0.0000, 0.0000, 0.5000]])
    """

    def forward(self, t: Tensor, x: Tensor) -> Tensor:
        return torch.cat([x, _depth_like(t, x)], dim=1)


class DataControl(DepthLayer):
    """Appends the layer's input (the control) to ``x`` along dim 1: data control.

    The vector field then sees the input of the Neural ODE at every depth,
    ``dz/dt = f(t, z, x)`` (Massaroli et al. 2020, Sec. 5.1), so one model holds a
    family of flows, one per input; trajectories of different inputs may cross.
    :class:`~odelayers.NeuralODE` sets :attr:`control` to its input for each solve (the
    evaluations of its backward pass included) and puts the layer's own control back
    after it; it finds the layer among the modules of its field, not inside a function
    that the field calls.

    Example:
        >>> import torch
        >>> from odelayers import DataControl
        >>> layer = DataControl()
        >>> layer.control = torch.ones(2, 1)
        >>> layer(torch.tensor(0.0), torch.zeros(2, 1))
        tensor([[0., 1.],
                [0., 1.]])
    """

    def __init__(self) -> None:
        super().__init__()
        self.control: Tensor | None = None

    def forward(self, t: Tensor, x: Tensor) -> Tensor:
        if self.control is None:
            raise RuntimeError(
                "`DataControl` has no control input: use it as a module of a NeuralODE's "
                "field (which sets it to the layer's input for each solve; a closure hides "
                "it) or set `.control` first."
            )
        if self.control.shape[0] != x.shape[0] or self.control.shape[2:] != x.shape[2:]:
            raise ValueError(
                f"The control has shape {tuple(self.control.shape)} but the state "
                f"{tuple(x.shape)}; they must agree except in dim 1."
            )
        return torch.cat([x, self.control.to(x.dtype)], dim=1)


class DepthSequential(nn.Sequential):
    """``nn.Sequential`` for vector fields: passes ``t`` to depth layers, ``x`` to the rest.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from odelayers import DepthConcat, DepthSequential
        >>> field = DepthSequential(DepthConcat(), nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
        >>> field(torch.tensor(0.0), torch.zeros(5, 2)).shape
        torch.Size([5, 2])
    """

    def forward(self, t: Tensor, x: Tensor) -> Tensor:  # type: ignore[override]
        for layer in self:
            x = layer(t, x) if isinstance(layer, DepthLayer) else layer(x)
        return x


def _coefficients(basis: AbstractBasis, shape: tuple[int, ...], fan_in: int) -> nn.Parameter:
    """Coefficients ``(basis.size, *shape)``, each drawn like a default layer's weights.

    Each coefficient is drawn like PyTorch's default uniform init and divided by
    ``sqrt(basis.size)``: the weight at depth ``t`` has the usual scale times
    ``sqrt(sum_i phi_i(t)^2 / basis.size)``, 0.55 to 1 for the smooth bases but
    ``1 / sqrt(basis.size)`` for a piecewise-constant one (one function at a time).
    """
    bound = 1.0 / math.sqrt(max(fan_in, 1)) / math.sqrt(basis.size)
    return nn.Parameter(torch.empty(basis.size, *shape).uniform_(-bound, bound))


class _Galerkin(DepthLayer, SavesBasis):
    basis: AbstractBasis
    coefficients: nn.Parameter
    bias_coefficients: nn.Parameter | None

    def weights(self, t: Tensor) -> tuple[Tensor, Tensor | None]:
        """The weight and bias at depth ``t`` (0-dim), ``theta(t) = sum_i alpha_i phi_i(t)``."""
        phi = self.basis(t.to(self.coefficients.dtype))
        weight = torch.tensordot(phi, self.coefficients, dims=([-1], [0]))
        bias = None
        if self.bias_coefficients is not None:
            bias = torch.tensordot(phi, self.bias_coefficients, dims=([-1], [0]))
        return weight, bias

    def jump_ts(self) -> tuple[float, ...]:
        return self.basis.jump_ts

    def kink_ts(self) -> tuple[float, ...]:
        return self.basis.kink_ts

    def extra_repr(self) -> str:
        return f"basis={self.basis!r}"


class GalerkinLinear(_Galerkin):
    """A linear layer whose weights vary with depth: ``W(t) = sum_i alpha_i phi_i(t)``.

    Massaroli et al. (2020), Sec. 3: the Galerkin Neural ODE (a spectral basis such as
    :class:`~odelayers.basis.Fourier`) and, with
    :class:`~odelayers.basis.PiecewiseConstant`, a stack of constant-weight NODEs.
    The coefficients ``alpha`` (shape ``(basis.size, out, in)``) are the parameters.

    Args:
        in_features: size of each input sample.
        out_features: size of each output sample.
        basis: the depth basis.
        bias: whether to learn a depth-varying bias too.

    Example:
        >>> import torch
        >>> from odelayers import GalerkinLinear
        >>> from odelayers.basis import Fourier
        >>> layer = GalerkinLinear(3, 2, basis=Fourier(modes=2))
        >>> layer(torch.tensor(0.3), torch.randn(4, 3)).shape
        torch.Size([4, 2])
    """

    def __init__(
        self, in_features: int, out_features: int, *, basis: AbstractBasis, bias: bool = True
    ) -> None:
        super().__init__()
        if not isinstance(basis, AbstractBasis):
            raise TypeError(f"`basis` must be an odelayers.basis basis, got {basis!r}.")
        self.basis = basis
        self.in_features, self.out_features = in_features, out_features
        self.coefficients = _coefficients(basis, (out_features, in_features), in_features)
        self.bias_coefficients = (
            _coefficients(basis, (out_features,), in_features) if bias else None
        )

    def forward(self, t: Tensor, x: Tensor) -> Tensor:
        if t.dim() == 0:
            weight, bias = self.weights(t)
            return torch.nn.functional.linear(x, weight, bias)
        if t.shape != (x.shape[0],):
            raise ValueError(
                f"The depth `t` must be 0-dim or of shape (batch,) = ({x.shape[0]},), got "
                f"{tuple(t.shape)}."
            )
        # One depth per sample: a batch of weight matrices, applied to the last dim as
        # nn.Linear does (a sample may be a sequence of vectors).
        weight, bias = self.weights(t)  # (batch, out, in), (batch, out)
        out = torch.einsum("boi,b...i->b...o", weight, x)
        if bias is None:
            return out
        return out + bias.reshape(bias.shape[0], *([1] * (x.dim() - 2)), bias.shape[1])


class GalerkinConv2d(_Galerkin):
    """A 2-D convolution whose kernel varies with depth, ``K(t) = sum_i alpha_i phi_i(t)``.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        kernel_size: the (square) kernel size.
        basis: the depth basis.
        stride: the convolution's stride.
        padding: the convolution's zero padding.
        bias: whether to learn a depth-varying bias too.

    Raises:
        ValueError: when called with one depth per sample (use :class:`GalerkinLinear`
            or a shared depth).

    Example:
        >>> import torch
        >>> from odelayers import GalerkinConv2d
        >>> from odelayers.basis import Legendre
        >>> conv = GalerkinConv2d(4, 4, 3, basis=Legendre(degree=2), padding=1)
        >>> conv(torch.tensor(0.0), torch.randn(2, 4, 8, 8)).shape
        torch.Size([2, 4, 8, 8])
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        basis: AbstractBasis,
        stride: int = 1,
        padding: int = 0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(basis, AbstractBasis):
            raise TypeError(f"`basis` must be an odelayers.basis basis, got {basis!r}.")
        self.basis = basis
        self.stride, self.padding = stride, padding
        fan_in = in_channels * kernel_size**2
        shape = (out_channels, in_channels, kernel_size, kernel_size)
        self.coefficients = _coefficients(basis, shape, fan_in)
        self.bias_coefficients = _coefficients(basis, (out_channels,), fan_in) if bias else None

    def forward(self, t: Tensor, x: Tensor) -> Tensor:
        if t.dim() != 0:
            raise ValueError(
                "`GalerkinConv2d` needs one depth for the whole batch (a 0-dim `t`), got "
                f"shape {tuple(t.shape)}."
            )
        weight, bias = self.weights(t)
        return torch.nn.functional.conv2d(x, weight, bias, stride=self.stride, padding=self.padding)


def depth_layers(module: nn.Module) -> Iterator[DepthLayer]:
    """Every :class:`DepthLayer` inside ``module`` (itself included)."""
    for m in module.modules():
        if isinstance(m, DepthLayer):
            yield m
