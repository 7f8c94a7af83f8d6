"""``odebench run manifestation-sweep --quick`` on a small data set in MNIST's files."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import odebench.experiments._manifestation  # noqa: F401  (registers the experiment)
import pytest
from odebench.experiments._manifestation import MODES, SCHEMES, TRAINED
from odebench.experiments._registry import EXPERIMENTS, RunOptions, run_experiment

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, digits: Path) -> tuple[Path, dict[str, Any]]:
    """One quick run on noise images whose class sets a bright row."""
    tmp = tmp_path_factory.mktemp("manifestation")
    out = tmp / "out"
    options = RunOptions(
        out=out, quick=True, device="cpu", data_dir=str(digits), epochs=1, progress=False
    )
    return out, run_experiment("manifestation-sweep", options, log=lambda _: None)


def _models(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{model: its numbers (means) and its grids (first seed)}`` of a run's results."""
    return {
        name: {k: s["mean"] for k, s in metrics.items()} | summary["details"][name][0]
        for name, metrics in summary["metrics"].items()
    }


def test_registered() -> None:
    assert "manifestation-sweep" in EXPERIMENTS


def test_missing_data_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no fashion-mnist data"):
        run_experiment(
            "manifestation-sweep", RunOptions(out=tmp_path, quick=True, data_dir=str(tmp_path))
        )


def test_files(run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = run
    for name in ("results.json", "report.md", "fig9_heatmaps.png", "accuracy_vs_steps.png"):
        assert (out / name).is_file(), name
    for name in ("fig9_heatmaps.png", "accuracy_vs_steps.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((out / "results.json").read_text())
    assert saved["claims"] == summary["claims"]
    assert all(isinstance(v["holds"], bool) for v in summary["claims"].values())


def test_grids(run: tuple[Path, dict[str, Any]]) -> None:
    _, summary = run
    steps = summary["settings"]["grid_steps"]
    assert set(_models(summary)) == set(TRAINED)
    for m in _models(summary).values():
        for key in ("grid", "grid_fixed_stats"):
            assert len(m[key]) == len(SCHEMES)
            assert all(len(row) == len(steps) for row in m[key])
            assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for row in m[key] for v in row)
        assert 0.0 <= m["train_accuracy"] <= 1.0
        assert m["range"] == max(map(max, m["grid"])) - min(map(min, m["grid"]))


def test_own_manifestation_matches_trained_net(run: tuple[Path, dict[str, Any]]) -> None:
    """The grid cell of the training (scheme, N_t) is the trained net's own accuracy."""
    _, summary = run
    s = MODES["quick"]
    for scheme, m in _models(summary).items():
        cell = m["grid"][SCHEMES.index(scheme)][s.grid_steps.index(s.n_steps)]
        assert cell == m["test_accuracy"]
        fixed = m["grid_fixed_stats"][SCHEMES.index(scheme)][s.grid_steps.index(s.n_steps)]
        assert fixed == m["test_accuracy"]


def test_report_rows(run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = run
    report = (out / "report.md").read_text()
    assert "## Published beside ours" in report
    assert "not published" in report
    for scheme in TRAINED:
        assert f"| {scheme}-trained: accuracy range over the grid |" in report
    for name in SCHEMES:
        assert f"| {name} | " in report
    assert "![Fig. 9 analogue](fig9_heatmaps.png)" in report
