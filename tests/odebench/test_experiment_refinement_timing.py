"""``odebench run refinement-timing``: its modes, its claims, and ``--quick`` on a small
MNIST-format data set."""

from __future__ import annotations

import json
import math
import shutil
import statistics

import pytest
from odebench.experiments import RunOptions, Setup, Values, run_experiment
from odebench.experiments._contnet_common import Net
from odebench.experiments._refinement_timing import MODES, claims
from odebench.experiments._report import Prose

#: "Faster" is a check: half the refined run's epochs take fewer steps. The accuracy is
#: tested by training, and so is "faster at comparable accuracy", a claim on times.
KINDS = {
    "refinement_faster": "check",
    "accuracy_comparable": "paper",
    "refinement_faster_at_comparable_accuracy": "paper",
}


@pytest.fixture(scope="module")
def timing(tmp_path_factory, digits):
    """One quick run (about 50 s) for the module; a test that changes it works on a copy."""
    out = tmp_path_factory.mktemp("timing") / "refinement-timing"
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
    assert {key: claim["kind"] for key, claim in claims.items()} == KINDS
    # Half the epochs at N_t < 4 make the refined run cheaper by construction: a check.
    assert claims["refinement_faster"]["status"] == "passed"
    both = claims["refinement_faster_at_comparable_accuracy"]
    assert (both["status"] == "contended") == summary["provenance"]["contended"]
    for m in (fixed, refined):  # trained in one go: the wall time holds the training
        assert m["run_wall_seconds"] >= m["train_seconds"]
    report = (out / "report.md").read_text()
    assert report.startswith("# ")
    assert "`odebench run refinement-timing --quick`" in report
    assert "| training time | paper (V100) |" in report
    assert "| 1053 min |" in report and "| 608 min |" in report
    assert "wall time of the run" not in report  # under --resume it would be its last stretch's
    papers, checks = report.split("## Checks of our code")
    assert "## Claims of the paper" in papers and "refinement keeps the accuracy" in papers
    assert "| **refinement trains faster than the fixed depth (Sec. 5.2, Fig. 7)**: " in checks
    assert "![time and test accuracy per epoch](time_and_accuracy_per_epoch.png)" in report
    assert (out / "time_and_accuracy_per_epoch.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_a_resumed_run_shows_no_wall_time_of_its_runs(timing, digits, tmp_path):
    """Resumed after its last epoch, a run's train() takes only the seconds to load it:
    its wall time would be that of the last stretch (0.55 min against 3.68 min of
    training, a ratio of 794311, was seen). The training time is summed over the epochs."""
    out = shutil.copytree(timing[0], tmp_path / "refinement-timing")
    first = timing[1]
    options = RunOptions(
        out=out, quick=True, device="cpu", data_dir=str(digits), progress=False, resume=True
    )
    summary = run_experiment("refinement-timing", options, log=lambda line: None)
    assert summary["provenance"]["resumed"]
    for name in ("rk4-fixed", "rk4-refined"):
        metrics, before = summary["metrics"][name], first["metrics"][name]
        assert metrics["run_wall_seconds"] == {"mean": None, "std": None, "n": 0, "seeds": [None]}
        assert metrics["train_seconds"]["mean"] == pytest.approx(before["train_seconds"]["mean"])
    report = (out / "report.md").read_text()
    assert "wall time of the run" not in report
    assert "| training time |" in report


def test_every_claim_of_the_standard_mode_has_its_kind(tmp_path):
    options = RunOptions(out=tmp_path)
    setup = Setup("refinement-timing", "standard", MODES["standard"], options, (0, 1, 2), print)
    made = claims(setup)
    assert {c.key: c.kind for c in made} == KINDS
    assert [c.key for c in made if c.timing] == ["refinement_faster_at_comparable_accuracy"]
    details = Prose.of("refinement-timing.md").details  # the report's text gives them
    assert all(details[c.key].startswith("ours: ") for c in made)
    # The check says why it cannot fail: the sum of N_t over the epochs, 22 of 32.
    s = MODES["standard"]
    fixed, refined = (_n_steps_sum(net, s.epochs) for net in s.nets)
    assert refined / fixed == pytest.approx(22 / 32)
    assert "sum of N_t over the epochs (in the table) is smaller" in details["refinement_faster"]


def _n_steps_sum(net: Net, epochs: int) -> int:
    """The sum of ``N_t`` over the epochs of ``net``, doubled at each refinement."""
    return sum(
        net.n_steps << sum(1 for e in net.refine_epochs if e <= epoch) for epoch in range(epochs)
    )


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
    ("accuracies", "holds", "held_on", "status"),
    [
        # Within the 1.5 points on the mean and on two seeds of three, though one seed
        # is 3 points below: held.
        ([(0.85, 0.84), (0.85, 0.86), (0.85, 0.82)], True, (True, True, False), "held"),
        # Within on the mean, 3 points below on two seeds of three: mixed.
        ([(0.85, 0.89), (0.85, 0.82), (0.85, 0.82)], True, (True, False, False), "mixed"),
        # Each seed 2 points below: faster, but not at equal accuracy.
        ([(0.85, 0.83)] * 3, False, (False, False, False), "not held"),
    ],
)
def test_claim_is_judged_at_equal_accuracy_on_the_mean_and_the_seeds(
    tmp_path, accuracies, holds, held_on, status
):
    setup = Setup(
        "refinement-timing", "standard", MODES["standard"], RunOptions(out=tmp_path),
        (0, 1, 2), print,
    )  # fmt: skip
    seeds = _seeds([(100.0, 70.0), (100.0, 75.0), (100.0, 72.0)], accuracies)
    verdicts = {c.key: c.check(seeds) for c in claims(setup)}
    assert MODES["standard"].acc_tolerance == pytest.approx(0.015)
    assert verdicts["refinement_faster"].holds
    assert verdicts["refinement_faster"].status == "passed"
    both = verdicts["refinement_faster_at_comparable_accuracy"]
    assert (both.holds, both.held_on, both.status) == (holds, held_on, status)
    assert both.ours.mean == pytest.approx((0.70 + 0.75 + 0.72) / 3)
    comparable = verdicts["accuracy_comparable"]
    assert (comparable.holds, comparable.held_on, comparable.status) == (holds, held_on, status)
    gain = comparable.ours.mean
    assert gain == pytest.approx(sum(r - f for f, r in accuracies) / 3)
    # The differences are paired by seed: the spread is that of the per-seed differences.
    diffs = [r - f for f, r in accuracies]
    assert comparable.ours.std == pytest.approx(statistics.stdev(diffs), abs=1e-12)
    # On a contended machine the claim on times is not judged; the others are.
    busy = {c.key: c.check(seeds, contended=True) for c in claims(setup)}
    assert busy["refinement_faster_at_comparable_accuracy"].status == "contended"
    assert busy["accuracy_comparable"].status == status
    assert busy["refinement_faster"].status == "passed"


def test_refinement_that_is_not_faster_fails_the_check(tmp_path):
    setup = Setup(
        "refinement-timing", "standard", MODES["standard"], RunOptions(out=tmp_path),
        (0, 1, 2), print,
    )  # fmt: skip
    seeds = _seeds([(100.0, 70.0), (100.0, 101.0), (100.0, 72.0)], [(0.85, 0.85)] * 3)
    faster = next(c for c in claims(setup) if c.key == "refinement_faster").check(seeds)
    assert faster.holds and faster.status == "failed"
    assert faster.words == "failed on 1 of 3 seeds"


def test_standard_mode_needs_fashion_mnist(tmp_path):
    options = RunOptions(out=tmp_path / "out", data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no fashion-mnist data"):
        run_experiment("refinement-timing", options, log=lambda line: None)
