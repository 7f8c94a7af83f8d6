"""Depth-distributed quantities integrated along the solve as extra state.

Each term adds ``dq/dt = g(t, x, f(t, x))`` per sample to the solve, so its integral
over depth comes out of the same solve, with the same gradient method. Two
regularisers of Finlay et al. (2020), "How to train your neural ODE", which keep the
flow simple and the solver's step count low:

* :class:`KineticEnergy`: ``|f|^2``;
* :class:`JacobianFrobenius`: ``|df/dx|_F^2``, by Hutchinson's estimate
  ``|e^T df/dx|^2`` with one Gaussian ``e`` per solve.

:class:`IntegralLoss` integrates any ``g(t, x)``: a loss distributed over depth
(Massaroli et al. 2020, Sec. 2).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable

import torch
from torch import Tensor


def _per_sample(x: Tensor) -> Tensor:
    """``x`` as ``(batch, features)``; an empty batch too (``-1`` cannot size it)."""
    return x.reshape(x.shape[0], math.prod(x.shape[1:]))


def vjp(f: Tensor, x: Tensor, v: Tensor | None, term: str) -> Tensor:
    """``v^T df/dx`` with a graph (``v = None``: ``f`` a scalar), for the integrand ``term``.

    Raises:
        RuntimeError: under ``torch.inference_mode()``, which records no graph to
            differentiate, or where ``f`` is not computed from ``x`` in autograd's graph
            (autograd's own message does not say why).
    """
    if torch.is_inference_mode_enabled():
        raise RuntimeError(
            f"{term} differentiates the field by the state, which torch.inference_mode() "
            "does not allow; evaluate the layer under torch.no_grad() instead."
        )
    (out,) = (
        torch.autograd.grad(f, x, v, create_graph=True, allow_unused=True)
        if f.requires_grad
        else (None,)
    )
    if out is None:
        raise RuntimeError(
            f"{term} differentiates the field by the state, but the field's output is not "
            "computed from the state in autograd's graph: the field ignores its state, "
            "detaches it or computes outside torch. Where the field does not depend on the "
            "state its Jacobian is 0: leave the term out."
        )
    return out


class IntegralTerm(abc.ABC):
    """An integrand ``g(t, x, f)`` of shape ``(batch,)``, integrated over the solve.

    Attributes:
        name: the key of the integral in ``NeuralODE.integrals``.
        needs_jacobian: whether ``g`` differentiates ``f`` with respect to ``x``.
        per_solve: the attributes that :meth:`start` sets for one solve and ``g``
            reads (noise). ``NeuralODE`` sets them again before every evaluation of
            that solve, those of its backward pass included, so that a later solve
            (which calls :meth:`start` again) cannot change an earlier one's gradient.
    """

    name: str = "integral"
    needs_jacobian: bool = False
    per_solve: tuple[str, ...] = ()

    def start(self, x0: Tensor) -> None:  # noqa: B027 - optional hook
        """Called once before each solve with its initial state (e.g. to draw noise)."""

    @abc.abstractmethod
    def __call__(self, t: Tensor, x: Tensor, f: Tensor) -> Tensor:
        """The integrand at depth ``t``, state ``x``, derivative ``f = dx/dt``."""


class KineticEnergy(IntegralTerm):
    """``|f(t, x)|^2`` per sample: the kinetic energy of the flow (Finlay et al. 2020).

    Example:
        >>> import torch
        >>> from odelayers import KineticEnergy
        >>> KineticEnergy()(torch.tensor(0.0), torch.zeros(2, 2), torch.ones(2, 2))
        tensor([2., 2.])
    """

    name = "kinetic_energy"

    def __call__(self, t: Tensor, x: Tensor, f: Tensor) -> Tensor:
        return _per_sample(f).pow(2).sum(dim=1)


class JacobianFrobenius(IntegralTerm):
    """Hutchinson's estimate ``|e^T df/dx|^2`` of ``|df/dx|_F^2`` per sample.

    ``e`` is standard Gaussian, drawn once per solve (so the integrand is a smooth
    function of depth, as an adaptive solver needs); its expectation is the squared
    Frobenius norm of the Jacobian (Finlay et al. 2020).

    Args:
        generator: the random generator for ``e`` (default torch's global one).
    """

    name = "jacobian_frobenius"
    needs_jacobian = True
    per_solve = ("noise",)

    def __init__(self, generator: torch.Generator | None = None) -> None:
        self.generator = generator
        self.noise: Tensor | None = None

    def start(self, x0: Tensor) -> None:
        self.noise = torch.randn(
            x0.shape, dtype=x0.dtype, device=x0.device, generator=self.generator
        )

    def __call__(self, t: Tensor, x: Tensor, f: Tensor) -> Tensor:
        if self.noise is None:
            raise RuntimeError("`JacobianFrobenius.start` must be called before the solve.")
        return _per_sample(vjp(f, x, self.noise, type(self).__name__)).pow(2).sum(dim=1)


class IntegralLoss(IntegralTerm):
    """``g(t, x)`` per sample, integrated over depth: a depth-distributed loss.

    Args:
        fn: ``fn(t, x)`` returning shape ``(batch,)``.
        name: the key in ``NeuralODE.integrals``.

    Example:
        >>> import torch
        >>> from odelayers import IntegralLoss
        >>> IntegralLoss(lambda t, x: x.sum(dim=1))(torch.tensor(0.0), torch.ones(2, 3), None)
        tensor([3., 3.])
    """

    def __init__(self, fn: Callable[[Tensor, Tensor], Tensor], name: str = "loss") -> None:
        if not callable(fn):
            raise TypeError(f"`fn` must be callable as fn(t, x), got {fn!r}.")
        self.fn = fn
        self.name = name

    def __call__(self, t: Tensor, x: Tensor, f: Tensor) -> Tensor:
        out = self.fn(t, x)
        if not isinstance(out, Tensor) or out.shape != (x.shape[0],):
            got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise ValueError(f"`IntegralLoss` fn must return shape ({x.shape[0]},), got {got}.")
        return out
