"""``odebench run anode-images --quick``: the files, numbers and report it writes."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import odebench.experiments._anode_images as anode_images
import pytest
from odebench.experiments import (
    EXPERIMENTS,
    MODES,
    Result,
    Run,
    RunOptions,
    Setup,
    Stat,
    TrainingSettings,
    Values,
    run_template,
)
from odebench.experiments._images import not_run
from odebench.experiments._report import Prose
from odebench.experiments._runner import _setup
from odebench.models import build_model, count_parameters
from odebench.training import TrainConfig
from odebench.training._data import load_splits

FIGURES = ("accuracy_params.png", "nfe.png", "loss_nfe.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = TrainingSettings(seeds=2, epochs=1, lr=1e-3, batch_size=16, train_size=16, test_size=16)
"""Smaller than ``--quick``: the fixture's digits are easy, and the test must be quick."""


@pytest.fixture(scope="module")
def run(
    tmp_path_factory: pytest.TempPathFactory, digits: Path
) -> tuple[Path, dict[str, Any], list[str]]:
    out = tmp_path_factory.mktemp("anode-images") / "run"
    lines: list[str] = []
    options = RunOptions(out=out, quick=True, device="cpu", data_dir=str(digits), progress=False)
    tiny = dataclasses.replace(anode_images.TEMPLATE, modes=dict.fromkeys(MODES, TINY))
    summary = run_template(tiny, options, log=lines.append)
    return out, summary, lines


def test_registered() -> None:
    assert "anode-images" in EXPERIMENTS
    assert EXPERIMENTS["anode-images"].run.args == (anode_images.TEMPLATE,)


def test_quick_settings_are_small_and_full_ones_the_authors() -> None:
    quick = anode_images.TEMPLATE.settings_for("quick")
    full = anode_images.TEMPLATE.settings_for("full", epochs=7)
    assert quick.seeds == 2 and quick.epochs == 1 and quick.train_size is not None
    assert full.seeds == 5 and full.epochs == 7 and full.batch_size == 256 and full.lr == 1e-3
    assert full.train_size is None and full.test_size is None


def test_standard_settings_train_three_seeds_on_a_subset_of_mnist_10k() -> None:
    quick, standard, full = (anode_images.TEMPLATE.settings_for(m) for m in MODES)
    assert standard.seeds >= 3 and standard.epochs >= 2 and standard.lr == full.lr
    assert standard.train_size is not None and standard.test_size is not None
    assert quick.train_size is not None and quick.train_size < standard.train_size <= 8004
    assert 1000 <= standard.test_size <= 1996  # one image at most 0.1 points; MNIST-10k's
    assert standard.train_size % standard.batch_size == 0  # no image dropped
    assert standard.epochs * (standard.train_size // standard.batch_size) >= 400  # steps


def test_quick_and_standard_run_on_one_thread() -> None:
    assert anode_images.TEMPLATE.one_thread_modes == ("quick", "standard")


@pytest.mark.parametrize("mode", MODES)
def test_the_text_states_each_modes_training(mode: str) -> None:
    s = anode_images.TEMPLATE.settings_for(mode)
    text = Prose.of(anode_images.TEXT).report.format_map({"s": s, "table": {"table1": ""}})
    assert f"{s.epochs} epoch(s); Adam, learning rate 0.001, batch {s.batch_size};" in text
    assert f"test images per data set: {s.train_size} and {s.test_size}" in text
    assert "A quick run's models are barely trained" in text
    assert "2 epochs of 2,000 images (500 steps of batch 8)" in text  # the standard mode's


def _plans(data_dir: Path) -> tuple[Setup[TrainingSettings], dict[str, Run], list[str]]:
    """The standard mode's setup and runs of seed 0 with ``data_dir``, and the lines logged."""
    lines: list[str] = []
    options = RunOptions(out=data_dir / "out", mode="standard", data_dir=str(data_dir))
    setup, plans = _setup(anode_images.TEMPLATE, options, lines.append)
    return setup, {run.name: run for run in plans[0]}, lines


def test_cifar_without_files_is_skipped_with_a_line(tmp_path: Path) -> None:
    setup, runs, lines = _plans(tmp_path)
    assert setup.trained == ("mnist/node", "mnist/anode")  # MNIST's absence: training's to say
    for dataset, label in (("cifar10", "CIFAR-10"), ("svhn", "SVHN")):
        for model in ("node", "anode"):
            run = runs[f"{dataset}/{model}"]
            assert run.config is None and run.skipped == (
                f"not run here: needs {label} (`odebench download {dataset}`)"
            )
            assert str(tmp_path) not in run.skipped  # the report names no path
    assert len(lines) == 2 and lines[0].startswith(
        f"cifar10 skipped: no cifar10 data in {tmp_path}"
    )
    assert lines[1].startswith(f"svhn skipped: no svhn data in {tmp_path}")


def test_cifar_with_files_is_kept(tmp_path: Path) -> None:
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"")
    setup, runs, lines = _plans(tmp_path)
    assert "cifar10/anode" in setup.trained and runs["cifar10/anode"].config is not None
    assert [line.split(" ")[0] for line in lines] == ["svhn"]


def test_every_claim_has_a_kind_and_the_parameter_counts_are_checks(tmp_path: Path) -> None:
    """Parameter counts follow from the architecture, the same on every seed: checks."""
    setup = Setup("anode-images", "standard", anode_images.TEMPLATE.settings_for("standard"),
                  RunOptions(out=tmp_path, data_dir=str(tmp_path)), (0, 1, 2), print,
                  trained=("mnist/node", "mnist/anode"))  # fmt: skip
    standard = anode_images.TEMPLATE.claims(setup)
    assert [c.key for c in standard] == [c.key for c in anode_images.dataset_claims("mnist")]
    for dataset in anode_images.DATASETS:
        claims = anode_images.dataset_claims(dataset)
        assert {c.key: c.kind for c in claims} == {
            f"{dataset}_both_trained": "paper",
            f"{dataset}_anode_more_accurate": "paper",
            f"{dataset}_anode_fewer_nfe": "paper",
            f"{dataset}_parameters_matched": "check",
            f"{dataset}_parameters_on_budget": "check",
        }
        # Every data set's details are the same words: the text's parts.
        assert all(c.detail for c in claims)
    prose = Prose.of(anode_images.TEXT)
    assert not prose.details
    assert [f"mnist_{part}" for part in prose.parts] == [
        c.key for c in anode_images.dataset_claims("mnist")
    ]


def _seeds(*pairs: tuple[float, float], images: int = 1000) -> list[Any]:
    """One set of values per ``(anode, node)`` pair of test accuracies."""
    return [
        Values({f"mnist/{m}": {"test_acc": acc, "test_images": images}
                for m, acc in (("anode", a), ("node", n))})
        for a, n in pairs
    ]  # fmt: skip


def test_anode_more_accurate_is_a_paired_difference_above_its_standard_error() -> None:
    claim = {c.key: c for c in anode_images.dataset_claims("mnist")}["mnist_anode_more_accurate"]
    # the standard error of the difference is about 0.6-0.8 points here
    verdict = claim.check(_seeds((0.975, 0.96), (0.965, 0.96), (0.99, 0.97)))
    assert verdict.ours.values == pytest.approx((0.015, 0.005, 0.02))
    assert verdict.held_on == (True, False, True)  # half a point is within the noise
    assert verdict.words == "held on 2 of 3 seeds"
    assert verdict.published == "+1.8 points"  # Table 1: 98.2% against 96.4%
    svhn = {c.key: c for c in anode_images.dataset_claims("svhn")}["svhn_anode_more_accurate"]
    assert "one image is 0.1 points" in svhn.detail and "standard error" in svhn.detail
    svhn_seeds = [Values({f"svhn/{m}": {"test_acc": 0.8, "test_images": 1000}
                          for m in ("anode", "node")})]  # fmt: skip
    assert svhn.check(svhn_seeds).published == "+2.5 points"  # SVHN's: 83.5% against 81.0%
    assert claim.check(_seeds((0.97, 0.96), images=100)).held_on == (False,)  # n matters


def test_standard_error_is_the_binomial_one_of_the_difference() -> None:
    (v,) = _seeds((0.98, 0.96))
    expected = math.sqrt((0.98 * 0.02 + 0.96 * 0.04) / 1000)
    assert anode_images.standard_error(v, "mnist/node", "mnist/anode") == pytest.approx(expected)


def test_a_model_below_95_percent_is_not_a_comparison() -> None:
    claims = {c.key: c for c in anode_images.dataset_claims("mnist")}
    seeds = _seeds((0.97, 0.94), (0.98, 0.96), (0.93, 0.90))  # the NODE untrained on two
    trained = claims["mnist_both_trained"].check(seeds)
    assert trained.held_on == (False, True, False) and trained.status == "mixed"
    assert trained.words.startswith("mixed: held on 1 of 3")
    assert trained.published == "96.4%"  # the lower of Table 1's two
    assert trained.ours.values == pytest.approx((0.94, 0.96, 0.90))
    accurate = claims["mnist_anode_more_accurate"].check(seeds)
    assert accurate.held_on == (False, True, False)  # ahead by 3 points, but not trained
    assert accurate.status == "mixed"
    untrained = claims["mnist_anode_more_accurate"].check(_seeds((0.90, 0.80)))
    assert untrained.status == "not held"
    fine = claims["mnist_both_trained"].check(_seeds((0.97, 0.96), (0.98, 0.95)))
    assert fine.held_on == (True, True) and fine.status == "held"


def test_a_missing_accuracy_or_count_is_missing_from_the_lower_and_the_larger() -> None:
    """min(0.97, nan) is 0.97: the bar held on the NODE's accuracy, the ANODE's missing."""
    claims = {c.key: c for c in anode_images.dataset_claims("mnist")}
    (seed,) = _seeds((math.nan, 0.97))
    trained = claims["mnist_both_trained"].check([seed])
    assert trained.status == "not held" and trained.ours.values == (None,)
    table = {run: {**m, "parameters": 84_000.0} for run, m in seed.table.items()}
    table["mnist/anode"]["parameters"] = None
    budget = claims["mnist_parameters_on_budget"].check([Values(table)])
    assert budget.ours.values == (None,) and budget.status == "failed"


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
    for model in ("node", "anode"):
        for seed in (0, 1):
            assert (out / "mnist" / model / f"seed{seed}" / "checkpoint.pt").is_file()
    assert any(line.startswith("cifar10 skipped") for line in lines)
    assert any(line.startswith("[mnist/anode seed 1]") for line in lines)


@pytest.mark.slow
def test_figures_are_sane(run: tuple[Path, dict[str, Any], list[str]]) -> None:
    _, summary, _ = run
    assert summary["experiment"] == "anode-images" and summary["quick"] is True
    trained = [d for d in anode_images.DATASETS if summary["metrics"][f"{d}/node"]]
    assert trained == ["mnist"]
    for dataset in ("cifar10", "svhn"):  # not found: runs that train nothing, and say why
        for model in ("node", "anode"):
            assert summary["details"][f"{dataset}/{model}"] == [{"not_run": not_run(dataset)}] * 2
    assert math.isfinite(summary["wall_seconds"]) and summary["date"]
    for model in ("node", "anode"):
        row = summary["metrics"][f"mnist/{model}"]
        assert 0.0 <= row["test_acc"]["mean"] <= 1.0 and row["test_acc"]["std"] >= 0.0
        built = build_model(model, in_channels=1, num_classes=10, image_size=28)
        assert row["parameters"]["mean"] == count_parameters(built)
        assert row["nfe_first"]["mean"] > 0 and row["nfe_last"]["mean"] > 0
        assert row["test_acc"]["n"] == 2 and len(summary["details"][f"mnist/{model}"]) == 2
    claims = summary["claims"]
    assert set(claims) == {claim.key for claim in anode_images.dataset_claims("mnist")}
    for key in ("mnist_parameters_matched", "mnist_parameters_on_budget"):
        assert claims[key]["kind"] == "check"
        assert claims[key]["status"] == "passed" and claims[key]["held_on_seeds"] == [True, True]
    for key in ("mnist_anode_more_accurate", "mnist_anode_fewer_nfe"):
        assert claims[key]["kind"] == "paper"
        assert claims[key]["status"] in ("held", "mixed", "not held")
    # 16 images for one epoch: neither model trains, and the comparison cannot hold
    assert claims["mnist_both_trained"]["status"] == "not held"
    assert claims["mnist_anode_more_accurate"]["status"] == "not held"
    assert summary["metrics"]["mnist/node"]["test_images"]["seeds"] == [16, 16]
    node, anode = (summary["metrics"][f"mnist/{m}"]["test_acc"]["seeds"] for m in ("node", "anode"))
    expected = [a - n for a, n in zip(anode, node, strict=True)]
    assert claims["mnist_anode_more_accurate"]["ours"]["seeds"] == pytest.approx(expected)
    assert summary["published"]["mnist"]["anode"]["acc"] == 0.982


@pytest.mark.slow
def test_report_has_the_rows_and_the_published_numbers(
    run: tuple[Path, dict[str, Any], list[str]],
) -> None:
    out, summary, _ = run
    text = (out / "report.md").read_text(encoding="utf-8")
    first, _, rest = text.partition("\n")
    assert first.startswith("# ")
    assert rest.lstrip().startswith("`odebench run anode-images --quick`")
    for row in ("| MNIST, NODE |", "| MNIST, ANODE |", "96.4 ± 0.5%", "98.2 ± 0.1%", "| 84k |"):
        assert row in text, row
    assert "| CIFAR-10" not in text and "53.7 ± 0.2%" in text  # not found: the paper's only
    assert "A quick run's models are barely trained" in text
    papers, _, checks = text.partition("## Checks of our code")
    assert "## Claims of the paper" in papers
    for claim in anode_images.dataset_claims("mnist"):
        row = f"| **{claim.text}**: {summary['claims'][claim.key]['detail']} |"
        assert row in (checks if claim.kind == "check" else papers), claim.key
    assert "| +1.8 points |" in papers  # the published difference, in the claim's format
    for name in FIGURES:
        assert f"]({name})" in text, name


def test_svhn_with_files_is_kept_and_loads_as_colour_images(tmp_path: Path) -> None:
    scipy_io = pytest.importorskip("scipy.io")
    folder = tmp_path / "svhn"  # where odebench.data.download("svhn", tmp_path) writes
    folder.mkdir()
    for name, n in (("train_32x32.mat", 6), ("test_32x32.mat", 4)):
        labels = np.arange(1, n + 1).reshape(-1, 1)
        scipy_io.savemat(folder / name, {"X": np.zeros((32, 32, 3, n), np.uint8), "y": labels})
    assert "svhn/node" in _plans(tmp_path)[0].trained
    train, test = load_splits(TrainConfig(model="anode", dataset="svhn", data_dir=str(tmp_path)))
    assert train.inputs.shape == (6, 3, 32, 32) and test.inputs.shape == (4, 3, 32, 32)
    assert test.targets.tolist() == [1, 2, 3, 4]


def test_a_missing_accuracy_is_a_bar_marked_missing_not_a_bar_at_zero() -> None:
    metrics = {"mnist/node": {"test_acc": Stat.of([None, None])},
               "mnist/anode": {"test_acc": Stat.of([0.9, 0.92])}}  # fmt: skip
    setup = Setup("anode-images", "quick", TINY, RunOptions(out=Path("unused")), (0, 1), print,
                  tuple(metrics))  # fmt: skip
    (bars,) = anode_images._accuracy(Result(setup, "", "", 0.0, metrics, {}, ()))
    assert bars.series["ours"][0] is None and bars.errors["ours"][0] is None
    assert bars.series["ours"][1] == pytest.approx(91.0)
