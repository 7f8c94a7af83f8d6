"""Butcher tableaus: order conditions from rooted trees, FSAL, validation.

The order conditions of an explicit Runge-Kutta method are checked against
Butcher's theory directly: for every rooted tree ``tau`` with at most ``p``
vertices, ``sum_i b_i Phi_i(tau) = 1 / gamma(tau)``, where ``Phi`` is the
elementary weight and ``gamma`` the density of the tree. Continuous extensions
satisfy ``sum_i b_i(theta) Phi_i(tau) = theta**rho(tau) / gamma(tau)``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import odecore
import oracles
import pytest
from odecore import ButcherTableau

# --- rooted trees ---------------------------------------------------------------------
# A tree is the sorted tuple of its children's subtrees; the single vertex is ().


def _order(tree: tuple) -> int:
    return 1 + sum(_order(child) for child in tree)


@functools.cache
def _forests(weight: int) -> frozenset[tuple]:
    """Every multiset of trees (as a sorted tuple) with ``weight`` vertices in total."""
    if weight == 0:
        return frozenset({()})
    out = set()
    for k in range(1, weight + 1):
        for first in trees_of_order(k):
            for rest in _forests(weight - k):
                out.add(tuple(sorted((first, *rest))))
    return frozenset(out)


@functools.cache
def trees_of_order(n: int) -> tuple[tuple, ...]:
    """The rooted trees with exactly ``n`` vertices, in a fixed order."""
    if n == 1:
        return ((),)
    return tuple(sorted(_forests(n - 1)))


def trees_up_to(n: int) -> list[tuple]:
    return [tree for k in range(1, n + 1) for tree in trees_of_order(k)]


def density(tree: tuple) -> int:
    """``gamma(tau) = |tau| * prod gamma(children)``."""
    return _order(tree) * math.prod(density(child) for child in tree)


def elementary_weights(tab: ButcherTableau, tree: tuple) -> np.ndarray:
    """``Phi(tau)`` per stage: ones for the single vertex, else ``prod_k (A Phi(tau_k))``."""
    a = _a_matrix(tab)
    out = np.ones(tab.stages)
    for child in tree:
        out = out * (a @ elementary_weights(tab, child))
    return out


def _a_matrix(tab: ButcherTableau) -> np.ndarray:
    s = tab.stages
    a = np.zeros((s, s))
    for i, row in enumerate(tab.a):
        a[i, : len(row)] = row
    return a


def order_residuals(weights: np.ndarray | tuple, tab: ButcherTableau, n: int) -> np.ndarray:
    """``b . Phi(tau) - 1 / gamma(tau)`` for every tree with at most ``n`` vertices."""
    b = np.asarray(weights, dtype=np.float64)
    return np.array([b @ elementary_weights(tab, t) - 1.0 / density(t) for t in trees_up_to(n)])


def residuals_of_order(weights: np.ndarray | tuple, tab: ButcherTableau, n: int) -> np.ndarray:
    """Like :func:`order_residuals`, for the trees with exactly ``n`` vertices only."""
    b = np.asarray(weights, dtype=np.float64)
    return np.array([b @ elementary_weights(tab, t) - 1.0 / density(t) for t in trees_of_order(n)])


def dense_weights(tab: ButcherTableau, theta: float) -> np.ndarray:
    assert tab.dense is not None
    return np.array(
        [sum(p * theta ** (j + 1) for j, p in enumerate(row)) for row in tab.dense],
        dtype=np.float64,
    )


def continuous_residuals(tab: ButcherTableau, theta: float, n: int) -> np.ndarray:
    """``sum_i b_i(theta) Phi_i(tau) - theta**rho / gamma`` for trees up to ``n`` vertices."""
    bt = dense_weights(tab, theta)
    return np.array(
        [bt @ elementary_weights(tab, t) - theta ** _order(t) / density(t) for t in trees_up_to(n)]
    )


# --- the shipped solvers --------------------------------------------------------------

SOLVERS = oracles.RK_SOLVERS
FIXED = [cls for cls in SOLVERS if not cls.tableau.adaptive]
ADAPTIVE = [cls for cls in SOLVERS if cls.tableau.adaptive]
TABLEAU_NAMES = sorted(name for name in odecore.__all__ if name.endswith("_TABLEAU"))

DENSE_ORDER = {odecore.Bosh3: 3, odecore.Dopri5: 4, odecore.Tsit5: 4}
"""The order of each shipped continuous extension."""

FSAL = {odecore.Bosh3, odecore.Dopri5, odecore.Tsit5}
"""The solvers whose tableau is first-same-as-last."""

_ids = functools.partial(pytest.mark.parametrize, ids=lambda cls: cls.__name__)


# --- the tree machinery itself -------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "count"), [(1, 1), (2, 1), (3, 2), (4, 4), (5, 9), (6, 20), (7, 48), (8, 115), (9, 286)]
)
def test_number_of_rooted_trees(n, count):
    # OEIS A000081: the generator finds every tree once.
    assert len(trees_of_order(n)) == count
    assert len(set(trees_of_order(n))) == count


@pytest.mark.parametrize(
    ("tree", "gamma"),
    [((), 1), (((),), 2), (((), ()), 3), ((((),),), 6), (((), (), ()), 4), (((((),),),), 24)],
)
def test_density_of_small_trees(tree, gamma):
    assert density(tree) == gamma


# --- every tableau belongs to a solver ------------------------------------------------


def test_every_shipped_tableau_has_a_solver():
    # The explicit Runge-Kutta solvers' Butcher tableaus, and the Rosenbrock ones.
    shipped = [*SOLVERS, odecore.Rodas4, odecore.Rodas5P]
    used = {id(cls.tableau) for cls in shipped}
    unused = [name for name in TABLEAU_NAMES if id(getattr(odecore, name)) not in used]
    assert unused == []
    assert len(TABLEAU_NAMES) == len(shipped) == 15


@pytest.mark.parametrize("name", TABLEAU_NAMES)
def test_shipped_tableaus_are_tableaus(name):
    kind = odecore.RosenbrockTableau if name.startswith("RODAS") else ButcherTableau
    assert isinstance(getattr(odecore, name), kind)


@_ids("solver", SOLVERS)
def test_stage_times_are_row_sums(solver):
    tab = solver.tableau
    np.testing.assert_allclose(_a_matrix(tab).sum(axis=1), tab.c, rtol=0, atol=1e-14)


# --- order conditions -------------------------------------------------------------------


@_ids("solver", SOLVERS)
def test_order_conditions_met(solver):
    tab = solver.tableau
    res = order_residuals(tab.b, tab, solver.order)
    assert np.abs(res).max() < 1e-10, res


@_ids("solver", SOLVERS)
def test_next_order_conditions_not_all_met(solver):
    # The order is exact, not a lower bound: a test that could fail.
    tab = solver.tableau
    res = residuals_of_order(tab.b, tab, solver.order + 1)
    assert np.abs(res).max() > 1e-6


@_ids("solver", ADAPTIVE)
def test_embedded_weights_have_order_one_less(solver):
    tab = solver.tableau
    embedded = np.asarray(tab.b) - np.asarray(tab.b_err)
    res = order_residuals(embedded, tab, solver.order - 1)
    assert np.abs(res).max() < 1e-10, res


@_ids("solver", ADAPTIVE)
def test_embedded_weights_are_not_of_full_order(solver):
    # Otherwise the error estimate b_err would be of higher order than claimed, or zero.
    tab = solver.tableau
    embedded = np.asarray(tab.b) - np.asarray(tab.b_err)
    assert np.abs(residuals_of_order(embedded, tab, solver.order)).max() > 1e-6


@_ids("solver", ADAPTIVE)
def test_error_weights_sum_to_zero(solver):
    assert abs(math.fsum(solver.tableau.b_err)) < 1e-14


# --- continuous extensions -------------------------------------------------------------------


def test_dense_extensions_are_the_known_ones():
    assert {cls for cls in SOLVERS if cls.tableau.dense is not None} == set(DENSE_ORDER)


@pytest.mark.parametrize("theta", [0.1, 0.25, 0.5, 0.8, 1.0])
@_ids("solver", list(DENSE_ORDER))
def test_continuous_order_conditions(solver, theta):
    tab = solver.tableau
    res = continuous_residuals(tab, theta, DENSE_ORDER[solver])
    assert np.abs(res).max() < 1e-10, res


@_ids("solver", list(DENSE_ORDER))
def test_continuous_extension_is_not_of_higher_order(solver):
    tab = solver.tableau
    order = DENSE_ORDER[solver] + 1
    bt = dense_weights(tab, 0.5)
    res = [bt @ elementary_weights(tab, t) - 0.5**order / density(t) for t in trees_of_order(order)]
    assert max(abs(r) for r in res) > 1e-8


@_ids("solver", list(DENSE_ORDER))
def test_continuous_extension_ends_at_b(solver):
    tab = solver.tableau
    np.testing.assert_allclose(dense_weights(tab, 1.0), tab.b, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(dense_weights(tab, 0.0), np.zeros(tab.stages))


# --- FSAL ----------------------------------------------------------------------------


@_ids("solver", SOLVERS)
def test_fsal_flag(solver):
    assert solver.tableau.fsal == (solver in FSAL)


@_ids("solver", SOLVERS)
def test_fsal_means_last_row_is_b(solver):
    tab = solver.tableau
    last_row_is_b = (
        tab.c[-1] == 1.0
        and tab.b[-1] == 0.0
        and np.allclose(tab.a[-1], tab.b[:-1], rtol=0, atol=1e-14)
    )
    assert tab.fsal == last_row_is_b


@_ids("solver", SOLVERS)
def test_evaluations_per_step(solver):
    tab = solver.tableau
    assert tab.evaluations_per_step == tab.stages - (1 if solver in FSAL else 0)


@pytest.mark.parametrize(
    ("tableau", "fsal"),
    [
        # Heun with f(t1, y1) appended as a third, weightless stage: FSAL.
        (ButcherTableau(c=(0.0, 1.0, 1.0), a=((), (1.0,), (0.5, 0.5)), b=(0.5, 0.5, 0.0)), True),
        # The same, but the last stage carries weight: not FSAL.
        (
            ButcherTableau(c=(0.0, 1.0, 1.0), a=((), (1.0,), (0.5, 0.5)), b=(0.5, 0.25, 0.25)),
            False,
        ),
        # Last stage at t1 but not at y1.
        (ButcherTableau(c=(0.0, 1.0, 1.0), a=((), (1.0,), (0.0, 1.0)), b=(0.5, 0.5, 0.0)), False),
        # Last row equals b but the stage is not at t1.
        (ButcherTableau(c=(0.0, 0.5), a=((), (0.5,)), b=(0.5, 0.5)), False),
        (ButcherTableau(c=(0.0,), a=((),), b=(1.0,)), False),
    ],
    ids=["fsal", "weighted-last", "not-at-y1", "not-at-t1", "one-stage"],
)
def test_fsal_derived_from_coefficients(tableau, fsal):
    assert tableau.fsal is fsal
    assert tableau.evaluations_per_step == tableau.stages - (1 if fsal else 0)


def test_tableau_properties():
    tab = ButcherTableau(c=(0.0, 1.0), a=((), (1.0,)), b=(0.5, 0.5), b_err=(-0.5, 0.5))
    assert tab.stages == 2
    assert tab.adaptive
    assert not odecore.RK4_TABLEAU.adaptive


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"c": (), "a": (), "b": ()}, r"`c` must have at least one stage"),
        ({"c": (0.0, 1.0), "a": ((),), "b": (0.5, 0.5)}, r"`a` has 1 rows and `b` 2 entries"),
        ({"c": (0.0, 1.0), "a": ((), (1.0,)), "b": (1.0,)}, r"`a` has 2 rows and `b` 1 entries"),
        ({"c": (0.5,), "a": ((),), "b": (1.0,)}, r"`c\[0\]` must be 0"),
        (
            {"c": (0.0, 1.0), "a": ((), (0.5, 0.5)), "b": (0.5, 0.5)},
            r"row 1 of `a` must have 1 entries \(strictly lower triangular\), got 2",
        ),
        (
            {"c": (0.0, 1.0), "a": ((0.0,), (1.0,)), "b": (0.5, 0.5)},
            r"row 0 of `a` must have 0 entries",
        ),
        (
            {"c": (0.0, 0.5), "a": ((), (1.0,)), "b": (0.5, 0.5)},
            r"row 1 of `a` sums to 1\.0, but `c\[1\]` is 0\.5",
        ),
        ({"c": (0.0, 1.0), "a": ((), (1.0,)), "b": (0.5, 0.6)}, r"`b` must sum to 1, got 1\.1"),
        (
            {"c": (0.0, 1.0), "a": ((), (1.0,)), "b": (0.5, 0.5), "b_err": (1.0,)},
            r"`b_err` must have 2 entries, got 1",
        ),
        (
            {"c": (0.0, 1.0), "a": ((), (1.0,)), "b": (0.5, 0.5), "b_err": (0.5, 0.5)},
            r"`b_err` must sum to 0",
        ),
        (
            {
                "c": (0.0, 1.0),
                "a": ((), (1.0,)),
                "b": (0.5, 0.5),
                "dense": ((0.5,),),
                "dense_order": 1,
            },
            r"`dense` must have 2 rows, got 1",
        ),
        (
            {
                "c": (0.0, 1.0),
                "a": ((), (1.0,)),
                "b": (0.5, 0.5),
                "dense": ((0.5,), (0.4,)),
                "dense_order": 1,
            },
            r"`dense` row 1 gives b_1\(1\) = 0\.4, but `b\[1\]` is 0\.5",
        ),
        (
            {"c": (0.0, 1.0), "a": ((), (1.0,)), "b": (0.5, 0.5), "dense": ((0.5,), (0.5,))},
            r"`dense` and `dense_order` must be given together",
        ),
    ],
    ids=[
        "no-stages",
        "a-rows",
        "b-entries",
        "c0",
        "row-too-long",
        "first-row",
        "row-sum",
        "b-sum",
        "b_err-shape",
        "b_err-sum",
        "dense-rows",
        "dense-end",
        "dense-order",
    ],
)
def test_validation_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ButcherTableau(**kwargs)


def test_validation_accepts_rounding_in_row_sums():
    # Row sums that miss c by a rounding error are fine (1/3 + 1/3 + 1/3 != 1.0 exactly is not).
    tab = ButcherTableau(
        c=(0.0, 0.3),
        a=((), (0.1 + 0.2,)),
        b=(1 / 3, 2 / 3),
        dense=((1 / 3,), (2 / 3,)),
        dense_order=1,
    )
    assert tab.stages == 2


def test_tableaus_are_immutable():
    with pytest.raises(AttributeError):
        odecore.RK4_TABLEAU.b = (1.0, 0.0, 0.0, 0.0)  # type: ignore[misc]
