"""Timed runs: one solve (and its backward pass) at a time, and the cost of one evaluation."""

from __future__ import annotations

import statistics
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ._libraries import Library, Method
from ._problems import CountingField, Problem


@dataclass
class Observation:
    """One timed run: seconds of the solve and its backward pass, the evaluations in each,
    ``y(t1)``, and the gradient for ``y0`` and the parameters as one float64 vector."""

    time_s: float
    nfe_forward: int
    nfe_backward: int
    y1: Tensor
    gradient: Tensor | None = None


def loss_weight(problem: Problem, seed: int = 1) -> Tensor:
    """The fixed cotangent ``w`` of the loss ``L = sum(w * y(t1))``, scaled so that ``L`` is of
    order one."""
    gen = torch.Generator().manual_seed(seed)
    w: Tensor = torch.randn(problem.y0.shape, generator=gen) / problem.y0.numel() ** 0.5
    return w.to(problem.y0.dtype)


def flat_gradient(y0: Tensor, params: list[nn.Parameter]) -> Tensor:
    """``y0.grad`` and every parameter's ``.grad`` (zeros where ``None``) as one float64 vector."""
    parts = [x.grad if x.grad is not None else torch.zeros_like(x) for x in (y0, *params)]
    return torch.cat([g.detach().reshape(-1).to(torch.float64) for g in parts])


def run_once(
    library: Library,
    problem: Problem,
    counter: CountingField,
    method: Method,
    mode: str,
    weight: Tensor,
) -> Observation:
    """Time one solve of ``problem`` by ``library``: without a graph in mode ``forward``, else
    with the backward pass of ``L = sum(w * y(t1))``."""
    counter.zero_grad(set_to_none=True)
    y0 = problem.y0.detach().clone()
    counter.nfe = 0
    if mode == "forward":
        start = time.perf_counter()
        y1 = _solve_forward(library, counter, y0, problem, method)
        elapsed = time.perf_counter() - start
        return Observation(elapsed, counter.nfe, 0, y1.detach())
    y0.requires_grad_(True)
    start = time.perf_counter()
    y1 = library.solve(counter, y0, problem.t0, problem.t1, method, mode)
    nfe_forward = counter.nfe
    torch.autograd.backward((y1 * weight).sum())
    elapsed = time.perf_counter() - start
    gradient = flat_gradient(y0, list(counter.parameters()))
    return Observation(elapsed, nfe_forward, counter.nfe - nfe_forward, y1.detach(), gradient)


def _solve_forward(
    library: Library, field: nn.Module, y0: Tensor, problem: Problem, method: Method
) -> Tensor:
    """``library``'s forward solve of ``field`` from ``y0`` without a graph: runs, recordings
    and replays all take this path."""
    with torch.no_grad():
        return library.solve(field, y0, problem.t0, problem.t1, method, "forward")


_GC_ON = "gc.enable()"
"""timeit's setup that keeps the garbage collector on, as it is in the timed solves."""


def _per_call(fn: Callable[[], object], block_s: float, blocks: int) -> float:
    """Median seconds per call of ``fn`` over ``blocks`` blocks of about ``block_s`` each."""
    once = max(_timed(fn, 1), 1e-7)  # after a warm-up call
    calls = max(1, int(block_s / once))
    return statistics.median(timeit.repeat(fn, _GC_ON, number=calls, repeat=blocks)) / calls


def _timed(fn: Callable[[], object], calls: int) -> float:
    """Seconds per call of ``fn`` over ``calls`` calls in a row, after one untimed call (the
    first after the solves runs cold)."""
    fn()
    return timeit.timeit(fn, _GC_ON, number=calls) / calls


class FieldTimer:
    """Times the field alone at ``(t0, y0)``, through the solves' :class:`CountingField`
    (its count reset): the denominators of the overhead factors."""

    def __init__(self, counter: CountingField, problem: Problem) -> None:
        self.counter = counter
        self.t = torch.tensor(problem.t0, dtype=problem.y0.dtype)
        self.y0 = problem.y0.detach()
        self.params = list(counter.parameters())
        self.cotangent = loss_weight(problem, seed=2)

    def evaluate(self) -> None:
        """One evaluation at ``(t0, y0)``; the caller holds ``torch.no_grad()``."""
        self.counter.nfe = 0  # timing blocks are not runs: never reach the limit
        self.counter(self.t, self.y0)

    def evaluate_vjp(self) -> None:
        self.counter.nfe = 0
        y = self.y0.clone().requires_grad_(True)
        out = self.counter(self.t, y)
        torch.autograd.grad(out, [y, *self.params], self.cotangent, allow_unused=True)

    def chained_block(self, calls: int) -> float:
        """Seconds per evaluation over ``calls`` evaluations chained by one axpy each,
        ``y <- y + eps f(t, y)``: the least any solver pays per evaluation."""
        self.counter.nfe = 0
        y = self.y0

        def step() -> None:
            nonlocal y
            y = y.add(self.counter(self.t, y), alpha=1e-6)

        with torch.no_grad():
            elapsed = _timed(step, calls)
        self.counter.nfe = 0
        return elapsed

    def block(self, calls: int, vjp: bool) -> float:
        """Seconds per call over ``calls`` calls in a row, of one kind (see :func:`_timed`)."""
        with torch.set_grad_enabled(vjp):
            elapsed = _timed(self.evaluate_vjp if vjp else self.evaluate, calls)
        self.counter.nfe = 0
        return elapsed

    def evaluation_times(self, *, block_s: float = 0.02, blocks: int = 7) -> tuple[float, float]:
        """Seconds of one evaluation alone and with its VJP: medians over ``blocks`` blocks
        of about ``block_s`` seconds each."""
        with torch.no_grad():
            eval_s = _per_call(self.evaluate, block_s, blocks)
        vjp_s = _per_call(self.evaluate_vjp, block_s, blocks)
        self.counter.nfe = 0
        return eval_s, vjp_s


class ReplayError(RuntimeError):
    """A replayed run did not make the recorded run's evaluations, or ended elsewhere."""


class Tape(nn.Module):
    """The field, recording a copy of each output while ``recording``; then a stand-in for
    it that hands the outputs back in order, so that a solve of it times the solver alone
    (docs/odebench/index.md). A replay never calls ``field``: it lends the tape its
    parameters, which some libraries look for."""

    def __init__(self, field: nn.Module) -> None:
        super().__init__()
        self.field = field
        self.outputs: list[Tensor] = []
        self.y1 = torch.empty(0)
        self.recording = True
        self.position = 0

    @property
    def nfe(self) -> int:
        return len(self.outputs)

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        if self.recording:
            out: Tensor = self.field(t, y)
            self.outputs.append(out.detach().clone())
            return out
        if self.position >= len(self.outputs):
            raise ReplayError(
                f"the replay asked for more than the {len(self.outputs)} recorded evaluations"
            )
        self.position += 1
        return self.outputs[self.position - 1]


def record(library: Library, problem: Problem, counter: CountingField, method: Method) -> Tape:
    """Run one forward solve of ``problem`` (untimed) and record the field's outputs."""
    tape = Tape(counter)
    counter.nfe = 0
    tape.y1 = _solve_forward(library, tape, problem.y0.detach().clone(), problem, method).clone()
    tape.recording = False
    counter.nfe = 0
    return tape


def replay_once(library: Library, problem: Problem, tape: Tape, method: Method) -> float:
    """Seconds of one forward solve of ``tape`` instead of the field: the solver alone.

    Raises:
        ReplayError: the replay made other evaluations or ended at another ``y(t1)``.
    """
    y0 = problem.y0.detach().clone()
    tape.position = 0
    start = time.perf_counter()
    y1 = _solve_forward(library, tape, y0, problem, method)
    elapsed = time.perf_counter() - start
    if tape.position != tape.nfe:
        raise ReplayError(
            f"the replay made {tape.position} evaluations, the recorded run {tape.nfe}"
        )
    if not torch.equal(y1, tape.y1):
        raise ReplayError("the replay ended at another y(t1) than the recorded run")
    return elapsed
