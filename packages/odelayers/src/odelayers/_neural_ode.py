"""``NeuralODE``: an ``nn.Module`` that solves ``dx/dt = f(t, x)`` from its input.

It composes odecore's objects (solver, controller, gradient method) and adds what
layers need: jump times collected from the field's depth layers, the input handed
to data-control layers, integrals along the solve, and NFE counters.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import odecore
import torch
from torch import Tensor, nn
from torch.nn.functional import softplus

from . import _augment, _fields
from ._fields import DataControl, DepthLayer, depth_layers
from ._integrals import IntegralTerm, JacobianFrobenius, KineticEnergy

Field = Callable[[Tensor, Tensor], Tensor]


class _Bound(nn.Module):
    """The field with its layers' and integrands' bindings set for every evaluation and
    put back after it (a module, so that the solve knows the field's parameters and
    buffers): a backward pass leaves no input of its solve behind in the layers.

    ``slots``: ``(table, key, tensor)``, entries of the field's modules' ``_parameters``
    and ``_buffers`` as the forward solve found them, set the same way once it is over
    (:attr:`pinned`): a backward pass that evaluates the field again (the adjoint,
    checkpointing) computes with the tensors of the forward pass, also where those were
    swapped in for it alone (``torch.func.functional_call``) and are back out by then.

    ``modes``: ``(module, training)`` of the field's modules as the forward solve found
    them, set the same way once it is over: a backward pass after ``eval()`` (or
    ``train()``) evaluates the same function as its forward pass (batch norm with the
    batch's statistics, not the running ones)."""

    def __init__(
        self,
        field: Field,
        bindings: Sequence[tuple[object, str, Tensor]],
        slots: Sequence[tuple[dict[str, Any], str, Tensor]] = (),
        modes: Sequence[tuple[nn.Module, bool]] = (),
    ) -> None:
        super().__init__()
        self.field = field
        self.bindings = tuple(bindings)
        self.slots = tuple(slots)
        self.modes = tuple(modes)
        self.pinned = False  # set once the forward solve is over

    def forward(self, t: Tensor, y: Any) -> Any:
        kept = [getattr(layer, name) for layer, name, _ in self.bindings]
        slots = self.slots if self.pinned else ()
        modes = self.modes if self.pinned else ()
        held = [table[key] for table, key, _ in slots]
        trained = [module.training for module, _ in modes]
        for layer, name, value in self.bindings:
            setattr(layer, name, value)
        for table, key, value in slots:
            table[key] = value
        for module, training in modes:
            module.training = training
        try:
            return self.field(t, y)
        finally:
            for (layer, name, _), value in zip(self.bindings, kept):
                setattr(layer, name, value)
            for (table, key, _), value in zip(slots, held):
                table[key] = value
            for (module, _), training in zip(modes, trained):
                module.training = training


class _WithIntegrals(nn.Module):
    """``(t, (x, q_1, ..., q_k)) -> (f, g_1, ..., g_k)``: the field plus its integrands."""

    def __init__(self, field: Field, terms: Sequence[IntegralTerm]) -> None:
        super().__init__()
        self.field = field
        self.terms = tuple(terms)
        self.jacobian = any(term.needs_jacobian for term in self.terms)

    def forward(self, t: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        x = state[0]
        if not self.jacobian:
            f = self.field(t, x)
            return (f, *(term(t, x, f) for term in self.terms))
        outer = torch.is_grad_enabled()
        if not (outer and x.requires_grad) and torch._C._are_functorch_transforms_active():
            names = ", ".join(type(term).__name__ for term in self.terms if term.needs_jacobian)
            raise odecore.ConfigurationError(
                f"{names} differentiates the field by the state with torch.autograd inside "
                "the solve, from a leaf made of the state, which torch.func's transforms "
                "(grad, vjp, jacrev of the layer's parameters through functional_call) "
                "cannot run. Differentiate the layer with torch.autograd.grad or backward()."
            )
        with torch.enable_grad():
            # A leaf to differentiate by, unless x already carries the graph we need.
            xg = x if outer and x.requires_grad else x.detach().requires_grad_()
            f = self.field(t, xg)
            qs = [term(t, xg, f) for term in self.terms]
        if not outer:  # a solve without a graph (the adjoint's forward pass)
            return (f.detach(), *(q.detach() for q in qs))
        return (f, *qs)


class NeuralODE(nn.Module):
    """A Neural ODE layer: ``forward(x)`` solves ``dz/dt = f(t, z)``, ``z(t0) = x``.

    How it solves is one :class:`odecore.OdeSpec` (solver, controller, gradient
    method, step size, step budget), given as ``spec`` or field by field; with
    neither it is odecore's default: :class:`odecore.Dopri5` at ``rtol = 1e-7``,
    ``atol = 1e-9``, differentiated by backpropagation through the steps. Neural ODEs
    usually train at looser tolerances and often with the adjoint (memory constant
    in the number of steps), e.g.
    ``spec=odecore.OdeSpec.from_method("dopri5", rtol=1e-3, atol=1e-3, gradient="adjoint")``.

    The layer passes on to the solve the depths where weights jump
    (piecewise-constant Galerkin layers, :meth:`DepthLayer.jump_ts`), so steps land on
    them, and, for an adaptive solve, those where they have a kink (piecewise-linear
    ones, :meth:`DepthLayer.kink_ts`), whose steps end there too; it hands its input
    to every :class:`DataControl` layer of the field; and it integrates the
    ``integrals`` terms (regularisers, depth-distributed losses) as extra state,
    readable in :attr:`integrals` after the forward pass.

    Args:
        vector_field: ``f(t, x)``, usually an ``nn.Module``; ``t`` is a 0-dim tensor.
        t0: the start depth.
        t1: the end depth.
        spec: how to solve; default ``odecore.OdeSpec()``. The arguments
            ``solver``, ``controller``, ``gradient``, ``dt0`` and ``max_steps``
            replace its fields (a new ``solver`` without a ``controller`` gets the
            solver's default controller).
        solver: an odecore solver (the spec's ``solver``).
        controller: an odecore controller (the spec's ``controller``).
        gradient: ``odecore.Autograd()`` (backprop through the steps),
            ``odecore.Adjoint()``, ``odecore.Checkpoint()`` or ``odecore.Reversible()``.
            Their ``params`` default to every tensor requiring grad that the field
            reads: its parameters, the control input of data-control layers, and any
            tensor it closes over or holds unregistered. For a field made of
            ``torch.nn``'s and odelayers' layers alone, the parameters and the control
            are known to be all; for any other, odecore finds them in the forward
            solve's evaluations (which then run with a graph, walked and dropped).
            Given ``params`` get the layer's input to its data-control layers (and the
            depths of :class:`AdaptiveDepthNODE`) added: the caller cannot name them. Where
            these are computed from one another or from ``params`` (the depths from
            the input), the leaves they are computed from are added instead, so that
            no gradient is counted twice; given ``params`` computed from one another
            are refused (``ValueError``). Their backward pass evaluates the field with
            the parameters and buffers its forward pass had, also those that
            ``torch.func.functional_call`` swapped in for the forward pass alone, and
            in the training mode it had (``eval()`` before ``backward()`` leaves the
            gradient that of the forward pass's function).
        dt0: the first (adaptive) or every (fixed) step size.
        ts: output depths; ``forward`` then returns the trajectory at them, shape
            ``(len(ts), *x.shape)``, instead of the state at ``t1``. The depths are
            numbers: a tensor ``ts``, ``t0`` or ``t1`` that requires grad is refused.
        jump_ts: more depths where the field is discontinuous.
        integrals: terms integrated along the solve over ``[t0, t1]``
            (:class:`KineticEnergy`, :class:`JacobianFrobenius`, :class:`IntegralLoss`).
        max_steps: the solve's step budget.

    Raises:
        ValueError: from ``forward``, if the solve's interval (``[t0, t1]``, or
            ``[t1, t0]`` where it runs backwards) leaves the interval of the basis of a
            :class:`GalerkinLinear` or :class:`GalerkinConv2d` in the field: the
            weights are not defined there.
        odecore.ConfigurationError: from ``forward``, for a
            ``PIDController(per_sample=True)`` where the solve's steps must end at
            given depths (jumps and kinks of the field's layers' weights, ``jump_ts``),
            which steps of every sample's own cannot.

    Attributes:
        spec: the resolved :class:`odecore.OdeSpec`; ``solver``, ``controller``,
            ``gradient``, ``dt0`` and ``max_steps`` read its fields.
        nfe: forward function evaluations of the last ``forward`` (0 where it raised).
        integrals: ``{term.name: (batch,) tensor}`` of the last ``forward``: the
            integrals over ``[t0, t1]``, whatever the output depths ``ts`` (empty where
            it raised). A copy of the layer (``copy.deepcopy``, pickling) holds them
            without the forward pass's graph.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> import odecore
        >>> from odelayers import DepthConcat, DepthSequential, NeuralODE
        >>> field = DepthSequential(DepthConcat(), nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2))
        >>> layer = NeuralODE(field, gradient=odecore.Adjoint())
        >>> y = layer(torch.randn(8, 2))
        >>> y.sum().backward()
        >>> y.shape, layer.nfe > 0, layer.nfe_backward > 0
        (torch.Size([8, 2]), True, True)
    """

    spec: odecore.OdeSpec

    def __init__(
        self,
        vector_field: Field,
        *,
        t0: float = 0.0,
        t1: float = 1.0,
        spec: odecore.OdeSpec | None = None,
        solver: odecore.AbstractSolver | None = None,
        controller: odecore.AbstractController | None = None,
        gradient: odecore.AbstractGradient | None = None,
        dt0: float | None = None,
        ts: Sequence[float] | Tensor | None = None,
        jump_ts: Sequence[float] | None = None,
        integrals: Sequence[IntegralTerm] = (),
        max_steps: int | None = None,
    ) -> None:
        super().__init__()
        if not callable(vector_field):
            raise TypeError(f"`vector_field` must be callable as f(t, x), got {vector_field!r}.")
        for name, times in (("t0", t0), ("t1", t1), ("ts", ts), ("jump_ts", jump_ts)):
            if isinstance(times, Tensor) and times.requires_grad:
                raise ValueError(
                    f"`{name}` requires grad, but the layer keeps its depths as numbers and "
                    f"no gradient would reach them; pass `{name}.detach()`, or differentiate "
                    "output times with odecore.odeint or odecore.SaveAt(ts=tensor)."
                )
        if not (math.isfinite(t0) and math.isfinite(t1)) or t0 == t1:
            raise ValueError(f"`t0` and `t1` must be finite and different, got {t0!r}, {t1!r}.")
        for i, term in enumerate(integrals):
            if not isinstance(term, IntegralTerm):
                raise TypeError(f"`integrals[{i}]` must be an IntegralTerm, got {term!r}.")
        names = [term.name for term in integrals]
        if len(set(names)) != len(names):
            raise ValueError(f"`integrals` need distinct names, got {names}.")
        self.vector_field = vector_field
        self.t0, self.t1 = float(t0), float(t1)
        if spec is not None and not isinstance(spec, odecore.OdeSpec):
            raise TypeError(f"`spec` must be an odecore.OdeSpec, got {spec!r}.")
        given: dict[str, Any] = {
            name: value
            for name, value in (
                ("solver", solver),
                ("controller", controller),
                ("gradient", gradient),
                ("dt0", dt0),
                ("max_steps", max_steps),
            )
            if value is not None
        }
        if "solver" in given and "controller" not in given:
            given["controller"] = None  # the new solver's default
        self.spec = replace(spec if spec is not None else odecore.OdeSpec(), **given)
        self.ts = (
            None
            if ts is None
            else [float(v) for v in (ts.tolist() if isinstance(ts, Tensor) else ts)]
        )
        self.jump_ts = tuple(float(v) for v in (jump_ts or ()))
        self.integral_terms = tuple(integrals)
        self.nfe = 0
        self.integrals: dict[str, Tensor] = {}
        self._stats: odecore.Stats | None = None

    @property
    def solver(self) -> odecore.AbstractSolver:
        """The spec's solver."""
        return self.spec.solver

    @property
    def controller(self) -> odecore.AbstractController | None:
        """The spec's step-size controller."""
        return self.spec.controller

    @property
    def gradient(self) -> odecore.AbstractGradient:
        """The spec's gradient method."""
        return self.spec.gradient

    @property
    def dt0(self) -> float | None:
        """The spec's first (adaptive) or fixed step size."""
        return self.spec.dt0

    @property
    def max_steps(self) -> int:
        """The spec's step budget."""
        return self.spec.max_steps

    @property
    def nfe_backward(self) -> int:
        """Backward function evaluations through the solve of the last forward pass,
        summed over the backward passes through it (0 before one, or where it raised).

        A backward pass through the output of an earlier forward pass (a layer called
        twice before one ``backward``) is not counted here.
        """
        return 0 if self._stats is None else self._stats.nfe_backward

    def _solve_layers(self) -> Iterator[tuple[str, DepthLayer]]:
        """The field's depth layers that see the depth of the solve itself (not those
        inside a rescaled field, where every sample has its own depths)."""
        if not isinstance(self.vector_field, nn.Module):
            return
        rescaled = {
            id(m)
            for r in self.vector_field.modules()
            if isinstance(r, _Rescaled)
            for m in r.modules()
        }
        for name, layer in self.vector_field.named_modules():
            if isinstance(layer, DepthLayer) and id(layer) not in rescaled:
                yield name, layer

    def _depth_jumps(self, t0: float, t1: float) -> list[float]:
        """The jumps in ``[t0, t1]``: the layer's own and those of the field's depth
        layers of :meth:`_solve_layers`, each of which is checked to hold the solve's
        depths (:func:`_check_basis_interval`)."""
        lo, hi = min(t0, t1), max(t0, t1)
        found = set(self.jump_ts)
        for name, layer in self._solve_layers():
            _check_basis_interval(name, layer, lo, hi, "The layer's solve reaches depths")
            found.update(layer.jump_ts())
        # A jump at an end too: the stage there must read the limit from inside.
        return sorted(t for t in found if lo <= t <= hi)

    def _depth_kinks(self, t0: float, t1: float) -> list[float]:
        """The kinks strictly inside ``(t0, t1)`` of the field's depth layers of
        :meth:`_solve_layers` (:meth:`DepthLayer.kink_ts`, a
        :class:`~odelayers.basis.PiecewiseLinear` basis), where an adaptive solve's
        steps must end: a step across a kink loses its order, and its embedded error
        estimate with it, so the controller accepts errors far above its tolerance."""
        lo, hi = min(t0, t1), max(t0, t1)
        found = {t for _, layer in self._solve_layers() for t in layer.kink_ts()}
        return sorted(t for t in found if lo < t < hi)

    def _bindings(self, terms: Sequence[IntegralTerm]) -> list[tuple[object, str, Tensor]]:
        """The inputs the field's layers and the integrands read besides parameters:
        ``(owner, attribute, value)``.

        The control of data-control layers, the depths of adaptive depth and the
        integrands' :attr:`~IntegralTerm.per_solve` attributes (Hutchinson's noise).
        They are set before every evaluation of the field, backward passes included,
        so a later forward pass of the same layer cannot change an earlier one's
        gradient.
        """
        out: list[tuple[object, str, Tensor]] = [
            (term, name, getattr(term, name))
            for term in terms
            for name in term.per_solve
            if isinstance(getattr(term, name, None), Tensor)
        ]
        if not isinstance(self.vector_field, nn.Module):
            return out
        for layer in depth_layers(self.vector_field):
            name = _BOUND.get(type(layer))
            value = getattr(layer, name) if name is not None else None
            if name is not None and isinstance(value, Tensor):
                out.append((layer, name, value))
        return out

    def _gradient(
        self, field: nn.Module | Field, bindings: list[tuple[object, str, Tensor]]
    ) -> odecore.AbstractGradient:
        """The gradient method of the solve.

        Without ``params``, an :class:`odecore.Adjoint`, :class:`odecore.Checkpoint` or
        :class:`odecore.Reversible` gets the field's parameters and the inputs the layer
        hands its layers (:meth:`_bindings`) only where these are provably all the tensors requiring
        grad that the field reads (:func:`_own_tensors`); otherwise the method is passed
        on as it is and odecore finds them in every evaluation of the forward solve (a
        tensor a module holds unregistered, what a plain function closes over). A fixed
        list that missed one would leave its gradient unset. Given ``params`` get the
        bound inputs, which the caller cannot name, added. A list in which one tensor
        is computed from another takes the leaves of the bound inputs instead
        (:func:`_independent`).

        Raises:
            ValueError: if given ``params`` are computed from one another.
        """
        method = self.gradient
        if not isinstance(method, _WITH_PARAMS):
            return method
        bound = [value for _, _, value in bindings if value.requires_grad]
        given = method.params
        if given is None:
            given = _own_tensors(field, [value for _, _, value in bindings])
            if given is None:
                return method
        # Once each: odecore returns a tensor's whole gradient for every time it is
        # listed, and two data-control layers read the same input.
        params = _distinct((*given, *bound))
        if not _independent(params):
            # odecore differentiates each of `params` along every path of the graph,
            # through the others too, and autograd then carries each one's gradient on
            # to the tensors it was computed from: a path through two of them (the depths
            # of AdaptiveDepthNODE, computed from the input that its data-control layer
            # reads) counts twice. "Computed from" is exact in autograd's terms: the
            # graph of one reaches the node of another, the only edge along which
            # autograd carries a gradient on (one walk of the graph that computed the
            # bound inputs, per forward pass). Leaves are computed from nothing, so the
            # leaves of the bound inputs, which odecore's own search would find, are
            # always right; only the backward pass then differentiates that graph too.
            params = _distinct((*given, *_leaves(bound)))
        if _independent(params):
            return replace(method, params=params)
        if method.params is None:  # an own buffer computed from a parameter
            return method
        raise ValueError(
            f"`gradient` ({type(method).__name__}) has `params` computed from one another; "
            "the gradient along a path through two of them would be counted twice. "
            "Pass leaf tensors (parameters), or leave `params` unset."
        )

    def _data_controls(self) -> list[DataControl]:
        """The :class:`DataControl` layers among the field's modules."""
        if not isinstance(self.vector_field, nn.Module):
            return []
        return [m for m in depth_layers(self.vector_field) if isinstance(m, DataControl)]

    @contextlib.contextmanager
    def _control(self, x: Tensor) -> Iterator[None]:
        """``x`` as the control of the field's data-control layers for one solve, and
        their own control back after it: a layer that the field reaches otherwise (a
        closure the layer cannot see into) must not read the input of an earlier solve."""
        layers = self._data_controls()
        kept = [layer.control for layer in layers]
        for layer in layers:
            layer.control = x
        try:
            yield
        finally:
            for layer, control in zip(layers, kept):
                layer.control = control

    def _integrate(
        self,
        x: Tensor,
        t0: float,
        t1: float,
        terms: Sequence[IntegralTerm],
        ts: Sequence[float] | None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        self._forget()
        if not isinstance(x, Tensor):
            raise TypeError(f"The input must be a tensor, got {type(x).__name__}.")
        if x.dim() < 1:
            raise ValueError("The input must be batched: shape (batch, ...).")
        if x.dtype in (torch.float16, torch.bfloat16) and torch.is_autocast_enabled(x.device.type):
            x = x.float()  # under autocast the solver keeps a float32 state
        jumps = self._depth_jumps(t0, t1)  # checks the Galerkin layers' intervals first
        # A fixed step is the caller's grid; an adaptive one must not step across a kink.
        kinks = (
            []
            if isinstance(self.controller, odecore.ConstantStepSize)
            else self._depth_kinks(t0, t1)
        )
        controller = self.controller
        if (
            (jumps or kinks)
            and isinstance(controller, odecore.PIDController)
            and controller.per_sample
        ):
            raise odecore.ConfigurationError(
                f"The solve's steps must end at the depths {sorted({*jumps, *kinks})}, "
                "where the weights of the field's depth layers jump or have a kink (or "
                "the layer's `jump_ts`), but `PIDController(per_sample=True)` gives "
                "every sample its own steps, which cannot: a step across them would "
                "be far less accurate than the tolerance. Drop `per_sample=True`, or "
                "use a smooth basis (Fourier, Legendre, Chebyshev)."
            )
        field: Any = self.vector_field
        state: Tensor | tuple[Tensor, ...] = x
        if terms:
            for term in terms:
                term.start(x)
            field = _WithIntegrals(self.vector_field, terms)
            state = (x, *(x.new_zeros(x.shape[0]) for _ in terms))
        # The integrals are over [t0, t1] whatever the output depths: with terms, the
        # state at t1 is saved after those at `ts` (odecore drops it where `ts` ends there).
        saveat = (
            odecore.SaveAt(ts=ts, t1=bool(terms)) if ts is not None else odecore.SaveAt(t1=True)
        )
        bindings = self._bindings(terms)
        gradient = self._gradient(field, bindings)
        pin = isinstance(gradient, _WITH_PARAMS)
        slots = _slots(self.vector_field) if pin else []
        modes = _modes(self.vector_field) if pin else []
        if bindings or slots or modes:
            field = _Bound(field, bindings, slots, modes)
        sol = odecore.solve(
            field,
            state,
            t0=t0,
            t1=t1,
            solver=self.solver,
            controller=self.controller,
            saveat=saveat,
            dt0=self.spec.step_size(t0, t1),
            jump_ts=jumps or None,
            step_ts=kinks or None,
            max_steps=self.max_steps,
            gradient=gradient,
            compile=self.spec.compile,
        )
        if isinstance(field, _Bound):
            field.pinned = True  # the backward pass's evaluations
        self.nfe = sol.stats.nfe
        self._stats = sol.stats
        ys = sol.ys
        if not terms:
            assert isinstance(ys, Tensor)
            return ys, {}
        assert isinstance(ys, tuple)
        xs = ys[0] if ts is None else ys[0][: len(ts)]
        return xs, {term.name: q[-1] for term, q in zip(terms, ys[1:])}

    def forward(self, x: Tensor) -> Tensor:
        with self._control(x):
            ys, self.integrals = self._integrate(x, self.t0, self.t1, self.integral_terms, self.ts)
        return ys if self.ts is not None else ys[-1]

    def extra_repr(self) -> str:
        return f"t0={self.t0}, t1={self.t1}, solver={self.solver!r}, gradient={self.gradient!r}"

    def _forget(self) -> None:
        """Drop what the last solve left (its NFE, statistics and integrals): they are not
        the next solve's, whether or not that one gets through."""
        self.nfe, self._stats, self.integrals = 0, None, {}

    def __getstate__(self) -> dict[str, Any]:
        # A copy (copy.deepcopy, pickle) takes the last integrals' values without the graph
        # of the forward pass, which belongs to this layer (deepcopy refuses such tensors).
        return _detached(self, "integrals")


def _slots(field: Field) -> list[tuple[dict[str, Any], str, Tensor]]:
    """The field's parameter and buffer entries, ``(table, key, tensor)``, that a solve
    pins for its backward pass (see :class:`_Bound`); none for a plain function."""
    if not isinstance(field, nn.Module):
        return []
    return [
        (table, key, value)
        for m in field.modules()
        for table in (m._parameters, m._buffers)
        for key, value in table.items()
        if value is not None
    ]


def _modes(field: Field) -> list[tuple[nn.Module, bool]]:
    """The training mode of each of the field's modules, ``(module, training)``, that a
    solve pins for its backward pass (see :class:`_Bound`); none for a plain function."""
    if not isinstance(field, nn.Module):
        return []
    return [(m, m.training) for m in field.modules()]


def _detached(module: nn.Module, name: str) -> dict[str, Any]:
    """``module``'s state for pickling with the tensor, or the dict of tensors, ``name``
    (a result of the last forward pass) detached from its graph."""
    state: dict[str, Any] = nn.Module.__getstate__(module)  # type: ignore[no-untyped-call]
    value = state.get(name)
    if isinstance(value, Tensor):
        value = value.detach()
    elif isinstance(value, dict):
        value = {k: v.detach() if isinstance(v, Tensor) else v for k, v in value.items()}
    return {**state, name: value}


def _check_basis_interval(
    name: str, layer: nn.Module, lo: float, hi: float, what: str, hint: str = ""
) -> None:
    """Refuse depths ``[lo, hi]`` outside the interval of a Galerkin layer's basis.

    Outside it a basis is not what it is on it (polynomials grow without bound, Fourier
    repeats, a piecewise-linear weight falls to 0, a piecewise-constant one keeps its
    end pieces), and the weights there were never meant.

    Raises:
        ValueError: naming the layer and its basis; ``what`` begins the message.
    """
    if not isinstance(layer, _fields._Galerkin):
        return
    basis = layer.basis
    if basis.covers(lo, hi):
        return
    raise ValueError(
        f"{what} [{lo!r}, {hi!r}], but the basis of the field's layer "
        f"{name or '(root)'!r} ({type(layer).__name__}) lives on [{basis.t0!r}, {basis.t1!r}]; "
        "outside its interval a basis is not what it is on it (polynomials grow, Fourier "
        "repeats, piecewise-linear weights fall to 0). Give the basis an interval holding "
        f"those depths, e.g. {type(basis).__name__}(..., t0={lo!r}, t1={hi!r}){hint}."
    )


def _check_no_jump_crossed(layers: Sequence[tuple[str, nn.Module]], lo: float, hi: float) -> None:
    """Refuse depths ``T(x)`` that require grad and pass a jump of a layer's weights.

    The solve runs every sample on ``s`` in ``[0, 1]`` at the depth ``t = T(x) s``, so a
    depth that moves moves the jump in ``s``; the gradient of the rescaled solve sees
    the weights' derivative in ``t``, which misses the jump's (a Dirac), and so the
    weights' change there (``0.48`` for ``0.26`` on a two-piece layer).

    Raises:
        ValueError: naming the layer and the jump.
    """
    for name, layer in layers:
        assert isinstance(layer, DepthLayer)
        crossed = [t for t in layer.jump_ts() if lo < t < hi and t != 0.0]
        if crossed:
            raise ValueError(
                f"The samples' depths T(x) span [{lo!r}, {hi!r}] and require grad, but the "
                f"weights of the field's layer {name.removeprefix('field.')!r} "
                f"({type(layer).__name__}) jump at {crossed[0]!r} inside it: the gradient of "
                "the depths would miss the jump (the rescaled solve differentiates the "
                "weights in depth, where a jump has no derivative), and be wrong. Use weights "
                "continuous in depth (e.g. the basis PiecewiseLinear for PiecewiseConstant), "
                "or depths without a gradient, e.g. "
                "positive=lambda z: torch.nn.functional.softplus(z).detach()."
            )


def _own_tensors(field: nn.Module | Field, bound: Sequence[Tensor]) -> list[Tensor] | None:
    """The field's parameters and buffers that require grad, when these and the
    ``bound`` inputs are provably every tensor requiring grad that it reads; else
    ``None`` (odecore then searches the forward solve's evaluations for them).

    Provable means: an ``nn.Module`` made only of ``torch.nn``'s own layers and
    odelayers' field layers (exact types: a subclass may read anything), no forward
    hook (one may read anything), no plain function held (a closure; an
    :class:`IntegralLoss`), and no tensor requiring grad held outside the parameters,
    buffers and bound inputs (an unregistered one, or a weight replaced by one).
    Knowing this costs no evaluation: the forward solve then runs without a graph,
    and the backward stops at the bound inputs instead of differentiating, at every
    evaluation, the graph that computed them (the layers before a data-controlled one).
    """
    if not isinstance(field, nn.Module):
        return None
    hooks = torch.nn.modules.module
    if getattr(hooks, "_global_forward_hooks", True) or getattr(
        hooks, "_global_forward_pre_hooks", True
    ):
        return None
    tensors = [q for q in (*field.parameters(), *field.buffers()) if q.requires_grad]
    known = {id(q) for q in (*tensors, *bound)}
    for module in field.modules():
        kind = type(module)
        if kind not in _PLAIN_LAYERS and not kind.__module__.startswith("torch.nn.modules."):
            return None
        if module._forward_hooks or module._forward_pre_hooks:
            return None
        for value in vars(module).values():
            if not isinstance(value, dict) and not _plain(value, known):
                return None
    return tensors


def _distinct(tensors: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """``tensors`` without repeats (by identity), in order."""
    return tuple({id(q): q for q in tensors}.values())


def _upstream(tensors: Sequence[Tensor]) -> tuple[set[Any], dict[int, Tensor]]:
    """The autograd nodes that the graphs of ``tensors`` reach along one edge or more
    (their own ``grad_fn`` not included, unless reached so), and the leaves requiring
    grad among them, by id."""
    reached: set[Any] = set()
    leaves: dict[int, Tensor] = {}
    stack = [q.grad_fn for q in tensors if q.grad_fn is not None]
    while stack:
        for node, _ in stack.pop().next_functions:
            if node is not None and node not in reached:
                reached.add(node)
                stack.append(node)
                leaf = getattr(node, "variable", None)  # an AccumulateGrad node
                if isinstance(leaf, Tensor):
                    leaves[id(leaf)] = leaf
    return reached, leaves


def _independent(params: Sequence[Tensor]) -> bool:
    """Whether no tensor of ``params`` is computed from another: no graph of one reaches
    another's node (its ``grad_fn``, or for a leaf its ``AccumulateGrad``), the edge by
    which autograd would carry its gradient on. ``params`` are distinct."""
    reached, leaves = _upstream(params)
    return not any(id(q) in leaves if q.grad_fn is None else q.grad_fn in reached for q in params)


def _leaves(tensors: Sequence[Tensor]) -> list[Tensor]:
    """The leaves requiring grad that ``tensors`` are, or are computed from."""
    return [q for q in tensors if q.grad_fn is None] + list(_upstream(tensors)[1].values())


def _plain(value: object, known: set[int]) -> bool:
    """Whether a layer's attribute is no tensor requiring grad but ``known`` ones, and
    no callable but odelayers' bases and parameter-free integrands (which hold no
    such tensor either: a basis's ``t0`` could be one)."""
    if isinstance(value, Tensor):
        return not value.requires_grad or id(value) in known
    if isinstance(value, (tuple, list)):
        return all(_plain(v, known) for v in value)
    if isinstance(value, nn.Module):  # one kept out of the module tree
        return False
    if callable(value):
        from ._cnf import NegativeTrace  # here: _cnf imports this module

        kind: type = type(value)
        known_kind = kind in {KineticEnergy, JacobianFrobenius, NegativeTrace} or (
            kind.__module__ == "odelayers.basis"
        )
        return known_kind and all(_plain(v, known) for v in vars(value).values())
    return True


class _Rescaled(DepthLayer):
    """``(s, z) -> T f(T s, z)``: the field on the unit interval for per-sample depths ``T``."""

    def __init__(self, field: Field) -> None:
        super().__init__()
        self.field = field
        self.depth: Tensor | None = None

    def forward(self, s: Tensor, z: Tensor) -> Tensor:
        if self.depth is None:  # pragma: no cover - AdaptiveDepthNODE sets it
            raise RuntimeError("The depths are not set.")
        depth = self.depth.to(z.dtype)
        out = self.field(depth * s, z)
        return out * depth.reshape(-1, *([1] * (z.dim() - 1)))

    def __getstate__(self) -> dict[str, Any]:
        return _detached(self, "depth")


class AdaptiveDepthNODE(nn.Module):
    """A Neural ODE whose every sample has its own depth ``T(x) >= 0``.

    A small network ``horizon`` maps the input to one number per sample, made
    non-negative by ``positive`` (softplus by default); the sample is integrated over
    ``[0, T(x)]`` (Massaroli et al. 2020, Sec. 5.2). The batch stays one solve: with
    ``s = t / T(x)`` every sample runs on ``s`` in ``[0, 1]`` under
    ``dz/ds = T(x) f(T(x) s, z)``, and gradients reach ``horizon`` through ``T``. The
    field receives the depth as a tensor of shape ``(batch,)``.

    Args:
        vector_field: ``f(t, z)``.
        horizon: ``nn.Module`` mapping the input to shape ``(batch,)`` or ``(batch, 1)``.
        positive: the map to non-negative depths (softplus; ``torch.relu`` lets a
            sample stop at depth 0).
        spec, solver, controller, gradient, dt0, max_steps: as for :class:`NeuralODE`.

    Raises:
        ValueError: from ``forward``, if a sample's depth leaves the interval of the
            basis of a :class:`GalerkinLinear` in the field (a sample runs over
            ``[0, T(x)]``): give the basis an interval holding every depth the horizon
            may give, or bound the depths with ``positive``. Also if depths that
            require grad pass a depth where the weights of a layer of the field jump
            (:meth:`DepthLayer.jump_ts`, a :class:`~odelayers.basis.PiecewiseConstant`
            basis): their gradient would miss the jump. Checking takes one look at the
            depths (a device sync), and only for fields with such layers.

    Attributes:
        depth: the depths ``T(x)`` of the last forward pass (in a copy of the layer,
            without that pass's graph; ``None`` where it raised before the solve).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from odelayers import AdaptiveDepthNODE
        >>> layer = AdaptiveDepthNODE(lambda t, z: -z, nn.Linear(1, 1))
        >>> layer(torch.ones(3, 1)).shape, layer.depth.shape
        (torch.Size([3, 1]), torch.Size([3]))
    """

    def __init__(
        self,
        vector_field: Field,
        horizon: nn.Module,
        *,
        positive: Callable[[Tensor], Tensor] = softplus,
        spec: odecore.OdeSpec | None = None,
        solver: odecore.AbstractSolver | None = None,
        controller: odecore.AbstractController | None = None,
        gradient: odecore.AbstractGradient | None = None,
        dt0: float | None = None,
        max_steps: int | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(horizon, nn.Module):
            raise TypeError(f"`horizon` must be an nn.Module, got {horizon!r}.")
        self.horizon = horizon
        self.positive = positive
        self.node = NeuralODE(
            _Rescaled(vector_field),
            spec=spec,
            solver=solver,
            controller=controller,
            gradient=gradient,
            dt0=dt0,
            max_steps=max_steps,
        )
        self.depth: Tensor | None = None

    @property
    def nfe(self) -> int:
        """Forward function evaluations of the last forward pass."""
        return self.node.nfe

    @property
    def nfe_backward(self) -> int:
        """Backward function evaluations through the solve of the last forward pass
        (see :attr:`NeuralODE.nfe_backward`)."""
        return self.node.nfe_backward

    def forward(self, x: Tensor) -> Tensor:
        # Those of an earlier forward pass are not this one's, whether or not it gets through.
        self.depth = None
        self.node._forget()
        depth = self.positive(self.horizon(x))
        if depth.numel() != x.shape[0]:
            raise ValueError(
                f"`horizon` must give one depth per sample, shape ({x.shape[0]},) or "
                f"({x.shape[0]}, 1); got {tuple(depth.shape)}."
            )
        depth = depth.reshape(x.shape[0])
        rescaled = self.node.vector_field
        assert isinstance(rescaled, _Rescaled)
        galerkin = [
            (name, m) for name, m in rescaled.named_modules() if isinstance(m, _fields._Galerkin)
        ]
        jumping = [
            (name, m)
            for name, m in rescaled.named_modules()
            if isinstance(m, DepthLayer) and m is not rescaled and m.jump_ts()
        ]
        if (galerkin or (jumping and depth.requires_grad)) and depth.numel():
            # A sample runs over [0, T(x)]; one look at the depths (a sync on a GPU).
            with torch.no_grad():
                lo = min(0.0, float(depth.min()))
                hi = max(0.0, float(depth.max()))
            for name, layer in galerkin:
                _check_basis_interval(
                    name.removeprefix("field."),
                    layer,
                    lo,
                    hi,
                    "The samples' depths T(x) span",
                    ", or bound the depths with `positive` (e.g. lambda z: t1 * torch.sigmoid(z))",
                )
            if depth.requires_grad:
                _check_no_jump_crossed(jumping, lo, hi)
        self.depth = rescaled.depth = depth
        out: Tensor = self.node(x)
        return out

    def __getstate__(self) -> dict[str, Any]:
        # The depths of the last forward pass, copied without its graph (as NeuralODE's
        # integrals): deepcopy refuses a tensor computed by a graph.
        return _detached(self, "depth")


_WITH_PARAMS = (odecore.Adjoint, odecore.Checkpoint, odecore.Reversible)
"""The gradient methods that differentiate a list of ``params``: the layer adds to a
given list the inputs it binds (:meth:`NeuralODE._gradient`)."""

_BOUND: dict[type, str] = {DataControl: "control", _Rescaled: "depth"}
"""Depth layers that read an input besides their parameters, and its attribute."""

_PLAIN_LAYERS: frozenset[type] = frozenset(
    {
        _fields.DepthSequential,
        _fields.DepthConcat,
        _fields.DataControl,
        _fields.GalerkinLinear,
        _fields.GalerkinConv2d,
        _augment.HigherOrder,
        _augment.ZeroAugmentation,
        _augment.InputLayerAugmentation,
        _augment.DropAugmented,
        _augment.ProjectAugmented,
        _WithIntegrals,
        _Rescaled,
    }
)
"""odelayers' layers that read no tensor but their parameters, buffers, arguments,
bound inputs (:data:`_BOUND`) and the attributes :func:`_plain` checks."""
