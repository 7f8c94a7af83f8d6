"""Newton's method for the stage equations of implicit Runge-Kutta methods.

An implicit method's step solves a nonlinear system for its stage increments. For a
method with ``s`` stages and the coefficient matrix ``A``, the increments
``Z_i = Y_i - y0`` satisfy

``G(Z) = Z - h (A ⊗ I) F(Z) = 0``,  with ``F(Z)_j = f(t0 + c_j h, y0 + Z_j)``.

A singly diagonally implicit method solves one stage at a time: the same system with
``s = 1`` and ``A = [[gamma]]`` (the explicit part of the stage goes into ``y0``).
This module solves such systems; the methods themselves live elsewhere.

**Simplified Newton.** Newton's iteration ``Z <- Z - M^{-1} G(Z)`` needs the
iteration matrix ``M = I - h (A ⊗ J)``. As in Hairer and Wanner's RADAU5, ``J`` is
the Jacobian of the field at the start of the step, ``∂f/∂y(t0, y0)``, for every
stage and every iteration, so that ``M`` is built and factorised at most once per step
and each iteration costs only ``s`` field evaluations and a back-substitution. The
convergence is then linear rather than quadratic, fast when ``h`` is small against
the scale on which ``J`` changes. Also as in RADAU5, ``J`` and the factorisation are
kept over several steps while the iteration contracts fast (``NewtonState``,
``Newton.reuse``): ``J`` is then that of an earlier step's start.

**Two ways to solve with M**, chosen by :attr:`Newton.jacobian`:

* ``"dense"``: ``J`` is formed from reverse-mode autograd (one vector-Jacobian
  product per state element, batched), ``M`` is assembled and LU-factorised with
  :func:`torch.linalg.lu_factor`. Exact and fast for small states; the memory is
  ``(s n)**2`` for ``n`` state elements.
* ``"krylov"``: matrix-free Newton-Krylov. ``M`` is never formed; products
  ``J v`` come from a linearisation of the field kept once per step (the
  double-backward trick: ``J v = d/dw <J^T w, v>``, so any field that autograd
  differentiates twice works), and :func:`gmres` solves ``M x = r`` with them. The
  memory is that of the field's graph plus ``restart`` vectors of size ``s n``.

``"auto"`` takes the dense path up to :attr:`Newton.dense_limit` state elements
(the whole batch counts: a batch is one system), Krylov above.

**Convergence.** The update ``dZ`` is measured in the norm of the solve,
``||dZ / (atol + rtol |y0|)||`` (root mean square). With the contraction rate
``theta_k = ||dZ_k|| / ||dZ_{k-1}||`` the error left after iteration ``k`` is at
most ``eta_k ||dZ_k||``, ``eta_k = theta_k / (1 - theta_k)`` (Hairer and Wanner,
Solving ODEs II, IV.8); the iteration stops when that bound is at most 1, i.e. the
stages are as accurate as the tolerance, or when an update is below ``kappa``
(the first one, before a rate is known), or when an update within the tolerance
stops shrinking (``theta_k >= 1``: the iterates wander at the rounding level). It
fails when ``theta_k >= 1`` twice in a row above the tolerance (the iteration does
not contract), on a non-finite update, after ``max_iters`` iterations, or at once
when the iteration matrix is singular (or GMRES makes no progress on it). A failed
step is not an exception: the method returns a NaN step carrying a
:class:`SolverError`, not raised (:func:`failure`), which an adaptive controller
rejects and retries smaller, and which ends a fixed-step solve with
``Status.NEWTON_FAILED`` (under ``throw=True`` a :class:`SolverError` that names the
step size, the time and the reason).

The default tolerances, ``1e-12`` (at least ``100 eps`` of the state's dtype), make
the stages of a fixed-step method far more accurate than its truncation error in
any useful step size, so the step size alone decides the accuracy, as for the
explicit methods. An adaptive method sets them from its own tolerance.

**Gradients.** Differentiating through the iterations would keep a graph per
iteration (memory), and it would differentiate the iteration rather than its
solution: the derivative of an unconverged simplified-Newton iterate is not that of
the stages. Instead the iteration runs without a graph, and :func:`attach_gradient`
gives the converged ``Z*`` the derivative of the exact solution from the implicit
function theorem, ``dZ/dθ = -M_*^{-1} ∂G/∂θ``, with ``M_*`` the *exact* iteration
matrix at ``Z*`` (the field's Jacobian at every stage). Its value stays ``Z*``
exactly, so a solve with and without a graph (backpropagation, or the checkpointed
replay) computes the same numbers.

References:
    E. Hairer, G. Wanner, Solving Ordinary Differential Equations II: Stiff and
    Differential-Algebraic Problems, 2nd ed., Springer 1996, Sections IV.8 and IV.10.
    Y. Saad, M. H. Schultz, GMRES, SIAM J. Sci. Stat. Comput. 7(3), 1986.
    D. A. Knoll, D. E. Keyes, Jacobian-free Newton-Krylov methods, J. Comput. Phys.
    193(2), 2004.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, final

import torch
from torch import Tensor

from ._errors import ConfigurationError, SolverError, Status, first_order
from ._solvers import SolveState, StepResult
from ._transforms import AUTOGRAD_ONLY, ReverseOnly
from ._transforms import apply as reverse_only

JacobianKind = Literal["auto", "dense", "krylov"]

Residual = Callable[[Tensor], Tensor]
"""``G(Z)``: the residual of the stage equations, for ``Z`` of shape ``(s, *state)``."""

_TOL = 1e-12  # the default rtol and atol
_SINGULAR = "the iteration matrix I - h (A ⊗ J) is singular"
_FLOOR = 100.0  # tolerances are at least this many eps of the state's dtype


@final
@dataclass(frozen=True)
class Newton:
    """Settings of the Newton iteration that solves an implicit method's stages.

    Args:
        max_iters: the most iterations per step; torchdiffeq's option of that name.
        rtol: the relative tolerance to which the stages are solved; ``None``:
            ``1e-12``.
        atol: the absolute tolerance; ``None``: ``1e-12``.
        kappa: an update whose scaled norm is at most this ends the iteration (the
            first one, before a contraction rate is known, or one at the rounding
            level).
        jacobian: how the linear systems are solved: ``"dense"`` (autograd Jacobian,
            LU factorisation), ``"krylov"`` (matrix-free GMRES on Jacobian-vector
            products) or ``"auto"`` (dense up to ``dense_limit`` state elements).
        dense_limit: the largest number of state elements (the whole batch) that
            ``"auto"`` solves densely.
        krylov_rtol: GMRES stops when its residual is this fraction of the
            right-hand side's (an inexact Newton method: the outer iteration's test
            decides the accuracy).
        krylov_restart: GMRES's restart length (vectors kept).
        krylov_max_iters: the most GMRES iterations (over all restarts) per solve.
        reuse: keep the Jacobian and the factorisation from step to step as RADAU5
            does (see ``NewtonState``); ``False``: a new Jacobian and
            factorisation at every step attempt. Either way the stages are solved to
            the same tolerance and gradients use the exact Jacobian at the stages.
        reuse_rate: a step whose every stage converged with a contraction rate at
            most this (or in one iteration) leaves its Jacobian to the next step;
            RADAU5's ``THET`` (``0.001`` there).
        reuse_growth: the factorisation is kept while the step size is between 1 and
            this many times the one it was made for (RADAU5's ``QUOT2``).

    Tolerances below what the state's dtype resolves are raised to ``100 * eps`` of
    the dtype, the absolute one times the state's size where it is below 1
    (:meth:`tolerances`).

    Raises:
        ConfigurationError: for a setting out of range.

    Example:
        >>> import odecore
        >>> odecore.Newton(max_iters=8, jacobian="krylov").max_iters
        8
    """

    max_iters: int = 10
    rtol: float | None = None
    atol: float | None = None
    kappa: float = 0.01
    jacobian: JacobianKind = "auto"
    dense_limit: int = 512
    krylov_rtol: float = 1e-4
    krylov_restart: int = 30
    krylov_max_iters: int = 300
    reuse: bool = True
    reuse_rate: float = 0.001
    reuse_growth: float = 1.2

    def __post_init__(self) -> None:
        for name in ("max_iters", "dense_limit", "krylov_restart", "krylov_max_iters"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"`{name}` must be a positive integer, got {value!r}.")
        for name in ("rtol", "atol", "kappa", "krylov_rtol", "reuse_rate", "reuse_growth"):
            value = getattr(self, name)
            if value is None and name in ("rtol", "atol"):
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (math.isfinite(value) and value > 0)
            ):
                raise ConfigurationError(f"`{name}` must be a positive number, got {value!r}.")
        if not isinstance(self.reuse, bool):
            raise ConfigurationError(f"`reuse` must be True or False, got {self.reuse!r}.")
        if self.reuse_rate >= 1.0:
            raise ConfigurationError(f"`reuse_rate` must be below 1, got {self.reuse_rate!r}.")
        if self.reuse_growth < 1.0:
            raise ConfigurationError(
                f"`reuse_growth` must be at least 1, got {self.reuse_growth!r}."
            )
        if self.jacobian not in ("auto", "dense", "krylov"):
            raise ConfigurationError(
                f"`jacobian` must be 'auto', 'dense' or 'krylov', got {self.jacobian!r}."
            )

    def tolerances(self, y0: Tensor) -> tuple[float, float]:
        """``(rtol, atol)`` of the iteration for a step from ``y0``.

        Args:
            y0: the step's first state.

        Returns:
            The tolerances, defaults filled in, raised to the rounding level, which
            an update cannot go below: ``rtol`` to ``100 * eps`` of ``y0``'s dtype,
            ``atol`` to that times the state's largest magnitude when it is below 1
            (a state of size 1e-6 in float32 is resolved to about 1e-13, not 1e-5).
        """
        floor = _FLOOR * torch.finfo(y0.dtype).eps
        size = float(y0.detach().abs().max()) if y0.numel() else 0.0
        rtol = _TOL if self.rtol is None else self.rtol
        atol = _TOL if self.atol is None else self.atol
        return max(rtol, floor), max(atol, floor * (size if 0.0 < size < 1.0 else 1.0))

    def dense(self, n: int) -> bool:
        """Whether a state of ``n`` elements is solved with a dense Jacobian."""
        if self.jacobian == "auto":
            return n <= self.dense_limit
        return self.jacobian == "dense"


# --- the field's Jacobian -------------------------------------------------------------


def jacobian(f: Callable[[Any, Tensor], Tensor], t: Any, y: Tensor) -> Tensor:
    """The Jacobian ``∂f/∂y (t, y)`` of a field, as an ``(n, n)`` matrix on the
    flattened state (``n = y.numel()``).

    One evaluation of ``f`` with a graph and ``n`` vector-Jacobian products, batched
    into one vectorised backward pass where the field's operations allow it (one at
    a time otherwise). A field whose result carries no graph to the state (one that
    ignores the state, or computes without autograd, as the adjoint's augmented
    system does) gets a forward-difference Jacobian instead: ``n`` more evaluations.

    Args:
        f: the field ``f(t, y)``.
        t: the time, passed through to ``f``.
        y: the state, any shape.

    Returns:
        The Jacobian, ``out[i, j] = ∂f_i/∂y_j`` over the flattened state, without a
        graph.

    Example:
        >>> import torch
        >>> a = torch.tensor([[0.0, 1.0], [-2.0, -3.0]])
        >>> jacobian(lambda t, y: a @ y, 0.0, torch.ones(2))
        tensor([[ 0.,  1.],
                [-2., -3.]])
    """
    with torch.enable_grad():
        x = y.detach().requires_grad_(True)
        out = f(t, x)
    if not out.requires_grad:
        return _difference_jacobian(f, t, y.detach(), out.detach())
    return jacobian_of(out, x)


def jacobian_of(out: Tensor, x: Tensor, create_graph: bool = False) -> Tensor:
    """``∂out/∂x``, ``(n, n)`` on the flattened tensors, from an evaluation ``out`` with
    a graph from ``x``: one batched backward pass (row by row where an operation has
    no batching rule); with its own graph only under ``create_graph``."""
    n = x.numel()
    if n == 0:  # an empty state: no product to batch
        return out.new_zeros(0, 0)
    eye = torch.eye(n, dtype=out.dtype, device=out.device).view(n, *out.shape)
    with torch.enable_grad():
        try:
            (rows,) = torch.autograd.grad(
                out, x, eye, is_grads_batched=True, retain_graph=True,
                create_graph=create_graph, allow_unused=True,
            )  # fmt: skip
        except RuntimeError:  # an operation without a batching rule: row by row
            rows = torch.stack([_row(out, x, e, create_graph) for e in eye])
    jac = _or_zeros(rows, eye).reshape(n, n)
    return jac if create_graph else jac.detach()


def _row(out: Tensor, x: Tensor, e: Tensor, create_graph: bool) -> Tensor:
    """One vector-Jacobian product ``e^T ∂out/∂x`` (zeros where ``out`` ignores ``x``)."""
    (g,) = torch.autograd.grad(
        out, x, e, retain_graph=True, create_graph=create_graph, allow_unused=True
    )
    return _or_zeros(g, x)


def _or_zeros(g: Tensor | None, like: Tensor) -> Tensor:
    return torch.zeros_like(like) if g is None else g


def _difference_jacobian(
    f: Callable[[Any, Tensor], Tensor], t: Any, y: Tensor, f0: Tensor
) -> Tensor:
    """Forward differences, column by column, with steps ``sqrt(eps) max(|y_j|, 1)``."""
    n = y.numel()
    root = math.sqrt(torch.finfo(y.dtype).eps)
    flat = y.reshape(-1)
    steps = root * flat.abs().clamp(min=1.0)
    cols = []
    with torch.no_grad():
        for j in range(n):
            moved = flat.clone()
            moved[j] += steps[j]
            delta = moved[j] - flat[j]  # the step as represented
            cols.append((f(t, moved.view_as(y)) - f0).reshape(-1) / delta)
    return torch.stack(cols, dim=1)


class _Linearisation:
    """Products with the Jacobian of ``f`` at one point ``(t, y)``.

    With autograd, from a graph kept once: ``vjp(w) = J^T w`` is one backward pass,
    and ``jvp(v) = J v`` differentiates ``J^T w`` (linear in a dummy ``w``) with
    respect to ``w``, two backward passes with no forward-mode rules needed. A field
    whose result carries no graph to the state gets forward differences for ``jvp``
    (one evaluation each) and no ``vjp``.
    """

    def __init__(self, f: Callable[[Any, Tensor], Tensor], t: Any, y: Tensor) -> None:
        self.f, self.t, self.y = f, t, y.detach()
        with torch.enable_grad():
            self.x = self.y.reshape(-1).requires_grad_(True)
            out = f(t, self.x.view_as(y))
            self.out = out.reshape(-1)
            self.g: Tensor | None = None
            self.w = torch.zeros_like(self.out).requires_grad_(True)
            if self.out.requires_grad:
                (g,) = torch.autograd.grad(
                    self.out, self.x, self.w, create_graph=True, allow_unused=True
                )
                self.g = g
        self.autograd = self.out.requires_grad

    def jvp(self, v: Tensor) -> Tensor:
        """``J v`` for ``v`` shaped like the state."""
        if not self.autograd:
            return self._difference(v)
        if self.g is None or not self.g.requires_grad:
            return torch.zeros_like(v)
        with torch.enable_grad():
            (out,) = torch.autograd.grad(
                self.g, self.w, v.reshape(-1), retain_graph=True, allow_unused=True
            )
        return _or_zeros(out, self.w).detach().view_as(v)

    def vjp(self, w: Tensor) -> Tensor:
        """``J^T w`` for ``w`` shaped like the state."""
        if not self.autograd:
            raise ConfigurationError(
                "The transposed Jacobian of a field that computes without autograd is not "
                "available matrix-free; use `Newton(jacobian='dense')`."
            )
        with torch.enable_grad():
            (out,) = torch.autograd.grad(
                self.out, self.x, w.reshape(-1), retain_graph=True, allow_unused=True
            )
        return _or_zeros(out, self.x).detach().view_as(w)

    def _difference(self, v: Tensor) -> Tensor:
        size = float(torch.linalg.vector_norm(v))
        if size == 0.0:
            return torch.zeros_like(v)
        root = math.sqrt(torch.finfo(v.dtype).eps)
        eps = root * (1.0 + float(torch.linalg.vector_norm(self.y))) / size
        with torch.no_grad():
            return (self.f(self.t, self.y + eps * v) - self.out.view_as(v)) / eps


# --- the iteration matrix -------------------------------------------------------------


class StageMatrix(abc.ABC):
    """The iteration matrix ``M = I - h (A ⊗ J)`` of a system of ``s`` stages, as a
    linear solver on ``(s, *state)`` tensors (``J`` acts on the flattened state).

    ``J`` is the field's Jacobian either at one point for every stage (simplified
    Newton) or at each stage's own point (the exact matrix, for gradients): block
    ``(i, j)`` of ``M`` is ``δ_ij I - h a_ij J_j``.

    Attributes:
        singular: why ``M`` cannot be solved with (it is singular, or GMRES made no
            progress on it), once found; ``None`` while it can. A solve after that
            returns NaN.
    """

    singular: str | None = None

    @abc.abstractmethod
    def solve(self, r: Tensor) -> Tensor:
        """``M^{-1} r`` for ``r`` of shape ``(s, *state)``."""

    @abc.abstractmethod
    def solve_transpose(self, r: Tensor) -> Tensor:
        """``M^{-T} r`` for ``r`` of shape ``(s, *state)``."""

    @staticmethod
    def build(
        f: Callable[[Any, Tensor], Tensor],
        points: Sequence[tuple[Any, Tensor]],
        h: float,
        a: Sequence[Sequence[float]],
        newton: Newton,
        *,
        exact: bool = False,
    ) -> StageMatrix:
        """The iteration matrix, dense or matrix-free as ``newton`` says.

        Args:
            f: the field on a 1-D state (evaluations here count as the solver's).
            points: ``(t, y)`` where the Jacobian is taken: one point, shared by every
                stage, or one per stage.
            h: the step size.
            a: the ``s x s`` coefficient matrix.
            newton: the settings.
            exact: the matrix is for :func:`attach_gradient`: matrix-free solves
                run to ``1000 eps`` of the dtype instead of ``newton.krylov_rtol``
                (an inexact solve would be an inexact gradient).

        Returns:
            The matrix, ready to solve with.
        """
        s = len(a)
        if len(points) not in (1, s):
            raise ValueError(f"`points` must hold 1 or {s} points, got {len(points)}.")
        n = points[0][1].numel()
        coeffs = torch.tensor(a, dtype=torch.float64)
        if newton.dense(n):
            return _DenseMatrix([jacobian(f, t, y) for t, y in points], h, coeffs)
        rtol = newton.krylov_rtol
        if exact:
            rtol = min(rtol, 1000.0 * torch.finfo(points[0][1].dtype).eps)
        lins = [_Linearisation(f, t, y) for t, y in points]
        return _KrylovMatrix(lins, h, coeffs, newton, rtol)

    @abc.abstractmethod
    def at(self, h: float) -> StageMatrix:
        """The matrix with the same Jacobians for the step size ``h`` (refactorised
        if dense)."""

    @property
    @abc.abstractmethod
    def factorised(self) -> bool:
        """Whether building the matrix factorised it (dense) or not (matrix-free)."""


class _DenseMatrix(StageMatrix):
    def __init__(self, jacs: list[Tensor], h: float, a: Tensor) -> None:
        s = a.shape[0]
        self.jacs, self.a = jacs, a
        dtype, device = jacs[0].dtype, jacs[0].device
        ha = (h * a).to(dtype=dtype, device=device)
        if len(jacs) == 1:
            m = -torch.kron(ha, jacs[0])
        else:
            m = torch.cat(
                [torch.cat([ha[i, j] * jacs[j] for j in range(s)], dim=1) for i in range(s)],
                dim=0,
            ).neg_()
        m.diagonal().add_(1.0)
        wide = dtype in (torch.float16, torch.bfloat16)
        self.lu, self.pivots, info = torch.linalg.lu_factor_ex(m.float() if wide else m)
        if int(info) != 0:  # a zero pivot: lu_solve would divide by zero
            self.singular = _SINGULAR

    def _solve(self, r: Tensor, adjoint: bool) -> Tensor:
        if self.singular is not None:
            return torch.full_like(r, math.nan)
        rhs = r.reshape(-1, 1).to(self.lu.dtype)
        x: Tensor = torch.linalg.lu_solve(self.lu, self.pivots, rhs, adjoint=adjoint)
        return x.to(r.dtype).view_as(r)

    def solve(self, r: Tensor) -> Tensor:
        return self._solve(r, adjoint=False)

    def at(self, h: float) -> StageMatrix:
        return _DenseMatrix(self.jacs, h, self.a)

    @property
    def factorised(self) -> bool:
        return True

    def solve_transpose(self, r: Tensor) -> Tensor:
        return self._solve(r, adjoint=True)


class _KrylovMatrix(StageMatrix):
    def __init__(
        self,
        lins: list[_Linearisation],
        h: float,
        a: Tensor,
        newton: Newton,
        rtol: float | None = None,
    ) -> None:
        self.lins, self.a = lins, a
        self.ha = (h * a).tolist()
        self.s = len(self.ha)
        self.newton = newton
        self.rtol = newton.krylov_rtol if rtol is None else rtol

    def _j(self, j: int, v: Tensor) -> Tensor:
        return self.lins[0 if len(self.lins) == 1 else j].jvp(v)

    def _jt(self, j: int, w: Tensor) -> Tensor:
        return self.lins[0 if len(self.lins) == 1 else j].vjp(w)

    def matvec(self, v: Tensor) -> Tensor:
        """``M v`` for ``v`` of shape ``(s, *state)``."""
        s, ha = self.s, self.ha
        if len(self.lins) == 1:
            # One Jacobian: mix the stages first, then one product per stage.
            mixed = [sum_rows(ha[i], v) for i in range(s)]
            return torch.stack([v[i] - self._j(0, mixed[i]) for i in range(s)])
        jv = [self._j(j, v[j]) for j in range(s)]
        return torch.stack([v[i] - sum_rows(ha[i], jv) for i in range(s)])

    def rmatvec(self, w: Tensor) -> Tensor:
        """``M^T w`` for ``w`` of shape ``(s, *state)``."""
        s, ha = self.s, self.ha
        cols = [[ha[i][j] for i in range(s)] for j in range(s)]
        return torch.stack([w[j] - self._jt(j, sum_rows(cols[j], w)) for j in range(s)])

    def _gmres(self, op: Callable[[Tensor], Tensor], r: Tensor) -> Tensor:
        nw = self.newton
        if self.singular is not None:
            return torch.full_like(r, math.nan)
        b = r.reshape(-1)
        x, residual = _gmres(
            lambda v: op(v.view_as(r)).reshape(-1),
            b,
            rtol=self.rtol,
            restart=nw.krylov_restart,
            max_iters=nw.krylov_max_iters,
        )
        b_norm = float(torch.linalg.vector_norm(b))
        if 0.0 < b_norm <= residual:
            # No progress at all (a singular M: x = 0 with the residual b). Taken as a
            # solution, the zero update would pass Newton's convergence test.
            self.singular = (
                f"{_SINGULAR}, or GMRES made no progress on it (try "
                "`Newton(jacobian='dense')` or a larger `krylov_max_iters`)"
            )
            return torch.full_like(r, math.nan)
        return x.view_as(r)

    def solve(self, r: Tensor) -> Tensor:
        return self._gmres(self.matvec, r)

    def at(self, h: float) -> StageMatrix:
        return _KrylovMatrix(self.lins, h, self.a, self.newton, self.rtol)

    @property
    def factorised(self) -> bool:
        return False

    def solve_transpose(self, r: Tensor) -> Tensor:
        return self._gmres(self.rmatvec, r)


def sum_rows(weights: Sequence[float], rows: Sequence[Tensor] | Tensor) -> Tensor:
    """``sum_j weights[j] * rows[j]``, zero weights skipped (a zero tensor if all are)."""
    out: Tensor | None = None
    for w, row in zip(weights, rows):
        if w != 0.0:
            out = row * w if out is None else out.add(row, alpha=w)
    return torch.zeros_like(rows[0]) if out is None else out


def gmres(
    matvec: Callable[[Tensor], Tensor],
    b: Tensor,
    *,
    rtol: float = 1e-6,
    restart: int = 30,
    max_iters: int = 300,
) -> Tensor:
    """Solve ``A x = b`` by restarted GMRES, given only products ``v -> A v``.

    Each cycle builds an orthonormal basis of the Krylov space
    ``span{r, A r, A^2 r, ...}`` of the current residual ``r`` by Arnoldi's process
    (modified Gram-Schmidt, with one re-orthogonalisation pass), and takes the
    ``x`` in it that minimises ``||b - A x||``: the small least-squares problem with
    the Hessenberg matrix is kept triangular by Givens rotations, which also give the
    residual norm at every iteration for free. After ``restart`` iterations the
    basis is dropped and the cycle starts again from the new residual.

    Args:
        matvec: the product with ``A`` on 1-D tensors shaped like ``b``.
        b: the 1-D right-hand side.
        rtol: stop when ``||b - A x|| <= rtol ||b||``.
        restart: the basis size of one cycle.
        max_iters: the most products with ``A`` in all.

    Returns:
        The approximate solution (the best one found if ``max_iters`` ran out).

    Example:
        >>> import torch
        >>> a = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
        >>> x = gmres(lambda v: a @ v, torch.tensor([1.0, 2.0], dtype=torch.float64))
        >>> torch.allclose(a @ x, torch.tensor([1.0, 2.0], dtype=torch.float64))
        True
    """
    return _gmres(matvec, b, rtol=rtol, restart=restart, max_iters=max_iters)[0]


def _gmres(
    matvec: Callable[[Tensor], Tensor], b: Tensor, *, rtol: float, restart: int, max_iters: int
) -> tuple[Tensor, float]:
    """:func:`gmres`, and the norm of the residual ``b - A x`` it leaves (computed, not
    the least-squares estimate, which a singular ``A`` makes zero)."""
    x = torch.zeros_like(b)
    b_norm = float(torch.linalg.vector_norm(b))
    if b_norm == 0.0 or not math.isfinite(b_norm):
        return (x, 0.0) if b_norm == 0.0 else (torch.full_like(b, math.nan), math.nan)
    target = rtol * b_norm
    r = b
    used = 0
    while used < max_iters:
        beta = float(torch.linalg.vector_norm(r))
        if beta <= target:
            break
        basis = [r / beta]
        hess: list[list[float]] = []  # column k: the Arnoldi coefficients, rotated
        rotations: list[tuple[float, float]] = []
        g = [beta]  # the rotated right-hand side of the least-squares problem
        k = 0
        while k < restart and used < max_iters:
            w = matvec(basis[k])
            used += 1
            col: list[float] = []
            for _ in range(2):  # modified Gram-Schmidt, twice (numerically orthogonal)
                for j, q in enumerate(basis):
                    d = float(torch.dot(q, w))
                    w = w - d * q
                    if len(col) <= j:
                        col.append(d)
                    else:
                        col[j] += d
            h_next = float(torch.linalg.vector_norm(w))
            for j, (c, sn) in enumerate(rotations):  # apply the earlier rotations
                col[j], col[j + 1] = c * col[j] + sn * col[j + 1], -sn * col[j] + c * col[j + 1]
            denom = math.hypot(col[k], h_next)
            c, sn = (1.0, 0.0) if denom == 0.0 else (col[k] / denom, h_next / denom)
            rotations.append((c, sn))
            col[k] = denom
            g.append(-sn * g[k])
            g[k] = c * g[k]
            hess.append(col)
            k += 1
            if abs(g[k]) <= target or h_next == 0.0:
                break
            basis.append(w / h_next)
        # Back-substitution: the triangular system hess[:k, :k] y = g[:k].
        y = [0.0] * k
        for i in range(k - 1, -1, -1):
            acc = g[i] - sum(hess[j][i] * y[j] for j in range(i + 1, k))
            y[i] = acc / hess[i][i] if hess[i][i] != 0.0 else 0.0
        for j in range(k):
            x = x + y[j] * basis[j]
        r = b - matvec(x)
        used += 1
        if abs(g[k]) <= target:
            break
    return x, float(torch.linalg.vector_norm(r))


# --- the iteration --------------------------------------------------------------------


@dataclass(frozen=True)
class NewtonResult:
    """How one Newton solve ended.

    Attributes:
        z: the last iterate, shape ``(s, *state)``, without a graph.
        converged: whether the convergence test passed.
        iters: the iterations made.
        update: the scaled norm of the last update (``inf`` if none was made).
        rate: the last contraction rate ``theta`` (``nan`` before two iterations).
        diverged: the iteration stopped because it did not contract or a value
            became non-finite.
        singular: why the iteration matrix could not be solved with (see
            :attr:`StageMatrix.singular`); ``None`` if it could.
    """

    z: Tensor
    converged: bool
    iters: int
    update: float
    rate: float
    diverged: bool
    singular: str | None = None


@dataclass
class NewtonState(SolveState):
    """An implicit solver's state through one solve: the iteration matrix it keeps.

    The strategy of Hairer and Wanner's RADAU5 (Solving ODEs II, IV.8): the Jacobian
    is kept while Newton converges fast (every stage's contraction rate at most
    :attr:`Newton.reuse_rate`); a new one is taken at the next step's start after a
    slow or failed iteration, and when a step is retried (the controller rejected it)
    unless its Jacobian was already taken at that step's start. The factorisation is
    kept while the step size is within ``[1, reuse_growth]`` times the one it was
    made for, and redone with the same Jacobian otherwise. A stale matrix only slows
    the iteration: the stages are solved to the same tolerance.

    Attributes:
        matrix: the matrix kept, ``None`` before the first step.
        h: the step size ``matrix`` is made for.
        t_jacobian: where its Jacobian was taken.
        t_attempt: the start of the last step attempted.
        stale: the last attempt's iteration was slow or failed.
    """

    matrix: StageMatrix | None = None
    h: float = math.nan
    t_jacobian: float = math.nan
    t_attempt: float = math.nan
    stale: bool = False

    def build(
        self,
        f: Callable[[Any, Tensor], Tensor],
        points: Sequence[tuple[Any, Tensor]],
        h: float,
        a: Sequence[Sequence[float]],
        newton: Newton,
        *,
        exact: bool = False,
    ) -> StageMatrix:
        """:meth:`StageMatrix.build`, counted."""
        matrix = StageMatrix.build(f, points, h, a, newton, exact=exact)
        self.n_jacobians += len(points)
        self.n_factorisations += matrix.factorised
        return matrix

    def step_matrix(
        self,
        f: Callable[[Any, Tensor], Tensor],
        t0: float,
        y0: Tensor,
        h: float,
        a: Sequence[Sequence[float]],
        newton: Newton,
    ) -> tuple[StageMatrix, bool]:
        """The iteration matrix for a step of size ``h`` from ``(t0, y0)``, and whether
        its Jacobian is the one at ``(t0, y0)`` (a new one would be no better)."""
        retry = t0 == self.t_attempt
        self.t_attempt = t0
        fresh = self.matrix is not None and self.t_jacobian == t0
        if self.matrix is None or not newton.reuse or ((self.stale or retry) and not fresh):
            self.matrix = self.build(f, [(t0, y0)], h, a, newton)
            self.h, self.t_jacobian, self.stale = h, t0, False
            return self.matrix, True
        self.stale = False
        if not 1.0 <= h / self.h <= newton.reuse_growth:
            self.matrix, self.h = self.matrix.at(h), h
            self.n_factorisations += self.matrix.factorised
        return self.matrix, fresh

    def iterated(self, result: NewtonResult, newton: Newton) -> None:
        """Count an iteration; a slow or failed one makes the Jacobian stale."""
        self.n_newton_iters += result.iters
        if not result.converged or result.rate > newton.reuse_rate:  # nan: fast
            self.stale = True


def newton_solve(
    residual: Residual,
    z0: Tensor,
    matrix: StageMatrix,
    newton: Newton,
    scale: Tensor,
) -> NewtonResult:
    """Solve ``G(Z) = 0`` by simplified Newton: ``Z <- Z - M^{-1} G(Z)``.

    Runs without a graph; see the module's notes for the stopping rule, and
    :func:`attach_gradient` for gradients.

    Args:
        residual: ``G``, on ``(s, *state)`` tensors.
        z0: the first iterate, ``(s, *state)``.
        matrix: the iteration matrix (an approximation of ``∂G/∂Z``).
        newton: the settings.
        scale: ``atol + rtol |y0|``, broadcastable against ``z0``: the update is
            measured by the RMS norm of ``dZ / scale``.

    Returns:
        The result, converged or not; the caller decides what a failure means.
    """
    z = z0.detach()
    previous = math.inf
    rate = math.nan
    slow = 0
    update = math.inf
    if matrix.singular is not None:
        return NewtonResult(z, False, 0, update, rate, False, matrix.singular)
    with torch.no_grad():
        for k in range(newton.max_iters):
            dz = matrix.solve(residual(z))
            if matrix.singular is not None:
                return NewtonResult(z, False, k, update, rate, False, matrix.singular)
            z = z - dz
            update = float(torch.linalg.vector_norm(dz / scale)) / math.sqrt(max(dz.numel(), 1))
            if not math.isfinite(update):
                return NewtonResult(z, False, k + 1, update, rate, True)
            if update <= newton.kappa:
                return NewtonResult(z, True, k + 1, update, rate, False)
            if k > 0:
                rate = update / previous
                if rate < 1.0:
                    slow = 0
                    if rate / (1.0 - rate) * update <= 1.0:
                        return NewtonResult(z, True, k + 1, update, rate, False)
                elif update <= 1.0:  # within the tolerance, and no longer shrinking
                    return NewtonResult(z, True, k + 1, update, rate, False)
                else:
                    slow += 1
                    if slow >= 2:
                        return NewtonResult(z, False, k + 1, update, rate, True)
            previous = update
    return NewtonResult(z, False, newton.max_iters, update, rate, False)


def failure(result: NewtonResult, t0: float, t1: float, direction: float = 1.0) -> SolverError:
    """Why a step failed, for a solve to end with: a :class:`SolverError` (returned on
    the step's result, not raised) with ``Status.NEWTON_FAILED`` and a sentence that
    names the step and the reason.

    Args:
        result: the failed iteration.
        t0: the step's start, in the solver's (increasing) time.
        t1: the step's end, likewise.
        direction: ``-1.0`` when the caller integrates backward in time.

    Returns:
        The error, its ``t`` the step's start (the caller's time). Its message
        starts ``Newton did not converge at step size h = <|t1 - t0|> (t = <t>)
        after <n> iteration(s): <reason>``, the reason one of "the iterations ran
        out", "the iteration diverged", "the iteration produced a non-finite value"
        and "the iteration matrix I - h (A ⊗ J) is singular", and then names the
        options to change.

    Example:
        >>> import math, torch
        >>> result = NewtonResult(torch.zeros(1), False, 4, 37.0, 0.9, False)
        >>> str(failure(result, 0.5, 0.75))[:72]
        'Newton did not converge at step size h = 0.25 (t = 0.5) after 4 iteratio'
    """
    if result.singular is not None:
        why = result.singular
    else:
        if not result.diverged:
            how = f"the iterations ran out (`max_iters` = {result.iters})"
        elif math.isfinite(result.update):
            how = "the iteration diverged (its update stopped shrinking)"
        else:
            how = "the iteration produced a non-finite value"
        rate = "" if math.isnan(result.rate) else f", contraction rate {result.rate:.3g}"
        why = (
            f"{how}; the last update's scaled norm was {result.update:.3g} (1 is the "
            f"tolerance){rate}"
        )
    t = direction * t0 + 0.0  # no -0.0
    return SolverError(
        f"Newton did not converge at step size h = {abs(t1 - t0):.6g} "
        f"(t = {t!r}) after {result.iters} iteration(s): {why}. A smaller "
        "step, a larger `max_iters` or looser tolerances may converge: odeint's options "
        "`step_size` (or `n_steps`) and `max_iters`; in solve(), `dt0` and the solver's "
        "`newton=odecore.Newton(max_iters=..., rtol=..., atol=...)`.",
        status=Status.NEWTON_FAILED,
        t=t,
    )


def failed_step(y0: Tensor, why: SolverError, n_ks: int, adaptive: bool) -> StepResult:
    """The result of a step that ``why`` says failed: NaN state (and error estimate,
    for an adaptive method), so that a controller rejects it and nothing reads it as
    a state.

    Args:
        y0: the step's start, for the shape, dtype and device.
        why: the failure.
        n_ks: how many stage derivatives the method's results carry.
        adaptive: whether the method has an error estimate.

    Returns:
        The step's result, with ``failure=why``.
    """
    nan = torch.full_like(y0.detach(), math.nan)
    return StepResult(
        y1=nan, y_err=nan if adaptive else None, ks=(nan,) * n_ks, f1=None, failure=why
    )


class _SolveWith(ReverseOnly):
    """``M^{-1} r`` with ``M`` a constant: the backward pass solves with ``M^T``."""

    what = "The gradient through an implicit solver's stages"
    instead = f"{AUTOGRAD_ONLY}, or with an explicit or Rosenbrock solver."

    @staticmethod
    def forward(ctx: Any, matrix: StageMatrix, r: Tensor) -> Tensor:  # type: ignore[override]
        ctx.matrix = matrix
        return matrix.solve(r.detach())

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor]:  # type: ignore[override]
        # The matrix is a constant here: a second derivative would miss its own.
        first_order(
            "The gradient through an implicit solver's stages (the implicit function theorem)",
            "For higher-order gradients, solve with an explicit or Rosenbrock solver "
            "(Rodas5P for stiff problems).",
        )
        return None, ctx.matrix.solve_transpose(grad)


def attach_gradient(z: Tensor, residual: Tensor, matrix: StageMatrix) -> Tensor:
    """``z`` (the converged stages) with the implicit function theorem's gradient.

    With ``G(Z*, θ) = 0`` at the solution, ``dZ*/dθ = -M_*^{-1} ∂G/∂θ`` for every
    input ``θ`` of the residual (``y0``, the field's parameters, the times), where
    ``M_* = ∂G/∂Z`` at ``Z*``. The result is ``Z* - (d - d.detach())`` with
    ``d = M_*^{-1} G(Z*, θ)``: its value is ``Z*`` bit for bit and its derivative
    the theorem's.

    Args:
        z: the solution ``Z*``, without a graph.
        residual: ``G(Z*, θ)`` computed from ``z`` (detached) with a graph to ``θ``.
        matrix: the exact iteration matrix at ``Z*`` (the field's Jacobian at each
            stage); an approximate one gives a wrong gradient.

    Returns:
        ``z`` with the gradient attached (``z`` itself when the residual has no graph).
    """
    if not residual.requires_grad:
        return z
    d: Tensor = reverse_only(_SolveWith, matrix, residual)
    return z - (d - d.detach())
