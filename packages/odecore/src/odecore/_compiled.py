"""``compile=True``: a fixed-step solve as one ``torch.compile`` graph (an adaptive
one compiles its steps instead: ``_compiled_step``).

The eager loop decides every step in Python floats and reads tensors on the host
(finiteness, statuses), which ``torch.compile`` cannot put in a graph. Here the two
halves are pulled apart:

* :func:`_schedule` runs the eager loop's time arithmetic alone, in floats, outside
  the graph: where every step starts and ends, which output times fall in which
  step, the time of every evaluation of the field (one-sided limits at jumps
  included), the step sizes and the dense-output weights. Its structure (the number
  of steps, which outputs each reads, the tableau) selects the graph; its numbers
  become three tensors, the graph's inputs.
* :func:`_graph` is a pure tensor function of the state and those tensors: every
  step, every output, and the peak magnitudes of the first derivative and the last
  state, with no host read. It is compiled with ``fullgraph=True`` and
  differentiated by AOTAutograd, so the forward and the backward pass are one graph
  each.

After the graph, one host read checks that the state stayed finite; a solve that
did not is run again eagerly, whose loop finds the failing step and sets the status.
Times are tensor inputs, so new values of ``t`` reuse the graph; the leading
dimension of the state (the batch) is marked dynamic, so a new batch size reuses it
too; a new number of steps or pattern of outputs is a new graph, compiled once and
cached (:func:`_compiled`). Dynamo compiles one program for at most
``torch._dynamo.config.recompile_limit`` different fields; past it, solves with new
fields run eagerly, after one warning that says how to raise it. AOTAutograd's
backward is first order: a second derivative (``create_graph=True``), or a second
backward pass through the same solve, differentiates an eager solve again, after
the one warning (:class:`_Solved`). Everything here is imported only when a solve
asks for ``compile=True``: the eager path does not load ``torch._dynamo``.
"""

from __future__ import annotations

import bisect
import functools
import math
import os
import sys
import types
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.autograd.graph import GradientEdge, Node, get_gradient_edge

from ._controllers import SNAP, AbstractController, ConstantStepSize, PIDController
from ._errors import CompileFallbackWarning, Status
from ._events import CALLBACKS
from ._gradients import (
    AbstractGradient,
    Adjoint,
    Autograd,
    Checkpoint,
    FlatField,
    Kept,
    Loop,
    LoopResult,
    Problem,
    Stats,
    _Augmented,
    _Reads,
    graph_leaves,
)
from ._rosenbrock import _AbstractRosenbrock
from ._solve import _check_derivative, _make_loop, _merge_stops, _tiny
from ._solvers import (
    AbstractExplicitRK,
    AbstractSolver,
    _hermite_basis,
    _hermite_weights,
    _interior_nodes,
    _Plan,
    _plan,
    _poly_weights,
    _Sum,
)
from ._transforms import AUTOGRAD_ONLY, ReverseOnly
from ._transforms import apply as reverse_only

_BACKEND: Any = "inductor"
"""The ``torch.compile`` backend of compiled solves. Tests swap in ``"aot_eager"`` or
a compile counter, which exercise dynamo and AOTAutograd without inductor's C++."""

_PACKAGE = os.path.dirname(__file__)


# --- what compiles ------------------------------------------------------------------


def method_reasons(
    solver: AbstractSolver,
    controller: AbstractController,
    gradient: AbstractGradient,
    backend: bool = False,
) -> list[str]:
    """What of the method (solver, controller, gradient) keeps a solve from
    compiling, in words; empty when the method compiles."""
    reasons = []
    if backend:
        reasons.append("a SciPy method (SciPy takes the steps)")
    elif isinstance(solver, _AbstractRosenbrock):
        if type(solver).step_with is not _AbstractRosenbrock.step_with:
            reasons.append(f"the solver {type(solver).__name__}, which overrides how it steps")
    elif not isinstance(solver, AbstractExplicitRK):
        reasons.append(
            f"the solver {type(solver).__name__} (not an explicit Runge-Kutta or a "
            "Rosenbrock method)"
        )
    elif any(
        getattr(type(solver), name) is not getattr(AbstractExplicitRK, name)
        for name in ("step", "init", "interpolate", "reader")
    ):
        reasons.append(f"the solver {type(solver).__name__}, which overrides how it steps")
    adaptive = getattr(solver, "adaptive", False)
    wanted = PIDController if adaptive else ConstantStepSize
    if not backend and type(controller) is not wanted:
        kind = "an adaptive" if adaptive else "a fixed-step"
        reasons.append(f"the controller {type(controller).__name__} of {kind} solver")
    elif not backend and isinstance(controller, PIDController) and controller.norm is not None:
        reasons.append("a PIDController norm of its own (a tuple state brings one)")
    explicit = isinstance(solver, AbstractExplicitRK)
    if isinstance(gradient, Adjoint) and explicit and not gradient.interpolates(solver):
        back, back_controller, _ = gradient.backward_solve(solver, controller, None)
        backward = method_reasons(back, back_controller, Autograd(), backend)
        if not isinstance(back, AbstractExplicitRK):  # a Rosenbrock step's Jacobian of it
            backward.append(f"the solver {type(back).__name__}")
        reasons.extend(f"{reason} in the adjoint's backward solve" for reason in backward)
    elif not isinstance(gradient, Autograd) and not (isinstance(gradient, Checkpoint) and explicit):
        reasons.append(f"the gradient method {type(gradient).__name__}")
    return reasons


def fallback_reasons(
    *,
    solver: AbstractSolver,
    controller: AbstractController,
    gradient: AbstractGradient,
    problem: Problem,
    f: object,
    event: bool,
    dense: bool,
    backend: bool,
    stepped: bool = False,
) -> list[str]:
    """What keeps this solve from compiling, in words; empty when it compiles."""
    reasons = method_reasons(solver, controller, gradient, backend)
    if event:
        reasons.append("an event")
    if dense:
        reasons.append("SaveAt(dense=True)")
    names = (*CALLBACKS, *(f"{name}_adjoint" for name in CALLBACKS))
    if any(getattr(f, name, None) is not None for name in names):
        reasons.append("the field's step callbacks")
    if problem.times() is not None:
        reasons.append("output or step times that require grad")
    if problem.jump_ts and getattr(problem.solver, "adaptive", False):
        reasons.append("jump_ts with an adaptive solver")
    elif problem.jump_ts and (stepped or not isinstance(gradient, Autograd)):
        # A compiled step takes no one-sided limits at a jump; only the grid does.
        reasons.append(
            'jump_ts with compile="stepped", Checkpoint or Adjoint (compile=True with '
            "Autograd takes them)"
        )
    return reasons


def fall_back(why: str) -> None:
    """Say, once per message, that a solve asked to compile runs eagerly, and why."""
    warnings.warn(
        f"compile=True: this solve runs eagerly: {why}. The result is the eager "
        "solve's; pass compile=False to silence this.",
        CompileFallbackWarning,
        stacklevel=_user_stacklevel(),
    )


def not_covered(reasons: Sequence[str]) -> str:
    """The warning's reason for a solve that compiled solves do not cover yet."""
    return (
        f"compiled solves do not cover {'; '.join(reasons)} yet (they cover explicit "
        "Runge-Kutta methods, fixed-step with ConstantStepSize or adaptive with "
        "PIDController, and Autograd or, for explicit methods, Checkpoint and Adjoint)"
    )


def _user_stacklevel() -> int:
    """The ``stacklevel``, for a warning raised in the caller of this function's caller,
    of the first frame outside odecore: the line of the user's call."""
    frame: types.FrameType | None = sys._getframe(2)
    level = 2
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == _PACKAGE:
        frame, level = frame.f_back, level + 1
    return level


@functools.cache
def inductor_problem(device_type: str) -> str | None:
    """Why inductor cannot compile for this device type, or ``None`` when it can.

    A cheap probe, run once per device type: on the CPU inductor writes C++ and needs
    a compiler (``torch._inductor`` looks for ``g++`` by default); on CUDA it writes
    Triton kernels. Any other failure surfaces at the first call, and is caught there.
    """
    try:
        if device_type == "cpu":
            from torch._inductor.cpp_builder import get_cpp_compiler

            get_cpp_compiler()
        elif device_type == "cuda":
            from torch.utils._triton import has_triton

            if not has_triton():
                return "Triton is not installed, and inductor writes CUDA kernels in Triton"
    except Exception as err:  # the probe's own failure says the same: no compiler
        name = type(err).__name__
        return f"inductor finds no C++ compiler ({name}); install g++ or set CXX"
    return None


# --- the schedule: the loop's time arithmetic, in floats ------------------------------


@dataclass(frozen=True)
class _Program:
    """The structure of a compiled solve; equal programs share one graph.

    Attributes:
        plan: the tableau's coefficients as the stepping reads them.
        polynomial: dense output by the tableau's continuous extension (else Hermite).
        nodes: Hermite's interior nodes (sub-steps per step that holds outputs).
        negate: the solve runs backward in time (the field's sign flips).
        steps: per step, whether ``f0`` is evaluated (else carried, first-same-as-last)
            and, per output time in it, whether it lies inside (else at the end).
    """

    plan: _Plan
    polynomial: bool
    nodes: int
    negate: bool
    steps: tuple[tuple[bool, tuple[bool, ...]], ...]


@dataclass
class _Schedule:
    """A program and the numbers it runs on, for one set of times.

    ``times`` are the evaluation times in the increasing time ``s`` with their
    one-sided limit (-1 from the left, +1 from the right, 0 none), in the order the
    graph evaluates the field; ``sizes`` the step sizes in the order it reads them;
    ``weights`` one row of dense-output weights per output inside a step.
    """

    program: _Program
    times: list[tuple[float, int]]
    sizes: list[float]
    weights: list[list[float]]
    direction: float
    first_out: int  # outputs before it are y0 itself
    n_outputs: int  # outputs the graph returns (those reached)
    ends: list[float]  # the end of every step, increasing time
    status: Status
    s_reached: float
    tables: dict[tuple[torch.dtype, torch.device], tuple[Tensor, Tensor, Tensor]]

    def tensors(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """The graph's inputs: evaluation times in the state's dtype (as the eager
        field receives them), step sizes and weights in float64, as the eager loop's
        Python floats; made once per dtype and device."""
        key = (dtype, device)
        if key not in self.tables:
            d = self.direction
            wide = torch.tensor([d * t for t, _ in self.times], dtype=torch.float64)
            times = wide.to(dtype)
            sides = [side for _, side in self.times]
            if any(sides):  # one-sided limits at jumps: the neighbouring float
                side = torch.tensor(sides, dtype=dtype)
                toward = torch.where(side < 0, -d * math.inf, d * math.inf).to(dtype)
                times = torch.where(side != 0, torch.nextafter(times, toward), times)
            width = len(self.weights[0]) if self.weights else 0
            weights = torch.tensor(self.weights, dtype=torch.float64).reshape(
                len(self.weights), width
            )
            sizes = torch.tensor(self.sizes, dtype=torch.float64)
            self.tables[key] = (times.to(device), sizes.to(device), weights.to(device))
        return self.tables[key]


class _Clockwork:
    """Collects a schedule's evaluation times with the eager field's limit rules."""

    def __init__(self) -> None:
        self.times: list[tuple[float, int]] = []
        self.left: float | None = None
        self.right: float | None = None

    def at(self, t: float) -> None:
        self.times.append((t, -1 if t == self.left else 1 if t == self.right else 0))


def _stage_times(plan: _Plan, clock: _Clockwork, t0: float, t1: float) -> None:
    """The evaluation times of one step's stages from ``t0`` to ``t1`` (after ``f0``)."""
    h = t1 - t0
    for c, _ in plan.stages:
        clock.at(t1 if c == 1.0 else t0 + c * h)


@functools.lru_cache(maxsize=64)
def _schedule(
    solver: AbstractExplicitRK,
    s0: float,
    s1: float,
    taus: tuple[float, ...],
    stops: tuple[float, ...],
    jump_set: frozenset[float],
    dt: float,
    max_steps: int,
    direction: float,
) -> _Schedule:
    """The fixed-step loop of ``_integrate`` on floats alone: the same steps, the same
    evaluation times, the same statuses, in the order the graph takes them."""
    plan = _plan(solver.tableau)
    polynomial = solver.dense_kind == "polynomial"
    # The eager interpolant's nodes: "cubic" takes the step's ends alone.
    cubic = solver.interpolation == "cubic"
    nodes, matrix = _hermite_basis(0 if cubic else _interior_nodes(solver.order))
    clock = _Clockwork()
    sizes: list[float] = []
    weights: list[list[float]] = []
    steps: list[tuple[bool, tuple[bool, ...]]] = []
    ends: list[float] = []
    status = Status.SUCCESS

    out_i = 0
    while out_i < len(taus) and taus[out_i] == s0:
        out_i += 1
    first_out = out_i
    s = s0
    fresh = True
    span = s1 - s0
    stop_i = 0
    if s0 < s1:
        clock.right = s0 if s0 in jump_set else None
    while s < s1:
        if len(steps) >= max_steps:
            status = Status.MAX_STEPS_REACHED
            break
        while stops[stop_i] <= s:
            stop_i += 1
        target = stops[stop_i]
        s_next = s + dt
        if s_next >= target - SNAP * dt:
            s_next = target
        if dt <= _tiny(s, span):
            status = Status.DT_UNDERFLOW
            break
        if fresh:  # f0 at the start of the step; the limits of the step before
            clock.at(s)
        clock.left = s_next if s_next in jump_set else None
        clock.right = s if s in jump_set else None
        h = s_next - s
        sizes.append(h)
        _stage_times(plan, clock, s, s_next)
        out_j = bisect.bisect_right(taus, s_next, lo=out_i)
        reads = tuple(tau != s_next for tau in taus[out_i:out_j])
        if any(reads) and polynomial:
            assert solver.tableau.dense is not None  # ensured by dense_kind
            for tau in taus[out_i:out_j]:
                if tau != s_next:
                    weights.append(
                        [h * w for w in _poly_weights(solver.tableau.dense, (tau - s) / h)]
                    )
        elif any(reads):
            for theta in nodes[1:-1]:
                tm = s + theta * (s_next - s)
                sizes.append(tm - s)
                _stage_times(plan, clock, s, tm)
                if not plan.fsal:
                    clock.at(tm)
            if not plan.fsal:
                clock.at(s_next)
            n = len(nodes)
            for tau in taus[out_i:out_j]:
                if tau != s_next:
                    w = _hermite_weights(matrix, (tau - s) / h)
                    weights.append([*w[:n], *(h * v for v in w[n:])])
        steps.append((fresh, reads))
        ends.append(s_next)
        out_i = out_j
        s = s_next
        fresh = not (plan.fsal and s not in jump_set)
        clock.left, clock.right = None, (s if s in jump_set else None)
    program = _Program(plan, polynomial, len(nodes) - 2, direction < 0, tuple(steps))
    return _Schedule(
        program=program,
        times=clock.times,
        sizes=sizes,
        weights=weights,
        direction=direction,
        first_out=first_out,
        n_outputs=out_i - first_out,
        ends=ends,
        status=status,
        s_reached=s,
        tables={},
    )


# --- the graph: a pure tensor function ------------------------------------------------


def _sum(y0: Tensor | None, h: Tensor, terms: _Sum | None, ks: Sequence[Tensor]) -> Tensor:
    """``y0 + h * sum_i w_i k_i`` as the eager ``_combine_terms`` sums it, with ``h`` a
    0-dim float64 tensor instead of a Python float.

    ``h * w`` is formed in float64, as the eager loop's Python floats, and cast to the
    dtype of the sum, as the eager kernels read a Python number: a 0-dim float64
    tensor would promote a 0-dim state (two 0-dim tensors promote) to float64.

    Each term is ``k_i * ratio`` added, not ``torch.add(acc, k_i, alpha=ratio)``:
    inductor (torch 2.13, CPU) rewrites an ``add`` with ``alpha`` of a matrix product
    (a field ending in ``y @ A.T``) into an ``addmm`` that drops the ``alpha``, and the
    solve came out wrong without a word (pytorch/pytorch#167313, #196577)."""
    if terms is None:
        return torch.zeros_like(ks[0]) if y0 is None else y0
    base = ks[terms.base]
    if base.dtype in (torch.float16, torch.bfloat16):  # summed in float32, rounded once
        wide = base.float()
        for i, ratio in terms.rest:
            wide = wide + ks[i].float() * ratio
        wide = wide * (h * terms.weight).to(wide.dtype)
        out = wide if y0 is None else y0 + wide
        return out.to(base.dtype)
    scale = (h * terms.weight).to(base.dtype)
    acc = base
    for i, ratio in terms.rest:
        acc = acc + ks[i] * ratio
    return acc * scale if y0 is None else y0 + acc * scale


class _GraphField:
    """The field as the graph calls it: the eager field's checks and sign, no counting."""

    def __init__(self, f: FlatField, like: Tensor, negate: bool) -> None:
        self.f, self.like, self.negate = f, like, negate
        self.cast: bool | None = None

    def __call__(self, t: Tensor, y: Tensor) -> Tensor:
        out = self.f(t, y)
        if self.cast is None:  # on metadata only: decided while tracing
            like = self.like
            self.cast = _check_derivative(out, like.shape, like.dtype, like.device)
        if self.cast:
            out = out.to(self.like.dtype)
        return -out if self.negate else out


def _rk_step(
    plan: _Plan, field: _GraphField, times: Tensor, nt: int, y0: Tensor, h: Tensor, f0: Tensor
) -> tuple[Tensor, Tensor | None, list[Tensor], int]:
    """One explicit Runge-Kutta step; returns ``y1``, ``f1`` (FSAL), the stages and the
    index of the next evaluation time."""
    ks = [f0]
    yi = y0
    for _, terms in plan.stages:
        yi = _sum(y0, h, terms, ks)
        ks.append(field(times[nt], yi))
        nt += 1
    if plan.fsal:
        return yi, ks[-1], ks, nt
    return _sum(y0, h, plan.b, ks), None, ks, nt


def _peak(y: Tensor) -> Tensor:
    """The largest magnitude in ``y``: finite exactly when every element is."""
    if y.numel() == 0:
        return y.new_zeros(())
    return y.detach().abs().amax()


def _weighted(row: Tensor, xs: Sequence[Tensor], y0: Tensor | None = None) -> Tensor:
    """``y0 + sum_j row[j] * xs[j]`` (``y0 = None``: zero), in the dtype of ``xs``.

    The float64 weights are cast to the dtype the sum is taken in (float32 for half
    precision, summed there and rounded once, as the eager dense output does), so a
    0-dim state is not promoted to float64."""
    dtype = xs[0].dtype
    wide = torch.promote_types(dtype, torch.float32)
    out = None if y0 is None else y0.to(wide)
    for j, x in enumerate(xs):
        term = x.to(wide) * row[j].to(wide)
        out = term if out is None else out + term
    assert out is not None
    return out.to(dtype)


def _graph(
    f: FlatField,
    y0: Tensor,
    times: Tensor,
    sizes: Tensor,
    weights: Tensor,
    program: _Program,
) -> tuple[list[Tensor], Tensor]:
    """The whole solve: the state at every output the steps reach, in order, and the
    peak magnitudes of the first ``f0`` and of the last state. Every step adds to the
    state, so a non-finite value never becomes finite again: the two are finite
    exactly when the eager loop's checks of ``f0`` and of every step pass. No Python
    float and no host read: a graph for ``torch.compile``."""
    plan = program.plan
    field = _GraphField(f, y0, program.negate)
    outputs: list[Tensor] = []
    marks: list[Tensor] = []
    nt = nh = nw = 0
    y = y0
    f0 = y0  # replaced by the first step, which always evaluates it
    for fresh, reads in program.steps:
        if fresh:
            f0 = field(times[nt], y)
            nt += 1
            if not marks:
                marks.append(_peak(f0))
        h = sizes[nh]
        nh += 1
        y1, f1, ks, nt = _rk_step(plan, field, times, nt, y, h, f0)
        if any(reads):
            if program.polynomial:
                inside = [_weighted(weights[nw + i], ks, y) for i in range(sum(reads))]
            else:
                ys, fs = [y], [f0]
                for _ in range(program.nodes):
                    hs = sizes[nh]
                    nh += 1
                    sub, sub_f1, _, nt = _rk_step(plan, field, times, nt, y, hs, f0)
                    ys.append(sub)
                    if sub_f1 is None:
                        sub_f1 = field(times[nt], sub)
                        nt += 1
                    fs.append(sub_f1)
                ys.append(y1)
                if f1 is None:
                    fs.append(field(times[nt], y1))
                    nt += 1
                else:
                    fs.append(f1)
                inside = [_weighted(weights[nw + i], [*ys, *fs]) for i in range(sum(reads))]
            nw += len(inside)
            for within in reads:
                outputs.append(inside.pop(0) if within else y1)
        else:
            outputs.extend([y1] * len(reads))
        y = y1
        if f1 is not None:
            f0 = f1
    marks.append(_peak(y))
    return outputs, torch.stack(marks)


@dataclass
class _Fields:
    """What dynamo's recompile limit left of a compiled function (a program's graph, or a
    step's).

    Attributes:
        fields: the fields (by :func:`_field_key`) it has run; dynamo holds their graphs.
        limit: the recompile limit it reached, as the name of dynamo's setting and its
            value then; ``None`` while it has not.
    """

    fields: set[object]
    limit: tuple[str, int] | None = None

    def at_limit(self) -> bool:
        """Whether the limit it reached still holds (it was not raised since)."""
        if self.limit is None:
            return False
        name, value = self.limit
        return bool(getattr(torch._dynamo.config, name, value) <= value)


@dataclass(kw_only=True)
class _Compiled(_Fields):
    """One program's compiled function (``run``, the compiled :func:`_graph`), and what
    dynamo's recompile limit left of it."""

    run: Callable[..., tuple[list[Tensor], Tensor]]


@functools.lru_cache(maxsize=32)
def _compiled(program: _Program, backend: Any) -> _Compiled:
    """The compiled graph of one program.

    Each program gets a function with a code object of its own: dynamo keeps its
    compiled graphs (and counts recompilations against its limit) per code object,
    so programs do not evict each other. ``dynamic=None`` with the state's leading
    dimension marked dynamic (:func:`torch._dynamo.maybe_mark_dynamic`, at the call)
    keeps the batch size symbolic and every other size static: a new batch reuses the
    graph, and the state's inner sizes (fixed in a model) give inductor its best
    kernels. Times and step sizes are tensor inputs, so their values never recompile.
    """
    code = _graph.__code__.replace()
    fn = types.FunctionType(code, _graph.__globals__, _graph.__name__, (program,))
    compiled: Callable[..., tuple[list[Tensor], Tensor]] = torch.compile(
        fn, backend=backend, fullgraph=True, dynamic=None
    )
    return _Compiled(set(), run=compiled)


# --- the loop that gradient methods call ------------------------------------------------


_COMPILE_ERRORS: tuple[type[Exception], ...] = tuple(
    error
    for error in (
        getattr(torch._dynamo.exc, "TorchDynamoException", None),
        getattr(torch._dynamo.exc, "FailOnRecompileLimitHit", None),  # not one of them
    )
    if error is not None
)
"""What ``torch.compile`` raises when it cannot compile (errors of the field itself
raise again in the eager solve that follows)."""

_LOOP_ERRORS: tuple[type[Exception], ...] = (*_COMPILE_ERRORS, AssertionError)
"""What compiling a loop graph (a ``while_loop``) raises when it cannot: dynamo's
errors, and (torch 2.13) a bare ``AssertionError`` ("Expected FakeTensor") where a
Rosenbrock step's ``torch.func`` Jacobian meets a view that the field takes of a
tensor it closes over (``y @ w.T``). An error of the field itself raises again in the
solve that follows."""

_RECOMPILE_LIMIT: Any = getattr(torch._dynamo.exc, "FailOnRecompileLimitHit", ())
"""What dynamo raises, with ``fullgraph=True``, for a call that would compile a code
object once more than its recompile limit allows."""

_LIMITS = (
    "accumulated_recompile_limit",
    "recompile_limit",
    "accumulated_cache_size_limit",  # the names before torch 2.6
    "cache_size_limit",
)


def _limit_reached(err: BaseException) -> tuple[str, int] | None:
    """The recompile limit that ``err`` reports reaching, as the name of dynamo's
    setting and its value; ``None`` for any other failure."""
    if not isinstance(err, _RECOMPILE_LIMIT):
        return None
    said = f"{err}\n{err.__cause__}"  # the cause names the limit (its explanation)
    config = torch._dynamo.config
    known = [name for name in _LIMITS if hasattr(config, name)]
    plain = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    name = next((n for n in known if n in said), plain)
    return name, int(getattr(config, name, 0))


def _at_limit(name: str, value: int) -> str:
    """The warning's reason for a solve that dynamo's recompile limit kept from compiling."""
    return (
        f"torch.compile reached its recompile limit on this solve's graph: dynamo compiled "
        f"its graph for `torch._dynamo.config.{name}` = {value} different fields (a new "
        "function, or a closure over new values, is a new field to dynamo) and compiles "
        "no more of them, so its solves with other fields run eagerly. Share "
        "one field across solves (one nn.Module: new values of its parameters do not "
        f"recompile), or raise the limit before solving: torch._dynamo.config.{name} = "
        f"{max(2 * value, 1)}"
    )


_AGAIN = (
    "its backward pass is asked for a graph of its own (create_graph=True: a second "
    "derivative) or runs a second time (retain_graph=True), which torch.compile's "
    "first-order backward cannot: that backward pass solves again eagerly and "
    "differentiates the eager solve"
)
_TANGLED = (
    "its field reads a tensor that requires grad both itself and through a tensor made "
    "from it before the solve (or two such tensors, one made from the other): the "
    "compiled graph's backward pass would count the path through that tensor twice, "
    "so the solve runs again eagerly and its outputs are the eager solve's"
)


@dataclass
class _Solved:
    """A compiled solve's outputs with their graph until a backward pass walks it;
    ``edges``: where that graph leaves the solve (:func:`_frontier`), ``y``'s among
    them as ``y_edge``, where ``y`` is the caller's state detached; ``again(y0)``: the
    same outputs from an eager solve from ``y0``."""

    outputs: list[Tensor] | None
    edges: list[GradientEdge]
    y_edge: GradientEdge | None
    again: Callable[[Tensor], Sequence[Tensor | None]]


class _Differentiable(ReverseOnly):
    """``(solved, y0, *leaves) -> outputs``: a compiled solve's outputs, differentiable
    in ``y0`` and in the leaf tensors that its graph reaches. The first backward pass
    goes through the compiled graph; one that needs a graph of its own, or another
    through the same solve, differentiates an eager solve again (:data:`_AGAIN`)."""

    what = "A compiled solve's gradient"
    instead = f"{AUTOGRAD_ONLY}, or solve with compile=False."

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, solved: _Solved, y0: Tensor, *leaves: Tensor
    ) -> tuple[Tensor, ...]:
        assert solved.outputs is not None
        ctx.solved, ctx.kept = solved, Kept((y0, *leaves))
        return tuple(out.detach() for out in solved.outputs)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple[Tensor | None, ...]:
        solved: _Solved = ctx.solved
        (y0, *leaves), graph = ctx.kept.tensors, torch.is_grad_enabled()
        if solved.outputs is not None and not graph:
            outputs, solved.outputs = solved.outputs, None  # walked once, then freed
            return (None, *_route(outputs, grads, solved.edges, solved.y_edge, leaves, graph))
        ctx.kept.get()  # the eager solve again reads them
        fall_back(_AGAIN)
        with torch.enable_grad():
            start = torch._C._autograd._get_sequence_nr()
            outputs = [out for out in solved.again(y0) if out is not None]
            y_edge = get_gradient_edge(y0) if y0.requires_grad else None
            edges = _frontier(outputs, start)
            return (None, *_route(outputs, grads, edges, y_edge, leaves, graph))


def _frontier(outputs: Sequence[Tensor], start: int) -> list[GradientEdge]:
    """The edges by which the graph of ``outputs`` leaves a solve's nodes (those made
    since the autograd sequence number ``start``): into a leaf's accumulator, or into
    a node made before the solve (a closure's tensor computed from a parameter, a
    state computed from an encoder)."""
    edges: dict[tuple[int, int], GradientEdge] = {}
    stack, seen = [], set()

    def reach(edge: GradientEdge) -> None:
        node = edge.node
        if hasattr(node, "variable") or node._sequence_nr() < start:
            edges.setdefault((id(node), edge.output_nr), edge)
        elif node not in seen:
            seen.add(node)
            stack.append(node)

    for out in outputs:  # one may be the state itself, made before the solve
        if out.requires_grad:
            reach(get_gradient_edge(out))
    while stack:
        for node, nr in stack.pop().next_functions:
            if node is not None:
                reach(GradientEdge(node, nr))
    return list(edges.values())


def _route(
    outputs: Sequence[Tensor],
    grads: Sequence[Tensor],
    edges: Sequence[GradientEdge],
    y_edge: GradientEdge | None,
    leaves: Sequence[Tensor],
    graph: bool,
) -> list[Tensor | None]:
    """The gradients of ``y0`` and of ``leaves`` (``None`` where there is none): the
    vector-Jacobian products of ``outputs`` with ``grads`` at ``edges``, then, from each
    edge into a node made before the solve, on to the leaves. That node's graph is the
    caller's: it is kept, and the solve's own graph is freed unless ``graph``."""
    pairs = [(out, g) for out, g in zip(outputs, grads) if out.requires_grad]
    at = torch.autograd.grad(
        [out for out, _ in pairs], list(edges), [g for _, g in pairs],
        retain_graph=graph, create_graph=graph, allow_unused=True,
    )  # fmt: skip
    index = {id(q): i for i, q in enumerate(leaves, start=1)}
    got: list[Tensor | None] = [None] * (len(leaves) + 1)
    onward = []
    for edge, g in zip(edges, at):
        if g is None:
            continue
        if y_edge is not None and edge.node is y_edge.node and edge.output_nr == y_edge.output_nr:
            got[0] = _add(got[0], g)
        elif hasattr(edge.node, "variable"):
            i = index.get(id(edge.node.variable))
            if i is None:  # the eager solve read a leaf that the compiled one did not
                raise RuntimeError(
                    "compile=True: differentiated again, the eager solve reads a tensor that "
                    "requires grad and that the compiled solve did not read; solve with "
                    "compile=False for this derivative."
                )
            got[i] = _add(got[i], g)
        else:
            onward.append((edge, g))
    if onward:
        more = torch.autograd.grad(
            [edge for edge, _ in onward], list(leaves), [g for _, g in onward],
            retain_graph=True, create_graph=graph, allow_unused=True,
        )  # fmt: skip
        got[1:] = [_add(a, b) for a, b in zip(got[1:], more)]
    return got


def _add(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    return b if a is None else a if b is None else a + b


def differentiable(
    outputs: list[Tensor],
    start: int,
    y: Tensor,
    y0: Tensor,
    again: Callable[[Tensor], Sequence[Tensor | None]],
) -> list[Tensor]:
    """``outputs`` of a compiled solve from ``y`` (``y0`` detached) whose nodes are
    numbered from ``start``, as functions of ``y0`` and of the leaf tensors their graph
    reaches (:class:`_Differentiable`)."""
    edges = _frontier(outputs, start)
    y_edge = get_gradient_edge(y) if y.requires_grad else None
    nodes = [edge.node for edge in edges if y_edge is None or edge.node is not y_edge.node]
    if _tangled(nodes):
        fall_back(_TANGLED)
        return [o.detach() if e is None else e for o, e in zip(outputs, again(y0), strict=True)]
    leaves = graph_leaves(*nodes)
    solved = _Solved(outputs, edges, y_edge, again)
    return list(reverse_only(_Differentiable, solved, y0, *leaves))


def _tangled(nodes: Sequence[Node]) -> bool:
    """Whether a node of the frontier lies behind another that was made before the
    solve: a leaf the field reads itself and through a tensor made from it. The first
    backward product, taken at the frontier's edges, then walks through the one to
    reach the other, and :func:`_route` would carry that path on a second time."""
    frontier = set(nodes)
    stack = [nxt for node in frontier if not hasattr(node, "variable")
             for nxt, _ in node.next_functions if nxt is not None]  # fmt: skip
    seen: set[Node] = set()
    while stack:
        node = stack.pop()
        if node in frontier:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(nxt for nxt, _ in node.next_functions if nxt is not None)
    return False


def _start(y0: Tensor, plain: bool = True) -> tuple[Tensor, int]:
    """Where a compiled solve starts: for a ``plain`` solve (one that hands out no
    tensor but its outputs) with grad mode on, ``y0`` detached (its graph starts here,
    :func:`differentiable`), else an alias of it; and the autograd sequence number of
    the solve's first node."""
    number = torch._C._autograd._get_sequence_nr()
    if plain and torch.is_grad_enabled():
        return y0.detach().requires_grad_(y0.requires_grad), number
    return y0.view_as(y0), number  # marks the alias, not the caller's tensor


_FAILED: set[tuple[object, object]] = set()
"""Programs and fields whose compilation failed: they run eagerly at once, with the
warning. A field is known by its code (a function) or its class (a module)."""


def _field_key(f: object) -> object:
    """What a failure to compile is remembered by: the user's field (a tuple state's
    flat field carries it as ``__wrapped__``), by its code or its class."""
    user = getattr(f, "__wrapped__", f)
    return getattr(user, "__code__", None) or type(user)


def compiled_loop(
    jumps: list[float], steps: list[float], max_steps: int, stepped: bool = False
) -> Loop:
    """The solve loop of ``_make_loop`` for an explicit solve: a fixed-step one run as
    one compiled graph of its grid, an adaptive one (or a fixed-step one, ``stepped``)
    over compiled steps (``_compiled_step``); it falls back to the eager loop, with a
    warning, when dynamo or the backend cannot compile it."""
    from ._compiled_step import stepper  # it imports this module

    eager = _make_loop(jumps, steps, max_steps)
    over_steps = _make_loop(jumps, steps, max_steps, compiled=stepper)
    # A solve that keeps no graph and records nothing per step runs whole runs of
    # steps as one graph (_compiled_step._Looper), several times faster on small states.
    over_runs = _make_loop(jumps, steps, max_steps, compiled=functools.partial(stepper, loops=True))

    def loop(
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
        times: Any = None,
    ) -> LoopResult:
        assert times is None

        def run_eagerly(y: Tensor = y0, record: bool = True) -> LoopResult:
            return eager(
                f, y, t0, t1, ts, solver, controller, dt0, step_ts=step_ts,
                on_step=on_step if record else None,
            )  # fmt: skip

        # Over compiled steps too: Checkpoint's forward solve, which records its steps
        # (on_step), and its replays, which step on the forward's step ends (a
        # controller of its own); a forward solve that searches its field's graphs for
        # the tensors to differentiate (_Reads), and the adjoint's backward solve.
        if (
            solver.adaptive
            or stepped
            or on_step is not None
            or type(controller) is not ConstantStepSize
            or isinstance(f, (_Reads, _Augmented))
        ):
            taken: list[tuple[float, Tensor]] = []  # handed on once the solve has compiled
            plain = on_step is None and not isinstance(f, (_Reads, _Augmented))
            looped = (solver, t1 < t0, _field_key(f))
            if plain and not torch.is_grad_enabled() and looped not in _NO_LOOP:
                try:
                    return over_runs(f, y0, t0, t1, ts, solver, controller, dt0, step_ts=step_ts)
                except _LOOP_ERRORS:  # the solve's steps compile one by one below
                    _NO_LOOP.add(looped)

            def run(y: Tensor) -> LoopResult:
                result = over_steps(
                    f, y, t0, t1, ts, solver, controller, dt0, step_ts=step_ts,
                    on_step=None if on_step is None else lambda t, y: taken.append((t, y)),
                )  # fmt: skip
                if on_step is not None:
                    for t, y in taken:
                        on_step(t, y)
                return result

            return _stepped(run, run_eagerly, (solver, t1 < t0), _field_key(f), y0, plain)
        direction = 1.0 if t1 >= t0 else -1.0
        s0, s1 = direction * t0, direction * t1
        stops, jump_set = _merge_stops(
            s0,
            s1,
            {direction * t for t in jumps},
            {direction * t for t in (*steps, *step_ts)},
        )
        dt = None if dt0 is None else abs(dt0)
        if dt is None:  # ConstantStepSize's own message: it needs dt0
            controller.init(f, s0, s1, y0, y0, solver, dt)  # type: ignore[arg-type]
        assert dt is not None
        taus = tuple(direction * t for t in ts)
        schedule = _schedule(
            solver, s0, s1, taus, tuple(stops), frozenset(jump_set), dt, max_steps, direction
        )
        ys: list[Tensor | None] = [None] * len(ts)
        ys[: schedule.first_out] = [y0] * schedule.first_out
        stats = Stats()
        if not schedule.program.steps:
            return LoopResult(ys, stats, schedule.status, direction * schedule.s_reached)
        program = schedule.program
        key = _field_key(f)
        failed = (program, key) in _FAILED
        backend = _BACKEND
        problem = inductor_problem(y0.device.type) if backend == "inductor" and not failed else None
        if failed or problem is not None:
            if problem is not None:
                fall_back(f"inductor cannot run here: {problem}")
            return run_eagerly()
        compiled = _compiled(program, backend)
        if key not in compiled.fields and compiled.at_limit():
            return run_eagerly()  # a new field past the limit: said when it was reached
        tables = schedule.tensors(y0.dtype, y0.device)
        y, start = _start(y0)
        if y.dim() > 0:
            torch._dynamo.maybe_mark_dynamic(y, 0)
        try:
            outputs, marks = compiled.run(f, y, *tables)
        except _COMPILE_ERRORS as err:
            result = run_eagerly()  # the field's own error, if it was one, raises here
            limit = _limit_reached(err)
            if limit is None:
                _FAILED.add((program, key))
                fall_back(f"torch.compile failed on this solve ({_first_line(err)})")
            elif not compiled.at_limit():  # once per limit reached
                compiled.limit = limit
                fall_back(_at_limit(*limit))
            return result
        compiled.fields.add(key)
        if not bool(torch.isfinite(marks).all()):  # the one host read of the solve
            # A failed solve: the eager loop finds the step that went wrong, and says so.
            return run_eagerly()
        stop = schedule.first_out + schedule.n_outputs
        if torch.is_grad_enabled() and any(out.requires_grad for out in outputs):
            outputs = differentiable(
                outputs, start, y, y0,
                lambda y: run_eagerly(y, record=False).ys[schedule.first_out : stop],
            )  # fmt: skip
        ys[schedule.first_out : stop] = outputs
        n = len(program.steps)
        stats.n_steps = stats.n_accepted = n
        stats.nfe = len(schedule.times)
        return LoopResult(
            ys,
            stats,
            schedule.status,
            direction * schedule.s_reached,
            [direction * e for e in schedule.ends],
        )

    return loop


_NO_LOOP: set[tuple[object, bool, object]] = set()
"""Methods, directions and fields whose loop of steps (``_compiled_step._steps``) did
not compile: their solves take compiled steps one by one, as a solve with a graph does.
Dynamo cannot put every field inside a ``while_loop`` (torch 2.13: some modules' tensors
meet as aliases), nor inductor lower every such loop."""

_STEPPED: dict[object, _Fields] = {}
"""Per step graph (method and direction), the fields it compiled for and the limit."""


def _stepped(
    run: Callable[[Tensor], LoopResult],
    run_eagerly: Callable[..., LoopResult],
    graph: tuple[object, bool],
    f_key: object,
    y0: Tensor,
    plain: bool,
) -> LoopResult:
    """A solve over compiled steps (``_compiled_step``) of ``graph`` (the method and the
    direction of time); eager, with the warning, where inductor cannot run or
    torch.compile fails on the step, and without it for a new field past the recompile
    limit (said when it was reached). A ``plain`` solve's outputs are made
    differentiable twice (:func:`differentiable`); the other solves (a checkpoint's
    replays, which take their step ends from ``on_step``; the adjoint's) have first-order
    gradients of their own."""
    key, seen = (graph[0], f_key), _STEPPED.setdefault(graph, _Fields(set()))
    problem = None
    if _BACKEND == "inductor" and key not in _FAILED:
        problem = inductor_problem(y0.device.type)
    if key in _FAILED or problem is not None or (f_key not in seen.fields and seen.at_limit()):
        if problem is not None:
            fall_back(f"inductor cannot run here: {problem}")
        return run_eagerly()
    y, start = _start(y0, plain)
    try:
        result = run(y)
    except _COMPILE_ERRORS as err:
        result = run_eagerly()  # the field's own error, if it was one, raises here
        limit = _limit_reached(err)
        if limit is None:
            _FAILED.add(key)
            fall_back(f"torch.compile failed on this solve ({_first_line(err)})")
        elif not seen.at_limit():  # once per limit reached
            seen.limit = limit
            fall_back(_at_limit(*limit))
        return result
    seen.fields.add(f_key)
    if not plain:  # outputs at t0 are the caller's y0, as the eager loop's, not its alias
        result.ys[:] = [y0 if out is y else out for out in result.ys]
    graphs = [i for i, out in enumerate(result.ys) if out is not None and out.requires_grad]
    if plain and graphs and torch.is_grad_enabled():
        outputs = [out for out in result.ys if out is not None and out.requires_grad]

        def again(y: Tensor) -> list[Tensor | None]:
            ys = run_eagerly(y, record=False).ys
            return [ys[i] for i in graphs]

        for i, out in zip(graphs, differentiable(outputs, start, y, y0, again)):
            result.ys[i] = out
    return result


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
