"""``OdeSpec``: a solver choice as objects, and the one place a method name becomes them.

Every layer above odecore that takes a solver choice by name (``odeint``'s
``method``/``options``, ``odelayers``, ``odebench``'s command line) resolves it here,
once, with :meth:`OdeSpec.from_method`; below that point only objects travel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, final

import torch

from ._adams import ADAMS_METHODS
from ._backends import (
    SCIPY_METHODS,
    SCIPY_PREFIX,
    SCIPY_SOLVER,
    TORCHDIFFEQ_PREFIX,
    ScipySolver,
    scipy_integrate,
)
from ._controllers import ATOL, RTOL, AbstractController, ConstantStepSize, PIDController
from ._errors import ConfigurationError
from ._esdirk import Kvaerno5, with_solve_tolerances
from ._gradients import AbstractGradient, Adjoint, Autograd, Checkpoint
from ._implicit import (
    SDIRK2,
    TRBDF2,
    AbstractImplicitRK,
    GaussLegendre2,
    GaussLegendre4,
    GaussLegendre6,
    ImplicitEuler,
    ImplicitMidpoint,
    RadauIIA3,
    RadauIIA5,
    Trapezoid,
)
from ._reversible import Reversible
from ._rosenbrock import Rodas4, Rodas5P
from ._solve import Compile, check_compile
from ._solvers import (
    RK4,
    AbstractSolver,
    Bosh3,
    Dopri5,
    Dopri8,
    Euler,
    Fehlberg2,
    Heun,
    Heun3,
    HeunEuler,
    Midpoint,
    Ralston,
    RK4ThreeEighths,
    Tsit5,
)

FIXED_METHODS: dict[str, type[AbstractSolver]] = {
    "euler": Euler,
    "midpoint": Midpoint,
    "heun": Heun,
    "heun2": Heun,
    "heun3": Heun3,
    "ralston": Ralston,
    "rk4": RK4,
    "rk4_38": RK4ThreeEighths,
}
"""Fixed-step methods by name (``heun2`` is torchdiffeq's name of ``heun``)."""

IMPLICIT_METHODS: dict[str, type[AbstractSolver]] = {
    "implicit_euler": ImplicitEuler,
    "implicit_midpoint": ImplicitMidpoint,
    "trapezoid": Trapezoid,
    "gauss_legendre2": GaussLegendre2,
    "gauss_legendre4": GaussLegendre4,
    "gauss_legendre6": GaussLegendre6,
    "radauIIA3": RadauIIA3,
    "radauIIA5": RadauIIA5,
    "gl4": GaussLegendre4,
    "gl6": GaussLegendre6,
    "sdirk2": SDIRK2,
    "trbdf2": TRBDF2,
}
"""Fixed-step implicit Runge-Kutta methods by name (torchdiffeq's names: ``gl4`` and
``gl6`` are its newer names of ``gauss_legendre4`` and ``gauss_legendre6``), for stiff
problems. They step like :data:`FIXED_METHODS` and take the same options, and
``max_iters`` (the Newton iterations per step)."""

ADAPTIVE_METHODS: dict[str, type[AbstractSolver]] = {
    "adaptive_heun": HeunEuler,
    "fehlberg2": Fehlberg2,
    "bosh3": Bosh3,
    "dopri5": Dopri5,
    "tsit5": Tsit5,
    "dopri8": Dopri8,
    "kvaerno5": Kvaerno5,
}
"""Adaptive embedded pairs by name (``kvaerno5``, implicit, for stiff problems)."""

ROSENBROCK_METHODS: dict[str, type[AbstractSolver]] = {"rodas4": Rodas4, "rodas5p": Rodas5P}
"""Adaptive Rosenbrock methods by name, for stiff problems (linearly implicit, with a
:class:`~odecore.RosenbrockTableau` rather than a Butcher tableau). They take the
options of :data:`ADAPTIVE_OPTIONS`."""

GRADIENTS: Mapping[str, type[AbstractGradient]] = MappingProxyType(
    {"backprop": Autograd, "adjoint": Adjoint, "checkpoint": Checkpoint, "reversible": Reversible}
)
"""The gradient methods by name. ``"backprop"`` is :class:`Autograd` (backpropagation
through the solver's steps), ``"adjoint"`` :class:`Adjoint`, ``"checkpoint"``
:class:`Checkpoint`, ``"reversible"`` :class:`Reversible`."""

DEFAULT_METHOD = "dopri5"
"""The method when none is named (torchdiffeq's default)."""

_CALL_OPTIONS = ("jump_t", "step_t")
FIXED_OPTIONS = ("step_size", "n_steps", "jump_t", "step_t", "max_num_steps",
                 "grid_constructor", "perturb", "interp", "compile", "gradient")  # fmt: skip
"""Options accepted by fixed-step methods (``interp`` only as ``"cubic"``;
``compile``, True, False or ``"stepped"``, and ``gradient``, a key of
:data:`GRADIENTS` or a gradient object, are odecore's: a solve compiled with
``torch.compile``, and how :func:`odeint` differentiates it)."""
IMPLICIT_OPTIONS = (*FIXED_OPTIONS, "max_iters")
"""Options accepted by the implicit methods: the fixed-step ones and ``max_iters``."""
ADAPTIVE_OPTIONS = (
    "first_step",
    "safety",
    "ifactor",
    "dfactor",
    "pcoeff",
    "icoeff",
    "dcoeff",
    "max_step",
    "norm",
    "jump_t",
    "step_t",
    "max_num_steps",
    "min_step",
    "dtype",
    "compile",
    "gradient",
)
"""Options accepted by adaptive methods (``dtype`` only as ``torch.float64``;
``compile`` and ``gradient`` as for :data:`FIXED_OPTIONS`)."""

# The options that choose how to step, which a spec holds; the others belong to a call.
_FIXED_SPEC_OPTIONS = ("step_size", "n_steps", "max_num_steps", "compile")
_IMPLICIT_SPEC_OPTIONS = (*_FIXED_SPEC_OPTIONS, "max_iters")
# A spec's gradient is its own argument, not an option.
_ADAPTIVE_SPEC_OPTIONS = tuple(o for o in ADAPTIVE_OPTIONS if o not in (*_CALL_OPTIONS, "gradient"))
_SCIPY_SPEC_OPTIONS = ("first_step", "max_step", "max_num_steps")
_LSODA_SPEC_OPTIONS = (*_SCIPY_SPEC_OPTIONS, "min_step")

PLANNED_METHODS = ("adams",)
"""torchdiffeq's variable-order Adams method: planned, run through ``torchdiffeq:`` today."""

MULTISTEP_METHODS = tuple(ADAMS_METHODS)
"""torchdiffeq's fixed-grid Adams methods: :func:`odeint` runs them, no solver object."""

_ADAPTIVE_CONTROLLER_OPTIONS = (
    ("safety", "safety"),
    ("ifactor", "factor_max"),
    ("dfactor", "factor_min"),
    ("pcoeff", "pcoeff"),
    ("icoeff", "icoeff"),
    ("dcoeff", "dcoeff"),
    ("max_step", "dt_max"),
    ("norm", "norm"),
)
"""torchdiffeq's option names of the adaptive controller and :class:`PIDController`'s."""


@final
@dataclass(frozen=True)
class OdeSpec:
    """How to solve, as objects: solver, step-size controller, gradient method, steps.

    Everything :func:`solve` takes besides the problem (field, state, times, jumps,
    output times). Layers and models take one ``OdeSpec`` and pass its objects on
    unchanged; :meth:`from_method` is the one place where a method *name* and
    torchdiffeq-style options become these objects (:func:`odeint` uses it too).

    The defaults are odecore's one set: Dormand–Prince 5(4), ``rtol = 1e-7``,
    ``atol = 1e-9`` (torchdiffeq's), backpropagation through the steps.

    Args:
        solver: the solver object; default :class:`Dopri5`.
        controller: the step-size controller; ``None`` (default):
            ``PIDController()`` for an adaptive solver, :class:`ConstantStepSize`
            for a fixed-step one.
        gradient: the gradient method; default :class:`Autograd`.
        dt0: the first step (adaptive) or every step (fixed); ``None``: chosen by
            the controller (adaptive) or from ``n_steps``.
        n_steps: fixed-step solvers only: this many equal steps over the solve's
            span, instead of ``dt0``.
        max_steps: the step budget of one solve.
        compile: compile the solves with ``torch.compile``: ``True`` or
            ``"stepped"`` (see :func:`solve`'s ``compile``); the option ``compile``
            of :meth:`from_method` and :func:`odeint`.

    Raises:
        ConfigurationError: for an object of the wrong kind, ``n_steps`` with
            ``dt0`` or with an adaptive solver, or a count that is not positive.
        TypeError: if ``compile`` is not ``True``, ``False`` or ``"stepped"``.

    Example:
        >>> import odecore
        >>> spec = odecore.OdeSpec.from_method("rk4", options={"n_steps": 4},
        ...                                    gradient="adjoint")
        >>> spec.solver, spec.controller, spec.gradient.__class__.__name__
        (RK4(interpolation='auto'), ConstantStepSize(), 'Adjoint')
        >>> spec.step_size(t0=0.0, t1=2.0)
        0.5
    """

    solver: AbstractSolver = field(default_factory=Dopri5)
    controller: AbstractController | None = None
    gradient: AbstractGradient = field(default_factory=Autograd)
    dt0: float | None = None
    n_steps: int | None = None
    max_steps: int = 100_000
    compile: Compile = False

    def __post_init__(self) -> None:
        for name, kind in (
            ("solver", AbstractSolver),
            ("gradient", AbstractGradient),
        ):
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise ConfigurationError(
                    f"`{name}` must be an odecore {kind.__name__} (e.g. "
                    f"{'odecore.Dopri5()' if name == 'solver' else 'odecore.Adjoint()'}), "
                    f"got {value!r}; a method given by name goes through OdeSpec.from_method."
                )
        if self.controller is None:
            default = PIDController() if self.solver.adaptive else ConstantStepSize()
            object.__setattr__(self, "controller", default)
        elif not isinstance(self.controller, AbstractController):
            raise ConfigurationError(
                f"`controller` must be an odecore AbstractController, got {self.controller!r}."
            )
        if self.n_steps is not None:
            _check_count("n_steps", self.n_steps)
            if self.solver.adaptive:
                raise ConfigurationError(
                    f"`n_steps` applies to fixed-step solvers, got the adaptive {self.solver!r}; "
                    "give `dt0` (the first step) instead, or a fixed-step solver."
                )
            if self.dt0 is not None:
                raise ConfigurationError("Give one of `dt0` and `n_steps`, not both.")
        if self.dt0 is not None:
            object.__setattr__(self, "dt0", positive("dt0", self.dt0))
        _check_count("max_steps", self.max_steps)
        check_compile(self.compile)

    def compile_blockers(self) -> tuple[str, ...]:
        """What of this spec keeps its solves from compiling, in words; empty when
        ``compile=True`` would compile them.

        Compiled solves cover explicit Runge-Kutta methods, fixed-step with
        :class:`ConstantStepSize` or adaptive with :class:`PIDController`, the
        Rosenbrock methods with :class:`PIDController`, and :class:`Autograd`, or
        for the explicit methods :class:`Checkpoint` and :class:`Adjoint` (see
        :func:`solve`'s ``compile``). A solve of a spec that compiles may still run
        eagerly for what the spec does not hold: an event, dense output, output times
        that require grad, jumps of an adaptive solve, or a field that does not trace.

        Example:
            >>> import odecore
            >>> odecore.OdeSpec.from_method("rk4", options={"n_steps": 8}).compile_blockers()
            ()
            >>> odecore.OdeSpec.from_method("rodas5p", gradient="adjoint").compile_blockers()
            ('the gradient method Adjoint',)
        """
        from ._compiled import method_reasons  # here: as in solve, only when asked

        assert self.controller is not None  # set in __post_init__
        return tuple(method_reasons(self.solver, self.controller, self.gradient))

    @classmethod
    def from_method(
        cls,
        method: str = DEFAULT_METHOD,
        *,
        rtol: float = RTOL,
        atol: float = ATOL,
        gradient: str | AbstractGradient = "backprop",
        options: Mapping[str, Any] | None = None,
    ) -> OdeSpec:
        """The spec of a method by name, with torchdiffeq's tolerances and options.

        Args:
            method: a key of :data:`FIXED_METHODS`, :data:`ADAPTIVE_METHODS`,
                :data:`ROSENBROCK_METHODS` or :data:`IMPLICIT_METHODS`, or
                ``scipy:<name>`` (one of SciPy's ``solve_ivp`` methods).
            rtol: relative tolerance of adaptive methods.
            atol: absolute tolerance of adaptive methods.
            gradient: a key of :data:`GRADIENTS` or a gradient object.
            options: torchdiffeq's options that choose how to step: for fixed-step
                methods ``step_size`` or ``n_steps`` (implicit ones also
                ``max_iters``, Newton's iterations per step); for adaptive ones
                ``first_step``, ``min_step``, ``max_step``, ``safety``, ``ifactor``,
                ``dfactor``, ``pcoeff``, ``icoeff``, ``dcoeff``, ``norm`` and
                ``dtype=torch.float64``; for SciPy's ``first_step``, ``max_step``
                and (LSODA) ``min_step``; for all ``max_num_steps``, and for
                odecore's own methods ``compile`` (True, False or ``"stepped"``). Options about
                one call's times (``jump_t``, ``step_t``, ``grid_constructor``,
                ``perturb``, ``interp``) belong to :func:`odeint`.

        Returns:
            The spec.

        Raises:
            ConfigurationError: an unknown method, gradient or option (the message
                lists the known ones), or a planned method.
            ValueError: a tolerance or option value out of range.

        Example:
            >>> import odecore
            >>> spec = odecore.OdeSpec.from_method("tsit5", rtol=1e-3, atol=1e-3)
            >>> spec.controller.rtol, spec.controller.atol, spec.gradient
            (0.001, 0.001, Autograd())
            >>> odecore.OdeSpec.from_method("dopri5", gradient="adjiont")
            Traceback (most recent call last):
            ...
            odecore._errors.ConfigurationError: Unknown `gradient` 'adjiont'; known: ...
        """
        return resolve(method, rtol, atol, gradient, options)

    def step_size(self, t0: float, t1: float) -> float | None:
        """``dt0``, or for ``n_steps`` the size of one of them over ``[t0, t1]``.

        Args:
            t0: where the solve starts.
            t1: where it ends.

        Returns:
            The first (adaptive) or fixed step size; ``None`` when the controller
            chooses it.
        """
        if self.n_steps is not None:
            return abs(t1 - t0) / self.n_steps
        return self.dt0


def resolve(
    method: str,
    rtol: float,
    atol: float,
    gradient: str | AbstractGradient,
    options: Mapping[str, Any] | None,
    name: str = "",
) -> OdeSpec:
    """:meth:`OdeSpec.from_method`, with ``name`` prefixing the arguments in messages
    (``"adjoint_"`` for the backward solve of :func:`odeint_adjoint`)."""
    opts = dict(options or {})
    solver = solver_for(method, name)
    known: tuple[str, ...]
    if isinstance(solver, ScipySolver):
        known = _LSODA_SPEC_OPTIONS if solver.method == "LSODA" else _SCIPY_SPEC_OPTIONS
    elif isinstance(solver, AbstractImplicitRK) and not solver.adaptive:
        known = _IMPLICIT_SPEC_OPTIONS
    else:
        known = _ADAPTIVE_SPEC_OPTIONS if solver.adaptive else _FIXED_SPEC_OPTIONS
    unknown = sorted(set(opts) - set(known))
    if unknown:
        raise ConfigurationError(
            f"Unknown {name}option(s) {unknown} for method {method!r}; known options: "
            f"{', '.join(known)}."
        )
    for key, value in opts.items():
        _without_grad(f"{name}options['{key}']", value)
    rtol = positive(f"{name}rtol", rtol)
    atol = positive(f"{name}atol", atol)
    max_steps = opts.get("max_num_steps", 100_000)
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"`max_num_steps` must be a positive integer, got {max_steps!r}.")
    grad = gradient_for(gradient)
    compile = opts.get("compile", False)
    check_compile(compile, "option ")
    first = positive("first_step", opts["first_step"]) if "first_step" in opts else None
    if isinstance(solver, ScipySolver):
        max_step = positive("max_step", opts["max_step"]) if "max_step" in opts else math.inf
        if "min_step" in opts:  # 0: none, as for odecore's methods and `scipy_solver`
            solver = ScipySolver(solver.method, min_step=nonnegative("min_step", opts["min_step"]))
        controller = PIDController(rtol=rtol, atol=atol, dt_max=max_step)
        return OdeSpec(solver, controller, grad, dt0=first, max_steps=max_steps)
    if solver.adaptive:
        kwargs: dict[str, Any] = {"rtol": rtol, "atol": atol}
        kwargs.update({f: opts[o] for o, f in _ADAPTIVE_CONTROLLER_OPTIONS if o in opts})
        if "min_step" in opts:
            kwargs["dt_min"] = nonnegative("min_step", opts["min_step"])
        if "dtype" in opts and opts["dtype"] is not torch.float64:
            raise ConfigurationError(
                f"The option `dtype` can only be torch.float64 here, got {opts['dtype']!r}: "
                "odecore does its time arithmetic in float64 (Python floats) whatever the "
                "state's dtype, as torchdiffeq does by default. Remove the option."
            )
        solver = with_solve_tolerances(solver, rtol, atol)  # an implicit pair's Newton
        return OdeSpec(
            solver, PIDController(**kwargs), grad, dt0=first, max_steps=max_steps, compile=compile
        )
    if "step_size" in opts and "n_steps" in opts:
        raise ConfigurationError("Give one of the options `step_size` and `n_steps`, not both.")
    if "max_iters" in opts:
        max_iters = opts["max_iters"]
        if isinstance(max_iters, bool) or not isinstance(max_iters, int) or max_iters < 1:
            raise ValueError(f"`max_iters` must be a positive integer, got {max_iters!r}.")
        assert isinstance(solver, AbstractImplicitRK)  # the only solvers that know it
        solver = replace(solver, newton=replace(solver.newton, max_iters=max_iters))
    dt0 = positive("step_size", opts["step_size"]) if "step_size" in opts else None
    n_steps = opts.get("n_steps")
    if n_steps is not None and (
        isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1
    ):
        raise ValueError(f"`n_steps` must be a positive integer, got {n_steps!r}.")
    return OdeSpec(
        solver,
        ConstantStepSize(),
        grad,
        dt0=dt0,
        n_steps=n_steps,
        max_steps=max_steps,
        compile=compile,
    )


def gradient_for(gradient: str | AbstractGradient) -> AbstractGradient:
    """A gradient object from its name in :data:`GRADIENTS`, or the object itself."""
    if isinstance(gradient, AbstractGradient):
        return gradient
    if not isinstance(gradient, str) or gradient not in GRADIENTS:
        raise ConfigurationError(f"Unknown `gradient` {gradient!r}; known: {', '.join(GRADIENTS)}.")
    return GRADIENTS[gradient]()


def _planned(method: str, name: str) -> ConfigurationError:
    where = ", with a torchdiffeq release that has it (torchdiffeq 0.2.5 does not)."
    return ConfigurationError(
        f"`{name}method` {method!r} is planned for odecore but not built yet (the "
        f"fixed-grid {', '.join(MULTISTEP_METHODS)} are, in odeint); `{name}method="
        f"'{TORCHDIFFEQ_PREFIX}{method}'` runs it today in torchdiffeq{where} For a stiff "
        f"problem, odecore's implicit methods run here ({', '.join(IMPLICIT_METHODS)}), and "
        f"SciPy's: `{name}method='scipy:BDF'`, 'scipy:Radau' or 'scipy:LSODA'."
    )


def solver_for(method: str, name: str = "") -> AbstractSolver:
    """The solver object of a method name (``scipy:<name>`` included)."""
    if not isinstance(method, str):
        raise TypeError(f"`{name}method` must be a string, got {type(method).__name__}.")
    if method.startswith(SCIPY_PREFIX) and method.removeprefix(SCIPY_PREFIX) in SCIPY_METHODS:
        scipy_integrate(method)  # fail now, with the fix, if SciPy is missing
        return ScipySolver(method.removeprefix(SCIPY_PREFIX))
    if method in PLANNED_METHODS:
        raise _planned(method, name)
    if method.startswith(TORCHDIFFEQ_PREFIX) or method == SCIPY_SOLVER:
        instead = "odeint or odeint_adjoint, which hand the whole call to torchdiffeq"
        if method == SCIPY_SOLVER:
            instead = "odeint (with options={'solver': <name>}) or as 'scipy:<name>' here"
        raise ConfigurationError(
            f"`{name}method` {method!r} has no solver object for OdeSpec or solve: it runs "
            f"only in {instead}. Here: one of odecore's methods, or "
            f"{', '.join(SCIPY_PREFIX + m for m in SCIPY_METHODS)}."
        )
    if method in MULTISTEP_METHODS:
        raise ConfigurationError(
            f"`{name}method` {method!r} is a multistep method, which only odeint runs "
            "(backpropagating through its steps): it has no one-step solver object for "
            "OdeSpec, solve or the adjoint's solves. Use it with odeint, or a one-step "
            f"method here (e.g. 'rk4', 'dopri5'), or `{name}method='{TORCHDIFFEQ_PREFIX}"
            f"{method}'` in odeint_adjoint."
        )
    registries = (FIXED_METHODS, ADAPTIVE_METHODS, IMPLICIT_METHODS, ROSENBROCK_METHODS)
    cls = next((r[method] for r in registries if method in r), None)
    if cls is None:
        known = ", ".join(sorted(name for r in registries for name in r))
        scipy = ", ".join(SCIPY_PREFIX + m for m in SCIPY_METHODS)
        raise ConfigurationError(
            f"Unknown `{name}method` {method!r}; known methods: {known}; {scipy} (SciPy's "
            f"solvers, also as {SCIPY_SOLVER!r} with options={{'solver': <name>}}); "
            f"{TORCHDIFFEQ_PREFIX}<name> (any torchdiffeq method)."
        )
    return cls()


def _without_grad(name: str, value: Any) -> None:
    """Refuse a tensor that requires grad where a number is taken: it would become a
    float, and its gradient ``None``, without a word (torchdiffeq differentiates some
    of its options, such as ``step_size`` and ``first_step``)."""
    if isinstance(value, torch.Tensor) and value.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            f"`{name}` is a tensor that requires grad, but it is taken as a number: no "
            f"gradient would reach it. Pass a number or a detached tensor."
        )


def positive(name: str, value: Any) -> float:
    """``value`` as a float if it is a positive finite number."""
    _without_grad(name, value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}.")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"`{name}` must be a positive number, got {value!r}.")
    return float(value)


def nonnegative(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite number ``>= 0``."""
    _without_grad(name, value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}.")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"`{name}` must be a finite number >= 0, got {value!r}.")
    return float(value)


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"`{name}` must be a positive integer, got {value!r}.")
