"""``odebench run continuousnet-cifar``: ``--quick`` on a small MNIST-format data set, and
the CIFAR runs reported as not run where their data are not found."""

from __future__ import annotations

import json

import pytest
from odebench.cli import main
from odebench.experiments import TEMPLATES, RunOptions, Setup, Values, run_experiment
from odebench.experiments import _contnet_common as common
from odebench.experiments._continuousnet_cifar import MODES, claims, tables
from odebench.experiments._images import not_run
from odebench.experiments._report import Prose
from odebench.experiments._runner import _setup

KEYS = ("euler", "rk4-refined")


def _kinds(refined):
    """The claims of one pair: its depth and its cheap shallow epochs follow from the
    schedule (checks); its accuracy against the Euler model is tested by training."""
    euler = refined.replace("rk4-refined", "euler")
    return {
        f"{refined}_reached_final_steps": "check",
        f"{refined}_first_epoch_faster_than_last": "check",
        f"{refined}_within_tolerance_of_{euler}": "paper",
    }


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
    assert {key: claim["kind"] for key, claim in summary["claims"].items()} == _kinds("rk4-refined")
    assert summary["claims"]["rk4-refined_reached_final_steps"]["status"] == "passed"
    assert sum("refined to N_t = M" in line for line in lines) == 2
    # The unconfirmed accuracies are never quoted; the published timings are.
    assert summary["published"]["euler"]["test_accuracy"] == "not confirmed"
    report = (out / "report.md").read_text()
    assert report.startswith("# ")
    assert "`odebench run continuousnet-cifar --quick`" in report
    # The data used are named; nothing in the report passes them off as CIFAR.
    assert "Data: mnist (512 train / 256 test)" in report
    assert "CIFAR" not in report and "## Not run here\n\n- none\n" in report
    for label in ("| ContinuousNet(Euler) |", "| ContinuousNet(RK4), refined |"):
        assert report.count(label) == 2, label
    assert "not confirmed" in report and "| 113 |" in report and "608 min" in report
    papers, checks = report.split("## Checks of our code")
    assert "## Claims of the paper" in papers and "at most slightly worse" in papers
    assert "| **ContinuousNet(RK4), refined reaches N_t = M = 4 by refinement" in checks
    assert "![time per epoch and test accuracy](fig7_time_and_accuracy.png)" in report
    assert (out / "fig7_time_and_accuracy.png").read_bytes()[:4] == b"\x89PNG"


NOT_RUN = {
    "cifar10": "not run here: needs CIFAR-10 (`odebench download cifar10`)",
    "cifar100": "not run here: needs CIFAR-100 (`odebench download cifar100`)",
}


@pytest.mark.parametrize("mode", ["standard", "full"])
def test_without_cifar_the_report_says_what_to_download(tmp_path, digits, mode):
    """No CIFAR where the data directory points: nothing trains, nothing stands in, and
    the run succeeds with a report and results that say so."""
    out = tmp_path / "out"
    argv = ["run", "continuousnet-cifar", "--mode", mode, "--out", str(out)]
    assert main([*argv, "--data-dir", str(digits), "--no-progress"]) == 0
    summary = json.loads((out / "results.json").read_text())
    nets = MODES[mode].nets
    assert summary["seeds"] == [0, 1, 2, 3, 4]
    assert summary["claims"] == {}
    assert summary["metrics"] == {net.key: {} for net in nets}
    for net in nets:
        assert summary["details"][net.key] == [{"not_run": NOT_RUN[net.dataset]}] * 5
        assert not (out / net.key).exists()
    report = (out / "report.md").read_text()
    assert "## Not run here" in report
    for net in nets:
        assert f"- {net.label}: {NOT_RUN[net.dataset]}." in report
    assert "| ContinuousNet(Euler) |" not in report and "mnist" not in report.lower()
    assert "No claim of a paper is checked here." in report
    assert "## Checks of our code" not in report
    assert (out / "fig7_time_and_accuracy.png").read_bytes()[:4] == b"\x89PNG"


def test_cifar10_alone_trains_its_pair_and_reports_the_wide_pair_as_not_run(tmp_path):
    """With CIFAR-10 found and CIFAR-100 not: the CIFAR-10 runs train on CIFAR-10, the
    wide ones train nothing, and only the CIFAR-10 pair's claims are checked."""
    (tmp_path / "data_batch_1").touch()  # what the loader looks for first
    options = RunOptions(out=tmp_path / "out", mode="standard", seed=7, data_dir=str(tmp_path))
    setup, plans = _setup(TEMPLATES["continuousnet-cifar"], options, print)
    runs = {run.name: run for run in plans[7]}
    for key in ("euler", "rk4-refined"):
        config = runs[key].config
        assert config is not None and runs[key].skipped is None
        assert (config.dataset, config.seed, config.train_size) == ("cifar10", 7, 2000)
    assert runs["rk4-refined"].config.refine_epochs == (2, 4)
    for key in ("wide-euler", "wide-rk4-refined"):
        assert runs[key].config is None and runs[key].skipped == not_run("cifar100")
    keys = [claim.key for claim in claims(setup)]
    assert keys and all(key.startswith("rk4-refined_") for key in keys)


def test_every_claim_of_the_standard_mode_has_its_kind(tmp_path):
    """With both pairs trained, the claims of both pairs."""
    options = RunOptions(out=tmp_path / "out")
    trained = tuple(net.key for net in MODES["standard"].nets)
    setup = Setup("continuousnet-cifar", "standard", MODES["standard"], options, (0,), print,
                  trained)  # fmt: skip
    made = claims(setup)
    assert {c.key: c.kind for c in made} == _kinds("rk4-refined") | _kinds("wide-rk4-refined")
    assert not any(c.timing for c in made)
    assert all(c.detail.startswith("ours: ") for c in made)


def test_accuracy_against_euler_is_a_paired_difference(tmp_path):
    """The refined model at most 2 points below the Euler one, on the mean and on most
    seeds, by the per-seed differences; its depth a check that every seed must pass."""
    options = RunOptions(out=tmp_path / "out")
    setup = Setup("continuousnet-cifar", "standard", MODES["standard"], options, (0,), print,
                  ("euler", "rk4-refined"))  # fmt: skip
    made = {c.key: c for c in claims(setup)}

    def seed(euler, refined, steps=4):
        return Values({
            "euler": {"test_accuracy_recalibrated": euler},
            "rk4-refined": {"test_accuracy_recalibrated": refined, "n_steps_final": steps},
        })  # fmt: skip

    within = made["rk4-refined_within_tolerance_of_euler"]
    verdict = within.check([seed(0.60, 0.59), seed(0.50, 0.49), seed(0.55, 0.52)])
    assert verdict.ours.mean == pytest.approx(-(0.01 + 0.01 + 0.03) / 3)
    assert verdict.ours.std == pytest.approx(0.011547, abs=1e-6)  # of the differences
    assert verdict.status == "held" and verdict.held_on == (True, True, False)
    verdict = within.check([seed(0.60, 0.57)] * 3)
    assert verdict.status == "not held"
    reached = made["rk4-refined_reached_final_steps"].check([seed(0.5, 0.5), seed(0.5, 0.5, 2)])
    assert reached.status == "failed" and reached.words == "failed on 1 of 2 seeds"


def test_standard_and_full_modes():
    """Both train the four models on CIFAR over 5 seeds (the authors' script's count):
    Euler at the depth its RK4 twin reaches by refinement."""
    for mode in ("standard", "full"):
        s = MODES[mode]
        assert s.seeds == 5
        nets = {net.key: net for net in s.nets}
        assert [nets[k].dataset for k in ("euler", "wide-euler")] == ["cifar10", "cifar100"]
        for e, r in (("euler", "rk4-refined"), ("wide-euler", "wide-rk4-refined")):
            assert nets[r].n_steps == 1 and nets[r].final_steps == nets[e].n_steps
            assert nets[r].dataset == nets[e].dataset and nets[r].model == nets[e].model
    assert MODES["full"].nets[1].refine_epochs == (20, 40, 60, 70, 80)
    assert MODES["full"].nets[3].refine_epochs == (20, 50, 80)
    assert MODES["full"].training == common.FULL_TRAINING


def test_the_text_shows_the_declared_tables_and_the_claims_detail_themselves(tmp_path):
    """The claims are made per pair, so their details are in code, not in the text."""
    options = RunOptions(out=tmp_path / "out")
    setup = Setup("continuousnet-cifar", "quick", MODES["quick"], options, (0,), print)
    prose = Prose.of("continuousnet-cifar.md")
    assert prose.tables() == set(tables(setup))
    assert not prose.parts and not prose.details
