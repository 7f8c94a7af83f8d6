"""The solve loop reads tensor values on the host once per adaptive step, no more.

On a GPU, every read of a value on the host (``float(x)``, ``x.item()``,
``x.tolist()``, ``bool(x)``...) waits for all queued work. Step-size control needs one
read per step, the error norm; the finiteness of the steps and everything else is
read once at the start or the end of a solve. These tests count the reads on the
CPU, where the same code runs: the count minus the number of steps must not depend
on how many steps there are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import odecore
import pytest
import torch

F64 = torch.float64

# Every Tensor method that hands a value (or a data-dependent shape) to the host.
_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "numpy", "nonzero")


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the host reads made while the test runs, in order."""
    seen: list[str] = []
    for name in _READS:
        original = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *args: Any, _f: Any = original, _n: str = name, **kw: Any):
            seen.append(_n)
            return _f(self, *args, **kw)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return seen


@dataclass(frozen=True)
class Counting(odecore.AbstractController):
    """A PID controller that counts the steps it judges."""

    inner: odecore.PIDController
    steps: list[int] = field(default_factory=list, compare=False)

    @property
    def stretch(self) -> float:  # type: ignore[override]
        return self.inner.stretch

    def init(self, *args: Any) -> tuple[float, Any]:
        return self.inner.init(*args)

    def adapt(self, *args: Any) -> odecore.Adaptation:
        self.steps.append(1)
        return self.inner.adapt(*args)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(2, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)
        ).to(F64)

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(y) * (1 + 0.5 * torch.sin(3 * t))


TS = (0.0, 1.0, 2.0, 3.0)


def _solve(reads: list[str], tol: float, solver: odecore.AbstractSolver, gradient: Any):
    y0 = torch.randn(8, 2, dtype=F64, requires_grad=True)
    reads.clear()
    sol = odecore.solve(
        Net(),
        y0,
        t0=TS[0],
        t1=TS[-1],
        solver=solver,
        controller=odecore.PIDController(rtol=tol, atol=tol),
        saveat=odecore.SaveAt(ts=TS),
        gradient=gradient,
    )
    assert sol.status == odecore.Status.SUCCESS
    forward = len(reads)
    reads.clear()
    sol.ys.sum().backward()
    return sol.stats, forward, len(reads)


@pytest.mark.parametrize("solver", [odecore.Dopri5(), odecore.Tsit5(), odecore.Bosh3()])
@pytest.mark.parametrize("gradient", [odecore.Autograd(), odecore.Adjoint(), odecore.Checkpoint()])
def test_forward_reads_once_per_step(reads, solver, gradient):
    loose, loose_reads, _ = _solve(reads, 1e-4, solver, gradient)
    tight, tight_reads, _ = _solve(reads, 1e-9, solver, gradient)
    assert tight.n_steps > 3 * loose.n_steps  # the two solves differ enough to tell
    assert tight.n_rejected + loose.n_rejected > 0  # rejected steps are counted too
    extra = loose_reads - loose.n_steps
    assert tight_reads - tight.n_steps == extra
    # y0's and f(t0, y0)'s finiteness (two each), the first step size (two), and
    # the finiteness of all steps at the end (one).
    assert 0 <= extra <= 7


@pytest.mark.parametrize("n_steps", [10, 200])
def test_fixed_steps_read_nothing_per_step(reads, n_steps):
    y0 = torch.randn(8, 2, dtype=F64)
    reads.clear()
    sol = odecore.solve(
        Net(), y0, t0=0.0, t1=3.0, solver=odecore.RK4(), dt0=3.0 / n_steps,
        saveat=odecore.SaveAt(ts=TS),
    )  # fmt: skip
    assert sol.stats.n_steps >= n_steps
    # y0's and f(t0, y0)'s finiteness (two each), all steps' at the end (one).
    assert len(reads) <= 5


def test_adjoint_backward_reads_once_per_step(reads):
    counts = []
    for tol in (1e-4, 1e-9):
        backward = Counting(odecore.PIDController(rtol=tol, atol=tol))
        gradient = odecore.Adjoint(controller=backward)
        _, _, backward_reads = _solve(reads, tol, odecore.Dopri5(), gradient)
        counts.append((len(backward.steps), backward_reads))
    (loose_steps, loose_reads), (tight_steps, tight_reads) = counts
    assert tight_steps > 3 * loose_steps
    # One backward solve per output interval, each with the forward's set-up and
    # final check (y0's is made once for all).
    extra = loose_reads - loose_steps
    assert tight_reads - tight_steps == extra
    assert 0 <= extra <= 7 * (len(TS) - 1)


def test_autograd_backward_reads_nothing(reads):
    stats, _, backward_reads = _solve(reads, 1e-9, odecore.Dopri5(), odecore.Autograd())
    assert stats.n_steps > 10
    assert backward_reads == 0


def test_checkpoint_backward_reads_nothing_per_step(reads):
    counts = []
    for tol in (1e-4, 1e-9):
        gradient = odecore.Checkpoint(every=10**6)  # one segment, however many steps
        stats, _, backward_reads = _solve(reads, tol, odecore.Dopri5(), gradient)
        counts.append((stats.n_steps, backward_reads))
    (loose_steps, loose_reads), (tight_steps, tight_reads) = counts
    assert tight_steps > 3 * loose_steps
    # The replay's set-up and final check, none per step.
    assert tight_reads == loose_reads <= 5
