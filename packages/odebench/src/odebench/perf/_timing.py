"""Timed runs: one solve (and its backward pass) at a time, and the cost of one evaluation."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ._libraries import Library, Method
from ._problems import CountingField, Problem
from ._stats import median


@dataclass
class Observation:
    """One timed run.

    Attributes:
        time_s: wall-clock seconds of the solve, plus the backward pass if any.
        nfe_forward: evaluations of the field during the solve.
        nfe_backward: evaluations during the backward pass (0 for backpropagation,
            whose backward pass autograd runs without calling the field).
        y1: the state at ``t1`` (detached).
        gradient: the gradient of the loss for ``y0`` and the parameters, flattened
            into one float64 vector; ``None`` for a forward run.
    """

    time_s: float
    nfe_forward: int
    nfe_backward: int
    y1: Tensor
    gradient: Tensor | None = None


def loss_weight(problem: Problem, seed: int = 1) -> Tensor:
    """The fixed cotangent ``w`` of the benchmark's loss ``L = sum(w * y(t1))``.

    Drawn once per problem; scaled so that ``L`` is of order one.
    """
    gen = torch.Generator().manual_seed(seed)
    w: Tensor = torch.randn(problem.y0.shape, generator=gen) / problem.y0.numel() ** 0.5
    return w.to(problem.y0.dtype)


def flat_gradient(y0: Tensor, params: list[nn.Parameter]) -> Tensor:
    """``y0.grad`` and every parameter's ``.grad`` (zeros where ``None``) as one float64 vector."""
    parts = [y0.grad if y0.grad is not None else torch.zeros_like(y0)]
    parts += [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    return torch.cat([g.detach().reshape(-1).to(torch.float64) for g in parts])


def run_once(
    library: Library,
    problem: Problem,
    counter: CountingField,
    method: Method,
    mode: str,
    weight: Tensor,
) -> Observation:
    """Run one solve of ``problem`` with ``library`` and time it.

    In mode ``forward`` the solve runs under ``torch.no_grad()``; in a gradient
    mode the timed region also holds ``loss.backward()`` for ``L = sum(w * y(t1))``,
    which fills the gradients of ``y0`` and of the field's parameters.
    """
    params = list(counter.parameters())
    for p in params:
        p.grad = None
    y0 = problem.y0.detach().clone()
    if mode != "forward":
        y0.requires_grad_(True)
    counter.nfe = 0
    if mode == "forward":
        start = time.perf_counter()
        with torch.no_grad():
            y1 = library.solve(counter, y0, problem.t0, problem.t1, method, mode)
        elapsed = time.perf_counter() - start
        return Observation(elapsed, counter.nfe, 0, y1.detach())
    start = time.perf_counter()
    y1 = library.solve(counter, y0, problem.t0, problem.t1, method, mode)
    nfe_forward = counter.nfe
    torch.autograd.backward((y1 * weight).sum())
    elapsed = time.perf_counter() - start
    return Observation(
        elapsed, nfe_forward, counter.nfe - nfe_forward, y1.detach(), flat_gradient(y0, params)
    )


def _per_call(fn: Callable[[], object], block_s: float, blocks: int) -> float:
    """Median seconds per call of ``fn`` over ``blocks`` blocks of about ``block_s`` each."""
    fn()  # warm up
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    calls = max(1, int(block_s / once))
    times = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    result = median(times)
    assert result is not None
    return result


class FieldTimer:
    """Times the field alone at ``(t0, y0)``: the denominators of the overhead factors.

    ``evaluate`` runs under ``torch.no_grad()``, as a forward solve without a graph
    does. ``evaluate_vjp`` records the graph, then takes the vector-Jacobian product
    for ``y`` and every parameter, as one step of backpropagation or one evaluation
    of the adjoint system does. Both go through the same :class:`CountingField` the
    solves use, whose count each of them resets (so a long block never reaches the
    field's limit).
    """

    def __init__(self, counter: CountingField, problem: Problem) -> None:
        self.counter = counter
        self.t = torch.tensor(problem.t0, dtype=problem.y0.dtype)
        self.y0 = problem.y0.detach()
        self.params = list(counter.parameters())
        gen = torch.Generator().manual_seed(2)
        self.cotangent = torch.randn(self.y0.shape, generator=gen).to(self.y0.dtype)

    def evaluate(self) -> None:
        self.counter.nfe = 0  # timing blocks are not runs: never reach the limit
        with torch.no_grad():
            self.counter(self.t, self.y0)

    def evaluate_vjp(self) -> None:
        self.counter.nfe = 0
        y = self.y0.clone().requires_grad_(True)
        out = self.counter(self.t, y)
        torch.autograd.grad(out, [y, *self.params], self.cotangent, allow_unused=True)

    def block(self, calls: int, vjp: bool) -> float:
        """Seconds per call over ``calls`` calls in a row, of one kind."""
        fn = self.evaluate_vjp if vjp else self.evaluate
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = (time.perf_counter() - start) / calls
        self.counter.nfe = 0
        return elapsed

    def evaluation_times(self, *, block_s: float = 0.02, blocks: int = 7) -> tuple[float, float]:
        """Seconds for one evaluation of the field alone, and for one evaluation plus
        its VJP: medians over ``blocks`` blocks of about ``block_s`` seconds each. The
        field's count is reset afterwards.
        """
        eval_s = _per_call(self.evaluate, block_s, blocks)
        vjp_s = _per_call(self.evaluate_vjp, block_s, blocks)
        self.counter.nfe = 0
        return eval_s, vjp_s
