"""Gradient methods other than backprop through an OdeBlock: its field solved by
``odecore.solve``. The reversible method against backprop through a plain loop of its
two formulas on the block's field, in float64."""

from __future__ import annotations

import itertools

import odecore
import pytest
import torch
from contnet import OdeBlock
from odelayers.basis import Legendre, PiecewiseConstant
from torch import Tensor, nn

F64 = torch.float64


def _block() -> OdeBlock:
    torch.manual_seed(0)
    residual = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))
    return OdeBlock(residual, basis=Legendre(degree=2), solver="rk4", n_steps=4).to(F64)


def _coupled(block: OdeBlock, x: Tensor, coupling: float) -> Tensor:
    """The reversible solve of the block's field, as a plain loop recorded by autograd."""

    def f(t: float, y: Tensor) -> Tensor:
        return block.field(float(t), y)

    y = z = x
    for a, b in itertools.pairwise([k / block.n_steps for k in range(block.n_steps + 1)]):
        y1 = coupling * y + (1 - coupling) * z + (block.solver.step(f, a, b, z, f(a, z)).y1 - z)
        z = z - (block.solver.step(f, b, a, y1, f(b, y1)).y1 - y1)
        y = y1
    return y


@pytest.mark.parametrize("coupling", [0.999, 0.9])
def test_the_reversible_method_differentiates_a_block_exactly(coupling):
    block = _block()
    x = torch.randn(5, 3, dtype=F64, requires_grad=True)
    inputs = [x, *block.parameters()]
    solution = odecore.solve(
        lambda t, y: block.field(float(t), y), x, t0=0.0, t1=1.0, solver=block.solver,
        dt0=1.0 / block.n_steps,
        gradient=odecore.Reversible(coupling=coupling, params=tuple(block.parameters())),
    )  # fmt: skip
    got, want = solution.ys[-1], _coupled(block, x, coupling)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=0.0)
    weight = torch.linspace(0.5, 1.5, 15, dtype=F64).view(5, 3)
    for g, w in zip(
        torch.autograd.grad((weight * got.sin()).sum(), inputs),
        torch.autograd.grad((weight * want.sin()).sum(), inputs),
    ):
        assert (g - w).abs().max() <= 1e-12 * w.abs().max()
    # and it solves the block's ODE: within 1e-7 of the block's own rk4 steps (which
    # move x by 0.8)
    assert (got - block(x)).abs().max() < 1e-7


@pytest.mark.parametrize("gradient", [odecore.Autograd, odecore.Checkpoint])
def test_a_solve_with_the_jumps_of_a_piecewise_constant_basis_is_the_block(gradient):
    # odecore reads the field a floating-point number below a time of jump_ts for a
    # stage at the end of a step (RK4's last): the block's field rounded that depth up
    # to the jump and read the next piece, 0.07 away from the block's output.
    torch.manual_seed(0)
    residual = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))
    block = OdeBlock(residual, basis=PiecewiseConstant(pieces=4), solver="rk4", n_steps=4,
                     epsilon=1.3).to(F64)  # fmt: skip
    x = torch.randn(5, 3, dtype=F64, requires_grad=True)
    inputs = [x, *block.parameters()]
    got = odecore.solve(
        lambda t, y: block.field(float(t), y), x, t0=0.0, t1=1.0, solver=block.solver,
        dt0=1.0 / block.n_steps, jump_ts=block.basis.jump_ts, gradient=gradient(),
    ).ys[-1]  # fmt: skip
    want = block(x)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)
    grads = [torch.autograd.grad(y.sum(), inputs) for y in (got, want)]
    for g, w in zip(*grads):
        torch.testing.assert_close(g, w, rtol=1e-13, atol=1e-14)
