"""Continuous normalizing flows: the instantaneous change of variables.

Along ``dz/dt = f(t, z)`` the log-density changes as ``d log p(z(t))/dt =
-tr(df/dz)`` (Chen et al. 2018). The trace is exact (one vector-Jacobian product per
dimension, for small dimensions) or Hutchinson's unbiased estimate ``e^T (df/dz) e``
with one noise draw per solve (Grathwohl et al. 2019).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import odecore
import torch
from torch import Tensor

from ._integrals import IntegralTerm, _per_sample, vjp
from ._neural_ode import Field, NeuralODE


class NegativeTrace(IntegralTerm):
    """``-tr(df/dz)`` per sample: the rate of change of the log-density.

    Args:
        estimator: ``"exact"`` (one vector-Jacobian product per dimension) or
            ``"hutchinson"`` (one, with Rademacher noise drawn once per solve).
        generator: random generator for the noise.
    """

    name = "log_density_change"
    needs_jacobian = True
    per_solve = ("noise",)

    def __init__(
        self,
        estimator: Literal["exact", "hutchinson"] = "exact",
        generator: torch.Generator | None = None,
    ) -> None:
        if estimator not in ("exact", "hutchinson"):
            raise ValueError(
                f"`estimator` (CNF's `trace`) must be 'exact' or 'hutchinson', got {estimator!r}."
            )
        self.estimator = estimator
        self.generator = generator
        self.noise: Tensor | None = None

    def start(self, x0: Tensor) -> None:
        if self.estimator == "hutchinson":
            bits = torch.randint(0, 2, x0.shape, generator=self.generator, device="cpu")
            self.noise = (2 * bits - 1).to(dtype=x0.dtype, device=x0.device)

    def __call__(self, t: Tensor, x: Tensor, f: Tensor) -> Tensor:
        if self.estimator == "hutchinson":
            if self.noise is None:  # pragma: no cover - start() draws it
                raise RuntimeError("`start` must be called before the solve.")
            product = vjp(f, x, self.noise, "NegativeTrace (the CNF's trace)") * self.noise
            return -_per_sample(product).sum(dim=1)
        flat_f = _per_sample(f)
        trace = x.new_zeros(x.shape[0])
        for i in range(flat_f.shape[1]):
            # Samples do not interact, so the gradient of the column sum is per sample.
            row = vjp(flat_f[:, i].sum(), x, None, "NegativeTrace (the CNF's trace)")
            trace = trace + _per_sample(row)[:, i]
        return -trace


def standard_normal_log_prob(z: Tensor) -> Tensor:
    """``log N(z; 0, I)`` per sample (all dimensions but the first are the event)."""
    flat = _per_sample(z)
    return -0.5 * flat.pow(2).sum(dim=1) - 0.5 * flat.shape[1] * math.log(2 * math.pi)


class CNF(NeuralODE):
    """A continuous normalizing flow: ``z(t1) = z0 + int f`` with exact log-densities.

    ``forward(z0)`` returns ``z(t1)`` and ``delta``, with ``log p1(z(t1)) =
    log p0(z0) + delta``; :meth:`log_prob` integrates a sample back to ``t0`` and
    returns its log-density under the flow of a standard normal base. Put a
    :class:`~odelayers.DataControl` layer in the field for the data-controlled CNF
    (Massaroli et al. 2020, Sec. 5.1): its control is the ``condition`` argument,
    by default the flow's input.

    Args:
        vector_field: ``f(t, z)``; samples must not interact (no batch norm).
        trace: ``"exact"`` (small dimensions) or ``"hutchinson"`` (large ones).
        generator: random generator for Hutchinson's noise.
        t0, t1, spec, solver, controller, gradient, dt0, max_steps: as for
            :class:`NeuralODE`.

    Example:
        >>> import torch
        >>> from odelayers import CNF
        >>> flow = CNF(lambda t, z: -z)                    # contracts by e^-1
        >>> z1, delta = flow(torch.zeros(2, 3))
        >>> delta.detach().round(decimals=4)               # log-density grows by 3
        tensor([3., 3.])
    """

    def __init__(
        self,
        vector_field: Field,
        *,
        trace: Literal["exact", "hutchinson"] = "exact",
        generator: torch.Generator | None = None,
        t0: float = 0.0,
        t1: float = 1.0,
        spec: odecore.OdeSpec | None = None,
        solver: odecore.AbstractSolver | None = None,
        controller: odecore.AbstractController | None = None,
        gradient: odecore.AbstractGradient | None = None,
        dt0: float | None = None,
        max_steps: int | None = None,
    ) -> None:
        super().__init__(
            vector_field,
            t0=t0,
            t1=t1,
            spec=spec,
            solver=solver,
            controller=controller,
            gradient=gradient,
            dt0=dt0,
            max_steps=max_steps,
        )
        self.trace = NegativeTrace(trace, generator)

    def _flow(
        self, z: Tensor, t0: float, t1: float, condition: Tensor | None, ts: Sequence[float] | None
    ) -> tuple[Tensor, Tensor]:
        with self._control(z if condition is None else condition):
            ys, integrals = self._integrate(z, t0, t1, (self.trace,), ts)
        return ys[-1], integrals[self.trace.name]

    def _check_condition(self, condition: Tensor | None) -> None:
        if condition is not None and not self._data_controls():
            raise ValueError(
                "`condition` was given, but the field has no DataControl layer to read it "
                "(the flow would ignore it); put odelayers.DataControl() in the field, or "
                "leave `condition` out."
            )

    def forward(  # type: ignore[override]
        self, z0: Tensor, condition: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``z(t1)`` and ``delta = log p1(z(t1)) - log p0(z0) = -int tr(df/dz)``, per sample.

        Args:
            z0: the samples at ``t0``, ``(batch, *state)``.
            condition: the control of the field's :class:`~odelayers.DataControl`
                layers, ``(batch, features, ...)``; default ``z0``.

        Returns:
            ``(z1, delta)``: ``z1`` of the shape of ``z0``, ``delta`` of shape ``(batch,)``.

        Raises:
            ValueError: if ``condition`` is given and the field has no
                :class:`~odelayers.DataControl` layer to read it.
        """
        self._forget()  # a refused call leaves no NFE of the one before either
        self._check_condition(condition)
        return self._flow(z0, self.t0, self.t1, condition, None)

    def log_prob(self, x: Tensor, condition: Tensor | None = None) -> Tensor:
        """``log p1(x)`` per sample, for a standard normal base at ``t0``.

        Integrates ``x`` back from ``t1`` to ``t0`` and adds the change of log-density.

        Args:
            x: the samples at ``t1``, ``(batch, *state)``.
            condition: the control of the field's :class:`~odelayers.DataControl`
                layers; required where the field has one.

        Returns:
            The log-densities, shape ``(batch,)``.

        Raises:
            ValueError: if the field has a :class:`~odelayers.DataControl` layer and no
                ``condition`` is given (the flow's input, its default condition in
                :meth:`forward`, is not known when only ``x`` is), or if ``condition``
                is given and the field has no such layer to read it.
        """
        self._forget()
        self._check_condition(condition)
        if condition is None and self._data_controls():
            raise ValueError(
                "`log_prob` of a data-controlled CNF needs its `condition`: forward() and "
                "sample() default to the flow's input, which is not known from `x`."
            )
        z0, delta = self._flow(x, self.t1, self.t0, condition, None)
        return standard_normal_log_prob(z0) - delta

    def sample(self, n: int, shape: Sequence[int], condition: Tensor | None = None) -> Tensor:
        """``n`` samples of the flow: standard normal draws pushed from ``t0`` to ``t1``,
        in the dtype and on the device of ``condition``, or else of the flow's first
        floating-point parameter or buffer (torch's defaults for a flow without any).
        The control of a :class:`~odelayers.DataControl` layer is ``condition``, by
        default the draws; in a flow without one, ``condition`` only sets the dtype and
        device.

        Args:
            n: the number of samples.
            shape: the shape of one sample (the state without its batch dimension).
            condition: the control, of batch size ``n``; default the draws.

        Returns:
            The samples at ``t1``, shape ``(n, *shape)``.
        """
        self._forget()
        tensors = (condition,) if condition is not None else (*self.parameters(), *self.buffers())
        like = next((x for x in tensors if x.is_floating_point()), None)
        z0 = torch.randn(n, *shape) if like is None else like.new_empty(n, *shape).normal_()
        return self._flow(z0, self.t0, self.t1, condition, None)[0]
