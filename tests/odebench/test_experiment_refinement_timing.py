"""``odebench run refinement-timing``: its modes, its claims, and ``--quick`` on a small
MNIST-format data set."""

from __future__ import annotations

import json
import math

import pytest
from odebench.experiments import RunOptions, run_experiment
from odebench.experiments._refinement_timing import MODES, claims
from odebench.experiments._template import Setup, Values


@pytest.fixture
def timing(tmp_path, digits):
    out = tmp_path / "refinement-timing"
    options = RunOptions(out=out, quick=True, device="cpu", data_dir=str(digits), progress=False)
    summary = run_experiment("refinement-timing", options, log=lambda line: None)
    return out, summary


@pytest.mark.slow
def test_refinement_timing_quick(timing):
    out, summary = timing
    assert json.loads((out / "results.json").read_text()) == summary
    for key in ("experiment", "quick", "date", "wall_seconds", "published", "claims"):
        assert key in summary, key
    models = {
        name: {k: s["mean"] for k, s in metrics.items()} | summary["details"][name][0]
        for name, metrics in summary["metrics"].items()
    }
    fixed, refined = models["rk4-fixed"], models["rk4-refined"]
    for m in (fixed, refined):
        assert 0.0 <= m["test_accuracy"] <= 1.0
        assert 0.0 <= m["test_accuracy_recalibrated"] <= 1.0
        assert m["train_seconds"] > 0 and m["epochs"] == 3
        assert all(p["epoch_seconds"] > 0 for p in m["per_epoch"])
    assert [p["n_steps"] for p in fixed["per_epoch"]] == [4, 4, 4]
    assert [p["n_steps"] for p in refined["per_epoch"]] == [1, 2, 4]
    assert fixed["parameters"] == refined["parameters"]  # the same final model
    claims = summary["claims"]
    time_ratio = claims["refinement_faster"]["ours"]["mean"]
    assert time_ratio == pytest.approx(refined["train_seconds"] / fixed["train_seconds"])
    assert math.isfinite(time_ratio) and time_ratio > 0
    assert refined["n_steps_sum"] / fixed["n_steps_sum"] == pytest.approx(7 / 12)
    assert summary["published"]["time_ratio"] == pytest.approx(608 / 1053)
    assert claims["refinement_faster_at_comparable_accuracy"]["holds"] == (
        claims["refinement_faster"]["holds"] and claims["accuracy_comparable"]["holds"]
    )
    report = (out / "report.md").read_text()
    assert report.startswith("# ")
    assert "`odebench run refinement-timing --quick`" in report
    assert "| training time |" in report and "| 1053 min | 608 min | 0.58 |" in report
    assert report.count("| 1 | 4 |") == 1 and "## Claims" in report
    assert "![time and test accuracy per epoch](time_and_accuracy_per_epoch.png)" in report
    assert (out / "time_and_accuracy_per_epoch.png").read_bytes()[:4] == b"\x89PNG"


def test_standard_and_full_modes():
    """Standard: Fashion-MNIST over 3 seeds, the refinements over by half-way; full: the
    paper's CIFAR-10 schedule over the authors' 5 seeds. Both end where the fixed run is."""
    for mode, data, seeds in (("standard", "fashion-mnist", 3), ("full", "cifar10", 5)):
        s = MODES[mode]
        fixed, refined = s.nets
        assert s.seeds == seeds and fixed.dataset == refined.dataset == data
        assert (fixed.key, refined.key) == ("rk4-fixed", "rk4-refined")
        assert fixed.refine_epochs == () and refined.n_steps == 1
        assert refined.final_steps == fixed.n_steps
        assert max(refined.refine_epochs) <= 0.55 * s.epochs  # then the deep net trains on
    assert MODES["full"].nets[1].refine_epochs == (20, 40, 60, 70, 80)
    assert MODES["standard"].training.train_size is not None


def _seeds(times, accuracies):
    """One Values per seed: (fixed, refined) training seconds and recalibrated accuracy."""
    return [
        Values({
            "rk4-fixed": {"train_seconds": tf, "test_accuracy_recalibrated": af},
            "rk4-refined": {"train_seconds": tr, "test_accuracy_recalibrated": ar},
        })
        for (tf, tr), (af, ar) in zip(times, accuracies)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("accuracies", "holds", "held_on"),
    [
        # Within the 1.5 points on the mean, though one seed is 3 points below: holds.
        ([(0.85, 0.84), (0.85, 0.86), (0.85, 0.82)], True, (True, True, False)),
        # Each seed 2 points below: faster, but not at equal accuracy.
        ([(0.85, 0.83)] * 3, False, (False, False, False)),
    ],
)
def test_claim_is_judged_at_equal_accuracy_on_the_mean(tmp_path, accuracies, holds, held_on):
    setup = Setup(
        "refinement-timing", "standard", MODES["standard"], RunOptions(out=tmp_path),
        (0, 1, 2), print,
    )  # fmt: skip
    seeds = _seeds([(100.0, 70.0), (100.0, 75.0), (100.0, 72.0)], accuracies)
    verdicts = {c.key: c.check(seeds) for c in claims(setup)}
    assert MODES["standard"].acc_tolerance == pytest.approx(0.015)
    assert verdicts["refinement_faster"].holds
    both = verdicts["refinement_faster_at_comparable_accuracy"]
    assert (both.holds, both.held_on) == (holds, held_on)
    assert both.ours.mean == pytest.approx((0.70 + 0.75 + 0.72) / 3)
    gain = verdicts["accuracy_comparable"].ours.mean
    assert gain == pytest.approx(sum(r - f for f, r in accuracies) / 3)


def test_standard_mode_needs_fashion_mnist(tmp_path):
    options = RunOptions(out=tmp_path / "out", data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no fashion-mnist data"):
        run_experiment("refinement-timing", options, log=lambda line: None)
