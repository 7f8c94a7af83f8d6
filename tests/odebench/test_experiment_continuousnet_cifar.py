"""``odebench run continuousnet-cifar --quick`` on a small MNIST-format data set."""

from __future__ import annotations

import json

import pytest
from odebench.experiments import RunOptions, run_experiment

KEYS = ("euler", "rk4-refined")


@pytest.fixture
def table(tmp_path, digits):
    out = tmp_path / "continuousnet-cifar"
    options = RunOptions(out=out, quick=True, device="cpu", data_dir=str(digits), progress=False)
    lines: list[str] = []
    summary = run_experiment("continuousnet-cifar", options, log=lines.append)
    return out, summary, lines


@pytest.mark.slow
def test_continuousnet_cifar_quick(table):
    out, summary, lines = table
    assert json.loads((out / "results.json").read_text()) == summary
    for key in ("experiment", "quick", "date", "wall_seconds", "published", "claims"):
        assert key in summary, key
    assert summary["experiment"] == "continuousnet-cifar" and summary["quick"]
    models = {
        name: {k: s["mean"] for k, s in metrics.items()} | summary["details"][name][0]
        for name, metrics in summary["metrics"].items()
    }
    assert list(models) == list(KEYS)
    for key in KEYS:
        m = models[key]
        assert (out / key / "results.json").exists(), key
        assert 0.0 <= m["test_accuracy"] <= 1.0
        assert 0.0 <= m["test_accuracy_recalibrated"] <= 1.0
        assert m["seconds_per_epoch"] > 0 and m["train_seconds"] > 0
        assert m["epochs"] == 3 and len(m["per_epoch"]) == 3
    # Euler at a fixed depth; RK4 refined 1 -> 2 -> 4 at the start of epochs 2 and 3.
    assert [p["n_steps"] for p in models["euler"]["per_epoch"]] == [4, 4, 4]
    assert [p["n_steps"] for p in models["rk4-refined"]["per_epoch"]] == [1, 2, 4]
    assert models["rk4-refined"]["n_steps_final"] == 4
    # Both end as the same architecture: N_t = M = 4.
    assert models["euler"]["parameters"] == models["rk4-refined"]["parameters"]
    assert summary["claims"]["rk4-refined_reached_final_steps"]["holds"]
    assert sum("refined to N_t = M" in line for line in lines) == 2
    # The unconfirmed accuracies are never quoted; the published timings are.
    assert summary["published"]["euler"]["test_accuracy"] == "not confirmed"
    report = (out / "report.md").read_text()
    assert report.startswith("# ")
    assert "`odebench run continuousnet-cifar --quick`" in report
    for label in ("| ContinuousNet(Euler) |", "| ContinuousNet(RK4), refined |"):
        assert report.count(label) == 2, label
    assert "not confirmed" in report and "| 113 |" in report and "608 min" in report
    assert "## Claims" in report
    assert "![time per epoch and test accuracy](fig7_time_and_accuracy.png)" in report
    assert (out / "fig7_time_and_accuracy.png").read_bytes()[:4] == b"\x89PNG"
