"""Continuous normalizing flows: log-densities of linear flows in closed form."""

from __future__ import annotations

import math

import odecore
import pytest
import torch
from fields import Linear
from odelayers import (
    CNF,
    DataControl,
    DepthSequential,
    NegativeTrace,
    standard_normal_log_prob,
)
from torch import nn

F64 = torch.float64
TIGHT = odecore.PIDController(rtol=1e-10, atol=1e-10)


A = torch.tensor([[-0.5, 0.3, 0.0], [0.1, -0.2, 0.4], [0.0, -0.3, 0.25]], dtype=F64)


def linear_log_prob(x: torch.Tensor, t: float) -> torch.Tensor:
    # z(t) = e^{At} z0: log p_t(x) = log N(e^{-At} x) - t tr(A).
    z0 = x @ torch.linalg.matrix_exp(-A * t).T
    return standard_normal_log_prob(z0) - t * torch.trace(A)


def test_standard_normal_log_prob():
    z = torch.tensor([[0.0, 0.0], [1.0, -1.0]], dtype=F64)
    expected = torch.tensor([-math.log(2 * math.pi), -1 - math.log(2 * math.pi)], dtype=F64)
    torch.testing.assert_close(standard_normal_log_prob(z), expected)


def test_exact_trace_log_prob_of_a_linear_flow():
    flow = CNF(Linear(A.clone()), controller=TIGHT, t1=1.3)
    x = torch.randn(7, 3, dtype=F64)
    torch.testing.assert_close(flow.log_prob(x), linear_log_prob(x, 1.3))


def test_forward_and_log_prob_are_consistent():
    flow = CNF(Linear(A.clone()), controller=TIGHT)
    z0 = torch.randn(5, 3, dtype=F64)
    z1, delta = flow(z0)
    torch.testing.assert_close(delta, torch.full((5,), -float(torch.trace(A)), dtype=F64))
    torch.testing.assert_close(flow.log_prob(z1), standard_normal_log_prob(z0) + delta)


def test_hutchinson_trace_is_exact_for_a_diagonal_jacobian_and_unbiased_otherwise():
    # Rademacher noise: e^T D e = tr(D) for every draw when D is diagonal.
    diag = torch.diag(torch.tensor([-0.5, 0.2, 0.7], dtype=F64))
    flow = CNF(Linear(diag), trace="hutchinson", controller=TIGHT)
    _, delta = flow(torch.randn(4, 3, dtype=F64))
    torch.testing.assert_close(delta, torch.full((4,), -0.4, dtype=F64))
    torch.manual_seed(0)
    full = CNF(Linear(A.clone()), trace="hutchinson")
    _, delta = full(torch.zeros(20000, 3, dtype=F64))
    assert float(delta.detach().mean()) == pytest.approx(-float(torch.trace(A)), abs=0.01)


def test_log_prob_gradients_flow_to_the_field_by_the_adjoint():
    field = Linear(A.clone())
    flow = CNF(field, controller=TIGHT)
    x = torch.randn(6, 3, dtype=F64)
    flow.log_prob(x).sum().backward()
    adjoint = field.a.grad.clone()
    a = A.clone().requires_grad_()
    z0 = x @ torch.linalg.matrix_exp(-a).T
    (standard_normal_log_prob(z0) - torch.trace(a)).sum().backward()
    torch.testing.assert_close(adjoint, a.grad, rtol=1e-7, atol=1e-8)


def test_data_controlled_cnf_conditions_on_its_input_and_traces_only_the_state():
    # dz/dt = W [z, c]: the trace counts only the z-block of W, the control is data.
    field = DepthSequential(DataControl(), nn.Linear(4, 2, bias=False)).double()
    with torch.no_grad():
        field[1].weight.copy_(torch.tensor([[-0.5, 0.1, 1.0, 0.0], [0.2, -0.3, 0.0, 1.0]]))
    flow = CNF(field, controller=TIGHT)
    z0 = torch.randn(3, 2, dtype=F64)
    condition = torch.randn(3, 2, dtype=F64)
    z1, delta = flow(z0, condition=condition)
    torch.testing.assert_close(delta, torch.full((3,), 0.8, dtype=F64))
    # Closed form of z' = B z + c with B the z-block: z1 = e^B z0 + B^-1 (e^B - I) c.
    b = torch.tensor([[-0.5, 0.1], [0.2, -0.3]], dtype=F64)
    eb = torch.linalg.matrix_exp(b)
    expected = z0 @ eb.T + condition @ (torch.linalg.solve(b, eb - torch.eye(2, dtype=F64))).T
    torch.testing.assert_close(z1, expected)


def test_gradcheck_cnf():
    torch.manual_seed(0)
    field = DepthSequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 2)).double()
    flow = CNF(field, controller=TIGHT)
    x = torch.randn(2, 2, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: flow.log_prob(x), (x, field[0].weight), atol=1e-6)


@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()], ids=repr)
def test_log_prob_of_a_plain_function_flow_differentiates_what_it_closes_over(gradient):
    # The layer fixed the method's `params` to a module's parameters (none for a plain
    # function): the flow's matrix got no gradient, its log-density needed none.
    x = torch.randn(5, 3, dtype=F64)

    def grads(method):
        a = A.clone().requires_grad_()
        flow = CNF(lambda t, z: torch.tanh(z @ a.T), controller=TIGHT, gradient=method)
        flow.log_prob(x).sum().backward()
        return a.grad

    ours = grads(gradient)
    assert ours is not None
    torch.testing.assert_close(ours, grads(odecore.Autograd()), rtol=1e-6, atol=1e-8)


def test_bad_trace():
    with pytest.raises(ValueError, match=r"`estimator` \(CNF's `trace`\) must be 'exact'"):
        NegativeTrace("approximate")


def test_data_controlled_log_prob_needs_a_condition():
    field = DepthSequential(DataControl(), nn.Linear(4, 2)).double()
    with pytest.raises(ValueError, match=r"needs its `condition`"):
        CNF(field).log_prob(torch.zeros(3, 2, dtype=F64))


def test_a_condition_without_a_data_control_layer_is_refused():
    # The condition reaches the field through its DataControl layers only; a flow
    # without one computed the unconditioned flow and log-density without a word.
    flow = CNF(Linear(-torch.eye(2, dtype=F64)))
    z, c = torch.randn(3, 2, dtype=F64), torch.randn(3, 2, dtype=F64)
    with pytest.raises(
        ValueError, match=r"`condition` was given, but the field has no DataControl"
    ):
        flow(z, condition=c)
    with pytest.raises(
        ValueError, match=r"`condition` was given, but the field has no DataControl"
    ):
        flow.log_prob(z, condition=c)


def test_a_refused_call_leaves_no_nfe_of_the_one_before():
    # NeuralODE's nfe is 0 where a forward pass raised; a CNF refused a condition before
    # its solve and still showed the evaluations of the flow's previous call (62).
    flow = CNF(Linear(-torch.eye(2, dtype=F64)), gradient=odecore.Adjoint())
    z, c = torch.randn(3, 2, dtype=F64, requires_grad=True), torch.randn(3, 2, dtype=F64)
    for refused in (lambda: flow(z, condition=c), lambda: flow.log_prob(z, condition=c),
                    lambda: flow.sample(-1, (2,))):  # fmt: skip
        flow(z)[1].sum().backward()
        assert flow.nfe > 0 and flow.nfe_backward > 0
        with pytest.raises((ValueError, RuntimeError)):
            refused()
        assert (flow.nfe, flow.nfe_backward) == (0, 0)


@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()], ids=repr)
def test_sampling_between_log_prob_and_its_backward_leaves_the_gradient(gradient):
    # sample() draws new Hutchinson noise; the backward pass of log_prob re-evaluated
    # the trace with it (0.76 off here). Oracle: the same log_prob, no sample() between.
    def grad(sample: bool) -> torch.Tensor:
        torch.manual_seed(0)
        field = DepthSequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2))
        generator = torch.Generator().manual_seed(5)
        loose = odecore.PIDController(rtol=1e-5, atol=1e-5)
        flow = CNF(
            field, trace="hutchinson", generator=generator, controller=loose, gradient=gradient
        )
        log_prob = flow.log_prob(torch.randn(3, 2)).sum()
        if sample:
            with torch.no_grad():
                flow.sample(3, (2,))
        log_prob.backward()
        return torch.cat([q.grad.flatten() for q in field.parameters()])

    torch.testing.assert_close(grad(sample=True), grad(sample=False), rtol=0, atol=0)


def test_samples_come_in_the_flows_dtype():
    # A flow drew its base samples in float32 whatever its own dtype: a float64 flow
    # raised on the mixed matmul, and a flow without parameters had no way to be asked.
    flow = CNF(Linear(-torch.eye(2, dtype=torch.float64)))
    assert flow.sample(3, (2,)).dtype == torch.float64
    # a condition says it too, where the flow holds no parameter
    free = CNF(lambda t, z: -z)
    assert free.sample(3, (2,), condition=torch.zeros(3, 2, dtype=torch.float64)).dtype == (
        torch.float64
    )
    torch.manual_seed(0)
    z = free.sample(4, (2,))
    torch.manual_seed(0)
    assert z.dtype == torch.float32
    assert torch.allclose(z, torch.randn(4, 2) * math.exp(-1.0), atol=1e-6)  # e^-t contraction


@pytest.mark.parametrize("trace", ["exact", "hutchinson"])
def test_the_trace_under_inference_mode_is_refused_in_words(trace):
    # inference_mode records no graph: autograd refused with "element 0 of tensors does
    # not require grad", which names neither the trace nor what to do.
    flow = CNF(lambda t, z: torch.tanh(z), trace=trace)
    refused = pytest.raises(RuntimeError, match=r"torch.inference_mode\(\).*torch.no_grad\(\)")
    with refused, torch.inference_mode():
        flow.log_prob(torch.randn(3, 2))


@pytest.mark.parametrize(
    "field",
    [lambda t, z: torch.ones_like(z), lambda t, z: nn.functional.linear(z.detach(), W)],
    ids=["ignores-the-state", "detaches-it"],
)
def test_a_field_not_computed_from_its_state_is_refused_in_words(field):
    with pytest.raises(RuntimeError, match=r"not computed from the state in autograd's graph"):
        CNF(field)(torch.randn(3, 2))


W = nn.Parameter(torch.eye(2))
