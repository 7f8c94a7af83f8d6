"""The ``pendulum`` experiment: its helpers against closed forms, and a quick run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import odebench.experiments._pendulum as pendulum_experiment
import pytest
import torch
from odebench.data import pendulum as pendulum_data
from odebench.experiments import RunOptions, run_experiment
from odebench.experiments._pendulum import (
    DT_FACTORS,
    SCHEMES,
    fit_slope,
    global_error,
    pendulum_field,
    rollout,
    step,
)

PNG = b"\x89PNG\r\n\x1a\n"


def test_registered():
    from odebench.experiments import EXPERIMENTS

    # register_template registers run_template bound to the module's Template
    assert EXPERIMENTS["pendulum"].run.args[0].runs is pendulum_experiment.runs


@pytest.mark.parametrize(("scheme", "order"), [("euler", 1), ("midpoint", 2), ("rk4", 4)])
def test_rollout_of_exact_field_converges_at_the_scheme_order(scheme: str, order: int):
    """With the true vector field plugged in, the error falls like dt**order."""
    horizon = 1.0
    truth = pendulum_data(
        3, dt=horizon, steps=1, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    ).targets
    y0, y1 = truth[:, 0], truth[:, 1]
    dts = [0.1, 0.05, 0.025, 0.0125]
    errors = []
    for h in dts:
        ys = rollout(pendulum_field(), y0, h, round(horizon / h), scheme)
        errors.append(float((ys[:, -1] - y1).norm(dim=-1).max()))
    assert abs(fit_slope(dts, errors) - order) < 0.3


def test_step_matches_closed_forms():
    y = torch.tensor([[0.3, -0.2]], dtype=torch.float64)
    f = pendulum_field(gravity=2.0)
    euler = y + 0.1 * f(y)
    torch.testing.assert_close(step(f, y, 0.1, "euler"), euler)
    mid = y + 0.1 * f(y + 0.05 * f(y))
    torch.testing.assert_close(step(f, y, 0.1, "midpoint"), mid)
    # y' = -y: one RK4 step multiplies by the degree-4 Taylor polynomial of exp(-h)
    h = 0.3
    expected = 1 - h + h**2 / 2 - h**3 / 6 + h**4 / 24
    one = torch.ones(1, dtype=torch.float64)
    assert float(step(lambda z: -z, one, h, "rk4")) == pytest.approx(expected, rel=1e-14)


def test_step_rejects_unknown_scheme():
    with pytest.raises(ValueError, match="Unknown scheme 'rk9'; known: euler"):
        step(lambda z: z, torch.ones(1), 0.1, "rk9")


def test_fit_slope_and_global_error():
    assert fit_slope([1.0, 2.0, 4.0], [3.0, 3.0 * 2**1.5, 3.0 * 4**1.5]) == pytest.approx(1.5)
    assert math.isnan(fit_slope([1.0, 2.0], [0.0, 1.0]))  # one usable point
    ys = torch.zeros(2, 3, 2)
    truth = torch.zeros(2, 3, 2)
    truth[0, 1] = torch.tensor([3.0, 4.0])  # error 5 at one sample of the first trajectory
    assert global_error(ys, truth) == pytest.approx(2.5)


def _models(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{scheme: {metric: mean over the seeds}}``, with the errors per dt' as lists."""
    models = {}
    for scheme, stats in summary["metrics"].items():
        m = {k: s["mean"] for k, s in stats.items()}
        m["error"] = [m[f"error@{f:g}dt"] for f in DT_FACTORS]
        m["error_vs_own_limit"] = [m[f"error_vs_own_limit@{f:g}dt"] for f in DT_FACTORS]
        models[scheme] = m
    return models


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("pendulum")
    lines: list[str] = []
    summary = run_experiment(
        "pendulum",
        RunOptions(out=out, quick=True, device="cpu", progress=False),
        log=lines.append,
    )
    assert any("report in" in line for line in lines)
    return out, summary


@pytest.mark.slow
def test_quick_run_files(quick_run: tuple[Path, dict[str, Any]]):
    out, summary = quick_run
    for name in ("error_vs_dt.png", "phase.png"):
        assert (out / name).read_bytes()[:8] == PNG
    on_disk = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert on_disk == json.loads(json.dumps(summary))
    assert on_disk["experiment"] == "pendulum" and on_disk["quick"] is True
    assert on_disk["settings"]["dt_factors"] == list(DT_FACTORS)
    assert list(on_disk["metrics"]) == list(SCHEMES)
    for scheme in SCHEMES:
        m = _models(on_disk)[scheme]
        assert len(m["error"]) == len(m["error_vs_own_limit"]) == len(DT_FACTORS)
        numbers = [m["train_mse"], m["error_fine_rk4"], m["slope"], m["slope_refine"]]
        numbers += [m["slope_vs_own_limit"], *m["error"], *m["error_vs_own_limit"]]
        assert all(math.isfinite(x) for x in numbers)
        assert 0 < m["train_mse"] < 1e-2
    assert set(on_disk["claims"]) >= {"euler_error_flat", "rk4_error_shrinks"}
    assert all(isinstance(c["holds"], bool) for c in on_disk["claims"].values())


@pytest.mark.slow
def test_quick_run_report(quick_run: tuple[Path, dict[str, Any]]):
    out, summary = quick_run
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "`odebench run pendulum --quick`" in report
    assert "![global error against dt'](error_vs_dt.png)" in report
    assert "![phase portraits](phase.png)" in report
    rows = [line for line in report.splitlines() if line.startswith("| ")]
    for label in ("Euler (ResNet)", "Midpoint", "RK4", "published (paper)"):
        assert any(row.startswith(f"| {label} |") for row in rows)
    rk4_row = next(row for row in rows if row.startswith("| RK4 |"))
    assert len(rk4_row.strip("|").split("|")) == 6 + len(DT_FACTORS)
    assert "not published" in report
    held = [row for row in rows if row.endswith(("| held |", "| did not hold |"))]
    assert len(held) == len(summary["claims"])


@pytest.mark.slow
def test_quick_run_reproduces_the_paper(quick_run: tuple[Path, dict[str, Any]]):
    """Robust in quick mode (seeds 0-3 checked): Euler does not converge, RK4 does."""
    _, summary = quick_run
    assert all(c["holds"] for c in summary["claims"].values()), summary["claims"]
    models = _models(summary)
    i_fine = DT_FACTORS.index(min(DT_FACTORS))
    # The Euler model at dt/8 is more than 5x worse than the RK4 model (seen: 25-60x).
    assert models["euler"]["error"][i_fine] > 5 * models["rk4"]["error"][i_fine]
    # Every rollout converges to its own field's flow at the scheme's order.
    for scheme, order in zip(SCHEMES, (1, 2, 4)):
        assert abs(models[scheme]["slope_vs_own_limit"] - order) < 0.3
