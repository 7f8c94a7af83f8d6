"""Integrals along the solve: against quadratures of closed-form trajectories."""

from __future__ import annotations

import math

import odecore
import pytest
import torch
from fields import Linear
from odelayers import (
    DepthConcat,
    DepthSequential,
    IntegralLoss,
    JacobianFrobenius,
    KineticEnergy,
    NegativeTrace,
    NeuralODE,
)
from torch import nn

F64 = torch.float64
TIGHT = odecore.PIDController(rtol=1e-10, atol=1e-10)


def test_kinetic_energy_of_exponential_decay():
    # x = x0 e^-t, f = -x: int_0^T |f|^2 = |x0|^2 (1 - e^-2T) / 2.
    layer = NeuralODE(Linear(-torch.eye(3, dtype=F64)), controller=TIGHT, t1=2.0,
                      integrals=[KineticEnergy()])  # fmt: skip
    x0 = torch.randn(4, 3, dtype=F64)
    layer(x0)
    expected = x0.pow(2).sum(1) * (1 - math.exp(-4.0)) / 2
    torch.testing.assert_close(layer.integrals["kinetic_energy"], expected)


def test_integral_loss_against_a_quadrature_of_the_trajectory():
    # A rotation: integrate g(t, x) = t * x_1^2 along it and compare with Simpson's rule
    # on the closed-form trajectory.
    a = torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=F64)
    loss = IntegralLoss(lambda t, x: t * x[:, 0] ** 2, name="tracking")
    layer = NeuralODE(Linear(a.clone()), controller=TIGHT, t1=3.0, integrals=[loss])
    x0 = torch.randn(5, 2, dtype=F64)
    layer(x0)
    ts = torch.linspace(0.0, 3.0, 2001, dtype=F64)
    xs = torch.stack([x0 @ torch.linalg.matrix_exp(a * t).T for t in ts])  # (T, 5, 2)
    g = ts[:, None] * xs[..., 0] ** 2
    h = float(ts[1] - ts[0])
    simpson = h / 3 * (g[0] + 4 * g[1:-1:2].sum(0) + 2 * g[2:-1:2].sum(0) + g[-1])
    torch.testing.assert_close(layer.integrals["tracking"], simpson, rtol=1e-9, atol=1e-10)


def test_jacobian_frobenius_of_a_linear_field_given_its_noise():
    # f = A x: the integrand |e^T A|^2 is constant, so the integral is T |A^T e|^2.
    a = torch.tensor([[0.2, -1.0], [0.5, 0.1]], dtype=F64)
    term = JacobianFrobenius(generator=torch.Generator().manual_seed(3))
    layer = NeuralODE(Linear(a.clone()), controller=TIGHT, t1=1.5, integrals=[term])
    layer(torch.randn(6, 2, dtype=F64))
    e = term.noise
    torch.testing.assert_close(layer.integrals["jacobian_frobenius"], 1.5 * (e @ a).pow(2).sum(1))


def test_jacobian_frobenius_is_unbiased():
    # Averaged over many noise draws (one per sample), |e^T A|^2 -> |A|_F^2.
    torch.manual_seed(0)
    a = torch.tensor([[0.2, -1.0, 0.3], [0.5, 0.1, 0.0], [1.0, 0.0, -0.4]], dtype=F64)
    layer = NeuralODE(Linear(a.clone()), integrals=[JacobianFrobenius()])
    layer(torch.zeros(20000, 3, dtype=F64))
    mean = float(layer.integrals["jacobian_frobenius"].detach().mean())
    assert mean == pytest.approx(float(a.pow(2).sum()), rel=0.03)


@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()], ids=repr)
def test_regulariser_gradients_agree_with_backprop(gradient):
    torch.manual_seed(0)
    field = DepthSequential(DepthConcat(), nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 2)).double()
    x = torch.randn(4, 2, dtype=F64)

    def grads(method):
        field.zero_grad()
        term = JacobianFrobenius(generator=torch.Generator().manual_seed(1))
        layer = NeuralODE(field, controller=TIGHT, gradient=method,
                          integrals=[KineticEnergy(), term])  # fmt: skip
        y = layer(x)
        loss = y.pow(2).sum() + sum(v.sum() for v in layer.integrals.values())
        loss.backward()
        return [p.grad.clone() for p in field.parameters()]

    for ours, reference in zip(grads(gradient), grads(odecore.Autograd())):
        torch.testing.assert_close(ours, reference, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()], ids=repr)
def test_integral_loss_differentiates_the_tensors_it_closes_over(gradient):
    # The layer fixed the method's `params` to the field's parameters: the target of a
    # depth-distributed loss, a tensor its function closes over, got no gradient. (A
    # field of torch's layers, whose parameters are all it reads: the loss decides.)
    field = DepthSequential(DepthConcat(), nn.Linear(3, 2, dtype=F64))
    x = torch.randn(3, 2, dtype=F64)

    def grads(method):
        field.zero_grad()
        target = torch.tensor([0.5, -0.25], dtype=F64, requires_grad=True)
        term = IntegralLoss(lambda t, z: (z - target).pow(2).sum(dim=1))
        layer = NeuralODE(field, controller=TIGHT, gradient=method, integrals=[term])
        layer(x)
        layer.integrals["loss"].sum().backward()
        return target.grad, field[1].weight.grad.clone()

    ours, reference = grads(gradient), grads(odecore.Autograd())
    assert ours[0] is not None
    for g, expected in zip(ours, reference):
        torch.testing.assert_close(g, expected, rtol=1e-6, atol=1e-8)


def test_integral_terms_need_distinct_names_and_valid_outputs():
    with pytest.raises(ValueError, match=r"distinct names"):
        NeuralODE(lambda t, x: -x, integrals=[KineticEnergy(), KineticEnergy()])
    bad = NeuralODE(lambda t, x: -x, integrals=[IntegralLoss(lambda t, x: x)])
    with pytest.raises(ValueError, match=r"must return shape \(3,\)"):
        bad(torch.zeros(3, 2))


@pytest.mark.parametrize("term", ["jacobian_frobenius", "hutchinson_trace"])
@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()], ids=repr)
def test_a_later_forward_pass_leaves_the_noise_of_an_earlier_ones_gradient(gradient, term):
    # f = A x: |e^T A|^2 and -e^T A e are constant along the solve, so over [0, T]
    # the gradients in A are 2 T E^T E A and -T E^T E for the noise rows E of *this*
    # pass. The backward pass used to re-evaluate the integrand with the noise that the
    # next forward pass (here one without a graph, as a validation pass) drew.
    a = torch.tensor([[0.2, -1.0], [0.5, 0.1]], dtype=F64)
    field = Linear(a.clone())
    generator = torch.Generator().manual_seed(3)
    integrand = (
        JacobianFrobenius(generator)
        if term == "jacobian_frobenius"
        else NegativeTrace("hutchinson", generator)
    )
    layer = NeuralODE(field, controller=TIGHT, t1=1.5, gradient=gradient, integrals=[integrand])
    layer(torch.randn(6, 2, dtype=F64))
    integral, e = layer.integrals[integrand.name], integrand.noise.clone()
    with torch.no_grad():
        layer(torch.randn(6, 2, dtype=F64))
    integral.sum().backward()
    expected = 2 * 1.5 * e.T @ e @ a if term == "jacobian_frobenius" else -1.5 * e.T @ e
    torch.testing.assert_close(field.a.grad, expected)


@pytest.mark.parametrize("gradient", [odecore.Autograd(), odecore.Adjoint()], ids=repr)
@pytest.mark.parametrize("ts", [[0.0, 0.5], [0.25, 1.0], [0.5, 1.0, 2.0]])
def test_integrals_are_over_t0_t1_whatever_the_output_depths(ts, gradient):
    # x = x0 e^-t over [0, 2]: the kinetic energy is |x0|^2 (1 - e^-4) / 2. With `ts`
    # ending before t1 it used to be the integral up to ts[-1] (over [0, 0.5]), though
    # the solve ran to t1 and the docs define it over the layer's interval.
    tol = odecore.PIDController(rtol=1e-8, atol=1e-8)
    layer = NeuralODE(Linear(-torch.eye(2, dtype=F64)), controller=tol, t1=2.0, ts=ts,
                      gradient=gradient, integrals=[KineticEnergy()])  # fmt: skip
    x0 = torch.randn(2, 2, dtype=F64, requires_grad=True)
    xs = layer(x0)
    decay = torch.tensor([math.exp(-t) for t in ts], dtype=F64)
    torch.testing.assert_close(xs, decay[:, None, None] * x0)
    expected = x0.pow(2).sum(1) * (1 - math.exp(-4.0)) / 2
    torch.testing.assert_close(layer.integrals["kinetic_energy"], expected)

    def both(x):
        return layer(x), layer.integrals["kinetic_energy"]

    assert torch.autograd.gradcheck(both, (x0,), atol=1e-6)


def test_the_jacobian_norm_under_inference_mode_is_refused_in_words():
    layer = NeuralODE(lambda t, z: torch.tanh(z), integrals=[JacobianFrobenius()])
    refused = pytest.raises(RuntimeError, match=r"JacobianFrobenius .*torch.inference_mode\(\)")
    with refused, torch.inference_mode():
        layer(torch.randn(3, 2))


@pytest.mark.parametrize("shape", [(0, 2), (0, 1, 3, 3)])
def test_integrals_of_an_empty_batch(shape):
    # A layer without integrals solves an empty batch; with them (and a CNF's trace)
    # it was a reshape error ("cannot reshape tensor of 0 elements into shape [0, -1]").
    terms = [KineticEnergy(), JacobianFrobenius(), NegativeTrace("exact"),
             NegativeTrace("hutchinson")]  # fmt: skip
    for term in terms:
        x = torch.zeros(shape, dtype=F64, requires_grad=True)
        layer = NeuralODE(lambda t, z: torch.tanh(z), gradient=odecore.Adjoint(), integrals=[term])
        y = layer(x)
        assert y.shape == shape and layer.integrals[term.name].shape == (0,)
        (y.sum() + layer.integrals[term.name].sum()).backward()
        assert x.grad.shape == shape


def _frobenius_loss(layer, generator, x, params):
    generator.manual_seed(5)  # the same noise in every solve
    out = torch.func.functional_call(layer, params, (x,))
    return out.pow(2).sum() + layer.integrals["jacobian_frobenius"].sum()


def test_torch_func_grad_through_jacobian_frobenius_is_right_or_refused_by_name():
    # Of the parameters it raised PyTorch's "requires_grad_() ... inside of a function
    # being transformed", which names neither the term nor what to do.
    generator = torch.Generator()
    torch.manual_seed(1)
    field = DepthSequential(nn.Linear(2, 6), nn.Tanh(), nn.Linear(6, 2)).double()
    layer = NeuralODE(field, solver=odecore.RK4(), dt0=0.1,
                      integrals=[JacobianFrobenius(generator=generator)])  # fmt: skip
    x = torch.randn(3, 2, dtype=torch.float64)
    params = {k: v.detach() for k, v in layer.named_parameters()}
    with pytest.raises(odecore.ConfigurationError, match=r"JacobianFrobenius.*torch\.func"):
        torch.func.grad(lambda p: _frobenius_loss(layer, generator, x, p))(params)
    # Of the input, whose state carries the transform's graph, it is autograd's gradient.
    leaf = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(_frobenius_loss(layer, generator, leaf, params), leaf)
    got = torch.func.grad(lambda x: _frobenius_loss(layer, generator, x, params))(x)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-14)
