"""``odebench run chen-tolerance --quick`` on a small data set in MNIST's files."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import odebench.experiments._chen_tolerance  # noqa: F401  (registers the experiment)
import pytest
from odebench.experiments._registry import EXPERIMENTS, RunOptions, run_experiment

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, digits: Path) -> tuple[Path, dict[str, Any]]:
    """One quick run on noise images whose class sets a bright row."""
    tmp = tmp_path_factory.mktemp("chen_tolerance")
    out = tmp / "out"
    options = RunOptions(out=out, quick=True, device="cpu", data_dir=str(digits), progress=False)
    return out, run_experiment("chen-tolerance", options, log=lambda _: None)


def test_registered() -> None:
    assert "chen-tolerance" in EXPERIMENTS


def test_missing_data_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no mnist data"):
        run_experiment(
            "chen-tolerance", RunOptions(out=tmp_path, quick=True, data_dir=str(tmp_path))
        )


def test_files(run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = run
    for name in ("results.json", "report.md"):
        assert (out / name).stat().st_size > 0
    for fig in ("fig3a_error_vs_tol", "fig3b_time_vs_nfe", "fig3c_ratio", "fig3d_nfe"):
        assert (out / f"{fig}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_finite(run: tuple[Path, dict[str, Any]]) -> None:
    _, result = run
    assert set(result["variants"]) == {"relu", "relu-seminorm", "softplus", "softplus-seminorm"}
    for v in result["variants"].values():
        assert len(v["history"]) == 20  # 640 images, batch 32, one epoch
        for key in ("median_ratio", "mean_nfe_forward", "mean_nfe_backward", "test_error"):
            assert math.isfinite(v[key])
        assert all(h["nfe_forward"] > 0 and h["nfe_backward"] > 0 for h in v["history"])
    rows = result["tolerance_sweep"]
    assert [r["tol"] for r in rows] == [1e-1, 1e-3, 1e-5]
    for r in rows:
        assert 0.0 <= r["test_error"] <= 1.0
        assert r["nfe_forward"] > 0 and r["seconds_per_batch"] > 0
    assert all(isinstance(held, bool) for held in result["conclusions"].values())


def test_nfe_grows_as_tolerance_tightens(run: tuple[Path, dict[str, Any]]) -> None:
    rows = run[1]["tolerance_sweep"]
    assert rows[-1]["nfe_forward"] > rows[0]["nfe_forward"]
    assert run[1]["conclusions"]["nfe_grows_as_tolerance_tightens"]


def test_time_increases_with_nfe(run: tuple[Path, dict[str, Any]]) -> None:
    fit = run[1]["time_vs_nfe"]
    assert fit["slope"] > 0 and fit["correlation"] > 0.5


def test_relu_needs_more_forward_evaluations(run: tuple[Path, dict[str, Any]]) -> None:
    v = run[1]["variants"]
    assert v["relu"]["mean_nfe_forward"] > v["softplus"]["mean_nfe_forward"]


def test_report_rows(run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = run
    report = (out / "report.md").read_text(encoding="utf-8")
    for row in ("| 0.1 |", "| 1e-05 |", "| relu |", "| softplus-seminorm |", "not published"):
        assert row in report
    assert "~0.5" in report and "~0.8" in report
    claims = [
        line for line in report.splitlines() if line.endswith(("held;", "held.", "hold;", "hold."))
    ]
    assert len(claims) == 8
