"""``odeint``: torchdiffeq's call signature over :func:`odecore.solve`.

This module only translates a method name and an options dict into solver and
controller objects; it holds no solver logic. Methods of the ``scipy:`` and
``torchdiffeq:`` families go to the backends of ``_backends``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, overload

import torch
from torch import Tensor

from ._adams import ADAMS_METHODS, AdamsBashforthMoulton, adams_for, cubic_hermite, flat_field
from ._backends import (
    SCIPY_METHODS,
    SCIPY_PREFIX,
    SCIPY_SOLVER,
    TORCHDIFFEQ_PREFIX,
    ScipySolver,
    make_loop,
    torchdiffeq_odeint,
    torchdiffeq_odeint_adjoint,
)
from ._controllers import SNAP, AbstractController, PIDController
from ._errors import ConfigurationError, SolverError, Status, first_order
from ._events import (
    CALLBACKS,
    FIXED_STEPS,
    Event,
    _find_root,
    combined_event,
    reroute,
    warn_unsupported_callbacks,
)
from ._gradients import (
    AbstractGradient,
    Adjoint,
    AugmentedNorm,
    _Reads,
    as_solved,
    found_tensors,
    training_modes,
)
from ._implicit import AbstractImplicitRK
from ._solve import (
    SaveAt,
    State,
    VectorField,
    _as_floats,
    _check_y0,
    _jump_times,
    _make_loop,
    _packing,
    _solve,
    check_alike,
    check_step_resolves,
    numbers_only,
)
from ._solvers import AbstractExplicitRK, AbstractSolver
from ._spec import (
    _CALL_OPTIONS,
    ADAPTIVE_OPTIONS,
    FIXED_METHODS,
    FIXED_OPTIONS,
    IMPLICIT_METHODS,
    IMPLICIT_OPTIONS,
    OdeSpec,
    nonnegative,
    positive,
    resolve,
    solver_for,
)
from ._transforms import ReverseOnly, check_unbatched
from ._transforms import apply as reverse_only

_GRID_OPTIONS = ("grid_constructor", "perturb", "interp")

# Options of odeint_adjoint's backward solve that are the forward solve's: it runs in
# the forward loop, with its jumps, step times, step budget and compilation.
_FORWARD_ONLY = ("jump_t", "step_t", "max_num_steps", "compile")


def _same(a: object, b: object) -> bool:
    """Whether two option values are the same: one object, or equal numbers or lists."""
    if a is b:
        return True
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return False
    return type(a) is type(b) and a == b


_SCIPY_SOLVER_OPTIONS = ("solver", "min_step", "max_step", "first_step", "max_num_steps",
                         *_CALL_OPTIONS)  # fmt: skip


def _delegated(method: object) -> bool:
    """Whether ``method`` names a torchdiffeq method, which torchdiffeq runs whole."""
    return isinstance(method, str) and method.startswith(TORCHDIFFEQ_PREFIX)


_ODECORE_OPTIONS = ("compile", "gradient")
"""Options of odecore's own methods that no torchdiffeq method has."""


def _not_for_torchdiffeq(method: str, options: Mapping[str, Any] | None, name: str = "") -> None:
    """Refuse odecore's own options for a torchdiffeq method: torchdiffeq would warn
    of an unexpected argument and solve without it (backpropagation, not compiled)."""
    given = [key for key in _ODECORE_OPTIONS if key in (options or {})]
    if given:
        raise ConfigurationError(
            f"`{name}options` {given} are odecore's, for its own methods: torchdiffeq would "
            f"warn of an unexpected argument and run {method!r} without them. Remove them, "
            f"or use odecore's method {method.removeprefix(TORCHDIFFEQ_PREFIX)!r}."
        )


def _check_state(y0: State) -> None:
    if isinstance(y0, tuple):
        if len(y0) == 0:
            raise ValueError("`y0` is an empty tuple; the state needs at least one tensor.")
        for i, y in enumerate(y0):
            _check_y0(y, f"y0[{i}]")
        check_alike(y0)  # torchdiffeq would promote them all to one dtype
    else:
        _check_y0(y0, "y0")


def _check_t(t: Tensor) -> list[float]:
    if not isinstance(t, Tensor):
        raise TypeError(f"`t` must be a 1-D torch.Tensor of times, got {type(t).__name__}.")
    if t.dim() != 1 or t.numel() == 0:
        raise ValueError(f"`t` must be a non-empty 1-D tensor, got shape {tuple(t.shape)}.")
    if not t.is_floating_point():
        raise TypeError(
            f"`t` must be a floating point tensor, got {t.dtype} (as torchdiffeq asks): the "
            "event time of `event_fn` comes back in `t`'s dtype. Use e.g. `t.double()`."
        )
    ts = t.detach().tolist()
    if not all(math.isfinite(x) for x in ts):
        raise ValueError(f"`t` must hold finite times, got {ts}.")
    diffs = [b - a for a, b in itertools.pairwise(ts)]
    if diffs and not (all(d > 0 for d in diffs) or all(d < 0 for d in diffs)):
        raise ValueError(f"`t` must be strictly increasing or strictly decreasing, got {ts}.")
    return [float(x) for x in ts]


EventFn = Callable[[Tensor, Any], Tensor]
"""An event function ``event_fn(t, y) -> Tensor``: the event is where it changes sign."""


@overload
def odeint(
    func: VectorField,
    y0: State,
    t: Tensor,
    *,
    rtol: float = ...,
    atol: float = ...,
    method: str = ...,
    options: Mapping[str, Any] | None = ...,
    event_fn: None = ...,
) -> State: ...


@overload
def odeint(
    func: VectorField,
    y0: State,
    t: Tensor,
    *,
    rtol: float = ...,
    atol: float = ...,
    method: str = ...,
    options: Mapping[str, Any] | None = ...,
    event_fn: EventFn,
) -> tuple[Tensor, State]: ...


def odeint(
    func: VectorField,
    y0: State,
    t: Tensor,
    *,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    method: str = "dopri5",
    options: Mapping[str, Any] | None = None,
    event_fn: EventFn | None = None,
) -> State | tuple[Tensor, State]:
    """Solve ``dy/dt = func(t, y)`` and return the solution at every time in ``t``.

    The signature and meaning are torchdiffeq's, so switching is a change of import.
    Gradients flow by backpropagation through the solver's steps, to ``y0``, to
    ``t`` (exactly for the discrete scheme) and to every tensor ``func`` reads —
    except with ``scipy:`` methods, whose steps autograd cannot see: there they come
    from the continuous adjoint, as with :func:`odeint_adjoint`.

    Args:
        func: the vector field ``func(t, y)``; ``t`` is a 0-dim tensor in ``y0``'s
            dtype, ``y`` has the structure of ``y0``.
        y0: the initial state at ``t[0]``: a floating tensor of any shape, or a tuple
            of tensors.
        t: 1-D floating tensor of times, strictly increasing or strictly
            decreasing; backward solves integrate from ``t[0]`` down to ``t[-1]``.
        rtol: relative tolerance of adaptive methods.
        atol: absolute tolerance of adaptive methods.
        method: one of ``euler``, ``midpoint``, ``heun`` (or ``heun2``), ``ralston``,
            ``heun3``, ``rk4`` (RK4-classic), ``rk4_38`` (fixed step) or
            ``adaptive_heun``, ``fehlberg2``, ``bosh3``, ``dopri5``, ``tsit5``,
            ``dopri8`` (adaptive); ``implicit_euler``, ``implicit_midpoint``,
            ``trapezoid``, ``gauss_legendre2``, ``gauss_legendre4``,
            ``gauss_legendre6``, ``radauIIA3``, ``radauIIA5`` (implicit, fixed step,
            for stiff problems); or a backend: ``scipy:LSODA``, ``scipy:BDF``,
            ``scipy:Radau`` (stiff problems), ``scipy:RK45``, ``scipy:DOP853``,
            ``scipy:RK23`` — SciPy's ``solve_ivp`` solvers take the steps (needs
            ``pip install odecore[scipy]``; torchdiffeq's ``scipy_solver`` with the
            option ``solver`` is the same) — or ``torchdiffeq:<name>`` for any
            torchdiffeq method, which hands the whole call to ``torchdiffeq.odeint``
            (needs ``pip install odecore[torchdiffeq]``). torchdiffeq's fixed-grid
            Adams methods ``explicit_adams``, ``implicit_adams`` (and its other name
            ``fixed_adams``) are multistep: they take only ``step_size``,
            ``n_steps``, ``grid_constructor``, ``perturb``, ``interp="cubic"`` (their
            interpolant), ``max_order`` (4 to 12; default 12, torchdiffeq's, for the
            implicit ones and 5 for ``explicit_adams``, whose stability region
            shrinks with the order: ``max_order=12`` is torchdiffeq's scheme) and,
            implicit, ``max_iters`` (the corrector's, default 4; ``rtol`` and
            ``atol`` end it early; a corrector that runs out of iterations while
            contracting, farther than them from its fixed point, warns once and goes
            on, and one that diverges raises where torchdiffeq only warns); an
            ``event_fn`` needs ``step_size``.
            The variable-order ``adams`` is planned: its name raises an error that
            says so.
        options: for fixed-step methods one of ``step_size``, ``n_steps`` (uniform
            steps over the whole span) and ``grid_constructor`` (``(func, y0, t) ->``
            the grid, from ``t[0]`` to ``t[-1]``; built from ``t`` by tensor
            operations it carries the gradient with respect to ``t``, from Python
            floats it is a constant), the default being one step per interval of
            ``t``; ``perturb`` (one-sided limits of ``func`` at every
            step end) and ``interp="cubic"`` (the cubic Hermite interpolant of the
            step's ends, for outputs and events; odecore's own for order <= 3);
            implicit ones also ``max_iters`` (Newton's iterations per
            step; ``rtol`` and ``atol`` do not loosen the Newton solve, see
            :class:`Newton`). For adaptive ones ``first_step``, ``min_step``, ``max_step``,
            ``safety``, ``ifactor`` (largest growth), ``dfactor`` (largest shrink),
            ``pcoeff``, ``icoeff``, ``dcoeff``, ``norm`` (a callable on the scaled
            error, structured like ``y0``) and ``dtype=torch.float64``. For both
            ``jump_t`` (discontinuities of ``func`` in time), ``step_t`` (times to
            step on) and ``max_num_steps``. ``scipy:`` methods take
            ``first_step``, ``max_step``, ``jump_t`` and ``step_t`` (scipy restarts
            at each), ``max_num_steps`` (accepted steps), and for LSODA ``min_step``;
            odecore's own methods take ``compile`` (True or ``"stepped"``: compiled
            with ``torch.compile``, see :func:`solve`) and ``gradient`` (a key of
            :data:`GRADIENTS` such as ``"reversible"``, or a gradient object; default
            ``"backprop"``);
            ``scipy_solver`` takes ``solver`` and these; ``torchdiffeq:`` methods pass
            ``options`` to torchdiffeq unchanged (``compile`` and ``gradient``,
            odecore's, are an error there). ``torchdiffeq:scipy_solver``, whose
            solution has no graph, is refused where ``y0``, ``t`` or a tensor ``func``
            reads requires grad (odecore's ``scipy_solver`` differentiates).
        event_fn: torchdiffeq's event mode: integrate from ``t[0]`` until
            ``event_fn(t, y)`` changes sign (see :class:`Event`), however long that
            takes; ``t`` then holds two times, the start and any other that gives
            the direction. Fixed-step methods need the ``step_size`` option. The
            event time carries no gradient and the state at it only that of a solve
            to a fixed time; :func:`odeint_event` adds the event time's.

    Returns:
        The solution at each time of ``t`` stacked on a new first dimension: a
        tensor of shape ``(len(t), *y0.shape)``, or a tuple of such tensors. With
        ``event_fn``, ``(event_t, solution)``: the event time (``t``'s dtype) and
        the solution at ``t[0]`` and at the event, stacked.

    Raises:
        TypeError: if ``y0`` or ``t`` has the wrong type or dtype.
        ValueError: for an unknown method or option, bad times, tolerances,
            shapes, or a non-finite ``y0``; for a tolerance or option given as a
            tensor that requires grad (it is taken as a number, and no gradient
            would reach it); for ``torchdiffeq:scipy_solver`` where a gradient is
            wanted.
        SolverError: if the solve cannot finish (step size underflow, step budget
            exhausted, non-finite state, an implicit method's Newton iteration or an
            implicit Adams method's corrector that diverges in a step,
            ``Status.NEWTON_FAILED``, naming the step size and the reason, or a
            failure of scipy's solver or torchdiffeq's in its own words); it says at
            which ``t`` (torchdiffeq does not say: there ``t`` is NaN).
        ImportError: for a ``scipy:`` or ``torchdiffeq:`` method whose package is
            not installed; the message names the extra to install.

    Example:
        >>> import torch, odecore
        >>> t = torch.linspace(0.0, 1.0, 5)
        >>> ys = odecore.odeint(lambda t, y: -y, torch.ones(3), t)
        >>> ys.shape
        torch.Size([5, 3])
        >>> torch.allclose(ys[:, 0], torch.exp(-t))
        True
        >>> stiff = odecore.odeint(lambda t, y: -1e4 * (y - torch.cos(t)), torch.ones(1), t,
        ...                        rtol=1e-6, atol=1e-8, method="scipy:LSODA")
        >>> stiff.dtype, torch.allclose(stiff[:, 0], torch.cos(t), atol=1e-3)
        (torch.float32, True)
    """
    ts = _check_t(t)
    if event_fn is not None:
        _check_event(event_fn, ts, method, options)
    if _delegated(method):
        _check_state(y0)
        _not_for_torchdiffeq(method, options)
        rtol, atol = positive("rtol", rtol), positive("atol", atol)
        return torchdiffeq_odeint(  # type: ignore[no-any-return]
            func, y0, t, rtol=rtol, atol=atol, method=method, options=options
        )
    if isinstance(method, str) and method in ADAMS_METHODS:
        return _adams(func, y0, t, ts, rtol, atol, method, options, event_fn)
    config = _configure(method, options, rtol, atol, ts, grid=(func, y0, t))
    gradient: AbstractGradient = config.spec.gradient
    if isinstance(config.solver, ScipySolver):
        # No graph runs through scipy: the gradient is always the adjoint's.
        gradient = Adjoint(solver=config.solver, controller=config.controller, dt0=config.dt0)
    return _run(func, y0, t, ts, config, gradient, event_fn)


@overload
def odeint_adjoint(
    func: VectorField,
    y0: State,
    t: Tensor,
    *,
    rtol: float = ...,
    atol: float = ...,
    method: str = ...,
    options: Mapping[str, Any] | None = ...,
    event_fn: None = ...,
    adjoint_rtol: float | None = ...,
    adjoint_atol: float | None = ...,
    adjoint_method: str | None = ...,
    adjoint_options: Mapping[str, Any] | None = ...,
    adjoint_params: Sequence[Tensor] | None = ...,
) -> State: ...


@overload
def odeint_adjoint(
    func: VectorField,
    y0: State,
    t: Tensor,
    *,
    rtol: float = ...,
    atol: float = ...,
    method: str = ...,
    options: Mapping[str, Any] | None = ...,
    event_fn: EventFn,
    adjoint_rtol: float | None = ...,
    adjoint_atol: float | None = ...,
    adjoint_method: str | None = ...,
    adjoint_options: Mapping[str, Any] | None = ...,
    adjoint_params: Sequence[Tensor] | None = ...,
) -> tuple[Tensor, State]: ...


def odeint_adjoint(
    func: VectorField,
    y0: State,
    t: Tensor,
    *,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    method: str = "dopri5",
    options: Mapping[str, Any] | None = None,
    event_fn: EventFn | None = None,
    adjoint_rtol: float | None = None,
    adjoint_atol: float | None = None,
    adjoint_method: str | None = None,
    adjoint_options: Mapping[str, Any] | None = None,
    adjoint_params: Sequence[Tensor] | None = None,
) -> State | tuple[Tensor, State]:
    """:func:`odeint` with gradients by the continuous adjoint method (:class:`Adjoint`).

    torchdiffeq's signature and meaning. The forward solve keeps no graph, so memory
    does not grow with the number of steps; the backward pass solves the adjoint
    system backward in time, restarting at every time of ``t`` and of ``jump_t``.
    Gradients reach ``y0``, ``t`` and the tensors in ``adjoint_params``, by default
    every tensor requiring grad that ``func`` reads: an ``nn.Module``'s parameters
    and what a plain function closes over (torchdiffeq raises for a plain function
    instead), found in the graphs of the forward solve's evaluations.

    Args:
        func: the vector field, as for :func:`odeint`.
        y0: the initial state, a tensor or a tuple of tensors.
        t: 1-D tensor of times, strictly monotone.
        rtol: relative tolerance of the forward solve.
        atol: absolute tolerance of the forward solve.
        method: the forward method, as for :func:`odeint`. With ``torchdiffeq:<name>``
            the whole call, ``adjoint_*`` arguments included, goes to
            ``torchdiffeq.odeint_adjoint``.
        options: the forward options, as for :func:`odeint`.
        adjoint_rtol: relative tolerance of the backward solve; default ``rtol``.
        adjoint_atol: absolute tolerance of the backward solve; default ``atol``.
        adjoint_method: the backward method; default ``method``. A ``scipy:`` method
            has scipy integrate the backward system, with vector-Jacobian products
            from torch; odecore's and scipy's methods mix freely, torchdiffeq's go
            only with torchdiffeq's.
        adjoint_options: the backward options (default: ``options`` when the method
            is the same; ``{}`` is given, no options, as in torchdiffeq); ``jump_t``,
            ``step_t``, ``max_num_steps`` and ``compile`` are the forward solve's, in
            whose loop the backward solve runs: given here, they must be those of
            ``options``. ``{"norm": "seminorm"}``
            measures the backward error on the state and its adjoint only (Kidger et
            al. 2021), which saves steps
            (not with ``scipy:`` methods, whose norm is their own). A callable
            ``norm`` here is torchdiffeq's: it takes the tuple ``(t, y, a, *parameter
            gradients)`` of the backward error (``y`` and ``a`` as the tuple's
            tensors for a tuple state; ``t`` a 0-dim zero), where the forward norm
            that the backward solve inherits without ``adjoint_options`` measures
            ``y`` and ``a`` each as a state.
        adjoint_params: the tensors to differentiate besides ``y0`` and ``t``; default
            every tensor requiring grad that an evaluation of the forward solve
            reads (see :class:`Adjoint`). Those that do not require grad (a
            module's buffers) are left out, as in torchdiffeq; one listed twice gets
            its gradient once (torchdiffeq gives it twice).

    Returns:
        The solution at each time of ``t``, as :func:`odeint`.

    Raises:
        TypeError, ValueError: as :func:`odeint`, for the forward and the backward
            arguments alike.
        SolverError: if the forward solve, or in ``backward()`` the adjoint solve,
            cannot finish.
        ConfigurationError: in ``backward()``, without ``adjoint_params``, if the
            adjoint solve's evaluations read a tensor requiring grad that no forward
            evaluation read.
        ImportError: as :func:`odeint`, for a backend that is not installed.

    Example:
        >>> import torch, odecore
        >>> y0 = torch.ones(3, requires_grad=True)
        >>> t = torch.linspace(0.0, 1.0, 5)
        >>> ys = odecore.odeint_adjoint(lambda t, y: -y, y0, t)
        >>> ys[-1].sum().backward()
        >>> torch.allclose(y0.grad, torch.exp(torch.tensor(-1.0)).expand(3))
        True
    """
    ts = _check_t(t)
    for where, given in (("options", options), ("adjoint_options", adjoint_options)):
        if given is not None and "gradient" in given:
            raise ConfigurationError(
                f"`{where}={{'gradient': ...}}`: odeint_adjoint's gradient is the adjoint; "
                "for another, call `odeint(..., options={'gradient': ...})`."
            )
    if event_fn is not None:
        _check_event(event_fn, ts, method, options)
    if _delegated(method):
        if adjoint_method is not None and not _delegated(adjoint_method):
            raise ConfigurationError(
                f"`adjoint_method` must be a torchdiffeq method too when `method` is one "
                f"(torchdiffeq runs both passes), got {adjoint_method!r}; use "
                f"'{TORCHDIFFEQ_PREFIX}<name>' or leave it out."
            )
        _check_state(y0)
        _not_for_torchdiffeq(method, options)
        _not_for_torchdiffeq(adjoint_method or method, adjoint_options, "adjoint_")
        rtol, atol = positive("rtol", rtol), positive("atol", atol)
        if adjoint_rtol is not None:
            adjoint_rtol = positive("adjoint_rtol", adjoint_rtol)
        if adjoint_atol is not None:
            adjoint_atol = positive("adjoint_atol", adjoint_atol)
        return torchdiffeq_odeint_adjoint(  # type: ignore[no-any-return]
            func,
            y0,
            t,
            rtol=rtol,
            atol=atol,
            method=method,
            options=options,
            adjoint_rtol=adjoint_rtol,
            adjoint_atol=adjoint_atol,
            adjoint_method=adjoint_method,
            adjoint_options=adjoint_options,
            adjoint_params=adjoint_params,
        )
    if _delegated(adjoint_method):
        raise ConfigurationError(
            f"`adjoint_method` {adjoint_method!r} needs a torchdiffeq `method` as well "
            f"(torchdiffeq runs both passes), got {method!r}."
        )
    if isinstance(method, str) and method in ADAMS_METHODS:
        return _adams_adjoint(
            func, y0, t, ts, (rtol, atol, method, options),
            (adjoint_rtol, adjoint_atol, adjoint_method, adjoint_options), adjoint_params,
            event_fn,
        )  # fmt: skip
    config = _configure(method, options, rtol, atol, ts, grid=(func, y0, t))
    back_method = method if adjoint_method is None else adjoint_method
    inherited = options if back_method == method else None  # torchdiffeq's: `{}` is given
    back_opts = dict((adjoint_options if adjoint_options is not None else inherited) or {})
    if back_opts.get("perturb", False) and not dict(options or {}).get("perturb", False):
        raise ConfigurationError(
            "`adjoint_options={'perturb': True}` needs `options={'perturb': True}`: the "
            "backward solve evaluates one-sided limits at the forward solve's step ends."
        )
    forward_opts = dict(options or {})
    own = [
        key
        for key in _FORWARD_ONLY
        if adjoint_options and key in adjoint_options
        and (key not in forward_opts or not _same(forward_opts[key], adjoint_options[key]))
    ]  # fmt: skip
    if own:
        raise ConfigurationError(
            f"`adjoint_options` {own} cannot differ from `options`: the backward solve "
            "restarts at the forward `jump_t`, steps on the forward `step_t` and counts "
            "its steps against the forward `max_num_steps`, in the forward solve's loop "
            "(compiled or not as it is). Give them in `options`, or leave them out of "
            "`adjoint_options`."
        )
    seminorm = back_opts.get("norm") == "seminorm"
    if seminorm:
        del back_opts["norm"]
    elif adjoint_options is not None and callable(back_opts.get("norm")):
        # torchdiffeq's adjoint norm takes the backward state (t, y, a, *param grads),
        # not a state like y0 as the forward norm that the backward solve inherits.
        back_opts["norm"] = AugmentedNorm(back_opts["norm"])
    forward_grid = dict(options or {}).get("grid_constructor")
    if forward_grid is not None and back_opts.get("grid_constructor") is forward_grid:
        # The backward solve's loop steps on the forward solve's step times, so by
        # default (one step per interval) it retraces the forward grid backward.
        del back_opts["grid_constructor"]
    back = _configure(
        back_method,
        back_opts,
        rtol if adjoint_rtol is None else adjoint_rtol,
        atol if adjoint_atol is None else adjoint_atol,
        ts,
        name="adjoint_",
    )
    if seminorm and isinstance(back.solver, ScipySolver):
        raise ConfigurationError(
            "`adjoint_options={'norm': 'seminorm'}` is not available with SciPy's methods, "
            f"whose error norm covers the whole backward state; got `adjoint_method` "
            f"{back_method!r}."
        )
    if seminorm and not isinstance(back.controller, PIDController):
        raise ConfigurationError(
            "`adjoint_options={'norm': 'seminorm'}` needs an adaptive `adjoint_method`, got "
            f"{back_method!r}."
        )
    if adjoint_params is not None:
        adjoint_params = tuple(adjoint_params)
    gradient = Adjoint(
        solver=back.solver,
        controller=back.controller,
        dt0=back.dt0,
        seminorm=seminorm,
        params=adjoint_params,
    )
    return _run(func, y0, t, ts, config, gradient, event_fn)


def odeint_event(
    func: VectorField,
    y0: State,
    t0: Tensor | float,
    *,
    event_fn: EventFn,
    reverse_time: bool = False,
    odeint_interface: Callable[..., Any] = odeint,
    **kwargs: Any,
) -> tuple[Tensor, State]:
    """Integrate from ``t0`` until ``event_fn(t, y)`` changes sign; torchdiffeq's function.

    Calls ``odeint_interface(func, y0, t, event_fn=event_fn, **kwargs)`` with
    ``t = [t0, t0 ± 1]`` (the second time gives only the direction), then links
    the gradient of the event time into the result by the implicit function
    theorem: a loss of the event time and of the state there differentiates
    through both (see :class:`Event`), also into the tensors ``event_fn`` reads (an
    ``nn.Module``'s parameters, what a plain function closes over).

    Args:
        func: the vector field, as for :func:`odeint`.
        y0: the initial state, a tensor or a tuple of tensors.
        t0: the start time, a 0-dim tensor (or a number).
        event_fn: ``event_fn(t, y) -> Tensor``; the event is where an element of it
            reaches zero or changes sign.
        reverse_time: integrate backward in time from ``t0``.
        odeint_interface: :func:`odeint` or :func:`odeint_adjoint` (torchdiffeq's
            work too): how the solve is run and differentiated.
        **kwargs: passed to ``odeint_interface``: ``rtol``, ``atol``, ``method``,
            ``options`` and, for the adjoint, its ``adjoint_*`` arguments.

    Returns:
        ``(event_t, solution)``: the event time and the solution at ``t0`` and at
        the event, stacked on a new first dimension (a tuple for a tuple state).

    Raises:
        TypeError, ValueError: as :func:`odeint`, and if ``event_fn`` does not
            return a floating tensor.
        SolverError: if the event does not happen within ``max_num_steps`` steps.

    Example:
        >>> import math, torch, odecore
        >>> h = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
        >>> state = (h, torch.tensor(0.0, dtype=torch.float64))   # height, velocity
        >>> t_e, (x, v) = odecore.odeint_event(
        ...     lambda t, y: (y[1], torch.full_like(y[1], -9.81)), state,
        ...     torch.tensor(0.0, dtype=torch.float64), event_fn=lambda t, y: y[0])
        >>> abs(t_e.item() - math.sqrt(2 * 2.0 / 9.81)) < 1e-7
        True
        >>> t_e.backward()   # d/dh sqrt(2 h / g) = 1 / sqrt(2 h g)
        >>> abs(h.grad.item() - 1 / math.sqrt(2 * 2.0 * 9.81)) < 1e-6
        True
    """
    if not isinstance(t0, Tensor):  # in the state's dtype: float32 would round t0
        like = y0[0] if isinstance(y0, tuple) else y0
        dtype = like.dtype if like.is_floating_point() else torch.get_default_dtype()
        t0 = torch.tensor(float(t0), dtype=dtype, device=like.device)
    start = t0.reshape(-1)
    t = torch.cat([start, start.detach() + (-1.0 if reverse_time else 1.0)])
    event_t, solution = odeint_interface(func, y0, t, event_fn=event_fn, **kwargs)
    return _with_event_gradient(func, y0, event_fn, start[0], event_t, solution)


def _with_event_gradient(
    func: VectorField, y0: State, event_fn: EventFn, t0: Tensor, event_t: Tensor, solution: State
) -> tuple[Tensor, State]:
    """``(event_t, solution)`` of an event solve from ``t0``, with the event time's
    gradient (implicit function theorem) linked into both; see :class:`Event`."""
    if isinstance(y0, tuple):
        flat0, unpack, pack = _packing(y0)

        def f_flat(tt: Tensor, flat: Tensor) -> Tensor:
            return pack(func(tt, unpack(flat)))

        state = torch.cat([s[-1].reshape(-1) for s in solution])
    else:
        unpack, f_flat = (lambda flat: flat), func  # type: ignore[assignment]
        flat0, state = y0, solution[-1]
    value, at_start = combined_event(event_fn, float(t0.detach()), flat0.detach(), unpack)
    module = func if isinstance(func, torch.nn.Module) else None
    event_t, state = reroute(f_flat, value, event_t, state, module)
    if at_start:
        # An element is zero at t0, the event is there whatever the state: it moves
        # with t0 (the solve returned the time as a number, connected to nothing).
        event_t = event_t + (t0 - t0.detach()).to(event_t.dtype)
    if isinstance(y0, tuple):
        ends = unpack(state)
        assert isinstance(ends, tuple)
        return event_t, tuple(torch.cat([s[:-1], e[None]]) for s, e in zip(solution, ends))
    assert isinstance(solution, Tensor)  # as y0
    return event_t, torch.cat([solution[:-1], state[None]])


def odeint_dense(
    func: VectorField,
    y0: State,
    t0: Tensor | float,
    t1: Tensor | float,
    *,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    method: str = "dopri5",
    options: Mapping[str, Any] | None = None,
) -> Callable[[Tensor | float], State]:
    """Solve from ``t0`` to ``t1`` and return the solution as a function of time;
    torchdiffeq's function.

    The returned function reads the solver's dense output inside the step that holds
    the time asked for, as accurate as the step ends (``SaveAt(dense=True)`` and
    :meth:`Solution.evaluate` in the structured API). Every accepted step is kept, so
    memory grows with the number of steps. Gradients flow by backpropagation, also to
    the times asked for.
    torchdiffeq offers it for ``dopri5`` and a tensor state only; here every odecore
    method and tuple states work.

    Args:
        func: the vector field, as for :func:`odeint`.
        y0: the initial state at ``t0``, a tensor or a tuple of tensors.
        t0: the start time.
        t1: the end time (``t1 < t0`` integrates backward).
        rtol: relative tolerance of adaptive methods.
        atol: absolute tolerance of adaptive methods.
        method: one of odecore's methods, as for :func:`odeint` (not ``scipy:`` or
            ``torchdiffeq:`` ones).
        options: as for :func:`odeint`.

    Returns:
        ``y(t)`` for a time (a number, or a 0-dim or 1-D tensor) between ``t0`` and
        ``t1``: a state shaped like ``y0``, stacked on a new first dimension for a
        1-D tensor of times.

    Raises:
        TypeError, ValueError: as :func:`odeint`; the returned function raises a
            ``ValueError`` for a time outside ``[t0, t1]``.

    Example:
        >>> import math, torch, odecore
        >>> y = odecore.odeint_dense(lambda t, y: -y, torch.ones(2, dtype=torch.float64),
        ...                          0.0, 2.0)
        >>> abs(y(torch.tensor(0.7)) - math.exp(-0.7)).max().item() < 1e-7
        True
        >>> y(torch.linspace(0.0, 2.0, 5)).shape
        torch.Size([5, 2])
    """
    numbers_only(t0, t1, "odeint_dense", "or `odeint` with the output times as a tensor.")
    t = torch.tensor([float(t0), float(t1)], dtype=torch.float64)
    ts = _check_t(t)
    if isinstance(method, str) and (method.startswith(SCIPY_PREFIX) or _delegated(method)):
        raise ConfigurationError(
            f"`odeint_dense` needs one of odecore's methods, whose dense output it keeps; "
            f"got {method!r}."
        )
    config = _configure(method, options, rtol, atol, ts, grid=(func, y0, t))
    sol = _solve(
        func,
        y0,
        t0=ts[0],
        t1=ts[-1],
        solver=config.solver,
        controller=config.controller,
        saveat=SaveAt(dense=True),
        dt0=config.dt0,
        jump_ts=config.jump_ts,
        step_ts=config.step_ts,
        max_steps=config.spec.max_steps,
        throw=True,
        gradient=None,
        make_loop=_make_loop,
        compile=config.spec.compile,
    )
    return sol.evaluate


def _check_event(
    event_fn: object, ts: list[float], method: object, options: Mapping[str, Any] | None
) -> None:
    """What torchdiffeq's event mode needs: two times, one of odecore's methods, and a
    step size for a fixed-step one."""
    if not callable(event_fn):
        raise TypeError(
            f"`event_fn` must be a callable `event_fn(t, y) -> Tensor`, got "
            f"{type(event_fn).__name__}."
        )
    if len(ts) != 2:
        raise ValueError(
            f"`t` must hold 2 times with `event_fn` (the start time, and one more that "
            f"gives the direction), got {len(ts)}."
        )
    if isinstance(method, str) and (method.startswith(SCIPY_PREFIX) or _delegated(method)):
        raise ConfigurationError(
            f"`event_fn` needs one of odecore's methods, got {method!r}; use e.g. "
            "method='dopri5' (or torchdiffeq's own odeint for its methods)."
        )
    fixed = method in FIXED_METHODS or method in IMPLICIT_METHODS or method in ADAMS_METHODS
    if fixed and "step_size" not in (options or {}):
        raise ConfigurationError(
            f"`event_fn` with the fixed-step method {method!r} needs a step size: pass "
            "options={'step_size': ...} (the end time is not known in advance)."
        )


def _run(
    func: VectorField,
    y0: State,
    t: Tensor,
    ts: list[float],
    config: _Config,
    gradient: AbstractGradient | None,
    event_fn: EventFn | None = None,
) -> State | tuple[Tensor, State]:
    """``solve`` at the times ``t``; with the scipy loop if a scipy method takes part.
    With ``event_fn``: from ``t[0]`` until the event, ``(event_t, [y0, y_event])``."""
    event = None if event_fn is None else Event(event_fn)
    scipy = isinstance(config.solver, ScipySolver) or (
        isinstance(gradient, Adjoint) and isinstance(gradient.solver, ScipySolver)
    )
    sol = _solve(
        func,
        y0,
        t0=ts[0],
        t1=ts[-1] if event is None else math.copysign(math.inf, ts[-1] - ts[0]),
        solver=config.solver,
        controller=config.controller,
        saveat=SaveAt(ts=t) if event is None else SaveAt(ts=t[:1], t1=True),
        dt0=config.dt0,
        jump_ts=config.jump_ts,
        step_ts=config.step_ts,
        max_steps=config.spec.max_steps,
        throw=True,
        gradient=gradient,
        make_loop=make_loop if scipy else _make_loop,
        event=event,
        event_time_gradient=False,  # torchdiffeq's: odeint_event adds it
        compile=config.spec.compile,
    )
    if event is None:
        return sol.ys
    assert sol.event_t is not None  # throw=True: a solve that ends, ends at the event
    assert event_fn is not None
    event_t = sol.event_t.to(t)
    if torch.is_grad_enabled():
        # The event time's gradient, which torchdiffeq's odeint_adjoint gives as zero;
        # the solution stays the state at that time, as torchdiffeq's (odeint_event
        # links the event time's gradient into it).
        event_t, _ = _with_event_gradient(func, y0, event_fn, t[0], event_t, sol.ys)
    return event_t, sol.ys


@dataclass(frozen=True)
class _Config:
    """A resolved spec, and where one call steps: its grid, jumps and step times."""

    spec: OdeSpec
    dt0: float | None
    jump_ts: Any
    step_ts: Any

    @property
    def solver(self) -> AbstractSolver:
        return self.spec.solver

    @property
    def controller(self) -> AbstractController:
        assert self.spec.controller is not None  # set by OdeSpec
        return self.spec.controller


GridArgs = tuple[VectorField, State, Tensor]
"""``(func, y0, t)`` of the forward solve, from which fixed-step grids are built."""


def _configure(
    method: str,
    options: Mapping[str, Any] | None,
    rtol: float,
    atol: float,
    ts: list[float],
    name: str = "",
    grid: GridArgs | None = None,
) -> _Config:
    """Translate a method name and torchdiffeq options into odecore objects.

    ``grid`` is ``(func, y0, t)`` of the forward solve: the grids of ``n_steps`` and
    ``grid_constructor``, and the default grid ``t``, are built from it as tensors
    (with their graph) and passed as ``step_ts``; ``step_size`` steps from ``t[0]``,
    whose gradient the solve's clock carries. The adjoint's backward solve has none:
    its fixed steps are ``dt0``.
    """
    opts = dict(options or {})
    if method == SCIPY_SOLVER:
        method, opts = _scipy_solver(opts, name)
    solver = solver_for(method, name)
    known: tuple[str, ...] = ADAPTIVE_OPTIONS if solver.adaptive else FIXED_OPTIONS
    if isinstance(solver, AbstractImplicitRK) and not solver.adaptive:
        known = IMPLICIT_OPTIONS
    if isinstance(solver, ScipySolver):
        lsoda = ("min_step",) if solver.method == "LSODA" else ()
        known = ("first_step", "max_step", *lsoda, *_CALL_OPTIONS, "max_num_steps")
    unknown = sorted(set(opts) - set(known))
    if unknown:
        raise ConfigurationError(
            f"Unknown {name}option(s) {unknown} for method {method!r}; known options: "
            f"{', '.join(known)}."
        )
    call = {key: opts.pop(key) for key in [*_CALL_OPTIONS, *_GRID_OPTIONS] if key in opts}
    spec = resolve(method, rtol, atol, opts.pop("gradient", "backprop"), opts, name)
    if isinstance(spec.solver, ScipySolver) or spec.solver.adaptive:
        return _Config(spec, spec.dt0, call.get("jump_t"), call.get("step_t"))
    solver = _with_interp(call, spec.solver, name)
    spec = replace(spec, solver=solver)
    span = abs(ts[-1] - ts[0])
    perturb = call.get("perturb", False)
    if not isinstance(perturb, bool):
        raise TypeError(f"The option `perturb` must be True or False, got {perturb!r}.")
    if "grid_constructor" in call and (spec.dt0 is not None or spec.n_steps is not None):
        given = "step_size" if spec.dt0 is not None else "n_steps"
        raise ConfigurationError(
            "The options `step_size`, `n_steps` and `grid_constructor` each set the whole "
            f"grid of a fixed-step method; give one of them, got {given}, grid_constructor."
        )
    step_t = call.get("step_t")
    extra = _as_floats("step_t", step_t)  # refuses listed tensors that require grad
    step_ts: Any = step_t
    ends: list[float]  # every step end, for `perturb`
    dt0: float
    if spec.dt0 is not None:
        dt0 = spec.dt0
        ends = []
        if perturb:  # the grid only for `perturb`: the solve checks and counts the steps
            sized = _step_size_grid(ts[0], ts[-1], dt0)
            ends = [*sized, *extra]
            if grid is not None:
                # `perturb` makes every step end a jump, given as a number: the steps
                # would land on constants and stop moving with t[0]. As tensors from
                # `t`, they keep its gradient, as without `perturb`.
                step_ts = _with_step_t(_step_size_tensor(grid[2], sized, dt0), step_t)
    elif spec.n_steps is not None:
        n = spec.n_steps
        if span == 0:
            dt0, ends = 1.0, list(ts)
        elif grid is None:  # the adjoint's backward solve: uniform steps of dt0
            dt0 = span / n
            ends = [ts[0] + (ts[-1] - ts[0]) * k / n for k in range(n)] + [ts[-1], *extra]
        else:
            uniform = _uniform_grid(grid[2], n)
            dt0, step_ts = span, _with_step_t(uniform, step_t)
            ends = [*_times(uniform), *extra]
    elif "grid_constructor" in call:
        if grid is None:
            raise ConfigurationError(
                f"The {name}option `grid_constructor` is not available for the adjoint's "
                "backward solve, which steps on the forward grid (the forward's "
                "`grid_constructor`), by `step_size` or by `n_steps`; pass `adjoint_options` "
                "without it, or with one of the others."
            )
        built = _constructed_grid(call["grid_constructor"], grid, ts)
        dt0, step_ts = (span if span > 0 else 1.0), _with_step_t(built, step_t)
        ends = [*_times(built), *extra]
    else:
        # torchdiffeq's default for fixed-step methods: one step per interval of `t`,
        # on `t` itself: its times are the step times, with their graph.
        dt0 = span if span > 0 else 1.0
        ends = [*ts, *extra]
        step_ts = ends if grid is None else _with_step_t(grid[2].to(torch.float64), step_t)
    jump_ts = call.get("jump_t")
    if perturb:
        # Every step end is a jump: the first stage of a step sees f's limit from
        # after its start, the last from before its end, torchdiffeq's perturbation.
        jump_ts = [*_jump_times(jump_ts), *ends]  # refused where it requires grad
    return _Config(spec, dt0, jump_ts, step_ts)


def _adams(
    func: VectorField,
    y0: State,
    t: Tensor,
    ts: list[float],
    rtol: float,
    atol: float,
    method: str,
    options: Mapping[str, Any] | None,
    event_fn: EventFn | None,
    wrap: Callable[[Callable[[Tensor, Tensor], Tensor]], Any] | None = None,
    grid: Tensor | None = None,
) -> State | tuple[Tensor, State]:
    """:func:`odeint` with an Adams method: the grid as for the fixed-step methods (or
    ``grid``, already built from them); with ``event_fn``, steps of ``step_size`` until
    the event (see :func:`_adams_event`). ``wrap`` replaces the flat field the steps
    call (the adjoint's search for tensors)."""
    _check_state(y0)
    rtol, atol = positive("rtol", rtol), positive("atol", atol)
    opts = dict(options or {})
    adams = adams_for(method, opts)
    given = [o for o in ("step_size", "n_steps", "grid_constructor") if o in opts]
    if len(given) > 1:
        raise ConfigurationError(
            "The options `step_size`, `n_steps` and `grid_constructor` each set the whole "
            f"grid of a fixed-step method; give one of them, got {', '.join(given)}."
        )
    field, flat, split = flat_field(func, y0)
    field = field if wrap is None else wrap(field)
    callback = getattr(func, "callback_step", None)
    unsupported = [n for n in CALLBACKS[1:] if getattr(func, n, None) is not None]
    warn_unsupported_callbacks(method, unsupported, FIXED_STEPS)

    def on_step(t0: Tensor, y: Tensor, dt: Tensor) -> object:
        assert callback is not None
        return callback(t0, split(y), dt)

    steps = None if callback is None else on_step
    if event_fn is not None:
        h = positive("step_size", opts["step_size"])  # _check_event asked for it
        event_t, ys = _adams_event(adams, field, flat, t, h, rtol, atol, event_fn, split, steps)
        solution = split(ys)
        if torch.is_grad_enabled():  # the event time's gradient, as for the other methods
            event_t, _ = _with_event_gradient(func, y0, event_fn, t[0], event_t, solution)
        return event_t, solution
    if len(ts) == 1:
        return split(flat.unsqueeze(0))
    grid = _adams_grid(opts, (func, y0, t), ts) if grid is None else grid
    return split(adams.integrate(field, flat, grid.to(flat.device), t, rtol, atol, steps))


def _adams_grid(opts: Mapping[str, Any], grid: GridArgs, ts: list[float]) -> Tensor:
    """The grid of an Adams solve of ``grid = (func, y0, t)``: by ``step_size``,
    ``n_steps`` or ``grid_constructor``, or ``t`` itself."""
    t = grid[2]
    if "step_size" in opts:
        h = positive("step_size", opts["step_size"])
        return _step_size_tensor(t, _step_size_grid(ts[0], ts[-1], h), h)
    if "n_steps" in opts:
        n = opts["n_steps"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"`n_steps` must be a positive integer, got {n!r}.")
        return _uniform_grid(t, n)
    if "grid_constructor" in opts:
        return _constructed_grid(opts["grid_constructor"], grid, ts)
    return t


_MAX_EVENT_STEPS = OdeSpec.max_steps  # the step budget of an Adams solve until an event


def _adams_event(
    adams: AdamsBashforthMoulton,
    field: Callable[[Tensor, Tensor], Tensor],
    flat: Tensor,
    t: Tensor,
    h: float,
    rtol: float,
    atol: float,
    event_fn: EventFn,
    split: Callable[[Tensor], State],
    on_step: Callable[[Tensor, Tensor, Tensor], object] | None,
) -> tuple[Tensor, Tensor]:
    """The event time and the flat states at ``t[0]`` and at the event of an Adams solve
    in steps of ``h``, the event found on the cubic Hermite interpolant of its step.

    The steps are taken twice: without a graph to find the event, then with one (and
    the step callbacks) up to the event's step, whose interpolant gives the state there.
    """
    t0 = float(t[0])
    direction = 1.0 if float(t[-1]) >= t0 else -1.0
    value, at_start = combined_event(event_fn, t0, flat.detach(), split)
    if at_start:
        return t[0].detach().clone(), torch.stack([flat, flat])
    k = torch.arange(_MAX_EVENT_STEPS + 1, dtype=torch.float64, device=flat.device)
    grid = (t.to(torch.float64)[0] + direction * h * k).to(flat.dtype)

    def crossed(t1: Tensor, y1: Tensor) -> bool:
        return not float(value(t1, y1)) > 0  # NaN reads as "not yet"

    with torch.no_grad():
        ys, fs, finite, failed = adams.march(field, flat, grid.detach(), rtol, atol, None, crossed)
        n = len(ys) - 1
        reached = float(grid[n])
        if failed is not None or finite.first_false() is not None:
            raise SolverError(
                f"odeint stopped at t = {reached!r} before the event: a step failed (the "
                "same call without `event_fn` and with `t` up to there says why).",
                status=Status.NONFINITE if failed is None else failed[1], t=reached,
            )  # fmt: skip
        if not crossed(grid[n], ys[-1]):
            raise SolverError(
                f"The event did not happen within `max_steps` = {_MAX_EVENT_STEPS} steps.",
                status=Status.MAX_STEPS_REACHED, t=reached,
            )  # fmt: skip
        start = float(grid[n - 1])
        a, b, h = direction * start, direction * reached, reached - start
        f_b = field(grid[n], ys[n])

        def c(sigma: float) -> float:
            s = (direction * sigma - start) / h
            y = cubic_hermite(s, h, ys[n - 1], fs[n - 1], ys[n], f_b)
            return float(value(torch.tensor(direction * sigma, dtype=t.dtype), y))

        t_e = direction * _find_root(c, a, b, c(a), c(b))
    out = torch.stack([t[0].detach(), torch.tensor(t_e, dtype=t.dtype, device=t.device)])
    ys_out = adams.integrate(field, flat, grid[: n + 1], out, rtol, atol, on_step)
    return out[1], ys_out


Call = tuple[float, float, str, Mapping[str, Any] | None]
"""``(rtol, atol, method, options)`` of a solve."""
AdjointCall = tuple[float | None, float | None, str | None, Mapping[str, Any] | None]
"""``(adjoint_rtol, adjoint_atol, adjoint_method, adjoint_options)``."""


def _adams_adjoint(
    func: VectorField,
    y0: State,
    t: Tensor,
    ts: list[float],
    call: Call,
    back_call: AdjointCall,
    adjoint_params: Sequence[Tensor] | None,
    event_fn: EventFn | None,
) -> State | tuple[Tensor, State]:
    """:func:`odeint_adjoint` with an Adams method: the forward solve of :func:`_adams`
    without a graph, and a backward one of the adjoint equations by Adams as well."""
    rtol, atol, method, options = call
    back_rtol, back_atol, back_method, back_options = back_call
    if back_method is not None and back_method not in ADAMS_METHODS:
        raise ConfigurationError(
            f"`adjoint_method` must be an Adams method with the Adams method {method!r} "
            f"({', '.join(ADAMS_METHODS)}), got {back_method!r}."
        )
    back_method = back_method or method
    inherited = options if back_method == method else None  # torchdiffeq's: `{}` is given
    back_opts = dict((back_options if back_options is not None else inherited) or {})
    back = adams_for(back_method, back_opts)
    back_h = positive("step_size", back_opts["step_size"]) if "step_size" in back_opts else None
    module = func if isinstance(func, torch.nn.Module) else None
    found: list[_Reads] = []  # the field as the forward solve calls it, searched for tensors

    def wrap(field: Callable[[Tensor, Tensor], Tensor]) -> _Reads:
        found.append(_Reads(field))
        return found[-1]

    search = adjoint_params is None and torch.is_grad_enabled()
    # One grid for both passes: a `grid_constructor` is called once, as by torchdiffeq's
    # forward pass, so that the backward solve retraces the grid the forward one took.
    grid = None
    if event_fn is None and len(ts) > 1:
        grid = _adams_grid(dict(options or {}), (func, y0, t), ts)
    with torch.no_grad():
        forward = _adams(
            func, y0, t, ts, rtol, atol, method, options, event_fn,
            wrap if search else None, grid,
        )  # fmt: skip
    if event_fn is not None:
        event_t, solution = forward
        assert isinstance(event_t, Tensor)
        ends = event_t.reshape(1).to(t)
        t, ts = torch.cat([t[:1], ends]), [ts[0], float(event_t)]
    else:
        solution = forward
    field, flat, split = flat_field(func, y0)
    params = found_tensors(adjoint_params, module, found[0] if found else None)
    if grid is None:  # an event's steps of `step_size` up to it, or one time
        grid = _adams_grid(dict(options or {}), (func, y0, t), ts)
    spec = _AdamsAdjoint(
        field, split, t.detach().to(torch.float64), grid.detach(), back, back_h,
        positive("adjoint_rtol", rtol if back_rtol is None else back_rtol),
        positive("adjoint_atol", atol if back_atol is None else back_atol),
        getattr(func, "callback_step_adjoint", None), module, training_modes(module),
    )  # fmt: skip
    ys_flat = _flat_of(solution, y0)
    ys = reverse_only(_AdamsAdjointFunction, spec, ys_flat, flat, t, *params)
    out = split(ys)
    if event_fn is None:
        return out
    event_t = t[-1].detach().clone()
    if torch.is_grad_enabled():
        event_t, _ = _with_event_gradient(func, y0, event_fn, t[0], event_t, out)
    return event_t, out


def _flat_of(solution: State, y0: State) -> Tensor:
    """The stacked solution as one flat tensor per time, as :func:`flat_field` keeps it."""
    if isinstance(y0, tuple):
        assert isinstance(solution, tuple)
        return torch.cat([s.reshape(s.shape[0], -1) for s in solution], dim=1)
    assert isinstance(solution, Tensor)
    return solution


@dataclass(frozen=True)
class _AdamsAdjoint:
    """What the backward pass of an Adams solve needs: the flat field, the output times,
    the forward grid (which the backward solve retraces, or ``step_size``), the backward
    method and tolerances, the field's ``callback_step_adjoint`` and its module."""

    field: Callable[[Tensor, Tensor], Tensor]
    split: Callable[[Tensor], State]
    t: Tensor
    grid: Tensor
    back: AdamsBashforthMoulton
    step_size: float | None
    rtol: float
    atol: float
    callback: Callable[..., object] | None
    module: torch.nn.Module | None = None
    # The module's training modes at the forward solve, the backward pass's too.
    modes: tuple[tuple[torch.nn.Module, bool], ...] = ()

    def interval(self, i: int) -> Tensor:
        """The backward solve's grid from ``t[i]`` to ``t[i - 1]``."""
        a, b = float(self.t[i]), float(self.t[i - 1])
        if self.step_size is not None:
            ends = _step_size_grid(a, b, self.step_size)
            return torch.tensor(ends, dtype=torch.float64)
        g = self.grid.tolist()
        inner = [x for x in g if min(a, b) < x < max(a, b)]
        return torch.tensor([a, *sorted(inner, reverse=b < a), b], dtype=torch.float64)

    def backward(
        self, ys: Tensor, grad_ys: Tensor, params: Sequence[Tensor], times: bool
    ) -> tuple[Tensor, Tensor | None, list[Tensor]]:
        """The gradients with respect to ``y0``, to the output times (with ``times``) and
        to ``params``. The state of the backward solve is ``(y, a, *dL/dparams)`` and,
        with ``times``, torchdiffeq's ``dL/dt0`` last."""
        shape, n = ys.shape[1:], ys[0].numel()
        sizes = [q.numel() for q in params]
        a = grad_ys[-1]
        grads = [torch.zeros_like(q) for q in params]
        t_grads = torch.zeros_like(self.t)
        adj_t = ys.new_zeros(1)

        def augmented(tt: Tensor, z: Tensor) -> Tensor:
            with torch.enable_grad():
                y = z[:n].detach().view(shape).requires_grad_(True)
                tt = tt.detach().requires_grad_(times)
                fy = self.field(tt, y)
                inputs = (y, *params, *((tt,) if times else ()))
                # retain_graph: a parameter may be reached through a graph outside the
                # field (a closed-over tensor computed from a leaf), shared by every call.
                vjps = torch.autograd.grad(
                    fy,
                    inputs,
                    -z[n : 2 * n].view(shape),
                    allow_unused=True,
                    retain_graph=bool(params),
                )
            parts = [
                fy,
                *(v if v is not None else torch.zeros_like(q) for v, q in zip(vjps, inputs)),
            ]
            return torch.cat([v.detach().reshape(-1).to(z.dtype) for v in parts])

        def on_step(tt: Tensor, z: Tensor, dt: Tensor) -> object:
            assert self.callback is not None
            rest = torch.split(z[2 * n : 2 * n + sum(sizes)], sizes)
            y, adj = self.split(z[:n].view(shape)), self.split(z[n : 2 * n].view(shape))
            return self.callback(tt, (y, adj, *(g.view_as(q) for g, q in zip(rest, params))), dt)

        for i in range(len(self.t) - 1, 0, -1):
            if times:  # an output time moves its output along the field
                t_grads[i] = (grad_ys[i] * self.field(self.t[i].to(ys.dtype), ys[i])).sum()
                adj_t = adj_t - t_grads[i].to(adj_t.dtype)
            z0 = torch.cat(
                [ys[i].reshape(-1), a.reshape(-1), *(g.reshape(-1) for g in grads)]
                + ([adj_t] if times else [])
            )
            grid = self.interval(i).to(ys)
            done = self.back.integrate(
                augmented, z0, grid, grid[[0, -1]], self.rtol, self.atol,
                None if self.callback is None else on_step,
            )[-1]  # fmt: skip
            a = done[n : 2 * n].view(shape) + grad_ys[i - 1]
            rest = torch.split(done[2 * n : 2 * n + sum(sizes)], sizes)
            grads = [g.view_as(q) for g, q in zip(rest, params)]
            adj_t = done[-1:] if times else adj_t
        t_grads[0] = adj_t[0].to(t_grads.dtype)
        return a, t_grads if times else None, grads


class _AdamsAdjointFunction(ReverseOnly):
    """``(ys, y0, t, *params) -> ys``: the forward solve's states, whose backward
    integrates the adjoint equations (:class:`_AdamsAdjoint`)."""

    what = "odeint_adjoint's gradient"

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, spec: _AdamsAdjoint, ys: Tensor, y0: Tensor, t: Tensor, *params: Tensor
    ) -> Tensor:
        ctx.spec, ctx.t_dtype = spec, t.dtype
        ctx.save_for_backward(ys, *params)
        return ys.clone()

    @staticmethod
    def backward(ctx: Any, grad_ys: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        first_order("odeint_adjoint's gradient", "Use odeint for higher-order gradients.")
        check_unbatched(grad_ys, "odeint_adjoint's gradient")
        spec: _AdamsAdjoint = ctx.spec
        ys, *params = ctx.saved_tensors
        with torch.no_grad(), as_solved(spec.module, spec.modes):
            a, t_grads, grads = spec.backward(ys, grad_ys, params, ctx.needs_input_grad[3])
        t_grad = None if t_grads is None else t_grads.to(ctx.t_dtype)
        return (None, None, a, t_grad, *grads)


def _scipy_solver(opts: dict[str, Any], name: str) -> tuple[str, dict[str, Any]]:
    """torchdiffeq's ``scipy_solver`` options as the method ``scipy:<solver>`` and its options."""
    unknown = sorted(set(opts) - set(_SCIPY_SOLVER_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"Unknown {name}option(s) {unknown} for method {SCIPY_SOLVER!r}; known options: "
            f"{', '.join(_SCIPY_SOLVER_OPTIONS)}."
        )
    solver = opts.pop("solver", "LSODA")
    if solver not in SCIPY_METHODS:
        raise ConfigurationError(
            f"The {name}option `solver` of method {SCIPY_SOLVER!r} must name one of SciPy's "
            f"solve_ivp methods, {', '.join(SCIPY_METHODS)}; got {solver!r}."
        )
    if "min_step" in opts:
        min_step = nonnegative("min_step", opts.pop("min_step"))
        if min_step > 0 and solver != "LSODA":
            raise ConfigurationError(
                f"The {name}option `min_step` applies to SciPy's LSODA only (SciPy ignores "
                f"it for {solver}), got min_step={min_step!r} with solver={solver!r}; remove "
                "`min_step` or use solver='LSODA'."
            )
        if min_step > 0:
            opts["min_step"] = min_step
    return f"{SCIPY_PREFIX}{solver}", opts


def _with_interp(opts: dict[str, Any], solver: AbstractSolver, name: str) -> AbstractSolver:
    """``solver`` with torchdiffeq's ``interp``: ``"cubic"`` is the cubic Hermite
    interpolant on the step's ends (odecore's own for order <= 3), ``"linear"`` is refused."""
    if "interp" not in opts:
        return solver
    interp = opts["interp"]
    if interp not in ("linear", "cubic"):
        raise ConfigurationError(
            f"The {name}option `interp` must be 'linear' or 'cubic' (torchdiffeq's values), "
            f"got {interp!r}."
        )
    if interp == "cubic":
        if solver.order <= 3:
            return solver
        assert isinstance(solver, (AbstractExplicitRK, AbstractImplicitRK))  # by name
        return replace(solver, interpolation="cubic")
    raise ConfigurationError(
        f"The {name}option `interp='linear'` cannot be honoured: odecore reads times "
        "between grid points off an interpolant of the scheme's own order (cubic Hermite "
        f"on the step's ends for order <= 3; here order {solver.order}, with sub-steps), "
        "more accurate than torchdiffeq's 'linear'. Remove the option (or give 'cubic'), "
        "or put the output times on the grid."
    )


def _step_size_grid(t0: float, t1: float, h: float) -> list[float]:
    """The step ends of steps of size ``h`` from ``t0`` to ``t1``, the last one shorter.

    A step that would end within rounding of ``t1`` ends on it, as in the solve loop.
    """
    check_step_resolves("step_size", h, t0, t1, "Pass a larger `step_size`.")  # k h gets there
    span = abs(t1 - t0)
    direction = 1.0 if t1 >= t0 else -1.0
    ends = [t0]
    k = 1
    while k * h < span - SNAP * h:
        ends.append(t0 + direction * k * h)
        k += 1
    return [*ends, t1]


def _step_size_tensor(t: Tensor, ends: list[float], h: float) -> Tensor:
    """The grid ``ends`` of :func:`_step_size_grid` as a float64 tensor with ``t``'s
    graph: ``t[0] + k h`` and ``t[-1]``, the same values."""
    t64 = t.to(torch.float64)
    direction = 1.0 if ends[-1] >= ends[0] else -1.0
    k = torch.arange(len(ends) - 1, dtype=torch.float64, device=t.device)
    return torch.cat([t64[0] + (direction * k) * h, t64[-1].reshape(1)])


def _uniform_grid(t: Tensor, n: int) -> Tensor:
    """``n`` uniform steps from ``t[0]`` to ``t[-1]`` as a float64 tensor with ``t``'s graph.

    Float64 whatever ``t``'s dtype: the solve's times are Python floats, and jump and
    step times given as floats land on the same points.
    """
    t64 = t.to(torch.float64)
    start, end = t64[0], t64[-1]
    k = torch.arange(n, dtype=torch.float64, device=t.device)
    return torch.cat([start + (end - start) * (k / n), end.reshape(1)])


def _with_step_t(grid: Tensor, step_t: Any) -> Tensor:
    """``grid`` followed by the times of the ``step_t`` option, if any: a tensor with
    its graph, as ``step_t`` alone (with ``step_size``) is passed on."""
    if step_t is None:
        return grid
    if isinstance(step_t, Tensor):
        return torch.cat([grid, step_t.reshape(-1).to(grid.dtype)])
    extra = torch.tensor(_as_floats("step_t", step_t), dtype=grid.dtype, device=grid.device)
    return torch.cat([grid, extra])


def _constructed_grid(constructor: Any, grid: GridArgs, ts: list[float]) -> Tensor:
    """The grid ``constructor(func, y0, t)``, checked: 1-D, from ``t[0]`` to ``t[-1]``, monotone."""
    if not callable(constructor):
        raise TypeError(
            "The option `grid_constructor` must be a callable (func, y0, t) -> 1-D tensor "
            f"of times, got {type(constructor).__name__}."
        )
    out = constructor(*grid)
    if not isinstance(out, Tensor):
        raise TypeError(
            f"`grid_constructor` must return a 1-D torch.Tensor of times, got {type(out).__name__}."
        )
    if out.dim() != 1 or out.numel() < 2:
        raise ConfigurationError(
            "`grid_constructor` must return a 1-D tensor of at least two times, from t[0] "
            f"to t[-1]; got shape {tuple(out.shape)}."
        )
    if not out.is_floating_point():
        out = out.to(torch.float64)
    values = _times(out)
    if not all(math.isfinite(v) for v in values):
        raise ConfigurationError(f"`grid_constructor` returned non-finite times: {values}.")
    if values[0] != ts[0] or values[-1] != ts[-1]:
        raise ConfigurationError(
            f"`grid_constructor` must return a grid from t[0] = {ts[0]!r} to t[-1] = "
            f"{ts[-1]!r} exactly, got one from {values[0]!r} to {values[-1]!r}; set its first "
            "and last entries to t[0] and t[-1]."
        )
    direction = 1.0 if ts[-1] >= ts[0] else -1.0
    for i, (a, b) in enumerate(itertools.pairwise(values)):
        if (b - a) * direction <= 0:
            raise ConfigurationError(
                "`grid_constructor` must return times strictly "
                f"{'increasing' if direction > 0 else 'decreasing'}, like `t`; got "
                f"grid[{i}] = {a!r} and grid[{i + 1}] = {b!r}."
            )
    return out


def _times(value: Any) -> list[float]:
    if isinstance(value, Tensor):
        return [float(v) for v in value.detach().reshape(-1).tolist()]
    return [float(v) for v in value]
