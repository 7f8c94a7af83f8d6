"""The benchmark's arithmetic: medians, ratios, overhead factors, interleaving."""

from __future__ import annotations

import math

import pytest
from odebench.perf._stats import (
    cost_per_evaluation,
    finite,
    interleaved,
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


def test_overhead_factor_forward():
    # 0.5 s for 100 evaluations of 2 ms each: the solver doubles the field's time.
    assert overhead_factor(0.5, [(100, 0.002)]) == pytest.approx(2.5)


def test_overhead_factor_sums_forward_and_backward():
    # adjoint: 10 forward evaluations of 1 ms, 30 backward ones with VJP of 3 ms.
    assert overhead_factor(0.2, [(10, 0.001), (30, 0.003)]) == pytest.approx(0.2 / 0.1)


def test_overhead_factor_at_the_physical_limit():
    assert overhead_factor(1.0, [(250, 0.004)]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "terms", [[(None, 0.1)], [(10, None)], [(0, 0.1)], [(10, 0.0)], [(10, math.nan)]]
)
def test_overhead_factor_without_a_measurement(terms):
    assert overhead_factor(1.0, terms) is None


def test_overhead_factor_without_time():
    assert overhead_factor(None, [(10, 0.1)]) is None


def test_cost_per_evaluation():
    # 60 ms for 20 evaluations of 2 ms: 1 ms of the solver's own time per evaluation.
    assert cost_per_evaluation(0.06, 20, 0.002) == pytest.approx(0.001)
    assert cost_per_evaluation(0.06, 0, 0.002) is None
    assert cost_per_evaluation(None, 20, 0.002) is None


def test_interleaved_alternates_libraries():
    assert interleaved(["a", "b"], 3) == [
        (0, "a"),
        (0, "b"),
        (1, "a"),
        (1, "b"),
        (2, "a"),
        (2, "b"),
    ]
    assert interleaved(["a"], 0) == []


def test_interleaved_rejects_negative_repeats():
    with pytest.raises(ValueError, match="`repeats` must be non-negative, got -1"):
        interleaved(["a"], -1)
