"""Per-sample step sizes: a batch of independent systems, each sample on its own steps.

With ``PIDController(per_sample=True)`` every sample (row) of a state
``(batch, *state)`` has its own time, step size, acceptance and controller state;
a finished sample is frozen at ``t1``, and the loop ends when every sample is done.

The solvers are not changed: a batch step maps each sample's step onto ``[0, 1]``.
For the field ``g(tau, y) = h f(t + h tau, y)``, with ``t`` and ``h`` the samples'
own times and step sizes, one step of size 1 of any Runge-Kutta or Rosenbrock method
is the step of size ``h`` of each sample on ``f``: the stages are ``h`` times the
stages on ``f`` (a Rosenbrock stage equation is multiplied through by ``h``), and the
step's error estimate, solution and dense output are those of the step on ``f``.
A finished sample takes steps of size 0, which leave it where it is, and its state
is kept by a mask, so that backpropagation through the loop is exact. A step that is
not finite for some samples is taken again, under a graph, with them standing still:
behind the mask, its infinite partial derivatives would turn the zero gradient of the
rejected rows into NaN (its evaluations count in ``nfe``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from ._controllers import _EPS, SNAP, AbstractController, PIDController, row_adapt, row_init
from ._errors import ConfigurationError, Status
from ._gradients import AbstractGradient, Autograd, FlatField, LoopResult, Stats, TimeTensors
from ._rosenbrock import RosenbrockState, _coupled, time_steps
from ._solvers import AbstractSolver, SolveState, StepResult


def per_sample(controller: AbstractController) -> bool:
    """Whether ``controller`` asks for per-sample step sizes."""
    return isinstance(controller, PIDController) and controller.per_sample


def check_per_sample(
    solver: AbstractSolver,
    y0: object,
    gradient: AbstractGradient,
    refused: Mapping[str, bool],
) -> None:
    """Refuse, at the start of a solve, what per-sample steps cannot do; ``refused``
    says by name which of the call's other arguments that they cannot take are set."""
    what = "`PIDController(per_sample=True)`"
    if not solver.independent_samples:
        raise ConfigurationError(
            f"{what} needs a solver whose steps keep the samples apart: "
            "Rodas4(independent=True), Rodas5P(independent=True) or an explicit embedded "
            "pair (Dopri5(), Tsit5(), "
            f"...); got {solver!r}."
        )
    if not isinstance(y0, Tensor) or y0.dim() < 2:
        got = f"shape {tuple(y0.shape)}" if isinstance(y0, Tensor) else type(y0).__name__
        raise ConfigurationError(
            f"{what} needs `y0` as one tensor of shape (batch, *state), got {got}; "
            "for scalar systems pass `y0.unsqueeze(-1)`."
        )
    if not isinstance(gradient, Autograd):
        raise ConfigurationError(
            f"{what} is differentiated by backpropagation through its masked steps only: "
            f"it cannot be used with `gradient={gradient!r}`; use `gradient=Autograd()`, "
            "or drop `per_sample=True`."
        )
    for name, present in refused.items():
        if present:
            raise ConfigurationError(
                f"{what} cannot be used with {name}: each sample has its own steps and "
                "times. Remove it, or drop `per_sample=True`."
            )


class _RowField:
    """The field of a batch step: ``g(tau, y) = h f(t + h tau, y)`` per sample, in
    increasing time ``s = direction * t``; ``f`` receives ``t`` as a ``(batch,)``
    tensor in the state's dtype."""

    def __init__(self, f: FlatField, direction: float, y0: Tensor) -> None:
        from ._solve import _check_derivative  # the shared loop's check of f's result

        self.check: Callable[[object], bool] = lambda out: _check_derivative(
            out, y0.shape, y0.dtype, y0.device
        )
        self.f, self.direction, self.dtype = f, direction, y0.dtype
        self.view = (y0.shape[0],) + (1,) * (y0.dim() - 1)
        self.s = torch.zeros(y0.shape[0], dtype=torch.float64, device=y0.device)
        self.h = torch.ones_like(self.s)
        self.scale = torch.ones(self.view, dtype=y0.dtype, device=y0.device)
        self.nfe = 0
        self.times: dict[float, Tensor] = {}
        self.end: tuple[Tensor, Tensor] | None = None

    def place(self, s: Tensor, h: Tensor) -> None:
        """Map each sample's step from ``s`` of size ``h`` onto ``[0, 1]``."""
        self.s, self.h = s, h
        self.scale = h.to(self.dtype).view(self.view)
        self.times, self.end = {}, None

    def at_end(self, y1: Tensor) -> Tensor | None:
        """``dy/ds`` at the steps' ends if the step evaluated it at ``y1``: the exact
        value, where dividing ``g`` by ``h`` would round it."""
        return self.end[1] if self.end is not None and self.end[0] is y1 else None

    def raw(self, s: Tensor, y: Tensor) -> Tensor:
        """``dy/ds`` at the samples' times ``s``."""
        self.nfe += 1
        out = self.f((s if self.direction > 0 else -s).to(self.dtype), y)
        if self.check(out):  # every result: a field may branch on the time
            out = out.to(self.dtype)  # autocast
        return out if self.direction > 0 else -out

    def per_sample_time_step(self, y: Tensor) -> Tensor:
        """A Rosenbrock step's time difference, in each sample's own step: :func:`tau_step`."""
        return tau_step(self.s, self.h, y)

    def __call__(self, tau: float | Tensor, y: Tensor) -> Tensor:
        if isinstance(tau, Tensor):  # a time per sample (:meth:`per_sample_time_step`)
            return self.raw(self.s + self.h * tau.reshape(-1), y) * self.scale
        s = self.s if tau == 0.0 else self.times.get(tau)
        if s is None:  # the stages at one time share it (a step's end, thrice in Rodas4)
            s = self.times[tau] = self.s + self.h * tau
        out = self.raw(s, y)
        if tau == 1.0:
            self.end = (y, out)
        return out * self.scale


def tau_step(s: Tensor, h: Tensor, y: Tensor) -> Tensor:
    """The step of a Rosenbrock step's time difference for each sample's field
    ``g(tau, y) = h f(s + h tau, y)``, in ``tau``, shaped to divide ``y``: the shared
    loop's ``eps^(1/3) max(|s|, 1)``, at most ``h / 2``, in the sample's own time, which
    a step of ``eps^(1/3)`` in ``tau`` (``h`` times smaller) would lose to rounding far
    from 0; 0.5 for a sample that does not step."""
    d = time_steps(s, h, y.dtype)
    tau = torch.where(h > 0, d / torch.where(h > 0, h, 1.0), 0.5)
    return tau.to(y.dtype).reshape((-1,) + (1,) * (y.dim() - 1))  # y's: no promotion


def _where(mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``a`` in the samples of ``mask``, ``b`` in the others."""
    return torch.where(mask.view((-1,) + (1,) * (a.dim() - 1)), a, b)


class PerSampleLoop:
    """The solve loop with per-sample step sizes, as gradient methods call it; after a
    run, ``accepted`` and ``rejected`` hold each sample's counts ``(batch,)``."""

    def __init__(self, max_steps: int, compiled: bool = False) -> None:
        self.max_steps = max_steps
        self.compiled = compiled  # compile=True: runs of iterations as one graph
        self.accepted: Tensor | None = None
        self.rejected: Tensor | None = None

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
    ) -> LoopResult:
        assert isinstance(controller, PIDController) and not step_ts and on_step is None
        direction = 1.0 if t1 >= t0 else -1.0
        s0, s1 = direction * t0, direction * t1
        fe = _RowField(f, direction, y0)
        fe.s.fill_(s0)
        if s0 < s1 and _coupled(lambda t, y: fe(t, y), 0.0, y0):
            raise ConfigurationError(
                "`PIDController(per_sample=True)`: the derivative of a sample of "
                f"`y0` (shape {tuple(y0.shape)}) depends on the state of other samples, so "
                "the samples are not independent systems; drop `per_sample=True`."
            )
        y, s, status, message = y0, fe.s.clone(), Status.SUCCESS, ""
        stats = Stats()
        self.accepted = torch.zeros(y0.shape[0], dtype=torch.int64, device=y0.device)
        self.rejected = torch.zeros_like(self.accepted)
        state = solver.new_state()
        if isinstance(state, RosenbrockState):
            state.reuse_end = False  # each step rescales the field: no end to reuse
        taus = [direction * t for t in ts]
        inside = _Outputs(sorted({tau for tau in taus if s0 < tau < s1}), y0)
        if s0 < s1 and y0.shape[0] > 0:  # an empty batch has nothing to step
            y, s, status, message = self._run(
                fe, y0, (s0, s1), solver, state, controller, dt0, stats, inside
            )
        stats.nfe = fe.nfe
        if state is not None:
            stats.n_jacobians = state.n_jacobians
            stats.n_factorisations = state.n_factorisations
        done = s == s1
        at_end = y if bool(done.all()) else _where(done, y, torch.full_like(y, math.nan))
        ys: list[Tensor | None] = [
            y0 if tau == s0 else at_end if tau == s1 else inside.stacked(tau) for tau in taus
        ]
        t_final = direction * float(s.min()) if s.numel() else t1
        return LoopResult(ys, stats, status, t_final, [], message)

    def _run(
        self,
        fe: _RowField,
        y0: Tensor,
        span_ends: tuple[float, float],
        solver: AbstractSolver,
        state: SolveState | None,
        controller: PIDController,
        dt0: float | None,
        stats: Stats,
        outputs: _Outputs,
    ) -> tuple[Tensor, Tensor, Status, str]:
        """The steps: step every sample, judge each, keep the accepted, repeat. A sample
        that fails (its step size lost in rounding, a step that is not finite and cannot
        shrink) is frozen where it stopped, as it would stop alone, and the others go
        on; the status is the first failure's, the message names every failed sample."""
        assert self.accepted is not None and self.rejected is not None
        s0, s1 = span_ends
        y, s, span = y0, fe.s.clone(), s1 - s0
        failures: list[tuple[Status, Tensor, str]] = []  # status, samples, solver's account
        f0 = solver.init(fe, 0.0, y)  # with h = 1: the derivative itself
        dt, cstate = row_init(
            controller, lambda d, x: fe.raw(s + d, x), span, y, f0, solver,
            None if dt0 is None else abs(dt0),
        )  # fmt: skip
        done = torch.zeros_like(s, dtype=torch.bool)
        retry = torch.zeros_like(done)
        stretch = max(SNAP, controller.stretch)
        runs = _Runs.make(solver, controller, fe.direction, y) if self.compiled else None
        single = False  # the next iteration is the eager loop's own
        while True:
            if stats.n_steps >= self.max_steps:
                failures.append((Status.MAX_STEPS_REACHED, ~done, ""))
                return (y, s, *_failed(failures))
            if runs is not None and not single:
                budget = self.max_steps - stats.n_steps
                ran = runs(self, fe, state, stats, outputs, (s1, span, budget),
                           (y, f0, s, dt, cstate, retry, done))  # fmt: skip
                if ran is None:  # it did not compile: the eager loop goes on
                    runs = None
                    continue
                single, (y, f0, s, dt, cstate, retry, done) = ran
                if not single and bool(done.all()):
                    break
                continue
            single = False
            land = s + dt >= s1 - torch.where(retry, SNAP, stretch) * dt
            h = torch.where(done, 0.0, torch.where(land, s1 - s, dt))
            small = ~done & (dt <= 8 * _EPS * torch.clamp(s.abs(), min=span))
            fe.place(s, h)
            f0_step = f0 * fe.scale
            step = solver.step_with(state, fe, 0.0, 1.0, y, f0_step)
            stats.n_steps += 1
            verdict = row_adapt(controller, h, y, step, solver, cstate)
            active = ~done
            accept = verdict.accept & active
            failure = step.failure  # the solver's own account of a failed step
            if step.y1.requires_grad and bool((active & ~verdict.finite).any()):
                # The rows of a non-finite step are rejected, but stay in the graph behind
                # the mask, where backpropagation multiplies their zero gradient by
                # infinite partials: NaN in the gradient of every tensor they read. The
                # step is taken again with those rows standing still; the others' values
                # are the same.
                fe.place(s, torch.where(active & ~verdict.finite, 0.0, h))
                f0_step = f0 * fe.scale
                step = solver.step_with(state, fe, 0.0, 1.0, y, f0_step)
            cstate = verdict.state
            outputs.read(solver, fe, y, f0_step, step, accept)
            y = _where(accept, step.y1, y)
            s = torch.where(accept, torch.where(land, s1, s + h), s)
            done = done | (accept & land)
            self.accepted += accept
            self.rejected += active & ~accept
            lost = (
                ~done & ~verdict.finite & (verdict.dt <= 8 * _EPS * torch.clamp(s.abs(), min=span))
            )
            flags = torch.stack([accept.any(), done.all(), small.any(), lost.any()]).tolist()
            stats.n_accepted += int(flags[0])
            stats.n_rejected += 1 - int(flags[0])
            if flags[2]:
                failures.append((Status.DT_UNDERFLOW, small, ""))
            lost = lost & ~small
            if flags[3] and bool(lost.any()):
                if failure is not None:  # the solver's own account (a singular matrix)
                    failures.append((failure.status, lost, f" {failure}"))
                else:
                    failures.append((Status.NONFINITE, lost, ""))
            if flags[2] or flags[3]:  # the failed samples stop; the others go on
                done = done | small | lost
                flags[1] = bool(done.all())
            if flags[1]:
                break
            f1 = fe.at_end(step.y1)
            if f1 is None and step.f1 is not None:
                f1 = step.f1 / torch.where(fe.scale == 0, 1.0, fe.scale)
            f0 = _where(accept, fe.raw(s, y) if f1 is None else f1, f0)
            dt, retry = torch.where(done, dt, verdict.dt), ~accept
        if not bool(torch.isfinite(y).all()):
            failures.append((Status.NONFINITE, ~torch.isfinite(y).flatten(1).all(1), ""))
        return (y, s, *_failed(failures))


_FAILED: set[object] = set()
"""Compiled per-sample loops that failed to compile: later solves run eagerly at once."""


class _Runs:
    """Runs of the loop's iterations as one compiled graph (``_compiled_step._row_steps``),
    for ``compile=True`` without a graph; one host read a run."""

    def __init__(self, loop: Callable[..., tuple[Tensor, ...]], solver: AbstractSolver,
                 controller: PIDController) -> None:  # fmt: skip
        from ._compiled_step import evaluations
        from ._rosenbrock import _AbstractRosenbrock

        self.loop, self.solver, self.tols = loop, solver, (controller.rtol, controller.atol)
        self.rosenbrock = isinstance(solver, _AbstractRosenbrock)
        self.evaluations = evaluations(solver)

    @staticmethod
    def make(
        solver: AbstractSolver, controller: PIDController, direction: float, y: Tensor
    ) -> _Runs | None:
        """The runs of this method, or ``None``, with the warning, where they do not
        apply: a solve with a graph, or a step that does not return ``f1``."""
        from ._compiled import fall_back
        from ._compiled_step import row_loop

        if torch.is_grad_enabled():
            fall_back("per-sample step sizes compile only for a solve without a graph "
                      "(under torch.no_grad())")  # fmt: skip
            return None
        loop = row_loop(solver, controller, direction, y)
        if loop in _FAILED:
            fall_back("torch.compile failed on this method's per-sample loop before")
            return None
        if loop is None:
            fall_back(f"per-sample step sizes compile for steps that return f(t1, y1), "
                      f"not {type(solver).__name__}'s")  # fmt: skip
            return None
        return _Runs(loop, solver, controller)

    def __call__(
        self, owner: PerSampleLoop, fe: _RowField, state: SolveState | None, stats: Stats,
        outputs: _Outputs, limits: tuple[float, float, int], loop_state: tuple[Any, ...],
    ) -> tuple[bool, tuple[Any, ...]] | None:  # fmt: skip
        """One run from the loop's variables ``(y, f0, s, dt, cstate, retry, done)``:
        whether it stopped before an iteration the eager loop must take, and the
        variables after it; ``None``, with the warning, if it did not compile."""
        from ._compiled import _LOOP_ERRORS, _first_line, fall_back

        assert owner.accepted is not None and owner.rejected is not None
        y, f0, s, dt, cstate, retry, done = loop_state
        like = torch.tensor(0.0, dtype=torch.float64, device=y.device)
        try:
            out = self.loop(
                fe.f, y, f0, torch.stack((s, dt, *cstate)), torch.stack((retry, done)),
                torch.stack((owner.accepted, owner.rejected)), outputs.at,
                like.new_tensor(limits), like.new_tensor(self.tols[0]),
                like.new_tensor(self.tols[1]),
            )  # fmt: skip
        except _LOOP_ERRORS as err:
            _FAILED.add(self.loop)
            fall_back(f"torch.compile failed on this solve ({_first_line(err)})")
            return None
        y, f0, rows, flags, counts, ks, numbers, y_prev, f0_prev, last = out
        n, taken, code = (int(x) for x in numbers.tolist())  # the one host read of the run
        stats.n_steps += n
        stats.n_accepted += taken
        stats.n_rejected += n - taken
        fe.nfe += self.evaluations * n
        if self.rosenbrock and state is not None:
            state.n_jacobians += n
            state.n_factorisations += n
        owner.accepted, owner.rejected = counts.unbind()
        s, dt, *ratios = rows.unbind()
        retry, done = flags.unbind()
        if code == 1 and outputs.taus:  # its last iteration may reach output times
            s_prev, h_prev, accepted = last.unbind()
            fe.place(s_prev, h_prev)
            step = StepResult(y1=y, y_err=None, ks=tuple(ks.unbind(0)), f1=f0 * fe.scale)
            outputs.read(self.solver, fe, y_prev, f0_prev, step, accepted != 0)
        return code == 2, (y, f0, s, dt, tuple(ratios), retry, done)


class _Outputs:
    """The states at the output times inside the span, each sample's read off the
    dense output of its own step that holds the time (NaN where not reached)."""

    def __init__(self, taus: list[float], y0: Tensor) -> None:
        self.taus = taus
        self.at = torch.tensor(taus, dtype=torch.float64, device=y0.device)
        nan = y0.new_full(y0.shape[1:], math.nan)
        self.empty = y0.new_empty((0, *y0.shape[1:]))  # the outputs of an empty batch
        self.rows: dict[float, list[Tensor]] = {tau: [nan] * y0.shape[0] for tau in taus}

    def read(
        self,
        solver: AbstractSolver,
        fe: _RowField,
        y: Tensor,
        f0: Tensor,
        step: StepResult,
        accept: Tensor,
    ) -> None:
        """Read the output times that the accepted steps (from ``fe.s``, of sizes
        ``fe.h``) reach; a step is ``[0, 1]`` to the solver."""
        if not self.taus:
            return
        theta = (self.at.unsqueeze(0) - fe.s.unsqueeze(1)) / fe.h.unsqueeze(1)
        hits = (accept.unsqueeze(1) & (theta > 0) & (theta <= 1 + SNAP)).nonzero().tolist()
        if not hits:
            return
        read = solver.reader(fe, 0.0, 1.0, y, f0, step)
        for b, k in hits:
            value = min(float(theta[b, k]), 1.0)
            self.rows[self.taus[k]][b] = read(value)[b]

    def stacked(self, tau: float) -> Tensor:
        """The batch's states at ``tau``."""
        rows = self.rows[tau]
        return torch.stack(rows) if rows else self.empty


def _failed(failures: list[tuple[Status, Tensor, str]]) -> tuple[Status, str]:
    """The status of a solve whose samples failed as ``failures`` say (the first
    failure's; success for none), and the message that names the samples of each
    status (the first's status is said before it)."""
    if not failures:
        return Status.SUCCESS, ""
    groups: dict[Status, tuple[Tensor, str]] = {}
    for status, mask, note in failures:
        seen, notes = groups.get(status, (torch.zeros_like(mask), ""))
        groups[status] = (seen | mask, notes + note)
    (first, (mask, note)), *others = groups.items()
    message = _which(mask) + note
    for status, (mask, note) in others:
        message += f" {_which(mask)[:-1]}: {status}.{note}"
    return first, message


def _which(mask: Tensor) -> str:
    """The samples of ``mask``, in words."""
    rows = mask.nonzero().flatten().tolist()
    shown = ", ".join(str(i) for i in rows[:10]) + (", ..." if len(rows) > 10 else "")
    return f"Samples [{shown}] ({len(rows)} of {mask.numel()}) did not reach t1."
