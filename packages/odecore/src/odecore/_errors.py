"""Exceptions and run-time statuses of odecore."""

from __future__ import annotations

import enum


class OdeCoreError(Exception):
    """Base class of every exception raised by odecore."""


class ConfigurationError(OdeCoreError, ValueError):
    """An argument or a combination of arguments is invalid.

    Subclasses :class:`ValueError`, so ``except ValueError`` catches it.
    """


class SolverError(OdeCoreError, RuntimeError):
    """A solve started but could not reach its end time.

    The message says at which time and why: the step size underflowed, the step
    budget (``max_steps`` / ``max_num_steps``) ran out, the state became
    non-finite, an implicit method's Newton iteration did not converge (at which
    step size, after how many iterations, and why), or a backend (``odeint``'s
    ``scipy:`` methods) failed, in its own words.

    A solver that cannot take a step returns one, not raised, as its result's
    ``failure`` (:class:`~odecore.StepResult`); the solve ends with its status and message
    when no smaller step follows.

    Attributes:
        status: the :class:`Status` that ended the solve.
        t: the time (in the caller's direction of integration) that was reached.
    """

    def __init__(self, message: str, *, status: Status, t: float) -> None:
        super().__init__(message)
        self.status = status
        self.t = t


FOR_SECOND_ORDER = (
    "For higher-order gradients (a Hessian, a gradient penalty), solve with "
    "gradient=Autograd() and an explicit or Rosenbrock solver (Rodas5P for stiff problems)."
)
"""What :func:`first_order` tells a user who needs a second derivative, unless said otherwise."""


def first_order(what: str, instead: str = FOR_SECOND_ORDER) -> None:
    """Refuse, in a backward pass whose gradient is first order only, to record a graph.

    Autograd turns grad mode on in a backward pass exactly when it is asked to record
    the pass's graph (``create_graph=True``: a Hessian, a gradient penalty). A backward
    pass that computes its gradient outside that graph would hand back a constant, and
    every second derivative through it would be silently wrong (zero, or missing the
    terms it leaves out), so it calls this first and raises instead.

    Args:
        what: the gradient, in words, as the message's subject.
        instead: what to do instead.

    Raises:
        ConfigurationError: when grad mode is on.
    """
    import torch

    if torch.is_grad_enabled():
        raise ConfigurationError(
            f"{what} is first order: it cannot be differentiated twice (backward or "
            f"torch.autograd.grad with create_graph=True through it). {instead}"
        )


class CompileFallbackWarning(UserWarning):
    """A solve asked for ``compile=True`` ran eagerly; the message names what did not
    compile and why.

    Raised, once per message, for what compiled solves do not cover yet (implicit
    Runge-Kutta, ``Kvaerno5`` and SciPy solvers, events, ``Adjoint`` and
    ``Checkpoint`` with a Rosenbrock method or with jumps, ``SaveAt(dense=True)``, times
    that require grad, and adaptive solves with jumps, tuple states or a norm of their
    own), when inductor cannot run (no C++ compiler), and when ``torch.compile`` fails
    on the vector field. The result is the eager solve's. Raised too when a compiled
    solve is differentiated twice (``create_graph=True``) or backpropagated through a
    second time (``retain_graph=True``): that backward pass differentiates an eager
    solve again.

    Example:
        >>> import warnings, torch, odecore
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     sol = odecore.solve(lambda t, y: -y, torch.ones(2), t0=0.0, t1=1.0,
        ...                         solver=odecore.Kvaerno5(), compile=True)
        >>> [w.category.__name__ for w in caught]
        ['CompileFallbackWarning']
    """


class Status(enum.IntEnum):
    """How a solve ended. ``Status.SUCCESS`` is ``0``; everything else is a failure.

    ``str(status)`` reads as a sentence that says what to do about it.
    """

    SUCCESS = 0
    MAX_STEPS_REACHED = 1
    DT_UNDERFLOW = 2
    NONFINITE = 3
    BACKEND_FAILED = 4
    NEWTON_FAILED = 5

    def __str__(self) -> str:
        return _STATUS_MESSAGES[self]


_STATUS_MESSAGES = {
    Status.SUCCESS: "the solve reached its end time",
    Status.MAX_STEPS_REACHED: (
        "maximum number of steps reached; increase `max_steps` (`max_num_steps` in "
        "odeint options) or loosen the tolerances"
    ),
    Status.DT_UNDERFLOW: (
        "the step size underflowed; the problem may be stiff, or the solution may blow "
        "up here: check the vector field or loosen the tolerances"
    ),
    Status.NONFINITE: (
        "the state or its derivative became non-finite (NaN or inf); check the vector "
        "field, or use smaller steps"
    ),
    Status.BACKEND_FAILED: (
        "the backend's solver failed (its own message follows); loosen the tolerances "
        "or try another method"
    ),
    Status.NEWTON_FAILED: (
        "Newton's iteration for an implicit method's stages did not converge: the step may "
        "be too large for the field; take smaller steps (`step_size` or `n_steps` in "
        "odeint's options, `dt0` in solve()), or raise `max_iters` or loosen the "
        "iteration's tolerances (`Newton(max_iters=..., rtol=..., atol=...)`)"
    ),
}
