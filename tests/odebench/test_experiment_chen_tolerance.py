"""``odebench run chen-tolerance --quick`` on a small data set in MNIST's files."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from odebench.experiments._chen import MNIST_10K
from odebench.experiments._chen_tolerance import MODES, _fit, claims
from odebench.experiments._registry import EXPERIMENTS, RunOptions, run_experiment
from odebench.experiments._template import MAX_CLAIM_TEXT, Setup, Values

#: Every claim is tested by training; the one on times is judged on a quiet machine only.
KEYS = (
    "nfe_grows_as_tolerance_tightens",
    "error_at_tightest_not_above_loosest",
    "time_proportional_to_nfe",
    "softplus_ratio_roughly_half",
    "softplus_ratio_near_corrected",
    "relu_ratio_above_softplus",
    "seminorm_fewer_backward_nfe_relu",
    "seminorm_fewer_backward_nfe_softplus",
    "nfe_increases_during_training",
)


def test_standard_mode_trains_a_few_epochs_on_three_seeds() -> None:
    standard = MODES["standard"]
    assert standard.seeds >= 3 and standard.epochs >= 3
    # Real training: hundreds of steps on MNIST-10k images, the whole test set swept.
    steps = standard.epochs * (standard.train_size or MNIST_10K[0]) // standard.batch_size
    assert steps >= 150
    assert standard.test_size == MNIST_10K[1]
    assert standard.tolerances == (1e-1, 1e-2, 1e-3, 1e-4, 1e-5)


def test_full_mode_is_the_papers_training() -> None:
    full = MODES["full"]
    assert (full.epochs, full.optimizer, full.lr, full.milestones) == (
        160,
        "sgd",
        0.1,
        (60, 100, 140),
    )
    assert full.augment and full.train_size is None and full.test_size is None
    assert [full.lr_at(e) for e in (0, 59, 60, 100, 159)] == pytest.approx(
        [0.1, 0.1, 0.01, 0.001, 0.0001]
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tolerances": (1e-3, 1e-1)}, "loosest first"),
        ({"tolerances": (1e-3,)}, "loosest first"),
        ({"sweep": "tanh"}, "`sweep`"),
        ({"optimizer": "rmsprop"}, "`optimizer`"),
        ({"train_size": 16}, "one batch"),
        ({"epochs": 0}, "at least one epoch"),
    ],
)
def test_bad_settings_fail_clearly(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(MODES["quick"], **changes)


def _setup(tmp_path: Path, mode: str = "standard", **changes: Any) -> Setup[Any]:
    settings = dataclasses.replace(MODES[mode], **changes)
    return Setup("chen-tolerance", mode, settings, RunOptions(out=tmp_path), (0, 1, 2), print)


def test_every_claim_of_the_standard_mode_has_its_kind(tmp_path: Path) -> None:
    made = claims(_setup(tmp_path))
    assert [c.key for c in made] == list(KEYS)
    assert {c.kind for c in made} == {"paper"}
    assert [c.key for c in made if c.timing] == ["time_proportional_to_nfe"]
    assert all(len(c.text) <= MAX_CLAIM_TEXT and c.detail.startswith("ours: ") for c in made)


def _ratios(relu: float, softplus: float, backward: dict[str, float]) -> Values:
    """One seed's median backward/forward ratios and mean backward NFE of the variants."""
    ratios = {"relu": relu, "softplus": softplus, "relu-seminorm": 1.0, "softplus-seminorm": 0.5}
    return Values(
        {n: {"median_ratio": ratios[n], "mean_nfe_backward": backward[n]} for n in ratios}
    )


def test_model_comparisons_are_paired_differences(tmp_path: Path) -> None:
    """The seminorm is judged per field, each against its twin, and must need fewer
    backward NFE; the softplus ratio is the softplus model's whatever ``sweep`` is."""
    made = {c.key: c for c in claims(_setup(tmp_path, sweep="relu"))}
    backward = {"relu": 60.0, "relu-seminorm": 40.0, "softplus": 20.0, "softplus-seminorm": 20.0}
    seeds = [_ratios(1.5 + k, 0.5, backward) for k in range(3)]
    compared = (
        "softplus_ratio_roughly_half",
        "relu_ratio_above_softplus",
        "seminorm_fewer_backward_nfe_relu",
        "seminorm_fewer_backward_nfe_softplus",
    )
    verdicts = {key: made[key].check(seeds) for key in compared}
    assert verdicts["softplus_ratio_roughly_half"].status == "held"
    above = verdicts["relu_ratio_above_softplus"]
    assert (above.ours.mean, above.ours.std, above.status) == (2.0, 1.0, "held")
    relu = verdicts["seminorm_fewer_backward_nfe_relu"]
    assert (relu.ours.mean, relu.status) == (-20.0, "held")
    # As many backward NFE as the default norm is not fewer.
    assert verdicts["seminorm_fewer_backward_nfe_softplus"].status == "not held"


@pytest.mark.slow
def test_crops_change_the_batches(digits: Path, tmp_path: Path) -> None:
    """With ``augment`` the same seed trains on other inputs, with the same steps."""
    losses = []
    for augment in (False, True):
        settings = dataclasses.replace(
            MODES["quick"], train_size=64, test_size=32, augment=augment, milestones=(1,)
        )
        options = RunOptions(out=tmp_path, quick=True, data_dir=str(digits), progress=False)
        setup = Setup("chen-tolerance", "quick", settings, options, (0,), lambda _: None)
        history = _fit(setup, 0, "softplus", False, setup.device).history
        assert len(history) == 2
        losses.append(history[0]["loss"])
    assert losses[0] != losses[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, digits: Path) -> tuple[Path, dict[str, Any]]:
    """One quick run on noise images whose class sets a bright row."""
    tmp = tmp_path_factory.mktemp("chen_tolerance")
    out = tmp / "out"
    options = RunOptions(out=out, quick=True, device="cpu", data_dir=str(digits), progress=False)
    return out, run_experiment("chen-tolerance", options, log=lambda _: None)


def _means(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{run: {metric: mean over the seeds}}`` of a run's results."""
    return {run: {k: s["mean"] for k, s in m.items()} for run, m in result["metrics"].items()}


def _sweep(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The tolerance sweep of the first seed."""
    return result["details"]["softplus"][0]["tolerance_sweep"]


def test_registered() -> None:
    assert EXPERIMENTS["chen-tolerance"].modes["standard"] == "3 seeds"
    assert "chen-tolerance" in EXPERIMENTS


def test_missing_data_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no mnist data"):
        run_experiment(
            "chen-tolerance", RunOptions(out=tmp_path, quick=True, data_dir=str(tmp_path))
        )


@pytest.mark.slow
def test_files(run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = run
    for name in ("results.json", "report.md"):
        assert (out / name).stat().st_size > 0
    for fig in ("fig3a_error_vs_tol", "fig3b_time_vs_nfe", "fig3c_ratio", "fig3d_nfe"):
        assert (out / f"{fig}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_results_finite(run: tuple[Path, dict[str, Any]]) -> None:
    _, result = run
    variants = _means(result)
    assert set(variants) == {"relu", "relu-seminorm", "softplus", "softplus-seminorm"}
    for name, v in variants.items():
        history = result["details"][name][0]["history"]
        assert len(history) == 20  # 640 images, batch 32, one epoch
        for key in ("median_ratio", "mean_nfe_forward", "mean_nfe_backward", "test_error"):
            assert math.isfinite(v[key])
        assert all(h["nfe_forward"] > 0 and h["nfe_backward"] > 0 for h in history)
    rows = _sweep(result)
    assert [r["tol"] for r in rows] == [1e-1, 1e-3, 1e-5]
    for r in rows:
        assert 0.0 <= r["test_error"] <= 1.0
        assert r["nfe_forward"] > 0 and r["seconds_per_batch"] > 0
    assert all(isinstance(claim["holds"], bool) for claim in result["claims"].values())
    assert list(result["claims"]) == list(KEYS)
    assert {claim["kind"] for claim in result["claims"].values()} == {"paper"}
    # One seed: a claim holds on it or not; the claim on times is not judged on a busy CPU.
    timed = result["claims"]["time_proportional_to_nfe"]
    contended = result["provenance"]["contended"]
    assert (timed["status"] == "contended") == contended
    for key, claim in result["claims"].items():
        if key != "time_proportional_to_nfe" or not contended:
            assert claim["status"] == ("held" if claim["holds"] else "not held"), key


@pytest.mark.slow
def test_nfe_grows_as_tolerance_tightens(run: tuple[Path, dict[str, Any]]) -> None:
    rows = _sweep(run[1])
    assert rows[-1]["nfe_forward"] > rows[0]["nfe_forward"]
    assert run[1]["claims"]["nfe_grows_as_tolerance_tightens"]["holds"]


@pytest.mark.slow
def test_time_increases_with_nfe(run: tuple[Path, dict[str, Any]]) -> None:
    fit = _means(run[1])["softplus"]
    assert fit["time_nfe_slope"] > 0 and fit["time_nfe_correlation"] > 0.5


@pytest.mark.slow
def test_relu_needs_more_forward_evaluations(run: tuple[Path, dict[str, Any]]) -> None:
    v = _means(run[1])
    assert v["relu"]["mean_nfe_forward"] > v["softplus"]["mean_nfe_forward"]


@pytest.mark.slow
def test_report_rows(run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = run
    report = (out / "report.md").read_text(encoding="utf-8")
    for row in ("| 0.1 |", "| 1e-05 |", "| relu |", "| softplus-seminorm |", "not published"):
        assert row in report
    assert "~0.5" in report and "~0.8" in report
    verdicts = ("| held |", "| not held |", "| contended: not judged |")
    rows = [line for line in report.splitlines() if line.endswith(verdicts)]
    assert len(rows) == len(KEYS)
    assert "## Claims of the paper" in report and "## Checks of our code" not in report
    assert "| **forward time is proportional to NFE (Fig. 3b)**: ours: the correlation" in report
