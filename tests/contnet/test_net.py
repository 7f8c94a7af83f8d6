"""ContinuousNet: manifestation, refinement, the ResNet round trip, optimizer state."""

from __future__ import annotations

import odecore
import pytest
import torch
from contnet import (
    ContinuousNet,
    RefinementSchedule,
    ResidualUnit,
    carry_optimizer,
    convergence_study,
    manifestation_sweep,
    refine,
)
from torch import nn

F64 = torch.float64


def small(**kwargs) -> ContinuousNet:
    torch.manual_seed(0)
    args = {"in_channels": 1, "num_classes": 3, "channels": (2, 3, 4), **kwargs}
    net = ContinuousNet(**args).double()
    # Non-trivial batch-norm statistics, different per piece.
    net.train()
    with torch.no_grad():
        for _ in range(3):
            net(torch.randn(8, 1, 12, 12, dtype=F64) * 2 + 0.5)
    return net.eval()


X = torch.randn(3, 1, 12, 12, dtype=F64, generator=torch.Generator().manual_seed(1))


def test_shapes_for_mnist_and_cifar_images():
    torch.manual_seed(0)
    assert ContinuousNet(in_channels=1, channels=(2, 2, 2))(torch.randn(2, 1, 28, 28)).shape == (
        2,
        10,
    )
    wide = ContinuousNet(in_channels=3, num_classes=100, channels=(64, 128, 256))
    assert wide(torch.randn(1, 3, 32, 32)).shape == (1, 100)


@pytest.mark.parametrize(
    ("method", "n_steps", "n_basis"), [("euler", 4, 4), ("rk4", 3, 2), ("midpoint", 2, 5)]
)
def test_to_resnet_gives_the_same_outputs(method, n_steps, n_basis):
    net = small(solver=method, n_steps=n_steps, n_basis=n_basis)
    resnet = net.to_resnet().eval()
    assert not any("coefficients" in name for name, _ in resnet.named_parameters())
    assert len(resnet.blocks[0].units) == n_steps
    with torch.no_grad():
        torch.testing.assert_close(resnet(X), net(X), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("method", "n_steps", "n_basis", "basis"),
    [
        ("euler", 4, 4, "piecewise_constant"),
        ("rk4", 3, 2, "piecewise_constant"),
        ("rk4_38", 3, 3, "legendre"),
        ("heun", 2, 3, "piecewise_linear"),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_to_resnet_is_exact_to_the_bit(method, n_steps, n_basis, basis, dtype):
    # The export's units step with the blocks' odecore solver on the same weights.
    net = small(solver=method, n_steps=n_steps, n_basis=n_basis, basis=basis).to(dtype)
    resnet = net.to_resnet().eval()
    with torch.no_grad():
        assert torch.equal(resnet(X.to(dtype)), net(X.to(dtype)))


@pytest.mark.filterwarnings("ignore:`torch.jit.trace(_method)?` is deprecated:DeprecationWarning")
def test_resnet_export_traces_and_exports():
    net = small(solver="rk4", n_steps=2)
    resnet = net.to_resnet().eval()
    with torch.no_grad():
        expected = net(X)
        traced = torch.jit.trace(resnet, (X,))
        torch.testing.assert_close(traced(X), expected, rtol=1e-12, atol=1e-12)
        exported = torch.export.export(resnet, (X,))
        torch.testing.assert_close(exported.module()(X), expected, rtol=1e-12, atol=1e-12)


def test_from_resnet_round_trip():
    net = small(n_steps=3)  # Euler, M = N_t = 3, epsilon = 3: a ResNet of 3 units per block
    resnet = net.to_resnet().eval()
    with torch.no_grad():  # a ResNet that was not made from this net
        for p in resnet.parameters():
            p.add_(0.01 * torch.randn_like(p))
    back = ContinuousNet.from_resnet(resnet).eval()
    assert back.stem.weight.dtype == F64
    assert back.n_steps == 3 and back.method == "euler"
    with torch.no_grad():
        torch.testing.assert_close(back(X), resnet(X), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(back.to_resnet().eval()(X), resnet(X), rtol=1e-12, atol=1e-12)


def test_from_resnet_keeps_the_activation():
    net = small(n_steps=2, activation=nn.Softplus)
    back = ContinuousNet.from_resnet(net.to_resnet()).eval()
    assert isinstance(back.blocks[0].continuous.module[1], nn.Softplus)
    with torch.no_grad():
        torch.testing.assert_close(back(X), net(X), rtol=1e-12, atol=1e-12)


def test_from_resnet_rejects_multi_stage_units():
    with pytest.raises(ValueError, match=r"not an Euler unit"):
        ContinuousNet.from_resnet(small(solver="rk4").to_resnet())


def test_residual_unit_needs_a_module_per_stage():
    with pytest.raises(ValueError, match=r"`stages`: the solver 'rk4' has 4 stages but 2 modules"):
        ResidualUnit([nn.Identity(), nn.Identity()], "rk4", 0.5, 1.0)


def test_manifest_shares_the_weights():
    net = small(n_steps=2)
    other = net.manifest(solver="rk4_38", n_steps=5)
    assert (other.method, other.n_steps) == ("rk4_38", 5)
    assert (net.method, net.n_steps) == ("euler", 2)
    with torch.no_grad():
        net.blocks[0].continuous.coefficient("2.weight").mul_(2.0)
    assert torch.equal(
        other.blocks[0].continuous.coefficient("2.weight"),
        net.blocks[0].continuous.coefficient("2.weight"),
    )


@pytest.mark.parametrize(("method", "n_steps"), [("euler", 2), ("rk4", 3), ("midpoint", 8)])
def test_weight_refinement_leaves_every_manifestation_unchanged(method, n_steps):
    net = small(n_steps=2)
    finer, _ = refine(net, n_basis=4)
    assert finer.blocks[0].basis.pieces == 4 and net.blocks[0].basis.pieces == 2
    with torch.no_grad():
        a = net.manifest(solver=method, n_steps=n_steps)(X)
        b = finer.manifest(solver=method, n_steps=n_steps)(X)
    # The same numbers in the same operations; only the memory they sit in differs,
    # which may change the convolution's summation order by an ulp.
    torch.testing.assert_close(a, b, rtol=0, atol=1e-14)


@pytest.mark.parametrize("solver", ["rk4", odecore.RK4()])
def test_solver_refinement_changes_only_the_solver(solver):
    net = small(n_steps=2)
    other, maps = refine(net, solver=solver)
    assert (other.method, other.n_steps, maps) == ("rk4", 2, {})
    assert isinstance(other.solver, odecore.RK4) and isinstance(net.solver, odecore.Euler)
    schedule = RefinementSchedule(epochs=[0], solver=solver)
    scheduled, _ = schedule.step(0, net, torch.optim.SGD(net.parameters(), lr=0.1))
    assert (scheduled.method, scheduled.n_steps) == ("rk4", 2)


def test_default_refinement_doubles_steps_and_pieces_and_keeps_euler_resnet():
    net = small(n_steps=2)
    finer, _ = refine(net)
    assert finer.n_steps == 4 and finer.blocks[0].basis.pieces == 4
    assert finer.blocks[0].epsilon == net.blocks[0].epsilon


def test_time_refinement_of_rk4_converges_at_fourth_order():
    net = small(solver="rk4", basis="legendre", n_basis=3, activation=nn.Softplus)
    study = convergence_study(net, X, solver="rk4", n_steps=[2, 4, 8, 16])
    assert study.order == pytest.approx(4.0, abs=0.3)
    euler = convergence_study(net, X, solver="euler", n_steps=[4, 8, 16, 32])
    assert euler.order == pytest.approx(1.0, abs=0.2)


@pytest.mark.parametrize(("method", "order"), [("rk4", 4.0), ("rk4_38", 4.0), ("heun", 2.0)])
def test_piecewise_constant_weights_keep_the_order_when_steps_land_on_the_pieces(method, order):
    # A stage at the end of a step reads the piece the step lies in (the limit from the
    # left), not the next one; otherwise these methods fall to first order.
    net = small(n_steps=4, activation=nn.Softplus)
    study = convergence_study(net, X, solver=method, n_steps=[4, 8, 16], reference_steps=128)
    assert study.order == pytest.approx(order, abs=0.3)


def test_manifestation_sweep_grid():
    net = small()
    grid = manifestation_sweep(net, lambda m: float(m(X).detach().abs().sum()),
                               solvers=["euler", "rk4"], n_steps=[1, 2])  # fmt: skip
    assert set(grid) == {("euler", 1), ("euler", 2), ("rk4", 1), ("rk4", 2)}
    with torch.no_grad():
        assert grid[("rk4", 2)] == pytest.approx(float(net.manifest(solver="rk4", n_steps=2)(X)
                                                       .abs().sum()))  # fmt: skip


def loss_of(net: ContinuousNet) -> torch.Tensor:
    return net(X).pow(2).mean()


def test_optimizer_state_is_split_with_the_weights_and_training_continues_exactly():
    net = small(n_steps=2).train()
    lr, mu = 0.1, 0.9
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=mu)
    opt.zero_grad()
    loss_of(net).backward()
    opt.step()
    finer, maps = refine(net)
    new_opt = carry_optimizer(opt, net, finer, maps)
    name = "blocks.1.continuous.coefficients.2__weight"
    old_p = dict(net.named_parameters())[name]
    new_p = dict(finer.named_parameters())[name]
    old_buf = opt.state[old_p]["momentum_buffer"]
    new_buf = new_opt.state[new_p]["momentum_buffer"]
    assert torch.equal(new_buf, old_buf.repeat_interleave(2, dim=0))
    stem_old = opt.state[net.stem.weight]["momentum_buffer"]
    assert torch.equal(new_opt.state[finer.stem.weight]["momentum_buffer"], stem_old)
    assert new_opt.param_groups[0]["lr"] == lr
    # One more step on the refined net equals the hand-computed SGD-momentum step.
    before = new_p.detach().clone()
    buf = new_buf.clone()
    new_opt.zero_grad()
    loss_of(finer).backward()
    grad = new_p.grad.detach().clone()
    new_opt.step()
    torch.testing.assert_close(new_p.detach(), before - lr * (mu * buf + grad))


def test_refinement_schedule_refines_at_its_epochs():
    net = small(n_steps=1).train()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    schedule = RefinementSchedule(epochs=[1, 3])
    steps = []
    for epoch in range(4):
        net, opt = schedule.step(epoch, net, opt)
        opt.zero_grad()
        loss_of(net).backward()
        opt.step()
        steps.append(net.n_steps)
    assert steps == [1, 2, 2, 4]
    assert all(p in opt.state for p in net.parameters())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"basis": "wavelet"}, r"Unknown `basis` 'wavelet'"),
        ({"basis": "fourier", "n_basis": 4}, r"odd `n_basis >= 3`"),
        ({"channels": (2, 2)}, r"`channels` must be three positive integers"),
        ({"solver": "bosh3"}, r"Unknown `solver` 'bosh3'"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ContinuousNet(**kwargs)


@pytest.mark.parametrize("name", sorted(set(odecore.FIXED_METHODS) - {"heun2"}))
def test_a_solver_object_is_named_by_its_first_method_name(name):
    """``heun`` and ``heun2`` are one solver: an object reads back as ``heun``."""
    net = ContinuousNet(1, 10, (4, 4, 4), solver=odecore.FIXED_METHODS[name]())
    assert net.method == name
