"""Continuous parameters: every parameter and buffer of a module as a function of depth."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from typing import cast

import torch
from odelayers.basis import (
    AbstractBasis,
    Legendre,
    PiecewiseConstant,
    PiecewiseLinear,
    SavesBasis,
    project,
)
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.modules.batchnorm import _NormBase
from torch.nn.utils import parametrize


def _attr(name: str) -> str:
    return name.replace(".", "__")


def _partition_of_unity(basis: AbstractBasis) -> bool:
    return isinstance(basis, (PiecewiseConstant, PiecewiseLinear))


def _reset(module: nn.Module) -> None:
    for m in module.modules():
        reset = getattr(m, "reset_parameters", None)
        if callable(reset):
            reset()


class ContinuousModule(SavesBasis):
    """A module ``R`` whose parameters and floating buffers are expansions over depth.

    Every entry ``w`` of ``R`` becomes ``w(t) = sum_b phi_b(t) w_b`` with ``basis.size``
    coefficients ``w_b`` (a ``M x 16 x 16 x 3 x 3`` tensor for a 16 -> 16 3x3
    convolution). :meth:`forward` evaluates them at ``t`` and runs ``R`` with
    ``torch.func.functional_call``.

    Running statistics of normalisation layers (batch norm's ``running_mean``,
    ``running_var`` and ``num_batches_tracked``; their names are ``statistic_names``) are not
    functions of depth: they describe the inputs of one call of ``R`` in a manifested
    network, and a multi-stage solver calls ``R`` on differently distributed inputs at
    one depth. The caller owns them and passes them to :meth:`forward`
    (:class:`~contnet.OdeBlock` keeps one set per evaluation); without them ``R``
    normalises with the statistics of its batch, in train and eval mode alike.

    Initialisation: with a piecewise basis each coefficient is a fresh initialisation of
    ``R`` (like the independent units of a ResNet); with a smooth basis the constant
    part is ``R``'s initial value and the rest zero. The coefficients of a frozen
    parameter of ``R`` (``requires_grad=False``) are frozen too.

    Args:
        module: the residual module ``R``; its own tensors are not used afterwards
            (its running statistics are the initial value of a caller's, see
            :meth:`initial_statistics`).
        basis: the depth basis, on the depth interval of the block (usually ``[0, 1]``).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from odelayers.basis import PiecewiseConstant
        >>> from contnet import ContinuousModule
        >>> layer = ContinuousModule(nn.Linear(3, 3), PiecewiseConstant(pieces=4))
        >>> layer.coefficients["weight"].shape
        torch.Size([4, 3, 3])
        >>> layer(0.3, torch.zeros(2, 3)).shape
        torch.Size([2, 3])
    """

    def __init__(self, module: nn.Module, basis: AbstractBasis) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"`module` must be an nn.Module, got {type(module).__name__}.")
        if not isinstance(basis, AbstractBasis):
            raise TypeError(f"`basis` must be an odelayers.basis basis, got {basis!r}.")
        self.basis = basis
        self._slots: tuple[nn.Module, list[tuple[dict[str, Tensor | None], str, str]]] | None
        self._slots = None
        self.template = [module]  # a list: not a submodule, its tensors are not ours
        self.coefficients = nn.ParameterDict()
        self.names = [name for name, _ in module.named_parameters()]
        self.statistic_names = statistic_names(module)
        buffers = [(n, b) for n, b in module.named_buffers() if n not in self.statistic_names]
        self.buffer_names = [n for n, b in buffers if b.is_floating_point()]
        self.shared_names = [n for n, b in buffers if not b.is_floating_point()]
        m = basis.size
        if _partition_of_unity(basis):
            copies = []
            for _ in range(m):
                fresh = copy.deepcopy(module)
                _reset(fresh)
                copies.append(dict(fresh.named_parameters()))
            for name, p in module.named_parameters():
                stacked = torch.stack([c[name].detach() for c in copies])
                self.coefficients[_attr(name)] = nn.Parameter(stacked, p.requires_grad)
        else:
            for name, p in module.named_parameters():
                self.coefficients[_attr(name)] = nn.Parameter(
                    project(p.detach()[None], Legendre(degree=0, t0=basis.t0, t1=basis.t1), basis),
                    p.requires_grad,
                )
        for name, b in buffers:
            if b.is_floating_point():
                value = project(
                    b.detach()[None], Legendre(degree=0, t0=basis.t0, t1=basis.t1), basis
                )
                self.register_buffer("buffer__" + _attr(name), value)
            else:
                self.register_buffer("shared__" + _attr(name), b.detach().clone())

    def train(self, mode: bool = True) -> ContinuousModule:
        """Set training mode here and in ``R`` (which is not a submodule)."""
        super().train(mode)
        self.module.train(mode)
        return self

    @property
    def module(self) -> nn.Module:
        """The residual module ``R`` (its structure; its tensors are replaced at each call)."""
        return self.template[0]

    def coefficient(self, name: str) -> Tensor:
        """The coefficients ``(basis.size, *shape)`` of parameter or buffer ``name`` of ``R``."""
        if name in self.names:
            param: Tensor = self.coefficients[_attr(name)]
            return param
        if name in self.buffer_names:
            out: Tensor = getattr(self, "buffer__" + _attr(name))
            return out
        if name in self.statistic_names:
            raise KeyError(
                f"`{name}` is a running statistic, not a function of depth: an OdeBlock "
                "holds one per evaluation (OdeBlock.statistics())."
            )
        raise KeyError(f"`{name}` is not a parameter or floating buffer of the module.")

    def shared(self, name: str) -> Tensor:
        """The (depth-independent) integer buffer ``name`` of ``R``, e.g. a batch counter."""
        out: Tensor = getattr(self, "shared__" + _attr(name))
        return out

    def weights(self, t: float, *, left: bool = False) -> list[tuple[int, float]]:
        """The non-zero basis values at ``t``: ``[(index, phi_index(t)), ...]``.

        With ``left``, the limit from the left where the basis jumps at ``t`` (the
        piece that ends there rather than the one that starts there). ``t`` is taken
        as it is: one a floating-point number below a jump reads the piece that ends
        there (an OdeBlock's own stage times are put on the jumps they mean).

        Raises:
            ValueError: if ``t`` lies outside the basis's interval (beyond rounding),
                where the weights are not defined.
        """
        t = float(t)
        basis = self.basis
        if not basis.covers(t, t):  # NaN included
            raise ValueError(
                f"The depth `t` = {t!r} lies outside [{basis.t0!r}, {basis.t1!r}], the "
                f"interval of the weights' basis {basis!r}; they are not defined there."
            )
        return _weights(basis, t, left)

    def slices(self) -> dict[str, tuple[Tensor, ...]]:
        """Every coefficient tensor split into its ``basis.size`` slices (views).

        A block takes them once per forward pass and hands them to every stage: the
        backward pass then gathers each tensor's gradient in one go, instead of once
        per stage that reads it.
        """
        return {n: self.coefficient(n).unbind(0) for n in self.names + self.buffer_names}

    def evaluate(
        self,
        t: float,
        *,
        left: bool = False,
        slices: dict[str, tuple[Tensor, ...]] | None = None,
    ) -> dict[str, Tensor]:
        """Every parameter and buffer of ``R`` at depth ``t`` (``left``: the left limit).

        ``slices``: the result of :meth:`slices`, taken once for many evaluations.
        """
        return self._evaluate(self.weights(t, left=left), slices)

    def _evaluate(
        self, terms: list[tuple[int, float]], slices: dict[str, tuple[Tensor, ...]] | None
    ) -> dict[str, Tensor]:
        if slices is None:
            slices = self.slices()
        out: dict[str, Tensor] = {}
        for name in self.names + self.buffer_names:
            out[name] = _combine(slices[name], terms)
        for name in self.shared_names:
            out[name] = self.shared(name)
        return out

    def initial_statistics(self) -> dict[str, Tensor]:
        """A fresh copy of ``R``'s own running statistics (the initial value of a caller's)."""
        own = dict(self.module.named_buffers())
        return {name: own[name].detach().clone() for name in self.statistic_names}

    def forward(
        self,
        t: float,
        x: Tensor,
        *,
        left: bool = False,
        slices: dict[str, tuple[Tensor, ...]] | None = None,
        statistics: Mapping[str, Tensor] | None = None,
    ) -> Tensor:
        """``R(x; theta(t))``, with ``theta``'s left limit at ``t`` if ``left``.

        Args:
            t: the depth.
            x: the input of ``R``.
            left: read the weights' limit from the left at ``t``.
            slices: the result of :meth:`slices`, taken once for many evaluations.
            statistics: the running statistics of this call, ``{name: tensor}`` for
                every name of ``statistic_names``; in training mode ``R`` updates
                them in place, by its own rule. ``None``: ``R`` normalises with the
                statistics of its batch and updates nothing.
        """
        tensors: dict[str, Tensor | None] = dict(self.evaluate(t, left=left, slices=slices))
        for name in self.statistic_names:
            tensors[name] = None if statistics is None else statistics[name]
        return self._call(tensors, x)

    def _call(self, tensors: dict[str, Tensor | None], x: Tensor) -> Tensor:
        """``R(x)`` with ``tensors`` in place of its own.

        Plain modules get the tensors put into their parameter and buffer slots and
        back again, which costs a fraction of ``functional_call``'s bookkeeping (it
        shows at small batches); tied or parametrized modules go through
        ``functional_call``.
        """
        module = self.module
        if self._slots is None or self._slots[0] is not module:
            self._slots = (module, _slots(module, tensors))
        slots = self._slots[1]
        if not slots:
            out: Tensor = functional_call(module, cast(dict[str, Tensor], tensors), (x,))
            return out
        saved = [table[key] for table, key, _ in slots]
        try:
            for table, key, name in slots:
                table[key] = tensors[name]
            out = module(x)
        finally:
            for (table, key, _), value in zip(slots, saved):
                table[key] = value
        return out

    def change_basis(self, target: AbstractBasis) -> list[str]:
        """Express every coefficient tensor in ``target`` (see :func:`transfer`), in place.

        The parameters are new tensors; each keeps its ``requires_grad`` (a frozen
        coefficient tensor stays frozen).

        Returns:
            The keys in ``coefficients`` of the parameters that were replaced.
        """
        with torch.no_grad():
            for name in self.names:
                key = _attr(name)
                old = self.coefficients[key]
                value = transfer(old.detach(), self.basis, target)
                self.coefficients[key] = nn.Parameter(value, old.requires_grad)
            for name in self.buffer_names:
                attr = "buffer__" + _attr(name)
                setattr(self, attr, transfer(getattr(self, attr), self.basis, target))
        self.basis = target
        return [_attr(name) for name in self.names]

    def extra_repr(self) -> str:
        return f"basis={self.basis!r}"


def transfer(coefficients: Tensor, source: AbstractBasis, target: AbstractBasis) -> Tensor:
    """Coefficients of the same weight function in another basis (index first).

    Splitting a piecewise-constant basis into a multiple of its pieces copies each
    value (exact, no arithmetic); anything else is the L2 projection of
    :func:`odelayers.basis.project`, exact when the target spans the source.
    """
    if (
        isinstance(source, PiecewiseConstant)
        and isinstance(target, PiecewiseConstant)
        and (source.t0, source.t1) == (target.t0, target.t1)
        and target.pieces % source.pieces == 0
    ):
        return coefficients.repeat_interleave(target.pieces // source.pieces, dim=0)
    return project(coefficients, source, target)


def statistic_names(module: nn.Module) -> list[str]:
    """The running statistics of ``module``'s normalisation layers, by buffer name:
    ``running_mean``, ``running_var`` and ``num_batches_tracked`` of every batch or
    instance norm that tracks them."""
    out = []
    for prefix, m in module.named_modules():
        if isinstance(m, _NormBase) and m.track_running_stats:
            dot = f"{prefix}." if prefix else ""
            out += [dot + n for n, b in m.named_buffers(recurse=False) if b is not None]
    return out


def _slots(
    module: nn.Module, tensors: Mapping[str, Tensor | None]
) -> list[tuple[dict[str, Tensor | None], str, str]]:
    """Where each of ``tensors`` lives in ``module``: ``(table, key, name)``; empty when
    a plain swap would be wrong (tied tensors, parametrizations)."""
    every = [n for n, _ in module.named_parameters(remove_duplicate=False)]
    every += [n for n, _ in module.named_buffers(remove_duplicate=False)]
    if sorted(every) != sorted(tensors) or any(
        parametrize.is_parametrized(m) for m in module.modules()
    ):
        return []
    out: list[tuple[dict[str, Tensor | None], str, str]] = []
    for name in tensors:
        owner_name, _, key = name.rpartition(".")
        owner = module.get_submodule(owner_name)
        table = owner._parameters if key in owner._parameters else owner._buffers
        out.append((table, key, name))  # type: ignore[arg-type]
    return out


@functools.lru_cache(maxsize=4096)
def _weights(basis: AbstractBasis, t: float, left: bool) -> list[tuple[int, float]]:
    # Cached: a block asks for the same stage times at every forward pass.
    jumps = basis.jump_ts
    near = [j for j in jumps if abs(t - j) <= 1e-9 * (basis.t1 - basis.t0)]
    if near and left:
        # Constant on each side of a jump: any point just before it gives the limit.
        t = near[0] - 1e-6 * (basis.t1 - basis.t0) / (len(jumps) + 1)
    # Otherwise ``t`` as it is: a time a floating-point number below a jump (odecore's
    # one-sided limit at a time of ``jump_ts``) reads the piece that ends there.
    phi = basis(torch.tensor(t, dtype=torch.float64)).tolist()
    return [(i, w) for i, w in enumerate(phi) if w != 0.0]


def _combine(coefficients: Sequence[Tensor], terms: list[tuple[int, float]]) -> Tensor:
    """``sum_b w_b c_b``; a single unit weight is its coefficient itself (no copy)."""
    if len(terms) == 1 and terms[0][1] == 1.0:
        return coefficients[terms[0][0]]
    if not terms:
        return torch.zeros_like(coefficients[0])
    (i, w), rest = terms[0], terms[1:]
    out = coefficients[i] * w
    for i, w in rest:
        out = out + coefficients[i] * w
    return out
