"""Depth bases: functions ``phi_i(t)`` in which depth-varying weights are expanded.

A weight that varies with depth is ``theta(t) = sum_i alpha_i phi_i(t)``; the
coefficients ``alpha`` are the learned parameters (Massaroli et al. 2020, Sec. 3:
spectral / Galerkin and depth-discretised "stacked" Neural ODEs; Queiruga et al.
2020: ContinuousNet). Every basis lives on an interval ``[t0, t1]`` (default
``[0, 1]``) and evaluates to a tensor whose last dimension indexes the functions.

* :class:`Fourier`: ``1, cos(2 pi k s), sin(2 pi k s)``, ``k = 1..modes``.
* :class:`Legendre`, :class:`Chebyshev`: orthogonal polynomials up to ``degree``.
* :class:`PiecewiseConstant`: indicators of ``pieces`` equal sub-intervals; a
  weight in it is a stack of ``pieces`` constant-weight layers, discontinuous in
  depth at :attr:`~AbstractBasis.jump_ts`.
* :class:`PiecewiseLinear`: hat functions on ``pieces + 1`` equally spaced nodes;
  continuous, with kinks at the interior nodes.

:func:`project` maps coefficients from one basis to another by the L2 projection,
which is exact (to rounding) whenever the target spans the source: more Fourier
modes, a higher degree, or a piecewise basis split into more pieces.
"""

from __future__ import annotations

import abc
import functools
import itertools
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "AbstractBasis",
    "Chebyshev",
    "Fourier",
    "Legendre",
    "PiecewiseConstant",
    "PiecewiseLinear",
    "SavesBasis",
    "check_saved_state",
    "project",
]


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    return value


@dataclass(frozen=True)
class AbstractBasis(abc.ABC):
    """A finite set of functions on ``[t0, t1]``.

    Args:
        t0: start of the depth interval.
        t1: end of the depth interval, greater than ``t0``. Both are kept as Python
            floats (an ``int`` or a NumPy number is converted), so that equal bases
            have the same ``repr``, which a saved ``state_dict`` compares
            (:class:`SavesBasis`).

    Raises:
        ValueError: if ``t1 <= t0``.
    """

    t0: float = 0.0
    t1: float = 1.0

    def __post_init__(self) -> None:
        for name in ("t0", "t1"):
            value = getattr(self, name)
            if isinstance(value, numbers.Real) and not isinstance(value, Tensor):
                object.__setattr__(self, name, float(value))
        if not (math.isfinite(self.t0) and math.isfinite(self.t1) and self.t1 > self.t0):
            raise ValueError(
                f"The basis interval needs finite `t0 < t1`, got t0={self.t0!r}, t1={self.t1!r}."
            )

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """The number of functions."""

    @property
    def jump_ts(self) -> tuple[float, ...]:
        """Interior times where the functions are discontinuous (none for smooth bases)."""
        return ()

    @property
    def kink_ts(self) -> tuple[float, ...]:
        """Interior times where the functions are continuous but not smooth."""
        return ()

    def covers(self, lo: float, hi: float) -> bool:
        """Whether the depths ``[lo, hi]`` lie in the interval, to a rounding's slack (1e-9
        of its length: a stage time ``t_k + c h``, or an end computed another way, may
        round past an end).

        Example:
            >>> b = PiecewiseConstant(pieces=3, t0=0.0, t1=0.3)
            >>> b.covers(0.0, 0.1 + 0.2), b.covers(0.0, 0.31)
            (True, False)
        """
        slack = 1e-9 * (self.t1 - self.t0)
        return self.t0 - slack <= lo and hi <= self.t1 + slack

    def unit(self, t: Tensor) -> Tensor:
        """``t`` mapped to ``s = (t - t0) / (t1 - t0)``, in ``[0, 1]`` on the interval."""
        return (t - self.t0) / (self.t1 - self.t0)

    def __call__(
        self,
        t: Tensor | float,
        *,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> Tensor:
        """The functions at ``t``: shape ``(*t.shape, size)``.

        The functions are those of ``[t0, t1]``. At a ``t`` outside it, which is not
        checked here (on a GPU a check would wait for the queued work at every
        evaluation), the formulas give what they give: Fourier repeats, the
        polynomials grow, the piecewise-constant basis keeps its end pieces and the
        hat functions fall to 0 within one piece. The layers that evaluate a basis
        refuse depths outside its interval: :class:`~odelayers.NeuralODE` and
        :class:`~odelayers.AdaptiveDepthNODE` for their Galerkin layers,
        :class:`contnet.ContinuousModule` for its weights.

        Args:
            t: times, a tensor of any shape or a float.
            dtype: the result's dtype when ``t`` is a float (default torch's default).
            device: the result's device when ``t`` is a float.
        """
        if not isinstance(t, Tensor):
            t = torch.tensor(float(t), dtype=dtype or torch.get_default_dtype(), device=device)
        elif not t.is_floating_point():
            t = t.to(dtype or torch.get_default_dtype())
        return self._evaluate(t)

    @abc.abstractmethod
    def _evaluate(self, t: Tensor) -> Tensor: ...


@dataclass(frozen=True)
class Fourier(AbstractBasis):
    """``1, cos(2 pi k s), sin(2 pi k s)`` for ``k = 1..modes``, ``s`` the unit depth.

    ``2 * modes + 1`` functions, smooth and periodic on the interval.

    Args:
        modes: the number of harmonics, positive.

    Example:
        >>> import torch
        >>> from odelayers.basis import Fourier
        >>> Fourier(modes=2)(torch.tensor([0.0, 0.25])).round(decimals=4) + 0.0
        tensor([[ 1.,  1.,  0.,  1.,  0.],
                [ 1.,  0.,  1., -1.,  0.]])
    """

    modes: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        _positive_int("modes", self.modes)

    @property
    def size(self) -> int:
        return 2 * self.modes + 1

    def _evaluate(self, t: Tensor) -> Tensor:
        k = torch.arange(1, self.modes + 1, dtype=t.dtype, device=t.device)
        angle = 2 * math.pi * self.unit(t)[..., None] * k
        out = torch.stack([torch.cos(angle), torch.sin(angle)], dim=-1).flatten(-2)
        return torch.cat([torch.ones_like(angle[..., :1]), out], dim=-1)


@dataclass(frozen=True)
class _Polynomials(AbstractBasis):
    """Polynomials ``p_0 .. p_degree`` of ``x = 2 s - 1`` by a three-term recurrence."""

    degree: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.degree, bool) or not isinstance(self.degree, int) or self.degree < 0:
            raise ValueError(f"`degree` must be a non-negative integer, got {self.degree!r}.")

    @property
    def size(self) -> int:
        return self.degree + 1

    def _evaluate(self, t: Tensor) -> Tensor:
        x = 2 * self.unit(t) - 1
        ps = [torch.ones_like(x), x]
        for n in range(1, self.degree):
            ps.append(self._next(x, ps[n], ps[n - 1], n))
        return torch.stack(ps[: self.size], dim=-1)

    @staticmethod
    @abc.abstractmethod
    def _next(x: Tensor, p: Tensor, previous: Tensor, n: int) -> Tensor:
        """``p_{n+1}`` from ``p = p_n`` and ``previous = p_{n-1}``."""


@dataclass(frozen=True)
class Legendre(_Polynomials):
    """Legendre polynomials ``P_0 .. P_degree`` of ``x = 2 s - 1``.

    Orthogonal on the interval; ``degree + 1`` functions.

    Args:
        degree: the highest degree, ``>= 0``.

    Example:
        >>> import torch
        >>> from odelayers.basis import Legendre
        >>> Legendre(degree=2)(torch.tensor([0.0, 0.5, 1.0]))
        tensor([[ 1.0000, -1.0000,  1.0000],
                [ 1.0000,  0.0000, -0.5000],
                [ 1.0000,  1.0000,  1.0000]])
    """

    @staticmethod
    def _next(x: Tensor, p: Tensor, previous: Tensor, n: int) -> Tensor:
        # Bonnet: (n+1) P_{n+1} = (2n+1) x P_n - n P_{n-1}
        return ((2 * n + 1) * x * p - n * previous) / (n + 1)


@dataclass(frozen=True)
class Chebyshev(_Polynomials):
    """Chebyshev polynomials of the first kind ``T_0 .. T_degree`` of ``x = 2 s - 1``.

    Args:
        degree: the highest degree, ``>= 0``.

    Example:
        >>> import torch
        >>> from odelayers.basis import Chebyshev
        >>> Chebyshev(degree=2)(torch.tensor([0.0, 0.5, 1.0]))
        tensor([[ 1., -1.,  1.],
                [ 1.,  0., -1.],
                [ 1.,  1.,  1.]])
    """

    @staticmethod
    def _next(x: Tensor, p: Tensor, previous: Tensor, n: int) -> Tensor:
        return 2 * x * p - previous  # T_{n+1} = 2 x T_n - T_{n-1}


@dataclass(frozen=True)
class PiecewiseConstant(AbstractBasis):
    """Indicators of ``pieces`` equal sub-intervals: a stack of constant-weight layers.

    Piece ``i`` covers ``[t_i, t_{i+1})``, the last one also its right end: at a
    boundary of :attr:`jump_ts` (rounded to the dtype of ``t``) the function of the
    later piece is 1, and at any time below it, the nearest included, that of the
    earlier one. That is the left limit odecore evaluates where a step ends on a jump
    (the jump time less one unit in the last place). Solvers must land on
    :attr:`jump_ts` (``NeuralODE`` passes them on), where the weights change.

    Args:
        pieces: the number of pieces, positive.

    Example:
        >>> import torch
        >>> from odelayers.basis import PiecewiseConstant
        >>> b = PiecewiseConstant(pieces=2)
        >>> b(torch.tensor([0.0, 0.49, 0.5, 1.0]))
        tensor([[1., 0.],
                [1., 0.],
                [0., 1.],
                [0., 1.]])
        >>> b.jump_ts
        (0.5,)
    """

    pieces: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        _positive_int("pieces", self.pieces)

    @property
    def size(self) -> int:
        return self.pieces

    @property
    def jump_ts(self) -> tuple[float, ...]:
        return _interior_nodes(self.t0, self.t1, self.pieces)

    def _evaluate(self, t: Tensor) -> Tensor:
        # The number of jump times at or below t, compared in t's dtype, in which odecore
        # also makes a jump time a tensor: exact, where scaling t to the unit interval
        # rounds (and a tolerance took odecore's left limit, one ulp below a jump in
        # float64, for the next piece).
        jumps = _times_on(self.jump_ts, t.dtype, t.device)
        index = torch.bucketize(t, jumps, right=True)
        return torch.nn.functional.one_hot(index, self.pieces).to(t.dtype)


@dataclass(frozen=True)
class PiecewiseLinear(AbstractBasis):
    """Hat functions on ``pieces + 1`` equally spaced nodes: continuous, linear between.

    A weight in this basis takes the value of its coefficient ``i`` at node ``i``
    and interpolates linearly in between.

    Args:
        pieces: the number of linear pieces, positive.

    Example:
        >>> import torch
        >>> from odelayers.basis import PiecewiseLinear
        >>> PiecewiseLinear(pieces=2)(torch.tensor([0.0, 0.25, 1.0]))
        tensor([[1.0000, 0.0000, 0.0000],
                [0.5000, 0.5000, 0.0000],
                [0.0000, 0.0000, 1.0000]])
    """

    pieces: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        _positive_int("pieces", self.pieces)

    @property
    def size(self) -> int:
        return self.pieces + 1

    @property
    def kink_ts(self) -> tuple[float, ...]:
        return _interior_nodes(self.t0, self.t1, self.pieces)

    def _evaluate(self, t: Tensor) -> Tensor:
        x = self.unit(t)[..., None] * self.pieces
        nodes = torch.arange(self.size, dtype=t.dtype, device=t.device)
        return torch.clamp(1 - torch.abs(x - nodes), min=0)


def _interior_nodes(t0: float, t1: float, pieces: int) -> tuple[float, ...]:
    return tuple(t0 + (t1 - t0) * i / pieces for i in range(1, pieces))


def _times_on(times: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """``times`` as a tensor of ``dtype`` on ``device``, made once: a field evaluates its
    basis at every stage, and a tensor made from Python numbers there is a copy from
    the host each time (on a GPU, one that waits for the queued work). A compiled
    graph holds it as a constant."""
    if torch.compiler.is_compiling():
        return torch.tensor(times, dtype=dtype, device=device)
    return _cached_times(times, dtype, device)


@functools.lru_cache(maxsize=64)
def _cached_times(times: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    with torch.inference_mode(False):  # usable outside inference mode too
        return torch.tensor(times, dtype=dtype, device=device)


@functools.cache
def _gauss_legendre(n: int) -> tuple[Tensor, Tensor]:
    """Nodes and weights of n-point Gauss-Legendre quadrature on [-1, 1] (Golub-Welsch)."""
    k = torch.arange(1, n, dtype=torch.float64)
    off = k / torch.sqrt(4 * k**2 - 1)
    nodes, vectors = torch.linalg.eigh(torch.diag(off, 1) + torch.diag(off, -1))
    return nodes, 2 * vectors[0] ** 2


def _quadrature(a: AbstractBasis, b: AbstractBasis) -> tuple[Tensor, Tensor]:
    """Points and weights integrating products of functions of ``a`` and ``b`` exactly.

    The interval is split at every jump and kink of either basis; on each piece both
    are polynomials or trigonometric polynomials of bounded degree, which a Gauss
    rule of this many points integrates to rounding.
    """
    cuts = sorted({a.t0, a.t1, *a.jump_ts, *a.kink_ts, *b.jump_ts, *b.kink_ts})
    n = 24 + 2 * max(a.size, b.size)
    x, w = _gauss_legendre(n)
    points, weights = [], []
    for lo, hi in itertools.pairwise(cuts):
        points.append(lo + (hi - lo) * (x + 1) / 2)
        weights.append(w * (hi - lo) / 2)
    return torch.cat(points), torch.cat(weights)


def project(coefficients: Tensor, source: AbstractBasis, target: AbstractBasis) -> Tensor:
    """Coefficients in ``target`` of the function given in ``source``: the L2 projection.

    ``theta(t) = sum_i c_i phi_i(t)`` with ``c = coefficients`` (basis index first)
    becomes ``sum_j d_j psi_j(t)``, the best approximation in ``target`` in the L2
    sense on the common interval. When ``target`` spans ``source`` (more modes, a
    higher degree, a piecewise basis split into a multiple of its pieces) the
    function is unchanged, to rounding.

    Args:
        coefficients: shape ``(source.size, *shape)``.
        source: the basis the coefficients are in.
        target: the basis to express them in; the same interval as ``source``.

    Returns:
        Coefficients of shape ``(target.size, *shape)``, in ``coefficients``' dtype and
        on its device (the projection itself is computed on the host, in float64).

    Raises:
        ValueError: if the intervals differ or the shapes do not match.

    Example:
        >>> import torch
        >>> from odelayers.basis import PiecewiseConstant, project
        >>> project(torch.tensor([1.0, 3.0]), PiecewiseConstant(pieces=2),
        ...         PiecewiseConstant(pieces=4))
        tensor([1., 1., 3., 3.])
    """
    if (source.t0, source.t1) != (target.t0, target.t1):
        raise ValueError(
            f"`source` lives on [{source.t0}, {source.t1}] but `target` on "
            f"[{target.t0}, {target.t1}]; projection needs the same interval."
        )
    if coefficients.dim() == 0 or coefficients.shape[0] != source.size:
        raise ValueError(
            f"`coefficients` must have the basis index first, of size {source.size} for "
            f"{source!r}; got shape {tuple(coefficients.shape)}."
        )
    t, w = _quadrature(source, target)
    phi = source(t)  # (q, n)
    psi = target(t)  # (q, m)
    gram = psi.T @ (w[:, None] * psi)  # (m, m)
    cross = psi.T @ (w[:, None] * phi)  # (m, n)
    # On the host, where the quadrature is: the same numbers whatever the device.
    flat = coefficients.reshape(source.size, -1).to(device="cpu", dtype=torch.float64)
    out: Tensor = torch.linalg.solve(gram, cross @ flat)
    # solve() answers in column-major order; a row-major result keeps every slice
    # contiguous (strided running statistics, for one, send batch norm down a slow path).
    out = out.reshape(target.size, *coefficients.shape[1:])
    return out.to(device=coefficients.device, dtype=coefficients.dtype).contiguous()


class SavesBasis(nn.Module):
    """A module whose ``state_dict`` saves its ``basis`` and refuses another one.

    Coefficients mean nothing without their basis: those of one basis loaded into
    another of the same size (Legendre and Fourier of 3 functions, 4 constant pieces
    and 3 linear ones) are another weight function. The basis is saved as the module's
    extra state (``<module>._extra_state``, its ``repr`` in UTF-8 as a ``uint8``
    tensor, a tensor as every other entry for code that maps over them) and checked
    before anything of the module loads. A ``state_dict`` saved before the basis was
    loads as it did. The Galerkin layers and contnet's ``ContinuousModule`` are such
    modules.
    """

    basis: AbstractBasis
    _version = 2  # 2: the basis in the state_dict

    def get_extra_state(self) -> Tensor:
        """The basis, for the ``state_dict``."""
        return torch.tensor(list(repr(self.basis).encode()), dtype=torch.uint8)

    def set_extra_state(self, state: Any) -> None:
        """Check a saved basis: another one than this module's is refused."""
        self.check_saved_basis(state, type(self).__name__)

    def check_saved_basis(self, saved: Any, where: str) -> None:
        """Refuse ``saved``, a basis from a ``state_dict``, unless it is this module's.

        Raises:
            RuntimeError: naming ``where``, both bases and what to build instead.
        """
        if isinstance(saved, Tensor):
            saved = bytes(saved.tolist()).decode(errors="replace")
        if saved != repr(self.basis):
            raise RuntimeError(
                f"Cannot load a state_dict saved with the basis {saved} into {where}, whose "
                f"basis is {self.basis!r}: the same coefficients are another weight "
                "function. Build it with the saved basis (a refined network has the basis "
                "its refinement gave it)."
            )

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        *args: Any,
    ) -> None:
        check_saved_state(
            self, self.check_saved_basis, state_dict, prefix, local_metadata, type(self).__name__
        )
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)


def check_saved_state(
    module: nn.Module,
    check: Callable[[Any, str], None],
    state_dict: dict[str, Any],
    prefix: str,
    local_metadata: dict[str, Any],
    name: str,
) -> None:
    """For a module that saves what its weights mean as its extra state and refuses
    another (:class:`SavesBasis`, contnet's ``OdeBlock`` and ``ResidualUnit``): from its
    ``_load_from_state_dict``, before anything of it loads, ``check(saved, where)`` of the
    extra state ``state_dict`` holds under ``prefix`` (``where``: the prefix, or ``name``
    at the root); a ``state_dict`` saved before the module's ``_version`` 2, which holds
    none, takes the module's own, so that it loads as it did."""
    key = prefix + "_extra_state"
    if key in state_dict:
        check(state_dict[key], prefix.rstrip(".") or name)
    elif (local_metadata.get("version") or 0) < 2:
        state_dict[key] = module.get_extra_state()
