"""Bound claims: one value against thresholds, strict or inclusive, NaN never holding."""

from __future__ import annotations

import math
import statistics

import pytest
from odebench.experiments import Claim, Metric, Values

ACC = Metric("acc", spec=".1f", scale=100, unit="%")


def _words(claim: Claim, *values: float | None) -> list[str]:
    """The verdict of ``claim`` on one seed of each value of the run ``r``."""
    return [claim.check([Values({"r": {"acc": a}})]).words for a in values]


@pytest.mark.parametrize(
    ("strict", "words"),
    [(False, ["not held", "held", "held"]), (True, ["not held", "not held", "held"])],
)
def test_at_least_includes_its_bound_unless_strict(strict: bool, words: list[str]) -> None:
    claim = Claim.at_least("k", "t", "", ACC.of("r"), 0.5, strict=strict, kind="paper")
    assert _words(claim, 0.4999, 0.5, 0.5001) == words


@pytest.mark.parametrize(
    ("strict", "words"),
    [(False, ["held", "held", "not held"]), (True, ["held", "not held", "not held"])],
)
def test_at_most_includes_its_bound_unless_strict(strict: bool, words: list[str]) -> None:
    claim = Claim.at_most("k", "t", "", ACC.of("r"), 0.5, strict=strict, kind="paper")
    assert _words(claim, 0.4999, 0.5, 0.5001) == words


@pytest.mark.parametrize(
    ("strict", "words"),
    [
        (False, ["not held", "held", "held", "held", "not held"]),
        (True, ["not held", "not held", "held", "not held", "not held"]),
    ],
)
def test_between_includes_both_bounds_unless_strict(strict: bool, words: list[str]) -> None:
    claim = Claim.between("k", "t", "", ACC.of("r"), 0.35, 0.65, strict=strict, kind="paper")
    assert _words(claim, 0.3, 0.35, 0.5, 0.65, 0.7) == words


@pytest.mark.parametrize("missing", [None, math.nan, math.inf])
def test_a_missing_value_never_holds(missing: float | None) -> None:
    """A bound of minus infinity holds for every number, and still not for a missing one."""
    claims = [
        Claim.at_least("k", "t", "", ACC.of("r"), -math.inf, kind="check"),
        Claim.at_most("k", "t", "", lambda v: v[ACC.of("r")], math.inf, kind="check"),
        Claim.between("k", "t", "", ACC.of("r"), -math.inf, math.inf, kind="check"),
    ]
    for claim in claims:
        assert _words(claim, 0.5, missing) == ["passed", "failed"]


def test_a_bound_reads_a_function_of_the_values_as_ours() -> None:
    """``ours`` is the value tested, a ratio here, in the format given."""
    ratio = Claim.at_most("k", "t", 0.5, lambda v: v[ACC.of("a")] / v[ACC.of("b")], 0.6,
                          spec=".2f", unit="×", kind="paper")  # fmt: skip
    seeds = [Values({"a": {"acc": a}, "b": {"acc": 0.8}}) for a in (0.4, 0.48)]
    verdict = ratio.check(seeds)
    assert verdict.ours.values == pytest.approx((0.5, 0.6))
    assert verdict.ours.cell(*ratio.format) == "0.55 ± 0.07×"
    assert (verdict.published, verdict.status) == ("0.50×", "held")


def test_a_bound_on_a_metric_takes_its_format_unless_given() -> None:
    seed = [Values({"r": {"acc": 0.25}})]
    own = Claim.at_least("k", "t", 0.5, ACC.of("r"), 0.2, kind="paper")
    assert own.format == (".1f", 100, "%")
    assert (own.check(seed).ours.cell(*own.format), own.check(seed).published) == ("25.0%", "50.0%")
    given = Claim.at_least("k", "t", 0.5, ACC.of("r"), 0.2, spec=".3f", kind="paper")
    assert given.format == (".3f", 100, "%")
    assert Claim.at_least("k", "t", "", lambda v: 0.0, 0.0, kind="paper").format == (".3g", 1.0, "")


def test_a_timing_bound_is_not_judged_on_a_contended_machine() -> None:
    claim = Claim.at_least("k", "t", "", ACC.of("r"), 0.9, strict=True, timing=True, kind="paper")
    seeds = [Values({"r": {"acc": 0.95}})]
    assert claim.check(seeds).status == "held"
    assert claim.check(seeds, contended=True).status == "contended"


def test_bad_bounds_are_clear() -> None:
    with pytest.raises(ValueError, match=r"Claim.between 'k': the lower bound 0.7 is above"):
        Claim.between("k", "t", "", ACC.of("r"), 0.7, 0.3, kind="paper")
    with pytest.raises(ValueError, match=r"Claim.at_least 'k': a bound must be a number, got NaN"):
        Claim.at_least("k", "t", "", ACC.of("r"), math.nan, kind="paper")
    with pytest.raises(ValueError, match=r"Claim.ratio 'k': a bound must be a number"):
        Claim.ratio("k", "t", "", ACC.of("a"), ACC.of("b"), below=math.nan, kind="paper")


def test_a_difference_and_a_ratio_exclude_their_bounds() -> None:
    """They keep their strict bounds: a difference of exactly 0 is not above 0."""
    seeds = [Values({"a": {"acc": 0.5}, "b": {"acc": 0.5}})]
    diff = Claim.difference("k", "t", "", ACC.of("a"), ACC.of("b"), above=0.0, kind="paper")
    ratio = Claim.ratio("k", "t", "", ACC.of("a"), ACC.of("b"), below=1.0, kind="paper")
    assert diff.check(seeds).status == ratio.check(seeds).status == "not held"


@pytest.mark.parametrize("kind", ["difference", "ratio"])
def test_a_comparison_pairs_the_seeds_when_one_lacks_a_value(kind: str) -> None:
    """With a seed missing one model's number, the claim is judged on the seeds that
    have both: the mean of the paired differences, not one model's mean over two seeds
    minus the other's over three (which flipped the sign here)."""
    firsts, seconds = [0.95, None, 0.93], [0.90, 0.99, 0.94]
    seeds = [Values({"a": {"acc": a}, "b": {"acc": b}}) for a, b in zip(firsts, seconds)]
    if kind == "difference":
        claim = Claim.difference("k", "t", "", ACC.of("a"), ACC.of("b"), above=0.0, kind="paper")
        paired = statistics.fmean([0.95 - 0.90, 0.93 - 0.94])
    else:
        claim = Claim.ratio("k", "t", "", ACC.of("a"), ACC.of("b"), above=1.0, kind="paper")
        paired = statistics.fmean([0.95, 0.93]) / statistics.fmean([0.90, 0.94])
    verdict = claim.check(seeds)
    assert verdict.ours.mean == pytest.approx(paired, rel=1e-12)
    assert verdict.ours.n == 2
    assert verdict.holds  # on the paired seeds; unpaired, the difference is -0.0033


@pytest.mark.parametrize("kind", ["difference", "ratio"])
def test_a_comparison_with_no_seed_that_has_both_numbers_has_no_number(kind: str) -> None:
    """Each seed lacks one model's number: no seed pairs them. Before, the claim fell back
    on the means over every seed, one model's seed against the other's, and showed that
    number (+0.40 or 1.80×, "0 seeds") as ours, held on the means: "mixed"."""
    seeds = [Values({"a": {"acc": a}, "b": {"acc": b}}) for a, b in ((None, 0.5), (0.9, None))]
    if kind == "difference":
        claim = Claim.difference("k", "t", "", ACC.of("a"), ACC.of("b"), above=0.0, kind="paper")
    else:
        claim = Claim.ratio("k", "t", "", ACC.of("a"), ACC.of("b"), above=1.0, kind="paper")
    verdict = claim.check(seeds)
    assert (verdict.ours.mean, verdict.ours.n, verdict.ours.cell()) == (None, 0, "–")
    assert not verdict.holds and verdict.status == "not held"


def test_a_ratio_over_zero_on_a_seed_has_no_number_there_and_does_not_hold() -> None:
    """A denominator of 0 on the second seed: that seed has no number and does not hold;
    the claim is judged on the seeds that pair (before, ZeroDivisionError while the
    report was made, after every training)."""
    seeds = [Values({"a": {"acc": a}, "b": {"acc": b}}) for a, b in ((0.9, 0.5), (0.8, 0.0))]
    claim = Claim.ratio("k", "t", "", ACC.of("a"), ACC.of("b"), above=1.0, kind="paper")
    verdict = claim.check(seeds)
    assert verdict.held_on == (True, False)
    assert verdict.ours.n == 1 and verdict.ours.mean == pytest.approx(1.8)
    assert verdict.holds and verdict.status == "mixed"


def test_a_ratio_whose_means_divide_by_zero_shows_no_mean() -> None:
    """Ratios 1 and -1 on the seeds, means 1 over 0: the claim is judged on no number, and
    shows none (before, the mean of the seeds' ratios, 0.00 ± 1.41×, below the bound of
    a claim that did not hold on the mean)."""
    seeds = [Values({"a": {"acc": 1.0}, "b": {"acc": b}}) for b in (1.0, -1.0)]
    claim = Claim.ratio("k", "t", "", ACC.of("a"), ACC.of("b"), below=0.5, kind="paper")
    verdict = claim.check(seeds)
    assert (verdict.ours.mean, verdict.ours.n, verdict.ours.cell()) == (None, 2, "–")
    assert not verdict.holds and verdict.status == "mixed"


def test_a_bound_that_names_an_unknown_run_fails_before_training() -> None:
    claim = Claim.at_least("k", "t", "", ACC.of("ghost"), 0.5, kind="paper")
    claim.check([Values.dry_run(["ghost"])])
    with pytest.raises(KeyError, match="claim 'k': no run 'ghost'"):
        claim.check([Values.dry_run(["r"])])


@pytest.mark.parametrize(
    ("bound", "value", "kind", "status"),
    [(Claim.at_least, 0.95, "paper", "held"), (Claim.at_most, 0.901, "check", "passed")],
)
def test_seeds_equal_to_the_bound_hold_on_their_mean_too(bound, value, kind, status) -> None:
    """Three seeds at exactly the bound: their mean is that value. Before, fmean gave
    0.9499999999999998 and 0.9010000000000001, just past the bound, so the claim held "on
    3 of 3 seeds, not on the mean" (mixed) and the check "failed on the mean"."""
    seeds = [Values({"r": {"acc": value}}) for _ in range(3)]
    verdict = bound("k", "t", "", ACC.of("r"), value, kind=kind).check(seeds)
    assert verdict.ours.mean == value and verdict.ours.std == 0.0
    assert verdict.status == status


def test_ours_never_reads_as_a_bound_it_is_not() -> None:
    """40 errors in 1996 test images, 2.004%, showed as "2.00%" beside "not held" at most
    2%; now with the digit that tells them apart, and as before away from the bound."""
    error = Metric("error", spec=".2f", scale=100, unit="%")
    claim = Claim.at_most("k", "t", "", error.of("r"), 0.02, kind="paper")
    for errors, cell, words in ((40, "2.004%", "not held"), (39, "1.95%", "held")):
        verdict = claim.check([Values({"r": {"error": errors / 1996}})])
        assert (verdict.ours.cell(*verdict.format), verdict.words) == (cell, words)
