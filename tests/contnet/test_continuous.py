"""Continuous parameters and OdeBlock: shapes, stage times, batch-norm statistics."""

from __future__ import annotations

import itertools
import math

import odecore
import pytest
import torch
from contnet import ContinuousModule, OdeBlock
from odelayers.basis import Legendre, PiecewiseConstant, PiecewiseLinear
from torch import nn

F64 = torch.float64


def test_coefficients_of_every_parameter_and_buffer():
    r = nn.Sequential(nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1))
    cont = ContinuousModule(r, PiecewiseConstant(pieces=5))
    assert cont.coefficient("2.weight").shape == (5, 16, 16, 3, 3)
    assert cont.coefficient("2.bias").shape == (5, 16)
    assert cont.coefficient("0.running_mean").shape == (5, 16)
    assert cont.shared_names == ["0.num_batches_tracked"]
    # Row-major coefficients: every piece is a contiguous tensor (batch norm is slow
    # on strided statistics).
    assert all(cont.coefficient(n).is_contiguous() for n in cont.names + cont.buffer_names)
    # Only the coefficients are parameters: R's own tensors are not counted twice.
    n = sum(p.numel() for p in cont.parameters())
    assert n == 5 * sum(p.numel() for p in r.parameters())
    # Pieces start as independent initialisations, like the units of a ResNet.
    w = cont.coefficient("2.weight")
    assert not torch.equal(w[0], w[1])


def test_piecewise_constant_evaluation_is_a_view_of_its_piece():
    cont = ContinuousModule(nn.Linear(2, 2), PiecewiseConstant(pieces=4))
    theta = cont.evaluate(0.6)
    assert theta["weight"].data_ptr() == cont.coefficient("weight")[2].data_ptr()


def test_piecewise_linear_interpolates_between_nodes():
    cont = ContinuousModule(nn.Linear(2, 2), PiecewiseLinear(pieces=2))
    c = cont.coefficient("weight").detach()
    torch.testing.assert_close(cont.evaluate(0.25)["weight"], (c[0] + c[1]) / 2)


def test_smooth_basis_starts_constant_in_depth():
    torch.manual_seed(0)
    r = nn.Linear(3, 3)
    cont = ContinuousModule(r, Legendre(degree=3))
    for t in (0.0, 0.4, 1.0):
        torch.testing.assert_close(cont.evaluate(t)["weight"], r.weight.detach())


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)))


class _Symmetric(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w + w.T


def _parametrized() -> nn.Module:
    layer = nn.Linear(3, 3)
    torch.nn.utils.parametrize.register_parametrization(layer, "weight", _Symmetric())
    return layer


@pytest.mark.parametrize(
    "make",
    [lambda: nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Tanh()), _Tied, _parametrized],
    ids=["plain", "tied", "parametrized"],
)
def test_module_runs_on_the_evaluated_tensors(make):
    torch.manual_seed(0)
    r = make().eval()
    own = {n: t.clone() for n, t in r.state_dict().items()}
    cont = ContinuousModule(r, PiecewiseLinear(pieces=3)).eval()
    x = torch.randn(5, 3)
    theta = cont.evaluate(0.4)
    expected = torch.func.functional_call(r, theta, (x,))
    torch.testing.assert_close(cont(0.4, x), expected, rtol=0, atol=0)
    # R's own tensors are back in place, also after a failing call.
    with pytest.raises(RuntimeError):
        cont(0.4, torch.randn(5, 4))
    for n, t in r.state_dict().items():
        assert torch.equal(t, own[n]), n


STAGE_TIMES = {"euler": [0.0], "midpoint": [0.0, 0.5], "rk4": [0.0, 0.5, 0.5, 1.0],
           "rk4_38": [0.0, 1 / 3, 2 / 3, 1.0]}  # fmt: skip


@pytest.mark.parametrize("method", list(STAGE_TIMES))
def test_each_stage_reads_the_weights_at_its_own_time(method):
    block = OdeBlock(nn.Linear(2, 2), basis=Legendre(degree=2), solver=method, n_steps=3)
    asked: list[tuple[float, bool]] = []
    weights = block.continuous.weights  # where every evaluation of theta reads its time

    def recording(t, *, left=False):
        asked.append((t, left))
        return weights(t, left=left)

    block.continuous.weights = recording
    block(torch.zeros(1, 2))
    expected = [(k + c) / 3 for k in range(3) for c in STAGE_TIMES[method]]
    assert [t for t, _ in asked] == pytest.approx(expected, abs=1e-15)
    # A stage at the end of its step asks for the limit from the left.
    assert [left for _, left in asked] == [c == 1.0 for _ in range(3) for c in STAGE_TIMES[method]]


@pytest.mark.parametrize(
    ("method", "solver"), [("rk4", odecore.RK4), ("midpoint", odecore.Midpoint)]
)
def test_every_step_is_one_step_of_the_odecore_solver(method, solver, monkeypatch):
    # The block has no stage sum of its own: each step goes through the solver's `step`.
    steps: list[tuple[float, float]] = []
    step = solver.step

    def counting(self, f, t0, t1, y0, f0):
        steps.append((t0, t1))
        return step(self, f, t0, t1, y0, f0)

    block = OdeBlock(nn.Linear(2, 2), basis=Legendre(degree=1), solver=method, n_steps=3)
    assert isinstance(block.solver, solver)
    monkeypatch.setattr(solver, "step", counting)
    block(torch.zeros(1, 2))
    assert steps == [(0.0, 1 / 3)] * 3  # each step in its own local time [0, h]


def test_a_solver_object_is_its_method_name():
    torch.manual_seed(0)
    block = OdeBlock(nn.Linear(3, 3), basis=Legendre(degree=2), solver="rk4_38", n_steps=2)
    other = block.manifest(solver=odecore.RK4ThreeEighths())
    assert other.method == "rk4_38" and isinstance(other.solver, odecore.RK4ThreeEighths)
    x = torch.randn(4, 3)
    assert torch.equal(other(x), block(x))


def test_euler_block_is_a_resnet_block():
    # epsilon = N_t and M = N_t: step k is x + R_k(x).
    torch.manual_seed(0)
    block = OdeBlock(nn.Linear(3, 3), basis=PiecewiseConstant(pieces=4), n_steps=4, epsilon=4.0)
    block = block.double()
    x = torch.randn(2, 3, dtype=F64)
    y = x
    for k in range(4):
        w = block.continuous.coefficient("weight")[k]
        b = block.continuous.coefficient("bias")[k]
        y = y + y @ w.T + b
    torch.testing.assert_close(block(x), y)


def test_linear_block_against_the_matrix_exponential():
    # R(x) = A x with constant weights: the solution is exp(epsilon A) x; rk4 errs O(h^4).
    torch.manual_seed(0)
    block = OdeBlock(nn.Linear(3, 3, bias=False), basis=Legendre(degree=0), solver="rk4",
                     epsilon=0.7).double()  # fmt: skip
    a = block.continuous.coefficient("weight")[0].detach()
    x = torch.randn(4, 3, dtype=F64)
    exact = x @ torch.linalg.matrix_exp(0.7 * a).T
    errors = []
    for n in (4, 8, 16):
        with torch.no_grad():
            errors.append(float((block.manifest(n_steps=n)(x) - exact).abs().max()))
    for coarse, fine in itertools.pairwise(errors):
        assert math.log2(coarse / fine) == pytest.approx(4.0, abs=0.3)


def test_batch_norm_statistics_are_functions_of_depth():
    # Training: step k updates only piece k's statistics, by BatchNorm's own rule.
    torch.manual_seed(0)
    r = nn.Sequential(nn.BatchNorm1d(2, momentum=0.5))
    block = OdeBlock(r, basis=PiecewiseConstant(pieces=2), n_steps=2, epsilon=1e-9).double()
    x = torch.randn(64, 2, dtype=F64) * 3 + 1
    block.train()
    block(x)  # epsilon ~ 0: the state stays x, so both steps see the same batch
    mean = block.continuous.coefficient("0.running_mean")
    torch.testing.assert_close(mean[0], 0.5 * x.mean(0), rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(mean[1], 0.5 * x.mean(0), rtol=1e-6, atol=1e-9)
    # Eval: with distinct statistics per piece, each depth of a new manifestation reads
    # its own piece's (N_t = 4 over M = 2 pieces: steps 0, 1 -> piece 0; 2, 3 -> piece 1).
    with torch.no_grad():
        mean.copy_(torch.tensor([[10.0, 0.0], [0.0, -10.0]], dtype=F64))
        block.continuous.coefficient("0.running_var").fill_(1.0)
    block.eval()
    fine = block.manifest(n_steps=4)
    seen = []
    forward = fine.continuous.forward

    def spy(t, x, **kwargs):
        out = forward(t, x, **kwargs)
        seen.append((t, out[0].detach().clone()))
        return out

    fine.continuous.forward = spy
    fine.epsilon = 1.0
    fine(torch.zeros(1, 2, dtype=F64))
    pieces = [0 if t < 0.5 else 1 for t, _ in seen]
    assert pieces == [0, 0, 1, 1]
    first_out = seen[0][1]
    w = block.continuous.coefficient("0.weight")[0].detach()
    b = block.continuous.coefficient("0.bias")[0].detach()
    eps = r[0].eps
    torch.testing.assert_close(first_out, (0 - torch.tensor([10.0, 0.0], dtype=F64))
                               / math.sqrt(1 + eps) * w + b)  # fmt: skip


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: OdeBlock(nn.Linear(1, 1), basis=Legendre(), solver="dopri5"), ValueError,
         r"Unknown `solver` 'dopri5'; known fixed-step methods: euler"),
        (lambda: OdeBlock(nn.Linear(1, 1), basis=Legendre(), n_steps=0), ValueError,
         r"`n_steps` must be a positive integer"),
        (lambda: OdeBlock(nn.Linear(1, 1), basis=Legendre(), epsilon=-1.0), ValueError,
         r"`epsilon` must be a positive number"),
        (lambda: OdeBlock(nn.Linear(1, 1)), ValueError, r"`basis` is required"),
        (lambda: OdeBlock(nn.Linear(1, 1), basis=Legendre(), solver=odecore.Dopri5()),
         ValueError, r"`solver` must be the name of a fixed-step method"),
        (lambda: ContinuousModule(nn.Linear(1, 1), "pc"), TypeError, r"`basis` must be"),
    ],
)  # fmt: skip
def test_bad_arguments(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_left_limits_at_jumps_only():
    pc = ContinuousModule(nn.Linear(1, 1), PiecewiseConstant(pieces=4))
    assert pc.weights(0.5) == [(2, 1.0)]
    assert pc.weights(0.5, left=True) == [(1, 1.0)]
    assert pc.weights(0.3, left=True) == pc.weights(0.3) == [(1, 1.0)]
    assert pc.weights(1.0, left=True) == [(3, 1.0)]
    pl = ContinuousModule(nn.Linear(1, 1), PiecewiseLinear(pieces=4))
    assert pl.weights(0.5, left=True) == pl.weights(0.5)  # continuous: no jump to take
