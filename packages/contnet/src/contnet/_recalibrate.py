"""``recalibrate``: batch-norm running statistics measured again on data, without training."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import TypeVar

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _NormBase

from ._block import OdeBlock

M = TypeVar("M", bound=nn.Module)


def recalibrate(net: M, batches: Iterable[Tensor | Sequence[Tensor]]) -> M:
    """Measure every running statistic of ``net`` on ``batches``, as their plain average.

    Every normalisation layer that tracks running statistics (the batch norms of the
    stem, stitches and head, and those of every residual module ``R``, one set per
    evaluation of an :class:`OdeBlock`) is reset, then ``net`` runs ``batches`` in
    train mode without gradients, with a cumulative average (``momentum=None``) in
    place of the running one: each statistic ends as the mean over the batches of its
    batch statistics, and nothing from before remains. No parameter changes. The
    momenta and the train/eval mode are restored, and statistics carried over from
    another manifestation count as measured.

    Use it after :meth:`ContinuousNet.manifest` or :func:`refine` with another solver
    or ``N_t`` (evaluating the carried-over statistics in ``eval()`` warns), or
    whenever running averages lag behind the weights, e.g. after a loss spike.

    Args:
        net: a :class:`ContinuousNet`, or any module (its OdeBlocks and normalisation
            layers are found among its submodules).
        batches: inputs of ``net``: tensors, or ``(inputs, targets, ...)`` tuples or
            lists whose first entry is used. A few dozen training batches are usually
            enough. They are moved to the device of ``net``'s first parameter.

    Returns:
        ``net`` itself.

    Raises:
        TypeError: if ``net`` is not a module, or a batch is neither a tensor nor a
            sequence starting with one, or its inputs are not floating point.
        ValueError: if ``batches`` is empty, or a batch holds a NaN or an infinity.

    Whatever fails (one of these, or ``net`` refusing a batch of the wrong shape), no
    statistic of ``net`` has changed: the first batch is checked before anything is
    reset, and the statistics are put back as they were when a later one fails.

    Example:
        >>> import torch
        >>> import contnet
        >>> net = contnet.ContinuousNet(in_channels=1, channels=(4, 4, 4), solver="rk4")
        >>> deep = net.manifest(n_steps=4)  # statistics carried over
        >>> data = [torch.randn(16, 1, 28, 28) for _ in range(3)]
        >>> _ = contnet.recalibrate(deep, data).eval()
        >>> deep(data[0]).shape
        torch.Size([16, 10])
    """
    if not isinstance(net, nn.Module):
        raise TypeError(f"`net` must be an nn.Module, got {type(net).__name__}.")
    stream = iter(batches)
    first = next(stream, None)
    if first is None:  # before anything is reset
        raise ValueError("`batches` gave no batch; recalibrate needs at least one.")
    _inputs(first, 0)  # a bad first batch is refused before anything is reset
    blocks = [m for m in net.modules() if isinstance(m, OdeBlock)]
    modules = list(net.modules())
    for block in blocks:  # R is not a submodule of its block
        modules += list(block.continuous.module.modules())
    norms = [m for m in modules if isinstance(m, _NormBase) and m.track_running_stats]
    parameter = next(net.parameters(), None)
    device = parameter.device if parameter is not None else None
    momenta = [m.momentum for m in norms]
    modes = {m: m.training for m in modules}
    saved = [(b, b.detach().clone()) for m in modules for b in m.buffers(recurse=False)]
    try:
        for block in blocks:
            block.reset_statistics()
        for m in norms:
            m.reset_running_stats()
            m.momentum = None
        net.train()
        with torch.no_grad():
            for n, batch in enumerate(itertools.chain([first], stream)):
                net(_inputs(batch, n).to(device))
    except BaseException:
        with torch.no_grad():  # every statistic back as it was
            for buffer, value in saved:
                buffer.copy_(value)
        raise
    finally:
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
        for module, mode in modes.items():
            module.training = mode
    return net


def _inputs(batch: object, n: int) -> Tensor:
    """The inputs of batch ``n``, checked: a floating tensor of finite values."""
    if isinstance(batch, Tensor):
        x = batch
    elif isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], Tensor):
        x = batch[0]
    else:
        raise TypeError(
            f"`batches`: batch {n} is a {type(batch).__name__}; expected a tensor of inputs "
            "or an (inputs, targets) tuple."
        )
    if not x.is_floating_point():
        raise TypeError(
            f"`batches`: batch {n} has dtype {x.dtype}; the net takes floating inputs. "
            "Pass the inputs as the net sees them (e.g. normalised images)."
        )
    if not bool(torch.isfinite(x).all()):
        raise ValueError(
            f"`batches`: batch {n} holds NaN or infinite values, which would make the "
            "running statistics NaN; recalibrate on finite inputs."
        )
    return x
