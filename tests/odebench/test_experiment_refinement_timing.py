"""``odebench run refinement-timing --quick`` on a small MNIST-format data set."""

from __future__ import annotations

import json
import math

import pytest
from odebench.experiments import RunOptions, run_experiment


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
