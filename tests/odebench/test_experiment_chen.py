"""``odebench run chen-table1``: its modes, its claims, and a quick run on a small
MNIST-format data set."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import pytest
import torch
from odebench.experiments import RunOptions, Setup, Values, run_experiment
from odebench.experiments._chen import (
    FLAT_SLOPE,
    GAP_POINTS,
    MEMORY_STEPS,
    MNIST_10K,
    MODES,
    _memory_by_depth,
    claims,
)
from odebench.experiments._claims import MAX_CLAIM_TEXT
from odebench.experiments._report import Prose
from odebench.models import build_model, ode_layers

MODELS = ("mlp", "resnet", "rknet", "odenet")
#: The kind of every claim: the errors are tested by training; the parameter ratio and
#: the memory (set by the architectures and the adjoint) are the same on every seed.
KINDS = {
    "resnet_error_at_most_2pct": "paper",
    "rknet_error_at_most_2pct": "paper",
    "odenet_error_at_most_2pct": "paper",
    "odenet_error_near_resnet": "paper",
    "odenet_params_about_a_third_of_resnet": "check",
    "odenet_saves_less_than_rknet": "check",
    "odenet_saves_less_than_resnet": "check",
    "adjoint_memory_constant_in_depth": "check",
}


def test_standard_mode_trains_mnist_10k_on_three_seeds():
    standard = MODES["standard"]
    assert standard.seeds >= 3
    assert (standard.train_size, standard.test_size) == MNIST_10K
    assert standard.optimizer == "adam"
    # The rate drops before the end, and the costs are measured on a full batch.
    assert standard.milestones and max(standard.milestones) < standard.epochs
    assert standard.cost_batch == 128


def test_full_mode_is_the_papers_recipe():
    full = MODES["full"]
    assert (full.epochs, full.lr, full.milestones) == (160, 0.1, (60, 100, 140))
    assert (full.optimizer, full.augment) == ("sgd", True)
    assert full.train_size is None and full.test_size is None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("optimizer", "rmsprop", "`optimizer`"), ("cost_batch", 0, "`cost_batch`")],
)
def test_bad_settings_fail_clearly(field, value, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(MODES["quick"], **{field: value})


def _values(errors, slopes=(0.0, 8.0), params=(2.1e5, 5.8e5)):
    """One seed's values: test errors of resnet, rknet, odenet; MiB per step of the
    adjoint and of backprop; parameters of the ODE-Net and the ResNet."""
    table = {
        name: {"test_error": e, "saved_mib": 10.0, "parameters": 1.0}
        for name, e in zip(("resnet", "rknet", "odenet"), errors)
    }
    table["rknet"]["saved_mib"] = 60.0
    table["resnet"]["saved_mib"] = 20.0
    table["odenet"]["parameters"], table["resnet"]["parameters"] = params
    table["odenet"]["mib_per_step_adjoint"], table["odenet"]["mib_per_step_backprop"] = slopes
    return Values(table)


def _verdicts(*seeds):
    """The verdict of every claim on these seeds' values (the claims ignore the setup)."""
    return {c.key: c.check(list(seeds)) for c in claims(None)}


def test_every_claim_of_the_standard_mode_has_its_kind(tmp_path):
    options = RunOptions(out=tmp_path)
    setup = Setup("chen-table1", "standard", MODES["standard"], options, (0, 1, 2), print)
    made = claims(setup)
    assert {c.key: c.kind for c in made} == KINDS
    assert not any(c.timing for c in made)  # memory is counted, not timed
    assert all(len(c.text) <= MAX_CLAIM_TEXT for c in made)
    # Their details are in the report's text, each saying first what ours is.
    details = Prose.of("chen-table1.md").details
    assert list(details) == list(KINDS) and all(d.startswith("ours: ") for d in details.values())


def test_claims_hold_on_good_numbers():
    verdicts = _verdicts(_values((0.012, 0.014, 0.015)))
    assert list(verdicts) == list(KINDS)
    assert all(v.holds for v in verdicts.values()), [k for k, v in verdicts.items() if not v.holds]
    assert {k: v.status for k, v in verdicts.items()} == {
        k: "held" if kind == "paper" else "passed" for k, kind in KINDS.items()
    }
    assert verdicts["odenet_error_near_resnet"].ours.mean == pytest.approx(0.003)


def test_claims_fail_on_bad_numbers():
    # The ODE-Net 0.6 points behind a ResNet at 1.5%, and above 2%.
    verdicts = _verdicts(_values((0.015, 0.018, 0.021)))
    assert verdicts["resnet_error_at_most_2pct"].holds
    assert not verdicts["odenet_error_at_most_2pct"].holds
    assert not verdicts["odenet_error_near_resnet"].holds
    assert verdicts["odenet_error_near_resnet"].status == "not held"
    # An adjoint that grows at a tenth of backprop's rate is not constant in depth.
    growing = _verdicts(_values((0.01,) * 3, slopes=(0.1 * 8.0, 8.0)))
    assert not growing["adjoint_memory_constant_in_depth"].holds
    assert growing["adjoint_memory_constant_in_depth"].status == "failed"
    assert _verdicts(_values((0.01,) * 3, slopes=(0.5 * FLAT_SLOPE * 8.0, 8.0)))[
        "adjoint_memory_constant_in_depth"
    ].holds
    # Half the ResNet's parameters is not about a third.
    assert not _verdicts(_values((0.01,) * 3, params=(3e5, 6e5)))[
        "odenet_params_about_a_third_of_resnet"
    ].holds


def test_the_gap_to_the_resnet_must_be_below_half_a_point():
    assert pytest.approx(0.005) == GAP_POINTS
    above = _verdicts(_values((0.010, 0.014, 0.0151)))["odenet_error_near_resnet"]
    below = _verdicts(_values((0.010, 0.014, 0.0149)))["odenet_error_near_resnet"]
    assert (above.holds, below.holds) == (False, True)


def test_a_paper_claim_held_on_the_mean_and_one_of_two_seeds_is_mixed():
    # Seed 1 misses 2% for the ODE-Net, the mean does not.
    verdict = _verdicts(_values((0.012, 0.014, 0.016)), _values((0.012, 0.014, 0.022)))[
        "odenet_error_at_most_2pct"
    ]
    assert verdict.holds and verdict.held_on == (True, False)
    assert verdict.status == "mixed" and verdict.words == "mixed: held on 1 of 2 seeds"
    # Two seeds of three under 2%, and the mean: held.
    verdict = _verdicts(
        _values((0.012, 0.014, 0.016)), _values((0.012, 0.014, 0.022)), _values((0.01,) * 3)
    )["odenet_error_at_most_2pct"]
    assert verdict.status == "held" and verdict.words == "held on 2 of 3 seeds"


def test_a_check_must_pass_on_every_seed():
    # A third of the ResNet's parameters on one seed, half on the other: the ratio of
    # the means (0.42) is in 0.25-0.45, but a check fails where any seed fails.
    verdict = _verdicts(
        _values((0.01,) * 3, params=(2.1e5, 6e5)), _values((0.01,) * 3, params=(3e5, 6e5))
    )["odenet_params_about_a_third_of_resnet"]
    assert verdict.holds and verdict.held_on == (True, False)
    assert verdict.status == "failed" and verdict.words == "failed on 1 of 2 seeds"


def test_the_gap_to_the_resnet_is_paired_by_seed():
    """Errors far apart from seed to seed, with the same gap on each: the gap's spread is
    that of the per-seed differences, 0, not that of two unpaired means."""
    verdict = _verdicts(_values((0.010, 0.014, 0.012)), _values((0.030, 0.014, 0.032)))[
        "odenet_error_near_resnet"
    ]
    assert verdict.ours.mean == pytest.approx(0.002)
    assert verdict.ours.std == pytest.approx(0.0, abs=1e-12)
    assert verdict.status == "held"


@pytest.fixture(scope="module")
def table(tmp_path_factory, digits):
    """One quick run, shared by the tests that read it."""
    out = tmp_path_factory.mktemp("chen") / "out"
    options = RunOptions(out=out, quick=True, device="cpu", data_dir=str(digits), progress=False)
    lines: list[str] = []
    summary = run_experiment("chen-table1", options, log=lines.append)
    return out, summary, lines


@pytest.mark.slow
def test_chen_table1_quick(table):
    out, summary, lines = table
    assert json.loads((out / "results.json").read_text()) == summary
    assert summary["mode"] == "quick" and summary["settings"]["optimizer"] == "adam"
    assert next(line for line in lines if "parameters" in line).startswith("[mlp] mlp on mnist")
    rows = {name: {k: s["mean"] for k, s in m.items()} for name, m in summary["metrics"].items()}
    assert list(rows) == list(MODELS)
    for name in MODELS:
        assert (out / name / "results.json").exists(), name
        row = rows[name]
        assert 0.0 <= row["test_error"] <= 1.0
        assert (row["train_images"], row["test_images"]) == (512, 256)
        for key in ("saved_mib", "step_seconds"):
            assert math.isfinite(row[key]) and row[key] > 0, (name, key)
    # The ODE blocks evaluate their field; the adjoint solves backward as well.
    assert rows["odenet"]["nfe_forward"] > 0 and rows["odenet"]["nfe_backward"] > 0
    assert rows["rknet"]["nfe_forward"] == 24 and rows["rknet"]["nfe_backward"] == 0
    assert rows["resnet"]["nfe_forward"] == 0
    # Memory as the paper says: the adjoint saves less than backprop through the steps.
    saves = summary["claims"]["odenet_saves_less_than_rknet"]
    assert saves["holds"] and saves["kind"] == "check"
    assert saves["status"] == saves["verdict"] == "passed"
    assert {key: claim["kind"] for key, claim in summary["claims"].items()} == KINDS
    assert rows["odenet"]["saved_mib"] < rows["rknet"]["saved_mib"] / 2
    report = (out / "report.md").read_text()
    for label in ("1-layer MLP", "ResNet", "RK-Net", "ODE-Net"):
        assert f"| {label} |" in report
    assert "0.42%" in report and "O(1)" in report
    assert "barely trained" in report and "512 training images" in report
    # The errors are claims of the paper; memory and size, checks of our code, with details.
    papers, checks = report.split("## Checks of our code")
    assert "## Claims of the paper" in papers and "## Table 1" in checks
    assert (
        "| **the ODE-Net reaches a low MNIST test error (Table 1)**: ours: its test error" in papers
    )
    assert "| **the adjoint's memory is constant in depth" in checks
    assert "adjoint's memory" not in papers and "## Claims\n" not in report


@pytest.mark.slow
def test_memory_against_depth(table):
    out, summary, _ = table
    odenet = {k: s["mean"] for k, s in summary["metrics"]["odenet"].items()}
    adjoint = [odenet[f"saved_mib_adjoint@{steps}"] for steps in MEMORY_STEPS]
    backprop = [odenet[f"saved_mib_backprop@{steps}"] for steps in MEMORY_STEPS]
    # Backprop saves every step's evaluations: the memory grows linearly in L; the
    # adjoint's does not, and is below backprop's at every depth.
    per_step = [(b1 - b0) / (l1 - l0) for (l0, b0), (l1, b1) in
                itertools.pairwise(zip(MEMORY_STEPS, backprop))]  # fmt: skip
    assert per_step[0] > 0 and per_step[1] == pytest.approx(per_step[0], rel=0.05)
    assert max(adjoint) - min(adjoint) < 0.01 * backprop[0]
    assert all(a < b for a, b in zip(adjoint, backprop))
    assert odenet["mib_per_step_backprop"] > 1.0
    assert abs(odenet["mib_per_step_adjoint"]) < FLAT_SLOPE * odenet["mib_per_step_backprop"]
    assert summary["claims"]["adjoint_memory_constant_in_depth"]["holds"]
    assert (out / "memory_vs_depth.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    assert "## Memory against depth" in report
    assert "| adjoint |" in report and "| backprop |" in report
    assert "memory_vs_depth.png" in report


def test_memory_sweep_puts_the_spec_back():
    model = build_model("odenet", in_channels=1, num_classes=10, image_size=28)
    spec = ode_layers(model)[0].spec
    x, y = torch.randn(2, 1, 28, 28), torch.tensor([3, 7])
    metrics = _memory_by_depth(model, x, y)
    assert ode_layers(model)[0].spec is spec
    assert set(metrics) == {
        *(f"saved_mib_{g}@{steps}" for g in ("adjoint", "backprop") for steps in MEMORY_STEPS),
        "mib_per_step_adjoint",
        "mib_per_step_backprop",
    }
    assert metrics["mib_per_step_adjoint"] == 0.0 < metrics["mib_per_step_backprop"]
