"""``odebench run dissecting-depth --quick``: the files, numbers, claims and report."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import odebench.experiments._dissecting_depth as dissecting
import pytest
import torch
from odebench.experiments import EXPERIMENTS, RunOptions, Setup, Values, run_experiment
from odebench.experiments._report import Prose

FIGURES = ("loss.png", "reflection.png", "annuli.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("dissecting-depth") / "run"
    lines: list[str] = []
    options = RunOptions(out=out, quick=True, device="cpu", progress=False)
    summary = run_experiment("dissecting-depth", options, log=lines.append)
    assert any("report in" in line for line in lines)
    return out, summary


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def test_registered() -> None:
    assert "dissecting-depth" in EXPERIMENTS
    assert EXPERIMENTS["dissecting-depth"].description


def test_l1_median_bound() -> None:
    y = -torch.tensor([[-1.0], [-0.5], [0.0], [0.5], [1.0]])
    assert dissecting.l1_median_bound(y) == pytest.approx(0.6)


def test_settings_quick_small_and_epochs_override() -> None:
    quick = dissecting.TEMPLATE.settings_for("quick")
    full = dissecting.TEMPLATE.settings_for("full", epochs=7)
    assert quick.seeds < full.seeds and quick.annuli_points < full.annuli_points
    assert full.reflection_iterations == full.annuli_iterations == 7


def test_unknown_model() -> None:
    with pytest.raises(ValueError, match="Unknown model"):
        dissecting.build("resnet", 1, 1e-3)


CHECKS = {"vanilla_reflection_at_bound", "galerkin_reflection_at_bound",
          "stacked_reflection_at_bound"}  # fmt: skip
"""The "cannot learn" claims: no 1-D flow goes below the bound, whatever the training."""


def test_every_claim_has_a_kind_and_the_bounds_are_checks() -> None:
    setup = Setup("dissecting-depth", "standard", dissecting.TEMPLATE.settings_for("standard"),
                  RunOptions(out=Path("unused")), (0, 1, 2), print)  # fmt: skip
    claims = dissecting.TEMPLATE.claims(setup)
    assert claims == dissecting.CLAIMS
    assert {c.key for c in claims if c.kind == "check"} == CHECKS
    assert not any(c.detail for c in claims)  # every claim's details are in the text
    details = Prose.of(dissecting.TEMPLATE.text).details  # each claim's, in the text
    for claim in claims:
        assert details[claim.key].startswith("ours: the held-out")
        assert ("; passes" in details[claim.key]) == (claim.key in CHECKS)


@pytest.mark.parametrize(
    ("key", "run", "metrics", "words"),
    [  # the reflection's held-out L1 loss over its bound: at the bound holds, below fails
        ("vanilla_reflection_at_bound", "reflection/vanilla", {"test_loss": 0.95}, "passed"),
        ("vanilla_reflection_at_bound", "reflection/vanilla", {"test_loss": 0.9}, "failed"),
        ("data_control_reflects", "reflection/data_control", {"test_loss": 0.1}, "held"),
        ("data_control_reflects", "reflection/data_control", {"test_loss": 0.2}, "not held"),
        ("galerkin_annuli_fits", "annuli/galerkin", {"test_accuracy": 0.95}, "held"),
        ("galerkin_annuli_fits", "annuli/galerkin", {"test_accuracy": 0.94}, "not held"),
        ("galerkin_annuli_fits", "annuli/galerkin", {"test_accuracy": None}, "not held"),
    ],
)
def test_claims_bounds(key: str, run: str, metrics: dict[str, float | None], words: str) -> None:
    """Each case's bound is 1 (0.2 × 1 is well below it: strictly)."""
    claim = next(c for c in dissecting.CLAIMS if c.key == key)
    bound = {"test_l1_bound": 1.0} if run.startswith("reflection") else {}
    assert claim.check([Values({run: {**metrics, **bound}})]).words == words


@pytest.mark.slow
def test_files_and_figures(run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = run
    for name in (*FIGURES, "results.json", "report.md"):
        assert (out / name).is_file(), name
    for name in FIGURES:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_results_finite(run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = run
    saved = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert saved["experiment"] == "dissecting-depth" and saved["quick"] is True
    assert len(saved["seeds"]) == 2
    assert _finite(saved["metrics"]["reflection/vanilla"]["l1_bound"]["mean"])
    for task in dissecting.TASKS:
        for kind in dissecting.MODELS:
            entry = saved["metrics"][f"{task}/{kind}"]
            numbers = [entry["loss"]["mean"], entry["loss"]["std"], entry["nfe"]["mean"]]
            assert all(map(_finite, [*numbers, entry["seconds"]["mean"]])), (task, kind, entry)
            if task == "annuli":
                assert 0.0 <= entry["accuracy"]["mean"] <= 1.0
    assert set(saved["claims"]) == {c.key for c in dissecting.CLAIMS}
    assert summary["claims"] == saved["claims"]


@pytest.mark.slow
def test_report_rows(run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = run
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "odebench run dissecting-depth --quick" in text
    for label in dissecting.LABELS.values():
        assert f"| {label} |" in text
    papers, _, checks = text.partition("## Checks of our code")
    assert "## Claims of the paper" in papers and "## Claims\n" not in text
    for key, claim in summary["claims"].items():
        assert claim["detail"].startswith("ours: the held-out"), key
        row = f"| **{claim['text']}**: {claim['detail']} |"
        assert row in (checks if key in CHECKS else papers), key
    assert "held-out L1 loss over their L1-median bound; holds below 0.2×" in papers
    for name in FIGURES:
        assert f"]({name})" in text


@pytest.mark.slow
def test_vanilla_stays_at_bound_data_control_reflects(run: tuple[Path, dict[str, Any]]) -> None:
    # The robust claim (Sec. 5 / 5.1): an increasing map of the line cannot beat the
    # L1-median bound, while feeding x to the field learns x -> -x.
    _, summary = run
    claims = summary["claims"]
    assert claims["vanilla_reflection_at_bound"]["holds"]
    assert claims["data_control_reflects"]["holds"]
    for key in CHECKS:  # the bound holds on every seed: passed, never mixed
        assert claims[key]["kind"] == "check", key
        assert claims[key]["held_on_seeds"] == [True, True], key
        assert (claims[key]["status"], claims[key]["verdict"]) == ("passed", "passed"), key
    assert claims["data_control_reflects"]["kind"] == "paper"
    assert claims["data_control_reflects"]["status"] in ("held", "mixed")
    metrics = summary["metrics"]
    bound = metrics["reflection/vanilla"]["l1_bound"]["mean"]
    assert metrics["reflection/vanilla"]["loss"]["mean"] >= bound * (1 - 1e-3) * 0.95
    assert metrics["reflection/data_control"]["loss"]["mean"] < 0.1 * bound


@pytest.mark.slow
def test_claims_are_judged_on_held_out_points(run: tuple[Path, dict[str, Any]]) -> None:
    _, saved = run
    metrics = saved["metrics"]
    for kind in ("vanilla", "data_control"):
        reflection, annuli = metrics[f"reflection/{kind}"], metrics[f"annuli/{kind}"]
        assert reflection["test_loss"]["mean"] != reflection["loss"]["mean"]  # other points
        assert 0.0 <= annuli["test_accuracy"]["mean"] <= 1.0
    claim = saved["claims"]["data_control_reflects"]
    run_ = metrics["reflection/data_control"]
    expected = run_["test_loss"]["seeds"][0] / run_["test_l1_bound"]["seeds"][0]
    assert claim["ours"]["seeds"][0] == pytest.approx(expected)
    accuracy = saved["claims"]["galerkin_annuli_fits"]["ours"]["seeds"]
    assert accuracy == metrics["annuli/galerkin"]["test_accuracy"]["seeds"]
