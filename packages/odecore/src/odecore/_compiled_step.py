"""One compiled graph per step: ``compile=True`` for adaptive explicit and Rosenbrock
solves, ``compile="stepped"`` for fixed-step explicit ones.

An adaptive solve cannot be unrolled ahead of time: where its steps end depends on
the error of each. The eager loop of ``_integrate`` stays, in Python floats, and
every step it tries is one call of a compiled function (:func:`_step`): the stages,
the embedded error estimate, its norm and the :class:`PIDController`'s proposal of
the next step size, accepted or rejected. The loop reads one value on the host per
step, the error ratio and the two proposals in one tensor; the rest (landing on
stops, counting, dense output at output times, the finiteness record) is the eager
loop's own.

The times of the step, the tolerances and the controller's previous error ratios are
tensor inputs, so one graph serves every step of every later solve with the same
method, controller coefficients, field and shapes; the state's leading dimension (the
batch) is marked dynamic, so a new batch size of at least two reuses it too (a batch
of one is specialised, as torch treats sizes 0 and 1 as constants).

A fixed step (:func:`_fixed_step`) is the stages alone: :class:`ConstantStepSize`
accepts every step without reading anything, so a fixed-step solve over compiled steps
reads nothing on the host until its end. One graph serves every number of steps and
every grid, where the whole grid unrolled (``compile=True``, ``_compiled``) is a new
graph for each, compiled for minutes, but runs several times faster.

A Rosenbrock step (:func:`_rosenbrock_step`) also holds the Jacobian, by
``torch.func.jacrev``, and its LU factorisation and solves, written out as elimination
and substitutions for small systems (:func:`_factored`): the eager step's hundreds of
small operations become one call. Its batch is dynamic only for independent samples;
a dense Jacobian's size is the state's.
"""

from __future__ import annotations

import functools
import itertools
import math
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_map

from . import _compiled
from ._compiled import _GraphField, _rk_step, _sum
from ._controllers import _EPS, SNAP, AbstractController, Adaptation, PIDController
from ._gradients import _Augmented, _Reads
from ._per_sample import tau_step
from ._rosenbrock import RosenbrockTableau, _AbstractRosenbrock, _States, _states, time_steps
from ._rosenbrock import _sum as _rosenbrock_sum
from ._solve import CompiledStep, Ran
from ._solvers import AbstractExplicitRK, AbstractSolver, StepResult, _Plan, _plan, _Sum


@dataclass(frozen=True)
class _StepProgram:
    """What a step graph is specialised on: the tableau, the direction of time, and
    the controller's coefficients (its tolerances, inputs of the graph, set to 1)."""

    plan: _Plan
    order: int
    negate: bool
    controller: PIDController


@dataclass(frozen=True)
class _FixedProgram:
    """What a fixed step graph is specialised on: the tableau and the direction of time."""

    plan: _Plan
    negate: bool


def _stages(
    f: Any, y0: Tensor, f0: Tensor, t0: Tensor, t1: Tensor, plan: _Plan, negate: bool
) -> tuple[Tensor, list[Tensor], Tensor | None, Tensor]:
    """The explicit step's ``y1``, stages, ``f1`` (FSAL, else ``None``) and ``h``, with
    the eager solver's stage times (``t1`` itself where ``c = 1``)."""
    h = t1 - t0
    stage_times = [t1 if ci == 1.0 else t0 + ci * h for ci, _ in plan.stages]
    times = y0.new_empty(0)  # Euler: no stage after the first
    if stage_times:
        times = (torch.stack(stage_times) * (-1.0 if negate else 1.0)).to(y0.dtype)
    y1, f1, ks, _ = _rk_step(plan, _GraphField(f, y0, negate), times, 0, y0, h, f0)
    return y1, ks, f1, h


def _fixed_step(
    f: Any, y0: Tensor, f0: Tensor, t0: Tensor, t1: Tensor, program: _FixedProgram
) -> tuple[Tensor, list[Tensor], Tensor | None]:
    """One step of a fixed-step method from ``t0`` to ``t1`` (0-dim float64, increasing
    time) as the eager solver takes it: ``y1``, the stages and ``f1`` (FSAL, else
    ``None``). No host read."""
    y1, ks, f1, _ = _stages(f, y0, f0, t0, t1, program.plan, program.negate)
    return y1, ks, f1


def _step(
    f: Any,
    y0: Tensor,
    f0: Tensor,
    t0: Tensor,
    t1: Tensor,
    rtol: Tensor,
    atol: Tensor,
    prev1: Tensor,
    prev2: Tensor,
    program: _StepProgram,
) -> tuple[Tensor, list[Tensor], Tensor, Tensor | None, Tensor, Tensor]:
    """One step from ``t0`` to ``t1`` (0-dim float64, increasing time) as the eager
    solver and :meth:`PIDController.adapt` take it: ``y1``, the stages, the error
    estimate, ``f1`` (FSAL, else ``None``), ``(ratio, dt if accepted, dt if rejected)``
    in float64, and the ratio the controller remembers after an acceptance. No host
    read."""
    y1, ks, f1, h = _stages(f, y0, f0, t0, t1, program.plan, program.negate)
    y_err = _sum(None, h, program.plan.err, [k.detach() for k in ks])
    verdict, remembered = _verdict(y0, y1, y_err, h, rtol, atol, prev1, prev2, program)
    return y1, ks, y_err, f1, verdict, remembered


def _verdict(
    y0: Tensor,
    y1: Tensor,
    y_err: Tensor,
    h: Tensor,
    rtol: Tensor,
    atol: Tensor,
    prev1: Tensor,
    prev2: Tensor,
    program: _StepProgram | _RosenbrockProgram,
) -> tuple[Tensor, Tensor]:
    """:meth:`PIDController.adapt` on the graph: ``(ratio, dt if accepted, dt if
    rejected)`` in float64, and the ratio it remembers after an acceptance."""
    c = program.controller
    abs_y0, abs_y1 = y0.detach().abs(), y1.detach().abs()
    err = y_err
    if err.dtype in (torch.float16, torch.bfloat16):  # as PIDController._ratio
        err, abs_y0, abs_y1 = err.float(), abs_y0.float(), abs_y1.float()
    scaled = err / (torch.maximum(abs_y0, abs_y1) * rtol + atol)
    if c.norm is None:
        n = scaled.numel()
        ratio = torch.linalg.vector_norm(scaled).double() / math.sqrt(n)
    else:
        ratio = c.norm(scaled).double()
    k = program.order
    factor = (
        c.safety
        * ratio.clamp(min=1e-10) ** (-(c.pcoeff + c.icoeff + c.dcoeff) / k)
        * prev1 ** ((c.pcoeff + 2 * c.dcoeff) / k)
        * prev2 ** (-c.dcoeff / k)
    )
    grown = (h * factor.clamp(c.factor_min, c.factor_max)).clamp(c.dt_min, c.dt_max)
    shrunk = (h * factor.clamp(c.factor_min, 1.0)).clamp(c.dt_min, c.dt_max)
    return torch.stack((ratio, grown, shrunk)), ratio.clamp(min=1e-4)


@dataclass(frozen=True)
class _RosenbrockProgram:
    """What a Rosenbrock step graph is specialised on: the tableau, whether the rows of
    a batch are independent systems, the direction of time and the controller's
    coefficients (its tolerances, inputs of the graph, set to 1)."""

    tableau: RosenbrockTableau
    independent: bool
    order: int
    negate: bool
    controller: PIDController
    states: _States = field(init=False)
    rhs: tuple[_Sum | None, ...] = field(init=False)
    err: _Sum | None = field(init=False)

    def __post_init__(self) -> None:  # the eager solver's sums, made once, outside the graph
        object.__setattr__(self, "states", _states(self.tableau))
        object.__setattr__(self, "rhs", tuple(_rosenbrock_sum(row) for row in self.tableau.c))
        object.__setattr__(self, "err", _rosenbrock_sum(self.tableau.m_err))


def _rosenbrock_step(
    f: Any,
    y0: Tensor,
    f0: Tensor,
    t0: Tensor,
    t1: Tensor,
    rtol: Tensor,
    atol: Tensor,
    prev1: Tensor,
    prev2: Tensor,
    program: _RosenbrockProgram,
) -> tuple[Tensor, list[Tensor], Tensor, Tensor, Tensor, Tensor]:
    """One Rosenbrock step as the eager ``step_with`` takes it from a fresh Jacobian
    (``torch.func.jacrev``), with ``f1`` and :func:`_verdict`; the verdict's fourth
    number is 1 where the matrix ``I / (gamma h) - J`` is singular. No host read."""
    tab, plan = program.tableau, program.states
    h = t1 - t0
    sign = -1.0 if program.negate else 1.0
    field = _GraphField(f, y0, program.negate)

    def at(s: Tensor) -> Tensor:
        return (s * sign).to(y0.dtype)

    start = at(t0)
    rows = program.independent and y0.dim() >= 2
    if rows:  # the diagonal blocks, from the Jacobian of the batch's sum
        n = y0[0].numel()
        blocks = torch.func.jacrev(lambda y: field(start, y).sum(0))(y0)
        jac = blocks.reshape(n, y0.shape[0], n).transpose(0, 1)
    else:
        n = y0.numel()
        jac = torch.func.jacrev(lambda y: field(start, y))(y0).reshape(n, n)
    jac = jac.to(torch.promote_types(jac.dtype, torch.float32))  # half: float32, as eager
    eye = torch.eye(n, dtype=jac.dtype, device=jac.device)
    solve, singular = _factored(eye / (tab.gamma * h).to(jac.dtype) - jac, rows)

    # df/dt by the eager solver's difference; zero where the field does not read time.
    # Per-sample steps take each sample's difference in its own time.
    d = tau_step(f.s, f.h, y0) if isinstance(f, _RowGraphField) else time_steps(t0, h, y0.dtype)
    f_d, f_2d = field(at(t0 + d), y0), field(at(t0 + 2.0 * d), y0)
    ft = (4.0 * f_d - 3.0 * f0 - f_2d) / (2.0 * d).to(y0.dtype)
    ft = torch.where((f_d == f0).all(), torch.zeros_like(ft), ft)
    us: list[Tensor] = []  # (an annotated list: dynamo cannot call list[Tensor]())
    states, one = [y0], torch.ones_like(h)
    for i in range(tab.stages):
        if i == 0:
            fi = f0
        else:
            ti = t1 if tab.alpha[i] == 1.0 else t0 + tab.alpha[i] * h
            states.append(_sum(states[plan.base[i]], one, plan.sums[i], us))
            fi = field(at(ti), states[i])
        rhs = _sum(fi, 1.0 / h, program.rhs[i], us)
        if tab.gammas[i] != 0.0:
            rhs = rhs + (tab.gammas[i] * h).to(rhs.dtype) * ft
        us.append(solve(rhs))
    y1 = _sum(states[plan.base[-1]], one, plan.sums[-1], us)
    y_err = _sum(None, one, program.err, [u.detach() for u in us])
    verdict, remembered = _verdict(y0, y1, y_err, h, rtol, atol, prev1, prev2, program)
    singular = singular.to(verdict.dtype).reshape(1)
    return y1, us, y_err, field(at(t1), y1), torch.cat((verdict, singular)), remembered


UNROLLED = 8
"""The largest system (per sample) whose LU factorisation and solves the step graph
writes out as elimination and substitutions, which inductor fuses into its kernels; a
larger one calls LAPACK's, as the eager solver does (a call of its own for the
factorisation and for each stage, some 20 us each on a CPU)."""


def _factored(m: Tensor, rows: bool) -> tuple[Callable[[Tensor], Tensor], Tensor]:
    """``r -> m^{-1} r`` for ``r`` shaped like the state, from an LU factorisation of
    ``m`` with partial pivoting (per sample ``(batch, n, n)`` when ``rows``), and
    whether any pivot is zero (a singular matrix, as ``lu_factor_ex``'s ``info``)."""
    n = m.shape[-1]
    if n == 0:  # an empty state
        return (lambda r: r), torch.zeros((), dtype=torch.bool, device=m.device)
    if n > UNROLLED:
        lu, pivots, info = torch.linalg.lu_factor_ex(m)

        def lapack(r: Tensor) -> Tensor:
            rhs = r.reshape(r.shape[0], -1, 1) if rows else r.reshape(-1, 1)
            x: Tensor = torch.linalg.lu_solve(lu, pivots, rhs.to(lu.dtype))
            return x.to(r.dtype).view_as(r)

        return lapack, (info != 0).any()
    # Gaussian elimination on the entries, each a (batch,) or () tensor: P m = L U,
    # where P is the row swaps in order, each taken where its condition holds.
    a = [[m[..., i, j] for j in range(n)] for i in range(n)]
    swaps: list[tuple[int, int, Tensor]] = []
    for k in range(n):
        for i in range(k + 1, n):  # the row of largest |a[i][k]| up to row k
            larger = a[i][k].abs() > a[k][k].abs()
            swaps.append((k, i, larger))
            a[k], a[i] = _swapped(larger, a[k], a[i])
        for i in range(k + 1, n):
            a[i][k] = a[i][k] / a[k][k]  # L's multiplier, below U's diagonal
            for j in range(k + 1, n):
                a[i][j] = a[i][j] - a[i][k] * a[k][j]
    singular = torch.stack([a[k][k] == 0 for k in range(n)]).any()

    def substitute(r: Tensor) -> Tensor:
        z = list((r.reshape(r.shape[0], n) if rows else r.reshape(n)).to(m.dtype).unbind(-1))
        for k, i, larger in swaps:  # P r
            (z[k],), (z[i],) = _swapped(larger, [z[k]], [z[i]])
        for i in range(n):  # L y = P r, L unit lower triangular
            for j in range(i):
                z[i] = z[i] - a[i][j] * z[j]
        for i in reversed(range(n)):  # U x = y, from the last row up
            for j in range(i + 1, n):
                z[i] = z[i] - a[i][j] * z[j]
            z[i] = z[i] / a[i][i]
        return torch.stack(z, dim=-1).to(r.dtype).view_as(r)

    return substitute, singular


def _swapped(where: Tensor, a: list[Tensor], b: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """Rows ``a`` and ``b`` exchanged where ``where`` holds."""
    return (
        [torch.where(where, y, x) for x, y in zip(a, b, strict=True)],
        [torch.where(where, x, y) for x, y in zip(a, b, strict=True)],
    )


LOOP_ENDS = 64
"""The most accepted steps one call of a loop graph takes (:func:`_steps`): their ends
come back in a buffer of this size, read with its other numbers in one host read."""


@dataclass(frozen=True)
class _LoopProgram:
    """What a loop graph is specialised on: the program of its step."""

    step: _StepProgram | _RosenbrockProgram


def _steps(
    f: Any,
    y: Tensor,
    f0: Tensor,
    ks: Tensor,
    st: Tensor,
    prev1: Tensor,
    prev2: Tensor,
    limits: Tensor,
    rtol: Tensor,
    atol: Tensor,
    program: _LoopProgram,
) -> tuple[Tensor, ...]:
    """The eager loop of ``_integrate`` over ordinary steps, as one graph (a
    ``while_loop``): from ``s`` with step size ``dt``, each attempt lands on the stop
    ``target`` as the eager loop snaps to it, is judged as :meth:`PIDController.adapt`
    judges it, and is applied. It ends after an accepted step that lands on ``target``,
    reaches the next output time or fills the buffer of step ends; after ``budget``
    attempts; or before an attempt the eager loop must judge itself (a step size lost
    in rounding, a ratio or state that is not finite, a singular matrix), which it
    leaves unapplied.

    ``st`` is ``(s, dt, retry, attempts, accepted, code, s_prev, *ends)`` in float64
    (``code`` 2: stopped before an unusual attempt), ``limits`` is ``(target,
    next_out, span, budget)``; ``ks`` holds the stages of the last accepted step, from
    ``s_prev``, whose start state and derivative come back as the third and fourth
    outputs, for the dense output."""
    from torch._higher_order_ops.while_loop import while_loop

    step, c = _STEPS[type(program.step)], program.step.controller
    target, next_out, span, budget = (x.clone() for x in limits.unbind())  # no aliases
    rtol, atol = rtol.clone(), atol.clone()  # views of one tensor, maybe
    snap = max(SNAP, c.stretch)
    slots = torch.arange(LOOP_ENDS, dtype=st.dtype, device=st.device)

    def more(*carry: Tensor) -> Tensor:
        st = carry[5]
        return (st[5] == 0) & (st[3] < budget)

    def body(*carry: Tensor) -> tuple[Tensor, ...]:
        y, f0, y_prev, f0_prev, ks, st, prev1, prev2, *values = carry
        field = f if module is None else _called(module, names, values)
        s, dt, retry, attempts, accepted = st[0], st[1], st[2] != 0, st[3], st[4]
        s_next = s + dt
        snapping = torch.where(retry, torch.full_like(s, SNAP), torch.full_like(s, snap))
        s_next = torch.where(s_next >= target - snapping * dt, target, s_next)
        y1, ks1, _, f1, verdict, remembered = step(
            field, y, f0, s, s_next, rtol, atol, prev1, prev2, program.step
        )
        ratio, grown, shrunk = verdict[0], verdict[1], verdict[2]
        accept = ratio <= 1.0
        if c.dt_min > 0:  # PIDController._at_dt_min
            near = c.dt_min + 4 * _EPS * torch.maximum(s.abs(), s_next.abs())
            accept = accept | (s_next - s <= near)
        unusual = (dt <= 8 * _EPS * torch.maximum(s.abs(), span)) | ~torch.isfinite(ratio)
        unusual = unusual | (accept & ~torch.isfinite(y1).all())
        if verdict.numel() > 3:  # a Rosenbrock step's singular matrix
            unusual = unusual | (verdict[3] != 0)
        go, take = ~unusual, ~unusual & accept
        # A step shortened to land on a stop says little about the step size.
        landed = (s_next == target) & (grown < dt)
        dt_next = torch.where(accept, torch.where(landed, dt, grown), shrunk)
        ended = (s_next == target) | (s_next >= next_out) | (accepted + 1 >= LOOP_ENDS)
        code = torch.where(unusual, 2.0, torch.where(take & ended, 1.0, 0.0)).to(st.dtype)
        ends = torch.where(take & (slots == accepted), s_next, st[7:])
        numbers = torch.stack((
            torch.where(take, s_next, s), torch.where(go, dt_next, dt),
            torch.where(go, (~accept).to(st.dtype), st[2]), attempts + go.to(st.dtype),
            accepted + take.to(st.dtype), code, torch.where(take, s, st[6]),
        ))  # fmt: skip
        return (
            torch.where(take, y1, y), torch.where(take, f1, f0),
            torch.where(take, y, y_prev), torch.where(take, f0, f0_prev),
            torch.where(take, torch.stack(ks1), ks), torch.cat((numbers, ends)),
            torch.where(take, remembered, prev1), torch.where(take, prev1, prev2),
            *(v.clone() for v in values),
        )  # fmt: skip

    module, names, values = _carried(f)
    carry = (y, f0, y.clone(), f0.clone(), ks, st, prev1.clone(), prev2.clone(), *values)
    return tuple(while_loop(more, body, carry))[:8]  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class _RowLoopProgram:
    """What a per-sample loop graph is specialised on: its step's program (in the
    steps' own time, from 0 to 1), the solver and controller that judge each sample's
    step, the direction of time, and whether inductor writes its kernels in vector
    instructions (:func:`row_loop`)."""

    step: _StepProgram | _RosenbrockProgram
    solver: AbstractSolver
    controller: PIDController
    direction: float
    vectors: bool = True


class _RowGraphField:
    """``g(tau, y) = h f(t + h tau, y)`` per sample, as ``_per_sample._RowField``
    evaluates it, for the step graph: ``s`` and ``h`` ``(batch,)`` in float64."""

    def __init__(self, f: Any, s: Tensor, h: Tensor, scale: Tensor, direction: float) -> None:
        self.f, self.s, self.h, self.scale, self.direction = f, s, h, scale, direction
        self.raw: Tensor | None = None  # the last evaluation, unscaled: a step's f(t1, y1)

    def __call__(self, tau: Tensor, y: Tensor) -> Tensor:
        t = self.s + self.h * tau.to(torch.float64).reshape(-1)  # a tau, or one per sample
        out = self.f((t if self.direction > 0 else -t).to(y.dtype), y)
        self.raw = out if self.direction > 0 else -out
        return self.raw * self.scale


def _row_steps(
    f: Any,
    y: Tensor,
    f0: Tensor,
    rows: Tensor,
    flags: Tensor,
    counts: Tensor,
    at: Tensor,
    limits: Tensor,
    rtol: Tensor,
    atol: Tensor,
    program: _RowLoopProgram,
) -> tuple[Tensor, ...]:
    """The iterations of ``_per_sample.PerSampleLoop._run``, as one graph (a
    ``while_loop``): every sample not done steps from its time ``s`` by its own step
    size, is judged by :func:`row_adapt`, and is kept or retried. It ends after an
    iteration that finishes every sample or whose accepted steps reach an output time
    in ``at``; after ``budget`` iterations; or before an iteration the eager loop must
    take itself (a step size lost in rounding, a sample whose step is not finite and
    cannot shrink, a singular matrix).

    ``rows`` is ``(s, dt, prev1, prev2)`` per sample ``(4, batch)`` in float64,
    ``flags`` ``(retry, done)`` ``(2, batch)``, ``counts`` each sample's accepted and
    rejected steps ``(2, batch)``, ``limits`` ``(s1, span, budget)``. Returned: those
    updated, ``(iterations, iterations with an acceptance, code)`` (``code`` 2: it
    stopped before an unusual iteration), and the last iteration's start state,
    scaled derivative, stages, times, sizes and acceptances, for the dense output."""
    from torch._higher_order_ops.while_loop import while_loop

    from ._controllers import row_adapt

    step, c = _STEPS[type(program.step)], program.controller
    s1, span, budget = (x.clone() for x in limits.unbind())  # no aliases
    rtol, atol = rtol.clone(), atol.clone()
    stretch = max(SNAP, c.stretch)
    rowwise = (slice(None),) + (None,) * (y.dim() - 1)  # (batch,) against the state
    zero, one = y.new_zeros((), dtype=torch.float64), y.new_ones((), dtype=torch.float64)

    def more(*carry: Tensor) -> Tensor:
        numbers = carry[6]
        return (numbers[2] == 0) & (numbers[0] < budget)

    def body(*carry: Tensor) -> tuple[Tensor, ...]:
        y, f0, rows, flags, counts, ks, numbers, y_prev, f0_prev, last, *values = carry
        field = f if module is None else _called(module, names, values)
        (s, dt, prev1, prev2), (retry, done) = rows.unbind(), flags.unbind()
        land = s + dt >= s1 - torch.where(retry, SNAP, stretch) * dt
        h = torch.where(done, 0.0, torch.where(land, s1 - s, dt))
        small = ~done & (dt <= 8 * _EPS * torch.clamp(s.abs(), min=span))
        scale = h.to(y.dtype)[rowwise]
        g = _RowGraphField(field, s, h, scale, program.direction)
        f0_step = f0 * scale
        y1, ks1, y_err, f1, verdict, _ = step(
            g, y, f0_step, zero, one, one, one, one, one, program.step
        )
        result = StepResult(y1=y1, y_err=y_err, ks=(), f1=f1)
        adapted = row_adapt(c, h, y, result, program.solver, (prev1, prev2), (rtol, atol))
        active = ~done
        accept = adapted.accept & active
        s_new = torch.where(accept, torch.where(land, s1, s + h), s)
        done_new = done | (accept & land)
        tiny = 8 * _EPS * torch.clamp(s_new.abs(), min=span)
        lost = ~done_new & ~adapted.finite & (adapted.dt <= tiny)
        unusual = small.any() | lost.any()
        if verdict.numel() > 3:  # a Rosenbrock step's singular matrix
            unusual = unusual | (verdict[3] != 0)
        theta = (at.unsqueeze(0) - s.unsqueeze(1)) / h.unsqueeze(1)
        reads = (accept.unsqueeze(1) & (theta > 0) & (theta <= 1 + SNAP)).any()
        go = ~unusual
        code = torch.where(unusual, 2.0, torch.where(reads | done_new.all(), 1.0, 0.0))
        assert g.raw is not None  # its last evaluation is at (1, y1), unscaled as eager
        f1_raw = g.raw
        keep = accept[rowwise] & go
        rows_new = torch.stack((
            s_new, torch.where(done_new, dt, adapted.dt), *adapted.state,
        ))  # fmt: skip
        flags_new = torch.stack((~accept, done_new))
        counts_new = counts + torch.stack((accept, active & ~accept)).to(counts.dtype)
        numbers_new = torch.stack((  # the code whether it goes or not
            numbers[0] + go.to(numbers.dtype),
            numbers[1] + (go & accept.any()).to(numbers.dtype), code.to(numbers.dtype),
        ))  # fmt: skip
        return (
            torch.where(keep, y1, y), torch.where(keep, f1_raw, f0),
            torch.where(go, rows_new, rows), torch.where(go, flags_new, flags),
            torch.where(go, counts_new, counts), torch.where(go, torch.stack(ks1), ks),
            numbers_new, torch.where(go, y, y_prev),
            torch.where(go, f0_step, f0_prev),
            torch.where(go, torch.stack((s, h, accept.to(s.dtype))), last),
            *(v.clone() for v in values),
        )  # fmt: skip

    module, names, values = _carried(f)
    numbers = y.new_zeros(3, dtype=torch.float64)
    last = y.new_zeros((3, y.shape[0]), dtype=torch.float64)
    ks = y.new_zeros((_stage_count(program.step), *y.shape))
    carry = (y, f0, rows, flags, counts, ks, numbers, y.clone(), f0.clone(), last, *values)
    return tuple(while_loop(more, body, carry))[:10]  # type: ignore[no-untyped-call]


def _stage_count(program: _StepProgram | _RosenbrockProgram) -> int:
    """The number of stages a step of ``program`` returns."""
    if isinstance(program, _RosenbrockProgram):
        return program.tableau.stages
    return len(program.plan.stages) + 1


_Program = _FixedProgram | _StepProgram | _RosenbrockProgram | _LoopProgram | _RowLoopProgram
_STEPS: dict[type, Callable[..., Any]] = {
    _FixedProgram: _fixed_step, _StepProgram: _step, _RosenbrockProgram: _rosenbrock_step,
    _LoopProgram: _steps, _RowLoopProgram: _row_steps,
}  # fmt: skip


_PROGRAMS = itertools.count()


@functools.lru_cache(maxsize=32)
def _compiled_step(program: _Program, backend: Any) -> Callable[..., Any]:
    """The compiled step of one program, with a code object of its own (dynamo keeps
    graphs and counts recompilations per code object, as in ``_compiled``)."""
    step = _STEPS[type(program)]
    # A name of its own too: dynamo's state for automatic dynamic shapes goes by the
    # code's value, and a second program's graph would take the first's inputs as
    # changing values (in a loop graph, scalars it then fails to lower).
    code = step.__code__.replace(co_name=f"{step.__name__}_{next(_PROGRAMS)}")
    fn = types.FunctionType(code, step.__globals__, step.__name__, (program,))
    # A loop graph's C++ wrapper runs its loop without Python: some 40 us an attempt less.
    cpp: dict[str, Any] | None = None
    if backend == "inductor" and type(program) in (_LoopProgram, _RowLoopProgram):
        cpp = {"cpp_wrapper": True}
        if isinstance(program, _RowLoopProgram) and not program.vectors:
            cpp["cpp.simdlen"] = 1  # no vector instructions (none matches a width of 1)
    return torch.compile(fn, backend=backend, fullgraph=True, dynamic=None, options=cpp)


class _FixedStepper:
    """The loop's step for one fixed-step solve: calls the compiled step, and
    :class:`ConstantStepSize` accepts it (no host read)."""

    def __init__(self, run: Callable[..., Any], solver: AbstractSolver, c: AbstractController):
        self.run, self.solver, self.controller = run, solver, c
        assert isinstance(solver, AbstractExplicitRK)
        self.evaluations = len(_plan(solver.tableau).stages)
        self.dynamic = True  # the batch dimension (a Rosenbrock step may size a Jacobian)
        self.zero: Tensor | None = None

    def inputs(
        self, s: float, s_next: float, y: Tensor, f0: Tensor, f: Any
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The step's times as 0-dim float64 tensors, and ``y`` as the graph of field
        ``f`` takes it."""
        if self.zero is None:
            self.zero = torch.zeros((), dtype=torch.float64, device=y.device)
        if _searching(f):  # y0 may require grad: one graph for every step all the same
            y = y.detach()
        elif f0.requires_grad and not y.requires_grad and torch.is_grad_enabled():
            # The first step from a y0 without a graph: as a leaf that requires grad
            # (none is lost: y0 has none), it takes the graph of every later step.
            y = y.detach().requires_grad_()
        for x in (y, f0):
            if x.dim() > 0 and self.dynamic:
                torch._dynamo.maybe_mark_dynamic(x, 0)
        return self.zero + s, self.zero + s_next, y

    def call(self, f: Any, y: Tensor, *args: Tensor) -> Any:
        """The compiled step on ``(f, y, *args)``. For the forward solve of a method
        that keeps no graph (:class:`Checkpoint`, :class:`Adjoint`) and searches the
        field's evaluations for the tensors to differentiate, the step runs with a
        graph: the tensors it reaches are kept, and what it returns is detached. The
        adjoint's backward field is traced with its ``torch.autograd.grad``."""
        if isinstance(f, _Augmented):  # the adjoint's backward step differentiates f
            return _tracing_autograd(self.run, f, y, *args)
        if not _searching(f):
            return self.run(f, y, *args)
        f.traced = True
        try:
            with torch.enable_grad():
                out = self.run(f, y, *args)
        finally:
            f.traced = False
        f.walk(out[0], skip=(y, *args))
        return tree_map(lambda x: x.detach() if isinstance(x, Tensor) else x, out)

    def __call__(
        self, fe: Any, s: float, s_next: float, y: Tensor, f0: Tensor, cstate: Any, state: Any
    ) -> tuple[StepResult, Adaptation]:
        t0, t1, y = self.inputs(s, s_next, y, f0, fe.f)
        y1, ks, f1 = self.call(fe.f, y, f0, t0, t1)
        fe.nfe += self.evaluations
        step = StepResult(y1=y1, y_err=None, ks=tuple(ks), f1=f1)
        return step, self.controller.adapt(s, s_next, y, step, self.solver, cstate)


class _Stepper(_FixedStepper):
    """The loop's step for one adaptive solve: calls the compiled step and turns its one
    host read into the controller's :class:`Adaptation`."""

    controller: PIDController

    def __init__(self, run: Callable[..., Any], solver: AbstractSolver, c: PIDController):
        self.run, self.solver, self.controller = run, solver, c
        self.evaluations = evaluations(solver)
        self.factorises = isinstance(solver, _AbstractRosenbrock)
        # The batch dimension is dynamic, except where it sizes a dense Jacobian.
        dense = isinstance(solver, _AbstractRosenbrock) and not solver.independent
        self.dynamic = not dense
        self.zero = None

    def __call__(
        self, fe: Any, s: float, s_next: float, y: Tensor, f0: Tensor, cstate: Any, state: Any
    ) -> tuple[StepResult, Adaptation]:
        prev1, prev2, tols = cstate = _graph_state(cstate, y)
        t0, t1, y = self.inputs(s, s_next, y, f0, fe.f)
        y1, ks, y_err, f1, verdict, remembered = self.call(fe.f, y, f0, t0, t1, *tols, prev1, prev2)
        fe.nfe += self.evaluations
        if self.factorises:
            state.n_jacobians += 1
            state.n_factorisations += 1
        step = StepResult(y1=y1, y_err=y_err, ks=tuple(ks), f1=f1)
        ratio, grown, shrunk, *singular = verdict.tolist()  # the one host read of the step
        c, solver = self.controller, self.solver
        if any(singular):  # the eager step's failure and message, and the controller's retry
            step = solver.step_with(None, fe, s, s_next, y, f0)
        if not math.isfinite(ratio) or any(singular):  # the eager controller's retry
            eager_state = (1.0, 1.0, y, y.detach().abs(), tols)
            return step, c.adapt(s, s_next, y, step, solver, eager_state)._replace(state=cstate)
        if ratio <= 1.0 or c._at_dt_min(s, s_next):
            return step, Adaptation(accept=True, dt=grown, state=(remembered, prev1, tols))
        return step, Adaptation(accept=False, dt=shrunk, state=cstate)


class _Looper(_Stepper):
    """The loop's step for an adaptive solve that keeps no graph: single steps as
    :class:`_Stepper` takes them, and runs of ordinary steps as one compiled loop
    (:func:`_steps`), with one host read a run."""

    def __init__(
        self, run: Callable[..., Any], loop: Callable[..., Any], solver: AbstractSolver,
        c: PIDController, stages: int,
    ) -> None:  # fmt: skip
        super().__init__(run, solver, c)
        self.loop, self.stages = loop, stages

    def steps(
        self, fe: Any, s: float, dt: float, retry: bool, y: Tensor, f0: Tensor, cstate: Any,
        state: Any, limits: tuple[float, float, float, int],
    ) -> Ran:  # fmt: skip
        """Ordinary steps from ``s``, up to ``limits`` = ``(target, next_out, span,
        budget)`` as :func:`_steps` takes them."""
        prev1, prev2, tols = _graph_state(cstate, y)
        numbers = [s, dt, float(retry), 0.0, 0.0, 0.0, s] + [0.0] * LOOP_ENDS
        st = torch.tensor(numbers, dtype=torch.float64, device=y.device)
        bounds = torch.tensor(limits, dtype=torch.float64, device=y.device)
        ks = y.new_zeros((self.stages, *y.shape))
        for x, dim in ((y, 0), (f0, 0), (ks, 1)):
            if x.dim() > dim and self.dynamic:
                torch._dynamo.maybe_mark_dynamic(x, dim)
        y, f0, y_prev, f0_prev, ks, st, prev1, prev2 = self.loop(
            fe.f, y, f0, ks, st, prev1, prev2, bounds, *tols
        )
        numbers = st.tolist()  # the one host read of the run
        s, dt, retry_, attempts, accepted, code, s_prev = numbers[:7]
        n, k = int(attempts), int(accepted)
        fe.nfe += self.evaluations * n
        if self.factorises:
            state.n_jacobians += n
            state.n_factorisations += n
        last = None
        if k:
            step = StepResult(y1=y, y_err=None, ks=tuple(ks.unbind(0)), f1=f0)
            last = (s_prev, y_prev, f0_prev, step)
        return Ran(
            s, dt, retry_ != 0.0, y, f0, (prev1, prev2, tols), n, k, numbers[7 : 7 + k],
            code == 2.0, last,
        )  # fmt: skip


def _graph_state(cstate: Any, y: Tensor) -> Any:
    """The controller's state as the step graph takes it: from :meth:`PIDController.init`'s
    (its tolerances, ratios of 1), two ratio tensors and the tolerances."""
    if len(cstate) == 5:
        ones = torch.ones(2, dtype=torch.float64, device=y.device)
        return (ones[0], ones[1], cstate[4])  # two tensors: dynamo guards on aliases
    return cstate


def _carried(f: Any) -> tuple[torch.nn.Module | None, list[str], list[Tensor]]:
    """A module field, its tensors' names and copies of them, to carry through a loop
    graph as values: dynamo lifts each view a forward takes of a module's tensor
    (``self.a.T``) as an input of its own, and ``while_loop`` refuses those aliases.
    ``(None, [], [])`` for any other field."""
    if not isinstance(f, torch.nn.Module):
        return None, [], []
    named = (*f.named_parameters(), *f.named_buffers())
    return f, [name for name, _ in named], [x.clone() for _, x in named]


def _called(module: torch.nn.Module, names: list[str], values: list[Tensor]) -> Any:
    """``module`` as a field of ``(t, y)`` with its tensors ``names`` set to ``values``."""
    tensors = dict(zip(names, values))
    return lambda t, y: torch.func.functional_call(module, tensors, (t, y))


def _searching(f: Any) -> bool:
    """Whether ``f`` is the field of a forward solve without a graph that searches its
    evaluations for the tensors to differentiate (:class:`Checkpoint`, :class:`Adjoint`)."""
    return isinstance(f, _Reads) and f.recording and not torch.is_grad_enabled()


def _tracing_autograd(run: Callable[..., Any], *args: Any) -> Any:
    """``run(*args)`` with dynamo tracing ``torch.autograd.grad`` into the graph (it
    breaks the graph by default), set for this call only: the adjoint's backward
    field differentiates the vector field inside each step."""
    config = torch._dynamo.config
    before = config.trace_autograd_ops
    config.trace_autograd_ops = True
    try:
        return run(*args)
    finally:
        config.trace_autograd_ops = before


def stepper(
    solver: AbstractSolver, controller: AbstractController, direction: float, loops: bool = False
) -> CompiledStep:
    """The compiled step of a solve with this method, controller and direction: a
    fixed step for any controller but a :class:`PIDController` (:class:`ConstantStepSize`,
    or a checkpointed replay's, which accepts the forward solve's steps). With
    ``loops``, an adaptive method whose step returns ``f1`` also runs whole runs of
    steps as one graph (:class:`_Looper`)."""
    if not isinstance(controller, PIDController):
        assert isinstance(solver, AbstractExplicitRK)
        fixed = _FixedProgram(plan=_plan(solver.tableau), negate=direction < 0)
        return _FixedStepper(_compiled_step(fixed, _compiled._BACKEND), solver, controller)
    assert isinstance(controller, PIDController)
    program = _adaptive_program(solver, controller, negate=direction < 0)
    run = _compiled_step(program, _compiled._BACKEND)
    if loops and _loops(program):
        loop = _compiled_step(_LoopProgram(step=program), _compiled._BACKEND)
        return _Looper(run, loop, solver, controller, _stage_count(program))
    return _Stepper(run, solver, controller)


def row_loop(
    solver: AbstractSolver, controller: PIDController, direction: float, y: Tensor
) -> Callable[..., tuple[Tensor, ...]] | None:
    """The compiled per-sample loop (:func:`_row_steps`) of this method, controller and
    direction of time for states like ``y``; ``None`` for a method whose step does not
    return ``f1``. Where a sample's state has fewer than 8 numbers, inductor's kernels
    run without vector instructions: they run along the state, where a vector of 8
    holds a few numbers under a mask (a batch of 256 two-number states: 20 % faster)."""
    if not isinstance(solver, (_AbstractRosenbrock, AbstractExplicitRK)):
        return None
    step = _adaptive_program(solver, controller, negate=False)  # in the steps' own time
    if not _loops(step):
        return None
    program = _RowLoopProgram(
        step=step, solver=solver, controller=step.controller, direction=direction,
        vectors=y[0].numel() >= 8,
    )  # fmt: skip
    return _compiled_step(program, _compiled._BACKEND)


def _adaptive_program(
    solver: AbstractSolver, controller: PIDController, negate: bool
) -> _StepProgram | _RosenbrockProgram:
    """The step program of an adaptive explicit or Rosenbrock method, its controller's
    tolerances set to 1 (they are inputs of the graph)."""
    unit = replace(controller, rtol=1.0, atol=1.0)
    if isinstance(solver, _AbstractRosenbrock):
        return _RosenbrockProgram(
            tableau=solver.tableau, independent=solver.independent, order=solver.order,
            negate=negate, controller=unit,
        )  # fmt: skip
    assert isinstance(solver, AbstractExplicitRK)
    return _StepProgram(
        plan=_plan(solver.tableau), order=solver.order, negate=negate, controller=unit
    )


def _loops(program: _StepProgram | _RosenbrockProgram) -> bool:
    """Whether a loop graph takes this step: it returns ``f(t1, y1)`` (Rosenbrock, FSAL)."""
    return isinstance(program, _RosenbrockProgram) or program.plan.fsal


def evaluations(solver: AbstractSolver) -> int:
    """The field's evaluations in one compiled step of an adaptive ``solver``: a
    Rosenbrock step's Jacobian, its two for df/dt, its stages and f1; an explicit
    step's stages after the first."""
    if isinstance(solver, _AbstractRosenbrock):
        return 3 + solver.tableau.stages
    assert isinstance(solver, AbstractExplicitRK)
    return len(_plan(solver.tableau).stages)
