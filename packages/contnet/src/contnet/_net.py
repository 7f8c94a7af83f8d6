"""``ContinuousNet``: three OdeBlocks joined by stitching units, and its ResNet twin."""

from __future__ import annotations

import copy
import functools
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from odecore import AbstractExplicitRK, ButcherTableau
from odelayers.basis import (
    AbstractBasis,
    Chebyshev,
    Fourier,
    Legendre,
    PiecewiseConstant,
    PiecewiseLinear,
    check_saved_state,
)
from torch import Tensor, nn
from torch.nn.modules.module import _IncompatibleKeys

from ._block import (
    _EXTRA_STATE,
    CarriedStatisticsWarning,
    OdeBlock,
    Solver,
    check_epsilons,
    check_statistics_format,
    fixed_solver,
    same_manifestation,
    tableau_state,
    take_step,
)

BASES = {
    "piecewise_constant": PiecewiseConstant,
    "piecewise_linear": PiecewiseLinear,
    "legendre": Legendre,
    "chebyshev": Chebyshev,
    "fourier": Fourier,
}
"""Basis names for :class:`ContinuousNet`; ``n_basis`` is the number of functions."""


def make_basis(name: str | AbstractBasis, n_basis: int) -> AbstractBasis:
    """A basis of ``n_basis`` functions on ``[0, 1]`` by name (or the basis itself).

    Raises:
        ValueError: for an unknown name, a size the family cannot have (Fourier
            needs an odd count), or a basis given itself with other than ``n_basis``
            functions.
    """
    if isinstance(name, AbstractBasis):
        if n_basis != name.size:
            raise ValueError(
                f"`n_basis` is {n_basis!r} but `basis` {name!r} has {name.size} functions; "
                "give the size once: a basis by name with `n_basis`, or the basis alone."
            )
        return name
    if name not in BASES:
        raise ValueError(f"Unknown `basis` {name!r}; known bases: {', '.join(BASES)}.")
    if isinstance(n_basis, bool) or not isinstance(n_basis, int) or n_basis < 1:
        raise ValueError(f"`n_basis` must be a positive integer, got {n_basis!r}.")
    if name == "piecewise_constant":
        return PiecewiseConstant(pieces=n_basis)
    if name == "piecewise_linear":
        if n_basis < 2:
            raise ValueError("A piecewise-linear basis needs `n_basis >= 2` (one piece).")
        return PiecewiseLinear(pieces=n_basis - 1)
    if name == "fourier":
        if n_basis % 2 != 1 or n_basis < 3:
            raise ValueError(f"A Fourier basis needs an odd `n_basis >= 3`, got {n_basis}.")
        return Fourier(modes=(n_basis - 1) // 2)
    family = cast(type[Legendre] | type[Chebyshev], BASES[name])
    return family(degree=n_basis - 1)


def residual_module(channels: int, activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """``R``: batch norm, activation, 3x3 conv, batch norm, activation, 3x3 conv.

    The pre-activation unit of the paper with ``nn.ReLU``; a smooth activation
    (``nn.Softplus``, ``nn.Tanh``) makes ``R`` smooth in its input, which the
    convergence orders of the higher-order solvers need.
    """
    return nn.Sequential(
        nn.BatchNorm2d(channels),
        activation(),
        nn.Conv2d(channels, channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(channels),
        activation(),
        nn.Conv2d(channels, channels, 3, padding=1, bias=False),
    )


class Stitch(nn.Module):
    """A down-sampling residual unit between blocks: ``P(x) + R'(x)``, stride 2.

    ``R'`` is batch norm, ReLU, a strided 3x3 conv to ``out_channels``, batch norm,
    ReLU, 3x3 conv; ``P`` a strided 1x1 conv. Continuity in depth breaks here.
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            nn.BatchNorm2d(in_channels),
            nn.ReLU(),
            nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
            nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
        )
        self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride=2, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.shortcut(x) + self.residual(x)
        return out


def _head(channels: int, num_classes: int) -> nn.Sequential:
    return nn.Sequential(
        nn.BatchNorm2d(channels),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels, num_classes),
    )


def _classify(
    stem: nn.Module, blocks: nn.ModuleList, stitches: nn.ModuleList, head: nn.Module, x: Tensor
) -> Tensor:
    """Stem, block, stitch, block, stitch, block, head: the layout of both networks."""
    x = stem(x)
    x = blocks[0](x)
    x = blocks[1](stitches[0](x))
    x = blocks[2](stitches[1](x))
    out: Tensor = head(x)
    return out


class ContinuousNet(nn.Module):
    """The image classifier of Queiruga et al. (2020): three OdeBlocks between stitches.

    Stem 3x3 convolution, ``OdeBlock`` at ``channels[0]``, a stitching down-sample
    unit, ``OdeBlock`` at ``channels[1]``, another stitch, ``OdeBlock`` at
    ``channels[2]``, then batch norm, ReLU, average pooling and a linear classifier.
    Every block's residual module ``R`` is :func:`residual_module` with weights over
    ``basis`` (``n_basis`` functions), integrated with ``solver`` in ``n_steps`` steps.
    ``channels=(64, 128, 256)`` is the wide variant. Works for 1-channel 28x28 and
    3-channel 32x32 images (any size divisible by 4).

    Args:
        in_channels: image channels.
        num_classes: outputs of the classifier.
        channels: channels of the three blocks.
        n_steps: ``N_t`` of every block.
        n_basis: ``M``, functions of every block's basis; default ``n_steps`` (with a
            basis object, its size; another ``n_basis`` is refused).
        solver: the fixed-step solver, by method name (``"euler"``, ``"midpoint"``,
            ``"rk4"``, ...) or as an odecore solver object (``odecore.RK4()``).
        basis: ``"piecewise_constant"`` (the paper's), ``"piecewise_linear"``,
            ``"legendre"``, ``"chebyshev"`` or ``"fourier"``, or a basis object of
            :mod:`odelayers.basis` on ``[0, 1]``.
        epsilon: the time scale of every block; default ``n_steps`` (with Euler and
            ``n_basis = n_steps`` every step is a ResNet unit ``x + R_k(x)``).
        activation: the activation of the residual modules (``nn.ReLU``, the paper's).

    Example:
        >>> import torch
        >>> from contnet import ContinuousNet
        >>> net = ContinuousNet(in_channels=1, channels=(4, 8, 8), n_steps=2)
        >>> net(torch.randn(2, 1, 28, 28)).shape
        torch.Size([2, 10])
    """

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        channels: Sequence[int] = (16, 32, 64),
        *,
        n_steps: int = 1,
        n_basis: int | None = None,
        solver: Solver = "euler",
        basis: str | AbstractBasis = "piecewise_constant",
        epsilon: float | None = None,
        activation: type[nn.Module] = nn.ReLU,
    ) -> None:
        super().__init__()
        channels = tuple(channels)
        if len(channels) != 3 or not all(isinstance(c, int) and c > 0 for c in channels):
            raise ValueError(f"`channels` must be three positive integers, got {channels!r}.")
        fixed_solver(solver)  # validate early
        own = basis.size if isinstance(basis, AbstractBasis) else n_steps
        m = own if n_basis is None else n_basis
        eps = float(n_steps) if epsilon is None else epsilon
        self.channels = channels
        self.stem = nn.Conv2d(in_channels, channels[0], 3, padding=1, bias=False)
        self.blocks = nn.ModuleList(
            OdeBlock(
                residual_module(c, activation),
                basis=make_basis(basis, m),
                solver=solver,
                n_steps=n_steps,
                epsilon=eps,
            )
            for c in channels
        )
        self.stitches = nn.ModuleList(
            [Stitch(channels[0], channels[1]), Stitch(channels[1], channels[2])]
        )
        self.head = _head(channels[2], num_classes)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> _IncompatibleKeys:
        """:meth:`torch.nn.Module.load_state_dict`; a ``state_dict`` from before the
        per-evaluation batch-norm statistics is refused in one line, or with
        ``strict=False`` loaded without its statistics, with a warning: then
        :func:`contnet.recalibrate` measures them. A block's ``epsilon`` or
        manifestation (solver, ``N_t``) other than the one saved is refused, before
        anything is loaded (see :class:`OdeBlock`)."""
        state = check_statistics_format(self, state_dict, strict=strict)
        check_epsilons(self, state)
        keys: _IncompatibleKeys = super().load_state_dict(state, strict, assign)
        return keys

    def forward(self, x: Tensor) -> Tensor:
        return _classify(self.stem, self.blocks, self.stitches, self.head, x)

    def ode_blocks(self) -> list[OdeBlock]:
        """The three blocks."""
        return [cast(OdeBlock, b) for b in self.blocks]

    @property
    def method(self) -> str:
        """The method name of the blocks' solver (a key of :data:`odecore.FIXED_METHODS`)."""
        return self.ode_blocks()[0].method

    @property
    def solver(self) -> AbstractExplicitRK:
        """The odecore solver of the blocks."""
        return self.ode_blocks()[0].solver

    @property
    def n_steps(self) -> int:
        """``N_t`` of the blocks."""
        return self.ode_blocks()[0].n_steps

    def manifest(
        self, *, solver: Solver | None = None, n_steps: int | None = None
    ) -> ContinuousNet:
        """The same model with another (solver, N_t): weights shared, not copied.

        Running statistics belong to a manifestation: the same (solver, N_t) shares
        them all; another one gets its own, the blocks' carried over
        (:meth:`OdeBlock.manifest`) and those of the stem, stitches and head copied
        (their inputs come out of the blocks). Training or :func:`contnet.recalibrate`
        on it then leaves this network's statistics as they are.

        Example:
            >>> import torch
            >>> from contnet import ContinuousNet
            >>> net = ContinuousNet(in_channels=1, channels=(4, 4, 4), n_steps=2)
            >>> deeper = net.manifest(solver="rk4", n_steps=8)
            >>> deeper.blocks[0].continuous is net.blocks[0].continuous
            True
        """
        out = copy.copy(self)
        out._modules = dict(self._modules)
        out.blocks = nn.ModuleList(
            b.manifest(solver=solver, n_steps=n_steps) for b in self.ode_blocks()
        )
        out.blocks.training = self.blocks.training  # a new list starts in train mode
        if not same_manifestation(out.ode_blocks()[0], self.ode_blocks()[0]):
            for name in ("stem", "stitches", "head"):
                out._modules[name] = _own_buffers(cast(nn.Module, self._modules[name]))
        return out

    def to_resnet(self) -> ResNet:
        """This manifestation as a plain network: one residual unit per step, no bases.

        Each unit holds one copy of ``R`` per stage with the weights (and batch-norm
        statistics) evaluated at that stage's depth, and applies the solver's
        coefficients; with Euler a unit is ``x + h * epsilon * R_k(x)``. The result
        gives the same outputs and traces with ``torch.jit.trace`` and ``torch.export``.

        The units keep no mark of batch-norm statistics carried over from another
        manifestation (:meth:`manifest`): exporting such a manifestation warns with
        :class:`~contnet.CarriedStatisticsWarning`, as its blocks do in ``eval()``;
        :func:`contnet.recalibrate` the network first.
        """
        carried = [b for b in self.ode_blocks() if b.continuous.statistic_names and b.carried.any()]
        if carried:
            warnings.warn(
                f"Exporting a ContinuousNet ({self.method}, N_t = {self.n_steps}) whose "
                "batch-norm statistics were carried over from another manifestation, not "
                "measured in this one: the ResNet's units keep them without a mark, and its "
                "outputs in eval() can be far from what the trained network computes. Call "
                "contnet.recalibrate(net, batches) on a few training batches first.",
                CarriedStatisticsWarning,
                stacklevel=2,
            )
        blocks = [ResNetBlock.from_ode_block(b) for b in self.ode_blocks()]
        out = ResNet(
            copy.deepcopy(self.stem), blocks, copy.deepcopy(self.stitches), copy.deepcopy(self.head)
        )
        out.training = out.blocks.training = self.training  # the copies keep their own
        return out

    @classmethod
    def from_resnet(cls, resnet: ResNet) -> ContinuousNet:
        """ContinuousNet[Euler, N_t = M] with the weights of a ResNet of Euler units.

        Unit ``k`` of a block (``x + scale * R_k(x)``, every unit of a block the same
        scale) becomes piece ``k`` of a piecewise-constant basis with ``M`` = the
        number of units, and ``epsilon = scale * M`` (the units' own ``epsilon`` where
        their step is ``1 / M``, as :meth:`to_resnet` writes them): the same function.
        Every ``R_k``
        must be what :func:`residual_module` builds with the activation type of the
        first unit (same submodules and tensors, same settings: convolutions without
        bias, batch norms' ``eps``, ``momentum``, ``affine``, ``track_running_stats``,
        the activation's arguments). The stem, stitches and head are copied as they
        are, in their train or eval mode; each block takes the mode of its units'
        modules, and the network that of ``resnet``.

        Raises:
            ValueError: if a unit has more than one stage, the scales differ, a unit's
                module differs from the residual module it would become (the message
                names the block, the unit and what differs), or the modules of one
                block's units are not all in the same train or eval mode.
        """
        rblocks = resnet.resnet_blocks()
        units = [b.residual_units() for b in rblocks]
        if len({len(u) for u in units}) != 1:
            raise ValueError(
                f"Every block needs the same number of units, got {[len(u) for u in units]}."
            )
        scales = {u.scale() for block_units in units for u in block_units}
        if len(scales) != 1:
            raise ValueError(
                f"`from_resnet` needs Euler units of one scale, got scales {sorted(scales)}."
            )
        first = [cast(nn.Sequential, u[0].stages[0]) for u in units]
        channels = tuple(cast(nn.Conv2d, r[2]).in_channels for r in first)
        activation = type(first[0][1])
        classifier = cast(nn.Linear, resnet.head[-1])
        n, scale = len(units[0]), scales.pop()
        epsilon = scale * n
        steps = {(u.h, u.epsilon, float(u.tableau.b[0])) for bu in units for u in bu}
        if len(steps) == 1 and next(iter(steps))[::2] == (1.0 / n, 1.0):
            # What to_resnet writes: the blocks' own step and epsilon, which scale * n
            # can miss by a rounding (1.7 / 5 * 5), and the function with it.
            epsilon = next(iter(steps))[1]
        net = cls(resnet.stem.in_channels, classifier.out_features, channels, n_steps=n,
                  epsilon=epsilon, activation=activation)  # fmt: skip
        net = net.to(dtype=resnet.stem.weight.dtype, device=resnet.stem.weight.device)
        net.stem = copy.deepcopy(resnet.stem)
        net.stitches = copy.deepcopy(resnet.stitches)
        net.head = copy.deepcopy(resnet.head)
        with torch.no_grad():
            for b, (block, block_units) in enumerate(zip(net.ode_blocks(), units)):
                cont = block.continuous
                statistics = block.statistics()
                for k, unit in enumerate(block_units):
                    _check_same(f"block {b}, unit {k}", unit.stages[0], cont.module)
                    state = unit.stages[0].state_dict()
                    for name in cont.names + cont.buffer_names:
                        cont.coefficient(name)[k].copy_(state[name])
                    for name, value in statistics.items():
                        value[k].copy_(state[name])
                last = block_units[-1].stages[0].state_dict()
                for name in cont.shared_names:
                    cont.shared(name).copy_(last[name])
        modes = []
        for b, block_units in enumerate(units):
            found = {m.training for u in block_units for m in u.stages[0].modules()}
            if len(found) != 1:
                raise ValueError(
                    f"`from_resnet`: the modules of block {b}'s units are partly in train and "
                    "partly in eval mode, which one block cannot be; call resnet.train() or "
                    "resnet.eval() first."
                )
            modes.append(found.pop())
        net.training = net.blocks.training = resnet.training
        for block, mode in zip(net.ode_blocks(), modes):
            block.train(mode)  # the stem, stitches and head are copies, in their own modes
        return net


def _own_buffers(module: nn.Module) -> nn.Module:
    """``module`` with the same parameters (shared) and copies of its buffers, throughout."""
    out = copy.copy(module)
    out._parameters = dict(module._parameters)
    out._buffers = {
        k: None if b is None else b.detach().clone() for k, b in module._buffers.items()
    }
    out._modules = {k: None if m is None else _own_buffers(m) for k, m in module._modules.items()}
    return out


def _check_same(where: str, got: nn.Module, want: nn.Module) -> None:
    """Refuse ``got`` unless it has ``want``'s tensors, submodules and their settings."""
    rule = "from_resnet reads units of contnet.residual_module(channels, activation) only"
    keys, expected = set(got.state_dict()), set(want.state_dict())
    if keys != expected:
        extra, missing = sorted(keys - expected), sorted(expected - keys)
        raise ValueError(
            f"`from_resnet`: the tensors of {where} are not the residual module's: extra "
            f"{extra}, missing {missing}; {rule}."
        )
    mods, wants = dict(got.named_modules()), dict(want.named_modules())
    for name in dict.fromkeys([*wants, *mods]):
        module, other = wants.get(name), mods.get(name)
        if type(other) is not type(module) or _settings(other) != _settings(module):
            raise ValueError(
                f"`from_resnet`: {where}, module {name or '(root)'!r} is {_settings(other)} "
                f"where the residual module has {_settings(module)}; {rule}, with the "
                "activation's default arguments."
            )


def _settings(module: nn.Module | None) -> str:
    """A module's class and own settings, without its submodules."""
    return "nothing" if module is None else f"{type(module).__name__}({module.extra_repr()})"


class ResidualUnit(nn.Module):
    """One explicit Runge-Kutta step as plain layers: a copy of ``R`` per stage.

    ``k_i = epsilon * R_i(x + h sum_j a_ij k_j)``, ``x + h sum_i b_i k_i``, taken by the
    odecore solver ``solver`` (``solver.init`` and ``solver.step``, the kernel that
    :class:`OdeBlock` steps with): the ``i``-th evaluation of the step is stage ``i``.
    With one stage this is the ResNet unit ``x + h * epsilon * R(x)``.

    Args:
        stages: one module per stage of the solver, in the order the stages are taken.
        solver: a fixed-step solver, by method name or as an odecore solver object.
        h: the step.
        epsilon: the factor of every ``R_i``.

    The ``state_dict`` saves the step: the solver's method name and Butcher tableau,
    ``h`` and ``epsilon`` in ``<unit>._extra_state``. Loading one saved with another
    tableau or scale ``h * epsilon`` is refused (the same weights would take another
    step), before anything loads where a :class:`ResNet` or :class:`ResNetBlock` loads
    it; a ``state_dict`` saved before the unit kept its step loads as before.

    Raises:
        ValueError: for an unknown method or an adaptive solver, or a number of modules
            other than its stages.
    """

    _version = 2  # 2: the step (tableau, h, epsilon) in the state_dict

    def __init__(
        self,
        stages: Sequence[nn.Module],
        solver: Solver,
        h: float,
        epsilon: float,
    ) -> None:
        super().__init__()
        self.method, self.solver = fixed_solver(solver)
        if len(stages) != self.tableau.stages:
            raise ValueError(
                f"`stages`: the solver {self.method!r} has {self.tableau.stages} stages but "
                f"{len(stages)} modules were given."
            )
        self.stages = nn.ModuleList(stages)
        self.h = h
        self.epsilon = epsilon

    @property
    def tableau(self) -> ButcherTableau:
        """The Butcher tableau of the solver."""
        return self.solver.tableau

    def scale(self) -> float:
        """The factor of ``R(x)`` in a one-stage (Euler) unit, ``h * epsilon * b_1``."""
        if len(self.stages) != 1:
            raise ValueError(f"A unit of {len(self.stages)} stages is not an Euler unit.")
        return self.h * self.epsilon * self.tableau.b[0]

    def forward(self, x: Tensor) -> Tensor:
        stages = iter(self.stages)

        def f(t: float, y: Tensor) -> Tensor:
            out: Tensor = next(stages)(y) * self.epsilon
            return out

        return take_step(self.solver, f, self.h, x)

    def step_state(self) -> dict[str, Any]:
        """The step this unit takes, as its ``state_dict`` saves it:
        ``{"method", "h", "epsilon", "c", "a", "b"}``."""
        own = {"h": float(self.h), "epsilon": float(self.epsilon)}
        return {"method": self.method, **own, **tableau_state(self.tableau)}

    def get_extra_state(self) -> Tensor:
        """:meth:`step_state` for the ``state_dict``: a ``uint8`` tensor of its UTF-8 JSON."""
        return torch.tensor(list(json.dumps(self.step_state()).encode()), dtype=torch.uint8)

    def set_extra_state(self, state: Any) -> None:
        """Check a saved step: another one than this unit's is refused."""
        check_unit_state(self, state, "this ResidualUnit")

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        *args: Any,
    ) -> None:
        check = functools.partial(check_unit_state, self)
        check_saved_state(self, check, state_dict, prefix, local_metadata, "this ResidualUnit")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)


def check_unit_state(unit: ResidualUnit, saved: Any, where: str) -> None:
    """Refuse ``saved``, a ResidualUnit's ``_extra_state`` from a ``state_dict``, unless it
    was saved with ``unit``'s step: the same Butcher tableau and scale ``h * epsilon``
    (to rounding; the step depends on ``h`` and ``epsilon`` through their product).

    Raises:
        RuntimeError: naming ``where``, both steps and what to build instead.
    """
    state = json.loads(bytes(saved.tolist()).decode())
    own = unit.step_state()
    scales = state["h"] * state["epsilon"], own["h"] * own["epsilon"]
    if all(state.get(k) == own[k] for k in ("c", "a", "b")) and math.isclose(
        *scales, rel_tol=1e-12
    ):
        return
    raise RuntimeError(
        f"Cannot load a state_dict saved with a unit of ({state['method']}, h = {state['h']!r}, "
        f"epsilon = {state['epsilon']!r}) into {where}, a unit of ({unit.method}, "
        f"h = {unit.h!r}, epsilon = {unit.epsilon!r}): the same weights take another step. "
        "Export the ContinuousNet of the saved manifestation and epsilon "
        "(to_resnet) and load it there."
    )


def check_units(root: nn.Module, state_dict: Mapping[str, Any]) -> None:
    """:func:`check_unit_state` for every ResidualUnit of ``root`` that ``state_dict``
    saves, before anything is loaded."""
    for name, unit in root.named_modules():
        key = f"{name}.{_EXTRA_STATE}" if name else _EXTRA_STATE
        if isinstance(unit, ResidualUnit) and key in state_dict:
            check_unit_state(unit, state_dict[key], name or "the ResidualUnit")


class ResNetBlock(nn.Module):
    """A sequence of :class:`ResidualUnit`."""

    def __init__(self, units: Sequence[ResidualUnit]) -> None:
        super().__init__()
        self.units = nn.ModuleList(units)

    @classmethod
    def from_ode_block(cls, block: OdeBlock) -> ResNetBlock:
        """The block's current manifestation, one unit per step: each stage a copy of
        ``R`` with the weights at its depth and the running statistics of its evaluation."""
        cont = block.continuous
        statistics = block._per_evaluation()
        units = []
        for k in range(block.n_steps):
            stages = []
            for t, left in block._stage_points(k):
                own = next(statistics)
                tensors = {**cont.evaluate(t, left=left), **(own or {})}
                module = copy.deepcopy(cont.module).train(block.training)
                with torch.no_grad():
                    module.load_state_dict(
                        {k: v.detach().clone() for k, v in tensors.items()}, assign=True
                    )
                stages.append(module)
            unit = ResidualUnit(stages, block.solver, 1.0 / block.n_steps, block.epsilon)
            unit.training = unit.stages.training = block.training
            units.append(unit)
        out = cls(units)
        out.training = out.units.training = block.training
        return out

    def residual_units(self) -> list[ResidualUnit]:
        """The units, in order."""
        return [cast(ResidualUnit, u) for u in self.units]

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> _IncompatibleKeys:
        """:meth:`torch.nn.Module.load_state_dict`; a unit's step other than the one saved
        is refused before anything is loaded (see :class:`ResidualUnit`)."""
        check_units(self, state_dict)
        keys: _IncompatibleKeys = super().load_state_dict(state_dict, strict, assign)
        return keys

    def forward(self, x: Tensor) -> Tensor:
        for unit in self.units:
            x = unit(x)
        return x


class ResNet(nn.Module):
    """A plain residual network of the ContinuousNet layout (what ``to_resnet`` returns).

    Args:
        stem: the first convolution.
        blocks: three :class:`ResNetBlock`.
        stitches: the two down-sampling units between them.
        head: batch norm, ReLU, pooling, flatten and the classifier.
    """

    def __init__(
        self,
        stem: nn.Conv2d,
        blocks: Sequence[ResNetBlock],
        stitches: nn.ModuleList,
        head: nn.Sequential,
    ) -> None:
        super().__init__()
        self.stem = stem
        self.blocks = nn.ModuleList(blocks)
        self.stitches = stitches
        self.head = head

    def resnet_blocks(self) -> list[ResNetBlock]:
        """The three blocks."""
        return [cast(ResNetBlock, b) for b in self.blocks]

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> _IncompatibleKeys:
        """:meth:`torch.nn.Module.load_state_dict`; a unit's step other than the one saved
        (another solver, ``N_t`` or ``epsilon`` of the ContinuousNet exported) is refused
        before anything is loaded (see :class:`ResidualUnit`)."""
        check_units(self, state_dict)
        keys: _IncompatibleKeys = super().load_state_dict(state_dict, strict, assign)
        return keys

    def forward(self, x: Tensor) -> Tensor:
        return _classify(self.stem, self.blocks, self.stitches, self.head, x)
