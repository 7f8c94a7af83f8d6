"""Rosenbrock methods: linearly implicit, adaptive, for stiff problems.

A Rosenbrock method replaces the Newton iterations of an implicit Runge-Kutta method
by one linear solve per stage with the same matrix. In Hairer and Wanner's form
(Solving ODEs II, IV.7, with the stages transformed so that no product with ``J`` is
needed), a step from ``(t0, y0)`` of size ``h`` computes ``u_1, ..., u_s`` from

``(I / (gamma h) - J) u_i = f(t0 + alpha_i h, y0 + sum_{j<i} a_ij u_j)
+ gamma_i h f_t + sum_{j<i} (c_ij / h) u_j``,

with ``J = ∂f/∂y (t0, y0)`` and ``f_t = ∂f/∂t (t0, y0)``, and the solution
``y1 = y0 + sum_j m_j u_j``. The matrix is built and LU-factorised once per step; a
step costs one Jacobian, one factorisation, ``s`` back-substitutions and ``s - 1``
evaluations of the field, with no iteration that can fail to converge.

**Jacobians** come from reverse-mode autograd, one vector-Jacobian product per state
element in one batched backward pass (:func:`odecore._newton.jacobian`; forward
differences for a field without a graph from the state, such as the adjoint's
augmented field). With gradients enabled the Jacobian keeps its graph
(``create_graph``), so that backpropagation differentiates the discrete step
exactly. A state of more than ``dense_limit`` elements (per sample when
``independent``) is refused at the start of the solve instead of allocating its
dense Jacobian: :class:`~odecore.Kvaerno5` solves such states matrix-free.
One batched backward pass is also the cheapest way for small states: ``torch.func``'s
``jacrev`` and ``jacfwd`` dispatch as many operations or more and take two to six
times as long on Van der Pol and Robertson.

**Reuse** (:class:`RosenbrockState`, within a solve): the derivative at a step's end,
which starts the next step, is evaluated with a graph from the state, and the next
step's Jacobian is the backward pass of that evaluation, not of another one; a step
retried after a rejection starts where the rejected one did and takes its Jacobian
and ``f_t`` again, as ``rodas.f`` does. Only the factorisation is redone, for the new
step size. A point is recognised by the identity of the field, state and derivative
objects, so a loop that changes any of them (an event, a jump, per-sample steps)
gets a fresh Jacobian.

**The time derivative** ``f_t`` is a one-sided difference in time inside the step,
of second order: ``(4 f(t0 + d, y0) - 3 f(t0, y0) - f(t0 + 2 d, y0)) / (2 d)`` with
``d = eps^(1/3) max(|t0|, 1)``, two evaluations per step (an error of about
``1e-10`` relative in float64). A field whose value at ``t0 + d`` equals that at
``t0`` (one that does not read the time) gets ``f_t = 0`` after one evaluation.
Not autograd: the solver sees the time as a float.

**Independent samples** (``independent=True``): the rows of a state
``(batch, *state)`` are separate systems, so the Jacobian is block diagonal. The
blocks come from one batched backward pass of ``n`` products (``n`` elements per
sample) on the batch's sum, and are factorised by a batched LU on ``(batch, n, n)``;
the dense ``(batch n)²`` matrix is never formed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, final

import torch
from torch import Tensor

from ._errors import ConfigurationError, SolverError, Status
from ._newton import failed_step, jacobian, jacobian_of
from ._solvers import (
    Field,
    SolveState,
    StepResult,
    _combine_terms,
    _HermiteDense,
    _Sum,
    _sum_of,
)

# --- the tableau ----------------------------------------------------------------------


Rows = tuple[tuple[float, ...], ...]


@final
@dataclass(frozen=True)
class RosenbrockTableau:
    """A Rosenbrock method in Hairer and Wanner's transformed form (see the module).

    Attributes:
        gamma: the diagonal coefficient: the matrix is ``I / (gamma h) - J``.
        alpha: the stage times as fractions of the step.
        gammas: ``gamma_i``, the weights of ``h f_t`` in the stages.
        a: row ``i``: the ``a_ij`` (``j < i``) of the stage states.
        c: row ``i``: the ``c_ij`` (``j < i``) of the earlier stages in the right side.
        m: the solution's weights ``y1 = y0 + sum m_j u_j``.
        m_err: ``m`` minus the embedded solution's weights.
        dense: the rows ``d_1, ..., d_k`` of the continuous extension's weights on the
            stages, or ``None``: ``y(t0 + theta h) = (1 - theta) y0 + theta (y1 +
            (1 - theta) (d_1 + theta (d_2 + ... + theta d_k)))`` with
            ``d_j = sum_i dense[j - 1][i] u_i``.

    Raises:
        ValueError: if ``gamma`` is not positive, the lengths disagree, or a row of
            ``a`` or ``c`` is not strictly lower.

    Example:
        >>> import odecore
        >>> odecore.RODAS4_TABLEAU.stages, odecore.RODAS4_TABLEAU.gamma
        (6, 0.25)
    """

    gamma: float
    alpha: tuple[float, ...]
    gammas: tuple[float, ...]
    a: Rows
    c: Rows
    m: tuple[float, ...]
    m_err: tuple[float, ...]
    dense: Rows | None = None

    def __post_init__(self) -> None:
        s = len(self.alpha)
        shapes = (len(self.gammas), len(self.m), len(self.m_err), len(self.a), len(self.c))
        if not self.gamma > 0 or any(x != s for x in shapes):
            raise ValueError(f"A Rosenbrock tableau needs gamma > 0 and {s} of everything.")
        if any(len(r) != i for rows in (self.a, self.c) for i, r in enumerate(rows)):
            raise ValueError("Rows of `a` and `c` must be strictly lower: row i has i entries.")
        if self.dense is not None and (not self.dense or any(len(r) != s for r in self.dense)):
            raise ValueError(f"Each row of `dense` must have {s} entries, one per stage.")

    @property
    def stages(self) -> int:
        """The number of stages ``s``."""
        return len(self.alpha)


def _rodas4_tableau() -> RosenbrockTableau:
    """RODAS, order 4(3), from the published decimals; see :data:`RODAS4_TABLEAU`."""
    a5 = (1.221224509226641, 6.019134481288629, 12.53708332932087, -0.6878860361058950)
    return RosenbrockTableau(
        gamma=0.25,
        alpha=(0.0, 0.386, 0.21, 0.63, 1.0, 1.0),
        gammas=(0.25, -0.1043, 0.1035, -0.3620000000000023e-01, 0.0, 0.0),
        a=(
            (),
            (1.544,),
            (0.9466785280815826, 0.2557011698983284),
            (3.314825187068521, 2.896124015972201, 0.9986419139977817),
            a5,
            (*a5, 1.0),
        ),
        c=(
            (),
            (-5.6688,),
            (-2.430093356833875, -0.2063599157091915),
            (-0.1073529058151375, -9.594562251023355, -20.47028614809616),
            (7.496443313967647, -10.24680431464352, -33.99990352819905, 11.70890893206160),
            (
                8.083246795921522,
                -7.981132988064893,
                -31.52159432874371,
                16.31930543123136,
                -6.058818238834054,
            ),
        ),
        m=(*a5, 1.0, 1.0),
        m_err=(0.0, 0.0, 0.0, 0.0, 0.0, 1.0),
        dense=(
            (
                10.12623508344586,
                -7.487995877610167,
                -34.80091861555747,
                -7.992771707568823,
                1.025137723295662,
                0.0,
            ),
            (
                -0.6762803392801253,
                6.087714651680015,
                16.43084320892478,
                24.76722511418386,
                -6.594389125716872,
                0.0,
            ),
        ),
    )


RODAS4_TABLEAU = _rodas4_tableau()
"""Hairer and Wanner's RODAS, a stiffly accurate Rosenbrock method of order 4 with an
embedded method of order 3, six stages, ``gamma = 1/4``, L-stable, in the transformed
form of their code ``rodas.f`` (the coefficients as published there). The last two
stages are at ``t0 + h``; the solution is the sixth stage's state plus ``u_6`` and the
embedded solution the sixth stage's state, so the error estimate is ``u_6``. The
continuous extension (two rows of ``dense``) is of order 3."""


def _rodas5p_tableau() -> RosenbrockTableau:
    """Rodas5P, order 5(4), from the published decimals; see :data:`RODAS5P_TABLEAU`."""
    a6 = (-7.502846399306121, 2.561846144803919, -11.627539656261098, -0.18268767659942256,
          0.030198172008377946)  # fmt: skip
    return RosenbrockTableau(
        gamma=0.21193756319429014,
        alpha=(0.0, 0.6358126895828704, 0.4095798393397535, 0.9769306725060716,
               0.4288403609558664, 1.0, 1.0, 1.0),
        gammas=(0.21193756319429014, -0.42387512638858027, -0.3384627126235924,
                1.8046452872882734, 2.325825639765069, 0.0, 0.0, 0.0),
        a=(
            (),
            (3.0,),
            (2.849394379747939, 0.45842242204463923),
            (-6.954028509809101, 2.489845061869568, -10.358996098473584),
            (2.8029986275628964, 0.5072464736228206, -0.3988312541770524,
             -0.04721187230404641),
            a6,
            (*a6, 1.0),
            (*a6, 1.0, 1.0),
        ),
        c=(
            (),
            (-14.155112264123755,),
            (-17.97296035885952, -2.859693295451294),
            (147.12150275711716, -1.41221402718213, 71.68940251302358),
            (165.43517024871676, -0.4592823456491126, 42.90938336958603, -5.961986721573306),
            (24.854864614690072, -3.0009227002832186, 47.4931110020768, 5.5814197821558125,
             -0.6610691825249471),
            (30.91273214028599, -3.1208243349937974, 77.79954646070892, 34.28646028294783,
             -19.097331116725623, -28.087943162872662),
            (37.80277123390563, -3.2571969029072276, 112.26918849496327, 66.9347231244047,
             -40.06618937091002, -54.66780262877968, -9.48861652309627),
        ),
        m=(*a6, 1.0, 1.0, 1.0),
        m_err=(0.0,) * 7 + (1.0,),
        dense=(
            (25.948786856663858, -2.5579724845846235, 10.433815404888879, -2.3679251022685204,
             0.524948541321073, 1.1241088310450404, 0.4272876194431874, -0.17202221070155493),
            (-9.91568850695171, -0.9689944594115154, 3.0438037242978453, -24.495224566215796,
             20.176138334709044, 15.98066361424651, -6.789040303419874, -6.710236069923372),
            (11.419903575922262, 2.8879645146136994, 72.92137995996029, 80.12511834622643,
             -52.072871366152654, -59.78993625266729, -0.15582684282751913, 4.883087185713722),
        ),
    )  # fmt: skip


RODAS5P_TABLEAU = _rodas5p_tableau()
"""Steinebach's Rodas5P, a stiffly accurate Rosenbrock method of order 5 with an
embedded method of order 4, eight stages, L-stable, in the transformed form of
:data:`RODAS4_TABLEAU` (the coefficients as published with Julia's OrdinaryDiffEq).
Its coefficients also meet the conditions that keep
the order on the Prothero-Robinson problem ``y' = lambda (y - g(t)) + g'(t)`` for
stiff ``lambda``, where RODAS loses it. The last three stages are at ``t0 + h``; the
error estimate is ``u_8``. The continuous extension (three rows of ``dense``) is of
order 4."""


# --- Jacobians ------------------------------------------------------------------------


def _evaluated(f: Field, t: float, y: Tensor, graph: bool) -> tuple[Tensor, Tensor]:
    """``(x, f(t, x))`` with a graph from ``x``: ``x`` is ``y`` itself when ``graph`` and
    ``y`` requires grad (a Jacobian that backpropagation differentiates), else a
    detached copy of ``y``."""
    with torch.enable_grad():
        x = y if (graph and y.requires_grad) else y.detach().requires_grad_(True)
        return x, f(t, x)


def _blocks(x: Tensor, out: Tensor, graph: bool) -> Tensor:
    """The diagonal blocks ``∂out[b]/∂x[b]``, ``(batch, n, n)``, from one batched
    backward pass of ``n`` products on the batch's sum (``out`` has a graph from ``x``)."""
    batch, n = x.shape[0], x.shape[1:].numel()
    if n == 0 or batch == 0:  # empty samples or no sample: no product to batch
        return x.new_zeros(batch, n, n)
    eye = torch.eye(n, dtype=out.dtype, device=out.device)
    v = eye.unsqueeze(1).expand(n, batch, n).reshape(n, *out.shape)
    with torch.enable_grad():
        (rows,) = torch.autograd.grad(
            out, x, v, is_grads_batched=True, create_graph=graph, allow_unused=True
        )
    if rows is None:
        return x.new_zeros(batch, n, n)
    return rows.reshape(n, batch, n).transpose(0, 1)


def _jacobian(
    f: Field, t: float, y: Tensor, graph: bool, rows: bool, at: tuple[Tensor, Tensor] | None
) -> Tensor:
    """``∂f/∂y (t, y)``: per sample ``(batch, n, n)`` when ``rows``, else ``(n, n)`` on the
    flattened state; with its graph when ``graph``. ``at`` is an evaluation ``(x,
    f(t, x))`` already made (:func:`_evaluated`); forward differences for a field
    without a graph from the state (dense, as :func:`~odecore._newton.jacobian`)."""
    x, out = _evaluated(f, t, y, graph) if at is None else at
    if not out.requires_grad:
        return jacobian(f, t, y)
    if rows:
        return _blocks(x, out, graph)
    return jacobian_of(out, x, create_graph=graph)


def _coupled(f: Field, t: float, y: Tensor) -> bool:
    """Whether some sample's derivative reads another sample's state; ``False`` when
    it cannot be told (no graph).

    ``2 ceil(log2 batch)`` vector-Jacobian products: for each bit of the sample
    index, one product weighted on the samples with that bit set and one on those
    without it. Samples ``a != b`` differ in some bit, so a derivative of ``b`` that
    reads ``a`` shows up in one of the products on ``a``'s row, which that product
    does not weight. The weights differ from sample to sample, so that derivatives of
    several samples do not cancel on a row."""
    batch = y.shape[0] if y.dim() >= 2 else 0
    if batch < 2:
        return False
    with torch.enable_grad():
        x = y.detach().requires_grad_(True)
        out = f(t, x)
        if not out.requires_grad or out.shape[:1] != x.shape[:1]:
            return False
        index = torch.arange(batch, device=y.device)
        weight = (1.0 + index / batch).to(out.dtype).view(-1, *([1] * (out.dim() - 1)))
        for bit in range((batch - 1).bit_length()):
            on = (index >> bit) & 1 == 1
            for rows in (on, ~on):
                w = torch.where(rows.view_as(weight), weight, 0.0).expand_as(out)
                (g,) = torch.autograd.grad(out, x, w, retain_graph=True, allow_unused=True)
                if g is not None and bool((g[~rows] != 0).any()):
                    return True
    return False


# --- the matrix -----------------------------------------------------------------------


class _Matrix:
    """``I / (gamma h) - J``, LU-factorised: dense ``(n, n)`` or per sample ``(B, n, n)``;
    in float32 for a half-precision state, which LAPACK does not factorise (as Newton's
    matrices)."""

    def __init__(self, jac: Tensor, gh: float) -> None:
        m = -jac.to(torch.promote_types(jac.dtype, torch.float32))  # a new tensor
        m.diagonal(dim1=-2, dim2=-1).add_(1.0 / gh)
        self.batched = jac.dim() == 3
        self.lu, self.pivots, info = torch.linalg.lu_factor_ex(m)  # differentiable
        self.ok = not bool(info.any())  # a zero pivot: info > 0

    def solve(self, r: Tensor) -> Tensor:
        """``M^{-1} r`` for ``r`` shaped like the state, in its dtype."""
        # Per sample, or the whole state as one column (a 0-dim state has no rows).
        rhs = r.reshape(r.shape[0], r.shape[1:].numel(), 1) if self.batched else r.reshape(-1, 1)
        x: Tensor = torch.linalg.lu_solve(self.lu, self.pivots, rhs.to(self.lu.dtype))
        return x.to(r.dtype).view_as(r)


def _time_step(t0: float, h: float, dtype: torch.dtype) -> float:
    """The difference's step in time, ``d = eps^(1/3) max(|t0|, 1)``, at most ``h / 2``."""
    root: float = torch.finfo(dtype).eps ** (1.0 / 3.0)
    return min(root * max(abs(t0), 1.0), 0.5 * h)


def time_steps(t0: Tensor, h: Tensor, dtype: torch.dtype) -> Tensor:
    """:func:`_time_step` in tensor arithmetic, with no host read: for a step graph, and
    for each sample of a per-sample step."""
    root = torch.finfo(dtype).eps ** (1.0 / 3.0)
    return torch.minimum(root * t0.abs().clamp(min=1.0), 0.5 * h)


def _time_derivative(
    f: Field, t0: float, d: float | Tensor, y0: Tensor, f0: Tensor
) -> Tensor | None:
    """``∂f/∂t (t0, y0)`` by a one-sided second-order difference of step ``d`` inside
    the step (a tensor: a step per sample, shaped to divide ``y0``); ``None`` (zero),
    after one evaluation, for a field whose value does not change with time."""
    f1 = f(t0 + d, y0)  # type: ignore[arg-type]  # a per-sample field takes a tensor
    if torch.equal(f1, f0):
        return None
    f2 = f(t0 + 2.0 * d, y0)  # type: ignore[arg-type]
    out: Tensor = (4.0 * f1 - 3.0 * f0 - f2) / (2.0 * d)
    return out


def _singular(t0: float, t1: float, direction: float) -> SolverError:
    t = direction * t0 + 0.0
    return SolverError(
        f"the Rosenbrock matrix I / (gamma h) - J is singular at step size h = "
        f"{abs(t1 - t0):.6g} (t = {t!r}); a smaller step may avoid it.",
        status=Status.NEWTON_FAILED,
        t=t,
    )


# --- the solver -----------------------------------------------------------------------


@functools.cache
def _sum(weights: tuple[float, ...]) -> _Sum | None:
    return _sum_of(weights)


def _combine(
    y0: Tensor | None, h: float, weights: tuple[float, ...], us: Sequence[Tensor]
) -> Tensor:
    """``y0 + h * sum_i w_i u_i``, the layout of the sum made once per row of weights."""
    return _combine_terms(y0, h, _sum(weights), us)


@dataclass(frozen=True)
class _States:
    """How the stage states and the solution are summed: row ``i`` (the rows of ``a``,
    then ``m`` as row ``s``) is the state of stage ``base[i]`` (stage 0's is ``y0``)
    plus ``sums[i]`` over the later stages, where that stage's row is a prefix of row
    ``i``: a stiffly accurate method's last stage and solution are then one addition
    each instead of a sum over every stage."""

    base: tuple[int, ...]
    sums: tuple[_Sum | None, ...]


@functools.cache
def _states(tab: RosenbrockTableau) -> _States:
    rows = (*tab.a, tab.m)
    base = [
        max((k for k in range(1, min(i, tab.stages)) if row[:k] == rows[k]), default=0)
        for i, row in enumerate(rows)
    ]
    sums = tuple(_sum_of((0.0,) * k + row[k:]) for k, row in zip(base, rows))
    return _States(tuple(base), sums)


_Point = tuple[object, float, Tensor, Tensor, bool]
"""A point of the solve: the field, the time, the state, the derivative there and
whether the Jacobian keeps its graph; told apart by the objects' identity."""


def _same(a: _Point | None, b: _Point) -> bool:
    return (
        a is not None
        and a[0] is b[0]
        and a[1] == b[1]
        and a[2] is b[2]
        and a[3] is b[3]
        and a[4] == b[4]
    )


@dataclass
class RosenbrockState(SolveState):
    """A Rosenbrock solve's state: the Jacobian and ``∂f/∂t`` at the last step's start,
    which a retry from the same point (after a rejection) takes again, as Hairer and
    Wanner's ``rodas.f`` does; and the field's evaluation with a graph at the last
    step's end, from which the next step's Jacobian comes without evaluating the
    field once more. ``reuse_end`` is ``False`` where the loop changes the field
    between steps (per-sample steps rescale it), so that the evaluation is not made
    for nothing."""

    start: _Point | None = None
    jac: Tensor | None = None
    d: float | Tensor = 0.0
    ft: Tensor | None = None
    end: _Point | None = None
    end_eval: tuple[Tensor, Tensor] | None = None
    reuse_end: bool = True


Interpolation = Literal["rosenbrock", "hermite", "cubic"]


@dataclass(frozen=True)
class _AbstractRosenbrock(_HermiteDense):
    """Generic stepping over a :class:`RosenbrockTableau`; see the module's notes."""

    tableau: ClassVar[RosenbrockTableau]
    independent: bool = False
    dense_limit: int = 2048
    interpolation: Interpolation = "rosenbrock"

    def __post_init__(self) -> None:
        if not isinstance(self.independent, bool):
            raise ConfigurationError(
                f"`independent` must be True or False, got {self.independent!r}."
            )
        if (
            isinstance(self.dense_limit, bool)
            or not isinstance(self.dense_limit, int)
            or (self.dense_limit < 1)
        ):
            raise ConfigurationError(
                f"`dense_limit` must be a positive integer, got {self.dense_limit!r}."
            )
        if self.interpolation not in ("rosenbrock", "hermite", "cubic"):
            raise ConfigurationError(
                "`interpolation` must be 'rosenbrock', 'hermite' or 'cubic', got "
                f"{self.interpolation!r}."
            )

    @property
    def adaptive(self) -> bool:
        return True

    @property
    def independent_samples(self) -> bool:
        return self.independent

    def new_state(self) -> RosenbrockState:
        """The Jacobian kept for a retry and the evaluation kept for the next step, and
        the counts of the solve's Jacobians and factorisations."""
        return RosenbrockState()

    def _rows(self, y: Tensor) -> bool:
        """Whether the Jacobian is taken per sample (independent rows of a batch)."""
        return self.independent and y.dim() >= 2

    def init(self, f: Field, t0: float, y0: Tensor) -> Tensor:
        """``f(t0, y0)``, after checking the state's size against ``dense_limit`` and,
        with ``independent``, that the samples do not interact."""
        rows = self._rows(y0)
        n = y0.shape[1:].numel() if rows else y0.numel()
        if n > self.dense_limit:
            what = "elements per sample" if rows else "elements"
            raise ConfigurationError(
                f"{type(self).__name__} forms the Jacobian densely, and the state has {n} "
                f"{what}, above `dense_limit` = {self.dense_limit} (an ({n}, {n}) matrix "
                "per step). Use Kvaerno5(), which solves large states matrix-free; pass "
                "`independent=True` if the rows of the state are independent systems; "
                "or raise `dense_limit`. Under Adjoint() the backward state holds the "
                "parameters too: give Adjoint(solver=...) another solver."
            )
        if rows and _coupled(f, t0, y0):
            raise ConfigurationError(
                f"`independent=True`: the derivative of a sample of `y0` (shape "
                f"{tuple(y0.shape)}) depends on the state of other samples, so the "
                "Jacobian is not block diagonal and the per-sample solve would be wrong. "
                f"Use {type(self).__name__}() (one dense Jacobian for the whole batch)."
            )
        return f(t0, y0)

    def step(self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor) -> StepResult:
        return self.step_with(None, f, t0, t1, y0, f0)

    def step_with(
        self, state: SolveState | None, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor
    ) -> StepResult:
        tab, plan = self.tableau, _states(self.tableau)
        work = state if isinstance(state, RosenbrockState) else None
        h = t1 - t0
        # The Jacobian keeps its graph only where a gradient can flow through it: grad
        # mode alone, with nothing requiring grad, would make every step's Jacobian a
        # second-order pass for nothing.
        graph = torch.is_grad_enabled() and (y0.requires_grad or f0.requires_grad)
        jac, ft = self._start(work, f, t0, h, y0, f0, graph)
        if state is not None:
            state.n_jacobians += work is None  # another solver's state: counts only
            state.n_factorisations += 1
        matrix = _Matrix(jac, tab.gamma * h)
        if not matrix.ok:
            why = _singular(t0, t1, getattr(f, "direction", 1.0))
            return failed_step(y0, why, tab.stages, adaptive=True)
        states, us = [y0], list[Tensor]()
        for i in range(tab.stages):
            if i == 0:
                fi = f0
            else:
                ti = t1 if tab.alpha[i] == 1.0 else t0 + tab.alpha[i] * h
                states.append(_combine_terms(states[plan.base[i]], 1.0, plan.sums[i], us))
                fi = f(ti, states[i])
            rhs = _combine(fi, 1.0 / h, tab.c[i], us)
            if ft is not None and tab.gammas[i] != 0.0:
                rhs = rhs + (tab.gammas[i] * h) * ft
            us.append(matrix.solve(rhs))
        y1 = _combine_terms(states[plan.base[-1]], 1.0, plan.sums[-1], us)
        with torch.no_grad():  # step-size control only: no graph
            y_err = _combine(None, 1.0, tab.m_err, us)
        return StepResult(y1=y1, y_err=y_err, ks=tuple(us), f1=self._end(work, f, t1, y1, graph))

    def _start(
        self,
        state: RosenbrockState | None,
        f: Field,
        t0: float,
        h: float,
        y0: Tensor,
        f0: Tensor,
        graph: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """The Jacobian and ``∂f/∂t`` at the step's start, kept from the last attempt if
        it started at the same point; the Jacobian from the evaluation kept at the last
        step's end if that is this step's start."""
        own = getattr(f, "per_sample_time_step", None)  # each sample in its own time
        d = _time_step(t0, h, y0.dtype) if own is None else own(y0)
        point = (f, t0, y0, f0, graph)
        if state is not None and state.jac is not None and _same(state.start, point):
            jac, ft = state.jac, state.ft
            if not (isinstance(d, float) and d == state.d):  # a per-sample d: afresh
                ft = _time_derivative(f, t0, d, y0, f0)
        else:
            at = state.end_eval if state is not None and _same(state.end, point) else None
            jac = _jacobian(f, t0, y0, graph, self._rows(y0), at)
            ft = _time_derivative(f, t0, d, y0, f0)
            if state is not None:
                state.n_jacobians += 1
        if state is not None:
            state.start, state.jac, state.d, state.ft = point, jac, d, ft
            state.end = state.end_eval = None
        return jac, ft

    def _end(
        self, state: RosenbrockState | None, f: Field, t1: float, y1: Tensor, graph: bool
    ) -> Tensor:
        """``f(t1, y1)``, which starts the next step, evaluated with a graph from ``y1``
        (a detached copy where no gradient flows) that ``state`` keeps for the next
        step's Jacobian."""
        if state is None or not state.reuse_end or (graph and not y1.requires_grad):
            return f(t1, y1)
        x, out = _evaluated(f, t1, y1, graph)
        f1 = out if graph else out.detach()
        if out.requires_grad:
            state.end, state.end_eval = (f, t1, y1, f1, graph), (x, out)
        return f1

    def _own(self) -> bool:
        return self.interpolation == "rosenbrock" and self.tableau.dense is not None

    def _dense_terms(self, step: StepResult) -> list[Tensor]:
        assert self.tableau.dense is not None  # by _own
        return [_combine(None, 1.0, row, step.ks) for row in self.tableau.dense]

    def reader(
        self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor, step: StepResult
    ) -> Callable[[float], Tensor]:
        if not self._own():
            return super().reader(f, t0, t1, y0, f0, step)
        ds, h = self._dense_terms(step), t1 - t0

        def read(t: float) -> Tensor:
            if t == t1:
                return step.y1
            s = (t - t0) / h
            return y0 * (1.0 - s) + (step.y1 + _horner(ds, s) * (1.0 - s)) * s

        return read

    def slopes(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        step: StepResult,
        ts: Sequence[float],
        ys: Sequence[Tensor],
    ) -> list[Tensor]:
        """The exact time derivative of :meth:`interpolate`'s interpolant at ``ts``."""
        if not self._own():
            return super().slopes(f, t0, t1, y0, f0, step, ts, ys)
        ds, h = self._dense_terms(step), t1 - t0
        slope = [j * d for j, d in enumerate(ds[1:], start=1)]  # of P(s) = sum_j d_j s^(j-1)
        out = []
        for t in ts:
            s = (t - t0) / h
            # d/ds of (1 - s) y0 + s y1 + s (1 - s) P(s)
            p = _horner(ds, s) * (1.0 - 2.0 * s)
            if slope:
                p = p + _horner(slope, s) * (s * (1.0 - s))
            out.append((step.y1 - y0 + p) / h)
        return out


def _horner(coefficients: Sequence[Tensor], s: float) -> Tensor:
    """``sum_j coefficients[j] s^j``, by Horner's rule."""
    out = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        out = c + out * s
    return out


@final
@dataclass(frozen=True)
class Rodas4(_AbstractRosenbrock):
    """Hairer and Wanner's RODAS: a Rosenbrock method of order 4 for stiff problems.

    Six stages, an embedded third-order estimate, L-stable and stiffly accurate. A step
    takes one Jacobian (autograd), one LU factorisation and six back-substitutions,
    and evaluates the field seven or eight times: five stages, the derivative at the
    step's end (which starts the next step, and whose graph gives the next step's
    Jacobian), and one or two for the difference in time that gives ``∂f/∂t`` (one
    when the field does not read the time). A step retried after a rejection keeps
    its Jacobian and ``∂f/∂t`` and redoes only the factorisation, so a solve takes a
    Jacobian per accepted step (per step with per-sample steps, whose field changes
    from step to step). There are no Newton iterations, so no step
    fails to converge. A step whose matrix ``I / (gamma h) - J`` is singular is
    rejected and retried smaller (``Status.NEWTON_FAILED`` if it cannot be). The
    solution is accurate only as far as the Jacobian is: it is exact from autograd,
    and a forward difference for a field that computes without autograd.

    Gradients: by backpropagation through the steps (the Jacobian keeps its graph,
    so a step differentiates exactly, and costs a second-order backward pass), by
    :class:`~odecore.Checkpoint`, or by :class:`~odecore.Adjoint`, whose backward
    solve takes the adjoint system's Jacobian by forward differences. The adjoint
    reads the state from the forward steps (``Adjoint(state="auto")`` is
    ``"interpolated"`` for this solver), instead of integrating the stiff state
    backward.

    Args:
        independent: the rows of a state ``(batch, *state)`` are independent
            systems: the Jacobian is taken and factorised per sample, ``(batch, n,
            n)`` with one batched backward pass and a batched LU, never the dense
            ``(batch n)²`` matrix. The solve checks once, at its start, that no
            sample's derivative reads another sample's state, and refuses a
            coupled batch. A one-dimensional state (the adjoint's backward system)
            is solved densely.
        dense_limit: the most state elements (per sample with ``independent``) for
            which the dense Jacobian is formed; above it the solve is refused at its
            start with a message naming the alternatives.
        interpolation: output between step ends. ``"rosenbrock"`` (default): the
            method's continuous extension, of order 3, free; ``"hermite"``: the
            Hermite interpolant through the ends and a sub-step to the middle (order
            5, one extra step for each step that holds output times); ``"cubic"``:
            the cubic Hermite interpolant of the ends.

    Raises:
        ConfigurationError: for an option of the wrong kind; at the start of a solve,
            for a state above ``dense_limit`` or a coupled batch with
            ``independent=True``.

    Example:
        >>> import torch, odecore
        >>> def robertson(t, y):
        ...     a, b, c = y.unbind(-1)
        ...     return torch.stack([-0.04 * a + 1e4 * b * c,
        ...                         0.04 * a - 1e4 * b * c - 3e7 * b**2,
        ...                         3e7 * b**2], dim=-1)
        >>> y0 = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
        >>> sol = odecore.solve(robertson, y0, t0=0.0, t1=40.0, solver=odecore.Rodas4(),
        ...                     controller=odecore.PIDController(rtol=1e-6, atol=1e-10))
        >>> sol.status, sol.stats.n_accepted < 200
        (<Status.SUCCESS: 0>, True)

    References:
        E. Hairer, G. Wanner, Solving Ordinary Differential Equations II: Stiff and
        Differential-Algebraic Problems, 2nd ed., Springer 1996, Section VI.7 (and
        their code ``rodas.f``).
    """

    tableau = RODAS4_TABLEAU
    order = 4


@final
@dataclass(frozen=True)
class Rodas5P(_AbstractRosenbrock):
    """Steinebach's Rodas5P: a Rosenbrock method of order 5 for stiff problems.

    Eight stages, an embedded fourth-order estimate, L-stable and stiffly accurate
    (:data:`~odecore.RODAS5P_TABLEAU`). A step takes one Jacobian, one LU
    factorisation and eight back-substitutions, and evaluates the field nine or ten
    times; otherwise it works as :class:`Rodas4` does (the kept Jacobians, per-sample
    systems, gradients, events, the refusal above ``dense_limit``), and takes the same
    arguments. Its continuous extension is of order 4.

    Against :class:`Rodas4`: fewer steps at tight tolerances, where its higher order
    pays for its two extra stages, and no order reduction on stiff modes driven by
    the time (``y' = lambda (y - g(t)) + g'(t)``), where Rodas4's error estimate
    loses order and its steps shrink far below what the solution needs.

    Args:
        independent: the rows of a state ``(batch, *state)`` are independent
            systems, solved with a Jacobian and a factorisation per sample (see
            :class:`Rodas4`).
        dense_limit: the most state elements (per sample with ``independent``) for
            which the dense Jacobian is formed.
        interpolation: output between step ends: ``"rosenbrock"`` (default), the
            method's continuous extension, free; ``"hermite"`` or ``"cubic"`` as for
            :class:`Rodas4`.

    Raises:
        ConfigurationError: as :class:`Rodas4`.

    Example:
        >>> import torch, odecore
        >>> def prothero_robinson(t, y):  # a stiff mode that follows cos(t)
        ...     return -1000.0 * (y - torch.cos(t)) - torch.sin(t)
        >>> y0 = torch.tensor([1.0], dtype=torch.float64)
        >>> pid = odecore.PIDController(rtol=1e-8, atol=1e-8)
        >>> fast = odecore.solve(prothero_robinson, y0, t0=0.0, t1=5.0,
        ...                      solver=odecore.Rodas5P(), controller=pid)
        >>> slow = odecore.solve(prothero_robinson, y0, t0=0.0, t1=5.0,
        ...                      solver=odecore.Rodas4(), controller=pid)
        >>> fast.stats.n_steps < slow.stats.n_steps / 4
        True

    References:
        G. Steinebach, Construction of Rosenbrock-Wanner method Rodas5P and numerical
        benchmarks within the Julia Differential Equations package, BIT Numerical
        Mathematics 63 (2023), article 27.
    """

    tableau = RODAS5P_TABLEAU
    order = 5
