"""``OdeBlock``: a residual module integrated over depth with a fixed-step scheme."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Sequence

import odecore
from odecore import AbstractExplicitRK, ButcherTableau
from odelayers.basis import AbstractBasis
from torch import Tensor, nn

from ._continuous import ContinuousModule

Scheme = str | AbstractExplicitRK


def scheme_tableau(scheme: Scheme) -> tuple[str, ButcherTableau]:
    """The name and Butcher tableau of a fixed-step scheme given by name or solver object.

    Raises:
        ValueError: for an unknown name or an adaptive solver.
    """
    if isinstance(scheme, str):
        if scheme not in odecore.FIXED_METHODS:
            raise ValueError(
                f"Unknown `scheme` {scheme!r}; known schemes: {', '.join(odecore.FIXED_METHODS)}."
            )
        cls = odecore.FIXED_METHODS[scheme]
        return scheme, cls.tableau  # type: ignore[attr-defined]
    if isinstance(scheme, AbstractExplicitRK) and not scheme.adaptive:
        names = {cls: name for name, cls in odecore.FIXED_METHODS.items()}
        return names.get(type(scheme), type(scheme).__name__), scheme.tableau
    raise ValueError(
        f"`scheme` must be the name of a fixed-step scheme ({', '.join(odecore.FIXED_METHODS)}) "
        f"or such an odecore solver, got {scheme!r}."
    )


def rk_step(
    x: Tensor, h: float, tableau: ButcherTableau, stages: Sequence[Callable[[Tensor], Tensor]]
) -> Tensor:
    """One explicit Runge-Kutta step: ``k_i = stages[i](x + h sum_j a_ij k_j)``,
    ``x + h sum_i b_i k_i`` (zero coefficients skipped)."""
    ks: list[Tensor] = []
    for row, stage in zip(tableau.a, stages):
        xi = x
        for a, k in zip(row, ks):
            if a != 0.0:
                xi = xi + k * (h * a)
        ks.append(stage(xi))
    for b, k in zip(tableau.b, ks):
        if b != 0.0:
            x = x + k * (h * b)
    return x


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    return value


class OdeBlock(nn.Module):
    """``dx/dt = epsilon * R(x; theta(t))`` on ``t`` in ``[0, 1]``, ``n_steps`` fixed steps.

    The weights of ``R`` are a :class:`ContinuousModule` over ``basis``; each stage of
    each step evaluates them at its own time ``t_k + c_i h`` (``h = 1 / n_steps``), as
    the units of Queiruga et al. (2020, Fig. 5) do. With the Euler scheme, a
    piecewise-constant basis of ``M = n_steps`` pieces and ``epsilon = n_steps`` the
    block is a ResNet block of ``n_steps`` units ``x + R_k(x)``.

    Args:
        module: the residual module ``R`` (keeps the shape of its input).
        basis: the depth basis of the weights, on ``[0, 1]``.
        scheme: a fixed-step scheme: ``"euler"``, ``"midpoint"``, ``"rk4"``, ``"rk4_38"``,
            ``"heun"``, ``"ralston"``, or such an odecore solver object.
        n_steps: the number of steps ``N_t``.
        epsilon: the time scale (the block integrates over ``[0, epsilon]`` in the
            time of ``R``).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from odelayers.basis import PiecewiseConstant
        >>> from contnet import OdeBlock
        >>> block = OdeBlock(nn.Linear(4, 4), basis=PiecewiseConstant(pieces=2),
        ...                  scheme="rk4", n_steps=2)
        >>> block(torch.zeros(3, 4)).shape
        torch.Size([3, 4])
    """

    continuous: ContinuousModule

    def __init__(
        self,
        module: nn.Module | ContinuousModule,
        *,
        basis: AbstractBasis | None = None,
        scheme: Scheme = "euler",
        n_steps: int = 1,
        epsilon: float = 1.0,
    ) -> None:
        super().__init__()
        if isinstance(module, ContinuousModule):
            self.continuous = module
        else:
            if basis is None:
                raise ValueError("`basis` is required unless `module` is a ContinuousModule.")
            self.continuous = ContinuousModule(module, basis)
        self.scheme, self.tableau = scheme_tableau(scheme)
        self.n_steps = _positive_int("n_steps", n_steps)
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"`epsilon` must be a positive number, got {epsilon!r}.")
        self.epsilon = float(epsilon)

    @property
    def basis(self) -> AbstractBasis:
        """The depth basis of the weights."""
        return self.continuous.basis

    def stage_times(self) -> list[list[float]]:
        """The depths at which each step's stages evaluate the weights.

        A stage at the end of its step (``c = 1``: Heun, RK4, RK4-3/8) reads the
        weights' limit from the left there, so a step never sees the next piece of a
        piecewise-constant basis and the scheme keeps its order when the steps land
        on the pieces' ends.
        """
        n = self.n_steps
        return [[(k + c) / n for c in self.tableau.c] for k in range(n)]

    def field(
        self,
        t: float,
        x: Tensor,
        *,
        left: bool = False,
        slices: dict[str, tuple[Tensor, ...]] | None = None,
    ) -> Tensor:
        """``epsilon * R(x; theta(t))`` (``left``: the weights' limit from the left)."""
        out: Tensor = self.continuous(t, x, left=left, slices=slices) * self.epsilon
        return out

    def forward(self, x: Tensor) -> Tensor:
        tab, h = self.tableau, 1.0 / self.n_steps
        slices = self.continuous.slices()
        for times in self.stage_times():
            stages = [
                functools.partial(self.field, t, left=c == 1.0, slices=slices)
                for t, c in zip(times, tab.c)
            ]
            x = rk_step(x, h, tab, stages)
        return x

    def manifest(self, *, scheme: Scheme | None = None, n_steps: int | None = None) -> OdeBlock:
        """The same weights evaluated with another scheme or step count (shared, not copied)."""
        out = copy.copy(self)
        out._modules = dict(self._modules)
        if scheme is not None:
            out.scheme, out.tableau = scheme_tableau(scheme)
        if n_steps is not None:
            out.n_steps = _positive_int("n_steps", n_steps)
        return out

    def extra_repr(self) -> str:
        return f"scheme={self.scheme!r}, n_steps={self.n_steps}, epsilon={self.epsilon}"
