"""The ``pendulum`` experiment: its helpers against closed forms, and a quick run."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import odebench.experiments._pendulum as pendulum_experiment
import pytest
import torch
from odebench.data import pendulum as pendulum_data
from odebench.experiments import EXPERIMENTS, RunOptions, run_experiment
from odebench.experiments._pendulum import (
    DT_FACTORS,
    ERROR,
    ERROR_VS_OWN_LIMIT,
    SCHEMES,
    fit_slope,
    global_error,
    rollout,
    step,
)

PNG = b"\x89PNG\r\n\x1a\n"


def pendulum_field(gravity: float = 9.81):
    """The exact vector field ``(theta, omega) -> (omega, -g sin theta)`` (length 1)."""
    return lambda y: torch.stack([y[..., 1], -gravity * torch.sin(y[..., 0])], dim=-1)


def test_registered():
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
        ys = rollout(pendulum_field(), y0, h, horizon, scheme)
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
    with pytest.raises(ValueError, match="'rk9'; known fixed-step methods: euler"):
        step(lambda z: z, torch.ones(1), 0.1, "rk9")


def test_fit_slope_and_global_error():
    assert fit_slope([1.0, 2.0, 4.0], [3.0, 3.0 * 2**1.5, 3.0 * 4**1.5]) == pytest.approx(1.5)
    assert math.isnan(fit_slope([1.0, 2.0], [0.0, 1.0]))  # one usable point
    ys = torch.zeros(2, 3, 2)
    truth = torch.zeros(2, 3, 2)
    truth[0, 1] = torch.tensor([3.0, 4.0])  # error 5 at one sample of the first trajectory
    assert global_error(ys, truth) == pytest.approx(2.5)


@pytest.mark.parametrize("factors", [(0.5, 2.0), (1.0, 0.5), (1.0, 2.5)])
def test_dt_factors_must_increase_hold_dt_and_divide_the_largest(factors):
    """(1.0, 2.5) over a horizon of 5: the rollout at 2.5 dt, read at t = 2.5 and 5, was
    compared with the truth at t = 2 and 4, without an error."""
    quick = pendulum_experiment.MODES["quick"]
    with pytest.raises(ValueError, match="and divide the largest"):
        dataclasses.replace(quick, dt_factors=factors, horizon=5.0)


def test_runs_train_on_the_cpu_whatever_the_device(tmp_path: Path):
    """The tiny float64 field trains on the CPU even when ``--device cuda`` is asked for
    (on a machine without CUDA, that request alone would fail)."""
    from odebench.experiments import Setup
    from odebench.training import fit

    template = EXPERIMENTS["pendulum"].run.args[0]
    settings = dataclasses.replace(template.settings_for("quick"), n_train=2, epochs=1)
    options = RunOptions(out=tmp_path, device="cuda")
    setup = Setup("pendulum", "quick", settings, options, (0,), print)
    run = pendulum_experiment.runs(setup, 0)[0]
    assert run.task is not None
    done = fit(run.task, tmp_path / "euler", device="cuda", log=lambda line: None, progress=False)
    assert {p.device.type for p in done.model.parameters()} == {"cpu"}
    assert [row["epoch"] for row in done.rows] == [1.0] and done.rows[0]["train_mse"] > 0


CHECKS = {"rk4_reaches_model_error"}
"""The claims that are properties of our code (kind "check"), not tested by training."""


def test_every_claim_has_a_kind_and_the_identity_is_a_check():
    """RK4 at dt/8 against RK4 at dt/32 of the same field is 1.000 by construction."""
    from odebench.experiments import Result, Setup, Values
    from odebench.experiments._claims import MAX_CLAIM_TEXT
    from odebench.experiments._report import with_details

    template = EXPERIMENTS["pendulum"].run.args[0]
    setup = Setup("pendulum", "standard", template.settings_for("standard"),
                  RunOptions(out=Path("unused")), (0, 1, 2), print)  # fmt: skip
    claims = template.claims(setup)
    assert len(claims) == 6 and all(c.kind in ("paper", "check") for c in claims)
    assert {c.key for c in claims if c.kind == "check"} == CHECKS
    assert all(len(c.text) <= MAX_CLAIM_TEXT for c in claims)
    # The details come from the text, filled in from the settings and the bounds.
    verdicts = tuple(c.check([Values.dry_run(SCHEMES)]) for c in claims)
    result = Result(setup, "odebench run pendulum", "today", 0.0, {}, {}, verdicts)
    details = {v.key: v.detail for v in with_details(template, result)}
    assert (
        details["rk4_error_shrinks"]
        == "ours: its error at dt/8 over that at 4 dt; holds below 0.5×"
    )
    assert details["euler_error_flat"].endswith("; holds at 0.5× or more")
    assert details["rk4_reaches_model_error"].startswith(
        "ours: its error at dt/8 over its field's error (RK4 at dt/32); passes below 2×. A check"
    )


def _models(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{scheme: {metric: mean over the seeds}}``, with the errors per dt' as lists."""
    models = {}
    for scheme, stats in summary["metrics"].items():
        m = {k: s["mean"] for k, s in stats.items()}
        m["error"] = [m[ERROR.key(dt=f)] for f in DT_FACTORS]
        m["error_vs_own_limit"] = [m[ERROR_VS_OWN_LIMIT.key(dt=f)] for f in DT_FACTORS]
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
    for label in ("Euler (ResNet)", "Midpoint", "RK4"):
        assert any(row.startswith(f"| {label} |") for row in rows)
    rk4_row = next(row for row in rows if row.startswith("| RK4 |"))
    assert len(rk4_row.strip("|").split("|")) == 6 + len(DT_FACTORS)
    assert "stated, no number" in report  # the paper's column of the claims
    papers, _, checks = report.partition("## Checks of our code")
    assert "## Claims of the paper" in papers and "## Claims\n" not in report
    for key, claim in summary["claims"].items():
        row = f"| **{claim['text']}**: {claim['detail']} |"
        assert row in (checks if key in CHECKS else papers), key
    # One seed: the verdict is one word, and every claim has a row with one.
    words = ("| held |", "| not held |", "| passed |", "| failed |")
    verdicts = [row for row in rows if row.endswith(words)]
    assert len(verdicts) == len(summary["claims"])


@pytest.mark.slow
def test_quick_run_reproduces_the_paper(quick_run: tuple[Path, dict[str, Any]]):
    """Robust in quick mode (seeds 0-3 checked): Euler does not converge, RK4 does."""
    _, summary = quick_run
    assert all(c["holds"] for c in summary["claims"].values()), summary["claims"]
    statuses = {key: c["status"] for key, c in summary["claims"].items()}
    assert statuses == {key: "passed" if key in CHECKS else "held" for key in statuses}
    # The check is an identity of the rollouts, not a number that training moves.
    assert summary["claims"]["rk4_reaches_model_error"]["ours"]["mean"] == pytest.approx(
        1.0, abs=1e-3
    )
    # The RK4 model against the Euler model at dt/8, paired: the RK4 model's error is lower.
    rk4_beats = summary["claims"]["rk4_beats_euler_at_finest"]
    i_finest = ERROR.key(dt=min(DT_FACTORS))
    rk4, euler = (summary["metrics"][s][i_finest]["seeds"] for s in ("rk4", "euler"))
    assert rk4_beats["ours"]["seeds"] == pytest.approx([r - e for r, e in zip(rk4, euler)])
    models = _models(summary)
    i_fine = DT_FACTORS.index(min(DT_FACTORS))
    # The Euler model at dt/8 is more than 5x worse than the RK4 model (seen: 25-60x).
    assert models["euler"]["error"][i_fine] > 5 * models["rk4"]["error"][i_fine]
    # Every rollout converges to its own field's flow at the scheme's order.
    for scheme, order in zip(SCHEMES, (1, 2, 4)):
        assert abs(models[scheme]["slope_vs_own_limit"] - order) < 0.3
