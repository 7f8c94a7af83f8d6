"""The paper's analysis tools: manifestation sweeps and convergence studies."""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ._block import CarriedStatisticsWarning, Solver
from ._net import ContinuousNet
from ._recalibrate import recalibrate


def manifestation_sweep(
    net: ContinuousNet,
    metric: Callable[[ContinuousNet], float],
    *,
    solvers: Sequence[Solver] = ("euler", "midpoint", "rk4", "rk4_38"),
    n_steps: Sequence[int] = (1, 2, 4, 8, 16),
    batches: Sequence[Tensor] | None = None,
) -> dict[tuple[str, int], float]:
    """``metric`` of every manifestation ``net.manifest(solver=s, n_steps=n)`` (Fig. 9).

    Batch norm: a manifestation other than ``net``'s own has running statistics
    carried over from it (:func:`carry_statistics`); with ``batches`` each is measured
    on them first (:func:`recalibrate`, on a copy: ``net`` is left unchanged).
    Without ``batches`` the carried statistics are used, without the warning that
    evaluating them gives elsewhere. Each manifestation runs in ``net``'s mode; in
    train mode its batch norms normalise with batch statistics and update running
    ones, which ``net``'s own manifestation shares with ``net``. Every buffer of
    ``net`` is put back as it was after the sweep, so ``net`` leaves it unchanged in
    either mode (a copy of its buffers is kept meanwhile, not of its weights).

    Args:
        net: the network whose manifestations to evaluate.
        metric: the number to record for one manifestation.
        solvers: the fixed-step solvers, by method name or as odecore solver objects.
        n_steps: the step counts ``N_t``.
        batches: inputs to recalibrate every manifestation on (a few training batches),
            or ``None``.

    Returns:
        ``{(method name, N_t): metric}``.

    Example:
        >>> import torch
        >>> from contnet import ContinuousNet, manifestation_sweep
        >>> net = ContinuousNet(in_channels=1, channels=(2, 2, 2)).eval()
        >>> x = torch.randn(2, 1, 8, 8)
        >>> grid = manifestation_sweep(net, lambda m: float(m(x).detach().sum()),
        ...                            solvers=["euler", "rk4"], n_steps=[1, 2])
        >>> sorted(grid)
        [('euler', 1), ('euler', 2), ('rk4', 1), ('rk4', 2)]
    """
    out: dict[tuple[str, int], float] = {}
    with _buffers_kept(net):
        for solver in solvers:
            for n in n_steps:
                model = net.manifest(solver=solver, n_steps=n)
                if batches is not None:
                    model = recalibrate(copy.deepcopy(model), batches)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", CarriedStatisticsWarning)
                    out[(model.method, n)] = float(metric(model))
    return out


@contextlib.contextmanager
def _buffers_kept(net: nn.Module) -> Iterator[None]:
    """Every buffer of ``net`` (running statistics, carried flags) back as it was on exit."""
    saved = [(b, b.detach().clone()) for b in net.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)


@dataclass(frozen=True)
class Convergence:
    """A convergence study: errors against the time step and the fitted order.

    Attributes:
        n_steps: the step counts.
        errors: the error of each against the reference.
        order: the least-squares slope of log(error) against log(1 / n_steps).
        reference: ``(method name, N_t)`` of the reference manifestation.
    """

    n_steps: tuple[int, ...]
    errors: tuple[float, ...]
    order: float
    reference: tuple[str, int]


def convergence_study(
    net: ContinuousNet,
    x: Tensor,
    *,
    solver: Solver = "rk4",
    n_steps: Sequence[int] = (1, 2, 4, 8),
    reference_steps: int = 256,
) -> Convergence:
    """Global error of ``net``'s output against the time step, and the fitted order (Sec. 3).

    The error of each manifestation ``(solver, N_t)`` is the largest absolute
    difference of its output on ``x`` from that of ``(solver, reference_steps)``. In
    eval mode every manifestation normalises with the statistics carried over from
    ``net``'s (:func:`carry_statistics`), one function of depth for all of them; in
    train mode each normalises with the statistics of ``x``. Either way ``net`` is
    left unchanged: every buffer of it that a train-mode pass updates (running
    statistics of the stem, stitches, head and of its own manifestation's blocks) is
    put back after the study (a copy of the buffers is kept meanwhile, not of the
    weights).

    Args:
        net: the network to study.
        x: the input on which the outputs are compared.
        solver: the fixed-step solver, by method name or as an odecore solver object.
        n_steps: the step counts ``N_t`` to measure.
        reference_steps: ``N_t`` of the reference manifestation.

    Returns:
        The errors, the fitted order and ``(method name, reference_steps)``. The order
        is fitted to the non-zero errors (a manifestation at ``reference_steps`` has
        none); it is NaN where fewer than two remain or where an error is not finite
        (a manifestation that diverged has no place on the line).

    Raises:
        ValueError: if ``reference_steps`` is below a step count of ``n_steps``: the
            reference must be the finest manifestation, or the errors measure the
            reference's own.

    Example:
        >>> import torch
        >>> from contnet import ContinuousNet, convergence_study
        >>> from torch import nn
        >>> net = ContinuousNet(in_channels=1, channels=(2, 2, 2), basis="legendre",
        ...                     n_basis=2, activation=nn.Softplus).double().eval()
        >>> study = convergence_study(net, torch.randn(2, 1, 8, 8, dtype=torch.float64),
        ...                           solver="rk4", n_steps=[2, 4, 8])
        >>> 3.5 < study.order < 4.5
        True
    """
    if n_steps and reference_steps < max(n_steps):
        raise ValueError(
            f"`reference_steps` = {reference_steps!r} is below the step counts "
            f"{sorted(n for n in n_steps if n > reference_steps)} of `n_steps`; the reference "
            "must be the finest manifestation."
        )
    # The carried-over statistics are a function of depth, so every manifestation is
    # the same ODE: what a convergence study needs, and no cause for a warning here.
    with torch.no_grad(), warnings.catch_warnings(), _buffers_kept(net):
        warnings.simplefilter("ignore", CarriedStatisticsWarning)
        reference = net.manifest(solver=solver, n_steps=reference_steps)(x)
        errors = []
        method = net.manifest(solver=solver).method
        for n in n_steps:
            out = net.manifest(solver=solver, n_steps=n)(x)
            errors.append(float((out - reference).abs().max()))
    logs = [(math.log(1.0 / n), math.log(e)) for n, e in zip(n_steps, errors) if e > 0]
    if len(logs) < 2 or not all(math.isfinite(e) for e in errors):
        order = math.nan
    else:
        mx = sum(a for a, _ in logs) / len(logs)
        my = sum(b for _, b in logs) / len(logs)
        order = sum((a - mx) * (b - my) for a, b in logs) / sum((a - mx) ** 2 for a, _ in logs)
    return Convergence(tuple(n_steps), tuple(errors), order, (method, reference_steps))
