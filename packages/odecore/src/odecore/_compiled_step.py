"""``compile=True`` for adaptive explicit solves: one compiled graph per step.

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
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from . import _compiled
from ._compiled import _GraphField, _rk_step, _sum
from ._controllers import AbstractController, Adaptation, PIDController
from ._solve import CompiledStep
from ._solvers import AbstractExplicitRK, AbstractSolver, StepResult, _Plan, _plan


@dataclass(frozen=True)
class _StepProgram:
    """What a step graph is specialised on: the tableau, the direction of time, and
    the controller's coefficients (its tolerances, inputs of the graph, set to 1)."""

    plan: _Plan
    order: int
    negate: bool
    controller: PIDController


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
) -> tuple[Tensor, list[Tensor], Tensor, Tensor, Tensor]:
    """One step from ``t0`` to ``t1`` (0-dim float64, increasing time) as the eager
    solver and :meth:`PIDController.adapt` take it: ``y1``, the stages, the error
    estimate, ``(ratio, dt if accepted, dt if rejected)`` in float64, and the ratio
    the controller remembers after an acceptance. No host read."""
    plan, c = program.plan, program.controller
    h = t1 - t0
    sign = -1.0 if program.negate else 1.0
    stage_times = [t1 if ci == 1.0 else t0 + ci * h for ci, _ in plan.stages]
    times = (torch.stack(stage_times) * sign).to(y0.dtype)
    field = _GraphField(f, y0, program.negate)
    y1, _, ks, _ = _rk_step(plan, field, times, 0, y0, h, f0)
    y_err = _sum(None, h, plan.err, [k.detach() for k in ks])
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
    verdict = torch.stack((ratio, grown, shrunk))
    return y1, ks, y_err, verdict, ratio.clamp(min=1e-4)


@functools.lru_cache(maxsize=32)
def _compiled_step(program: _StepProgram, backend: Any) -> Callable[..., Any]:
    """The compiled :func:`_step` of one program, with a code object of its own (dynamo
    keeps graphs and counts recompilations per code object, as in ``_compiled``)."""
    code = _step.__code__.replace()
    fn = types.FunctionType(code, _step.__globals__, _step.__name__, (program,))
    return torch.compile(fn, backend=backend, fullgraph=True, dynamic=None)


class _Stepper:
    """The loop's step for one solve: calls the compiled step and turns its one host
    read into the controller's :class:`Adaptation`."""

    def __init__(self, run: Callable[..., Any], solver: AbstractExplicitRK, c: PIDController):
        self.run, self.solver, self.controller = run, solver, c
        self.plan = _plan(solver.tableau)
        self.zero: Tensor | None = None

    def __call__(
        self, fe: Any, s: float, s_next: float, y: Tensor, f0: Tensor, cstate: Any
    ) -> tuple[StepResult, Adaptation]:
        if len(cstate) == 5:  # PIDController.init's state: its tolerances, ratios of 1
            ones = torch.ones(2, dtype=torch.float64, device=y.device)
            cstate = (ones[0], ones[1], cstate[4])  # two tensors: dynamo guards on aliases
        prev1, prev2, tols = cstate
        if self.zero is None:
            self.zero = torch.zeros((), dtype=torch.float64, device=y.device)
        t0, t1 = self.zero + s, self.zero + s_next
        if f0.requires_grad and not y.requires_grad and torch.is_grad_enabled():
            # The first step from a y0 without a graph: as a leaf that requires grad
            # (none is lost: y0 has none), it takes the graph of every later step.
            y = y.detach().requires_grad_()
        for x in (y, f0):
            if x.dim() > 0:
                torch._dynamo.maybe_mark_dynamic(x, 0)
        y1, ks, y_err, verdict, remembered = self.run(fe.f, y, f0, t0, t1, *tols, prev1, prev2)
        fe.nfe += len(self.plan.stages)
        step = StepResult(y1=y1, y_err=y_err, ks=tuple(ks), f1=ks[-1] if self.plan.fsal else None)
        ratio, grown, shrunk = verdict.tolist()  # the one host read of the step
        c = self.controller
        if not math.isfinite(ratio):  # the eager controller's retry (it reads no ratios)
            eager_state = (1.0, 1.0, y, y.detach().abs(), tols)
            return step, c.adapt(s, s_next, y, step, self.solver, eager_state)._replace(
                state=cstate
            )
        if ratio <= 1.0 or c._at_dt_min(s, s_next):
            return step, Adaptation(accept=True, dt=grown, state=(remembered, prev1, tols))
        return step, Adaptation(accept=False, dt=shrunk, state=cstate)


def stepper(
    solver: AbstractSolver, controller: AbstractController, direction: float
) -> CompiledStep:
    """The compiled step of a solve with this method, controller and direction."""
    assert isinstance(solver, AbstractExplicitRK) and isinstance(controller, PIDController)
    program = _StepProgram(
        plan=_plan(solver.tableau),
        order=solver.order,
        negate=direction < 0,
        controller=replace(controller, rtol=1.0, atol=1.0),
    )
    return _Stepper(_compiled_step(program, _compiled._BACKEND), solver, controller)
