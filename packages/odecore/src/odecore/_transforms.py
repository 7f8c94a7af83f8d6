"""PyTorch's function transforms (``torch.func``) and forward-mode AD around a solve.

A solve is differentiated in reverse mode: by ``torch.autograd`` (``backward()``,
``torch.autograd.grad``, ``torch.autograd.functional.jacobian``), and, through
:class:`~odecore.Autograd` alone, by ``torch.func.grad``, ``vjp`` and ``jacrev``.
What cannot run is refused here in odecore's words, naming what is not supported:

- ``torch.func.vmap`` around a solve: the step loop reads the state on the host
  (finiteness, step acceptance), which vmap cannot batch.
- forward mode (``torch.func.jvp``, ``jacfwd``, ``hessian``,
  ``torch.autograd.forward_ad``): the step loop keeps its records in place, and its
  gradient methods have no forward-mode rule.
- under ``torch.func.grad``, ``vjp`` or ``jacrev``, a solver whose steps take the
  field's Jacobian (implicit, ESDIRK and Rosenbrock methods): autograd inside a
  transform is not supported.
- the gradient methods that compute their backward pass themselves (:class:`Adjoint`,
  :class:`Checkpoint`, :class:`Reversible`, ``odeint_adjoint``), and the other
  ``torch.autograd.Function`` s of a solve, under any ``torch.func`` transform: their
  backward passes run outside the transforms' view (:class:`ReverseOnly`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.autograd import forward_ad

from ._errors import ConfigurationError

AUTOGRAD_ONLY = "Differentiate the solve with torch.autograd.grad or backward()"
"""The start of what the refusals of a solve under ``gradient=Autograd()`` advise."""

REVERSE_MODE = (
    "Differentiate the solve in reverse mode: torch.autograd.grad or backward() (and "
    "torch.autograd.functional.jacobian), or torch.func.grad, vjp or jacrev with "
    "gradient=Autograd()."
)
"""What the refusals below tell a user to do instead."""


def _transforms() -> list[str]:
    """The ``torch.func`` transforms active now, outermost first (``"Vmap"``,
    ``"Grad"``, ``"Jvp"``, ``"Functionalize"``)."""
    stack = torch._C._functorch.get_interpreter_stack() or []
    return [interpreter.key().name for interpreter in stack]


def has_tangent(x: Tensor) -> bool:
    """Whether ``x`` carries a forward-mode tangent of ``torch.autograd.forward_ad``."""
    level: int = forward_ad._current_level
    return level >= 0 and forward_ad.unpack_dual(x).tangent is not None  # type: ignore[no-untyped-call]


def check_transforms(
    y0: object, gradient: object, backprop: bool, solver: object, jacobian: bool
) -> None:
    """Refuse, at the entry of a solve with ``gradient`` (``backprop``: whether it is
    :class:`Autograd`) and ``solver`` (``jacobian``: whether its steps differentiate
    the field), what PyTorch's transforms around it cannot run (see the module's
    docstring).

    Raises:
        ConfigurationError: in forward mode (a ``torch.func.jvp``, ``jacfwd`` or
            ``hessian`` transform, a ``y0`` (or a part of a tuple ``y0``) with a tangent
            of ``torch.autograd.forward_ad``); under ``torch.func.vmap``; under
            ``torch.func.grad``, ``vjp`` or ``jacrev`` with a gradient method other
            than :class:`Autograd` or a solver whose steps take the field's Jacobian.
    """
    kinds = _transforms()
    parts = y0 if isinstance(y0, tuple) else (y0,)
    if "Jvp" in kinds or any(isinstance(y, Tensor) and has_tangent(y) for y in parts):
        raise ConfigurationError(
            "A solve cannot be differentiated in forward mode (torch.func.jvp, jacfwd, "
            "hessian, torch.autograd.forward_ad). " + REVERSE_MODE
        )
    if "Vmap" in kinds:
        raise ConfigurationError(
            "A solve cannot run under torch.func.vmap (a vmap of it, per-sample gradients, "
            "model ensembles): its step loop reads the state on the host (finiteness, "
            "step acceptance), which vmap cannot batch. Give the batch as y0's leading "
            "dimension instead (one system, one step size; "
            "`PIDController(per_sample=True)` for steps of each sample's own), or loop "
            "over what vmap would batch."
        )
    if "Grad" in kinds and not backprop:
        name = type(gradient).__name__
        whose = " (that of odeint_adjoint and of scipy: methods)" if name == "Adjoint" else ""
        raise ConfigurationError(
            f"`gradient={name}()`{whose} computes its backward pass itself, so torch.func's "
            "transforms (grad, vjp, jacrev) cannot differentiate it. " + REVERSE_MODE
        )
    if "Grad" in kinds and jacobian:
        raise ConfigurationError(
            f"`solver={type(solver).__name__}()` differentiates the vector field inside its "
            "steps (its Jacobian), which torch.func's transforms (grad, vjp, jacrev) cannot "
            f"run through. {AUTOGRAD_ONLY}, or solve with an explicit solver."
        )


def check_no_tangent(f0: Tensor) -> None:
    """Refuse a solve whose field's first value carries a tangent of
    ``torch.autograd.forward_ad`` (a dual tensor the field reads)."""
    if has_tangent(f0):
        raise ConfigurationError(
            "A solve cannot be differentiated in forward mode: the vector field read a "
            "dual tensor of torch.autograd.forward_ad. " + REVERSE_MODE
        )


class ReverseOnly(torch.autograd.Function):
    """A ``torch.autograd.Function`` of odecore whose backward pass odecore computes
    itself: ``torch.autograd`` differentiates it in reverse mode; under a
    ``torch.func`` transform, or with a dual tensor of ``torch.autograd.forward_ad``
    among its inputs, :func:`apply` refuses it, naming :attr:`what` (PyTorch's own
    refusal would ask the caller to rewrite the Function).

    Attributes:
        what: the gradient it computes, in words, as the message's subject.
        instead: what to do instead.
    """

    what: ClassVar[str] = "This gradient"
    instead: ClassVar[str] = REVERSE_MODE


def check_unbatched(grad: Tensor, what: str) -> None:
    """Refuse, in the backward pass of a gradient method that runs a solve of its own
    (``what``), a batch of cotangents (``torch.autograd.grad(is_grads_batched=True)``,
    ``torch.autograd.functional.jacobian(vectorize=True)``): vmap cannot batch that
    solve either.

    Raises:
        ConfigurationError: when ``grad`` is batched.
    """
    functorch = torch._C._functorch
    if functorch.is_legacy_batchedtensor(grad) or functorch.is_batchedtensor(grad):
        raise ConfigurationError(
            f"{what} solves the adjoint equations backward in time, which a batch of "
            "cotangents cannot run through (torch.autograd.functional.jacobian("
            "vectorize=True), torch.autograd.grad(is_grads_batched=True)): leave out "
            "`vectorize=True` (or `is_grads_batched`), or differentiate with "
            "gradient=Autograd(), Checkpoint() or Reversible() (odeint for odeint_adjoint)."
        )


def apply(function: type[ReverseOnly], *args: Any) -> Any:
    """``function.apply(*args)``, refused under a ``torch.func`` transform or with a
    dual tensor among ``args`` (a function, not an override of ``apply``, which
    dynamo could not trace in a solve inside ``torch.compile``).

    Raises:
        ConfigurationError: under a transform, or with a dual tensor.
    """
    tangents = any(isinstance(a, Tensor) and has_tangent(a) for a in args)
    if tangents or torch._C._are_functorch_transforms_active():
        raise ConfigurationError(
            f"{function.what} is computed by odecore outside autograd's graph: torch.func's "
            "transforms (grad, vjp, jacrev, jacfwd, jvp, vmap) and forward-mode AD "
            f"cannot differentiate it. {function.instead}"
        )
    return function.apply(*args)  # type: ignore[no-untyped-call]
