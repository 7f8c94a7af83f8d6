"""Refinement: more steps, another solver, a richer basis; the model stays the same."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from odelayers.basis import AbstractBasis, PiecewiseConstant, PiecewiseLinear
from torch import Tensor

from ._block import Solver, _positive_int, fixed_solver
from ._continuous import transfer
from ._net import BASES, ContinuousNet, make_basis


def _family(basis: AbstractBasis) -> str:
    for name, cls in BASES.items():
        if type(basis) is cls:
            return name
    raise ValueError(f"Cannot refine a basis of type {type(basis).__name__}.")


def _refined_basis(basis: AbstractBasis, n_basis: int | None, double: bool) -> AbstractBasis:
    if n_basis is None and not double:
        return basis
    if n_basis is None:
        if isinstance(basis, PiecewiseConstant):
            return PiecewiseConstant(pieces=2 * basis.pieces)
        if isinstance(basis, PiecewiseLinear):
            return PiecewiseLinear(pieces=2 * basis.pieces)
        n_basis = 2 * basis.size + (1 if _family(basis) == "fourier" else 0)
    return make_basis(_family(basis), n_basis)


def refine(
    net: ContinuousNet,
    *,
    n_steps: int | None = None,
    n_basis: int | None = None,
    solver: Solver | None = None,
) -> tuple[ContinuousNet, dict[str, tuple[AbstractBasis, AbstractBasis]]]:
    """A refined copy of ``net`` and, per coefficient tensor, its (old, new) basis.

    With no argument ``N_t`` and ``M`` double (a piecewise-constant interval splits in
    two with its value copied: the weight function is exactly the same). Otherwise
    each given kind changes alone: ``n_steps`` (time step), ``n_basis`` (weights,
    projected in L2 for bases other than piecewise constant), ``solver`` (integrator).
    ``net`` is left unchanged. A new (solver, ``N_t``) gets its batch-norm running
    statistics carried over from ``net``'s as a function of depth
    (:func:`carry_statistics`); training measures them again, and
    :func:`recalibrate` does so without training.

    Args:
        net: the network to refine.
        n_steps: the new ``N_t`` of every block.
        n_basis: the new ``M`` of every block's basis (same family).
        solver: the new fixed-step solver, by method name or as an odecore solver object.

    Returns:
        ``(new_net, maps)``: the refined copy, and ``{parameter name in new_net:
        (old basis, new basis)}`` for every coefficient tensor whose basis changed (what
        :func:`carry_optimizer` needs).

    Raises:
        TypeError: if ``net`` is not a ContinuousNet, or ``n_steps`` or ``n_basis`` is
            not an integer.
        ValueError: for an unknown method or an adaptive solver, an ``n_steps`` or
            ``n_basis`` below 1, or a basis that cannot be refined.

    Example:
        >>> from contnet import ContinuousNet, refine
        >>> net = ContinuousNet(in_channels=1, channels=(2, 2, 2), n_steps=2)
        >>> fine, maps = refine(net)
        >>> fine.n_steps, fine.blocks[0].basis.pieces, net.n_steps
        (4, 4, 2)
        >>> maps["blocks.0.continuous.coefficients.2__weight"][1]
        PiecewiseConstant(t0=0.0, t1=1.0, pieces=4)
    """
    if not isinstance(net, ContinuousNet):
        raise TypeError(f"`net` must be a contnet.ContinuousNet, got {type(net).__name__}.")
    if n_steps is not None:
        _positive_int("n_steps", n_steps)
    if n_basis is not None:
        _positive_int("n_basis", n_basis)
    if solver is not None:
        fixed_solver(solver)
    double = n_steps is None and n_basis is None and solver is None
    new = copy.deepcopy(net)
    maps: dict[str, tuple[AbstractBasis, AbstractBasis]] = {}
    for b, block in enumerate(new.ode_blocks()):
        # A new manifestation carries the running statistics over (OdeBlock.manifest).
        block = block.manifest(solver=solver, n_steps=2 * block.n_steps if double else n_steps)
        new.blocks[b] = block
        cont = block.continuous
        old, target = cont.basis, _refined_basis(cont.basis, n_basis, double)
        if target is old:
            continue
        for key in cont.change_basis(target):
            maps[f"blocks.{b}.continuous.coefficients.{key}"] = (old, target)
    return new, maps


def carry_optimizer(
    optimizer: torch.optim.Optimizer,
    old: ContinuousNet,
    new: ContinuousNet,
    maps: dict[str, tuple[AbstractBasis, AbstractBasis]],
) -> torch.optim.Optimizer:
    """An optimizer of ``optimizer``'s class for ``new``, with its state carried over.

    Hyperparameters, the defaults a group added later takes, and parameter groups
    stay; every state tensor shaped like a
    refined coefficient tensor (momentum buffers, Adam's moments) is transferred to the
    new basis the same way as the weights, others are copied. A state that is ``>= 0``
    everywhere (Adam's ``exp_avg_sq``, Adagrad's ``sum``, RMSprop's ``square_avg``)
    goes over as a weighted mean instead: new coefficient ``b`` takes the mean of the
    old values ``a`` weighted by ``|T_ba|``, where ``T`` is the matrix of
    :func:`transfer`. An L2 projection onto hat functions or polynomials can
    undershoot below 0 (a negative second moment makes the next step NaN), and
    clamping it at 0 leaves a zero second moment beside a non-zero first moment (a
    step of thousands of learning rates); the mean is ``>= 0``, is 0 only where every
    old value it draws on was, and equals the transfer where that copies (exactly:
    pieces split, nested polynomials) or averages (to rounding: pieces merged).

    A state reduced over some dimensions of its parameter (Adafactor's ``row_var`` and
    ``col_var``, of size 1 there) goes over along the basis index in the same way, or
    is copied where it is reduced over the basis index itself.

    A learning-rate scheduler keeps driving the optimizer it was built on, and the new
    one's rate would stay where it is: build the scheduler again on the returned
    optimizer and load the old one's ``state_dict()`` into it.

    Raises:
        ValueError: where the basis changed and a state cannot be carried: an
            optimizer whose state spans all its parameters at once (L-BFGS's
            history), or a state of a coefficient tensor of one basis function whose
            shape does not say whether it is reduced over the basis index.
    """
    if maps and any(isinstance(optimizer, kind) for kind in _WHOLE_STATE):
        raise ValueError(
            f"carry_optimizer cannot carry the state of {type(optimizer).__name__}, which "
            "holds its history of all parameters flattened together, across a refinement "
            "that changes the basis (its coefficient tensors change size); build a new "
            "optimizer for the refined net."
        )
    old_names = {id(p): n for n, p in old.named_parameters()}
    new_params = dict(new.named_parameters())
    groups = []
    for group in optimizer.param_groups:
        names = [old_names[id(p)] for p in group["params"]]
        groups.append({**{k: v for k, v in group.items() if k != "params"},
                       "params": [new_params[n] for n in names]})  # fmt: skip
    out = type(optimizer)(groups)  # type: ignore[call-arg]
    out.defaults = copy.deepcopy(optimizer.defaults)  # a group added later takes these
    for group, new_group in zip(optimizer.param_groups, out.param_groups):
        for p, q in zip(group["params"], new_group["params"]):
            state = optimizer.state.get(p)
            if not state:
                continue
            name = old_names[id(p)]
            carried: dict[str, Any] = {}
            for key, value in state.items():
                if isinstance(value, Tensor) and name in maps and value.dim() > 0:
                    along = _along_basis(value, p)
                    if along is None:
                        raise ValueError(
                            f"carry_optimizer cannot carry {type(optimizer).__name__}'s state "
                            f"{key!r} of shape {tuple(value.shape)} for `{name}` of shape "
                            f"{tuple(p.shape)} into the new basis {maps[name][1]!r}: its shape "
                            "does not say how it depends on the basis index (dim 0); build a "
                            "new optimizer for the refined net."
                        )
                    carried[key] = _transfer_state(value, *maps[name]) if along else value.clone()
                else:
                    carried[key] = copy.deepcopy(value)
            out.state[q] = carried
    return out


_WHOLE_STATE = (torch.optim.LBFGS,)
"""Optimizers whose state is one for all their parameters, flattened together."""


def _along_basis(value: Tensor, p: Tensor) -> bool | None:
    """Whether a state tensor of the coefficient tensor ``p`` goes along its basis index
    (dim 0): ``True`` for ``p``'s shape or that shape reduced to size 1 in later
    dimensions, ``False`` for a state reduced over the basis index (size 1 there, where
    ``p`` has more), ``None`` where the shape does not tell (``p`` of one function, a
    state reduced elsewhere) or is none of these."""
    if value.shape == p.shape:
        return True
    if value.dim() != p.dim() or any(v not in (1, d) for v, d in zip(value.shape[1:], p.shape[1:])):
        return None
    if p.shape[0] == 1:
        return None
    if value.shape[0] == p.shape[0]:
        return True
    return False if value.shape[0] == 1 else None


def _transfer_state(value: Tensor, old: AbstractBasis, new: AbstractBasis) -> Tensor:
    """An optimizer state in the new basis: a signed one by :func:`transfer`, one that is
    ``>= 0`` everywhere as the ``|T|``-weighted mean of its old values (see
    :func:`carry_optimizer`)."""
    if not bool((value >= 0).all()):
        return transfer(value, old, new)
    eye = torch.eye(old.size, dtype=value.dtype, device=value.device)
    weights = transfer(eye, old, new).abs()  # |T|, new index first
    # The projection leaves rounding noise (1e-17) where T is 0 (nested polynomials and
    # Fourier modes): normalised, a row of noise alone would give a new coefficient an
    # old value in full, where the transfer gives it 0.
    weights = torch.where(weights > 1e-12 * weights.max(), weights, 0.0)
    weights = weights / weights.sum(1, keepdim=True).clamp_min(torch.finfo(value.dtype).tiny)
    out: Tensor = torch.tensordot(weights, value, dims=1)
    return out


@dataclass
class RefinementSchedule:
    """Refine a network at given epochs, carrying the optimizer's state across.

    Attributes:
        epochs: the epochs at whose start to refine.
        n_steps: ``N_t`` after a refinement, or ``None``.
        n_basis: ``M`` after a refinement, or ``None``.
        solver: the fixed-step solver after a refinement (a method name or an odecore
            solver object), or ``None``. With all three ``None`` (the default) every
            refinement doubles ``N_t`` and ``M``; otherwise each one given changes alone
            (see :func:`contnet.refine`).

    A refinement returns a new optimizer (:func:`carry_optimizer`): a learning-rate
    scheduler built on the old one must be built again on it, with the old one's
    ``state_dict()`` loaded, or the new optimizer's rate stops changing.

    Example:
        >>> import torch
        >>> from contnet import ContinuousNet, RefinementSchedule
        >>> net = ContinuousNet(in_channels=1, channels=(4, 4, 4), n_steps=1)
        >>> opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        >>> schedule = RefinementSchedule(epochs=[2, 4])
        >>> for epoch in range(5):
        ...     net, opt = schedule.step(epoch, net, opt)
        >>> net.n_steps
        4
    """

    epochs: Sequence[int]
    n_steps: int | None = None
    n_basis: int | None = None
    solver: Solver | None = None

    def step(
        self, epoch: int, net: ContinuousNet, optimizer: torch.optim.Optimizer
    ) -> tuple[ContinuousNet, torch.optim.Optimizer]:
        """``(net, optimizer)``, refined when ``epoch`` is in :attr:`epochs`."""
        if epoch not in self.epochs:
            return net, optimizer
        new, maps = refine(net, n_steps=self.n_steps, n_basis=self.n_basis, solver=self.solver)
        return new, carry_optimizer(optimizer, net, new, maps)
