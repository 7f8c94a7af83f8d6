"""``odebench run chen-table1 --quick`` on a small MNIST-format data set."""

from __future__ import annotations

import json
import math

import pytest
from odebench.experiments import RunOptions, run_experiment

MODELS = ("mlp", "resnet", "rknet", "odenet")


@pytest.fixture
def table(tmp_path, digits):
    out = tmp_path / "chen"
    options = RunOptions(out=out, quick=True, device="cpu", data_dir=str(digits), progress=False)
    lines: list[str] = []
    summary = run_experiment("chen-table1", options, log=lines.append)
    return out, summary, lines


@pytest.mark.slow
def test_chen_table1_quick(table):
    out, summary, lines = table
    assert json.loads((out / "results.json").read_text()) == summary
    assert next(line for line in lines if "parameters" in line).startswith("[mlp] mlp on mnist")
    rows = {name: {k: s["mean"] for k, s in m.items()} for name, m in summary["metrics"].items()}
    assert list(rows) == list(MODELS)
    for name in MODELS:
        assert (out / name / "results.json").exists(), name
        row = rows[name]
        assert 0.0 <= row["test_error"] <= 1.0
        for key in ("saved_mib", "step_seconds"):
            assert math.isfinite(row[key]) and row[key] > 0, (name, key)
    # The ODE blocks evaluate their field; the adjoint solves backward as well.
    assert rows["odenet"]["nfe_forward"] > 0 and rows["odenet"]["nfe_backward"] > 0
    assert rows["rknet"]["nfe_forward"] == 24 and rows["rknet"]["nfe_backward"] == 0
    assert rows["resnet"]["nfe_forward"] == 0
    # Memory as the paper says: the adjoint saves less than backprop through the steps.
    assert summary["claims"]["odenet_saves_less_than_rknet"]["holds"]
    assert rows["odenet"]["saved_mib"] < rows["rknet"]["saved_mib"] / 2
    report = (out / "report.md").read_text()
    for label in ("1-layer MLP", "ResNet", "RK-Net", "ODE-Net"):
        assert f"| {label} |" in report
    assert "0.42%" in report and "O(1)" in report
