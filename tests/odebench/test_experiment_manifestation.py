"""``odebench run manifestation-sweep``: its modes, and ``--quick`` on a small data set in
MNIST's files."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import odebench.experiments._manifestation  # noqa: F401  (registers the experiment)
import pytest
from odebench.experiments import Setup, Values
from odebench.experiments import _contnet_common as common
from odebench.experiments._manifestation import MODES, SCHEMES, TRAINED, claims
from odebench.experiments._registry import EXPERIMENTS, RunOptions, run_experiment
from odebench.experiments._report import Prose

#: The claims, every one tested by training: the ranges are those of the trained weights.
KEYS = (
    "rk4_range_below_euler_range",
    "rk4_range_below_euler_range_refined",
    "rk4_range_below_euler_range_fixed_stats",
    "rk4_trained_flat_refined",
    "euler_trained_degrades_refined",
)


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
    assert EXPERIMENTS["manifestation-sweep"].modes == {
        "quick": "1 seed", "standard": "3 seeds", "full": "5 seeds",
    }  # fmt: skip


def test_standard_mode_sweeps_fashion_mnist_over_three_seeds() -> None:
    s = MODES["standard"]
    assert s.seeds == 3
    assert [(net.key, net.method, net.dataset) for net in s.nets] == [
        ("euler", "euler", "fashion-mnist"), ("rk4", "rk4", "fashion-mnist"),
    ]  # fmt: skip
    assert [net.refine_epochs for net in s.nets] == [(), ()]  # both at one depth throughout
    assert s.grid_steps[0] < s.n_steps < s.grid_steps[-1]  # steps removed and added
    assert s.training.train_size is not None and s.training.test_size is not None


def test_full_mode_is_the_papers_cifar10_models() -> None:
    s = MODES["full"]
    assert s.seeds == 5 and s.epochs == 150 and s.training == common.FULL_TRAINING
    euler, rk4 = s.nets
    assert (euler.dataset, euler.n_steps, euler.refine_epochs) == ("cifar10", 32, ())
    assert (rk4.dataset, rk4.n_steps, rk4.refine_epochs) == ("cifar10", 1, (20, 40, 60, 70, 80))
    assert rk4.final_steps == s.n_steps == 32 and 32 in s.grid_steps


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"nets": MODES["quick"].nets[::-1]}, "one net per scheme"),
        ({"nets": (MODES["quick"].nets[0], MODES["full"].nets[1])}, "one N_t = M"),
        ({"grid_steps": (1, 4, 8)}, "must hold the nets' N_t 2"),
        ({"epochs": 0}, "`epochs` must be a positive integer, got 0"),
    ],
)
def test_settings_refuse_what_the_sweep_cannot_compare(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(MODES["quick"], **change)


def _setup(tmp_path: Path) -> Setup[Any]:
    options = RunOptions(out=tmp_path)
    return Setup("manifestation-sweep", "standard", MODES["standard"], options, (0, 1, 2), print)


def test_every_claim_of_the_standard_mode_has_its_kind(tmp_path: Path) -> None:
    made = claims(_setup(tmp_path))
    assert [c.key for c in made] == list(KEYS)
    assert {c.kind for c in made} == {"paper"} and not any(c.timing for c in made)
    details = Prose.of("manifestation-sweep.md").details  # the report's text gives them
    assert all(details[c.key].startswith("ours: ") for c in made)


def test_rk4_against_euler_is_a_paired_difference(tmp_path: Path) -> None:
    """Ranges that differ from seed to seed, RK4's 2 points below Euler's on each: the
    difference is -2 points with no spread; a seed where RK4's is not below counts."""
    made = {c.key: c for c in claims(_setup(tmp_path))}

    def seed(rk4: float, euler: float) -> Values:
        return Values({"rk4": {"range": rk4}, "euler": {"range": euler}})

    below = made["rk4_range_below_euler_range"]
    verdict = below.check([seed(0.01, 0.03), seed(0.10, 0.12), seed(0.05, 0.07)])
    assert verdict.ours.mean == pytest.approx(-0.02)
    assert verdict.ours.std == pytest.approx(0.0, abs=1e-12)
    assert verdict.status == "held" and verdict.words == "held on 3 of 3 seeds"
    verdict = below.check([seed(0.01, 0.03), seed(0.12, 0.10), seed(0.07, 0.05)])
    assert verdict.status == "mixed"
    assert verdict.words == "mixed: held on 1 of 3 seeds, not on the mean"


@pytest.mark.parametrize(("mode", "data"), [("standard", "fashion-mnist"), ("full", "cifar10")])
def test_missing_data_fails_before_training(tmp_path: Path, mode: str, data: str) -> None:
    options = RunOptions(out=tmp_path / "out", mode=mode, data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=f"no {data} data"):
        run_experiment("manifestation-sweep", options, log=lambda _: None)
    assert not (tmp_path / "out" / "results.json").exists()


def test_missing_digits_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no fashion-mnist data"):
        run_experiment(
            "manifestation-sweep", RunOptions(out=tmp_path, quick=True, data_dir=str(tmp_path))
        )


@pytest.mark.slow
def test_files(run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = run
    for name in ("results.json", "report.md", "fig9_heatmaps.png", "accuracy_vs_steps.png"):
        assert (out / name).is_file(), name
    for name in ("fig9_heatmaps.png", "accuracy_vs_steps.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((out / "results.json").read_text())
    assert saved["claims"] == summary["claims"]
    assert all(isinstance(v["holds"], bool) for v in summary["claims"].values())
    assert list(summary["claims"]) == list(KEYS)
    for key, claim in summary["claims"].items():  # one seed: held there or not at all
        assert claim["kind"] == "paper", key
        assert claim["status"] == ("held" if claim["holds"] else "not held"), key


@pytest.mark.slow
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


@pytest.mark.slow
def test_own_manifestation_matches_trained_net(run: tuple[Path, dict[str, Any]]) -> None:
    """The grid cell of the training (scheme, N_t) is the trained net's own recalibrated
    accuracy, measured apart from the sweep."""
    _, summary = run
    s = MODES["quick"]
    for scheme, m in _models(summary).items():
        cell = m["grid"][SCHEMES.index(scheme)][s.grid_steps.index(s.n_steps)]
        assert cell == m["test_accuracy_recalibrated"]
        fixed = m["grid_fixed_stats"][SCHEMES.index(scheme)][s.grid_steps.index(s.n_steps)]
        assert fixed == m["test_accuracy_recalibrated"]
        assert [row["n_steps"] for row in m["per_epoch"]] == [s.n_steps]  # one epoch


@pytest.mark.slow
def test_report_rows(run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = run
    report = (out / "report.md").read_text()
    assert summary["details"]["euler"][0]["dataset"] == "mnist"
    assert "Data: mnist (512 train / 256 test)" in report
    assert "A quick run's models are barely trained" in report
    assert "## The nets at their own manifestation, and their accuracy ranges" in report
    assert "not published" in report
    for scheme in TRAINED:
        assert f"| {scheme}-trained |" in report
    for name in SCHEMES:
        assert f"| {name} | " in report
    assert "![Fig. 9 analogue](fig9_heatmaps.png)" in report
    assert "## Claims of the paper" in report and "## Checks of our code" not in report
    assert "| **the RK4-trained model's accuracy is flat over N_t >= 2 (Fig. 9)**: ours: " in report
