"""``odebench run dissecting-augmentation --quick``: the files, numbers and report it writes."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import odebench.experiments._dissecting_augmentation as augmentation
import pytest
from odebench.experiments import (
    EXPERIMENTS,
    MODES,
    Result,
    RunOptions,
    Setup,
    Stat,
    Values,
    run_template,
)
from odebench.experiments._images import not_run
from odebench.experiments._report import Prose
from odebench.models import build_model, count_parameters

FIGURES = ("augmentation.png", "nfe.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = augmentation.AugmentationSettings(
    seeds=1, epochs=1, batch_size=16, lr=1e-3, train_size=16, test_size=16
)
"""Smaller than ``--quick``: the fixture's digits are easy, and the test must be quick."""


@pytest.fixture(scope="module")
def run(
    tmp_path_factory: pytest.TempPathFactory, digits: Path
) -> tuple[Path, dict[str, Any], list[str]]:
    out = tmp_path_factory.mktemp("dissecting-augmentation") / "run"
    lines: list[str] = []
    options = RunOptions(out=out, quick=True, device="cpu", data_dir=str(digits), progress=False)
    tiny = dataclasses.replace(augmentation.TEMPLATE, modes=dict.fromkeys(MODES, TINY))
    summary = run_template(tiny, options, log=lines.append)
    return out, summary, lines


def test_registered() -> None:
    assert "dissecting-augmentation" in EXPERIMENTS
    assert EXPERIMENTS["dissecting-augmentation"].run.args == (augmentation.TEMPLATE,)


def test_settings_follow_the_notebooks_where_the_trainer_can() -> None:
    quick = augmentation.TEMPLATE.settings_for("quick")
    full = augmentation.TEMPLATE.settings_for("full")
    assert quick.seeds == 1 and quick.epochs == 1 and quick.train_size is not None
    assert full.epochs == 20 and full.batch_size == 64 and full.train_size is None
    assert full.seeds == 10  # the paper's table: the mean of 10 runs
    config = _config("ilnode", full)
    assert (config.optimizer, config.gradient) == ("adam", "adjoint")
    assert (config.lr, config.rtol, config.atol) == (1e-3, 1e-4, 1e-4)
    # StepLR(5, gamma=0.9) per epoch, as milestones.
    assert [config.lr_at(e) for e in (0, 4, 5, 10, 19)] == pytest.approx(
        [1e-3, 1e-3, 9e-4, 8.1e-4, 7.29e-4]
    )
    assert _config("ilnode", quick).gradient == "adjoint"


def _config(name: str, settings: augmentation.AugmentationSettings) -> Any:
    """The configuration of ``mnist/<name>``, seed 0, with ``settings``."""
    setup = Setup("dissecting-augmentation", "full", settings, RunOptions(out=Path("unused")),
                  (0,), print)  # fmt: skip
    return {run.name: run.config for run in augmentation.runs(setup, 0)}[f"mnist/{name}"]


CHECKS = {"second_order_fewest_parameters", "parameters_match_poster"}
"""Parameter counts follow from the architectures, the same on every seed: checks."""
TRAINED = "every_model_trained"
"""The claim that every model passes ``augmentation.TRAINED``: on MNIST only."""


def test_every_claim_has_a_kind_and_the_parameter_counts_are_checks(tmp_path: Path) -> None:
    setup = Setup("dissecting-augmentation", "standard",
                  augmentation.TEMPLATE.settings_for("standard"),
                  RunOptions(out=tmp_path, data_dir=str(tmp_path)), (0, 1, 2), print,
                  trained=tuple(f"mnist/{n}" for n in augmentation.MODELS))  # fmt: skip
    standard = augmentation.TEMPLATE.claims(setup)
    assert [c.key for c in standard] == [c.key for c in augmentation.dataset_claims("mnist")]
    for dataset in augmentation.DATASETS:
        claims = augmentation.dataset_claims(dataset)
        kinds = {c.key.removeprefix(f"{dataset}_"): c.kind for c in claims}
        keys = [k for k in augmentation.CLAIMS if dataset in augmentation.TRAINED or k != TRAINED]
        assert kinds == {k: "check" if k in CHECKS else "paper" for k in keys}
    # MNIST's claims are detailed in the text; CIFAR-10's, found or not, in code.
    assert not any(c.detail for c in augmentation.dataset_claims("mnist"))
    assert all(c.detail for c in augmentation.dataset_claims("cifar10"))


def test_augmentation_against_vanilla_is_two_paired_differences() -> None:
    """The IL-NODE and the 2nd-order model are each compared with the NODE, seed by seed."""
    claims = {c.key: c for c in augmentation.dataset_claims("mnist")}
    il, second = (
        claims["mnist_input_layer_beats_vanilla"],
        claims["mnist_second_order_beats_vanilla"],
    )
    assert (il.published, second.published) == pytest.approx((0.023, 0.024))  # the poster's
    seeds = [
        Values({"mnist/ilnode": {"test_acc": i}, "mnist/sonode": {"test_acc": o},
                "mnist/node": {"test_acc": n}})
        for i, o, n in ((0.94, 0.95, 0.92), (0.95, 0.91, 0.92), (0.93, 0.915, 0.92))
    ]  # fmt: skip
    assert il.check(seeds).words == "held on 3 of 3 seeds"
    assert il.check(seeds).ours.values == pytest.approx((0.02, 0.03, 0.01))
    # Above the NODE on the mean (+0.005) but on one seed of three: mixed, not held.
    assert second.check(seeds).words == "mixed: held on 1 of 3 seeds"


def test_a_comparison_holds_only_where_both_models_pass_90_percent() -> None:
    claims = {c.key: c for c in augmentation.dataset_claims("mnist")}
    il, every = claims["mnist_input_layer_beats_vanilla"], claims[f"mnist_{TRAINED}"]
    assert augmentation.TRAINED["mnist"] == 0.90 and every.published == 0.968
    detail = Prose.of(augmentation.TEXT).details["mnist_input_layer_beats_vanilla"]
    assert detail.format_map(augmentation.THRESHOLDS).endswith(
        "holds above 0, and where IL and NODE reach 90%"
    )
    # The IL-NODE well ahead of a NODE at 20-89%: not a comparison of trained models.
    seeds = [
        Values({f"mnist/{n}": {"test_acc": 0.95} for n in augmentation.MODELS}
               | {"mnist/node": {"test_acc": node}})
        for node in (0.20, 0.89, 0.91)
    ]  # fmt: skip
    assert il.check(seeds).ours.values == pytest.approx((0.75, 0.06, 0.04))
    assert il.check(seeds).words == "mixed: held on 1 of 3 seeds, not on the mean"
    assert every.check(seeds).words == "mixed: held on 1 of 3 seeds, not on the mean"
    assert every.check(seeds).ours.values == pytest.approx((0.20, 0.89, 0.91))
    near = claims["mnist_input_layer_near_best"]  # needs all four
    assert near.check(seeds).words == "mixed: held on 1 of 3 seeds, not on the mean"
    # On CIFAR-10 (poster: 59-73%) there is no bar.
    cifar = {c.key: c for c in augmentation.dataset_claims("cifar10")}
    assert f"cifar10_{TRAINED}" not in cifar
    low = [Values({"cifar10/ilnode": {"test_acc": 0.5}, "cifar10/node": {"test_acc": 0.4}})]
    assert cifar["cifar10_input_layer_beats_vanilla"].check(low).status == "held"
    assert cifar["cifar10_input_layer_beats_vanilla"].detail == (
        "ours: the IL-NODE's test accuracy minus the NODE's, paired per seed; holds above 0"
    )
    assert cifar["cifar10_input_layer_near_best"].detail.endswith("holds at -1 point or more")


def test_a_missing_number_is_missing_from_the_least_and_the_largest() -> None:
    """min and max drop a NaN after the first: the 2nd-order model passed as the smallest
    with a count missing, and the least accuracy was another model's."""
    claims = {c.key: c for c in augmentation.dataset_claims("mnist")}
    counts = dict(zip(augmentation.MODELS, (21_535.0, 20_816.0, None, 20_336.0), strict=True))
    accuracies = dict(zip(augmentation.MODELS, (0.95, 0.95, 0.95, None), strict=True))
    seed = Values({f"mnist/{n}": {"test_acc": accuracies[n], "parameters": counts[n]}
                   for n in augmentation.MODELS})  # fmt: skip
    for key in ("second_order_fewest_parameters", "parameters_match_poster",
                "every_model_trained", "input_layer_near_best"):  # fmt: skip
        verdict = claims[f"mnist_{key}"].check([seed])
        assert verdict.ours.values == (None,), key
    assert claims["mnist_second_order_fewest_parameters"].check([seed]).status == "failed"


@pytest.mark.slow
def test_files_exist_and_results_equal_the_summary(
    run: tuple[Path, dict[str, Any], list[str]],
) -> None:
    out, summary, lines = run
    for name in (*FIGURES, "results.json", "report.md"):
        assert (out / name).is_file(), name
    for name in FIGURES:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC, name
    assert json.loads((out / "results.json").read_text(encoding="utf-8")) == summary
    for name in augmentation.MODELS:
        assert (out / "mnist" / name / "checkpoint.pt").is_file(), name  # one seed: no seed0/
    assert any(line.startswith("cifar10 skipped") for line in lines)


@pytest.mark.slow
def test_figures_are_sane(run: tuple[Path, dict[str, Any], list[str]]) -> None:
    _, summary, _ = run
    assert summary["experiment"] == "dissecting-augmentation" and summary["quick"] is True
    # CIFAR-10 is not found: its runs train nothing, and say why.
    for name in augmentation.MODELS:
        assert set(summary["metrics"]) >= {f"mnist/{name}", f"cifar10/{name}"}
        assert summary["metrics"][f"cifar10/{name}"] == {}
        assert summary["details"][f"cifar10/{name}"] == [{"not_run": not_run("cifar10")}]
    assert math.isfinite(summary["wall_seconds"]) and summary["date"]
    for name, model in augmentation.MODELS.items():
        row = {k: s["mean"] for k, s in summary["metrics"][f"mnist/{name}"].items()}
        assert 0.0 <= row["test_acc"] <= 1.0
        built = build_model(model, in_channels=1, num_classes=10, image_size=28)
        assert row["parameters"] == count_parameters(built)
        # The adjoint solves backward too.
        assert row["nfe_forward"] > 0 and row["nfe_backward"] > 0
        # One epoch: its first epoch is its last.
        assert row["nfe_first"] == row["nfe_forward"]
    claims = {k.removeprefix("mnist_"): v for k, v in summary["claims"].items()}
    assert set(claims) == set(augmentation.CLAIMS)
    for key in CHECKS:
        assert claims[key]["kind"] == "check" and claims[key]["status"] == "passed", key
    for key in set(claims) - CHECKS:
        assert claims[key]["kind"] == "paper" and claims[key]["status"] in ("held", "not held")
    metrics = summary["metrics"]
    nfe = [metrics[f"mnist/{n}"]["nfe_forward"]["mean"] for n in ("anode", "ilnode")]
    assert claims["zero_augmentation_needs_more_nfe"]["ours"]["mean"] == nfe[0] - nfe[1]


@pytest.mark.slow
def test_report_has_the_rows_and_the_poster_numbers(
    run: tuple[Path, dict[str, Any], list[str]],
) -> None:
    out, summary, _ = run
    text = (out / "report.md").read_text(encoding="utf-8")
    first, _, rest = text.partition("\n")
    assert first.startswith("# ")
    assert rest.lstrip().startswith("`odebench run dissecting-augmentation --quick`")
    for label in augmentation.LABELS.values():
        assert f"| {label} |" in text, label
    for cell in ("| 96.8% |", "| 98 |", "| 21.4k |", "| 99.2% |", "| 43 |", "| 20.0k |"):
        assert cell in text, cell
    assert "## CIFAR-10" in text and "| 73.4% |" in text  # the poster's, beside "not run"
    assert "| IL-NODE (input layer) | not run | 73.4% | not run | not run | 65 |" in text
    assert "A quick run (`--quick`) is a smoke test" in text  # whatever the mode: stated once
    papers, _, checks = text.partition("## Checks of our code")
    assert "## Claims of the paper" in papers and "## Claims\n" not in text
    for key, claim in summary["claims"].items():
        row = f"| **{claim['text']}**: {claim['detail']} |"
        assert claim["detail"].startswith("ours: "), key
        assert row in (checks if key.removeprefix("mnist_") in CHECKS else papers), key
    assert "On MNIST a model below 90% test accuracy is undertrained" in text
    for name in FIGURES:
        assert f"]({name})" in text, name


def test_standard_settings_are_those_the_nodes_learn_with() -> None:
    """Three seeds on a subset of MNIST-10k; lr 1e-2 (the NODE's 16-feature readout crawls
    at 1e-3), a tenth of it for the second epoch, dopri5 at 1e-3 with backprop (the
    adjoint's backward solves cost the most), one thread per run."""
    quick, standard = (augmentation.TEMPLATE.settings_for(m) for m in ("quick", "standard"))
    assert standard.seeds >= 3 and standard.epochs >= 2
    assert standard.train_size is not None and standard.test_size is not None
    assert quick.train_size is not None and quick.train_size < standard.train_size <= 8004
    assert standard.test_size <= 1996  # the test images of MNIST-10k
    assert standard.train_size % standard.batch_size == 0  # no image dropped
    assert standard.epochs * (standard.train_size // standard.batch_size) >= 200  # steps
    config = _config("node", standard)
    assert (config.lr, config.rtol, config.atol, config.gradient) == (1e-2, 1e-3, 1e-3, "backprop")
    assert [config.lr_at(e) for e in range(standard.epochs)] == pytest.approx([1e-2, 1e-3])
    assert "standard" in augmentation.TEMPLATE.one_thread_modes
    words = augmentation.words(_result({n: [0.9] * 3 for n in augmentation.MODELS}, POSTER_NFE))
    assert words["sizes"] == "3200 training and 1000 test images"
    assert words["schedule"] == "times 0.1 after epoch(s) 1"


def _result(
    acc: dict[str, list[float]], nfe: dict[str, list[float]], dataset: str = "mnist"
) -> Result[Any]:
    """A standard-mode result of three seeds with these accuracies and NFE per model."""
    settings = augmentation.TEMPLATE.settings_for("standard")
    metrics = {
        f"{dataset}/{n}": {"test_acc": Stat.of(acc[n]), "nfe_forward": Stat.of(nfe[n])}
        for n in augmentation.MODELS
    }
    setup = Setup("dissecting-augmentation", "standard", settings,
                  RunOptions(out=Path("unused")), (0, 1, 2), print, tuple(metrics))  # fmt: skip
    return Result(setup, "odebench run dissecting-augmentation", "", 0.0, metrics, {}, ())


POSTER_NFE = {"node": [98.0] * 3, "anode": [71.0] * 3, "ilnode": [44.0] * 3, "sonode": [43.0] * 3}


def _verdicts(result: Result[Any]) -> dict[str, Any]:
    """The verdicts of MNIST's claims that read no parameter count, on ``result``."""
    claims = [c for c in augmentation.dataset_claims("mnist") if "param" not in c.key]
    return {c.key.removeprefix("mnist_"): c.check(result.per_seed()) for c in claims}


def test_the_claims_judge_the_posters_order_seed_by_seed() -> None:
    # IL ahead of the 2nd-order model on the mean, behind it on one seed of three.
    acc = {"node": [0.91] * 3, "anode": [0.93] * 3, "ilnode": [0.97, 0.97, 0.94],
           "sonode": [0.95, 0.95, 0.96]}  # fmt: skip
    nfe = {**POSTER_NFE, "anode": [50.0, 40.0, 30.0]}  # 0-aug cheaper than IL on one seed
    verdicts = _verdicts(_result(acc, nfe))
    assert verdicts["input_layer_beats_vanilla"].held_on == (True, True, True)
    assert verdicts["input_layer_near_best"].held_on == (True, True, False)
    assert verdicts["input_layer_near_best"].ours.values == pytest.approx((0.0, 0.0, -0.02))
    assert verdicts["zero_augmentation_needs_more_nfe"].ours.values == pytest.approx((6, -4, -14))
    assert verdicts["zero_augmentation_needs_more_nfe"].words == (
        "mixed: held on 1 of 3 seeds, not on the mean"
    )


def test_a_model_below_90_percent_fails_the_bar_on_its_seeds() -> None:
    acc = {"node": [0.84, 0.86, 0.91], "anode": [0.95] * 3, "ilnode": [0.96, 0.89, 0.97],
           "sonode": [0.96] * 3}  # fmt: skip
    verdicts = _verdicts(_result(acc, POSTER_NFE))
    assert verdicts["every_model_trained"].held_on == (False, False, True)
    assert verdicts["every_model_trained"].ours.values == pytest.approx((0.84, 0.86, 0.91))
    assert verdicts["input_layer_beats_vanilla"].held_on == (False, False, True)
    assert verdicts["second_order_beats_vanilla"].held_on == (False, False, True)
    passed = {n: [0.95] * 3 for n in augmentation.MODELS}
    assert _verdicts(_result(passed, POSTER_NFE))["every_model_trained"].status == "held"


def test_the_tables_show_the_poster_beside_ours_and_a_data_set_not_run() -> None:
    acc = {n: [0.95] * 3 for n in augmentation.MODELS}
    result = _result(acc, POSTER_NFE)
    tables = augmentation.tables(result.setup)
    assert list(tables) == ["mnist", "cifar10"]
    mnist = tables["mnist"].markdown(result)
    row = "| NODE (no augmentation) | 95.0 ± 0.0% | 96.8% | – | 98.0 ± 0.0 | 98 | – | 21.4k |"
    assert row in mnist
    cifar = tables["cifar10"].markdown(result)  # not trained: the poster's numbers alone
    assert "| 2nd-order | not run | 72.8% | not run | not run | 59 | not run | 34.6k |" in cifar


def test_a_missing_number_is_a_bar_marked_missing_not_a_bar_at_zero() -> None:
    acc = {n: [0.95] * 3 for n in augmentation.MODELS}
    result = _result(acc, {**POSTER_NFE, "anode": [None, None, None]})  # type: ignore[list-item]
    accuracy, nfe, _ = augmentation._poster_panels(result)[:3]
    assert accuracy.series["ours"] == pytest.approx([95.0] * 4)
    assert nfe.series["ours"] == [98.0, None, 44.0, 43.0]
