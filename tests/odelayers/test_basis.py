"""Depth bases: closed forms, orthogonality, and exact projection between bases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from odelayers.basis import (
    AbstractBasis,
    Chebyshev,
    Fourier,
    Legendre,
    PiecewiseConstant,
    PiecewiseLinear,
    project,
)

F64 = torch.float64
T = torch.linspace(0.0, 1.0, 101, dtype=F64)


def test_fourier_closed_form():
    phi = Fourier(modes=3)(T)
    assert phi.shape == (101, 7)
    for k in range(1, 4):
        torch.testing.assert_close(phi[:, 2 * k - 1], torch.cos(2 * math.pi * k * T))
        torch.testing.assert_close(phi[:, 2 * k], torch.sin(2 * math.pi * k * T))
    torch.testing.assert_close(phi[:, 0], torch.ones_like(T))


def test_chebyshev_is_cos_of_arccos():
    x = 2 * T - 1
    phi = Chebyshev(degree=6)(T)
    for n in range(7):
        torch.testing.assert_close(phi[:, n], torch.cos(n * torch.arccos(x)), atol=1e-12, rtol=0)


@pytest.mark.parametrize("degree", [0, 1, 4, 9])
def test_legendre_is_orthogonal_with_norms_2_over_2n_plus_1(degree):
    # On [0, 1] with x = 2t - 1: int P_m P_n dt = delta_mn / (2n + 1).
    nodes = torch.linspace(0, 1, 20001, dtype=F64)
    phi = Legendre(degree=degree)(nodes)
    w = torch.full_like(nodes, 1 / 20000)
    w[0] = w[-1] = 0.5 / 20000  # trapezoidal rule
    gram = phi.T @ (w[:, None] * phi)
    expected = torch.diag(1 / (2 * torch.arange(degree + 1, dtype=F64) + 1))
    torch.testing.assert_close(gram, expected, atol=1e-7, rtol=0)


def test_piecewise_constant_indicators_and_jumps():
    b = PiecewiseConstant(pieces=4, t0=1.0, t1=3.0)
    assert b.jump_ts == (1.5, 2.0, 2.5)
    phi = b(torch.tensor([1.0, 1.49, 1.5, 2.99, 3.0], dtype=F64))
    assert phi.argmax(dim=1).tolist() == [0, 0, 1, 3, 3]
    torch.testing.assert_close(phi.sum(dim=1), torch.ones(5, dtype=F64))


def test_piecewise_linear_interpolates_its_coefficients():
    b = PiecewiseLinear(pieces=4)
    values = torch.tensor([0.0, 2.0, -1.0, 3.0, 1.0], dtype=F64)
    t = torch.rand(50, dtype=F64)
    expected = torch.from_numpy(np.interp(t.numpy(), [0, 0.25, 0.5, 0.75, 1.0], values.numpy()))
    torch.testing.assert_close(b(t) @ values, expected)
    assert b.kink_ts == (0.25, 0.5, 0.75)


def test_float_times_and_batched_shapes():
    assert Fourier(modes=2)(0.3).shape == (5,)
    assert Legendre(degree=3)(torch.rand(4, 6)).shape == (4, 6, 4)


REFINEMENTS = [
    (Fourier(modes=2), Fourier(modes=5)),
    (Legendre(degree=3), Legendre(degree=6)),
    (Chebyshev(degree=4), Legendre(degree=4)),  # the same polynomials, another basis
    (Legendre(degree=5), Chebyshev(degree=5)),
    (PiecewiseConstant(pieces=3), PiecewiseConstant(pieces=6)),
    (PiecewiseConstant(pieces=2), PiecewiseLinear(pieces=8)),  # not contained: see below
    (PiecewiseLinear(pieces=2), PiecewiseLinear(pieces=6)),
    (Legendre(degree=0), PiecewiseConstant(pieces=5)),
]


@pytest.mark.parametrize(("source", "target"), REFINEMENTS, ids=repr)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_projection_onto_a_larger_span_keeps_the_function(source, target, seed):
    if isinstance(source, PiecewiseConstant) and isinstance(target, PiecewiseLinear):
        return  # jumps are not in the span of hat functions (checked below)
    gen = torch.Generator().manual_seed(seed)
    coefficients = torch.randn(source.size, 2, 3, dtype=F64, generator=gen)
    moved = project(coefficients, source, target)
    assert moved.shape == (target.size, 2, 3)
    t = torch.rand(64, dtype=F64, generator=gen)
    before = torch.einsum("tn,nij->tij", source(t), coefficients)
    after = torch.einsum("tn,nij->tij", target(t), moved)
    torch.testing.assert_close(after, before, atol=1e-10, rtol=1e-10)


def test_projection_onto_a_smaller_span_is_the_least_squares_fit():
    # The residual of an L2 projection is orthogonal to every target function.
    source, target = PiecewiseConstant(pieces=2), PiecewiseLinear(pieces=8)
    c = torch.tensor([1.0, -2.0], dtype=F64)
    d = project(c, source, target)
    t = torch.linspace(0, 1, 400001, dtype=F64)
    residual = source(t) @ c - target(t) @ d
    inner = (target(t) * residual[:, None]).mean(dim=0)
    assert inner.abs().max() < 1e-5
    # A step projected onto hats overshoots next to the jump (a Gibbs-like wiggle) but
    # matches far from it.
    torch.testing.assert_close(target(torch.tensor(0.0, dtype=F64)) @ d, c[0], atol=0.05, rtol=0)


def test_projection_keeps_dtype_and_works_in_float32():
    c = torch.randn(3, 4)
    out = project(c, PiecewiseConstant(pieces=3), PiecewiseConstant(pieces=9))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, c.repeat_interleave(3, dim=0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_projection_is_row_major(dtype):
    # Each coefficient slice is handed to layers as is: it must be contiguous.
    out = project(torch.randn(3, 4, 5, dtype=dtype), Legendre(degree=2), Legendre(degree=4))
    assert out.is_contiguous()
    assert all(piece.is_contiguous() for piece in out)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Fourier(modes=0), r"`modes` must be a positive integer"),
        (lambda: Legendre(degree=-1), r"`degree` must be a non-negative integer"),
        (lambda: Chebyshev(degree=1.5), r"`degree` must be a non-negative integer"),
        (lambda: PiecewiseConstant(pieces=True), r"`pieces` must be a positive integer"),
        (lambda: PiecewiseLinear(t0=1.0, t1=1.0), r"finite `t0 < t1`"),
    ],
)
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_projection_errors():
    with pytest.raises(ValueError, match=r"same interval"):
        project(torch.ones(2), PiecewiseConstant(pieces=2), PiecewiseConstant(pieces=2, t1=2.0))
    with pytest.raises(ValueError, match=r"basis index first, of size 3"):
        project(torch.ones(2), Legendre(degree=2), Legendre(degree=3))


def test_every_basis_is_an_abstract_basis():
    for b in (Fourier(), Legendre(), Chebyshev(), PiecewiseConstant(), PiecewiseLinear()):
        assert isinstance(b, AbstractBasis)
        assert b(torch.rand(5)).shape == (5, b.size)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize(("t0", "t1"), [(0.0, 1.0), (0.3, 2.1)])
@pytest.mark.parametrize("n", [3, 7, 10, 100, 129])
def test_piecewise_constant_pieces_start_exactly_at_their_jump_times(n, t0, t1, dtype):
    # Piece k starts at its jump time, as odecore makes it a tensor (the float rounded
    # to t's dtype); the time one ulp below, odecore's left limit where a step ends on
    # the jump, is piece k - 1. A tolerance of 1e-9 took that left limit for piece k
    # in float64. (So does it k * (1 / 7) for k = 5, one ulp below 5 / 7.)
    b = PiecewiseConstant(t0, t1, pieces=n)
    starts = torch.tensor((t0, *b.jump_ts), dtype=dtype)
    assert b(starts).argmax(dim=1).tolist() == list(range(n))
    left = torch.nextafter(starts[1:], torch.full_like(starts[1:], -math.inf))
    assert b(left).argmax(dim=1).tolist() == list(range(n - 1))
    assert b(torch.tensor(t1, dtype=dtype)).argmax().item() == n - 1
    if (t0, t1, dtype) == (0.0, 1.0, F64):  # k / n is then the jump time itself
        assert b(torch.arange(n, dtype=dtype) / n).argmax(dim=1).tolist() == list(range(n))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_project_keeps_the_device_of_the_coefficients():
    # The quadrature is on the host: coefficients on a GPU met it in a matrix product
    # and the projection (contnet's refinement of a smooth basis) failed on the devices.
    c = torch.randn(3, 2, dtype=torch.float64)
    expected = project(c, Legendre(degree=2), Chebyshev(degree=4))
    out = project(c.cuda(), Legendre(degree=2), Chebyshev(degree=4))
    assert out.device == c.cuda().device
    assert torch.equal(out.cpu(), expected)
