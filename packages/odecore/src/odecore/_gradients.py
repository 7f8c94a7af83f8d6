"""Gradient methods: how a solve is differentiated.

A gradient method receives the solve loop as a function (``loop``) and the problem;
it never imports the module that defines the loop.
"""

from __future__ import annotations

import abc
import bisect
import contextlib
import math
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, final

import torch
from torch import Tensor

from ._controllers import (
    AbstractController,
    Adaptation,
    ConstantStepSize,
    PIDController,
    rms_norm,
)
from ._errors import ConfigurationError, SolverError, Status, first_order
from ._esdirk import _AbstractESDIRK
from ._implicit import AbstractImplicitRK
from ._rosenbrock import _AbstractRosenbrock
from ._solvers import AbstractSolver, Field, SolveState, StepResult
from ._transforms import ReverseOnly, check_unbatched
from ._transforms import apply as reverse_only

FlatField = Callable[[Tensor, Tensor], Tensor]
"""A vector field on the flat state, in the caller's time: ``f(t, y) -> dy/dt``."""


@dataclass
class Stats:
    """Counts of one solve.

    Attributes:
        nfe: evaluations of the vector field, forward.
        n_steps: steps attempted (accepted plus rejected), forward.
        n_accepted: accepted steps, forward.
        n_rejected: rejected steps, forward.
        nfe_backward: evaluations of the vector field and its vector-Jacobian product
            in the backward pass of :class:`Adjoint` (filled in when ``backward``
            runs; 0 for backpropagation, whose backward pass autograd does), those of
            the forward steps' dense output that it reads included.
        n_jacobians: Jacobians of the field evaluated by an implicit solver's steps,
            forward (those for the gradient's exact iteration matrices included; the
            sub-steps of dense output not).
        n_factorisations: iteration matrices LU-factorised in those steps.
        n_newton_iters: Newton iterations made in those steps.
    """

    nfe: int = 0
    n_steps: int = 0
    n_accepted: int = 0
    n_rejected: int = 0
    nfe_backward: int = 0
    n_jacobians: int = 0
    n_factorisations: int = 0
    n_newton_iters: int = 0


@dataclass
class LoopResult:
    """What one run of the solve loop returns.

    Attributes:
        ys: the flat state at each output time, ``None`` where not reached.
        stats: the loop's counts.
        status: how the loop ended.
        t_final: the last time reached, in the caller's time.
        step_ends: the end of every accepted step, in the caller's time.
        message: a backend's own account of a failure (scipy's message), a sentence;
            empty for odecore's loop, whose status says it all.
    """

    ys: list[Tensor | None]
    stats: Stats
    status: Status
    t_final: float
    step_ends: list[float] = field(default_factory=list)
    message: str = ""


@dataclass(frozen=True)
class TimeTensors:
    """Times of a solve that need gradients, for backpropagation through its steps.

    Attributes:
        t0: the solve's start time.
        t1: the solve's end time.
        tensors: 1-D tensors of times: the output times and the step times that the
            caller gave as tensors requiring gradients. A step that ends on a step
            time (or on ``t0`` or ``t1`` among the output times) ends on the tensor;
            the others are measured from the last such time before them (or ``t0``)
            by constant step sizes.
        output: the index in ``tensors`` of the output times, ``None`` if they are
            constants. Each output time has its own gradient, also where a step
            time or another output time has the same value.
    """

    t0: float
    t1: float
    tensors: tuple[Tensor, ...]
    output: int | None = None


class Loop(Protocol):
    """The solve loop as gradient methods receive it.

    ``loop(f, y0, t0, t1, ts, solver, controller, dt0)`` runs one solve from ``t0`` to
    ``t1`` with outputs at ``ts``; the jump and step times are those of the call
    being differentiated, plus ``step_ts``; ``on_step(t, y)`` sees every accepted
    step. It never raises for a failed solve: the status says. With ``times``, the
    step and output times carry gradients to those tensors (see :class:`TimeTensors`).
    """

    def __call__(
        self,
        f: FlatField,
        y0: Tensor,
        t0: float,
        t1: float,
        ts: Sequence[float],
        solver: AbstractSolver,
        controller: AbstractController,
        dt0: float | None,
        *,
        step_ts: Sequence[float] = (),
        on_step: Callable[[float, Tensor], None] | None = None,
        times: TimeTensors | None = None,
    ) -> LoopResult: ...


@dataclass
class Problem:
    """A solve, as a gradient method sees it: flat state, times as floats.

    Attributes:
        f: the vector field on the flat state.
        y0: the flat initial state.
        t0: start time.
        t1: end time (``t1 < t0`` for a backward solve).
        ts: output times, in the direction of integration.
        ts_tensor: the tensor the output times came from, when the caller gave one;
            gradients with respect to the times flow into it.
        solver: the forward solver.
        controller: the forward controller.
        dt0: the forward ``dt0``.
        module: ``f``'s module, when the caller's vector field is an ``nn.Module``.
        step_tensor: the step times (``step_ts``), when the caller gave a tensor that
            requires gradients (a grid built from the output times).
        jump_ts: the times where ``f`` jumps.
    """

    f: FlatField
    y0: Tensor
    t0: float
    t1: float
    ts: list[float]
    ts_tensor: Tensor | None
    solver: AbstractSolver
    controller: AbstractController
    dt0: float | None
    module: torch.nn.Module | None = None
    step_tensor: Tensor | None = None
    jump_ts: tuple[float, ...] = ()
    modes: tuple[tuple[torch.nn.Module, bool], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # As the forward solve finds them: a backward pass evaluates the field so.
        self.modes = training_modes(self.module)

    def times(self) -> TimeTensors | None:
        """The time tensors that need gradients now, or ``None``."""
        if not torch.is_grad_enabled():
            return None
        outputs = self.ts_tensor is not None and self.ts_tensor.requires_grad
        tensors = tuple(
            x for x in (self.ts_tensor, self.step_tensor) if x is not None and x.requires_grad
        )
        return TimeTensors(self.t0, self.t1, tensors, 0 if outputs else None) if tensors else None


class AbstractGradient(abc.ABC):
    """How a solve is differentiated: ``run`` runs the loop it is given."""

    @abc.abstractmethod
    def run(self, loop: Loop, problem: Problem) -> LoopResult:
        """Run the forward solve so that its outputs carry the right gradients."""


@final
@dataclass(frozen=True)
class Autograd(AbstractGradient):
    """Backpropagation through every operation of the solver (the default).

    Exact gradients of the discrete scheme, for everything the vector field reads
    and for the times: an output or step time given as a tensor that requires grad
    moves the steps that end on it, and the steps after it up to the next such time
    move with it by their constant sizes (as torchdiffeq's grids do); an output time
    inside a step moves along the dense output. Memory grows with the number of
    steps: every stage's activations are kept.

    Example:
        >>> import torch, odecore
        >>> y0 = torch.ones(2, requires_grad=True)
        >>> sol = odecore.solve(lambda t, y: -y, y0, t0=0.0, t1=1.0, solver=odecore.RK4(),
        ...                     dt0=0.1, gradient=odecore.Autograd())
        >>> sol.ys[-1].sum().backward()
        >>> y0.grad.shape
        torch.Size([2])
    """

    def run(self, loop: Loop, problem: Problem) -> LoopResult:
        p = problem
        return loop(p.f, p.y0, p.t0, p.t1, p.ts, p.solver, p.controller, p.dt0, times=p.times())


@final
@dataclass(frozen=True)
class Adjoint(AbstractGradient):
    """The continuous adjoint method (Chen et al. 2018): memory constant in the steps
    (with ``state="backsolve"``, the default for explicit solvers).

    The forward solve keeps no graph (each evaluation's is dropped once walked,
    below). The backward pass integrates the state (or, with
    ``state="interpolated"``, reads it from the forward steps), its adjoint
    ``a = dL/dy`` and the parameter gradients backward in time,
    ``da/dt = -a ∂f/∂y`` and ``dg/dt = -a ∂f/∂θ``, restarting at every output time
    (where ``dL/dy(t_i)`` is added to ``a``) and at every jump of ``jump_ts``, so a
    piecewise-constant weight function is handled exactly. Gradients reach ``y0``,
    the output times (``ts`` of :class:`SaveAt`, ``t`` of :func:`odeint_adjoint`) and
    the parameters: ``params`` if given, else every tensor requiring grad that the
    vector field reads — an ``nn.Module``'s parameters and whatever it or a plain
    function closes over, found by walking the graph of every evaluation of the
    forward solve (each made with a graph, then dropped; no evaluation is added), so
    a tensor read only at later times (``if t > 0.5``) is found too. A tensor that
    only the backward pass's evaluations read (where no forward evaluation went) has
    no gradient to receive: ``backward()`` raises :class:`ConfigurationError` for it
    rather than leave its ``.grad`` unset; pass ``params`` for such a field. An
    ``nn.Module`` field is evaluated in the backward pass in the training mode each
    of its submodules had in the forward solve (``eval()`` before ``backward()``
    changes nothing), and its buffers are left as the forward solve left them.

    The gradient is that of the continuous problem, accurate to the backward
    solve's tolerance; it differs from the discrete scheme's (:class:`Autograd`) by
    the forward error. Step times (``step_ts``) that require grad get zero: where the
    solver steps does not change the solution. A vector field that is not smooth
    (ReLU) makes the adjoint system discontinuous in time and the backward solve
    expensive.

    Args:
        solver: the backward solver; default the forward one.
        controller: the backward controller; default the forward one, but
            :class:`ConstantStepSize` for a backward ``solver`` with no error
            estimate (``RK4()``) after an adaptive forward solve.
        dt0: the backward solve's first (or fixed) step size; default the forward one.
        seminorm: measure the backward error on the state and its adjoint only, not
            on the parameter gradients (Kidger et al. 2021): fewer backward steps.
        params: the tensors to differentiate besides ``y0`` and the times; default
            every tensor requiring grad that an evaluation of the forward solve
            reads. Given, exactly these get gradients (each once, however often it
            is named; those that do not require grad are left out), and no tensor is
            searched for: the forward solve costs no more than without a gradient.
        state: where the backward pass takes the state ``y(t)`` from.
            ``"backsolve"`` integrates it backward in time with the adjoint: memory
            constant in the steps, but a stiff problem's damped modes grow backward
            in time, so on a stiff problem the gradient is wrong or the backward
            solve stops. ``"interpolated"`` keeps every accepted forward step and
            reads the state from the forward solver's dense output; the backward
            system is then the adjoint and the parameter gradients only, a linear
            ODE that is stable backward in time, and its solve stops at every
            forward step end. Its memory grows with the number of forward steps
            (the state and the solver's stages of each). ``"auto"`` (the default)
            is ``"interpolated"`` for a forward solver for stiff problems
            (:class:`AbstractImplicitRK`, :class:`Kvaerno5`, :class:`Rodas4`,
            :class:`Rodas5P`) and
            ``"backsolve"`` otherwise. ``"interpolated"`` needs odecore's own solve
            loop (not a ``scipy:`` method).

    Raises:
        ConfigurationError: if ``state`` is not ``"auto"``, ``"backsolve"`` or
            ``"interpolated"``; when the solve starts, if the backward solve cannot
            run (a ``PIDController`` for a backward ``solver`` with no error
            estimate, constant backward steps with no ``dt0``, ``seminorm`` without
            a ``PIDController``); in ``backward()``, if ``params`` was not given and
            the backward pass's evaluations read a tensor requiring grad that no
            forward evaluation read; in ``backward()`` through an output of a solve
            that failed (``throw=False``): the backward pass starts at ``t1``, which
            it did not reach, so only ``y0`` at ``t0`` has a gradient.

    Example:
        >>> import torch, odecore
        >>> rate = torch.nn.Parameter(torch.tensor(-0.5))
        >>> sol = odecore.solve(lambda t, y: rate * y, torch.ones(1), t0=0.0, t1=2.0,
        ...                     solver=odecore.Dopri5(),
        ...                     gradient=odecore.Adjoint(params=(rate,)))
        >>> sol.ys[-1].sum().backward()   # d/d(rate) exp(2 rate) = 2 exp(2 rate)
        >>> abs(rate.grad.item() - 2 * torch.exp(torch.tensor(-1.0)).item()) < 1e-5
        True
    """

    solver: AbstractSolver | None = None
    controller: AbstractController | None = None
    dt0: float | None = None
    seminorm: bool = False
    params: Sequence[Tensor] | None = field(default=None, compare=False)
    state: Literal["auto", "backsolve", "interpolated"] = "auto"

    def __post_init__(self) -> None:
        if self.params is not None:  # a generator would be spent by its first reader
            object.__setattr__(self, "params", tuple(self.params))
        if self.state not in ("auto", "backsolve", "interpolated"):
            raise ConfigurationError(
                f"`state` must be 'auto', 'backsolve' or 'interpolated', got {self.state!r}."
            )

    def backward_solve(
        self, solver: AbstractSolver, controller: AbstractController, dt0: float | None
    ) -> tuple[AbstractSolver, AbstractController, float | None]:
        """The backward solve's solver, controller and ``dt0`` for a forward solve with
        these: each as given, else the forward one's, but that a backward solver with
        no error estimate (``RK4()``) takes constant steps where the forward controller
        adapts them."""
        back = self.solver or solver
        if self.controller is not None:
            back_controller = self.controller
        elif isinstance(controller, PIDController) and not back.adaptive:
            back_controller = ConstantStepSize()
        else:
            back_controller = controller
        return back, back_controller, dt0 if self.dt0 is None else self.dt0

    def _check_backward(self, p: Problem) -> None:
        """Refuse, before the forward solve, a backward solve that cannot run."""
        back, controller, dt0 = self.backward_solve(p.solver, p.controller, p.dt0)
        name = type(back).__name__
        if isinstance(controller, PIDController) and not back.adaptive:
            raise ConfigurationError(
                f"`Adjoint(solver={name}(), controller=PIDController(...))`: `{name}()` "
                "has no error estimate, so the backward solve cannot adapt its steps; "
                "leave out `controller` (constant steps of `Adjoint(dt0=...)`), or give "
                "an embedded pair such as `Adjoint(solver=Dopri5())`."
            )
        if self.seminorm and not isinstance(controller, PIDController):
            raise ConfigurationError(
                "`Adjoint(seminorm=True)` needs a PIDController in the backward solve, "
                f"got {type(controller).__name__}."
            )
        if isinstance(controller, ConstantStepSize) and dt0 is None:
            raise ConfigurationError(
                f"`Adjoint(solver={name}())` takes constant steps in the backward solve, "
                "and neither `Adjoint(dt0=...)` nor the solve's `dt0` gives their size; "
                "pass `Adjoint(dt0=...)`, or give an embedded pair such as "
                "`Adjoint(solver=Dopri5())`."
            )

    def interpolates(self, solver: AbstractSolver) -> bool:
        """Whether the backward pass reads the state from the forward steps of a solve
        with this forward ``solver`` (see ``state``)."""
        if self.state == "auto":
            return takes_jacobian(solver)
        return self.state == "interpolated"

    def run(self, loop: Loop, problem: Problem) -> LoopResult:
        p = problem
        self._check_backward(p)
        reads, f = _parameters(self.params, p)
        steps: _Steps | None = None
        with torch.no_grad():
            if self.interpolates(p.solver):
                # Named as the solver it wraps, for the messages that name the solver.
                recorder = type(type(p.solver).__name__, (_Recorder,), {})(p.solver)
                result = loop(
                    f, p.y0, p.t0, p.t1, p.ts, recorder, p.controller, p.dt0,
                    on_step=recorder.accepted,
                )  # fmt: skip
                steps = _Steps(p, p.solver, recorder.steps)
                if result.status == Status.SUCCESS and len(steps.ends) != len(result.step_ends):
                    raise ConfigurationError(
                        "`Adjoint(state='interpolated')` needs the steps of odecore's own "
                        "solve loop; this solve's backend does not take them from the solver."
                    )
            else:
                result = loop(f, p.y0, p.t0, p.t1, p.ts, p.solver, p.controller, p.dt0)
        params = found_tensors(self.params, p.module, reads)
        if result.status != Status.SUCCESS or not p.ts:
            return _failed(result, p, params, "Adjoint")
        forward = torch.stack([y for y in result.ys if y is not None])
        ts = p.ts_tensor if p.ts_tensor is not None else torch.tensor(p.ts, dtype=torch.float64)
        spec = _AdjointSpec(self, loop, p, result.stats, len(params), steps, reads is not None)
        ys = reverse_only(_AdjointFunction, spec, forward, p.y0, ts, *params)
        step = p.step_tensor
        if step is not None and step.requires_grad and torch.is_grad_enabled():
            # Where the solver steps does not change the ODE's solution, whose gradient
            # this is: the step times' is zero, not None.
            ys = ys + (step.sum() * 0).to(ys.dtype)
        return replace(result, ys=list(ys.unbind(0)))


def _parameters(given: Sequence[Tensor] | None, p: Problem) -> tuple[_Reads | None, FlatField]:
    """How a method that keeps no graph forward finds the tensors to differentiate
    besides ``y0``: ``given`` (checked here), or, with grad mode on, a :class:`_Reads`
    that the forward solve calls in place of the field (returned twice: as the
    recorder, then as the field for the loop).
    """
    if given is not None:
        _checked(given)
        return None, p.f
    if not torch.is_grad_enabled():
        return None, p.f
    reads = _Reads(p.f)
    return reads, reads


def _checked(given: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """The ``params`` a user gave, as a tuple (a generator is read once), each a tensor."""
    given = tuple(given)
    for i, q in enumerate(given):
        if not isinstance(q, Tensor):
            raise TypeError(f"`params[{i}]` must be a Tensor, got {type(q).__name__}.")
    return given


def takes_jacobian(solver: AbstractSolver) -> bool:
    """Whether the steps of ``solver`` differentiate the field (its Jacobian): the
    implicit Runge-Kutta, ESDIRK and Rosenbrock methods."""
    return isinstance(solver, (AbstractImplicitRK, _AbstractESDIRK, _AbstractRosenbrock))


class _Unreached(ReverseOnly):
    """``(why, out, *inputs) -> out``: an output of a failed solve that a method which
    keeps no graph forward cannot differentiate; a backward pass that brings it a
    gradient (not zero: the solution's outputs are stacked, and a loss of one of them
    brings the others zeros) raises ``why`` instead of leaving the gradients of
    ``inputs`` without its share."""

    what = "The gradient of a failed solve's output"

    @staticmethod
    def forward(ctx: Any, why: str, out: Tensor, *inputs: Tensor) -> Tensor:  # type: ignore[override]
        ctx.why, ctx.n = why, len(inputs)
        ctx.set_materialize_grads(False)
        return out.view_as(out)

    @staticmethod
    def backward(ctx: Any, grad: Tensor | None) -> tuple[None, ...]:
        if grad is not None and bool(grad.any()):  # NaN too
            raise ConfigurationError(ctx.why)
        n: int = ctx.n
        return (None,) * (2 + n)


def _failed(result: LoopResult, p: Problem, params: Sequence[Tensor], method: str) -> LoopResult:
    """The loop's result for :class:`Checkpoint` or :class:`Adjoint` when there is nothing
    to differentiate (no output time) or the solve failed (``throw=False``). Both
    differentiate a solve that reached ``t1`` only: a failed solve's outputs (but
    ``y0`` itself, at ``t0``) refuse a backward pass (:class:`_Unreached`)."""
    inputs = [q for q in (p.y0, *params) if q.requires_grad]
    if result.status == Status.SUCCESS or not inputs or not torch.is_grad_enabled():
        return result
    why = (
        f"The solve stopped at t = {result.t_final!r} ({result.status}), and `{method}` "
        "differentiates a solve that reaches `t1` only: the outputs of this failed solve "
        "have no gradient. Solve with `throw=True` to raise at the failure, or with "
        "`gradient=Autograd()` to differentiate the steps it took."
    )
    ys: list[Tensor | None] = [
        y if y is None or y is p.y0 else reverse_only(_Unreached, why, y, *inputs)
        for y in result.ys
    ]
    return replace(result, ys=ys)


def found_tensors(
    given: Sequence[Tensor] | None, module: torch.nn.Module | None, reads: _Reads | None
) -> tuple[Tensor, ...]:
    """The tensors to differentiate besides ``y0``, once the forward solve has run:
    ``given``, or the field's module's parameters and every other tensor requiring
    grad that an evaluation of the forward solve read. A given tensor that does not
    require grad (a module's buffer) has no gradient to receive and is left out, as
    torchdiffeq leaves it out of ``adjoint_params``; one given twice is differentiated
    once."""
    if given is not None:
        # Once each: a tensor listed twice would get its whole gradient twice.
        return tuple({id(q): q for q in _checked(given) if q.requires_grad}.values())
    if reads is None:
        return ()
    own = [q for q in module.parameters() if q.requires_grad] if module else []
    known = {id(q) for q in own}
    return (*own, *(q for q in reads.tensors() if id(q) not in known))


class _Reads:
    """The vector field as the forward solve of :class:`Adjoint` and :class:`Checkpoint`
    calls it: every evaluation is made with a graph, walked for the tensors requiring
    grad that it reaches (an ``nn.Module``'s parameters, what a plain function closes
    over, leaf or computed from a leaf), then dropped. No evaluation is added, and a
    tensor the field reads only at some times or states (``if t > 0.5``) is found
    wherever the forward solve evaluates there.

    A tensor that dies with its evaluation (a leaf the field makes of its state to
    differentiate inside, ``y.detach().requires_grad_()``) is nobody's input and is
    not kept: the tensors are held weakly, and :meth:`tensors` returns those alive
    after the solve. The state and time passed in are not searched.

    A caller in grad mode (an implicit solver's Jacobian) gets the graph; the solve
    loop, in no-grad mode, gets the value alone. Attribute reads (torchdiffeq's step
    callbacks) go to the field itself.
    """

    def __init__(self, f: FlatField) -> None:
        self.f = f
        self.recording = True
        self.traced = False  # by a compiled step of odecore's, which walks its graph
        self._found: dict[int, weakref.ref[Tensor]] = {}

    def __call__(self, t: Tensor, y: Tensor) -> Tensor:
        if not self.recording or self.traced:  # a compiled step walks the graph of
            return self.f(t, y)  # the whole step (``_compiled_step``)
        if torch.compiler.is_compiling():  # a solve traced by the caller's torch.compile
            # The evaluation's graph is traced, not built: there is nothing to walk, and
            # the tensors the field closes over would get no gradient without a word.
            raise ConfigurationError(
                "A solve whose gradient method finds the tensors the field reads "
                "(Adjoint, Checkpoint or Reversible without `params`) cannot find them "
                "inside torch.compile: pass them as `params=`, solve with "
                "`compile=True` instead of compiling the caller, or use `Autograd()`."
            )
        outer = torch.is_grad_enabled()
        with torch.enable_grad():
            out = self.f(t, y)
        if isinstance(out, Tensor) and out.requires_grad:  # else the solve says what is wrong
            self.walk(out, skip=(t, y))
            if not outer:
                out = out.detach()
        return out

    def walk(self, out: Tensor, skip: Sequence[object]) -> None:
        """Keep the tensors requiring grad that the graph of ``out`` reaches."""
        found = self._found
        for q in graph_leaves(out, skip=skip):
            ref = found.get(id(q))
            if ref is None or ref() is not q:  # an id may outlive its tensor
                found[id(q)] = weakref.ref(q)

    def tensors(self) -> tuple[Tensor, ...]:
        """The tensors found, in the order found, that outlive the forward solve; the
        field is called plainly from now on."""
        self.recording = False
        alive = (ref() for ref in self._found.values())
        return tuple(q for q in alive if q is not None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.f, name)


def graph_leaves(*outs: object, skip: Sequence[object] = ()) -> tuple[Tensor, ...]:
    """The leaf tensors requiring grad that the graphs of ``outs`` (tensors, or nodes of
    a graph) reach, in the order reached; not through, nor at, the tensors of ``skip``
    (a field's state and time). An out that is such a leaf itself (a field that returns
    a tensor it closes over, ``lambda t, y: c``) is one of them."""
    found: dict[int, Tensor] = {}
    seen = {x.grad_fn for x in skip if isinstance(x, Tensor) and x.grad_fn is not None}
    skipped = {id(x) for x in skip}
    stack = []
    for out in outs:
        if isinstance(out, Tensor) and out.grad_fn is None:
            if out.requires_grad and id(out) not in skipped:
                found.setdefault(id(out), out)
            continue
        node: Any = out.grad_fn if isinstance(out, Tensor) else out
        if node is not None and node not in seen:
            seen.add(node)
            stack.append(node)
    while stack:
        node = stack.pop()
        following = node.next_functions
        if following:
            for next_node, _ in following:
                if next_node is not None and next_node not in seen:
                    seen.add(next_node)
                    stack.append(next_node)
            continue
        leaf = getattr(node, "variable", None)  # an AccumulateGrad node: a leaf
        if isinstance(leaf, Tensor) and id(leaf) not in skipped:
            found.setdefault(id(leaf), leaf)
    return tuple(found.values())


@dataclass(frozen=True)
class AugmentedNorm:
    """torchdiffeq's norm of ``adjoint_options``: a callable on the tuple ``(t, y, a,
    *parameter gradients)`` of the backward state, each part in its own shape (``y``
    and ``a`` as the tuple's tensors for a tuple state; ``t``, whose adjoint the
    backward solve here does not integrate, a 0-dim zero), as torchdiffeq calls it.
    ``unpack`` splits the flat state of a tuple state. :func:`odeint_adjoint` gives it
    to the backward controller, whose norm it becomes in the backward pass."""

    norm: Callable[[tuple[Tensor, ...]], Tensor]
    unpack: Callable[[Tensor], Any] | None = None

    def __call__(self, z: Tensor) -> Tensor:
        raise ConfigurationError(
            "torchdiffeq's `adjoint_options={'norm': ...}` measures the adjoint's backward "
            "state, not a forward one; it is the norm of odeint_adjoint's backward solve only."
        )

    def bind(
        self, shape: torch.Size, m: int, params: Sequence[Tensor]
    ) -> Callable[[Tensor], Tensor]:
        """The norm of the flat backward state ``(y, a, g)`` whose ``y`` has ``m``
        elements (all, or 0 when the state is read from the forward steps, where its
        error is zero)."""
        n, sizes = shape.numel(), [q.numel() for q in params]

        def norm(z: Tensor) -> Tensor:
            y = z[:m].view(shape) if m else z.new_zeros(shape)
            a = z[m : m + n].view(shape)
            grads = (c.view_as(q) for c, q in zip(torch.split(z[m + n :], sizes), params))
            ys, adjs = (self.unpack(y), self.unpack(a)) if self.unpack else ((y,), (a,))
            return self.norm((z.new_zeros(()), *ys, *adjs, *grads))

        return norm


def _backward_norm(
    inner: Callable[[Tensor], Tensor],
    shape: torch.Size,
    seminorm: bool,
    m: int | None = None,
) -> Callable[[Tensor], Tensor]:
    """The backward solve's norm from a norm of the forward state (of ``shape``), for
    the backward state ``(y, a, g)`` whose ``y`` has ``m`` elements: all, or 0 when the
    state is read from the forward steps. ``inner`` sees ``y`` and ``a`` in the forward
    state's shape, as it was written for."""
    n = shape.numel()
    m = n if m is None else m

    def norm(z: Tensor) -> Tensor:
        parts = [inner(z[:m].reshape(shape))] if m else []
        parts.append(inner(z[m : m + n].reshape(shape)))
        if not seminorm and z.numel() > m + n:
            parts.append(rms_norm(z[m + n :]))
        return torch.stack(parts).max()

    return norm


@dataclass
class _AdjointSpec:
    method: Adjoint
    loop: Loop
    problem: Problem
    stats: Stats
    n_params: int
    steps: _Steps | None = None
    watch: bool = False  # the parameters were found: check that the backward finds no more


class _Recorder(AbstractSolver):
    """A forward solver that keeps every accepted step, for the dense output.

    It steps and interpolates exactly as the solver it wraps (whose other attributes,
    ``order`` included, it passes through); ``accepted`` is the loop's ``on_step``,
    called right after the step it accepted, the last one taken.
    """

    def __init__(self, solver: AbstractSolver) -> None:
        self.solver = solver
        self.last: tuple[Field, float, float, Tensor, Tensor, StepResult] | None = None
        self.steps: list[tuple[Field, float, float, Tensor, Tensor, StepResult]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.solver, name)

    @property
    def adaptive(self) -> bool:
        return self.solver.adaptive

    def init(self, f: Field, t0: float, y0: Tensor) -> Tensor:
        return self.solver.init(f, t0, y0)

    def new_state(self) -> SolveState | None:
        return self.solver.new_state()

    def step(self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor) -> StepResult:
        return self.step_with(None, f, t0, t1, y0, f0)

    def step_with(
        self, state: SolveState | None, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor
    ) -> StepResult:
        result = self.solver.step_with(state, f, t0, t1, y0, f0)
        self.last = (f, t0, t1, y0, f0, result)
        return result

    def interpolate(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        step: StepResult,
        ts: Sequence[float],
    ) -> list[Tensor]:
        return self.solver.interpolate(f, t0, t1, y0, f0, step, ts)

    def reader(
        self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor, step: StepResult
    ) -> Callable[[float], Tensor]:
        return self.solver.reader(f, t0, t1, y0, f0, step)

    def slopes(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        step: StepResult,
        ts: Sequence[float],
        ys: Sequence[Tensor],
    ) -> list[Tensor]:
        return self.solver.slopes(f, t0, t1, y0, f0, step, ts, ys)

    def accepted(self, t: float, y: Tensor) -> None:
        if self.last is not None and self.last[5].y1 is y:
            self.steps.append(self.last)
        self.last = None


class _Steps:
    """The forward solve's accepted steps, read as the state at any time of the span by
    the solver's dense output (in the solver's increasing time ``s = direction * t``)."""

    def __init__(
        self,
        p: Problem,
        solver: AbstractSolver,
        steps: list[tuple[Field, float, float, Tensor, Tensor, StepResult]],
    ) -> None:
        self.solver = solver
        self.direction = 1.0 if p.t1 >= p.t0 else -1.0
        self.y0, self.s0 = p.y0.detach(), self.direction * p.t0
        self.steps = steps
        self.ends = [self.direction * step[2] for step in steps]  # the caller's times
        self._s1 = [step[2] for step in steps]
        self._read: tuple[int, Callable[[float], Tensor]] | None = None
        self.nfe = 0  # the field's evaluations in reading the dense output (sub-steps)

    def __call__(self, t: float) -> Tensor:
        """The forward state at the caller's time ``t``."""
        s = self.direction * t
        if not self.steps or s <= self.s0:
            return self.y0
        k = min(bisect.bisect_left(self._s1, s), len(self.steps) - 1)
        fe, s0, s1, y, f0, step = self.steps[k]
        if s == s1:
            return step.y1
        if s <= s0:
            return y
        # The field as inside that step, with its one-sided limits at jumps.
        inside = getattr(fe, "inside", None)
        before = getattr(fe, "nfe", 0)
        try:
            with contextlib.nullcontext() if inside is None else inside(s0, s1):
                if self._read is None or self._read[0] != k:  # step by step, backward
                    self._read = (k, self.solver.reader(fe, s0, s1, y, f0, step))
                return self._read[1](s)
        finally:
            self.nfe += getattr(fe, "nfe", 0) - before


class Kept:
    """Tensors that a backward pass reads again (``y0``, the field's parameters), kept as
    they are: not through ``save_for_backward``, whose saved-tensors hooks
    (``torch.autograd.graph.save_on_cpu``, a memory counter) would return copies that
    the field's graph knows nothing of. Their versions are kept too, and :meth:`get`
    refuses them once one was modified in place (an optimiser step before
    ``backward()``), as autograd refuses its saved tensors, rather than differentiate a
    solve that did not run."""

    def __init__(self, tensors: Sequence[Tensor]) -> None:
        self.tensors = tuple(tensors)
        self.versions = _versions(self.tensors)

    def get(self) -> tuple[Tensor, ...]:
        """The tensors, unless one was modified in place since they were kept."""
        if _versions(self.tensors) != self.versions:
            raise RuntimeError(
                "A tensor that this solve's backward pass reads again (y0, or one the "
                "vector field reads, such as a parameter) was modified in place after "
                "the solve (an optimizer step before backward()?): the gradient would "
                "be that of another solve. Call backward() first, or solve again."
            )
        return self.tensors


def _versions(tensors: Sequence[Tensor]) -> list[int | None]:
    """The version counters of ``tensors``; ``None`` for an inference tensor
    (``torch.inference_mode``), which has none and no backward pass to read it."""
    return [None if x.is_inference() else x._version for x in tensors]


def training_modes(*modules: object) -> tuple[tuple[torch.nn.Module, bool], ...]:
    """``(submodule, training)`` for every submodule of those of ``modules`` that are
    ``nn.Module`` s (a plain function has none), as they are now: the modes a solve
    evaluates its field in, which its backward pass evaluates it in again
    (:func:`as_solved`)."""
    return tuple(
        (m, m.training)
        for module in modules
        if isinstance(module, torch.nn.Module)
        for m in module.modules()
    )


@contextlib.contextmanager
def modes_pinned(modes: Sequence[tuple[torch.nn.Module, bool]]) -> Iterator[None]:
    """Every module of ``modes`` (of :func:`training_modes`) in the training mode noted
    there, and back in the caller's afterwards."""
    now = [m.training for m, _ in modes]
    for m, training in modes:
        m.training = training
    try:
        yield
    finally:
        for (m, _), training in zip(modes, now):
            m.training = training


@contextlib.contextmanager
def as_solved(
    module: torch.nn.Module | None, modes: Sequence[tuple[torch.nn.Module, bool]]
) -> Iterator[None]:
    """Evaluate the field in a backward pass as its forward solve did: every submodule
    in the training mode it had then (``modes``, of :func:`training_modes`), put back
    afterwards, and the buffers of ``module`` as :func:`buffers_kept` leaves them. A
    ``field.eval()`` (or ``train()``) between the solve and ``backward()`` would
    otherwise make the backward pass differentiate another function (batch norm with
    the running statistics where the forward pass used the batch's, dropout off), and
    the gradient would be wrong without a word."""
    with modes_pinned(modes), buffers_kept(module):
        yield


@contextlib.contextmanager
def buffers_kept(module: torch.nn.Module | None) -> Iterator[None]:
    """Undo what a backward pass that evaluates the field again writes into the buffers
    of the field's module (a BatchNorm's running statistics, in training mode): the
    field's evaluations count once, in the forward solve, as under backprop, whose
    backward pass evaluates nothing. A plain function's closures are not reached.

    BatchNorm's kernel writes without a new version, and the values are put back
    the same way (through ``.data``): a graph that saved a buffer (the same module
    evaluated by backprop elsewhere in the loss) sees the values it saved, and a new
    version would make its backward pass refuse them as modified in place."""
    kept = [] if module is None else [(b, b.detach().clone()) for b in module.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in kept:
                if not torch.equal(buffer, value):
                    buffer.data.copy_(value)


class _AdjointFunction(ReverseOnly):
    what = "The adjoint method's gradient"

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, spec: _AdjointSpec, forward: Tensor, y0: Tensor, ts: Tensor, *params: Tensor
    ) -> Tensor:
        ctx.spec = spec
        ctx.ts_dtype = ts.dtype
        ctx.kept = Kept((y0, *params))
        ctx.save_for_backward(forward)
        return forward.clone()

    @staticmethod
    def backward(ctx: Any, grad_ys: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        first_order("The adjoint method's gradient")
        check_unbatched(grad_ys, "The adjoint method's gradient")
        spec: _AdjointSpec = ctx.spec
        (forward,) = ctx.saved_tensors
        params = ctx.kept.get()[1:]
        need_ts = bool(ctx.needs_input_grad[3])
        with as_solved(spec.problem.module, spec.problem.modes):
            grads = _adjoint_backward(spec, forward, tuple(params), grad_ys, need_ts)
        grad_y0, grad_ts, grad_params = grads
        if grad_ts is not None:
            grad_ts = grad_ts.to(ctx.ts_dtype)
        return (None, None, grad_y0, grad_ts, *grad_params)


def _adjoint_backward(
    spec: _AdjointSpec,
    forward: Tensor,
    params: tuple[Tensor, ...],
    grad_ys: Tensor,
    need_ts: bool,
) -> tuple[Tensor, Tensor | None, tuple[Tensor | None, ...]]:
    """The adjoint's backward pass; the time gradients (an evaluation per output
    time) only when ``need_ts``."""
    p, method, steps = spec.problem, spec.method, spec.steps
    n = p.y0.numel()
    # The backward state is (y, a, g); y (m elements) is absent when it is read from
    # the forward steps.
    m = 0 if steps is not None else n
    sizes = [q.numel() for q in params]
    solver, controller, dt0 = method.backward_solve(p.solver, p.controller, p.dt0)
    if isinstance(controller, PIDController) and isinstance(controller.norm, AugmentedNorm):
        controller = replace(controller, norm=controller.norm.bind(p.y0.shape, m, params))
    elif isinstance(controller, PIDController) and controller.norm is not None:
        # A norm of the forward state (a tuple state's, or the user's) measures the
        # state and its adjoint separately; the parameter gradients get the RMS norm.
        norm = _backward_norm(controller.norm, p.y0.shape, method.seminorm, m)
        controller = replace(controller, norm=norm)
    elif method.seminorm and isinstance(controller, PIDController):
        controller = replace(controller, norm=_SemiNorm(sum(sizes)))
    elif method.seminorm:
        raise ConfigurationError(
            f"`Adjoint(seminorm=True)` needs a PIDController, got {type(controller).__name__}."
        )
    shape = p.y0.shape
    augmented = _Augmented(p.f, params, shape, steps, spec.watch)

    # The field's `callback_*_adjoint` (torchdiffeq's) become the backward solve's step
    # callbacks; they see its state as `(y, a, *parameter gradients)`.
    for name in ("callback_step", "callback_accept_step", "callback_reject_step"):
        callback = getattr(p.f, name + "_adjoint", None)
        if callback is not None:

            def adjoint_callback(t: Tensor, z: Tensor, dt: Tensor, _cb: Any = callback) -> Any:
                grads = (c.view_as(q) for c, q in zip(torch.split(z[m + n :], sizes), params))
                y = z[:m] if steps is None else steps(float(t))
                return _cb(t, (y.view(shape), z[m : m + n].view(shape), *grads), dt)

            setattr(augmented, name, adjoint_callback)

    nfe = 0
    ts = p.ts
    grad_ts = torch.zeros(len(ts), dtype=forward.dtype, device=forward.device)
    a = torch.zeros_like(p.y0)
    g = torch.zeros(sum(sizes), dtype=p.y0.dtype, device=p.y0.device)
    with torch.no_grad():
        for i in range(len(ts) - 1, -1, -1):
            y_i = forward[i]
            gy = grad_ys[i]
            if need_ts and (i > 0 or ts[0] != p.t0):
                grad_ts[i] = (gy * p.f(_inside(p, ts[i], y_i), y_i)).sum()
                nfe += 1
            a = a + gy
            t_from = ts[i]
            t_to = ts[i - 1] if i > 0 else p.t0
            if t_from == t_to:
                continue
            z0 = torch.cat([y_i.reshape(-1)[:m], a.reshape(-1), g])
            # Reading the dense output, the backward steps stop at the forward step ends.
            lo, hi = sorted((t_to, t_from))
            ends = () if steps is None else [e for e in steps.ends if lo < e < hi]
            res = spec.loop(
                augmented, z0, t_from, t_to, [t_to], solver, controller, dt0, step_ts=ends
            )
            if res.status != Status.SUCCESS or res.ys[-1] is None:
                raise SolverError(
                    f"the adjoint's backward solve stopped at t = {res.t_final!r} before "
                    f"reaching t = {t_to!r}: {res.status}."
                    + (f" {res.message}" if res.message else ""),
                    status=res.status,
                    t=res.t_final,
                )
            nfe += res.stats.nfe
            z = res.ys[-1]
            a, g = z[m : m + n].view(shape), z[m + n :]
        if need_ts and ts[0] == p.t0:
            f0 = p.f(_inside(p, p.t0, p.y0), p.y0)
            nfe += 1
            grad_ts[0] = grad_ts[0] - (a * f0).sum() + (grad_ys[0] * f0).sum()
    if steps is not None:  # the forward's dense output read by the backward field
        nfe += steps.nfe
        steps.nfe = 0
    spec.stats.nfe_backward += nfe
    _check_unread(augmented.unknown)
    grad_params = tuple(
        chunk.view_as(q).to(q.dtype) for chunk, q in zip(torch.split(g, sizes), params)
    )
    return a, grad_ts if need_ts else None, grad_params


@dataclass(frozen=True)
class _SemiNorm:
    """The RMS norm of the backward state ``(y, a, g)`` without its last ``sizes``
    elements, the parameter gradients ``g``. A value, and sized from ``z``, so that a
    compiled step of the backward solve is the same graph from one backward pass to
    the next, whatever the batch size."""

    sizes: int

    def __call__(self, z: Tensor) -> Tensor:
        return rms_norm(z[: z.shape[0] - self.sizes])


class _Augmented:
    """The adjoint's backward field of ``z = (y, a, g)``: ``(f, -a ∂f/∂y, -a ∂f/∂θ)``
    for the ``params`` θ, ``y`` and ``a`` of the forward state's ``shape``; ``y`` is
    read from the forward ``steps`` instead where they are given. With ``watch``, an
    eager evaluation that reads a tensor requiring grad beyond ``params`` notes it in
    ``unknown`` (a compiled step does not look: its graph reads what the forward
    solve's graphs read, which the forward solve walked). It keeps no counter: a
    compiled step would guard on it."""

    def __init__(
        self,
        f: FlatField,
        params: tuple[Tensor, ...],
        shape: torch.Size,
        steps: _Steps | None,
        watch: bool,
    ) -> None:
        self.f, self.params, self.steps = f, params, steps
        self.__wrapped__ = getattr(f, "__wrapped__", f)  # what compile failures name
        # Sizes from z's, in the graph: a new batch size is not a new graph.
        self.shape = (-1, *shape[1:]) if len(shape) else shape
        self.sizes = sum(q.numel() for q in params)
        self.known = {id(q) for q in params} if watch else None
        # Tensors requiring grad that the backward evaluations read and the forward ones
        # did not (a parameter found forward has its gradient; these cannot get one).
        self.unknown: dict[int, tuple[weakref.ref[Tensor], float]] = {}

    def __call__(self, t: Tensor, z: Tensor) -> Tensor:
        shape, params = self.shape, self.params
        n = z.shape[0] - self.sizes  # the elements of (y, a), or of a alone
        m = 0 if self.steps is not None else n // 2
        n -= m
        y = z[:m].view(shape) if self.steps is None else self.steps(float(t)).view(shape)
        a = z[m : m + n].view(shape)
        with torch.enable_grad():
            y = y.detach().requires_grad_(True)
            fy = self.f(t, y)
            if self.known is not None and fy.requires_grad and not torch.compiler.is_compiling():
                for q in graph_leaves(fy, skip=(t, y)):
                    if id(q) not in self.known and id(q) not in self.unknown:
                        self.unknown[id(q)] = (weakref.ref(q), float(t))
            # retain_graph: a parameter may be reached through a graph outside the
            # field (a closed-over tensor computed from a leaf), shared by every call.
            vjps: tuple[Tensor | None, ...]
            if fy.requires_grad:
                vjps = torch.autograd.grad(
                    fy, (y, *params), -a, allow_unused=True, retain_graph=bool(params)
                )
            else:  # a field that reads neither y nor a parameter: every vjp is zero
                vjps = (None,) * (1 + len(params))
        parts = [fy.detach().reshape(-1)] if self.steps is None else []
        parts.append((vjps[0] if vjps[0] is not None else torch.zeros_like(a)).reshape(-1))
        for q, g in zip(params, vjps[1:]):
            parts.append((g if g is not None else torch.zeros_like(q)).reshape(-1).to(z.dtype))
        return torch.cat(parts)


def _check_unread(unknown: dict[int, tuple[weakref.ref[Tensor], float]]) -> None:
    """Raise if a tensor requiring grad that only the adjoint's backward evaluations
    read is still alive (one that died with its evaluation is nobody's input)."""
    for ref, t in unknown.values():
        q = ref()
        if q is not None:
            raise ConfigurationError(
                f"`Adjoint()`: in the backward pass the vector field read a tensor that "
                f"requires grad (shape {tuple(q.shape)}, {q.dtype}) at t = {t!r}, where no "
                "evaluation of the forward solve read it, so its gradient cannot be "
                "returned. Pass the tensors to differentiate yourself: "
                "`Adjoint(params=...)`, or `adjoint_params=` of `odeint_adjoint`."
            )


def _time(t: float, like: Tensor) -> Tensor:
    return torch.tensor(t, dtype=like.dtype, device=like.device)


def _inside(p: Problem, t: float, like: Tensor) -> Tensor:
    """The time ``t`` of an output, where the field's slope there is read as the solve
    reads it: at a jump, its limit from inside the span, after ``t0`` at ``t0`` and
    before ``t`` elsewhere (the one-sided limits of the forward steps)."""
    tt = _time(t, like)
    if t not in p.jump_ts:
        return tt
    direction = 1.0 if p.t1 >= p.t0 else -1.0
    side = direction if t == p.t0 else -direction
    return torch.nextafter(tt, torch.full_like(tt, side * math.inf))


@final
@dataclass(frozen=True)
class Checkpoint(AbstractGradient):
    """Backpropagation that stores the state at some steps and recomputes the rest.

    The forward solve keeps no graph; it records the accepted steps and the state
    at the start of every segment of ``every`` steps. The backward pass replays each
    segment, last first, with the same steps, then backpropagates through it. The
    gradient is exactly :class:`Autograd`'s (to rounding) — the exact gradient of the
    discrete scheme, however rough the vector field — while the graph of only one
    segment is alive at a time: memory grows like ``every`` plus the number of
    segments, ``O(sqrt(steps))`` with the default. The price is one more forward
    solve, counted in ``Stats.nfe_backward``. An ``nn.Module`` field is replayed in
    the training mode each of its submodules had in the forward solve, with its
    buffers left as the forward solve left them.

    Args:
        every: steps per segment; default ``ceil(sqrt(accepted steps))``.
        params: the tensors to differentiate besides ``y0``; default every tensor
            requiring grad that an evaluation of the forward solve reads, as for
            :class:`Adjoint`. The replays evaluate the field where the forward solve
            did, so every tensor they read is among these.

    Raises:
        ValueError: if ``every`` is not a positive integer.
        ConfigurationError: in ``backward()`` through an output of a solve that failed
            (``throw=False``), which it does not differentiate (only ``y0`` at ``t0``).

    Example:
        >>> import torch, odecore
        >>> field = torch.nn.Linear(2, 2)
        >>> y0 = torch.ones(2)
        >>> sol = odecore.solve(lambda t, y: field(y), y0, t0=0.0, t1=1.0,
        ...                     solver=odecore.RK4(), dt0=0.01,
        ...                     gradient=odecore.Checkpoint(params=tuple(field.parameters())))
        >>> sol.ys[-1].sum().backward()
        >>> field.weight.grad.shape, sol.stats.nfe_backward == sol.stats.nfe
        (torch.Size([2, 2]), True)
    """

    every: int | None = None
    params: Sequence[Tensor] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.params is not None:  # a generator would be spent by its first reader
            object.__setattr__(self, "params", tuple(self.params))
        if self.every is not None and (
            isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1
        ):
            raise ConfigurationError(f"`every` must be a positive integer, got {self.every!r}.")

    def run(self, loop: Loop, problem: Problem) -> LoopResult:
        p = problem
        reads, f = _parameters(self.params, p)
        states: list[Tensor] = []
        with torch.no_grad():
            result = loop(
                f,
                p.y0,
                p.t0,
                p.t1,
                p.ts,
                p.solver,
                p.controller,
                p.dt0,
                on_step=lambda t, y: states.append(y),
            )
        params = found_tensors(self.params, p.module, reads)
        if result.status != Status.SUCCESS or not p.ts:
            return _failed(result, p, params, "Checkpoint")
        n = len(result.step_ends)
        if n == 0:  # no step to replay (t1 == t0): backpropagation keeps no more
            return Autograd().run(loop, p)
        every = self.every or max(1, math.ceil(math.sqrt(n)))
        # Segment k covers steps [k * every, (k + 1) * every); it starts from the state
        # at the end of the step before it (y0 for the first).
        starts = [p.y0] + [states[k * every - 1] for k in range(1, math.ceil(n / every))]
        starts.append(states[-1])  # where the last segment ends
        states.clear()  # only the segment starts are kept
        forward = torch.stack([y for y in result.ys if y is not None])
        times = p.times()
        tensors = () if times is None else times.tensors
        output = None if times is None else times.output
        spec = _CheckpointSpec(
            loop, p, result.stats, result.step_ends, starts, every, len(params), output
        )
        ys = reverse_only(_CheckpointFunction, spec, forward, p.y0, *params, *tensors)
        return replace(result, ys=list(ys.unbind(0)))


@dataclass
class _CheckpointSpec:
    loop: Loop
    problem: Problem
    stats: Stats
    step_ends: list[float]
    starts: list[Tensor]  # where each segment starts, then where the last one ends
    every: int
    n_params: int
    output: int | None = None  # which time tensor holds the output times


class _Replay(AbstractController):
    """Accepts every step and proposes an infinite one: steps land on the given stops."""

    def init(
        self,
        f: Any,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        solver: AbstractSolver,
        dt0: float | None,
    ) -> tuple[float, Any]:
        return math.inf, None

    def adapt(
        self, t0: float, t1: float, y0: Tensor, step: Any, solver: AbstractSolver, state: Any
    ) -> Adaptation:
        return Adaptation(accept=True, dt=math.inf, state=None)


class _CheckpointFunction(ReverseOnly):
    what = "Checkpoint's gradient"

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, spec: _CheckpointSpec, forward: Tensor, y0: Tensor, *inputs: Tensor
    ) -> Tensor:
        """``inputs``: the parameters, then the time tensors that need gradients."""
        ctx.spec = spec
        ctx.kept = Kept((y0, *inputs))
        return forward.clone()

    @staticmethod
    def backward(ctx: Any, grad_ys: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        first_order("Checkpoint's gradient")
        spec: _CheckpointSpec = ctx.spec
        saved = ctx.kept.get()[1:]
        params = saved[: spec.n_params]
        p = spec.problem
        # The replays step on the same times as tensors: leaves of their own here.
        clocks = tuple(x.detach().requires_grad_(True) for x in saved[spec.n_params :])
        times = TimeTensors(p.t0, p.t1, clocks, spec.output) if clocks else None
        params = (*params, *clocks)
        carry: Tensor | None = None  # dL/dy at the end of the segment being replayed
        grad_params: list[Tensor | None] = [None] * len(params)
        nfe = 0
        with as_solved(p.module, p.modes):  # once, after every replay
            for k in range(len(spec.starts) - 2, -1, -1):
                n, grads = _replay_segment(spec, k, params, times, grad_ys, carry)
                nfe += n
                carry = grads[0]
                for j, g in enumerate(grads[1:]):
                    previous = grad_params[j]
                    if g is not None:
                        grad_params[j] = g if previous is None else previous + g
        spec.stats.nfe_backward += nfe
        return (None, None, carry, *grad_params)


def _replay_segment(
    spec: _CheckpointSpec,
    k: int,
    params: tuple[Tensor, ...],
    times: TimeTensors | None,
    grad_ys: Tensor,
    carry: Tensor | None,
) -> tuple[int, tuple[Tensor | None, ...]]:
    """Replay segment ``k`` with a graph and backpropagate through it: its evaluations,
    and the gradients of its start state and of ``params``. Its graph dies on return:
    ``retain_graph`` keeps the buffers of what every segment shares (a non-leaf tensor
    the field reads), so a graph still referenced would stay whole, two segments' at once."""
    p = spec.problem
    sign = 1.0 if p.t1 >= p.t0 else -1.0
    ends = spec.step_ends
    first, last = k * spec.every, min((k + 1) * spec.every, len(ends)) - 1
    t_a = p.t0 if k == 0 else ends[first - 1]
    t_b = ends[last]
    # Output times in (t_a, t_b], and t_a itself for the first segment.
    idx = [
        i
        for i, t in enumerate(p.ts)
        if sign * t_a < sign * t <= sign * t_b or (k == 0 and t == p.t0)
    ]
    with torch.enable_grad():
        y_a = spec.starts[k].detach().requires_grad_(True)
        ends_at: list[Tensor] = []  # the state at the segment's last step end

        def keep(t: float, y: Tensor) -> None:
            ends_at[:] = [y]

        run = spec.loop(
            p.f,
            y_a,
            t_a,
            t_b,
            [p.ts[i] for i in idx],
            p.solver,
            _Replay(),
            None,
            step_ts=ends[first : last + 1],
            on_step=keep,
            times=times,
        )
        outputs = [y for y in run.ys if y is not None] + ends_at[-1:]
        if len(outputs) != len(idx) + 1 or run.step_ends != ends[first : last + 1]:
            raise SolverError(
                "the checkpointed replay did not retrace the forward steps between "
                f"t = {t_a!r} and t = {t_b!r}: {run.status}."
                + (f" {run.message}" if run.message else ""),
                status=run.status,
                t=run.t_final,
            )
        _check_retraced(spec.starts[k + 1], outputs[-1], t_b)
        grad_outputs = [grad_ys[i] for i in idx]
        grad_outputs.append(carry if carry is not None else torch.zeros_like(y_a))
        # retain_graph, which the backward of a compiled step refuses where AOTAutograd
        # lets it reuse its saved buffers; each step's graph is walked once all the same.
        from torch._functorch import config  # not loaded by an eager solve, nor dynamo

        with config.patch(donated_buffer=False):
            grads = torch.autograd.grad(
                outputs, (y_a, *params), grad_outputs, allow_unused=True, retain_graph=True
            )
    return run.stats.nfe, grads


def _check_retraced(want: Tensor, got: Tensor, t: float) -> None:
    """Raise if a checkpointed replay ended a segment (at ``t``) away from the forward
    solve's state there: the field gave other values the second time (dropout, random
    numbers, a field that changes between calls), and the gradient would be wrong
    without a word."""
    off = beyond_rounding(want, got.detach())
    if off is not None:
        error, tol = off
        raise ConfigurationError(
            f"Checkpoint: the backward pass's replay reached t = {t!r} {error:.3g} away from "
            f"the forward solve's state there (above {tol:.3g}, the cube root of "
            f"{want.dtype}'s resolution): the vector field gave other values the second time "
            "(dropout or other random numbers, or a field that changed between the calls), "
            "so the gradient cannot be trusted. Make the field deterministic (eval mode) "
            "or use gradient=Autograd()."
        )


def beyond_rounding(want: Tensor, *got: Tensor) -> tuple[float, float] | None:
    """``(error, tolerance)`` where a state recomputed in a backward pass (``got``) is
    further from ``want`` than the cube root of the dtype's resolution (relative to
    ``want``'s size, at least 1), NaN included; ``None`` where every one is close."""
    if not want.numel():
        return None
    error = float(torch.stack([(g - want).abs().amax() for g in got]).amax())  # NaN stays
    tol = torch.finfo(want.dtype).eps ** (1 / 3) * max(1.0, float(want.abs().amax()))
    return None if error <= tol else (error, tol)
