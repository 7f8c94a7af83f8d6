"""The benchmark's arithmetic: medians, ratios, overhead factors."""

from __future__ import annotations

import math

import pytest
from odebench.perf._stats import (
    cost_per_evaluation,
    finite,
    median,
    overhead_factor,
    ratio,
)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([3.0, 1.0, 2.0], 2.0),
        ([4.0, 1.0, 3.0, 2.0], 2.5),
        ([5.0], 5.0),
        ([1.0, None, 3.0], 2.0),
        ([1.0, math.nan, math.inf, 3.0], 2.0),
        ([], None),
        ([None, math.nan], None),
    ],
)
def test_median(values, expected):
    assert median(values) == expected


def test_median_takes_a_generator():
    assert median(x / 2 for x in (2, 4, 6)) == 2.0


@pytest.mark.parametrize(
    ("num", "den", "expected"),
    [
        (1.0, 4.0, 0.25),
        (3, 2, 1.5),
        (0.0, 2.0, 0.0),
        (1.0, 0.0, None),
        (0.0, 0.0, None),
        (None, 1.0, None),
        (1.0, None, None),
        (math.nan, 1.0, None),
        (1.0, math.inf, None),
        (1e308, 1e-308, None),  # overflows to inf
    ],
)
def test_ratio(num, den, expected):
    assert ratio(num, den) == expected


def test_finite_rejects_bools_and_non_finite():
    assert finite(True) is None
    assert finite(math.inf) is None
    assert finite(2) == 2.0


@pytest.mark.parametrize(
    ("time_s", "terms", "expected"),
    [
        (0.5, [(100, 0.002)], 2.5),  # 100 evaluations of 2 ms: the solver doubles the time
        (0.2, [(10, 0.001), (30, 0.003)], 0.2 / 0.1),  # adjoint: forward + backward with VJP
        (1.0, [(250, 0.004)], 1.0),  # the physical limit
    ],
)
def test_overhead_factor(time_s, terms, expected):
    assert overhead_factor(time_s, terms) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("time_s", "terms"),
    [
        (1.0, [(None, 0.1)]),
        (1.0, [(10, None)]),
        (1.0, [(0, 0.1)]),
        (1.0, [(10, 0.0)]),
        (1.0, [(10, math.nan)]),
        (None, [(10, 0.1)]),
    ],
)
def test_overhead_factor_without_a_measurement(time_s, terms):
    assert overhead_factor(time_s, terms) is None


def test_cost_per_evaluation():
    # 60 ms for 20 evaluations of 2 ms: 1 ms of the solver's own time per evaluation.
    assert cost_per_evaluation(0.06, 20, 0.002) == pytest.approx(0.001)
    assert cost_per_evaluation(0.06, 0, 0.002) is None
    assert cost_per_evaluation(None, 20, 0.002) is None
