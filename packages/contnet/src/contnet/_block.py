"""``OdeBlock``: a residual module integrated over depth with a fixed-step solver."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable
from typing import cast

import odecore
import torch
from odecore import AbstractExplicitRK, ButcherTableau
from odelayers.basis import AbstractBasis
from torch import Tensor, nn

from ._continuous import ContinuousModule

Solver = str | AbstractExplicitRK
"""A fixed-step solver: a method name of :data:`odecore.FIXED_METHODS` or such a solver object."""
Field = Callable[[float, Tensor], Tensor]


def fixed_solver(solver: Solver) -> tuple[str, AbstractExplicitRK]:
    """The method name and odecore solver of a fixed-step solver given by name or object.

    Raises:
        ValueError: for an unknown method name or an adaptive solver.
    """
    if isinstance(solver, str):
        if solver not in odecore.FIXED_METHODS:
            raise ValueError(
                f"Unknown `solver` {solver!r}; known fixed-step methods: "
                f"{', '.join(odecore.FIXED_METHODS)}."
            )
        return solver, cast(AbstractExplicitRK, odecore.FIXED_METHODS[solver]())
    if isinstance(solver, AbstractExplicitRK) and not solver.adaptive:
        names = {cls: name for name, cls in reversed(odecore.FIXED_METHODS.items())}
        return names.get(type(solver), type(solver).__name__), solver  # the first name
    raise ValueError(
        f"`solver` must be the name of a fixed-step method ({', '.join(odecore.FIXED_METHODS)}) "
        f"or such an odecore solver object (e.g. odecore.RK4()), got {solver!r}."
    )


def take_step(solver: AbstractExplicitRK, f: Field, h: float, x: Tensor) -> Tensor:
    """One step of ``solver`` over ``[0, h]`` from ``x``: ``solver.init``, then ``solver.step``.

    The one way contnet takes a step, in blocks and in their ResNet export alike, so
    both sum the stages with odecore's kernel. Every step is taken in its own local
    time ``[0, h]``, so ``h`` is the same number in every step and a stage at the end of
    the step (``c = 1``) is asked for at exactly ``h``.
    """
    return solver.step(f, 0.0, h, x, solver.init(f, 0.0, x)).y1


@functools.lru_cache(maxsize=256)
def stage_offsets(solver: AbstractExplicitRK, h: float) -> tuple[float, ...]:
    """The local times in ``[0, h]`` at which :func:`take_step` evaluates the field, in order.

    Read off ``solver`` itself (one step of a zero field on a scalar), so they are the
    times its kernel asks for, not a second formula for them.
    """
    asked: list[float] = []

    def record(t: float, y: Tensor) -> Tensor:
        asked.append(t)
        return torch.zeros_like(y)

    with torch.no_grad():
        take_step(solver, record, h, torch.zeros((), dtype=torch.float64))
    return tuple(asked)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    return value


class OdeBlock(nn.Module):
    """``dx/dt = epsilon * R(x; theta(t))`` on ``t`` in ``[0, 1]``, ``n_steps`` fixed steps.

    The weights of ``R`` are a :class:`ContinuousModule` over ``basis``; each stage of
    each step evaluates them at its own time ``t_k + c_i h`` (``h = 1 / n_steps``), as
    the units of Queiruga et al. (2020, Fig. 5) do. Every step is one step of the
    odecore solver (``solver.init`` and ``solver.step``, which sum the stages), kept in
    ``solver``, its method name in ``method``. With Euler, a piecewise-constant basis of
    ``M = n_steps`` pieces and ``epsilon = n_steps`` the block is a ResNet block of
    ``n_steps`` units ``x + R_k(x)``.

    Args:
        module: the residual module ``R`` (keeps the shape of its input).
        basis: the depth basis of the weights, on ``[0, 1]``.
        solver: a fixed-step solver, by method name (``"euler"``, ``"midpoint"``,
            ``"rk4"``, ``"rk4_38"``, ``"heun"``, ``"ralston"``, ...: the keys of
            :data:`odecore.FIXED_METHODS`) or as an odecore solver object
            (``odecore.RK4()``).
        n_steps: the number of steps ``N_t``.
        epsilon: the time scale (the block integrates over ``[0, epsilon]`` in the
            time of ``R``).

    Raises:
        ValueError: for an unknown method or an adaptive solver, a missing ``basis``, or a
            ``n_steps`` or ``epsilon`` that is not positive.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from odelayers.basis import PiecewiseConstant
        >>> from contnet import OdeBlock
        >>> block = OdeBlock(nn.Linear(4, 4), basis=PiecewiseConstant(pieces=2),
        ...                  solver="rk4", n_steps=2)
        >>> block(torch.zeros(3, 4)).shape
        torch.Size([3, 4])
    """

    continuous: ContinuousModule

    def __init__(
        self,
        module: nn.Module | ContinuousModule,
        *,
        basis: AbstractBasis | None = None,
        solver: Solver = "euler",
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
        self.method, self.solver = fixed_solver(solver)
        self.n_steps = _positive_int("n_steps", n_steps)
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"`epsilon` must be a positive number, got {epsilon!r}.")
        self.epsilon = float(epsilon)

    @property
    def basis(self) -> AbstractBasis:
        """The depth basis of the weights."""
        return self.continuous.basis

    @property
    def tableau(self) -> ButcherTableau:
        """The Butcher tableau of the solver."""
        return self.solver.tableau

    def stage_times(self) -> list[list[float]]:
        """The depths at which each step's stages evaluate the weights.

        Step ``k`` covers ``[k h, (k + 1) h]``, ``h = 1 / n_steps``, and a stage at
        ``c_i`` reads the weights at ``t_k + c_i h``. A stage at the end of its step
        (``c = 1``: Heun, RK4, RK4-3/8) reads the weights' limit from the left there,
        so a step never sees the next piece of a piecewise-constant basis and the
        solver keeps its order when the steps land on the pieces' ends.
        """
        return [[t for t, _ in self._stage_points(k)] for k in range(self.n_steps)]

    def _stage_points(self, k: int) -> list[tuple[float, bool]]:
        """``(depth, left)`` of every stage of step ``k``, in the order they are taken."""
        h = 1.0 / self.n_steps
        return [self._depth(k, s, h) for s in stage_offsets(self.solver, h)]

    def _depth(self, k: int, s: float, h: float) -> tuple[float, bool]:
        """The depth of local time ``s`` of step ``k``, and whether to read the left limit."""
        if s == h:
            return (k + 1) / self.n_steps, True
        return k / self.n_steps + s, False

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

    def _step_field(
        self, k: int, h: float, slices: dict[str, tuple[Tensor, ...]], s: float, x: Tensor
    ) -> Tensor:
        """The field of step ``k`` in its local time ``s`` in ``[0, h]``."""
        t, left = self._depth(k, s, h)
        return self.field(t, x, left=left, slices=slices)

    def forward(self, x: Tensor) -> Tensor:
        h = 1.0 / self.n_steps
        slices = self.continuous.slices()
        for k in range(self.n_steps):
            f = functools.partial(self._step_field, k, h, slices)
            x = take_step(self.solver, f, h, x)
        return x

    def manifest(self, *, solver: Solver | None = None, n_steps: int | None = None) -> OdeBlock:
        """The same weights evaluated with another solver or step count (shared, not copied)."""
        out = copy.copy(self)
        out._modules = dict(self._modules)
        if solver is not None:
            out.method, out.solver = fixed_solver(solver)
        if n_steps is not None:
            out.n_steps = _positive_int("n_steps", n_steps)
        return out

    def extra_repr(self) -> str:
        return f"method={self.method!r}, n_steps={self.n_steps}, epsilon={self.epsilon}"
