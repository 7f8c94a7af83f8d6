"""``OdeBlock``: a residual module integrated over depth with a fixed-step solver."""

from __future__ import annotations

import copy
import functools
import json
import math
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import odecore
import torch
from odecore import AbstractExplicitRK, ButcherTableau
from odelayers.basis import AbstractBasis, check_saved_state
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _NormBase
from torch.nn.modules.module import _IncompatibleKeys

from ._continuous import ContinuousModule, _attr

Solver = str | AbstractExplicitRK
"""A fixed-step solver: a method name of :data:`odecore.FIXED_METHODS` or such a solver object."""
Field = Callable[[float, Tensor], Tensor]


class CarriedStatisticsWarning(UserWarning):
    """An OdeBlock runs in ``eval()`` on batch-norm statistics carried over from another
    manifestation (see :func:`carry_statistics`), not measured in its own.

    Call :func:`contnet.recalibrate` first, or, where the carried statistics are what
    is wanted (a convergence study), filter it:
    ``warnings.simplefilter("ignore", contnet.CarriedStatisticsWarning)``.
    """


def fixed_solver(solver: str | odecore.AbstractSolver) -> tuple[str, AbstractExplicitRK]:
    """The method name and odecore solver of a solver a ContinuousNet can manifest with.

    The one place that decides it: a fixed-step explicit Runge-Kutta method, given by
    a name of :data:`odecore.FIXED_METHODS` (parsed by
    :meth:`odecore.OdeSpec.from_method`) or as an odecore solver object, which is
    asked whether it is adaptive.

    Args:
        solver: a method name or an odecore solver object.

    Returns:
        ``(name, solver)``: the name as given, or for an object the first name
        :data:`odecore.FIXED_METHODS` has for its class; and the solver object.

    Raises:
        ValueError: for an unknown method name, or a solver that is adaptive,
            implicit or not an odecore solver.

    Example:
        >>> import contnet, odecore
        >>> contnet.fixed_solver("rk4")
        ('rk4', RK4(interpolation='auto'))
        >>> contnet.fixed_solver(odecore.Euler())[0]
        'euler'
        >>> contnet.fixed_solver(odecore.Dopri5())
        Traceback (most recent call last):
        ...
        ValueError: `solver` must be the name of a fixed-step method (euler, ...
    """
    resolved: object = solver
    if isinstance(solver, str):
        try:  # the name is parsed by odecore's resolver, the one place that does it
            resolved = odecore.OdeSpec.from_method(solver).solver
        except ValueError:
            resolved = None
    if isinstance(resolved, AbstractExplicitRK) and not resolved.adaptive:  # asked of odecore
        if isinstance(solver, str):
            return solver, resolved
        names = {cls: name for name, cls in reversed(odecore.FIXED_METHODS.items())}
        return names.get(type(solver), type(solver).__name__), resolved  # the first name
    if isinstance(solver, str):
        raise ValueError(
            f"Unknown `solver` {solver!r}; known fixed-step methods: "
            f"{', '.join(odecore.FIXED_METHODS)}."
        )
    raise ValueError(
        f"`solver` must be the name of a fixed-step method ({', '.join(odecore.FIXED_METHODS)}) "
        f"or such an odecore solver object (e.g. odecore.RK4()), got {solver!r}."
    )


def take_step(solver: AbstractExplicitRK, f: Field, h: float, x: Tensor) -> Tensor:
    """One step of ``solver`` over ``[0, h]`` from ``x``: ``solver.init``, then ``solver.step``.

    The one way contnet takes a step, in blocks and in their ResNet export alike, so
    both sum the stages with odecore's kernel. Every step is taken in its own local
    time ``[0, h]``, so ``h`` is the same number in every step and a stage at the end of
    the step (``c = 1``) is asked for at exactly ``h``.
    """
    return solver.step(f, 0.0, h, x, solver.init(f, 0.0, x)).y1


@functools.lru_cache(maxsize=256)
def stage_offsets(solver: AbstractExplicitRK, h: float) -> tuple[float, ...]:
    """The local times in ``[0, h]`` at which :func:`take_step` evaluates the field, in order.

    Read off ``solver`` itself (one step of a zero field on a scalar), so they are the
    times its kernel asks for, not a second formula for them.
    """
    asked: list[float] = []

    def record(t: float, y: Tensor) -> Tensor:
        asked.append(t)
        return torch.zeros_like(y)

    with torch.no_grad():
        take_step(solver, record, h, torch.zeros((), dtype=torch.float64))
    return tuple(asked)


@functools.lru_cache(maxsize=4096)
def _on_jump(basis: AbstractBasis, depth: float) -> float:
    """``depth``, or the jump of ``basis`` it lies on to rounding.

    A stage time computed as ``t_k + c h`` can land a rounding error below the jump it
    means (2/3 + 1/6 < 5/6): a stage on a jump reads the later piece. The block's own
    stage times are snapped here, where they are known to mean the jump; a depth
    given to :meth:`OdeBlock.field` is taken as it is (odecore's one-sided limit at
    a time of ``jump_ts`` is a floating-point number below the jump).
    """
    for jump in basis.jump_ts:
        if abs(depth - jump) <= 1e-9 * (basis.t1 - basis.t0):
            return float(jump)
    return depth


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be a positive integer, got {value!r}.")
    if value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    return value


class OdeBlock(nn.Module):
    """``dx/dt = epsilon * R(x; theta(t))`` on ``t`` in ``[0, 1]``, ``n_steps`` fixed steps.

    The weights of ``R`` are a :class:`ContinuousModule` over ``basis``; each stage of
    each step evaluates them at its own time ``t_k + c_i h`` (``h = 1 / n_steps``), as
    the units of Queiruga et al. (2020, Fig. 5) do. Every step is one step of the
    odecore solver (``solver.init`` and ``solver.step``, which sum the stages), kept in
    ``solver``, its method name in ``method``. With Euler, a piecewise-constant basis of
    ``M = n_steps`` pieces and ``epsilon = n_steps`` the block is a ResNet block of
    ``n_steps`` units ``x + R_k(x)``.

    Batch norm: every evaluation of ``R`` (each stage of each step, in the order they
    are taken) has its own running statistics, as each unit of a ResNet has. RK4 calls
    ``R`` four times per step on inputs with different distributions; in ``eval()``
    each call then normalises with the statistics of the inputs it saw in training,
    and the block computes what it computed in train mode. The statistics belong to
    the manifestation (solver, ``N_t``): :meth:`manifest` with another one carries
    them over as a function of depth (:func:`carry_statistics`), and
    :func:`contnet.recalibrate` measures them on data. Evaluating carried-over
    statistics in ``eval()`` warns once, until training or recalibration has measured
    them.

    Args:
        module: the residual module ``R`` (keeps the shape of its input), or a
            :class:`ContinuousModule`, which brings its own basis.
        basis: the depth basis of the weights, on ``[0, 1]``; with a
            :class:`ContinuousModule`, ``None`` or that module's basis.
        solver: a fixed-step solver, by method name (``"euler"``, ``"midpoint"``,
            ``"rk4"``, ``"rk4_38"``, ``"heun"``, ``"ralston"``, ...: the keys of
            :data:`odecore.FIXED_METHODS`) or as an odecore solver object
            (``odecore.RK4()``).
        n_steps: the number of steps ``N_t``.
        epsilon: the time scale (the block integrates over ``[0, epsilon]`` in the
            time of ``R``).

    The ``state_dict`` saves ``epsilon`` and the manifestation (the solver's method
    name and tableau, ``N_t``) in ``<block>._extra_state`` (see
    ``get_extra_state``). Loading one saved with another ``epsilon`` is refused
    (the weights would compute another function), and so is one saved with another
    manifestation, whatever the number of evaluations (its running statistics were
    measured at other stages and depths): both before anything loads. The same
    tableau under another name (``heun`` and ``heun2``) is the same manifestation. A
    ``state_dict`` saved before contnet kept the manifestation loads as before, and
    one saved before it kept ``epsilon``, with the block's own.

    Raises:
        ValueError: for an unknown method or an adaptive solver, a missing ``basis``, a
            ``basis`` other than a ContinuousModule's own, a basis on an interval other
            than ``[0, 1]``, or a ``n_steps`` or ``epsilon`` that is not positive.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from odelayers.basis import PiecewiseConstant
        >>> from contnet import OdeBlock
        >>> block = OdeBlock(nn.Linear(4, 4), basis=PiecewiseConstant(pieces=2),
        ...                  solver="rk4", n_steps=2)
        >>> block(torch.zeros(3, 4)).shape
        torch.Size([3, 4])
    """

    continuous: ContinuousModule
    carried: Tensor
    _version = 3  # 2: epsilon in the state_dict; 3: and the manifestation

    def __init__(
        self,
        module: nn.Module | ContinuousModule,
        *,
        basis: AbstractBasis | None = None,
        solver: Solver = "euler",
        n_steps: int = 1,
        epsilon: float = 1.0,
    ) -> None:
        super().__init__()
        if isinstance(module, ContinuousModule):
            if basis is not None and basis != module.basis:
                raise ValueError(
                    f"`basis` {basis!r} is not the ContinuousModule's own {module.basis!r}; "
                    "a ContinuousModule brings its basis: leave `basis` out, or change the "
                    "module's with its change_basis()."
                )
            self.continuous = module
        else:
            if basis is None:
                raise ValueError("`basis` is required unless `module` is a ContinuousModule.")
            self.continuous = ContinuousModule(module, basis)
        if (self.basis.t0, self.basis.t1) != (0.0, 1.0):
            raise ValueError(
                f"`basis` must live on [0, 1], the depths at which an OdeBlock evaluates "
                f"the weights, got {self.basis!r}."
            )
        self.method, self.solver = fixed_solver(solver)
        self.n_steps = _positive_int("n_steps", n_steps)
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"`epsilon` must be a positive number, got {epsilon!r}.")
        self.epsilon = float(epsilon)
        self._warned = False
        initial = self.continuous.initial_statistics()
        n = self.n_evaluations
        for name, value in initial.items():
            self.register_buffer(_stat(name), value.expand(n, *value.shape).clone())
        # Per evaluation: True while its statistics were carried over from another
        # manifestation and are not that one's measured ones, until data passes through
        # this one (a buffer: a saved model keeps it).
        self.register_buffer("carried", torch.zeros(n, dtype=torch.bool))

    @property
    def basis(self) -> AbstractBasis:
        """The depth basis of the weights."""
        return self.continuous.basis

    @property
    def tableau(self) -> ButcherTableau:
        """The Butcher tableau of the solver."""
        return self.solver.tableau

    def stage_times(self) -> list[list[float]]:
        """The depths at which each step's stages evaluate the weights.

        Step ``k`` covers ``[k h, (k + 1) h]``, ``h = 1 / n_steps``, and a stage at
        ``c_i`` reads the weights at ``t_k + c_i h``. A stage at the end of its step
        (``c = 1``: Heun, RK4, RK4-3/8) reads the weights' limit from the left there,
        so a step never sees the next piece of a piecewise-constant basis and the
        solver keeps its order when the steps land on the pieces' ends.
        """
        return [[t for t, _ in self._stage_points(k)] for k in range(self.n_steps)]

    @property
    def n_evaluations(self) -> int:
        """How many times a forward pass evaluates ``R``: ``n_steps`` times the stages."""
        return self.n_steps * len(stage_offsets(self.solver, 1.0 / self.n_steps))

    def evaluation_points(self) -> list[tuple[float, bool]]:
        """``(depth, left)`` of every evaluation of ``R`` in a forward pass, in order
        (``left``: the weights' limit from the left at that depth)."""
        return [p for k in range(self.n_steps) for p in self._stage_points(k)]

    def statistics(self) -> dict[str, Tensor]:
        """The running statistics of ``R`` per evaluation: ``{name: (n_evaluations, ...)}``
        for every name of ``continuous.statistic_names`` (views of the buffers)."""
        return {name: getattr(self, _stat(name)) for name in self.continuous.statistic_names}

    def reset_statistics(self) -> None:
        """Every evaluation's running statistics back to those of a freshly reset ``R``
        (batch norm: mean 0, variance 1, no batch counted)."""
        fresh = copy.deepcopy(self.continuous.module)
        for m in fresh.modules():
            if isinstance(m, _NormBase):
                m.reset_running_stats()
        own = dict(fresh.named_buffers())
        with torch.no_grad():
            for name, value in self.statistics().items():
                value.copy_(own[name])
        self.carried.fill_(False)

    def _per_evaluation(self) -> Iterator[dict[str, Tensor] | None]:
        """The statistics of each evaluation in turn (``None`` when ``R`` has none)."""
        stats = {name: t.unbind(0) for name, t in self.statistics().items()}
        for i in range(self.n_evaluations):
            yield {name: t[i] for name, t in stats.items()} if stats else None

    def _stage_points(self, k: int) -> list[tuple[float, bool]]:
        """``(depth, left)`` of every stage of step ``k``, in the order they are taken."""
        h = 1.0 / self.n_steps
        return [self._depth(k, s, h) for s in stage_offsets(self.solver, h)]

    def _depth(self, k: int, s: float, h: float) -> tuple[float, bool]:
        """The depth of local time ``s`` of step ``k``, and whether to read the left limit."""
        if s == h:
            return (k + 1) / self.n_steps, True
        return _on_jump(self.basis, k / self.n_steps + s), False

    def field(
        self,
        t: float,
        x: Tensor,
        *,
        left: bool = False,
        slices: dict[str, tuple[Tensor, ...]] | None = None,
        statistics: dict[str, Tensor] | None = None,
    ) -> Tensor:
        """``epsilon * R(x; theta(t))`` (``left``: the weights' limit from the left).

        ``statistics``: the running statistics of the call, as for
        :meth:`contnet.ContinuousModule.forward`. A forward pass gives each evaluation its own;
        without them batch norms in ``R`` normalise with the statistics of ``x``.

        ``R`` runs in this block's mode (train or eval), also where a manifestation
        that shares it (:meth:`manifest`) was put in the other.
        """
        if self.continuous.module.training != self.training:
            self.continuous.train(self.training)
        out: Tensor = self.continuous(t, x, left=left, slices=slices, statistics=statistics)
        return out * self.epsilon

    def _step_field(
        self,
        k: int,
        h: float,
        slices: dict[str, tuple[Tensor, ...]],
        statistics: Iterator[dict[str, Tensor] | None],
        s: float,
        x: Tensor,
    ) -> Tensor:
        """The field of step ``k`` in its local time ``s`` in ``[0, h]``; each call takes
        the next evaluation's running statistics."""
        t, left = self._depth(k, s, h)
        return self.field(t, x, left=left, slices=slices, statistics=next(statistics))

    def forward(self, x: Tensor) -> Tensor:
        if (
            not self.training
            and not self._warned
            and self.continuous.statistic_names
            and bool(self.carried.any())
        ):
            self._warned = True
            warnings.warn(
                f"This OdeBlock ({self.method}, N_t = {self.n_steps}) is evaluated in eval() "
                "with batch-norm statistics carried over from another manifestation, not "
                "measured in this one; its outputs can be far from what the trained "
                "network computes. Call contnet.recalibrate(net, batches) on a few "
                "training batches first.",
                CarriedStatisticsWarning,
                stacklevel=2,
            )
        h = 1.0 / self.n_steps
        slices = self.continuous.slices()
        statistics = self._per_evaluation()
        for k in range(self.n_steps):
            f = functools.partial(self._step_field, k, h, slices, statistics)
            x = take_step(self.solver, f, h, x)
        if self.training:  # measured now, once the pass has gone through
            self.carried.fill_(False)
        return x

    def manifest(self, *, solver: Solver | None = None, n_steps: int | None = None) -> OdeBlock:
        """The same weights evaluated with another solver or step count (shared, not copied).

        The same (solver, ``N_t``) shares the running statistics too (the same solver:
        the same Butcher tableau, whatever the name or the solver object's other
        settings, which a fixed step does not use); another one gets its own, carried
        over by :func:`carry_statistics`.
        """
        out = copy.copy(self)
        out._modules = dict(self._modules)
        if solver is not None:
            out.method, out.solver = fixed_solver(solver)
        if n_steps is not None:
            out.n_steps = _positive_int("n_steps", n_steps)
        if same_manifestation(out, self):
            return out
        out._buffers = dict(self._buffers)
        source, target = self.evaluation_points(), out.evaluation_points()
        statistics = self.statistics()
        for name, value in carry_statistics(statistics, self.n_steps, target).items():
            out._buffers[_stat(name)] = value
        # Where a step of the source has one evaluation, at the very point of a target
        # evaluation (Euler refined and back), the carried statistics are that
        # measured one's: nothing to warn about there.
        was_carried = self.carried.tolist()
        counts = [v for v in statistics.values() if not v.is_floating_point()]
        seen = any(was_carried) or any(bool((c > 0).any()) for c in counts)
        single = len(source) == self.n_steps  # one evaluation per step: index = step
        exact = [
            single and source[k] == point and not was_carried[k]
            for k, point in zip(_steps(self.n_steps, target), target)
        ]
        carried = [seen and not e for e in exact]
        out._buffers["carried"] = torch.tensor(carried, device=self.carried.device)
        out._warned = False
        return out

    def extra_repr(self) -> str:
        return f"method={self.method!r}, n_steps={self.n_steps}, epsilon={self.epsilon}"

    def get_extra_state(self) -> Tensor:
        """``epsilon`` and the manifestation, for the ``state_dict``: a ``uint8`` tensor
        of the UTF-8 JSON ``{"epsilon", "method", "n_steps", "c", "a", "b"}`` (the
        solver's method name and Butcher tableau), a tensor as every other entry, for
        code that maps over them."""
        state = {"epsilon": self.epsilon, "method": self.method, **_manifestation(self)}
        return torch.tensor(list(json.dumps(state).encode()), dtype=torch.uint8)

    def set_extra_state(self, state: Any) -> None:
        """Check a saved ``epsilon`` and manifestation: others than this block's are refused."""
        check_block_state(self, state, "this OdeBlock")

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        *args: Any,
    ) -> None:
        check = functools.partial(check_block_state, self)
        check_saved_state(self, check, state_dict, prefix, local_metadata, "this OdeBlock")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> _IncompatibleKeys:
        """:meth:`torch.nn.Module.load_state_dict`, after :func:`check_statistics_format`
        and :func:`check_block_state` (nothing is loaded when either refuses)."""
        state = check_statistics_format(self, state_dict, strict=strict)
        check_epsilons(self, state)
        keys: _IncompatibleKeys = super().load_state_dict(state, strict, assign)
        return keys


_EXTRA_STATE = "_extra_state"  # torch's key of get_extra_state()


def saved_block_state(saved: Any) -> dict[str, Any]:
    """What an OdeBlock's ``_extra_state`` in a ``state_dict`` holds, decoded.

    ``{"epsilon": float}``, with ``"method"``, ``"n_steps"`` and the tableau's ``"c"``,
    ``"a"``, ``"b"`` where it was saved with the manifestation (a ``uint8`` tensor of
    JSON, see :meth:`OdeBlock.get_extra_state`); a float64 scalar, what contnet saved
    before it kept the manifestation, is ``epsilon`` alone.
    """
    if isinstance(saved, Tensor) and saved.dtype == torch.uint8 and saved.dim() == 1:
        state: dict[str, Any] = json.loads(bytes(saved.tolist()).decode())
        return state
    return {"epsilon": float(saved)}


def check_block_state(block: OdeBlock, saved: Any, where: str) -> None:
    """Refuse ``saved``, an OdeBlock's ``_extra_state`` from a ``state_dict``, unless its
    ``epsilon`` is ``block``'s (:func:`check_epsilon`) and so is its manifestation
    (:func:`check_manifestation`)."""
    state = saved_block_state(saved)
    check_epsilon(block, state["epsilon"], where)
    check_manifestation(block, state, where)


def check_epsilon(block: OdeBlock, saved: Any, where: str) -> None:
    """Refuse ``saved``, an ``epsilon`` from a ``state_dict``, unless it is ``block``'s.

    Raises:
        RuntimeError: naming ``where``, both values and what to build instead.
    """
    value = float(saved)
    if value != block.epsilon:
        raise RuntimeError(
            f"Cannot load a state_dict saved with epsilon = {value!r} into {where}, whose "
            f"epsilon is {block.epsilon!r}: the same weights compute another function. "
            f"Build the network with epsilon={value!r} (a refined network keeps the "
            "epsilon of the one it was refined from)."
        )


def check_manifestation(block: OdeBlock, saved: Mapping[str, Any], where: str) -> None:
    """Refuse ``saved``, a decoded ``_extra_state`` (:func:`saved_block_state`), unless it
    was saved with ``block``'s manifestation: the same tableau and ``N_t``.

    The running statistics of a block belong to its manifestation, one set per
    evaluation of ``R``: those of another one (Euler with ``N_t = 4`` and midpoint with
    2, RK4 and RK4-3/8) can have as many evaluations and were measured at other
    stages and depths. A ``state_dict`` saved before contnet kept the manifestation
    (``epsilon`` alone) is not checked.

    Raises:
        RuntimeError: naming ``where``, both manifestations and what to do instead.
    """
    if "n_steps" not in saved:
        return
    own = _manifestation(block)
    if {k: saved.get(k) for k in own} == own:
        return
    method, n_steps = saved["method"], saved["n_steps"]
    raise RuntimeError(
        f"Cannot load a state_dict saved with the manifestation ({method}, N_t = {n_steps}) "
        f"into {where}, manifested as ({block.method}, N_t = {block.n_steps}): its batch-norm "
        "running statistics were measured at the stages and depths of the other one. "
        f"Build the network with solver={method!r}, n_steps={n_steps} and load it there; "
        f"then, for ({block.method}, N_t = {block.n_steps}), take its "
        f"manifest(solver={block.method!r}, n_steps={block.n_steps}) (or contnet.refine, "
        "a copy), which carries the statistics over as a function of depth, and measure "
        "them with contnet.recalibrate(net, training_batches)."
    )


def same_manifestation(a: OdeBlock, b: OdeBlock) -> bool:
    """Whether two blocks evaluate ``R`` at the same stages and depths, in the same way:
    the same ``N_t`` and Butcher tableau (their running statistics are each other's)."""
    return _manifestation(a) == _manifestation(b)


def _manifestation(block: OdeBlock) -> dict[str, Any]:
    """``N_t`` and the solver's Butcher tableau as lists of floats: the identity of the
    manifestation in a ``state_dict`` (one for every name of one method)."""
    return {"n_steps": block.n_steps, **tableau_state(block.tableau)}


def tableau_state(t: ButcherTableau) -> dict[str, Any]:
    """A Butcher tableau as lists of floats, ``{"c", "a", "b"}``: what a ``state_dict``
    saves of a solver (one for every name of one method)."""
    return {
        "c": [float(v) for v in t.c],
        "a": [[float(v) for v in row] for row in t.a],
        "b": [float(v) for v in t.b],
    }


def check_epsilons(root: nn.Module, state_dict: Mapping[str, Any]) -> None:
    """:func:`check_block_state` for every OdeBlock of ``root`` that ``state_dict``
    saves, and the basis of every ContinuousModule
    (:meth:`~odelayers.basis.SavesBasis.check_saved_basis`), before anything is loaded."""
    for name, block in root.named_modules():
        key = f"{name}.{_EXTRA_STATE}" if name else _EXTRA_STATE
        if isinstance(block, OdeBlock) and key in state_dict:
            check_block_state(block, state_dict[key], name or "the OdeBlock")
        if isinstance(block, ContinuousModule) and key in state_dict:
            block.check_saved_basis(state_dict[key], name or "the ContinuousModule")


def check_statistics_format(
    root: nn.Module, state_dict: Mapping[str, Any], *, strict: bool
) -> Mapping[str, Any]:
    """``state_dict`` for ``root.load_state_dict``, refused or cut when its OdeBlocks'
    statistics are in contnet's format from before per-evaluation statistics.

    That format kept one set of batch-norm statistics per piece of the basis
    (``<block>.continuous.buffer__<name>``), where an OdeBlock keeps one per evaluation
    of ``R`` (``<block>.statistics__<name>``): they cannot be converted exactly.

    Args:
        root: the module that loads ``state_dict``.
        state_dict: what it loads.
        strict: as in :meth:`torch.nn.Module.load_state_dict`.

    Returns:
        ``state_dict`` itself, or without its old statistics when ``strict`` is false
        (the weights load, a warning says the statistics did not).

    Raises:
        RuntimeError: in one line, for the old format when ``strict`` (before anything
            is loaded).
    """
    old: dict[str, list[str]] = {}
    for name, block in root.named_modules():
        if isinstance(block, OdeBlock):
            prefix, names = f"{name}." if name else "", block.continuous.statistic_names
            keys = [f"{prefix}continuous.{kind}__{_attr(n)}" for n in names for kind in _KINDS]
            keys = [key for key in keys if key in state_dict]
            if keys and not any(prefix + _stat(n) in state_dict for n in names):
                old[name or "the OdeBlock"] = keys
    if not old:
        return state_dict
    message = (
        f"the state_dict is in contnet's format from before per-evaluation batch-norm "
        f"statistics in {', '.join(old)} (one set per piece, {next(iter(old.values()))[0]}, "
        "...; now one per evaluation of R)"
    )
    if strict:
        raise RuntimeError(
            f"Cannot load {message}. Load it with strict=False (the weights load, the "
            "statistics do not), then measure them: contnet.recalibrate(net, training_batches)."
        )
    warnings.warn(
        f"Loaded the weights only: {message}. The statistics are as they were; measure them "
        "with contnet.recalibrate(net, training_batches) before eval().",
        stacklevel=3,
    )
    dropped = {key for keys in old.values() for key in keys}
    state = OrderedDict((k, v) for k, v in state_dict.items() if k not in dropped)
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        state._metadata = metadata  # type: ignore[attr-defined]
    return state


_KINDS = ("buffer", "shared")  # the old format's names: per piece, and one batch count


def _stat(name: str) -> str:
    return "statistics__" + _attr(name)


def carry_statistics(
    statistics: dict[str, Tensor], n_steps: int, target: list[tuple[float, bool]]
) -> dict[str, Tensor]:
    """Running statistics for evaluations at ``target`` from a manifestation of ``n_steps``.

    The source's statistics become a function of depth: on each of its steps
    ``[k / n_steps, (k + 1) / n_steps)`` the mean over that step's evaluations. Each
    target evaluation ``(depth, left)`` takes the value of the step it lies in (a left
    limit, the last stage of a step, belongs to the step that ends there). Counters
    (``num_batches_tracked``) take the least over the step. As a function of depth
    the carried statistics give every manifestation the same ODE, so a convergence
    study in ``N_t`` keeps the solver's order; with ``N_t = M`` steps on ``M`` pieces
    they are each piece's statistics. They are not what data through the target manifestation
    gives: :func:`recalibrate` measures that.

    Args:
        statistics: ``{name: (n_steps * stages, ...)}`` in the order of evaluation, as
            :meth:`OdeBlock.statistics` gives them.
        n_steps: the source's ``N_t``.
        target: the ``(depth, left)`` of every target evaluation, in order.

    Returns:
        ``{name: (len(target), ...)}``, new tensors.

    Example:
        >>> import torch
        >>> from contnet import carry_statistics
        >>> stats = {"running_mean": torch.tensor([[0.0], [2.0], [4.0], [6.0]])}  # 2 steps x 2
        >>> carry_statistics(stats, 2, [(0.0, False), (0.5, True), (0.5, False)])["running_mean"]
        tensor([[1.],
                [1.],
                [5.]])
    """
    index = torch.tensor(_steps(n_steps, target))
    out = {}
    for name, value in statistics.items():
        per_step = value.reshape(n_steps, -1, *value.shape[1:])
        summary = per_step.mean(1) if value.is_floating_point() else per_step.amin(1)
        out[name] = summary[index.to(value.device)]
    return out


def _steps(n_steps: int, points: list[tuple[float, bool]]) -> list[int]:
    """The step of ``n_steps`` that each ``(depth, left)`` lies in (a left limit: the
    step that ends there)."""
    out = []
    for depth, left in points:
        position = depth * n_steps
        k = math.ceil(position - 1e-9) - 1 if left else math.floor(position + 1e-9)
        out.append(min(max(k, 0), n_steps - 1))
    return out
