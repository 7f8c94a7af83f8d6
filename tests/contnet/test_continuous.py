"""Continuous parameters and OdeBlock: shapes, stage times, batch-norm statistics."""

from __future__ import annotations

import itertools
import math
import warnings

import contnet
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
    # Running statistics are not functions of depth: the caller (an OdeBlock) owns them.
    assert cont.statistic_names == ["0.running_mean", "0.running_var", "0.num_batches_tracked"]
    assert cont.buffer_names == [] and cont.shared_names == []
    with pytest.raises(KeyError, match="running statistic, not a function of depth"):
        cont.coefficient("0.running_mean")
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


@pytest.mark.parametrize("t", [1.5, -0.25, math.nan])
def test_a_depth_outside_the_basis_interval_is_refused(t):
    # A [0, 1] piecewise-linear basis is 0 at 1.5: R ran with zero weights.
    layer = ContinuousModule(nn.Linear(2, 2), PiecewiseLinear(pieces=2))
    with pytest.raises(ValueError, match=r"The depth `t` = .* lies outside \[0.0, 1.0\]"):
        layer(t, torch.ones(1, 2))
    layer(1.0, torch.ones(1, 2))


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


@pytest.mark.parametrize("basis", [PiecewiseConstant(pieces=3), Legendre(degree=2)])
def test_a_frozen_parameter_has_frozen_coefficients_also_in_another_basis(basis):
    r = nn.Linear(2, 2)
    r.weight.requires_grad_(False)
    cont = ContinuousModule(r, basis)
    assert not cont.coefficient("weight").requires_grad and cont.coefficient("bias").requires_grad
    cont.change_basis(PiecewiseLinear(pieces=4))
    assert not cont.coefficient("weight").requires_grad and cont.coefficient("bias").requires_grad


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
    statistics = cont.initial_statistics()
    expected = torch.func.functional_call(r, {**theta, **statistics}, (x,))
    torch.testing.assert_close(cont(0.4, x, statistics=statistics), expected, rtol=0, atol=0)
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


def test_without_statistics_batch_norm_uses_the_batch_in_eval_mode_too():
    torch.manual_seed(0)
    cont = ContinuousModule(nn.Sequential(nn.BatchNorm1d(2)), PiecewiseConstant(pieces=2)).eval()
    x = torch.randn(64, 2, dtype=torch.float32) * 3 + 1
    out = cont(0.2, x)
    torch.testing.assert_close(out.mean(0), torch.zeros(2), rtol=0, atol=1e-5)
    assert torch.equal(cont.module[0].running_mean, torch.zeros(2))  # R's own: untouched


def _spy_inputs(block: OdeBlock) -> list[torch.Tensor]:
    """Record the input of every evaluation of R in the block's forward passes."""
    seen: list[torch.Tensor] = []
    block.continuous.module.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    return seen


@pytest.mark.parametrize("method", ["euler", "midpoint", "heun", "rk4", "rk4_38"])
def test_every_evaluation_has_its_own_running_statistics(method):
    # Training: evaluation i of a forward pass updates only statistics row i, by
    # BatchNorm's own rule (momentum 0.5 from mean 0), with the mean of its own input.
    torch.manual_seed(0)
    r = nn.Sequential(nn.BatchNorm1d(2, momentum=0.5), nn.Tanh(), nn.Linear(2, 2))
    block = OdeBlock(r, basis=PiecewiseConstant(pieces=2), solver=method, n_steps=2).double()
    seen = _spy_inputs(block)
    block.train()
    block(torch.randn(64, 2, dtype=F64) * 3 + 1)
    stages = len(STAGE_TIMES.get(method, [0.0, 1.0]))
    assert block.n_evaluations == len(seen) == 2 * stages
    mean = block.statistics()["0.running_mean"]
    assert mean.shape == (2 * stages, 2)
    for i, x in enumerate(seen):
        torch.testing.assert_close(mean[i], 0.5 * x.mean(0), rtol=1e-12, atol=1e-12)
    assert block.statistics()["0.num_batches_tracked"].tolist() == [1] * (2 * stages)


@pytest.mark.filterwarnings(
    "ignore::contnet.CarriedStatisticsWarning"
)  # the blended statistics, on purpose
@pytest.mark.parametrize("method", ["euler", "midpoint", "rk4", "rk4_38"])
def test_eval_after_recalibrating_on_a_batch_is_train_mode_on_that_batch(method):
    # The deterministic test of the issue: statistics measured on one batch, then
    # eval() and train mode give the same outputs on that batch (up to batch norm's
    # unbiased variance in the running statistics, which a large batch makes small).
    torch.manual_seed(0)
    r = nn.Sequential(nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 4), nn.BatchNorm1d(4),
                      nn.ReLU(), nn.Linear(4, 4))  # fmt: skip
    block = OdeBlock(r, basis=PiecewiseConstant(pieces=2), solver=method, n_steps=2,
                     epsilon=2.0).double()  # fmt: skip
    x = torch.randn(20000, 4, dtype=F64) * 2 + 1
    contnet.recalibrate(block, [x])
    with torch.no_grad():
        evaluated = block.eval()(x)
        trained = block.train()(x)
    torch.testing.assert_close(evaluated, trained, rtol=0, atol=2e-3)
    # Against the old definition (one set of statistics per piece, blended over the
    # stages): multi-stage solvers are far off there, which is what this test guards.
    if method != "euler":
        blended = block.manifest(n_steps=4).manifest(n_steps=2)  # through carry_statistics
        with torch.no_grad():
            assert (blended.eval()(x) - trained).abs().max() > 2e-2


def test_carried_statistics_are_the_step_means_as_a_function_of_depth():
    torch.manual_seed(0)
    r = nn.Sequential(nn.BatchNorm1d(1))
    block = OdeBlock(r, basis=PiecewiseConstant(pieces=2), solver="rk4", n_steps=2)
    with torch.no_grad():
        block.statistics()["0.running_mean"].copy_(torch.arange(8.0)[:, None])
        block.statistics()["0.num_batches_tracked"].fill_(3)
    euler = block.manifest(solver="euler", n_steps=4)  # depths 0, 0.25, 0.5, 0.75
    assert euler.statistics()["0.running_mean"].flatten().tolist() == [1.5, 1.5, 5.5, 5.5]
    assert euler.statistics()["0.num_batches_tracked"].tolist() == [3, 3, 3, 3]
    assert euler.carried.tolist() == [True] * 4 and not block.carried.any()
    # The same manifestation shares its statistics; the source's are untouched.
    same = block.manifest(solver="rk4", n_steps=2)
    assert same.statistics()["0.running_mean"] is block.statistics()["0.running_mean"]
    assert block.statistics()["0.running_mean"].flatten().tolist() == list(range(8))


def test_carried_statistics_warn_once_in_eval_until_measured():
    torch.manual_seed(0)
    block = OdeBlock(nn.Sequential(nn.BatchNorm1d(2)), basis=PiecewiseConstant(pieces=2),
                     solver="rk4", n_steps=2)  # fmt: skip
    x = torch.randn(16, 2)
    block.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        block.manifest(n_steps=4)(x)  # never trained: nothing carried, no warning
    block.train()(x)
    fine = block.manifest(n_steps=4).eval()
    with pytest.warns(
        contnet.CarriedStatisticsWarning, match=r"\(rk4, N_t = 4\).*contnet.recalibrate"
    ):
        fine(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fine(x)  # once
        measured = block.manifest(n_steps=4)
        contnet.recalibrate(measured, [x])
        measured.eval()(x)
        block.eval()(x)  # the training manifestation itself


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
        (lambda: OdeBlock(ContinuousModule(nn.Linear(1, 1), PiecewiseConstant(pieces=2)),
                          basis=PiecewiseConstant(pieces=4)), ValueError,
         r"`basis` PiecewiseConstant\(.*pieces=4\) is not the ContinuousModule's own "
         r"PiecewiseConstant\(.*pieces=2\)"),
        (lambda: OdeBlock(nn.Linear(1, 1), basis=PiecewiseConstant(pieces=2, t1=2.0)),
         ValueError, r"`basis` must live on \[0, 1\].*t1=2.0"),
        (lambda: OdeBlock(ContinuousModule(nn.Linear(1, 1), Legendre(t0=-1.0))), ValueError,
         r"`basis` must live on \[0, 1\].*t0=-1.0"),
    ],
)  # fmt: skip
def test_bad_arguments(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_a_continuous_modules_own_basis_may_be_repeated():
    cont = ContinuousModule(nn.Linear(1, 1), PiecewiseConstant(pieces=2))
    assert OdeBlock(cont, basis=PiecewiseConstant(pieces=2)).basis is cont.basis


def test_left_limits_at_jumps_only():
    pc = ContinuousModule(nn.Linear(1, 1), PiecewiseConstant(pieces=4))
    assert pc.weights(0.5) == [(2, 1.0)]
    assert pc.weights(0.5, left=True) == [(1, 1.0)]
    assert pc.weights(0.3, left=True) == pc.weights(0.3) == [(1, 1.0)]
    assert pc.weights(1.0, left=True) == [(3, 1.0)]
    pl = ContinuousModule(nn.Linear(1, 1), PiecewiseLinear(pieces=4))
    assert pl.weights(0.5, left=True) == pl.weights(0.5)  # continuous: no jump to take


@pytest.mark.parametrize(
    ("method", "c", "pieces", "n_steps"),
    [("midpoint", (0, 1 / 2), 6, 3), ("rk4", (0, 1 / 2, 1 / 2, 1), 6, 3),
     ("ralston", (0, 2 / 3), 6, 2), ("rk4_38", (0, 1 / 3, 2 / 3, 1), 6, 2)],
)  # fmt: skip
def test_a_stage_on_a_jump_reads_the_later_piece_whatever_the_rounding(method, c, pieces, n_steps):
    # 2/3 + 1/6 is one unit in the last place below 5/6, where piece 5 starts: the
    # stage must still read piece 5 (as at 1/6 and 1/2), not piece 4.
    from fractions import Fraction

    block = OdeBlock(nn.Linear(1, 1, bias=False), basis=PiecewiseConstant(pieces=pieces),
                     solver=method, n_steps=n_steps).to(F64)  # fmt: skip
    weights = torch.arange(1.0, pieces + 1, dtype=F64)
    with torch.no_grad():
        block.continuous.coefficient("weight").copy_(weights.reshape(pieces, 1, 1))
    tableau = block.tableau
    x, h = torch.tensor([[0.3]], dtype=F64), 1.0 / n_steps
    for k in range(n_steps):  # the step by hand, each stage at its piece in exact arithmetic
        stages = []
        for i, ci in enumerate(c):
            depth = (k + Fraction(ci).limit_denominator(10)) * pieces / n_steps
            piece = math.ceil(depth) - 1 if ci == 1 else math.floor(depth)
            y = x + h * sum((a * s for a, s in zip(tableau.a[i], stages)), torch.zeros_like(x))
            stages.append(weights[piece] * y)
        x = x + h * sum(b * s for b, s in zip(tableau.b, stages))
    with torch.no_grad():
        torch.testing.assert_close(block(torch.tensor([[0.3]], dtype=F64)), x, rtol=1e-14, atol=0)
