"""The libraries under test behind one interface: ``y(t1)`` of a :class:`Method` in a
gradient mode. A peer is imported when the benchmark runs, if it imports cleanly."""

from __future__ import annotations

import abc
import functools
import importlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import odecore
import torch
from torch import Tensor, nn

from .._io import whole
from ._problems import CountingField, last_state

MODES = ("forward", "backprop", "adjoint", "adjoint_seminorm", "checkpoint", "reversible")
"""How a solve runs: ``forward`` (no gradient), or forward plus backward with a gradient method."""

GRADIENT_MODES = MODES[1:]

PEERS = ("torchdiffeq", "torchode", "torchdyn")
LIBRARIES = ("odecore", *PEERS)


PEER_METHODS: dict[str, dict[str, str]] = {
    "dopri5": {"torchdiffeq": "dopri5", "torchode": "Dopri5", "torchdyn": "dopri5"},
    "rk4": {"torchdiffeq": "rk4", "torchdyn": "rk4"},
}
"""The methods the peers run too, by odecore's name, with each peer's own name for it (torchode's:
its step class). torchdiffeq's ``rk4`` is Kutta's 3/8 rule; torchode has no rk4."""

STIFF_METHODS = ("kvaerno5", "rodas4", "rodas5p", "scipy:Radau", "scipy:BDF", "scipy:LSODA")
"""The implicit adaptive methods of the stiff problems: odecore's own and SciPy's, by
odecore's ``scipy:`` backend. They run in odecore alone, forward only."""

METHOD_NAMES = (*PEER_METHODS, *STIFF_METHODS)


@functools.cache
def _adaptive(name: str) -> bool:
    """Whether odecore's solver of the method ``name`` adapts its steps."""
    try:
        return odecore.OdeSpec.from_method(name).solver.adaptive
    except ImportError:  # a scipy: method without SciPy (SciPy chooses its own steps)
        return True


class OdeintKwargs(TypedDict, total=False):
    """A :class:`Method` as odecore's ``odeint`` (and ``OdeSpec.from_method``) takes it."""

    method: str
    rtol: float
    atol: float
    options: dict[str, int]


@dataclass(frozen=True)
class Method:
    """A solver configuration: a method of :data:`METHOD_NAMES`, adaptive at ``rtol`` and
    ``atol`` (with ``max_steps``, odeint's ``max_num_steps``, a budget past which it fails),
    or fixed with ``n_steps`` uniform steps."""

    name: str
    rtol: float | None = None
    atol: float | None = None
    n_steps: int | None = None
    max_steps: int | None = None

    def __post_init__(self) -> None:
        if self.name not in METHOD_NAMES:
            raise ValueError(
                f"Unknown method {self.name!r}; the benchmark knows {', '.join(METHOD_NAMES)}."
            )
        if not self.adaptive:
            if not whole(1)(self.n_steps):
                raise ValueError(f"`{self.name}` needs a positive `n_steps`, got {self.n_steps!r}.")
            if self.max_steps is not None:
                raise ValueError(
                    f"`max_steps` is for adaptive methods; `{self.name}` takes `n_steps`."
                )
        elif self.rtol is None or self.atol is None:
            raise ValueError(f"`{self.name}` needs `rtol` and `atol`.")
        elif self.max_steps is not None and not whole(1)(self.max_steps):
            raise ValueError(
                f"`max_steps` must be a positive number of steps, got {self.max_steps!r}."
            )

    @property
    def adaptive(self) -> bool:
        """Whether the method adapts its steps, asked of odecore's solver of it."""
        return _adaptive(self.name)

    @property
    def odeint_kwargs(self) -> OdeintKwargs:
        """``method``, ``rtol``, ``atol`` and ``options`` as odecore's ``odeint`` takes them."""
        if not self.adaptive:
            assert self.n_steps is not None  # checked in __post_init__
            return {"method": self.name, "options": {"n_steps": self.n_steps}}
        assert self.rtol is not None and self.atol is not None  # checked in __post_init__
        kwargs: OdeintKwargs = {"method": self.name, "rtol": self.rtol, "atol": self.atol}
        if self.max_steps is not None:
            kwargs["options"] = {"max_num_steps": self.max_steps}
        return kwargs

    @property
    def spec(self) -> odecore.OdeSpec:
        """The configuration as odecore's spec, by :meth:`odecore.OdeSpec.from_method`."""
        return odecore.OdeSpec.from_method(**self.odeint_kwargs)

    @property
    def stiff(self) -> bool:
        """Whether this is one of the implicit methods of the stiff problems."""
        return self.name in STIFF_METHODS

    @property
    def label(self) -> str:
        """The name in tables and JSON: ``dopri5@1e-06``, ``rk4x100``, ``rodas4@1e-06/1e-10``,
        ``dopri5@1e-06,max_steps=10000``."""
        if not self.adaptive:
            return f"{self.name}x{self.n_steps}"
        tol = f"{self.rtol:g}" if self.rtol == self.atol else f"{self.rtol:g}/{self.atol:g}"
        budget = "" if self.max_steps is None else f",max_steps={self.max_steps}"
        return f"{self.name}@{tol}{budget}"


class UnsupportedError(Exception):
    """A library cannot run this method or gradient mode; the message says why."""


class Library(abc.ABC):
    """One ODE library as the benchmark drives it."""

    name: str = ""
    version: str = ""
    compiles: bool = False
    """Whether its first call of a configuration compiles (timed apart, never in the medians)."""

    def unsupported(self, method: Method, mode: str) -> str | None:
        """Why this library cannot run ``method`` with ``mode``; ``None`` if it can."""
        if method.stiff and mode != "forward":
            return f"{method.name} is timed forward only (the stiff problems' sweep)"
        if mode == "adjoint_seminorm" and not method.adaptive:
            return "seminorm applies to adaptive methods only"
        return None

    def solve(
        self, field: nn.Module, y0: Tensor, t0: float, t1: float, method: Method, mode: str
    ) -> Tensor:
        """``y(t1)``, with the graph (or the adjoint's hook) that ``mode`` asks for; in mode
        ``forward`` under the caller's ``torch.no_grad()``.

        Raises:
            ValueError: for a mode that is not one of :data:`MODES`.
            UnsupportedError: where :meth:`unsupported` says why this library cannot.
        """
        if mode not in MODES:
            raise ValueError(f"Unknown mode {mode!r}; known modes: {', '.join(MODES)}.")
        reason = self.unsupported(method, mode)
        if reason is not None:
            raise UnsupportedError(reason)
        return self._solve(field, y0, t0, t1, method, mode)

    @abc.abstractmethod
    def _solve(
        self, field: nn.Module, y0: Tensor, t0: float, t1: float, method: Method, mode: str
    ) -> Tensor:
        """:meth:`solve` of a method and mode that this library supports."""


def _times(t0: float, t1: float, like: Tensor) -> Tensor:
    return torch.tensor([t0, t1], dtype=like.dtype, device=like.device)


def _odecore_solve(
    field: nn.Module,
    y0: Tensor,
    t0: float,
    t1: float,
    method: Method,
    *,
    gradient: odecore.AbstractGradient | None = None,
    compile: bool = False,
) -> odecore.Solution:
    """odecore's ``solve`` of ``method`` with ``gradient``, or (``compile``) compiled."""
    spec = method.spec
    return odecore.solve(
        field,
        y0,
        t0=t0,
        t1=t1,
        solver=spec.solver,
        controller=spec.controller,
        gradient=gradient,
        dt0=spec.step_size(t0, t1),
        max_steps=spec.max_steps,
        compile=compile,
    )


_SOLVE_GRADIENTS = {"checkpoint": odecore.Checkpoint(), "reversible": odecore.Reversible()}
"""The gradient of each mode that only odecore's ``solve`` has: the peers lack these."""


def _odeint(
    module: Any, field: nn.Module, y0: Tensor, t: Tensor, mode: str, **kwargs: Any
) -> Tensor:
    """``y(t1)`` through torchdiffeq's signature (torchdiffeq's own, or odecore's facade):
    ``odeint`` forward and by backprop, ``odeint_adjoint`` by the adjoint, with seminorm
    in mode ``adjoint_seminorm``."""
    if mode in ("forward", "backprop"):
        return last_state(module.odeint(field, y0, t, **kwargs))
    if mode == "adjoint_seminorm":
        kwargs["adjoint_options"] = {"norm": "seminorm"}
    return last_state(module.odeint_adjoint(field, y0, t, **kwargs))


class OdecoreLibrary(Library):
    """odecore through torchdiffeq's signature (``odeint``, ``odeint_adjoint``) and ``solve``."""

    name = "odecore"
    version = odecore.__version__

    def _solve(
        self, field: nn.Module, y0: Tensor, t0: float, t1: float, method: Method, mode: str
    ) -> Tensor:
        if mode in _SOLVE_GRADIENTS:
            gradient = _SOLVE_GRADIENTS[mode]
            return last_state(_odecore_solve(field, y0, t0, t1, method, gradient=gradient).ys)
        return _odeint(odecore, field, y0, _times(t0, t1, y0), mode, **method.odeint_kwargs)


COMPILED = "odecore-compiled"
"""The name of :class:`CompiledOdecoreLibrary` in the benchmark's tables."""


class CompiledOdecoreLibrary(Library):
    """odecore's ``solve(..., compile=True)`` where it compiles (explicit methods, fixed
    or adaptive, forward or backprop). The graph calls the field without Python, so a
    :class:`CountingField` is unwrapped and its ``nfe`` advanced by the solve's own count."""

    name = COMPILED
    version = odecore.__version__
    compiles = True

    def unsupported(self, method: Method, mode: str) -> str | None:
        if mode not in ("forward", "backprop"):
            return f"the benchmark times compile=True with backprop only, not {mode}"
        return super().unsupported(method, mode)

    def _solve(
        self, field: nn.Module, y0: Tensor, t0: float, t1: float, method: Method, mode: str
    ) -> Tensor:
        inner = field.field if isinstance(field, CountingField) else field
        with warnings.catch_warnings():
            # An eager fallback (no C++ compiler, a field that does not trace) would
            # be timed as the compiled solve: it fails the cell instead.
            warnings.simplefilter("error", odecore.CompileFallbackWarning)
            sol = _odecore_solve(inner, y0, t0, t1, method, compile=True)
        if isinstance(field, CountingField):
            field.nfe += sol.stats.nfe
        return last_state(sol.ys)


class _PeerLibrary(Library):
    """A peer library, imported by the caller: versioned by its module, no checkpointing."""

    def __init__(self, module: Any) -> None:
        self.version = str(getattr(module, "__version__", "unknown"))
        self.module = module

    def own_name(self, method: Method) -> str | None:
        """This peer's name for ``method`` (:data:`PEER_METHODS`); ``None`` if it has none."""
        return PEER_METHODS.get(method.name, {}).get(self.name)

    def unsupported(self, method: Method, mode: str) -> str | None:
        if method.name not in PEER_METHODS:
            return f"{method.name} runs in odecore only"
        if method.max_steps is not None:
            return "a step budget (`max_steps`) is set through odecore only"
        if mode in _SOLVE_GRADIENTS:
            return f"{self.name} has no {mode} gradient method"
        return super().unsupported(method, mode)


class TorchdiffeqLibrary(_PeerLibrary):
    """torchdiffeq's ``odeint`` and ``odeint_adjoint``. Its ``rk4`` is Kutta's 3/8 rule."""

    name = "torchdiffeq"

    def _solve(
        self, field: nn.Module, y0: Tensor, t0: float, t1: float, method: Method, mode: str
    ) -> Tensor:
        kwargs: dict[str, object] = {"method": self.own_name(method)}
        if method.adaptive:
            kwargs.update(rtol=method.rtol, atol=method.atol)
        else:
            n = method.n_steps
            assert n is not None

            def grid(func: Any, y: Tensor, tt: Tensor) -> Tensor:
                # Exactly n uniform steps between the ends torchdiffeq asks about (in the
                # adjoint's backward solve those are negated, reversed times).
                return torch.linspace(float(tt[0]), float(tt[-1]), n + 1, dtype=tt.dtype)

            kwargs["options"] = {"grid_constructor": grid}
        return _odeint(self.module, field, y0, _times(t0, t1, y0), mode, **kwargs)


class _FlatField(nn.Module):
    """torchode's view of a field: state ``(batch, features)`` and time ``(batch,)``, each
    sample at its own time (its own steps), handed to the field as it is."""

    def __init__(self, field: nn.Module, shape: torch.Size) -> None:
        super().__init__()
        self.field = field
        self.shape = shape

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        out: Tensor = self.field(t, y.reshape(self.shape))
        return out.reshape(y.shape)


class TorchodeLibrary(_PeerLibrary):
    """torchode: ``AutoDiffAdjoint`` (backprop) and ``JointBacksolveAdjoint`` (adjoint).

    torchode steps every sample with its own step size; the whole batch is still
    evaluated together, so one call of the field counts as one evaluation.
    """

    name = "torchode"

    def unsupported(self, method: Method, mode: str) -> str | None:
        if method.name in PEER_METHODS and self.own_name(method) is None:
            return f"torchode has no {method.name}"
        if mode == "adjoint_seminorm":
            return "torchode's adjoint has no seminorm option"
        return super().unsupported(method, mode)

    def _solve(
        self, field: nn.Module, y0: Tensor, t0: float, t1: float, method: Method, mode: str
    ) -> Tensor:
        to = self.module
        batch = y0.shape[0]
        term = to.ODETerm(_FlatField(field, y0.shape))
        step = getattr(to, PEER_METHODS[method.name][self.name])(term=term)  # required above
        controller = to.IntegralController(atol=method.atol, rtol=method.rtol, term=term)
        t_eval = _times(t0, t1, y0).expand(batch, 2)
        problem = to.InitialValueProblem(y0=y0.reshape(batch, -1), t_eval=t_eval)
        if mode in ("forward", "backprop"):
            solver = to.AutoDiffAdjoint(step, controller)
        else:
            solver = to.JointBacksolveAdjoint(term, step, controller)
        sol = solver.solve(problem)
        return sol.ys[:, -1].reshape(y0.shape)  # type: ignore[no-any-return]


class _ArgsField(nn.Module):
    """torchdyn's view of a field: it calls ``field(t, x, args=...)``."""

    def __init__(self, field: nn.Module) -> None:
        super().__init__()
        self.field = field

    def forward(self, t: Tensor, x: Tensor, args: Any = None) -> Tensor:
        out: Tensor = self.field(t, x)
        return out


class TorchdynLibrary(_PeerLibrary):
    """torchdyn's ``NeuralODE`` with ``sensitivity="autograd"`` or ``"adjoint"``."""

    name = "torchdyn"

    def _solve(
        self, field: nn.Module, y0: Tensor, t0: float, t1: float, method: Method, mode: str
    ) -> Tensor:
        neural_ode = importlib.import_module("torchdyn.core").NeuralODE
        if method.adaptive:
            t_span = _times(t0, t1, y0)
            tol = {"atol": method.atol, "rtol": method.rtol}
            tol |= {"atol_adjoint": method.atol, "rtol_adjoint": method.rtol}
        else:
            assert method.n_steps is not None
            t_span = torch.linspace(t0, t1, method.n_steps + 1, dtype=y0.dtype)
            # Fixed steps ignore tolerances, but torchdyn warns on every backward solve
            # whose tolerances differ from its odeint's defaults (NeuralODE's do).
            tol = {"atol_adjoint": 1e-3, "rtol_adjoint": 1e-3}
        sensitivity = "autograd" if mode in ("forward", "backprop") else "adjoint"
        model = neural_ode(
            _ArgsField(field),
            solver=self.own_name(method),
            solver_adjoint=self.own_name(method),
            sensitivity=sensitivity,
            seminorm=mode == "adjoint_seminorm",
            return_t_eval=False,
            **tol,
        )
        return model(y0, t_span)[-1]  # type: ignore[no-any-return]


_PEER_LIBRARIES = {cls.name: cls for cls in (TorchdiffeqLibrary, TorchodeLibrary, TorchdynLibrary)}


def discover(
    names: Sequence[str] | None = None, *, compiled: bool = False
) -> tuple[list[Library], dict[str, str]]:
    """The libraries of ``names`` (default: all) that import cleanly, odecore first and
    ``compiled`` odecore after it, and ``{name: reason}`` for each of the others.

    Raises:
        ValueError: for a name that is not in :data:`LIBRARIES`, or ``compiled``
            without odecore.
    """
    wanted = list(LIBRARIES if names is None else names)
    unknown = [n for n in wanted if n not in LIBRARIES]
    if unknown:
        raise ValueError(f"Unknown libraries {unknown}; known libraries: {', '.join(LIBRARIES)}.")
    if compiled and "odecore" not in wanted:
        raise ValueError("The compiled odecore is compared with odecore: keep odecore in `names`.")
    available: list[Library] = [OdecoreLibrary()] if "odecore" in wanted else []
    if compiled:  # odecore is wanted too, checked above
        available.append(CompiledOdecoreLibrary())
    missing: dict[str, str] = {}
    for name in PEERS:
        if name not in wanted:
            continue
        try:
            module = importlib.import_module(name)
            if name == "torchdyn":
                importlib.import_module("torchdyn.core")
        except ImportError as exc:
            missing[name] = f"not installed ({describe_error(exc)})"
            continue
        except Exception as exc:  # a broken install must not stop the benchmark
            missing[name] = f"import failed ({describe_error(exc)})"
            continue
        available.append(_PEER_LIBRARIES[name](module))
    return available, missing


def describe_error(exc: BaseException, limit: int = 200) -> str:
    """``TypeName: first line of the message``, short enough for a table note."""
    line = (str(exc).strip().splitlines() or [""])[0]
    if len(line) > limit:
        line = line[: limit - 3] + "..."
    return f"{type(exc).__name__}: {line}"
