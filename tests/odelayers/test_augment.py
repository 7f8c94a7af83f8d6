"""Augmentation: zero and input-layer augmentation, higher-order dynamics, readouts."""

from __future__ import annotations

import math

import odecore
import pytest
import torch
from odelayers import (
    DepthSequential,
    DropAugmented,
    HigherOrder,
    InputLayerAugmentation,
    NeuralODE,
    ProjectAugmented,
    ZeroAugmentation,
)
from torch import nn

F64 = torch.float64
TIGHT = odecore.PIDController(rtol=1e-10, atol=1e-10)


def test_zero_augmentation_vectors_and_images():
    x = torch.randn(3, 2)
    out = ZeroAugmentation(3)(x)
    assert out.shape == (3, 5)
    torch.testing.assert_close(out[:, :2], x)
    assert bool((out[:, 2:] == 0).all())
    img = ZeroAugmentation(4)(torch.randn(2, 1, 5, 5))
    assert img.shape == (2, 5, 5, 5) and bool((img[:, 1:] == 0).all())
    with pytest.raises(ValueError, match=r"must be batched"):
        ZeroAugmentation(1)(torch.randn(3))


def test_input_layer_augmentation_is_linear_by_default():
    layer = InputLayerAugmentation(2, 5)
    assert isinstance(layer.layer, nn.Linear)
    img = InputLayerAugmentation(1, 8, image=True)
    assert img(torch.randn(2, 1, 6, 6)).shape == (2, 8, 6, 6)
    with pytest.raises(ValueError, match=r"`out_features` must be an integer >= 2"):
        InputLayerAugmentation(2, 1)
    with pytest.raises(ValueError, match=r"`kernel_size` must be odd"):
        InputLayerAugmentation(1, 2, image=True, kernel_size=2)


def test_input_layer_augmentation_refuses_a_layer_of_another_size():
    # out_features was not checked against a custom layer: a field that takes any size
    # (z -> -z) ran on 7 features where 5 were asked for.
    augment = InputLayerAugmentation(2, 5, layer=nn.Linear(2, 7))
    with pytest.raises(ValueError, match=r"promises 5 features .*gave shape \(3, 7\)"):
        augment(torch.randn(3, 2))
    assert InputLayerAugmentation(2, 7, layer=nn.Linear(2, 7))(torch.randn(3, 2)).shape == (3, 7)


def test_input_layer_augmentation_refuses_the_options_it_would_ignore():
    # kernel_size without image=True, and image or kernel_size beside a custom layer,
    # were dropped without a word; in_features went unchecked against a custom layer.
    with pytest.raises(ValueError, match=r"`kernel_size` 5 is the kernel .* `image=True`"):
        InputLayerAugmentation(1, 4, kernel_size=5)
    for options in ({"image": True}, {"kernel_size": 3}):
        with pytest.raises(ValueError, match=r"a given `layer` is used as it is"):
            InputLayerAugmentation(1, 4, layer=nn.Conv2d(1, 4, 3, padding=1), **options)
    augment = InputLayerAugmentation(2, 4, layer=nn.LazyLinear(4))
    with pytest.raises(ValueError, match=r"takes 2 features \(dim 1\), got shape \(3, 3\)"):
        augment(torch.randn(3, 3))
    img = InputLayerAugmentation(1, 4, image=True, kernel_size=5)
    assert img.layer.kernel_size == (5, 5) and img(torch.randn(2, 1, 6, 6)).shape == (2, 4, 6, 6)


def test_readouts():
    x = torch.arange(10.0).reshape(2, 5)
    torch.testing.assert_close(DropAugmented(2)(x), x[:, :2])
    assert ProjectAugmented(5, 3)(x).shape == (2, 3)
    assert ProjectAugmented(4, 2, image=True)(torch.randn(1, 4, 3, 3)).shape == (1, 2, 3, 3)
    with pytest.raises(ValueError, match=r"Cannot keep 6 features"):
        DropAugmented(6)(x)
    with pytest.raises(ValueError, match=r"`x` must be batched, .*got \(5,\)"):
        DropAugmented(2)(torch.arange(5.0))  # was an IndexError from x.shape[1]


def test_second_order_harmonic_oscillator_against_closed_form():
    # q'' = -w^2 q with q(0) = q0, q'(0) = v0: q = q0 cos wt + v0/w sin wt.
    w = 1.7
    field = HigherOrder(lambda t, z: -(w**2) * z[:, :2], features=2)
    q0 = torch.tensor([[1.0, -0.5]], dtype=F64)
    v0 = torch.tensor([[0.3, 0.8]], dtype=F64)
    ts = [0.0, 0.5, 1.0, 2.0]
    traj = NeuralODE(field, controller=TIGHT, t1=2.0, ts=ts)(torch.cat([q0, v0], dim=1))
    for i, t in enumerate(ts):
        q = q0 * math.cos(w * t) + v0 / w * math.sin(w * t)
        v = -q0 * w * math.sin(w * t) + v0 * math.cos(w * t)
        torch.testing.assert_close(traj[i], torch.cat([q, v], dim=1), rtol=1e-8, atol=1e-9)


def test_third_order_with_constant_jerk_is_a_cubic():
    # q''' = 6: q = q0 + v0 t + a0 t^2 / 2 + t^3.
    field = HigherOrder(lambda t, z: torch.full_like(z[:, :1], 6.0), features=1, order=3)
    assert field.state_features == 3
    z0 = torch.tensor([[1.0, -2.0, 0.5]], dtype=F64)
    out = NeuralODE(field, controller=TIGHT, t1=1.5)(z0)
    t = 1.5
    q = 1.0 - 2.0 * t + 0.5 * t**2 / 2 + t**3
    v = -2.0 + 0.5 * t + 3 * t**2
    a = 0.5 + 6 * t
    torch.testing.assert_close(out, torch.tensor([[q, v, a]], dtype=F64))


def test_selective_second_order():
    # Positions (q1, q2), only q1 of second order: q1'' = -q1, q2' = -q2.
    field = HigherOrder(lambda t, z: torch.stack([-z[:, 0], -z[:, 1]], dim=1), features=2,
                        selected=1)  # fmt: skip
    assert field.state_features == 3  # q1, q2, q1'
    z0 = torch.tensor([[1.0, 2.0, 0.0]], dtype=F64)
    out = NeuralODE(field, controller=TIGHT)(z0)
    expected = torch.tensor([[math.cos(1.0), 2 * math.exp(-1.0), -math.sin(1.0)]], dtype=F64)
    torch.testing.assert_close(out, expected)


def test_higher_order_on_images_and_gradcheck():
    conv = nn.Conv2d(4, 2, 3, padding=1).double()
    field = HigherOrder(DepthSequential(conv), features=2)
    node = NeuralODE(field, controller=TIGHT)
    z0 = torch.randn(1, 4, 3, 3, dtype=F64, requires_grad=True)
    assert node(z0).shape == (1, 4, 3, 3)
    assert torch.autograd.gradcheck(lambda z, w: node(z), (z0, conv.weight), atol=1e-6)


@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()], ids=repr)
def test_higher_order_of_a_plain_function_differentiates_what_it_closes_over(gradient):
    # HigherOrder is a module without parameters: the layer fixed the method's `params`
    # to none, and the stiffness `k` the wrapped function closes over got no gradient.
    def grads(method):
        k = torch.tensor([1.5, 0.7], dtype=F64, requires_grad=True)
        spring = HigherOrder(lambda t, z: -k * torch.sin(z[:, :2]), features=2)
        z0 = torch.tensor([[1.0, -0.5, 0.0, 0.3]], dtype=F64, requires_grad=True)
        NeuralODE(spring, controller=TIGHT, gradient=method)(z0).pow(2).sum().backward()
        return k.grad, z0.grad

    ours, reference = grads(gradient), grads(odecore.Autograd())
    assert ours[0] is not None
    for g, expected in zip(ours, reference):
        torch.testing.assert_close(g, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"features": 0}, r"`features` must be an integer >= 1"),
        ({"features": 2, "order": 1}, r"`order` must be an integer >= 2"),
        ({"features": 2, "selected": 3}, r"`selected` must be in 1..2"),
    ],
)
def test_higher_order_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HigherOrder(lambda t, z: z, **kwargs)


def test_higher_order_shape_errors():
    field = HigherOrder(lambda t, z: z, features=2)
    with pytest.raises(ValueError, match=r"needs a state of 4 on dim 1, got 3"):
        field(torch.tensor(0.0), torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"must return 2 features, got \(1, 4\)"):
        field(torch.tensor(0.0), torch.zeros(1, 4))


SIMPLE_LAYERS = [
    ("zero_augmentation", lambda: ZeroAugmentation(2), (3, 2)),
    ("zero_augmentation_images", lambda: ZeroAugmentation(1), (1, 2, 3, 3)),
    ("input_layer", lambda: InputLayerAugmentation(2, 4), (3, 2)),
    ("input_layer_images", lambda: InputLayerAugmentation(1, 2, image=True), (1, 1, 3, 3)),
    ("drop", lambda: DropAugmented(1), (3, 2)),
    ("project", lambda: ProjectAugmented(2, 3), (3, 2)),
    ("project_images", lambda: ProjectAugmented(2, 1, image=True), (1, 2, 3, 3)),
]


@pytest.mark.parametrize(
    ("name", "make", "shape"), SIMPLE_LAYERS, ids=[s[0] for s in SIMPLE_LAYERS]
)
def test_gradcheck_augmentation_layers(name, make, shape):
    torch.manual_seed(0)
    layer = make().double()
    x = torch.randn(*shape, dtype=F64, requires_grad=True)
    params = [p for p in layer.parameters()]
    assert torch.autograd.gradcheck(lambda x, *ps: layer(x), (x, *params))


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        # nn.Linear would map the width (8) of these images, not their 8 channels.
        (lambda: ProjectAugmented(8, 4), (2, 8, 8, 8)),
        (lambda: ProjectAugmented(5, 2), (2, 5, 5)),
        (lambda: InputLayerAugmentation(5, 5), (2, 5, 5)),
        (lambda: InputLayerAugmentation(5, 6), (2, 5, 4, 6)),
        # nn.Conv2d would read an unbatched image: the batch of 3 as 3 channels.
        (lambda: ProjectAugmented(3, 2, image=True), (3, 4, 4)),
        (lambda: InputLayerAugmentation(3, 4, image=True), (3, 3, 4)),
    ],
)
def test_default_layers_refuse_states_they_would_map_along_another_dim(make, shape):
    with pytest.raises(ValueError, match=r"maps dim 1 of a state \(batch, .*got shape"):
        make()(torch.randn(*shape))


def test_readout_maps_dim_1():
    # The oracle: nn.Linear applied to the features of dim 1, one sample at a time.
    x = torch.randn(3, 5)
    readout = ProjectAugmented(5, 2)
    expected = torch.stack([readout.layer.weight @ row + readout.layer.bias for row in x])
    torch.testing.assert_close(readout(x), expected)
