"""NeuralODE: defaults, closed forms, trajectories, counters, gradients, errors."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import odecore
import pytest
import torch
from fields import Linear
from odelayers import (
    CNF,
    AdaptiveDepthNODE,
    DataControl,
    DepthConcat,
    DepthSequential,
    KineticEnergy,
    NeuralODE,
    ZeroAugmentation,
)
from torch import nn

F64 = torch.float64
TIGHT = odecore.PIDController(rtol=1e-10, atol=1e-10)


def test_defaults_are_odecores_on_the_unit_interval():
    """One set of defaults: the layer's spec is odecore's (dopri5, 1e-7/1e-9, backprop)."""
    layer = NeuralODE(Linear(torch.eye(2)))
    assert layer.spec == odecore.OdeSpec()
    assert isinstance(layer.solver, odecore.Dopri5)
    assert isinstance(layer.gradient, odecore.Autograd)
    assert (layer.t0, layer.t1) == (0.0, 1.0)
    x = torch.randn(3, 2)
    torch.testing.assert_close(layer(x), x * math.e, rtol=1e-5, atol=1e-5)


def test_spec_fields_are_replaced_by_the_arguments():
    spec = odecore.OdeSpec.from_method("tsit5", rtol=1e-3, atol=1e-3, gradient="adjoint")
    layer = NeuralODE(Linear(torch.eye(2)), spec=spec)
    assert layer.spec == spec
    fixed = NeuralODE(Linear(torch.eye(2)), spec=spec, solver=odecore.RK4(), dt0=0.25)
    assert fixed.controller == odecore.ConstantStepSize()  # the new solver's default
    assert (fixed.gradient, fixed.dt0) == (spec.gradient, 0.25)
    x = torch.randn(3, 2)
    fixed(x)
    assert fixed.nfe == 4 * 4
    by_count = NeuralODE(Linear(torch.eye(2)), spec=odecore.OdeSpec.from_method(
        "rk4", options={"n_steps": 4}), t1=2.0)  # fmt: skip
    by_size = NeuralODE(Linear(torch.eye(2)), solver=odecore.RK4(), dt0=0.5, t1=2.0)
    assert torch.equal(by_count(x), by_size(x))
    assert by_count.nfe == 4 * 4
    with pytest.raises(TypeError, match=r"`spec` must be an odecore.OdeSpec"):
        NeuralODE(Linear(torch.eye(2)), spec="dopri5")


def test_the_specs_compile_switch_reaches_the_solve(monkeypatch: pytest.MonkeyPatch):
    """The adaptive solve compiles its step (one graph, counted): the layer passed the
    switch on (it was dropped once, and the layer solved eagerly without a word)."""
    from odecore import _compiled
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    monkeypatch.setattr(_compiled, "_BACKEND", counter)
    layer = NeuralODE(Linear(torch.eye(2)), spec=odecore.OdeSpec(compile=True))
    x = torch.randn(3, 2)
    y = layer(x)
    assert counter.frame_count == 1
    torch.testing.assert_close(y, NeuralODE(Linear(torch.eye(2)))(x))


def test_linear_field_against_the_matrix_exponential_and_trajectory():
    a = torch.tensor([[-0.3, 1.0], [-1.0, -0.3]], dtype=F64)
    ts = [0.0, 0.25, 0.5, 1.0]
    layer = NeuralODE(Linear(a.clone()), controller=TIGHT, ts=ts)
    x = torch.randn(5, 2, dtype=F64)
    traj = layer(x)
    assert traj.shape == (4, 5, 2)
    for i, t in enumerate(ts):
        torch.testing.assert_close(traj[i], x @ torch.linalg.matrix_exp(a * t).T)


def test_nfe_counters_forward_and_backward():
    layer = NeuralODE(Linear(-torch.eye(2)), gradient=odecore.Adjoint())
    assert layer.nfe == 0 and layer.nfe_backward == 0
    y = layer(torch.randn(4, 2))
    assert layer.nfe > 0 and layer.nfe_backward == 0
    y.sum().backward()
    assert layer.nfe_backward > 0
    backprop = NeuralODE(Linear(-torch.eye(2)), gradient=odecore.Autograd())
    backprop(torch.randn(4, 2)).sum().backward()
    assert backprop.nfe_backward == 0  # autograd's backward pass calls no field


def test_a_forward_that_raises_leaves_no_counts_or_integrals_of_the_one_before():
    """A caught solver error must not leave the previous batch's NFE and integrals to read."""
    layer = NeuralODE(
        Linear(-torch.eye(2)), gradient=odecore.Adjoint(), integrals=[KineticEnergy()]
    )
    layer(torch.randn(4, 2)).sum().backward()
    assert layer.nfe > 0 and layer.nfe_backward > 0 and layer.integrals
    layer.spec = replace(layer.spec, max_steps=1)
    with pytest.raises(odecore.SolverError):
        layer(torch.randn(4, 2))
    assert (layer.nfe, layer.nfe_backward, layer.integrals) == (0, 0, {})


@pytest.mark.parametrize(
    "gradient",
    [odecore.Adjoint(), odecore.Autograd(), odecore.Checkpoint(), odecore.Reversible()],
    ids=repr,
)
def test_gradients_agree_with_backprop_and_closed_form(gradient):
    # d/dA sum(x exp(A)^T) for A diagonal: exp(a_ii) * sum_b x_bi on the diagonal.
    a = torch.diag(torch.tensor([-0.5, 0.2], dtype=F64))
    field = Linear(a.clone())
    layer = NeuralODE(field, controller=TIGHT, gradient=gradient)
    x = torch.randn(6, 2, dtype=F64, requires_grad=True)
    layer(x).sum().backward()
    expected_x = torch.exp(torch.diag(a)).expand(6, 2)
    torch.testing.assert_close(x.grad, expected_x, rtol=1e-8, atol=1e-9)
    diag = field.a.grad.diagonal()
    torch.testing.assert_close(diag, torch.exp(torch.diag(a)) * x.detach().sum(0), rtol=1e-7,
                               atol=1e-8)  # fmt: skip


def test_gradcheck_through_the_adjoint():
    torch.manual_seed(0)
    field = DepthSequential(DepthConcat(), nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    layer = NeuralODE(field, controller=TIGHT)
    x = torch.randn(2, 2, dtype=F64, requires_grad=True)
    w = field[1].weight
    assert torch.autograd.gradcheck(lambda x, w: layer(x), (x, w), atol=1e-6)


def test_data_control_handcrafted_flow_and_input_gradient():
    # dz/dt = -(z + x), z(0) = x: z(t) = x (2 e^-t - 1), the reflection as t -> ln 2 ... inf.
    field = DepthSequential(DataControl(), nn.Linear(2, 1, bias=False)).double()
    with torch.no_grad():
        field[1].weight.copy_(torch.tensor([[-1.0, -1.0]]))
    x = torch.linspace(-1, 1, 5, dtype=F64)[:, None].requires_grad_()
    layer = NeuralODE(field, controller=TIGHT, t1=2.0)
    out = layer(x)
    factor = 2 * math.exp(-2.0) - 1
    torch.testing.assert_close(out, x.detach() * factor)
    out.sum().backward()  # the adjoint differentiates through the control as well
    torch.testing.assert_close(x.grad, torch.full_like(x, factor))


@pytest.mark.parametrize("gradient", [odecore.Autograd(), odecore.Adjoint()], ids=repr)
def test_a_solve_leaves_no_control_behind(gradient):
    # The control stayed set after the solve (and was set again by the adjoint's backward
    # pass): the same DataControl layer reached through a closure, which a NeuralODE
    # cannot see into, read the input of that earlier solve without a word.
    torch.manual_seed(0)
    field = DepthSequential(DataControl(), nn.Linear(4, 2))
    NeuralODE(field, gradient=gradient)(torch.randn(3, 2)).sum().backward()
    assert field[0].control is None
    hidden = NeuralODE(lambda t, z: field(t, z))
    with pytest.raises(RuntimeError, match="no control input"):
        hidden(torch.randn(3, 2))
    # a control set by hand is the layer's own: it is put back
    own = torch.zeros(3, 2)
    field[0].control = own
    NeuralODE(field, gradient=gradient)(torch.randn(3, 2)).sum().backward()
    assert field[0].control is own
    flow = CNF(field, gradient=gradient)
    flow.log_prob(torch.randn(3, 2), condition=torch.randn(3, 2)).sum().backward()
    flow.sample(3, (2,))
    assert field[0].control is own


def test_adaptive_depth_integrates_each_sample_to_its_own_depth():
    # dz/dt = -z to depth T(x) = softplus(w x + b): z = x exp(-T(x)).
    horizon = nn.Linear(1, 1).double()
    layer = AdaptiveDepthNODE(
        lambda t, z: -z, horizon, controller=TIGHT, gradient=odecore.Adjoint()
    )
    x = torch.tensor([[0.5], [1.0], [2.0]], dtype=F64)
    out = layer(x)
    depth = torch.nn.functional.softplus(horizon(x)).squeeze(1)
    torch.testing.assert_close(layer.depth, depth)
    torch.testing.assert_close(out, x * torch.exp(-depth)[:, None])
    # Gradients reach the horizon network: d/dw sum(x e^-T) against the closed form.
    out.sum().backward()
    dT_dw = torch.sigmoid(horizon(x)).squeeze(1) * x.squeeze(1)
    expected = -(x.squeeze(1) * torch.exp(-depth) * dT_dw).sum()
    torch.testing.assert_close(horizon.weight.grad.squeeze(), expected.detach())
    assert layer.nfe > 0 and layer.nfe_backward > 0


def test_a_layer_is_copied_after_a_forward_pass_with_a_graph():
    """copy.deepcopy (keeping the best model, an EMA) after a training step: the
    integrals and depths of the forward pass hold its graph, which deepcopy refuses."""
    x = torch.randn(4, 2)
    field = DepthSequential(DepthConcat(), nn.Linear(3, 2))
    for layer in (
        NeuralODE(field, integrals=[KineticEnergy()]),
        AdaptiveDepthNODE(field, nn.Linear(2, 1)),
    ):
        y = layer(x)
        twin = copy.deepcopy(layer)
        kept = twin.integrals if isinstance(twin, NeuralODE) else {"depth": twin.depth}
        ours = layer.integrals if isinstance(layer, NeuralODE) else {"depth": layer.depth}
        assert kept.keys() == ours.keys()
        for key, value in kept.items():
            assert value is not None and not value.requires_grad
            torch.testing.assert_close(value, ours[key], rtol=0, atol=0)
        torch.testing.assert_close(twin(x), y, rtol=0, atol=0)


@pytest.mark.parametrize(
    "gradient", [odecore.Adjoint(), odecore.Checkpoint(), odecore.Reversible()], ids=repr
)
def test_functional_call_weights_reach_the_backward_pass(gradient):
    """torch.func.functional_call swaps a weight in for the forward pass alone: a
    backward pass that evaluates the field again ran with the module's own weight,
    and the adjoint's gradient of the swapped one was 0 (checkpointing failed)."""
    torch.manual_seed(0)
    x = torch.randn(3, 2, dtype=F64)

    def layer():
        torch.manual_seed(1)
        field = DepthSequential(DepthConcat(), nn.Linear(3, 2), nn.Tanh()).to(F64)
        return NeuralODE(field, gradient=gradient, solver=odecore.RK4(), dt0=0.1)

    swapped = layer()
    weight = (swapped.vector_field[1].weight.detach() * 1.5).requires_grad_()
    y = torch.func.functional_call(swapped, {"vector_field.1.weight": weight}, (x,))
    (got,) = torch.autograd.grad(y.square().sum(), weight)
    own = layer()
    with torch.no_grad():
        own.vector_field[1].weight.mul_(1.5)
    own(x).square().sum().backward()
    torch.testing.assert_close(got, own.vector_field[1].weight.grad, rtol=1e-9, atol=1e-12)
    assert swapped.vector_field[1].weight.grad is None


@pytest.mark.parametrize(
    "gradient", [odecore.Adjoint(), odecore.Checkpoint(), odecore.Reversible()], ids=repr
)
def test_eval_before_backward_leaves_the_forward_passs_function(gradient):
    """A layer switched to eval() between its forward and backward pass: the adjoint
    evaluated the batch norm of the field with its running statistics in the backward
    pass, a gradient 9.5 off that of the forward pass's function (checkpointing and
    the reversible solve refused it)."""
    x = torch.randn(5, 2, dtype=F64)

    def grads(method, switch):
        torch.manual_seed(1)
        field = DepthSequential(nn.Linear(2, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 2))
        layer = NeuralODE(field.to(F64), gradient=method, solver=odecore.RK4(), dt0=0.1)
        y = layer(x)
        if switch:
            layer.eval()
        y.square().sum().backward()
        assert field[1].training is not switch
        return [p.grad for p in field.parameters()]

    for got, want in zip(grads(gradient, True), grads(gradient, False)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_adaptive_depth_field_sees_per_sample_depth():
    seen = []

    def field(t, z):
        seen.append(t.shape)
        return torch.zeros_like(z)

    layer = AdaptiveDepthNODE(field, nn.Linear(2, 1))
    layer(torch.randn(4, 2))
    assert seen and all(s == (4,) for s in seen)


def test_gradcheck_adaptive_depth():
    torch.manual_seed(0)
    field = DepthSequential(DepthConcat(), nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1)).double()
    horizon = nn.Linear(1, 1).double()
    layer = AdaptiveDepthNODE(field, horizon, controller=TIGHT)
    x = torch.randn(3, 1, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: layer(x), (x, horizon.weight), atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"vector_field": 3}, TypeError, r"`vector_field` must be callable"),
        ({"t1": 0.0}, ValueError, r"`t0` and `t1` must be finite and different"),
        ({"integrals": [object()]}, TypeError, r"`integrals\[0\]` must be an IntegralTerm"),
        # Depths that require grad were made floats: their gradient was silently None.
        ({"ts": torch.tensor([0.0, 1.0], requires_grad=True)}, ValueError, r"`ts` requires grad"),
        ({"t1": torch.tensor(2.0, requires_grad=True)}, ValueError, r"`t1` requires grad"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    args = {"vector_field": lambda t, x: x, **kwargs}
    with pytest.raises(error, match=match):
        NeuralODE(**args)


def test_bad_inputs():
    layer = NeuralODE(lambda t, x: -x)
    with pytest.raises(TypeError, match=r"must be a tensor"):
        layer([1.0, 2.0])
    with pytest.raises(ValueError, match=r"must be batched"):
        layer(torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"one depth per sample"):
        AdaptiveDepthNODE(lambda t, z: -z, nn.Linear(2, 2))(torch.randn(3, 2))


@pytest.mark.parametrize(
    "gradient", [odecore.Adjoint(), odecore.Checkpoint(), odecore.Reversible()], ids=repr
)
def test_a_later_forward_pass_does_not_change_an_earlier_ones_gradient(gradient):
    # Both methods evaluate the field again in the backward pass; the control they see
    # there must be the input of *their* forward pass.
    field = DepthSequential(DataControl(), nn.Linear(2, 1, bias=False)).double()
    with torch.no_grad():
        field[1].weight.copy_(torch.tensor([[-1.0, -2.0]]))
    layer = NeuralODE(field, controller=TIGHT, gradient=gradient)
    x1 = torch.tensor([[1.0], [2.0]], dtype=F64, requires_grad=True)
    x2 = torch.tensor([[-3.0], [5.0]], dtype=F64, requires_grad=True)
    out1 = layer(x1)
    layer(x2)
    out1.sum().backward()
    # dz/dt = -z - 2x: z(1) = x (3 e^-1 - 2), linear in x.
    torch.testing.assert_close(x1.grad, torch.full_like(x1, 3 * math.exp(-1.0) - 2))
    assert field[1].weight.grad.shape == (1, 2)


def test_image_batches_through_augmented_data_controlled_conv_node():
    # An ANODE image block: 1 channel plus 3 zero channels, a conv field that sees the
    # depth and the input image as extra channels.
    torch.manual_seed(0)
    field = DepthSequential(
        DataControl(), DepthConcat(), nn.Conv2d(4 + 4 + 1, 8, 3, padding=1), nn.Softplus(),
        nn.Conv2d(8, 4, 3, padding=1),
    )  # fmt: skip
    node = NeuralODE(field, gradient=odecore.Adjoint())
    model = nn.Sequential(ZeroAugmentation(3), node)
    x = torch.randn(2, 1, 6, 6, requires_grad=True)
    out = model(x)
    assert out.shape == (2, 4, 6, 6)
    out.pow(2).sum().backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())
    assert node.nfe > 0 and node.nfe_backward > 0


def test_gradcheck_data_control_and_integrals():
    torch.manual_seed(0)
    field = DepthSequential(DataControl(), nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).double()
    layer = NeuralODE(field, controller=TIGHT, integrals=[KineticEnergy()])

    def fn(x, w):
        y = layer(x)
        return y, layer.integrals["kinetic_energy"]

    x = torch.randn(2, 2, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(fn, (x, field[1].weight), atol=1e-6)


def test_adaptive_depth_passes_no_jumps_of_its_inner_layers():
    # Each sample's jumps lie at t_jump / T(x): none is common to the batch.
    from odelayers import GalerkinLinear
    from odelayers.basis import PiecewiseConstant

    field = DepthSequential(GalerkinLinear(1, 1, basis=PiecewiseConstant(pieces=4)))
    layer = AdaptiveDepthNODE(field, nn.Linear(1, 1))
    assert layer.node._depth_jumps(0.0, 1.0) == []
    assert NeuralODE(field)._depth_jumps(0.0, 1.0) == [0.25, 0.5, 0.75]


@pytest.mark.parametrize(
    ("t0", "t1"), [(0.0, 2.0), (-0.5, 1.0), (2.0, 0.0)], ids=["past-t1", "before-t0", "backwards"]
)
def test_a_solve_past_a_galerkin_layers_basis_is_refused(t0, t1):
    # A [0, 1] basis at depth 1.5: the hat functions are 0 there, the weights vanish.
    from odelayers import GalerkinLinear
    from odelayers.basis import PiecewiseLinear

    field = DepthSequential(
        nn.Tanh(), GalerkinLinear(2, 2, basis=PiecewiseLinear(pieces=2, t0=0.0, t1=1.0))
    )
    with pytest.raises(
        ValueError, match=r"depths \[.*\].*'1' \(GalerkinLinear\) lives on \[0.0, 1.0\]"
    ):
        NeuralODE(field, t0=t0, t1=t1)(torch.randn(3, 2))
    # Inside the interval, forwards and backwards, a flow's log-density too.
    NeuralODE(field, t0=1.0, t1=0.25)(torch.randn(3, 2))
    CNF(field).log_prob(torch.randn(3, 2))


def test_an_adaptive_depth_past_a_galerkin_layers_basis_is_refused():
    from odelayers import GalerkinLinear
    from odelayers.basis import Fourier

    torch.manual_seed(0)
    field = DepthSequential(GalerkinLinear(2, 2, basis=Fourier(modes=1, t1=2.0)))
    horizon = nn.Linear(2, 1)
    layer = AdaptiveDepthNODE(field, horizon)
    x = torch.randn(4, 2)
    with torch.no_grad():
        horizon.bias.fill_(0.5)
    layer(x)
    assert float(layer.depth.detach().max()) < 2.0
    with torch.no_grad():
        horizon.bias.fill_(3.0)
    with pytest.raises(ValueError, match=r"T\(x\) span .*lives on \[0.0, 2.0\].*`positive`"):
        layer(x)
    # The refused pass leaves no depths or NFE of the one before to read as its own.
    assert layer.depth is None and layer.nfe == 0


def test_adaptive_depths_that_require_grad_across_a_jump_of_the_weights_are_refused():
    # The rescaled solve differentiates the weights in depth, where the jump of a
    # piecewise-constant weight has no derivative: the gradient of the horizon's bias
    # was -0.48, the finite difference of the (accurate) forward pass -0.26, which is
    # dz(T)/dT = f(T, z(T)) times dT/db. Depths below the jump, or without a gradient,
    # are solved as before.
    from odelayers import GalerkinLinear
    from odelayers.basis import PiecewiseConstant

    torch.manual_seed(0)
    field = GalerkinLinear(2, 2, basis=PiecewiseConstant(pieces=2, t1=3.0)).to(F64)
    horizon = nn.Linear(2, 1).to(F64)
    layer = AdaptiveDepthNODE(field, horizon, controller=TIGHT)
    x = torch.randn(3, 2, dtype=F64)
    with torch.no_grad():
        horizon.weight.zero_()
        horizon.bias.fill_(2.0)  # T = softplus(2) = 2.13, past the jump at 1.5
    with pytest.raises(ValueError, match=r"'field' \(GalerkinLinear\) jump at 1.5 .*detach"):
        layer(x)
    assert layer.nfe == 0
    with torch.no_grad():
        y = layer(x)
    t = layer.depth
    torch.testing.assert_close(y, NeuralODE(field, t1=float(t[0]), controller=TIGHT)(x))
    with torch.no_grad():
        horizon.bias.fill_(1.0)  # T = 1.31, before it: the gradient is that of f(T, z(T))
    y = layer(x)
    (got,) = torch.autograd.grad(y.sum(), horizon.bias)
    with torch.no_grad():
        t = layer.depth[0]
        expected = field(t, y).sum() * torch.sigmoid(torch.tensor(1.0, dtype=F64))
    torch.testing.assert_close(got[0], expected, rtol=1e-6, atol=1e-9)


def test_under_bf16_autocast_a_half_input_is_solved_in_a_float32_state():
    """A conv stem under autocast hands the block a bfloat16 tensor; the solver keeps a
    float32 state (bfloat16 cannot hold rtol 1e-3, which odecore refuses) while the
    field computes in bfloat16."""
    torch.manual_seed(0)
    field = DepthSequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 4))
    layer = NeuralODE(field, spec=odecore.OdeSpec.from_method("dopri5", rtol=1e-3, atol=1e-3))
    x = torch.randn(8, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x.to(torch.bfloat16))
        out.float().sum().backward()
    assert out.dtype == torch.float32
    with torch.no_grad():
        exact = NeuralODE(field)(x.to(torch.bfloat16).float())
    assert torch.allclose(out, exact, atol=0.05)  # bfloat16 field: about 2-3 digits
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in field.parameters())


def test_without_autocast_a_bfloat16_state_is_still_refused():
    layer = NeuralODE(
        nn.Linear(4, 4), spec=odecore.OdeSpec.from_method("dopri5", rtol=1e-3, atol=1e-3)
    )
    with pytest.raises(Exception, match="below the resolution"):
        layer(torch.randn(2, 4, dtype=torch.bfloat16))


# --- every tensor the field reads gets its gradient --------------------------------------


class Unregistered(nn.Module):
    """A field that reads a tensor it holds as a plain attribute (no parameter, no buffer)."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2, dtype=F64)
        self.w = w

    def forward(self, t, y):
        return torch.tanh(self.linear(y)) @ self.w


def _closure(w):
    return lambda t, y: torch.tanh(y @ w) * torch.cos(t)


def _replaced_weight(w):
    linear = nn.Linear(2, 2, dtype=F64)
    del linear.weight
    linear.weight = w  # a plain tensor, read by the layer's forward, no parameter
    return DepthSequential(linear, nn.Tanh())


def _hooked(w):
    linear = nn.Linear(2, 2, dtype=F64)
    linear.register_forward_pre_hook(lambda module, args: (args[0] @ w,))
    return DepthSequential(linear, nn.Tanh())


READERS = {
    "plain function": _closure,
    "unregistered tensor": Unregistered,
    "torch layer with a replaced weight": _replaced_weight,
    "torch layer with a forward hook": _hooked,
}


@pytest.mark.parametrize(
    "gradient", [odecore.Adjoint(), odecore.Checkpoint(), odecore.Reversible()], ids=repr
)
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_tensor_the_field_reads_besides_its_parameters_gets_its_gradient(reader, gradient):
    # The layer fixed the method's `params` to the module's parameters, so odecore did
    # not look for more: `w` got no gradient (a plain function's output needed none).
    def grads(method):
        torch.manual_seed(0)
        w = (0.8 * torch.randn(2, 2, dtype=F64)).requires_grad_()
        field = READERS[reader](w)
        x = torch.randn(4, 2, dtype=F64, requires_grad=True)
        NeuralODE(field, controller=TIGHT, gradient=method)(x).pow(2).sum().backward()
        params = list(field.parameters()) if isinstance(field, nn.Module) else []
        return [q.grad for q in (w, x, *params)]

    ours, reference = grads(gradient), grads(odecore.Autograd())
    assert all(g is not None for g in ours)
    for g, expected in zip(ours, reference):
        torch.testing.assert_close(g, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()], ids=repr)
def test_adaptive_depth_with_a_plain_function_field(gradient):
    def grads(method):
        torch.manual_seed(0)
        w = (0.8 * torch.randn(2, 2, dtype=F64)).requires_grad_()
        horizon = nn.Linear(2, 1, dtype=F64)
        field = lambda t, z: torch.tanh(z @ w)  # noqa: E731 - t: one depth per sample
        layer = AdaptiveDepthNODE(field, horizon, controller=TIGHT, gradient=method)
        x = torch.randn(3, 2, dtype=F64, requires_grad=True)
        layer(x).pow(2).sum().backward()
        return [q.grad for q in (w, x, *horizon.parameters())]

    ours, reference = grads(gradient), grads(odecore.Autograd())
    assert all(g is not None for g in ours)
    for g, expected in zip(ours, reference):
        torch.testing.assert_close(g, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(
    "gradient", [odecore.Adjoint(), odecore.Checkpoint(), odecore.Reversible()], ids=repr
)
@pytest.mark.parametrize("model", ["data control", "adaptive depth"])
def test_given_params_keep_the_layers_own_inputs_to_the_field(model, gradient):
    # With `params` given (the field's parameters), the input the layer hands its
    # data-control layers, or the depths of AdaptiveDepthNODE, got no gradient: the
    # caller cannot name them. x lost the control's share; the horizon network all.
    def grads(method):
        torch.manual_seed(0)
        first = DataControl() if model == "data control" else DepthConcat()
        field = DepthSequential(first, nn.Linear(4 if model == "data control" else 3, 2))
        field = field.double()
        if not isinstance(method, odecore.Autograd):
            method = replace(method, params=tuple(field.parameters()))
        horizon = nn.Linear(2, 1, dtype=F64)
        layer = (
            NeuralODE(field, controller=TIGHT, gradient=method)
            if model == "data control"
            else AdaptiveDepthNODE(field, horizon, controller=TIGHT, gradient=method)
        )
        extra = list(horizon.parameters()) if model == "adaptive depth" else []
        x = torch.randn(3, 2, dtype=F64, requires_grad=True)
        layer(x).pow(2).sum().backward()
        return [q.grad for q in (x, *field.parameters(), *extra)]

    ours, reference = grads(gradient), grads(odecore.Autograd())
    assert all(g is not None for g in ours)
    for g, expected in zip(ours, reference):
        torch.testing.assert_close(g, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()], ids=repr)
def test_the_graph_before_a_data_control_layer_is_differentiated_once(gradient):
    # A field of torch's and odelayers' layers reads nothing but its parameters and the
    # control: these are the method's `params`, the backward stops at the control, and
    # the layers that computed it are differentiated once, not at every evaluation of
    # the backward pass (as they are when odecore has to search the field's reads).
    def grads(method, calls):
        torch.manual_seed(0)
        encoder = nn.Linear(2, 2, dtype=F64)
        field = DepthSequential(DataControl(), DepthConcat(), nn.Linear(5, 2, dtype=F64))
        x = torch.randn(3, 2, dtype=F64, requires_grad=True)
        encoder.weight.register_hook(lambda g: calls.append(g))
        NeuralODE(field, controller=TIGHT, gradient=method)(encoder(x)).pow(2).sum().backward()
        return [q.grad for q in (x, *encoder.parameters(), *field.parameters())]

    calls: list[torch.Tensor] = []
    ours, reference = grads(gradient, calls), grads(odecore.Autograd(), [])
    assert len(calls) == 1
    for g, expected in zip(ours, reference):
        torch.testing.assert_close(g, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()])
def test_a_bound_field_keeps_its_running_statistics_through_the_backward_pass(gradient):
    # A data-control field is bound before every evaluation; the solve still sees its
    # module, so the backward pass's evaluations do not count in the BatchNorm's
    # statistics again (they had: 2 x the batches tracked).
    torch.manual_seed(0)
    field = DepthSequential(DataControl(), nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Tanh(),
                            nn.Linear(3, 2))  # fmt: skip
    layer = NeuralODE(field, gradient=gradient)
    y = layer(torch.randn(8, 2))
    norm = field[2]
    forward = [b.clone() for b in norm.buffers()]
    y.square().sum().backward()
    for got, want in zip(norm.buffers(), forward):
        assert torch.equal(got, want)


@pytest.mark.parametrize("params", ["found", "given"])
@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()], ids=repr)
def test_two_data_control_layers_count_the_inputs_gradient_once(gradient, params):
    # Both layers read the same input; it was listed twice in the method's `params`,
    # and odecore returned its whole gradient for each entry: twice the control's share
    # (0.43 off the finite differences).
    torch.manual_seed(0)
    field = DepthSequential(
        DataControl(), nn.Linear(4, 3), nn.Tanh(), DataControl(), nn.Linear(5, 2)
    ).double()
    if params == "given":
        gradient = replace(gradient, params=tuple(field.parameters()))
    layer = NeuralODE(field, controller=TIGHT, gradient=gradient)
    x = torch.randn(3, 2, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,), atol=1e-6)


@pytest.mark.parametrize("params", ["found", "given"])
@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()], ids=repr)
def test_adaptive_depth_of_a_data_controlled_field_against_finite_differences(gradient, params):
    # The depths T(x) are computed from the input x, which the data-control layer reads
    # too: with both as the method's `params`, odecore's gradient of x took the path
    # through T(x), and autograd added it again from T's (3.0e-2 off in float64).
    torch.manual_seed(0)
    field = DepthSequential(DataControl(), nn.Linear(4, 2)).double()
    horizon = nn.Linear(2, 1, dtype=F64)
    if params == "given":
        gradient = replace(gradient, params=tuple(field.parameters()))
    layer = AdaptiveDepthNODE(field, horizon, controller=TIGHT, gradient=gradient)
    x = torch.randn(3, 2, dtype=F64, requires_grad=True)
    inputs = (x, horizon.weight, field[1].weight)
    assert torch.autograd.gradcheck(lambda x, *_: layer(x), inputs, atol=1e-6)


@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()], ids=repr)
def test_a_control_computed_by_the_fields_own_layer_against_finite_differences(gradient):
    # The control is shared(x), and `shared` is a layer of the field: its weight, a
    # parameter of the method, is also what the control is computed from.
    torch.manual_seed(0)
    shared = nn.Linear(2, 2, dtype=F64)
    field = DepthSequential(DataControl(), nn.Linear(4, 2), nn.Tanh(), shared).double()
    layer = NeuralODE(field, controller=TIGHT, gradient=gradient)
    x = torch.randn(3, 2, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: layer(shared(x)), (x, shared.weight), atol=1e-6)


def test_given_params_computed_from_one_another_are_refused():
    field = DepthSequential(DataControl(), nn.Linear(4, 2)).double()
    weight = field[1].weight
    layer = NeuralODE(field, gradient=odecore.Adjoint(params=(weight, 2 * weight)))
    with pytest.raises(ValueError, match=r"`params` computed from one another"):
        layer(torch.randn(3, 2, dtype=F64))
