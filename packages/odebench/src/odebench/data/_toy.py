"""Toy data sets generated in code: annuli (g(x)), reflections, spirals, pendulum trajectories."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._io import whole
from ._dataset import Dataset

_F64 = torch.float64
_GRAVITY = 9.81
"""``g / L`` of the pendulum: a 1 m pendulum on Earth."""


def _check(
    generator: torch.Generator | None,
    counts: dict[str, int],
    positive: dict[str, float] | None = None,
    non_negative: dict[str, float] | None = None,
) -> None:
    """Refuse counts that are not positive integers, other values out of their range or not
    finite, then a generator off the CPU."""
    for what, n in counts.items():
        if not whole(1)(n):
            raise ValueError(f"`{what}` must be a positive integer, got {n!r}.")
    for what, value in (positive or {}).items():
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"`{what}` must be positive and finite, got {value}.")
    for what, value in (non_negative or {}).items():
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"`{what}` must be non-negative and finite, got {value}.")
    if generator is not None and generator.device.type != "cpu":
        raise ValueError(
            f"`generator` must be a CPU generator, got one on {generator.device}: the toy "
            "sets are generated on the CPU. Move the result with Dataset.to(device)."
        )


def annuli(n: int, *, dim: int = 1, generator: torch.Generator | None = None) -> Dataset:
    """Points in a ball and a surrounding shell, labelled by Dupont et al.'s g(x).

    ``n // 3`` points uniform in the ball ``|x| <= 0.5`` (label -1), the others uniform in
    the shell ``1 <= |x| <= 1.5`` (label +1), shuffled: the papers' radii.

    Args:
        n: the number of points.
        dim: the dimension ``d`` of the points (the paper uses 1 and 2).
        generator: the source of randomness (a CPU generator); the global one when
            ``None``.

    Returns:
        A regression :class:`Dataset` named ``"annuli-{dim}d"``: ``inputs`` ``(n, dim)``
        float32, ``targets`` ``(n, 1)`` float32 of -1 (ball) and +1 (shell),
        ``num_classes`` ``None``.

    Raises:
        ValueError: for a non-positive ``n`` or ``dim``, or a generator that is not on
            the CPU.

    Example:
        >>> import torch
        >>> from odebench.data import annuli
        >>> ds = annuli(300, dim=2, generator=torch.Generator().manual_seed(0))
        >>> ds.name, ds.inputs.shape, int((ds.targets == -1).sum())
        ('annuli-2d', torch.Size([300, 2]), 100)
    """
    _check(generator, {"n": n, "dim": dim})
    r1, r2, r3 = 0.5, 1.0, 1.5
    n_inner = n // 3
    u = torch.rand(n, generator=generator, dtype=_F64)
    # Uniform in volume: the radius's d-th power is uniform on [0, r1^d] / [r2^d, r3^d].
    inner = r1 * u[:n_inner] ** (1.0 / dim)
    outer = (r2**dim + u[n_inner:] * (r3**dim - r2**dim)) ** (1.0 / dim)
    radius = torch.cat([inner, outer])
    z = torch.randn(n, dim, generator=generator, dtype=_F64)  # directions: uniform on the sphere
    x = z / z.norm(dim=1, keepdim=True).clamp_min(1e-300) * radius[:, None]
    y = torch.cat([-torch.ones(n_inner, dtype=_F64), torch.ones(n - n_inner, dtype=_F64)])
    perm = torch.randperm(n, generator=generator)
    return Dataset(
        inputs=x[perm].to(torch.float32),
        targets=y[perm, None].to(torch.float32),
        name=f"annuli-{dim}d",
        num_classes=None,
    )


def reflection(n: int, *, dim: int = 1, generator: torch.Generator | None = None) -> Dataset:
    """The reflection ``x -> -x`` on points uniform in ``[-1, 1]^dim``.

    Args:
        n: the number of points.
        dim: their dimension.
        generator: the source of randomness (a CPU generator); the global one when
            ``None``.

    Returns:
        A regression :class:`Dataset` named ``"reflection-{dim}d"``: ``inputs``
        ``(n, dim)`` float32 uniform in ``[-1, 1]``, ``targets`` ``-inputs``,
        ``num_classes`` ``None``.

    Raises:
        ValueError: for a non-positive ``n`` or ``dim``, or a generator that is not
            on the CPU.

    Example:
        >>> import torch
        >>> from odebench.data import reflection
        >>> ds = reflection(5, generator=torch.Generator().manual_seed(0))
        >>> bool((ds.targets == -ds.inputs).all()), ds.inputs.shape
        (True, torch.Size([5, 1]))
    """
    _check(generator, {"n": n, "dim": dim})
    x = 2.0 * torch.rand(n, dim, generator=generator, dtype=torch.float32) - 1.0
    return Dataset(inputs=x, targets=-x, name=f"reflection-{dim}d", num_classes=None)


def nested_spirals(
    n: int, *, turns: float = 2.0, generator: torch.Generator | None = None
) -> Dataset:
    """Two interleaved spirals in the plane, one per class, ``n // 2`` and ``n - n // 2`` points.

    A point of class ``c`` at ``s`` uniform in ``[0, 1]`` sits at radius ``0.1 + 0.9 s``
    and angle ``2 pi turns s + pi c``.

    Args:
        n: the number of points.
        turns: how many times each arm winds around the origin; positive and finite.
        generator: the source of randomness (a CPU generator); the global one when
            ``None``.

    Returns:
        A classification :class:`Dataset` named ``"nested-spirals"``: ``inputs``
        ``(n, 2)`` float32, ``targets`` ``(n,)`` int64 in {0, 1}, ``num_classes`` 2.

    Raises:
        ValueError: for a non-positive ``n`` or ``turns``, or a generator that is not on
            the CPU.

    Example:
        >>> import torch
        >>> from odebench.data import nested_spirals
        >>> ds = nested_spirals(101, generator=torch.Generator().manual_seed(0))
        >>> ds.inputs.shape, torch.bincount(ds.targets).tolist()
        (torch.Size([101, 2]), [50, 51])
    """
    _check(generator, {"n": n}, {"turns": turns})
    labels = (torch.arange(n) >= n // 2).to(torch.int64)
    s = torch.rand(n, generator=generator, dtype=_F64)
    radius = 0.1 + 0.9 * s
    angle = 2.0 * math.pi * turns * s + math.pi * labels.to(_F64)
    x = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    perm = torch.randperm(n, generator=generator)
    return Dataset(
        inputs=x[perm].to(torch.float32),
        targets=labels[perm],
        name="nested-spirals",
        num_classes=2,
    )


def _pendulum_rk4(
    theta: Tensor, omega: Tensor, *, dt: float, steps: int, k: float
) -> tuple[Tensor, Tensor]:
    """States ``(N, steps + 1)`` every ``dt`` of ``theta'' = -k sin(theta)``, by RK4 in
    sub-steps ``h <= 0.02 / sqrt(k)`` (0.02 rad of the small-amplitude phase each)."""
    sub = max(1, math.ceil(dt * math.sqrt(k) / 0.02))
    h = dt / sub
    thetas, omegas = [theta], [omega]
    for _ in range(steps):
        for _ in range(sub):
            a1, b1 = omega, -k * torch.sin(theta)
            a2, b2 = omega + 0.5 * h * b1, -k * torch.sin(theta + 0.5 * h * a1)
            a3, b3 = omega + 0.5 * h * b2, -k * torch.sin(theta + 0.5 * h * a2)
            a4, b4 = omega + h * b3, -k * torch.sin(theta + h * a3)
            theta = theta + (h / 6.0) * (a1 + 2.0 * a2 + 2.0 * a3 + a4)
            omega = omega + (h / 6.0) * (b1 + 2.0 * b2 + 2.0 * b3 + b4)
        thetas.append(theta)
        omegas.append(omega)
    return torch.stack(thetas, dim=1), torch.stack(omegas, dim=1)


def pendulum(
    n_trajectories: int,
    *,
    dt: float = 0.1,
    steps: int = 100,
    noise: float = 0.0,
    theta_max: float = 0.75 * math.pi,
    omega_max: float = 1.0,
    dtype: torch.dtype = torch.float32,
    generator: torch.Generator | None = None,
) -> Dataset:
    """Trajectories of the nonlinear pendulum ``theta'' = -9.81 sin(theta)``, every ``dt``.

    Each starts uniform in ``[-theta_max, theta_max] x [-omega_max, omega_max]``; the
    data page says how it is integrated and why the defaults.

    Args:
        n_trajectories: the number of trajectories ``N``.
        dt: the time between samples; positive.
        steps: the number of steps; each trajectory has ``T = steps + 1`` samples.
        noise: standard deviation of the noise on the inputs; non-negative.
        theta_max: the largest initial angle (radians); non-negative.
        omega_max: the largest initial angular velocity (radians per unit time);
            non-negative.
        dtype: the floating dtype of the returned tensors.
        generator: the source of randomness (a CPU generator); the global one when
            ``None``.

    Returns:
        A regression :class:`Dataset` named ``f"pendulum-dt{dt:g}"``: ``inputs`` (the
        noisy states) and ``targets`` (the clean ones), both ``(N, T, 2)`` with
        ``[..., 0]`` the angle and ``[..., 1]`` the angular velocity;
        ``num_classes`` ``None``.

    Raises:
        ValueError: for a non-positive count, ``dt`` or ``steps``, a negative ``noise``,
            ``theta_max`` or ``omega_max``, a non-finite value, a non-floating ``dtype``,
            or a generator that is not on the CPU.

    Example:
        >>> import torch
        >>> from odebench.data import pendulum
        >>> ds = pendulum(4, dt=0.1, steps=20, noise=0.01,
        ...               generator=torch.Generator().manual_seed(0))
        >>> ds.name, ds.inputs.shape, ds.targets.dtype
        ('pendulum-dt0.1', torch.Size([4, 21, 2]), torch.float32)
    """
    counts = {"n_trajectories": n_trajectories, "steps": steps}
    limits = {"noise": noise, "theta_max": theta_max, "omega_max": omega_max}
    _check(generator, counts, {"dt": dt}, limits)
    if not dtype.is_floating_point:
        raise ValueError(f"`dtype` must be a floating dtype, got {dtype}.")
    n = n_trajectories
    theta0 = theta_max * (2.0 * torch.rand(n, generator=generator, dtype=_F64) - 1.0)
    omega0 = omega_max * (2.0 * torch.rand(n, generator=generator, dtype=_F64) - 1.0)
    theta, omega = _pendulum_rk4(theta0, omega0, dt=dt, steps=steps, k=_GRAVITY)
    clean = torch.stack([theta, omega], dim=-1)
    noisy = clean
    if noise > 0:
        noisy = clean + noise * torch.randn(clean.shape, generator=generator, dtype=_F64)
    return Dataset(
        inputs=noisy.to(dtype, copy=True),  # never the targets' storage, even in float64
        targets=clean.to(dtype),
        name=f"pendulum-dt{dt:g}",
        num_classes=None,
    )
