"""ContinuousNet: manifestation, refinement, the ResNet round trip, optimizer state."""

from __future__ import annotations

import copy
import json
import math
import warnings

import contnet
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
from odelayers.basis import Legendre, PiecewiseConstant
from torch import nn

F64 = torch.float64
# Manifestations of trained nets evaluate carried-over statistics on purpose here.
pytestmark = pytest.mark.filterwarnings("ignore::contnet.CarriedStatisticsWarning")


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


@pytest.mark.parametrize("training", [True, False])
def test_the_resnet_round_trip_keeps_the_train_or_eval_mode(training):
    # Without .train()/.eval() after it: the copied stem, stitches and head kept their
    # mode while the blocks came out in train mode, computing another function.
    net = small(n_steps=3).train(training)
    resnet = net.to_resnet()
    back = ContinuousNet.from_resnet(resnet)
    assert resnet.training == back.training == training
    assert all(m.training == training for m in [*resnet.modules(), *back.modules()])
    with torch.no_grad():
        expected = net(X)
        assert torch.equal(resnet(X), expected)
        torch.testing.assert_close(back(X), expected, rtol=1e-12, atol=1e-12)


def test_from_resnet_refuses_a_block_of_units_in_mixed_modes():
    resnet = small(n_steps=3).to_resnet().eval()
    resnet.resnet_blocks()[1].residual_units()[2].stages[0][0].train()
    with pytest.raises(ValueError, match=r"block 1's units are partly in train"):
        ContinuousNet.from_resnet(resnet)


@pytest.mark.parametrize(("epsilon", "n_steps"), [(1.7, 5), (2.9, 9)])
def test_the_resnet_round_trip_keeps_epsilon_to_the_bit(epsilon, n_steps):
    # epsilon came back as the units' scale times their number, 1.7 / 5 * 5 =
    # 1.7000000000000002: another function by a rounding, and the original network
    # refused the round trip's state_dict for its epsilon.
    net = small(n_steps=n_steps, epsilon=epsilon)
    back = ContinuousNet.from_resnet(net.to_resnet()).eval()
    assert back.blocks[0].epsilon == epsilon
    with torch.no_grad():
        assert torch.equal(back(X), net(X))
    net.load_state_dict(back.state_dict())


def test_from_resnet_keeps_the_activation():
    net = small(n_steps=2, activation=nn.Softplus)
    back = ContinuousNet.from_resnet(net.to_resnet()).eval()
    assert isinstance(back.blocks[0].continuous.module[1], nn.Softplus)
    with torch.no_grad():
        torch.testing.assert_close(back(X), net(X), rtol=1e-12, atol=1e-12)


def _biased(conv: nn.Conv2d) -> nn.Conv2d:
    out = nn.Conv2d(conv.in_channels, conv.out_channels, 3, padding=1).double()
    with torch.no_grad():
        out.weight.copy_(conv.weight)
    return out


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda r: r.__setitem__(5, _biased(r[5])), r"extra \['5.bias'\], missing \[\]"),
        (lambda r: setattr(r[3], "eps", 0.1), r"module '3' is BatchNorm2d\(3, eps=0.1"),
        (lambda r: setattr(r[0], "momentum", 0.5), r"module '0' is BatchNorm2d\(.*momentum=0.5"),
        (lambda r: r.__setitem__(4, nn.LeakyReLU(0.3)), r"module '4' is LeakyReLU\(negative_"),
        (lambda r: r.append(nn.Dropout()), r"module '6' is Dropout\(p=0.5.* has nothing"),
    ],
    ids=["conv-bias", "bn-eps", "bn-momentum", "activation-argument", "extra-module"],
)
def test_from_resnet_refuses_a_unit_unlike_the_residual_module(change, match):
    resnet = small(n_steps=3).to_resnet()
    change(resnet.resnet_blocks()[1].residual_units()[2].stages[0])
    with pytest.raises(ValueError, match=r"`from_resnet`: .*block 1, unit 2.*" + match):
        ContinuousNet.from_resnet(resnet)


def test_from_resnet_keeps_the_settings_of_the_stem_stitches_and_head():
    net = small(n_steps=2)
    resnet = net.to_resnet().eval()
    resnet.head[0].eps = 0.5
    resnet.stitches[0].residual[0].momentum = 0.7
    back = ContinuousNet.from_resnet(resnet).eval()
    assert back.stitches[0].residual[0].momentum == 0.7
    with torch.no_grad():
        assert torch.equal(back(X), resnet(X))


def test_from_resnet_rejects_multi_stage_units():
    with pytest.raises(ValueError, match=r"not an Euler unit"):
        ContinuousNet.from_resnet(small(solver="rk4").to_resnet())


def test_residual_unit_needs_a_module_per_stage():
    with pytest.raises(ValueError, match=r"`stages`: the solver 'rk4' has 4 stages but 2 modules"):
        ResidualUnit([nn.Identity(), nn.Identity()], "rk4", 0.5, 1.0)


@pytest.mark.parametrize(
    ("saved", "target"),
    [
        ({"solver": "rk4", "n_steps": 2}, {"solver": "rk4_38", "n_steps": 2}),
        ({"solver": "midpoint", "n_steps": 2}, {"solver": "heun", "n_steps": 2}),
        ({"n_steps": 2}, {"n_steps": 2, "epsilon": 1.0}),
    ],
    ids=["rk4-into-rk4_38", "midpoint-into-heun", "epsilon"],
)
def test_a_resnet_state_dict_of_another_step_is_refused_before_anything_loads(saved, target):
    # The units saved no solver, step or epsilon: another manifestation's export has
    # the same keys and shapes and loaded without a word, computing another function.
    source, resnet = small(**saved).to_resnet(), small(**target).to_resnet()
    before = copy.deepcopy(resnet.state_dict())
    with pytest.raises(RuntimeError, match=r"blocks\.0\.units\.0, a unit of .*another step"):
        resnet.load_state_dict(source.state_dict())
    with pytest.raises(RuntimeError, match=r"units\.0, a unit of"):
        resnet.resnet_blocks()[0].load_state_dict(source.resnet_blocks()[0].state_dict())
    assert all(torch.equal(v, before[k]) for k, v in resnet.state_dict().items())
    resnet.load_state_dict(small(**target).to_resnet().state_dict())  # its own loads
    unit = resnet.resnet_blocks()[0].residual_units()[0]
    same = ResidualUnit(copy.deepcopy(list(unit.stages)), unit.solver, unit.h * 2, unit.epsilon / 2)
    unit.load_state_dict(same.state_dict())  # the same step: h * epsilon is its scale


def test_a_resnet_state_dict_saved_before_the_units_kept_their_step_loads():
    resnet = small(solver="rk4", n_steps=2).to_resnet()
    state = resnet.state_dict()
    old = type(state)((k, v) for k, v in state.items() if not k.endswith("_extra_state"))
    old._metadata = {k: {**v, "version": 1} for k, v in state._metadata.items()}
    small(solver="rk4", n_steps=2).to_resnet().load_state_dict(old)


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


def test_a_convergence_study_against_a_coarser_reference_is_refused():
    # Errors against (rk4, 4) of (rk4, 8) fitted an order of 2.0 for a fourth-order method.
    net = small(solver="rk4", basis="legendre", n_basis=2, activation=nn.Softplus)
    with pytest.raises(ValueError, match=r"`reference_steps` = 4 is below the step counts \[8\]"):
        convergence_study(net, X, n_steps=[2, 4, 8], reference_steps=4)
    assert convergence_study(net, X, n_steps=[2, 4], reference_steps=4).errors[1] == 0.0


def test_a_diverged_manifestation_leaves_the_order_unfitted():
    # A NaN error was left out of the fit, which then reported the order of the others.
    net = small(solver="rk4", basis="legendre", n_basis=2, activation=nn.Softplus)
    reference = net.manifest(n_steps=32)

    def manifest(*, solver=None, n_steps=None):
        out = (
            reference
            if n_steps == 32
            else ContinuousNet.manifest(net, solver=solver, n_steps=n_steps)
        )
        if n_steps == 2:
            return lambda x: out(x) * math.nan
        return out

    net.manifest = manifest
    study = convergence_study(net, X, n_steps=[2, 4, 8, 16], reference_steps=32)
    assert math.isnan(study.errors[0]) and all(e > 0 for e in study.errors[1:])
    assert math.isnan(study.order)


def test_manifestation_sweep_grid():
    net = small()
    grid = manifestation_sweep(net, lambda m: float(m(X).detach().abs().sum()),
                               solvers=["euler", "rk4"], n_steps=[1, 2])  # fmt: skip
    assert set(grid) == {("euler", 1), ("euler", 2), ("rk4", 1), ("rk4", 2)}
    with torch.no_grad():
        assert grid[("rk4", 2)] == pytest.approx(float(net.manifest(solver="rk4", n_steps=2)(X)
                                                       .abs().sum()))  # fmt: skip


@pytest.mark.parametrize(
    "study",
    [
        lambda net: convergence_study(net, X, n_steps=[2, 4], reference_steps=8),
        lambda net: manifestation_sweep(net, lambda m: float(m(X).detach().sum()),
                                        solvers=["euler", "rk4"], n_steps=[1, 2]),
    ],
    ids=["convergence_study", "manifestation_sweep"],
)  # fmt: skip
def test_the_analysis_tools_leave_a_train_mode_net_unchanged(study):
    net = small(solver="rk4", n_steps=2).train()  # (rk4, 2) is among the manifestations
    before = {k: v.clone() for k, v in net.state_dict().items()}
    study(net)
    assert net.training
    changed = [k for k, v in net.state_dict().items() if not torch.equal(v, before[k])]
    assert changed == []


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


def _trained(
    opt_cls: type[torch.optim.Optimizer], **kwargs
) -> tuple[ContinuousNet, torch.optim.Optimizer]:
    net = small(basis="piecewise_linear", n_basis=3, n_steps=2).train()
    opt = opt_cls(net.parameters(), **kwargs)
    for _ in range(3):
        opt.zero_grad()
        loss_of(net).backward()
        opt.step()
    return net, opt


@pytest.mark.parametrize(
    ("opt_cls", "kwargs", "keys"),
    [
        (torch.optim.Adam, {"lr": 1e-2, "amsgrad": True}, ["exp_avg_sq", "max_exp_avg_sq"]),
        (torch.optim.Adagrad, {"lr": 1e-2}, ["sum"]),
        (torch.optim.RMSprop, {"lr": 1e-2}, ["square_avg"]),
    ],
)
def test_non_negative_optimizer_states_stay_non_negative_across_a_projection(opt_cls, kwargs, keys):
    net, opt = _trained(opt_cls, **kwargs)
    finer, maps = refine(net, n_basis=4)  # hat functions, 3 -> 4 nodes: not nested
    old_params = dict(net.named_parameters())
    # The L2 projection of these states undershoots below 0 here.
    assert any(
        bool((contnet.transfer(opt.state[old_params[n]][k], *maps[n]) < 0).any())
        for n in maps
        for k in keys
    )
    new_opt = carry_optimizer(opt, net, finer, maps)
    for state in new_opt.state.values():
        assert all(bool((state[k] >= 0).all()) for k in keys)
    before = {n: p.detach().clone() for n, p in finer.named_parameters()}
    new_opt.zero_grad()
    loss_of(finer).backward()
    new_opt.step()
    steps = [(p.detach() - before[n]).abs().max() for n, p in finer.named_parameters()]
    assert all(bool(torch.isfinite(s)) for s in steps)
    if opt_cls is torch.optim.Adam:
        # Adam moves an entry by at most about lr while its moments are consistent; a
        # second moment clamped to 0 beside a non-zero first moment moved one by 1033 lr.
        assert max(steps) <= 2 * kwargs["lr"]


def test_a_constant_non_negative_state_is_carried_as_that_constant():
    net, opt = _trained(torch.optim.Adam, lr=1e-2)
    for state in opt.state.values():
        state["exp_avg_sq"].fill_(0.25)
    finer, maps = refine(net, n_basis=4)
    new_opt = carry_optimizer(opt, net, finer, maps)
    for name, p in finer.named_parameters():
        if name in maps:  # a weighted mean of equal values
            value = new_opt.state[p]["exp_avg_sq"]
            torch.testing.assert_close(value, torch.full_like(value, 0.25), rtol=1e-14, atol=0)


@pytest.mark.parametrize("basis", ["legendre", "chebyshev", "fourier"])
def test_a_non_negative_state_is_copied_where_the_refinement_nests(basis):
    # Doubling a polynomial or Fourier basis copies every coefficient and adds zeros
    # (the new functions are orthogonal to the old weight function); rounding noise of
    # 1e-17 in the transfer matrix made the weighted mean give each new coefficient
    # an old second moment in full (a copy of degree 0's), beside a first moment of 0.
    torch.manual_seed(0)
    net = small(basis=basis, n_basis=3, n_steps=2).train()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(2):
        opt.zero_grad()
        loss_of(net).backward()
        opt.step()
    for state in opt.state.values():
        state["exp_avg_sq"].add_(1.0)  # well away from 0 in every coefficient
    finer, maps = refine(net)
    new_opt = carry_optimizer(opt, net, finer, maps)
    old_params, new_params = dict(net.named_parameters()), dict(finer.named_parameters())
    for name in maps:
        for key in ["exp_avg", "exp_avg_sq"]:
            old = opt.state[old_params[name]][key]
            new = new_opt.state[new_params[name]][key]
            torch.testing.assert_close(
                new, contnet.transfer(old, *maps[name]), rtol=1e-12, atol=1e-15
            )


def test_a_factored_optimizer_state_goes_along_the_basis_index():
    # Adafactor keeps row and column means of the squared gradient, shaped like the
    # coefficient tensor with size 1 in one dimension; they were copied in the old
    # basis's size and the next step failed on the shapes.
    net = small(n_steps=2).train()
    opt = torch.optim.Adafactor(net.parameters(), lr=1e-2)
    for _ in range(2):
        opt.zero_grad()
        loss_of(net).backward()
        opt.step()
    finer, maps = refine(net)  # 2 -> 4 pieces: every value copied into both halves
    new_opt = carry_optimizer(opt, net, finer, maps)
    old_params, new_params = dict(net.named_parameters()), dict(finer.named_parameters())
    for name in maps:
        old, new = opt.state[old_params[name]], new_opt.state[new_params[name]]
        for key in ["row_var", "col_var"]:
            # Reduced over the basis index itself (a 2-D coefficient's column mean):
            # its size does not enter, it is copied.
            expected = old[key] if old[key].shape[0] == 1 else old[key].repeat_interleave(2, 0)
            assert torch.equal(new[key], expected), (name, key)
    new_opt.zero_grad()
    loss_of(finer).backward()
    new_opt.step()
    assert all(bool(torch.isfinite(p).all()) for p in finer.parameters())


def test_an_optimizer_state_of_all_parameters_at_once_is_refused_across_a_basis_change():
    net = small(n_steps=2).train()
    opt = torch.optim.LBFGS(net.parameters(), lr=0.1, max_iter=2)

    def step(model, optimizer):
        def closure():
            optimizer.zero_grad()
            loss = loss_of(model)
            loss.backward()
            return loss

        optimizer.step(closure)

    step(net, opt)
    with pytest.raises(ValueError, match=r"cannot carry the state of LBFGS"):
        carry_optimizer(opt, net, *refine(net))
    same, maps = refine(net, n_steps=4)  # the basis stays: the history fits
    assert not maps
    step(same, carry_optimizer(opt, net, same, maps))


def test_a_signed_optimizer_state_is_projected_like_the_weights():
    net, opt = _trained(torch.optim.SGD, lr=0.1, momentum=0.9)
    finer, maps = refine(net, n_basis=4)
    new_opt = carry_optimizer(opt, net, finer, maps)
    old_params, new_params = dict(net.named_parameters()), dict(finer.named_parameters())
    for name in maps:
        old = opt.state[old_params[name]]["momentum_buffer"]
        assert bool((old < 0).any())
        expected = contnet.transfer(old, *maps[name])
        assert torch.equal(new_opt.state[new_params[name]]["momentum_buffer"], expected)


def test_the_carried_optimizer_keeps_the_defaults_of_a_group_added_later():
    net = small(n_steps=1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    finer, maps = refine(net)
    new_opt = carry_optimizer(opt, net, finer, maps)
    assert new_opt.defaults == opt.defaults  # not SGD's own (lr 1e-3, no momentum)
    new_opt.add_param_group({"params": [nn.Parameter(torch.zeros(2, dtype=F64))]})
    added = new_opt.param_groups[-1]
    assert (added["lr"], added["momentum"], added["weight_decay"]) == (0.1, 0.9, 5e-4)


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


def test_frozen_coefficients_stay_frozen_through_refinement_training():
    net = small(n_steps=1).train()
    for p in net.blocks.parameters():
        p.requires_grad_(False)  # train the stem, stitches and head only
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    schedule = RefinementSchedule(epochs=[1])
    for epoch in range(3):
        net, opt = schedule.step(epoch, net, opt)
        if epoch == 1:
            frozen = {n: p.detach().clone() for n, p in net.blocks.named_parameters()}
            stem = net.stem.weight.detach().clone()
        opt.zero_grad()
        loss_of(net).backward()
        opt.step()
    assert net.blocks[0].basis.pieces == 2
    assert not any(p.requires_grad for p in net.blocks.parameters())
    assert all(torch.equal(p, frozen[n]) for n, p in net.blocks.named_parameters())
    assert not torch.equal(net.stem.weight, stem)  # the rest did train


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"basis": "wavelet"}, r"Unknown `basis` 'wavelet'"),
        ({"basis": "fourier", "n_basis": 4}, r"odd `n_basis >= 3`"),
        ({"channels": (2, 2)}, r"`channels` must be three positive integers"),
        ({"solver": "bosh3"}, r"Unknown `solver` 'bosh3'"),
        (
            {"basis": Legendre(degree=1), "n_basis": 5},
            r"`n_basis` is 5 but `basis` Legendre\(.*degree=1\) has 2 functions",
        ),
        ({"basis": PiecewiseConstant(pieces=2, t1=2.0)}, r"`basis` must live on \[0, 1\]"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ContinuousNet(**kwargs)


def test_a_basis_object_sets_n_basis():
    net = ContinuousNet(in_channels=1, channels=(2, 2, 2), n_steps=3, basis=Legendre(degree=1))
    assert net.blocks[0].basis == Legendre(degree=1) and net.n_steps == 3
    same = ContinuousNet(in_channels=1, channels=(2, 2, 2), basis=Legendre(degree=1), n_basis=2)
    assert same.blocks[0].basis.size == 2


@pytest.mark.parametrize("name", sorted(set(odecore.FIXED_METHODS) - {"heun2"}))
def test_a_solver_object_is_named_by_its_first_method_name(name):
    """``heun`` and ``heun2`` are one solver: an object reads back as ``heun``."""
    net = ContinuousNet(1, 10, (4, 4, 4), solver=odecore.FIXED_METHODS[name]())
    assert net.method == name


def _bn_eval_gap(net: ContinuousNet, x: torch.Tensor, y: torch.Tensor) -> float:
    """Held-out accuracy in train mode (batch statistics) minus in eval()."""
    state = {k: v.clone() for k, v in net.state_dict().items()}
    with torch.no_grad():
        train_mode = (net.train()(x).argmax(1) == y).float().mean()
        net.load_state_dict(state)
        evaluated = (net.eval()(x).argmax(1) == y).float().mean()
    return float(train_mode - evaluated)


def _images(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` Fashion-MNIST training images where Debian's package is installed, else
    ten classes of noisy oriented gratings made here."""
    import gzip
    from pathlib import Path

    folder = Path("/usr/share/datasets/fashion-mnist")
    g = torch.Generator().manual_seed(0)
    if (folder / "train-images-idx3-ubyte.gz").exists():
        with gzip.open(folder / "train-images-idx3-ubyte.gz") as f:
            x = torch.frombuffer(bytearray(f.read()[16:]), dtype=torch.uint8)
        with gzip.open(folder / "train-labels-idx1-ubyte.gz") as f:
            y = torch.frombuffer(bytearray(f.read()[8:]), dtype=torch.uint8).long()
        idx = torch.randperm(len(y), generator=g)[:n]
        return (x.view(-1, 1, 28, 28)[idx].float() / 255 - 0.286) / 0.353, y[idx]
    y = torch.randint(0, 10, (n,), generator=g)
    grid = torch.linspace(-1, 1, 28)
    angle = y.float()[:, None, None] * math.pi / 10
    u = grid[None, :, None] * torch.cos(angle) + grid[None, None, :] * torch.sin(angle)
    x = torch.sin(6 * u) + 0.8 * torch.randn(n, 28, 28, generator=g)
    return x[:, None], y


@pytest.mark.slow
@pytest.mark.parametrize("method", ["euler", "midpoint", "rk4"])
def test_a_trained_net_keeps_its_train_mode_accuracy_in_eval(method):
    # Train briefly, measure the statistics on the training batches (a short run's
    # running averages lag behind its weights, which is not what this tests), then
    # eval() at the training manifestation must give train mode's held-out accuracy.
    # With one set of statistics per piece, blended over the stages, RK4 lost 40-60
    # points here on Fashion-MNIST.
    x, y = _images(512 + 1000)
    (xtr, ytr), (xte, yte) = (x[:512], y[:512]), (x[512:], y[512:])
    torch.manual_seed(0)
    net = ContinuousNet(in_channels=1, channels=(8, 16, 16), n_steps=2, solver=method)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    for epoch in range(3):
        for group in opt.param_groups:
            group["lr"] = 0.1 if epoch < 2 else 0.01
        net.train()
        for i in range(0, 512, 64):
            opt.zero_grad()
            nn.functional.cross_entropy(net(xtr[i : i + 64]), ytr[i : i + 64]).backward()
            opt.step()
    contnet.recalibrate(net, [xtr[i : i + 64] for i in range(0, 512, 64)])
    assert abs(_bn_eval_gap(net, xte, yte)) <= 0.02


def test_to_resnet_carries_every_evaluations_statistics():
    net = small(solver="rk4", n_steps=2)
    stats = net.blocks[0].statistics()["0.running_mean"]
    assert not torch.equal(stats[0], stats[1])  # trained: distinct per evaluation
    units = net.to_resnet().resnet_blocks()[0].residual_units()
    exported = torch.stack([s[0].running_mean for u in units for s in u.stages])
    assert torch.equal(exported, stats)


def test_exporting_carried_statistics_warns_until_they_are_measured():
    # The units keep no carried flag: the export of a manifestation that warns in
    # eval() computed with the carried statistics without a word.
    deep = small(solver="rk4", n_steps=2).manifest(n_steps=4)
    with pytest.warns(contnet.CarriedStatisticsWarning, match=r"Exporting .*\(rk4, N_t = 4\)"):
        deep.to_resnet()
    contnet.recalibrate(deep, [torch.randn(8, 1, 12, 12, dtype=F64)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", contnet.CarriedStatisticsWarning)
        deep.to_resnet()


def test_euler_refinement_keeps_the_outputs_at_the_old_n_steps_exactly():
    net = small(n_steps=2)
    finer, _ = refine(net)
    assert finer.blocks[0].carried.tolist() == [False, True, False, True]
    back = finer.manifest(n_steps=2)
    assert not back.blocks[0].carried.any()  # the measured statistics themselves
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad():
            assert torch.equal(back(X), net(X))


@pytest.mark.parametrize("measure", ["recalibrate", "train"])
def test_measuring_another_manifestation_leaves_the_nets_statistics(measure):
    # The stitches' and head's batch norms see the outputs of the blocks, which depend
    # on (solver, N_t) like the blocks' own statistics: measuring them in another
    # manifestation must not overwrite this one's (its eval() output moved by 0.2).
    net = small(n_steps=2)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with torch.no_grad():
        expected = net(X)
    other = net.manifest(solver="rk4", n_steps=4)
    data = [torch.randn(8, 1, 12, 12, dtype=F64) * 3 - 1 for _ in range(2)]
    with torch.no_grad():
        if measure == "recalibrate":
            contnet.recalibrate(other, data)
        else:
            other.train()(data[0])
            other.eval()
    changed = [k for k, v in net.state_dict().items() if not torch.equal(v, before[k])]
    assert changed == []
    assert not torch.equal(other.head[0].running_mean, net.head[0].running_mean)
    assert other.head[0].weight is net.head[0].weight  # the weights stay shared
    with torch.no_grad():
        assert torch.equal(net(X), expected)


@pytest.mark.parametrize("n_steps", [2, 4])
def test_a_manifestation_is_in_the_nets_mode_throughout(n_steps):
    net = small(n_steps=2).eval()
    assert not any(m.training for m in net.manifest(n_steps=n_steps).modules())


@pytest.mark.parametrize("other_mode", [True, False])
def test_a_manifestations_mode_is_not_the_nets(other_mode):
    # The residual modules are shared with a manifestation (the same weights): its
    # train() or eval() must not switch how this net's blocks normalise.
    net = small(solver="rk4", n_steps=2).train(not other_mode)
    twin = copy.deepcopy(net)
    net.manifest(n_steps=4).train(other_mode)
    with torch.no_grad():
        assert torch.equal(net(X), twin(X))
    for (k, v), w in zip(net.state_dict().items(), twin.state_dict().values()):
        assert torch.equal(v, w), k


def test_the_carried_flag_is_saved_with_the_model():
    net = small(solver="rk4", n_steps=2)
    fine = net.manifest(n_steps=4)
    state = fine.state_dict()
    assert state["blocks.0.carried"].all() and not net.state_dict()["blocks.0.carried"].any()
    other = ContinuousNet(in_channels=1, num_classes=3, channels=(2, 3, 4), solver="rk4",
                          n_steps=4, n_basis=2, epsilon=2.0).double()  # fmt: skip
    other.load_state_dict(state)
    with pytest.warns(contnet.CarriedStatisticsWarning, match="carried over"):
        other.eval()(X)


def test_a_failed_training_pass_leaves_the_statistics_marked_carried():
    block = small(solver="rk4", n_steps=2).manifest(n_steps=4).ode_blocks()[0]
    assert block.carried.all()
    with pytest.raises(RuntimeError):
        block.train()(torch.randn(3, 5, 6, 6, dtype=F64))  # R takes 2 channels
    assert block.carried.all()  # nothing measured: eval() still warns
    block(torch.randn(3, 2, 6, 6, dtype=F64))
    assert not block.carried.any()


def test_recalibrate_measures_the_plain_average_and_keeps_the_rest():
    net = small(solver="midpoint", n_steps=2)
    params = {k: p.detach().clone() for k, p in net.named_parameters()}
    momenta = [m.momentum for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    batches = [torch.randn(8, 1, 12, 12, dtype=F64) * (1 + k) for k in range(3)]
    seen: list[torch.Tensor] = []
    net.head[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    out = contnet.recalibrate(net, batches)
    assert out is net and not net.training
    # The head's batch norm: the mean over the batches of each batch's mean.
    expected = torch.stack([s.mean((0, 2, 3)) for s in seen]).mean(0)
    torch.testing.assert_close(net.head[0].running_mean, expected, rtol=1e-12, atol=1e-12)
    assert net.blocks[0].statistics()["0.num_batches_tracked"].tolist() == [3, 3, 3, 3]
    assert all(torch.equal(p, params[k]) for k, p in net.named_parameters())
    assert [m.momentum for m in net.modules() if isinstance(m, nn.BatchNorm2d)] == momenta


@pytest.mark.parametrize(
    ("batches", "error", "match"),
    [
        ([], ValueError, r"`batches` gave no batch"),
        (iter([]), ValueError, r"`batches` gave no batch"),
        ([[1, 2]], TypeError, r"`batches`: batch 0 is a list"),
    ],
)
def test_recalibrate_bad_batches(batches, error, match):
    net = small(solver="rk4", n_steps=2)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.raises(error, match=match):
        contnet.recalibrate(net, batches)
    if error is ValueError:  # refused before anything was reset
        assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())


NAN = torch.full((3, 1, 12, 12), math.nan, dtype=F64)


@pytest.mark.parametrize(
    ("batches", "error", "match"),
    [
        ([[1, 2]], TypeError, r"`batches`: batch 0 is a list"),
        ([X.to(torch.uint8)], TypeError, r"`batches`: batch 0 has dtype torch.uint8; the net"),
        ([torch.randn(3, 2, 12, 12, dtype=F64)], RuntimeError, r"channels"),
        ([NAN], ValueError, r"`batches`: batch 0 holds NaN or infinite values"),
        (iter([X, X / 0]), ValueError, r"`batches`: batch 1 holds NaN or infinite values"),
        ([(X, None), "x"], TypeError, r"`batches`: batch 1 is a str"),
    ],
    ids=["not-a-tensor", "uint8", "channels", "nan", "inf-later", "bad-later"],
)
def test_a_refused_recalibration_leaves_every_statistic_as_it_was(batches, error, match):
    net = small(solver="rk4", n_steps=2)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.raises(error, match=match):
        contnet.recalibrate(net, batches)
    after = net.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items()), "statistics changed"
    assert not net.training and all(not m.training for m in net.modules())


def _old_format(state: dict[str, torch.Tensor], pieces: int) -> dict[str, torch.Tensor]:
    """``state`` as contnet saved it before per-evaluation statistics: one set per piece
    of the basis in each block's ContinuousModule (``continuous.buffer__<name>``, and one
    batch count ``continuous.shared__<name>``), no ``carried`` flags, no epsilon."""
    old = {}
    for key, value in state.items():
        block, _, name = key.partition(".statistics__")
        if not name:
            if not key.endswith((".carried", "._extra_state")):
                old[key] = value
        elif name.endswith("num_batches_tracked"):
            old[f"{block}.continuous.shared__{name}"] = value[0]
        else:
            old[f"{block}.continuous.buffer__{name}"] = value[:pieces]
    return old


def test_a_state_dict_from_before_per_evaluation_statistics_is_refused_in_one_line():
    net = small(solver="rk4", n_steps=2)
    old = _old_format(small(solver="rk4", n_steps=2, n_basis=2).state_dict(), pieces=2)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(old)
    message = str(info.value)
    assert len(message.splitlines()) == 1 and len(message) < 500, message
    assert "format from before per-evaluation batch-norm statistics in blocks.0, blocks.1, " in (
        message
    )
    assert "strict=False" in message and "contnet.recalibrate(" in message
    assert all(torch.equal(net.state_dict()[k], v) for k, v in before.items())  # nothing loaded


def test_a_state_dict_from_before_per_evaluation_statistics_loads_its_weights_with_a_warning():
    source = small(solver="rk4", n_steps=2)
    net = ContinuousNet(in_channels=1, num_classes=3, channels=(2, 3, 4), solver="rk4",
                        n_steps=2).double()  # fmt: skip
    fresh = net.blocks[0].statistics()["0.running_var"].clone()
    with pytest.warns(UserWarning, match=r"Loaded the weights only: .*contnet.recalibrate\("):
        keys = net.load_state_dict(_old_format(source.state_dict(), pieces=2), strict=False)
    assert "blocks.0.statistics__0__running_mean" in keys.missing_keys
    assert not keys.unexpected_keys
    assert all(torch.equal(p, q) for p, q in zip(net.parameters(), source.parameters()))
    assert torch.equal(net.blocks[0].statistics()["0.running_var"], fresh)  # not loaded
    # The current format loads as before, without a word.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        net.load_state_dict(source.state_dict())


def test_a_state_dict_saved_with_another_epsilon_is_refused_before_anything_loads():
    net = small(n_steps=2)
    fine, _ = refine(net)  # N_t = 4, epsilon stays 2
    state = fine.state_dict()
    saved = json.loads(bytes(state["blocks.0._extra_state"].tolist()).decode())
    assert saved["epsilon"] == 2.0 and (saved["method"], saved["n_steps"]) == ("euler", 4)
    fresh = ContinuousNet(in_channels=1, num_classes=3, channels=(2, 3, 4), n_steps=4).double()
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(RuntimeError, match=r"epsilon = 2.0 into blocks.0, whose epsilon is 4.0"):
        fresh.load_state_dict(state)
    assert all(torch.equal(v, before[k]) for k, v in fresh.state_dict().items())
    with pytest.raises(RuntimeError, match=r"epsilon = 2.0 into 0.blocks.0, whose epsilon"):
        nn.Sequential(fresh).load_state_dict({f"0.{k}": v for k, v in state.items()})
    same = ContinuousNet(in_channels=1, num_classes=3, channels=(2, 3, 4), n_steps=4,
                         epsilon=2.0).double()  # fmt: skip
    same.load_state_dict(state)
    with torch.no_grad():
        assert torch.equal(same.eval()(X), fine.eval()(X))


def test_a_state_dict_saved_with_another_basis_of_its_size_is_refused_before_anything_loads():
    # Legendre and Fourier of 3 functions have coefficient tensors of one shape: the
    # Legendre coefficients loaded into the Fourier net silently, another function.
    def net(basis):
        return ContinuousNet(in_channels=1, num_classes=3, channels=(2, 3, 4), n_steps=3,
                             basis=basis).double()  # fmt: skip

    state = net("legendre").state_dict()
    fourier = net("fourier")
    before = {k: v.clone() for k, v in fourier.state_dict().items()}
    with pytest.raises(
        RuntimeError, match=r"basis Legendre\(.*degree=2\) into blocks.0.continuous"
    ):
        fourier.load_state_dict(state)
    assert all(torch.equal(v, before[k]) for k, v in fourier.state_dict().items())
    with pytest.raises(RuntimeError, match=r"into continuous, whose basis is Fourier"):
        fourier.blocks[0].load_state_dict(
            {k.removeprefix("blocks.0."): v for k, v in state.items() if k.startswith("blocks.0.")}
        )
    assert all(torch.equal(v, before[k]) for k, v in fourier.state_dict().items())
    net("legendre").load_state_dict(state)


def test_a_state_dict_saved_before_epsilon_was_loads_with_the_blocks_own():
    state = small(n_steps=2).state_dict()
    for key in [k for k in state if k.endswith("._extra_state")]:
        del state[key]
    for name in ("blocks.0", "blocks.1", "blocks.2"):  # nor the basis (ContinuousModule)
        state._metadata[name]["version"] = state._metadata[f"{name}.continuous"]["version"] = 1
    net = ContinuousNet(in_channels=1, num_classes=3, channels=(2, 3, 4), n_steps=2).double()
    assert not net.load_state_dict(state).missing_keys
    assert net.blocks[0].epsilon == 2.0
    wrapped = {f"0.{k}": v for k, v in state.items()}  # a plain dict: no versions
    assert not nn.Sequential(net).load_state_dict(wrapped).missing_keys


@pytest.mark.parametrize(
    ("saved", "target"),
    [(("euler", 4), ("midpoint", 2)), (("rk4_38", 2), ("rk4", 2))],
)
def test_a_state_dict_of_another_manifestation_is_refused_before_anything_loads(saved, target):
    # As many evaluations, so the statistics had the same shapes: they loaded without a
    # word, each evaluation normalised with those of another stage and depth, and the
    # block did not even flag them as carried over.
    def net(solver, n_steps):
        return small(solver=solver, n_steps=n_steps, n_basis=2, epsilon=2.0)

    state = net(*saved).state_dict()
    other = net(*target)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    where = r"\({}, N_t = {}\) into {}, manifested as \({}, N_t = {}\)"
    with pytest.raises(RuntimeError, match=where.format(*saved, "blocks.0", *target)) as info:
        other.load_state_dict(state)
    assert f"solver={saved[0]!r}, n_steps={saved[1]}" in str(info.value)
    assert "manifest(" in str(info.value) and "contnet.recalibrate(" in str(info.value)
    assert all(torch.equal(v, before[k]) for k, v in other.state_dict().items())
    with pytest.raises(RuntimeError, match=where.format(*saved, "the OdeBlock", *target)):
        other.blocks[0].load_state_dict(
            {k.removeprefix("blocks.0."): v for k, v in state.items() if k.startswith("blocks.0.")}
        )
    with pytest.raises(RuntimeError, match=where.format(*saved, "0.blocks.0", *target)):
        nn.Sequential(other).load_state_dict({f"0.{k}": v for k, v in state.items()})
    assert all(torch.equal(v, before[k]) for k, v in other.state_dict().items())
    # The way there: the manifestation saved, then contnet's own carrying over.
    source = net(*saved)
    source.load_state_dict(state)
    net(*target).load_state_dict(source.manifest(solver=target[0], n_steps=target[1]).state_dict())


def test_one_method_under_another_name_is_the_same_manifestation():
    state = small(solver="heun2", n_steps=2).state_dict()
    small(solver="heun", n_steps=2).load_state_dict(state)
    small(solver=odecore.Heun(), n_steps=2).load_state_dict(state)


def test_the_same_tableau_in_another_solver_object_is_the_same_manifestation():
    # RK4(interpolation="hermite") steps as RK4() does (a fixed step does not
    # interpolate), but manifest compared the solver objects: it replaced every
    # evaluation's measured statistics by their mean over its step and warned of
    # statistics carried over from another manifestation.
    net = small(solver="rk4", n_steps=2).eval()
    same = net.manifest(solver=odecore.RK4(interpolation="hermite"))
    assert (
        same.blocks[0].statistics()["0.running_mean"]
        is net.blocks[0].statistics()["0.running_mean"]
    )
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error")
        assert torch.equal(same(X), net(X))


def test_a_state_dict_saved_before_the_manifestation_was_loads_as_it_did():
    state = small(solver="rk4_38", n_steps=2).state_dict()
    for name in ("blocks.0", "blocks.1", "blocks.2"):  # epsilon alone, a float64 scalar
        state[f"{name}._extra_state"] = torch.tensor(2.0, dtype=F64)
        state._metadata[name]["version"] = 2
    net = small(solver="rk4", n_steps=2)
    assert not net.load_state_dict(state).missing_keys
    assert torch.equal(net.blocks[0].statistics()["0.running_mean"],
                       state["blocks.0.statistics__0__running_mean"])  # fmt: skip
    with pytest.raises(RuntimeError, match=r"epsilon = 2.0 into blocks.0, whose epsilon is 4.0"):
        small(solver="rk4", n_steps=2, epsilon=4.0).load_state_dict(state)


def test_recalibrate_takes_input_target_pairs():
    net = small(solver="rk4", n_steps=2)
    pairs = [(torch.randn(8, 1, 12, 12, dtype=F64), torch.zeros(8))]
    a = contnet.recalibrate(net, pairs).state_dict()
    b = contnet.recalibrate(small(solver="rk4", n_steps=2), [pairs[0][0]]).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_manifestation_sweep_recalibrates_copies():
    net = small(solver="rk4", n_steps=2)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    batches = [torch.randn(8, 1, 12, 12, dtype=F64)]

    def head_mean(m: ContinuousNet) -> float:
        return float(m.head[0].running_mean.sum())

    grid = manifestation_sweep(net, head_mean, solvers=["rk4"], n_steps=[2, 4], batches=batches)
    assert grid[("rk4", 2)] != pytest.approx(float(before["head.0.running_mean"].sum()))
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_steps": -3}, ValueError, r"`n_steps` must be a positive integer, got -3"),
        ({"n_steps": 0}, ValueError, r"`n_steps` must be a positive integer, got 0"),
        ({"n_steps": 2.5}, TypeError, r"`n_steps` must be a positive integer, got 2.5"),
        ({"n_steps": True}, TypeError, r"`n_steps` must be a positive integer, got True"),
        ({"n_basis": 0}, ValueError, r"`n_basis` must be a positive integer, got 0"),
        ({"n_basis": "4"}, TypeError, r"`n_basis` must be a positive integer, got '4'"),
        ({"solver": "dopri5"}, ValueError, r"Unknown `solver` 'dopri5'"),
    ],
)
def test_refine_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        refine(small(), **kwargs)


def test_refine_needs_a_continuousnet():
    with pytest.raises(TypeError, match=r"`net` must be a contnet.ContinuousNet, got Linear"):
        refine(nn.Linear(2, 2))
