"""Published reports are what this code writes from their stored per-seed values.

``rerender`` reads a run's ``results.json`` back into a result, checks its claims again
and writes its report: for every published run it must give the published report and
verdicts, byte for byte, so a change to an experiment's text, tables or claims shows
here, not in a stale page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from odebench.experiments import rerender

RESULTS = Path(__file__).parents[2] / "docs" / "results"
PUBLISHED = sorted(
    p.parent.name
    for p in RESULTS.glob("*/results.json")
    if "experiment" in json.loads(p.read_text(encoding="utf-8"))
)


def _copy(name: str, tmp_path: Path) -> tuple[Path, dict]:
    run = shutil.copytree(RESULTS / name, tmp_path / name)
    return run, json.loads((run / "results.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", PUBLISHED)
def test_a_published_report_is_what_its_values_give(name: str, tmp_path: Path) -> None:
    run, doc = _copy(name, tmp_path)
    if "provenance" not in doc or "correction" in doc:
        with pytest.raises(ValueError, match="rerun it"):
            rerender(run, log=lambda _: None)
        return
    new = rerender(run, log=lambda _: None)
    assert new == doc
    published = (RESULTS / name / "report.md").read_text(encoding="utf-8")
    assert (run / "report.md").read_text(encoding="utf-8") == published


def test_a_changed_value_changes_the_verdict_written_back(tmp_path: Path) -> None:
    run, doc = _copy("pendulum", tmp_path)
    claims = {k: c["status"] for k, c in doc["claims"].items()}
    held = next(k for k, status in claims.items() if status == "held")
    for stats in doc["metrics"].values():
        for stat in stats.values():
            stat["seeds"] = [None] * len(stat["seeds"])
            stat["mean"], stat["std"], stat["n"] = None, None, 0
    (run / "results.json").write_text(json.dumps(doc), encoding="utf-8")
    new = rerender(run, log=lambda _: None)
    assert new["claims"][held]["status"] != "held"
    assert json.loads((run / "results.json").read_text())["claims"] == new["claims"]


def test_the_corrected_and_the_unrecorded_runs_are_found() -> None:
    # The three reports corrected by hand (MNIST digits read as Fashion-MNIST) must be
    # rerun, not rewritten.
    kept = {
        n
        for n in PUBLISHED
        if "correction" in json.loads((RESULTS / n / "results.json").read_text())
    }
    assert kept == {"contnet-adjoint", "manifestation-sweep", "refinement-timing"}


@pytest.mark.parametrize(
    ("seeds", "match"),
    [
        (
            [],
            r"results.json: `seeds` must list the run's seeds \(integers, at least one\), got \[\]",
        ),
        ("012", r"`seeds` must list the run's seeds .* got '012'"),
        ([0, 1], r"metric 'parameters' of run 'node' has 3 values, not one for each of its 2"),
        ([0, 1, 2, 3], r"has 3 values, not one for each of its 4 `seeds` \[0, 1, 2, 3\]"),
    ],
)
def test_seeds_that_are_not_one_for_each_value_are_refused(seeds, match, tmp_path: Path) -> None:
    run, doc = _copy("quickstart", tmp_path)
    (run / "results.json").write_text(json.dumps({**doc, "seeds": seeds}), encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        rerender(run, log=lambda _: None)
    assert (run / "report.md").read_bytes() == (RESULTS / "quickstart" / "report.md").read_bytes()


def test_statistics_that_are_not_those_of_the_values_are_refused(tmp_path: Path) -> None:
    # The tables show the mean and std, the claims read the values: edited values with
    # the old statistics would give a report that disagrees with itself.
    run, doc = _copy("pendulum", tmp_path)
    stat = next(iter(next(iter(doc["metrics"].values())).values()))
    stat["seeds"] = [None if v is None else 100 * v for v in stat["seeds"]]
    (run / "results.json").write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError, match=r"whose mean, std and n are not those of its values"):
        rerender(run, log=lambda _: None)
    assert (run / "report.md").read_bytes() == (RESULTS / "pendulum" / "report.md").read_bytes()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        ({"mode": "fast"}, r"results.json: `mode` 'fast' is none of quickstart's: quick, standard"),
        (
            {"details": {"node": [{}]}},
            r"`details` must hold one entry per seed of `seeds` \(0, 1, 2\)",
        ),
    ],
)
def test_a_mode_or_details_the_experiment_cannot_have_are_refused(
    edit: dict, match: str, tmp_path: Path
) -> None:
    run, doc = _copy("quickstart", tmp_path)
    (run / "results.json").write_text(json.dumps({**doc, **edit}), encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        rerender(run, log=lambda _: None)
