"""``odebench run chen-tolerance --quick`` on a small data set in MNIST's files."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from odebench.experiments import TEMPLATES, Setup, Values, _chen, check_declaration
from odebench.experiments._chen_tolerance import ACTIVATIONS, MODES, claims, runs
from odebench.experiments._chen_tolerance_probe import _probe_metrics, fit_line
from odebench.experiments._claims import MAX_CLAIM_TEXT
from odebench.experiments._registry import EXPERIMENTS, RunOptions, run_experiment
from odebench.experiments._report import Prose

#: Every claim is tested by training; the one on times is judged on a quiet machine only.
KEYS = (
    "nfe_grows_as_tolerance_tightens",
    "solve_error_falls_as_tolerance_tightens",
    "error_at_tightest_not_above_loosest",
    "time_proportional_to_nfe",
    "softplus_ratio_roughly_half",
    "softplus_ratio_near_corrected",
    "relu_ratio_above_softplus",
    "seminorm_fewer_backward_nfe_relu",
    "seminorm_fewer_backward_nfe_softplus",
    "nfe_increases_during_training",
)
TOLS = ("0.1", "0.01", "0.001", "0.0001", "1e-05")


def _chen_setup(tmp_path: Path, mode: str) -> Setup[Any]:
    return Setup("chen-table1", mode, _chen.MODES[mode], RunOptions(out=tmp_path), (0,), print)


@pytest.mark.parametrize("mode", ["quick", "standard", "full"])
def test_the_relu_model_is_chen_table1s_odenet(tmp_path: Path, mode: str) -> None:
    """The same configuration, so the sweep runs on the model chen-table1 reports."""
    table1 = {run.name: run.config for run in _chen.runs(_chen_setup(tmp_path, mode), 7)}
    ours = {run.name: run.config for run in runs(_setup(tmp_path, mode), 7)}
    assert ours["relu"] == table1["odenet"]
    assert ours["softplus"] == dataclasses.replace(table1["odenet"], activation="softplus")


def test_standard_mode_trains_chen_table1s_schedule_on_three_seeds() -> None:
    standard = MODES["standard"]
    assert standard.seeds >= 3
    assert (standard.train_size, standard.test_size) == _chen.MNIST_10K
    assert standard.epochs * standard.train_size // standard.batch_size >= 1000
    assert standard.tolerances == (1e-1, 1e-2, 1e-3, 1e-4, 1e-5)
    assert standard.sweep == "relu" and standard.probe_size >= 4 * standard.batch_size


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tolerances": (1e-3, 1e-1)}, "loosest first"),
        ({"tolerances": (1e-3,)}, "loosest first"),
        ({"tolerances": (1e-1, 1e-2)}, "must include `train_tol`"),
        ({"sweep": "tanh"}, "`sweep`"),
        ({"optimizer": "rmsprop"}, "`optimizer`"),
        ({"train_size": 16}, "one batch"),
        ({"epochs": 0}, "`epochs` must be a positive integer"),
        ({"probe_size": 0}, "`probe_size`"),
    ],
)
def test_bad_settings_fail_clearly(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(MODES["quick"], **changes)


def _setup(tmp_path: Path, mode: str = "standard", **changes: Any) -> Setup[Any]:
    settings = dataclasses.replace(MODES[mode], **changes)
    return Setup("chen-tolerance", mode, settings, RunOptions(out=tmp_path), (0, 1, 2), print)


def test_every_claim_of_the_standard_mode_has_its_kind(tmp_path: Path) -> None:
    made = claims(_setup(tmp_path))
    assert [c.key for c in made] == list(KEYS)
    assert {c.kind for c in made} == {"paper"}
    assert [c.key for c in made if c.timing] == ["time_proportional_to_nfe"]
    assert all(len(c.text) <= MAX_CLAIM_TEXT and not c.detail for c in made)
    # The details are in the text, one per claim; the text shows declared tables only.
    details = Prose.of(TEMPLATES["chen-tolerance"].text).details
    assert list(details) == list(KEYS)
    assert all(d.startswith("ours: ") and "solver's minimum" in d for d in details.values())
    check_declaration(TEMPLATES["chen-tolerance"], "standard")


def test_fit_line() -> None:
    exact = {"slope": 2.0, "intercept": 6.0, "correlation": 1.0}
    assert fit_line([(2.0, 10.0), (4.0, 14.0), (8.0, 22.0)]) == exact
    # A constant line has slope 0 and no correlation; a single x has no line at all.
    flat = {"slope": 0.0, "intercept": 5.0, "correlation": None}
    assert fit_line([(2.0, 5.0), (8.0, 5.0)]) == flat
    assert fit_line([(2.0, 5.0), (2.0, 6.0)])["slope"] is None


def _sweep_seed(nfes: list[float], off: list[float], **extra: float) -> Values:
    """One seed of the ReLU model's sweep: forward NFE and whether it is off the minimum."""
    metrics = {f"nfe_forward@{t}": n for t, n in zip(TOLS, nfes)}
    metrics |= {f"sweep_off_floor@{t}": o for t, o in zip(TOLS, off)}
    return Values({"relu": metrics | extra})


def test_an_nfe_claim_does_not_hold_at_the_solvers_minimum(tmp_path: Path) -> None:
    """NFE that grows by a step at the tightest tolerance only, from a field whose NFE
    sits at the minimum there on most batches, is no evidence: the claim does not hold."""
    made = {c.key: c for c in claims(_setup(tmp_path))}
    grows = made["nfe_grows_as_tolerance_tightens"]
    nfes = [14.0, 14.0, 14.0, 14.0, 15.5]
    stuck = [_sweep_seed(nfes, [0.0] * 5) for _ in range(3)]
    assert grows.check(stuck).status == "not held"
    resolved = [_sweep_seed([14.0, 20.0, 26.0, 38.0, 56.0], [0.0, 1.0, 1.0, 1.0, 1.0])] * 3
    verdict = grows.check(resolved)
    assert (verdict.status, verdict.ours.mean) == ("held", 4.0)
    # Fig. 3d reads the training's NFE, guarded by the trained model's at 1e-3.
    training = made["nfe_increases_during_training"]
    rising = {"nfe_forward_first": 20.0, "nfe_forward_last": 26.0}
    assert training.check([_sweep_seed(nfes, [1.0] * 5, **rising)]).status == "held"
    off = [1.0, 1.0, 0.0, 1.0, 1.0]
    assert training.check([_sweep_seed(nfes, off, **rising)]).status == "not held"


def _probe(*rows: tuple[float, float, float, float, float, float]) -> dict[str, Any]:
    """A probe of ``(tol, forward, backward, seminorm, forward at floor, backward at floor)``."""
    return {
        "floor_forward": 14.0,
        "floor_backward": 14.0,
        "images": 256,
        "rows": [
            {"tol": t, "forward": f, "backward": b, "backward_seminorm": s,
             "solve_error": t, "forward_at_floor": af, "backward_at_floor": ab}
            for t, f, b, s, af, ab in rows
        ],
    }  # fmt: skip


def test_probe_reads_only_the_tolerances_off_the_minimum() -> None:
    metrics = _probe_metrics(
        _probe(
            (1e-1, 14.0, 14.0, 14.0, 1.0, 1.0),  # at the minimum: left out
            (1e-3, 20.0, 16.0, 14.0, 0.25, 0.0),
            (1e-5, 40.0, 36.0, 30.0, 0.0, 0.0),
        )
    )
    assert metrics["ratio"] == pytest.approx((0.8 + 0.9) / 2)
    assert metrics["ratio_tolerances"] == 2.0
    assert (metrics["backward_off_floor"], metrics["backward_seminorm_off_floor"]) == (26.0, 22.0)
    assert metrics["probe_off_floor@0.1"] == 0.0 and metrics["probe_off_floor@0.001"] == 1.0
    stuck = _probe_metrics(_probe((1e-1, 14.0, 14.0, 14.0, 1.0, 1.0)))
    assert stuck["ratio"] is None and stuck["backward_off_floor"] is None
    assert stuck["ratio_tolerances"] == stuck["seminorm_tolerances"] == 0.0


def _ratios(relu: float, softplus: float, backward: dict[str, tuple[float, float]]) -> Values:
    """One seed of both models: the probe's ratio and backward NFE (default, seminorm)."""
    ratios = {"relu": relu, "softplus": softplus}
    return Values(
        {
            n: {
                "ratio": ratios[n],
                "ratio_tolerances": 0.0 if math.isnan(ratios[n]) else 3.0,
                "backward_off_floor": backward[n][0],
                "backward_seminorm_off_floor": backward[n][1],
                "seminorm_tolerances": 0.0 if math.isnan(backward[n][0]) else 3.0,
            }
            for n in ACTIVATIONS
        }
    )


def test_model_comparisons_are_paired_differences(tmp_path: Path) -> None:
    """The seminorm is judged per field on the same batches and must need fewer
    backward NFE; a softplus model off the minimum at no tolerance has no ratio."""
    made = {c.key: c for c in claims(_setup(tmp_path))}
    backward = {"relu": (60.0, 40.0), "softplus": (20.0, 20.0)}
    seeds = [_ratios(1.5 + k, 0.5, backward) for k in range(3)]
    compared = (
        "softplus_ratio_roughly_half",
        "relu_ratio_above_softplus",
        "seminorm_fewer_backward_nfe_relu",
        "seminorm_fewer_backward_nfe_softplus",
    )
    verdicts = {key: made[key].check(seeds) for key in compared}
    assert verdicts["softplus_ratio_roughly_half"].status == "held"
    above = verdicts["relu_ratio_above_softplus"]
    assert (above.ours.mean, above.ours.std, above.status) == (2.0, 1.0, "held")
    relu = verdicts["seminorm_fewer_backward_nfe_relu"]
    assert (relu.ours.mean, relu.status) == (-20.0, "held")
    # As many backward NFE as the default norm is not fewer.
    assert verdicts["seminorm_fewer_backward_nfe_softplus"].status == "not held"
    stuck = [_ratios(1.5, math.nan, backward) for _ in range(3)]
    for key in ("softplus_ratio_roughly_half", "relu_ratio_above_softplus"):
        assert made[key].check(stuck).status == "not held"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, digits: Path) -> tuple[Path, dict[str, Any]]:
    """One quick run on noise images whose class sets a bright row."""
    tmp = tmp_path_factory.mktemp("chen_tolerance")
    out = tmp / "out"
    options = RunOptions(out=out, quick=True, device="cpu", data_dir=str(digits), progress=False)
    return out, run_experiment("chen-tolerance", options, log=lambda _: None)


def _means(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{run: {metric: mean over the seeds}}`` of a run's results."""
    return {run: {k: s["mean"] for k, s in m.items()} for run, m in result["metrics"].items()}


def test_registered() -> None:
    assert EXPERIMENTS["chen-tolerance"].modes["standard"] == "3 seeds"
    assert "chen-tolerance" in EXPERIMENTS


def test_missing_data_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no mnist data"):
        run_experiment(
            "chen-tolerance", RunOptions(out=tmp_path, quick=True, data_dir=str(tmp_path))
        )


@pytest.mark.slow
def test_files(run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = run
    for name in ("results.json", "report.md"):
        assert (out / name).stat().st_size > 0
    for fig in ("fig3a_error_vs_tol", "fig3b_time_vs_nfe", "fig3c_ratio", "fig3d_nfe"):
        assert (out / f"{fig}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ACTIVATIONS:  # trained by TrainConfig: a checkpoint that --resume continues
        assert (out / name / "results.json").exists()


@pytest.mark.slow
def test_results_finite(run: tuple[Path, dict[str, Any]]) -> None:
    _, result = run
    models = _means(result)
    assert set(models) == set(ACTIVATIONS)
    for name, v in models.items():
        assert result["details"][name][0]["history"][0]["epoch"] == 1
        for key in ("test_error", "nfe_forward_first", "floor_forward", "floor_backward"):
            assert math.isfinite(v[key]), key
        probe = result["details"][name][0]["probe"]
        assert probe["images"] == MODES["quick"].probe_size
        for r in probe["rows"]:
            # The solver's minimum is a floor: no tolerance takes fewer evaluations.
            assert r["forward"] >= probe["floor_forward"] and r["backward"] > 0
            assert 0.0 <= r["forward_at_floor"] <= 1.0 and r["solve_error"] >= 0.0
    rows = result["details"]["relu"][0]["tolerance_sweep"]
    assert [r["tol"] for r in rows] == [1e-1, 1e-3, 1e-5]
    for r in rows:
        assert 0.0 <= r["test_error"] <= 1.0
        assert r["nfe_forward"] > 0 and r["seconds_per_batch"] > 0
        assert all(n >= floor for n, _, floor in r["batches"])
    assert "tolerance_sweep" not in result["details"]["softplus"][0]
    assert list(result["claims"]) == list(KEYS)
    assert {claim["kind"] for claim in result["claims"].values()} == {"paper"}
    # One seed: a claim holds on it or not; the claim on times is not judged on a busy CPU.
    timed = result["claims"]["time_proportional_to_nfe"]
    contended = result["provenance"]["contended"]
    assert (timed["status"] == "contended") == contended
    for key, claim in result["claims"].items():
        if key != "time_proportional_to_nfe" or not contended:
            assert claim["status"] == ("held" if claim["holds"] else "not held"), key


@pytest.mark.slow
def test_solve_error_falls_as_tolerance_tightens(run: tuple[Path, dict[str, Any]]) -> None:
    rows = run[1]["details"]["relu"][0]["probe"]["rows"]
    assert rows[-1]["solve_error"] < rows[0]["solve_error"]


@pytest.mark.slow
def test_report_rows(run: tuple[Path, dict[str, Any]]) -> None:
    out, result = run
    report = (out / "report.md").read_text(encoding="utf-8")
    for row in ("| 0.1 |", "| 1e-05 |", "| relu |", "| softplus |", "not published"):
        assert row in report
    assert "about 0.5" in report and "about 0.8" in report
    assert "## Off the solver's minimum" in report
    # The sweep says at each tolerance on what share of the seeds the NFE is off the minimum.
    sweep = report.split("## Fig. 3a-b")[1].split("## Fig. 3c")[0]
    assert "off the minimum (share of seeds)" in sweep
    for tol in ("0.1", "0.001", "1e-05"):
        off = result["metrics"]["relu"][f"sweep_off_floor@{tol}"]["mean"]
        row = next(line for line in sweep.splitlines() if line.startswith(f"| {tol} |"))
        assert row.split(" | ")[3] == f"{off:.4g}"
    verdicts = ("| held |", "| not held |", "| contended: not judged |")
    rows = [line for line in report.splitlines() if line.endswith(verdicts)]
    assert len(rows) == len(KEYS)
    assert "## Claims of the paper" in report and "## Checks of our code" not in report
    assert "| **forward time is proportional to NFE (Fig. 3b)**: ours: the correlation" in report
    assert "chen-table1's ODE-Net" in report
