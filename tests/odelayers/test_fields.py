"""Vector-field blocks: depth concatenation, data control, Galerkin layers."""

from __future__ import annotations

import math

import numpy as np
import odecore
import pytest
import torch
from odelayers import (
    DataControl,
    DepthConcat,
    DepthSequential,
    GalerkinConv2d,
    GalerkinLinear,
    NeuralODE,
)
from odelayers.basis import Fourier, Legendre, PiecewiseConstant, PiecewiseLinear
from torch import nn

F64 = torch.float64


def test_depth_concat_vectors_images_and_per_sample_depths():
    t = torch.tensor(0.25)
    assert DepthConcat()(t, torch.zeros(3, 2))[:, -1].tolist() == [0.25] * 3
    img = DepthConcat()(t, torch.zeros(2, 3, 4, 4))
    assert img.shape == (2, 4, 4, 4) and bool((img[:, 3] == 0.25).all())
    per_sample = DepthConcat()(torch.tensor([0.1, 0.2]), torch.zeros(2, 1))
    torch.testing.assert_close(per_sample[:, 1], torch.tensor([0.1, 0.2]))
    with pytest.raises(ValueError, match=r"0-dim or of shape \(batch,\)"):
        DepthConcat()(torch.zeros(3), torch.zeros(2, 1))


def test_data_control_needs_a_control():
    with pytest.raises(RuntimeError, match=r"no control input"):
        DataControl()(torch.tensor(0.0), torch.zeros(2, 1))
    layer = DataControl()
    layer.control = torch.zeros(3, 1)
    with pytest.raises(ValueError, match=r"must agree except in dim 1"):
        layer(torch.tensor(0.0), torch.zeros(2, 1))


def test_galerkin_linear_against_a_hand_computed_expansion():
    # W(t) = a0 + a1 cos(2 pi t) + a2 sin(2 pi t), b(t) likewise, at t = 0.3.
    layer = GalerkinLinear(2, 3, basis=Fourier(modes=1)).double()
    a = layer.coefficients.detach()
    c = layer.bias_coefficients.detach()
    t = 0.3
    cos, sin = math.cos(2 * math.pi * t), math.sin(2 * math.pi * t)
    weight = a[0] + a[1] * cos + a[2] * sin
    bias = c[0] + c[1] * cos + c[2] * sin
    x = torch.randn(5, 2, dtype=F64)
    torch.testing.assert_close(layer(torch.tensor(t, dtype=F64), x), x @ weight.T + bias)


def test_galerkin_linear_with_one_depth_per_sample():
    layer = GalerkinLinear(2, 3, basis=Legendre(degree=2)).double()
    x = torch.randn(4, 2, dtype=F64)
    ts = torch.tensor([0.0, 0.3, 0.7, 1.0], dtype=F64)
    batched = layer(ts, x)
    for i in range(4):
        torch.testing.assert_close(batched[i], layer(ts[i], x[i : i + 1])[0])


def test_galerkin_linear_with_one_depth_per_sample_of_sequences():
    # With one depth it maps the last dim as nn.Linear does; with one depth per sample
    # (AdaptiveDepthNODE) a sample of vectors was an einsum error, and a depth per
    # sample of another batch too.
    layer = GalerkinLinear(2, 3, basis=Legendre(degree=2)).double()
    x = torch.randn(4, 5, 2, dtype=F64)
    ts = torch.tensor([0.0, 0.3, 0.7, 1.0], dtype=F64)
    batched = layer(ts, x)
    for i in range(4):
        torch.testing.assert_close(batched[i], layer(ts[i], x[i : i + 1])[0])
    with pytest.raises(ValueError, match=r"shape \(batch,\) = \(4,\), got \(3,\)"):
        layer(ts[:3], x)


def test_galerkin_conv_against_conv2d_with_the_expanded_kernel():
    conv = GalerkinConv2d(2, 3, 3, basis=Legendre(degree=2), padding=1).double()
    x = torch.randn(2, 2, 5, 5, dtype=F64)
    t = 0.8
    p = Legendre(degree=2)(torch.tensor(t, dtype=F64))  # [1, x, (3x^2 - 1) / 2], x = 0.6
    torch.testing.assert_close(p, torch.tensor([1.0, 0.6, (3 * 0.36 - 1) / 2], dtype=F64))
    kernel = torch.einsum("n,noikl->oikl", p, conv.coefficients.detach())
    bias = p @ conv.bias_coefficients.detach()
    expected = torch.nn.functional.conv2d(x, kernel, bias, padding=1)
    torch.testing.assert_close(conv(torch.tensor(t, dtype=F64), x), expected)
    with pytest.raises(ValueError, match=r"one depth for the whole batch"):
        conv(torch.zeros(2, dtype=F64), x)


def test_a_galerkin_state_dict_of_another_basis_of_its_size_is_refused():
    # Fourier(modes=1) and Legendre(degree=2) both have 3 functions: the coefficients
    # loaded silently, another weight function.
    fourier = NeuralODE(DepthSequential(GalerkinLinear(2, 2, basis=Fourier(modes=1))))
    state = fourier.state_dict()
    legendre = NeuralODE(DepthSequential(GalerkinLinear(2, 2, basis=Legendre(degree=2))))
    before = {k: v.clone() for k, v in legendre.state_dict().items()}
    with pytest.raises(
        RuntimeError, match=r"basis Fourier\(.*modes=1\) into vector_field.0, whose"
    ):
        legendre.load_state_dict(state)
    assert all(torch.equal(v, before[k]) for k, v in legendre.state_dict().items())
    twin = NeuralODE(DepthSequential(GalerkinLinear(2, 2, basis=Fourier(modes=1))))
    twin.load_state_dict(state)
    x = torch.randn(3, 2)
    torch.testing.assert_close(twin(x), fourier(x), rtol=0, atol=0)
    # Saved before the basis was (no extra state, version 1): loads as it did.
    old = legendre.state_dict()
    del old["vector_field.0._extra_state"]
    old._metadata["vector_field.0"]["version"] = 1
    assert not legendre.load_state_dict(old).missing_keys


def test_a_galerkin_state_dict_of_the_same_basis_given_by_an_int_interval_loads():
    # The saved basis is compared by its repr: PiecewiseConstant(t0=0, t1=2) refused a
    # state_dict of PiecewiseConstant(t0=0.0, t1=2.0), an equal basis, as "another
    # weight function" (and a NumPy number's repr is another again).
    saved = GalerkinLinear(2, 2, basis=PiecewiseConstant(pieces=2, t0=0.0, t1=2.0))
    for t1 in (2, np.float64(2.0)):
        layer = GalerkinLinear(2, 2, basis=PiecewiseConstant(pieces=2, t0=0, t1=t1))
        assert layer.basis == saved.basis
        layer.load_state_dict(saved.state_dict())
        torch.testing.assert_close(layer.coefficients, saved.coefficients, rtol=0, atol=0)
        saved.load_state_dict(layer.state_dict())


def test_galerkin_init_scale_is_that_of_a_default_layer():
    torch.manual_seed(0)
    layer = GalerkinLinear(64, 64, basis=Fourier(modes=4))
    w = layer.weights(torch.tensor(0.37))[0].detach()
    bound = 1 / math.sqrt(64)  # nn.Linear's uniform bound; its std is bound / sqrt(3)
    assert 0.5 < float(w.std()) / (bound / math.sqrt(3)) < 2.0


def test_piecewise_constant_galerkin_node_is_a_stack_of_constant_nodes():
    # A NODE whose weights are piecewise constant on two halves equals two NODEs with
    # constant weights, one after the other; the solver must land on t = 0.5.
    torch.manual_seed(1)
    basis = PiecewiseConstant(pieces=2)
    g1, g2 = GalerkinLinear(2, 8, basis=basis), GalerkinLinear(8, 2, basis=basis)
    field = DepthSequential(g1, nn.Tanh(), g2).double()
    tight = odecore.PIDController(rtol=1e-10, atol=1e-10)
    layer = NeuralODE(field, controller=tight)
    assert layer._depth_jumps(0.0, 1.0) == [0.5]
    x = torch.randn(4, 2, dtype=F64)

    def constant(piece: int) -> nn.Module:
        net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2)).double()
        with torch.no_grad():
            net[0].weight.copy_(g1.coefficients[piece])
            net[0].bias.copy_(g1.bias_coefficients[piece])
            net[2].weight.copy_(g2.coefficients[piece])
            net[2].bias.copy_(g2.bias_coefficients[piece])
        return net

    first, second = constant(0), constant(1)
    mid = odecore.odeint(lambda t, y: first(y), x, torch.tensor([0.0, 0.5], dtype=F64),
                         rtol=1e-10, atol=1e-10)[-1]  # fmt: skip
    end = odecore.odeint(lambda t, y: second(y), mid, torch.tensor([0.5, 1.0], dtype=F64),
                         rtol=1e-10, atol=1e-10)[-1]  # fmt: skip
    with torch.no_grad():
        torch.testing.assert_close(layer(x), end, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize(("t0", "t1"), [(0.0, 1.0), (1.0, 0.0), (1.0, 2.0), (2.0, 1.0)])
def test_a_jump_at_an_end_of_the_solve_is_passed_on(t0, t1):
    # A basis on [0, 2] jumps at 1, an end of each solve here: the stage at that end
    # must read the limit from inside the solve's interval. Passed on only where it
    # lay strictly inside, the jump was dropped and RK4's stage there read the other
    # piece's weights (6e-3 off).
    torch.manual_seed(0)
    galerkin = GalerkinLinear(2, 2, basis=PiecewiseConstant(0.0, 2.0, pieces=2)).double()
    layer = NeuralODE(galerkin, t0=t0, t1=t1, solver=odecore.RK4(), dt0=0.1)
    piece = nn.Linear(2, 2).double()
    i = 0 if max(t0, t1) <= 1.0 else 1
    with torch.no_grad():
        piece.weight.copy_(galerkin.coefficients[i])
        piece.bias.copy_(galerkin.bias_coefficients[i])
    x = torch.randn(3, 2, dtype=F64)
    expected = odecore.solve(lambda t, y: piece(y), x, t0=t0, t1=t1, solver=odecore.RK4(),
                             dt0=0.1).ys[-1]  # fmt: skip
    with torch.no_grad():
        torch.testing.assert_close(layer(x), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("t0", "t1"), [(0.0, 1.0), (1.0, 0.0)], ids=["forward", "backward"])
@pytest.mark.parametrize("gradient", [odecore.Autograd(), odecore.Adjoint()], ids=repr)
def test_an_adaptive_solve_lands_on_the_kinks_of_a_piecewise_linear_galerkin_layer(
    t0, t1, gradient
):
    # x' = w(t) x, w piecewise linear through its node values c_i: x(t1) = x(t0) e^I,
    # I = +-(trapezoid of c). Steps across the kinks fooled Dopri5's error estimate:
    # at rtol = atol = 1e-6 the state was 2e-4 off, 100 times the tolerance.
    basis = PiecewiseLinear(pieces=3)
    galerkin = GalerkinLinear(1, 1, basis=basis, bias=False).double()
    nodes = torch.tensor([0.0, 4.0, -4.0, 4.0], dtype=F64)
    with torch.no_grad():
        galerkin.coefficients.copy_(nodes.reshape(4, 1, 1))
    tol = odecore.PIDController(rtol=1e-6, atol=1e-6)
    layer = NeuralODE(galerkin, t0=t0, t1=t1, controller=tol, gradient=gradient)
    x = torch.tensor([[1.0], [-0.5]], dtype=F64)
    y = layer(x)
    weights = torch.tensor([0.5, 1.0, 1.0, 0.5], dtype=F64) / 3 * (t1 - t0)
    expected = x * torch.exp(weights @ nodes)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-6)
    y.sum().backward()
    grad = galerkin.coefficients.grad.reshape(4)
    torch.testing.assert_close(grad, expected.sum() * weights, rtol=1e-5, atol=1e-6)
    # A fixed step is the caller's grid: no step is added at the kinks.
    rk4 = NeuralODE(galerkin, t0=t0, t1=t1, solver=odecore.RK4(), dt0=0.25)
    rk4(x)
    assert rk4.nfe == 4 * 4


@pytest.mark.parametrize(
    "basis", [PiecewiseLinear(pieces=2), PiecewiseConstant(pieces=2)], ids=["kink", "jump"]
)
def test_per_sample_steps_with_a_kink_or_jump_of_a_galerkin_layer_are_refused_in_words(basis):
    # Steps of every sample's own cannot end on the kink: they ran across it, 100 times
    # less accurate than the tolerance (and odecore refused the jump naming `jump_ts`).
    per_sample = odecore.PIDController(rtol=1e-6, atol=1e-6, per_sample=True)
    layer = NeuralODE(GalerkinLinear(2, 2, basis=basis), controller=per_sample)
    with pytest.raises(
        odecore.ConfigurationError, match=r"must end at the depths \[0.5\].*per_sample=True"
    ):
        layer(torch.randn(3, 2))
    NeuralODE(GalerkinLinear(2, 2, basis=Fourier()), controller=per_sample)(torch.randn(3, 2))


def test_gradcheck_galerkin_layers():
    lin = GalerkinLinear(2, 2, basis=Fourier(modes=1)).double()
    conv = GalerkinConv2d(1, 1, 3, basis=Legendre(degree=1), padding=1).double()
    x = torch.randn(3, 2, dtype=F64, requires_grad=True)
    img = torch.randn(1, 1, 4, 4, dtype=F64, requires_grad=True)
    t = torch.tensor(0.3, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t, x, a: lin(t, x), (t, x, lin.coefficients))
    assert torch.autograd.gradcheck(lambda t, x, a: conv(t, x), (t, img, conv.coefficients))


@pytest.mark.parametrize("gradient", [odecore.Autograd(), odecore.Adjoint()], ids=repr)
@pytest.mark.parametrize(("t0", "t1", "pieces"), [(0.0, 1.0, 2), (0.0, 1.0, 7), (0.3, 2.1, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_piecewise_constant_galerkin_node_is_the_stack_to_the_last_bit(
    dtype, t0, t1, pieces, gradient
):
    # The docs' example (depth-varying.md) in both dtypes, with gradients. The last stage
    # of a step that ends on a jump reads the left limit there, one ulp below the jump;
    # in float64 the basis took it for the next piece (1.2e-2 off the stack).
    torch.manual_seed(0)
    galerkin = GalerkinLinear(2, 2, basis=PiecewiseConstant(t0, t1, pieces=pieces)).to(dtype)
    steps = {"solver": odecore.RK4(), "dt0": (t1 - t0) / pieces / 5, "gradient": gradient}
    layer = NeuralODE(DepthSequential(galerkin, nn.Tanh()), t0=t0, t1=t1, **steps)
    x = torch.randn(5, 2, dtype=dtype)
    ends = (t0, *galerkin.basis.jump_ts, t1)
    z, linears = x, []
    for i in range(pieces):
        linears.append(nn.Linear(2, 2).to(dtype))
        with torch.no_grad():
            linears[i].weight.copy_(galerkin.coefficients[i])
            linears[i].bias.copy_(galerkin.bias_coefficients[i])
        f = nn.Sequential(linears[i], nn.Tanh())
        z = NeuralODE(lambda t, y, f=f: f(y), t0=ends[i], t1=ends[i + 1], **steps)(z)
    y = layer(x)
    assert torch.equal(y, z)
    y.pow(2).sum().backward()
    z.pow(2).sum().backward()
    torch.testing.assert_close(
        galerkin.coefficients.grad, torch.stack([lin.weight.grad for lin in linears])
    )
