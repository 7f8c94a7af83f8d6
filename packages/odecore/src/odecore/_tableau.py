"""Butcher tableaus: explicit Runge-Kutta methods as data.

A tableau is validated once, at construction. Everything a solver needs to know
about a method (its stages, weights, embedded error weights and continuous
extension) is here; the stepping code in ``_solvers.py`` is generic over it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

_TOL = 1e-12


@dataclass(frozen=True)
class ButcherTableau:
    """The coefficients of an explicit Runge-Kutta method.

    A step of size ``h`` from ``(t0, y0)`` computes the stages
    ``k_i = f(t0 + c_i h, y0 + h * sum_j a_ij k_j)`` and the new state
    ``y1 = y0 + h * sum_i b_i k_i``.

    Args:
        c: the stage times as fractions of the step, ``c[0] == 0``.
        a: the strictly lower-triangular stage matrix, one row per stage:
            ``()``, ``(a21,)``, ``(a31, a32)``, ...
        b: the solution weights; they sum to one.
        b_err: for an embedded pair, ``b`` minus the weights of the embedded
            lower-order solution; the local error estimate is
            ``h * sum_i b_err_i k_i``. ``None`` for a fixed-step method.
        dense: optional continuous extension. ``dense[i][j]`` is the coefficient of
            ``theta ** (j + 1)`` in the weight ``b_i(theta)`` of stage ``i``, so that
            ``y(t0 + theta h) = y0 + h * sum_i b_i(theta) k_i``. ``b_i(1)`` must equal
            ``b_i``. Methods without one are interpolated by a sub-step (see
            :class:`odecore.AbstractExplicitRK`).

    Raises:
        ValueError: if the shapes disagree, a row of ``a`` does not sum to its
            ``c``, ``b`` does not sum to one, or ``dense`` does not end at ``b``.

    Example:
        >>> heun = ButcherTableau(c=(0.0, 1.0), a=((), (1.0,)), b=(0.5, 0.5))
        >>> heun.stages, heun.fsal
        (2, False)
    """

    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    b_err: tuple[float, ...] | None = None
    dense: tuple[tuple[float, ...], ...] | None = None
    dense_order: int | None = None

    def __post_init__(self) -> None:
        s = len(self.c)
        if s and self.c[0] != 0.0:
            raise ValueError(f"`c[0]` must be 0 for an explicit method, got {self.c[0]}.")
        check_weights(self.c, self.a, self.b, self.b_err, lambda i: i, "strictly lower triangular")
        if (self.dense is None) != (self.dense_order is None):
            raise ValueError("`dense` and `dense_order` must be given together.")
        if self.dense is not None:
            if len(self.dense) != s:
                raise ValueError(f"`dense` must have {s} rows, got {len(self.dense)}.")
            for i, row in enumerate(self.dense):
                if abs(math.fsum(row) - self.b[i]) > 1e-10:
                    raise ValueError(
                        f"`dense` row {i} gives b_{i}(1) = {math.fsum(row)!r}, but `b[{i}]` "
                        f"is {self.b[i]!r}."
                    )

    @property
    def stages(self) -> int:
        """Number of stages, i.e. function evaluations of a step without FSAL reuse."""
        return len(self.c)

    @property
    def fsal(self) -> bool:
        """Whether the last stage is ``f(t1, y1)``, the next step's first (first same as last).

        Derived from the coefficients: the last row of ``a`` equals ``b`` and
        ``c[-1] == 1``.
        """
        if self.stages < 2 or self.c[-1] != 1.0:
            return False
        return all(abs(x - y) <= _TOL for x, y in zip(self.a[-1], self.b[:-1])) and (
            self.b[-1] == 0.0
        )

    @property
    def adaptive(self) -> bool:
        """Whether the tableau has an embedded error estimate."""
        return self.b_err is not None

    @property
    def evaluations_per_step(self) -> int:
        """Function evaluations of one accepted step in a long run (FSAL saves one)."""
        return self.stages - 1 if self.fsal else self.stages


def check_weights(
    c: Sequence[float],
    a: Sequence[Sequence[float]],
    b: Sequence[float],
    b_err: Sequence[float] | None,
    row_length: Callable[[int], int],
    shape: str,
) -> None:
    """Check a Runge-Kutta tableau's consistency: ``a``'s rows (row ``i`` has
    ``row_length(i)`` entries, the ``shape`` named in the error) sum to ``c``, ``b``
    sums to 1 and ``b_err`` to 0. Shared by the explicit and the implicit tableaus."""
    s = len(c)
    if s == 0:
        raise ValueError("`c` must have at least one stage.")
    if len(a) != s or len(b) != s:
        raise ValueError(
            f"`a` has {len(a)} rows and `b` {len(b)} entries; both must "
            f"match the {s} stages of `c`."
        )
    for i, row in enumerate(a):
        if len(row) != row_length(i):
            raise ValueError(
                f"row {i} of `a` must have {row_length(i)} entries ({shape}), got {len(row)}."
            )
        if abs(math.fsum(row) - c[i]) > _TOL:
            raise ValueError(
                f"row {i} of `a` sums to {math.fsum(row)!r}, but `c[{i}]` is {c[i]!r}."
            )
    if abs(math.fsum(b) - 1.0) > _TOL:
        raise ValueError(f"`b` must sum to 1, got {math.fsum(b)!r}.")
    if b_err is not None:
        if len(b_err) != s:
            raise ValueError(f"`b_err` must have {s} entries, got {len(b_err)}.")
        if abs(math.fsum(b_err)) > _TOL:
            raise ValueError(
                "`b_err` must sum to 0 (it is `b` minus another set of weights that "
                f"sums to 1), got {math.fsum(b_err)!r}."
            )


def _poly_mul(p: Sequence[Fraction], q: Sequence[Fraction]) -> list[Fraction]:
    out = [Fraction(0)] * (len(p) + len(q) - 1)
    for i, x in enumerate(p):
        for j, y in enumerate(q):
            out[i + j] += x * y
    return out


def _poly_add(*ps: Sequence[Fraction]) -> list[Fraction]:
    n = max(len(p) for p in ps)
    return [sum((p[i] for p in ps if i < len(p)), Fraction(0)) for i in range(n)]


def _to_dense(polys: Sequence[Sequence[Fraction]]) -> tuple[tuple[float, ...], ...]:
    """Drop the constant term (always zero) and convert to floats."""
    degree = max(len(p) for p in polys) - 1
    return tuple(
        tuple(float(p[j]) if j < len(p) else 0.0 for j in range(1, degree + 1)) for p in polys
    )


def _hermite_dense(b: Sequence[Fraction]) -> tuple[tuple[float, ...], ...]:
    """Cubic Hermite interpolation on ``y0, f0, y1, f1`` written as stage weights.

    Valid for FSAL tableaus (the last stage is ``f(t1, y1)``). With
    ``h01 = 3θ² - 2θ³``, ``h10 = θ - 2θ² + θ³`` and ``h11 = θ³ - θ²``,
    ``b_i(θ) = h01 b_i + h10 [i = first] + h11 [i = last]``.
    """
    h01 = [Fraction(0), Fraction(0), Fraction(3), Fraction(-2)]
    h10 = [Fraction(0), Fraction(1), Fraction(-2), Fraction(1)]
    h11 = [Fraction(0), Fraction(0), Fraction(-1), Fraction(1)]
    s = len(b)
    polys = []
    for i in range(s):
        p = [x * b[i] for x in h01]
        if i == 0:
            p = _poly_add(p, h10)
        if i == s - 1:
            p = _poly_add(p, h11)
        polys.append(p)
    return _to_dense(polys)


def _shampine_dense(b: Sequence[Fraction], d: Sequence[Fraction]) -> tuple[tuple[float, ...], ...]:
    """The fourth-order continuous extension of Dormand-Prince 5(4) (Hairer's ``CONTD5``).

    ``y(θ) - y0 = θ r2 + θ(1-θ) r3 + θ²(1-θ) r4 + θ²(1-θ)² r5`` with
    ``r2 = y1 - y0``, ``r3 = h f0 - r2``, ``r4 = 2 r2 - h f0 - h f1`` and
    ``r5 = h sum_i d_i k_i``; expanded here into one polynomial per stage.
    """
    one = Fraction(1)
    theta = [Fraction(0), one]
    t_1mt = _poly_mul(theta, [one, -one])  # θ(1-θ)
    t2_1mt = _poly_mul(theta, t_1mt)  # θ²(1-θ)
    t2_1mt2 = _poly_mul(t_1mt, t_1mt)  # θ²(1-θ)²
    s = len(b)
    polys = []
    for i in range(s):
        first = one if i == 0 else Fraction(0)
        last = one if i == s - 1 else Fraction(0)
        polys.append(
            _poly_add(
                [x * b[i] for x in theta],
                [x * (first - b[i]) for x in t_1mt],
                [x * (2 * b[i] - first - last) for x in t2_1mt],
                [x * d[i] for x in t2_1mt2],
            )
        )
    return _to_dense(polys)


def _f(x: str) -> Fraction:
    return Fraction(x)


def _floats(xs: Sequence[Fraction | int | str]) -> tuple[float, ...]:
    return tuple(float(Fraction(x)) for x in xs)


def _rows(rows: Sequence[Sequence[Fraction | int | str]]) -> tuple[tuple[float, ...], ...]:
    return tuple(_floats(r) for r in rows)


def _err(
    b: Sequence[Fraction | int | str], bhat: Sequence[Fraction | int | str]
) -> tuple[float, ...]:
    return tuple(float(Fraction(x) - Fraction(y)) for x, y in zip(b, bhat))


# --- fixed-step methods -----------------------------------------------------------

EULER_TABLEAU = ButcherTableau(c=(0.0,), a=((),), b=(1.0,))
"""Forward Euler: order 1, one stage."""

MIDPOINT_TABLEAU = ButcherTableau(c=(0.0, 0.5), a=((), (0.5,)), b=(0.0, 1.0))
"""Explicit midpoint: order 2, two stages."""

HEUN_TABLEAU = ButcherTableau(c=(0.0, 1.0), a=((), (1.0,)), b=(0.5, 0.5))
"""Heun's method (explicit trapezoidal rule): order 2, two stages."""

RALSTON_TABLEAU = ButcherTableau(c=(0.0, 2 / 3), a=((), (2 / 3,)), b=(0.25, 0.75))
"""Ralston's second-order method (minimum error bound): order 2, two stages."""

RK4_TABLEAU = ButcherTableau(
    c=(0.0, 0.5, 0.5, 1.0),
    a=((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
    b=(1 / 6, 1 / 3, 1 / 3, 1 / 6),
)
"""The classic fourth-order Runge-Kutta method (RK4-classic): order 4, four stages."""

RK4_38_TABLEAU = ButcherTableau(
    c=(0.0, 1 / 3, 2 / 3, 1.0),
    a=((), (1 / 3,), (-1 / 3, 1.0), (1.0, -1.0, 1.0)),
    b=(1 / 8, 3 / 8, 3 / 8, 1 / 8),
)
"""Kutta's 3/8 rule (RK4-3/8): order 4, four stages."""

HEUN3_TABLEAU = ButcherTableau(
    c=_floats(["0", "1/3", "2/3"]),
    a=_rows([[], ["1/3"], ["0", "2/3"]]),
    b=_floats(["1/4", "0", "3/4"]),
)
"""Heun's third-order method: order 3, three stages (torchdiffeq's ``heun3``)."""

# --- embedded pairs -----------------------------------------------------------------

HEUN_EULER_TABLEAU = ButcherTableau(c=(0.0, 1.0), a=((), (1.0,)), b=(0.5, 0.5), b_err=(-0.5, 0.5))
"""Heun-Euler 2(1): Heun's method with forward Euler as the embedded estimate."""

_FE2_B = ["1/512", "255/256", "1/512"]
FEHLBERG2_TABLEAU = ButcherTableau(
    c=_floats(["0", "1/2", "1"]),
    a=_rows([[], ["1/2"], ["1/256", "255/256"]]),
    b=_floats(_FE2_B),
    b_err=_err(_FE2_B, ["1/256", "255/256", "0"]),
)
"""Fehlberg 2(1): three stages, the second-order solution propagated (as torchdiffeq's
``fehlberg2``), the first-order one as the embedded estimate.

The third stage is ``f`` at the first-order solution, not at the propagated one, so
the tableau is not first-same-as-last here.
"""

_BS_B = [_f("2/9"), _f("1/3"), _f("4/9"), _f("0")]
BOSH3_TABLEAU = ButcherTableau(
    c=(0.0, 0.5, 0.75, 1.0),
    a=_rows([[], ["1/2"], [0, "3/4"], ["2/9", "1/3", "4/9"]]),
    b=_floats(_BS_B),
    b_err=_err(_BS_B, ["7/24", "1/4", "1/3", "1/8"]),
    dense=_hermite_dense(_BS_B),
    dense_order=3,
)
"""Bogacki-Shampine 3(2): four stages, FSAL, cubic Hermite dense output."""

_DP5_B = [_f(x) for x in ["35/384", "0", "500/1113", "125/192", "-2187/6784", "11/84", "0"]]
_DP5_BHAT = ["5179/57600", "0", "7571/16695", "393/640", "-92097/339200", "187/2100", "1/40"]
_DP5_D = [
    _f(x)
    for x in [
        "-12715105075/11282082432",
        "0",
        "87487479700/32700410799",
        "-10690763975/1880347072",
        "701980252875/199316789632",
        "-1453857185/822651844",
        "69997945/29380423",
    ]
]
DOPRI5_TABLEAU = ButcherTableau(
    c=_floats(["0", "1/5", "3/10", "4/5", "8/9", "1", "1"]),
    a=_rows(
        [
            [],
            ["1/5"],
            ["3/40", "9/40"],
            ["44/45", "-56/15", "32/9"],
            ["19372/6561", "-25360/2187", "64448/6561", "-212/729"],
            ["9017/3168", "-355/33", "46732/5247", "49/176", "-5103/18656"],
            ["35/384", "0", "500/1113", "125/192", "-2187/6784", "11/84"],
        ]
    ),
    b=_floats(_DP5_B),
    b_err=_err(_DP5_B, _DP5_BHAT),
    dense=_shampine_dense(_DP5_B, _DP5_D),
    dense_order=4,
)
"""Dormand-Prince 5(4): seven stages, FSAL, Shampine's fourth-order dense output."""

_TS5_C = (0.0, 0.161, 0.327, 0.9, 0.9800255409045097, 1.0, 1.0)
_TS5_A_TAIL = (  # a_ij for j >= 2; a_i1 = c_i - sum of the rest
    (),
    (),
    (0.3354806554923570,),
    (-6.359448489975075, 4.362295432869581),
    (-11.74888356406283, 7.495539342889836, -0.09249506636175525),
    (-12.92096931784711, 8.159367898576159, -0.07158497328140100, -0.02826905039406838),
    (0.01, 0.4798896504144996, 1.379008574103742, -3.290069515436081, 2.324710524099774),
)
_TS5_A = tuple(
    (() if i == 0 else (_TS5_C[i] - math.fsum(tail), *tail)) for i, tail in enumerate(_TS5_A_TAIL)
)
_TS5_B = _TS5_A[-1] + (0.0,)
TSIT5_TABLEAU = ButcherTableau(
    c=_TS5_C,
    a=_TS5_A,
    b=_TS5_B,
    # b minus the embedded fourth-order weights (sign of the last entry as corrected
    # after publication).
    b_err=(
        -0.001780011052225777,
        -0.0008164344596567469,
        0.007880878010261995,
        -0.1447110071732629,
        0.5823571654525552,
        -0.45808210592918697,
        1 / 66,
    ),
    dense=(
        (1.0, -2.763706197274826, 2.9132554618219126, -1.0530884977290216),
        (0.0, 0.13169999999999998, -0.2234, 0.1017),
        (0.0, 3.9302962368947516, -5.941033872131505, 2.490627285651253),
        (0.0, -12.411077166933676, 30.33818863028232, -16.548102889244902),
        (0.0, 37.50931341651104, -88.1789048947664, 47.37952196281928),
        (0.0, -27.896526289197286, 65.09189467479366, -34.87065786149661),
        (0.0, 1.5, -4.0, 2.5),
    ),
    dense_order=4,
)
"""Tsitouras 5(4): seven stages, FSAL, a free fourth-order dense output."""

_DP8_C = [
    "0", "1/18", "1/12", "1/8", "5/16", "3/8", "59/400", "93/200",
    "5490023248/9719169821", "13/20", "1201146811/1299019798", "1", "1",
]  # fmt: skip
_DP8_A = [
    [],
    ["1/18"],
    ["1/48", "1/16"],
    ["1/32", "0", "3/32"],
    ["5/16", "0", "-75/64", "75/64"],
    ["3/80", "0", "0", "3/16", "3/20"],
    ["29443841/614563906", "0", "0", "77736538/692538347", "-28693883/1125000000",
     "23124283/1800000000"],
    ["16016141/946692911", "0", "0", "61564180/158732637", "22789713/633445777",
     "545815736/2771057229", "-180193667/1043307555"],
    ["39632708/573591083", "0", "0", "-433636366/683701615", "-421739975/2616292301",
     "100302831/723423059", "790204164/839813087", "800635310/3783071287"],
    ["246121993/1340847787", "0", "0", "-37695042795/15268766246", "-309121744/1061227803",
     "-12992083/490766935", "6005943493/2108947869", "393006217/1396673457",
     "123872331/1001029789"],
    ["-1028468189/846180014", "0", "0", "8478235783/508512852", "1311729495/1432422823",
     "-10304129995/1701304382", "-48777925059/3047939560", "15336726248/1032824649",
     "-45442868181/3398467696", "3065993473/597172653"],
    ["185892177/718116043", "0", "0", "-3185094517/667107341", "-477755414/1098053517",
     "-703635378/230739211", "5731566787/1027545527", "5232866602/850066563",
     "-4093664535/808688257", "3962137247/1805957418", "65686358/487910083"],
    ["403863854/491063109", "0", "0", "-5068492393/434740067", "-411421997/543043805",
     "652783627/914296604", "11173962825/925320556", "-13158990841/6184727034",
     "3936647629/1978049680", "-160528059/685178525", "248638103/1413531060", "0"],
]  # fmt: skip
_DP8_B = [
    "14005451/335480064", "0", "0", "0", "0", "-59238493/1068277825", "181606767/758867731",
    "561292985/797845732", "-1041891430/1371343529", "760417239/1151165299",
    "118820643/751138087", "-528747749/2220607170", "1/4",
]  # fmt: skip
_DP8_BHAT = [
    "13451932/455176623", "0", "0", "0", "0", "-808719846/976000145", "1757004468/5645159321",
    "656045339/265891186", "-3867574721/1518517206", "465885868/322736535",
    "53011238/667516719", "2/45", "0",
]  # fmt: skip


def _exact_rows(rows: Sequence[Sequence[str]], c: Sequence[str]) -> tuple[tuple[float, ...], ...]:
    """Rows whose published rationals are rounded so that each row sums to ``c``.

    The published coefficients of RK8(7)13M are rational approximations whose row
    sums miss ``c_i`` by up to 1e-18 in exact arithmetic; the first entry absorbs
    the difference, keeping the tableau consistent to rounding.
    """
    out: list[tuple[float, ...]] = []
    for row, ci in zip(rows, c):
        if not row:
            out.append(())
            continue
        tail = [Fraction(x) for x in row[1:]]
        out.append((float(Fraction(ci) - sum(tail, Fraction(0))), *tuple(float(x) for x in tail)))
    return tuple(out)


DOPRI8_TABLEAU = ButcherTableau(
    c=_floats(_DP8_C),
    a=_exact_rows(_DP8_A, _DP8_C),
    b=_floats(_DP8_B),
    b_err=_err(_DP8_B, _DP8_BHAT),
)
"""Prince-Dormand 8(7), RK8(7)13M: thirteen stages, eighth order with a seventh-order estimate.

It has no free continuous extension, so output times inside a step are read off a
Hermite interpolant of sub-step values (see :class:`odecore.AbstractExplicitRK`).
"""
