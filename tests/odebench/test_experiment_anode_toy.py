"""``odebench run anode-toy --quick``: the files, numbers and report it writes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import odebench.experiments._anode_toy as anode_toy
import pytest
import torch
from odebench.experiments import EXPERIMENTS, RunOptions, Setup, Values, run_experiment
from odebench.experiments._anode_common import monotone_floor
from odebench.experiments._report import Prose

FIGURES = ("loss.png", "nfe.png", "flows_1d.png", "features_2d.png", "slice.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUMMARY_KEYS = ("train_mse", "test_mse", "nfe_first", "nfe_last")
SLICE_KEYS = ("train_mse", "slice_mse")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("anode-toy") / "run"
    lines: list[str] = []
    options = RunOptions(out=out, quick=True, device="cpu", progress=False)
    summary = run_experiment("anode-toy", options, log=lines.append)
    assert any("report in" in line for line in lines)
    return out, summary


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _mean(summary: dict[str, Any], run: str, metric: str) -> float:
    """The mean over the seeds of one metric of one run."""
    mean: float = summary["metrics"][run][metric]["mean"]
    return mean


def test_registered() -> None:
    assert "anode-toy" in EXPERIMENTS
    assert EXPERIMENTS["anode-toy"].description


def test_monotone_floor_is_two_thirds_for_equal_thirds() -> None:
    x = torch.tensor([[-1.2], [-1.1], [-0.3], [0.2], [1.3], [1.4]])
    y = torch.tensor([[1.0], [1.0], [-1.0], [-1.0], [1.0], [1.0]])
    assert monotone_floor(x, y) == pytest.approx(2 / 3)


def test_quick_settings_are_small_and_epochs_override() -> None:
    quick = anode_toy.TEMPLATE.settings_for("quick")
    full = anode_toy.TEMPLATE.settings_for("full", epochs=7)
    assert quick.seeds < full.seeds and quick.train_size is not None
    assert full.epochs == 7 and full.lr == 1e-3 and full.batch_size == 64
    assert full.seeds >= 3 and full.train_size is None


def test_every_claim_has_a_kind_and_the_floor_is_a_check() -> None:
    """Prop. 1's floor binds every monotone map, whatever the training: a check."""
    setup = Setup("anode-toy", "standard", anode_toy.TEMPLATE.settings_for("standard"),
                  RunOptions(out=Path("unused")), (0, 1, 2), print)  # fmt: skip
    claims = anode_toy.TEMPLATE.claims(setup)
    assert [c.key for c in claims if c.kind == "check"] == ["node_1d_at_floor"]
    floor = Prose.of(anode_toy.TEMPLATE.text).details["node_1d_at_floor"]
    assert "passes at {claim[node_1d_at_floor].low}× or more" in floor
    assert next(c for c in claims if c.key == "node_1d_at_floor").low == anode_toy.FLOOR_MARGIN


def test_anode_below_node_is_the_paired_difference() -> None:
    claim = next(c for c in anode_toy.CLAIMS if c.key == "anode_1d_below_node")
    seeds = [
        Values({"1d/anode": {"train_mse": a}, "1d/node": {"train_mse": n}})
        for a, n in ((0.01, 0.7), (0.9, 0.7))
    ]
    verdict = claim.check(seeds)
    assert verdict.ours.values == pytest.approx((-0.69, 0.2))
    assert verdict.ours.mean == pytest.approx(-0.245)
    # Below zero on the mean, but on one seed of two: not most seeds.
    assert verdict.status == "mixed" and verdict.words == "mixed: held on 1 of 2 seeds"


@pytest.mark.parametrize("key", ["node_nfe_nearly_doubles", "anode_nfe_hardly_increases"])
def test_nfe_growth_is_missing_where_one_dimension_misses_it(key: str) -> None:
    """The smaller (larger) of the 1-D and 2-D growth has no number without the 2-D one."""
    claim = next(c for c in anode_toy.CLAIMS if c.key == key)
    model = key.split("_")[0]
    table = {
        f"{d}d/{model}": {"nfe_first": 10.0, "nfe_last": 11.0 if d == 1 else None} for d in (1, 2)
    }
    verdict = claim.check([Values(table)])
    assert verdict.ours.values == (None,) and verdict.status == "not held"


@pytest.mark.parametrize(
    ("key", "table", "words"),
    [
        ("anode_1d_near_zero", {"1d/anode": {"train_mse": 0.049}}, "held"),
        ("anode_1d_near_zero", {"1d/anode": {"train_mse": 0.05}}, "not held"),  # strictly
        ("anode_slice_near_zero", {"slice/anode": {"slice_mse": 0.05}}, "not held"),
        ("anode_slice_near_zero", {"slice/anode": {"slice_mse": None}}, "not held"),
        ("node_slice_gap_large", {"slice/node": {"slice_mse": 0.375, "train_mse": 0.25}}, "held"),
        ("node_slice_gap_large", {"slice/node": {"slice_mse": 0.3, "train_mse": 0.25}}, "not held"),
        ("node_1d_at_floor", {"1d/node": {"train_mse": 0.6, "monotone_floor": 0.6}}, "passed"),
        ("node_1d_at_floor", {"1d/node": {"train_mse": 0.5, "monotone_floor": 0.6}}, "failed"),
    ],
)
def test_bound_claims_at_their_thresholds(
    key: str, table: dict[str, dict[str, float | None]], words: str
) -> None:
    """Near zero is strictly below the threshold; a large gap and the floor include theirs."""
    claim = next(c for c in anode_toy.CLAIMS if c.key == key)
    assert claim.check([Values(table)]).words == words


@pytest.mark.slow
def test_files_exist_and_pngs_are_pngs(run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = run
    for name in (*FIGURES, "results.json", "report.md"):
        assert (out / name).is_file(), name
    for name in FIGURES:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC, name
    for dim in ("1d", "2d"):
        for model in ("node", "anode"):
            for seed in (0, 1):
                run_dir = out / dim / model / f"seed{seed}"
                assert (run_dir / "metrics.json").is_file()
                assert (run_dir / "checkpoint.pt").is_file()


@pytest.mark.slow
def test_results_have_every_key_with_finite_numbers(run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = run
    saved = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert saved["experiment"] == "anode-toy" and saved["quick"] is True
    assert saved["metrics"] == summary["metrics"]
    for dim in ("1d", "2d"):
        for model in ("node", "anode"):
            entry = saved["metrics"][f"{dim}/{model}"]
            for key in SUMMARY_KEYS:
                stat = entry[key]
                assert _finite(stat["mean"]) and _finite(stat["std"]), (dim, model, key, stat)
            assert entry["nfe_first"]["mean"] > 0 and entry["train_mse"]["mean"] >= 0
    for model in ("node", "anode"):
        for key in SLICE_KEYS:
            stat = saved["metrics"][f"slice/{model}"][key]
            assert _finite(stat["mean"]) and _finite(stat["std"]), (model, key)
        assert saved["details"][f"slice/{model}"][0]["slice_points"] > 0
    assert saved["details"]["slice/node"][0]["angles"] == pytest.approx([0.0, math.pi / 5])
    assert 0.5 < _mean(saved, "1d/node", "monotone_floor") < 0.8
    assert set(saved["claims"]) == {claim.key for claim in anode_toy.CLAIMS}
    assert all(isinstance(v["holds"], bool) for v in saved["claims"].values())
    for claim in anode_toy.CLAIMS:
        entry = saved["claims"][claim.key]
        assert entry["kind"] == claim.kind and entry["detail"]
        assert len(entry["held_on_seeds"]) == 2
    # The paired difference: one value per seed, of the seed's own two runs.
    diff = saved["claims"]["anode_1d_below_node"]["ours"]["seeds"]
    anode, node = (saved["metrics"][f"1d/{m}"]["train_mse"]["seeds"] for m in ("anode", "node"))
    assert diff == pytest.approx([a - n for a, n in zip(anode, node, strict=True)])
    assert _finite(saved["wall_seconds"])
    floor = saved["claims"]["node_1d_at_floor"]["detail"]
    assert "passes at 0.9× or more" in floor and "not a reproduction" in floor


@pytest.mark.slow
def test_anode_fits_1d_and_node_sits_at_the_floor(run: tuple[Path, dict[str, Any]]) -> None:
    _, summary = run
    assert _mean(summary, "1d/anode", "train_mse") < _mean(summary, "1d/node", "train_mse")
    # A monotone map cannot beat the floor (up to the solver's tolerance).
    floor = _mean(summary, "1d/node", "monotone_floor")
    assert _mean(summary, "1d/node", "train_mse") >= 0.9 * floor
    assert summary["claims"]["anode_1d_below_node"]["holds"]
    floor_claim = summary["claims"]["node_1d_at_floor"]
    assert floor_claim["kind"] == "check"
    assert (floor_claim["status"], floor_claim["verdict"]) == ("passed", "passed")


@pytest.mark.slow
def test_report_has_the_table_and_figures(run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = run
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "`odebench run anode-toy --quick`" in text
    for row in ("| 1-D g(x), NODE |", "| 2-D g(x), ANODE |", "| slice test, NODE |"):
        assert row in text, row
    assert "forward NFE per batch, first → last epoch |" in text and "not published" in text
    for name in FIGURES:
        assert f"]({name})" in text, name
    papers, _, checks = text.partition("## Checks of our code")
    assert "## Claims of the paper" in papers and "## Claims\n" not in text
    for claim in anode_toy.CLAIMS:
        row = f"| **{claim.text}**: {summary['claims'][claim.key]['detail']} |"
        assert row in (checks if claim.kind == "check" else papers), claim.key
    assert "| passed |" in checks
