"""The paper's analysis tools: manifestation sweeps and convergence studies."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ._block import Scheme
from ._net import ContinuousNet


def manifestation_sweep(
    net: ContinuousNet,
    metric: Callable[[ContinuousNet], float],
    *,
    schemes: Sequence[Scheme] = ("euler", "midpoint", "rk4", "rk4_38"),
    n_steps: Sequence[int] = (1, 2, 4, 8, 16),
) -> dict[tuple[str, int], float]:
    """``metric`` of every manifestation ``net.manifest(scheme=s, n_steps=n)`` (Fig. 9).

    Returns:
        ``{(scheme name, N_t): metric}``.

    Example:
        >>> import torch
        >>> from contnet import ContinuousNet, manifestation_sweep
        >>> net = ContinuousNet(in_channels=1, channels=(2, 2, 2)).eval()
        >>> x = torch.randn(2, 1, 8, 8)
        >>> grid = manifestation_sweep(net, lambda m: float(m(x).detach().sum()),
        ...                            schemes=["euler", "rk4"], n_steps=[1, 2])
        >>> sorted(grid)
        [('euler', 1), ('euler', 2), ('rk4', 1), ('rk4', 2)]
    """
    out: dict[tuple[str, int], float] = {}
    for scheme in schemes:
        for n in n_steps:
            model = net.manifest(scheme=scheme, n_steps=n)
            out[(model.scheme, n)] = float(metric(model))
    return out


@dataclass(frozen=True)
class Convergence:
    """A convergence study: errors against the time step and the fitted order.

    Attributes:
        n_steps: the step counts.
        errors: the error of each against the reference.
        order: the least-squares slope of log(error) against log(1 / n_steps).
        reference: ``(scheme, N_t)`` of the reference manifestation.
    """

    n_steps: tuple[int, ...]
    errors: tuple[float, ...]
    order: float
    reference: tuple[str, int]


def convergence_study(
    net: ContinuousNet,
    x: Tensor,
    *,
    scheme: Scheme = "rk4",
    n_steps: Sequence[int] = (1, 2, 4, 8),
    reference_steps: int = 256,
) -> Convergence:
    """Global error of ``net``'s output against the time step, and the fitted order (Sec. 3).

    The error of each manifestation ``(scheme, N_t)`` is the largest absolute
    difference of its output on ``x`` from that of ``(scheme, reference_steps)``.

    Example:
        >>> import torch
        >>> from contnet import ContinuousNet, convergence_study
        >>> from torch import nn
        >>> net = ContinuousNet(in_channels=1, channels=(2, 2, 2), basis="legendre",
        ...                     n_basis=2, activation=nn.Softplus).double().eval()
        >>> study = convergence_study(net, torch.randn(2, 1, 8, 8, dtype=torch.float64),
        ...                           scheme="rk4", n_steps=[2, 4, 8])
        >>> 3.5 < study.order < 4.5
        True
    """
    with torch.no_grad():
        reference = net.manifest(scheme=scheme, n_steps=reference_steps)(x)
        errors = []
        name = net.manifest(scheme=scheme).scheme
        for n in n_steps:
            out = net.manifest(scheme=scheme, n_steps=n)(x)
            errors.append(float((out - reference).abs().max()))
    logs = [(math.log(1.0 / n), math.log(e)) for n, e in zip(n_steps, errors) if e > 0]
    if len(logs) < 2:
        order = math.nan
    else:
        mx = sum(a for a, _ in logs) / len(logs)
        my = sum(b for _, b in logs) / len(logs)
        order = sum((a - mx) * (b - my) for a, b in logs) / sum((a - mx) ** 2 for a, _ in logs)
    return Convergence(tuple(n_steps), tuple(errors), order, (name, reference_steps))
