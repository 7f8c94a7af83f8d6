"""Claims, tables and figures read the runs that trained: those an experiment's ``runs``
declares when it runs, those its ``results.json`` holds when its report is written
again, whatever data the machine that writes it has."""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from odebench.experiments import (
    TEMPLATES,
    Claim,
    Col,
    Measurement,
    Metric,
    Row,
    Run,
    RunOptions,
    Settings,
    Setup,
    Table,
    Template,
    Trained,
    _runner,
    register_template,
    rerender,
    run_experiment,
)
from odebench.experiments._registry import _REGISTRY
from odebench.experiments._runner import check_declaration
from odebench.training import Task
from torch import nn

RESULTS = Path(__file__).parents[2] / "docs" / "results"
#: The experiments whose runs are those of the data sets found where they ran.
FOUND_WHERE_RUN = ("anode-images", "dissecting-augmentation")


@pytest.mark.parametrize("name", FOUND_WHERE_RUN)
def test_a_report_written_again_with_more_data_found_is_the_published_one(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every data set found on the machine that writes the report again: its runs,
    claims and tables are still those of the data the published run trained on."""
    monkeypatch.setattr(_runner, "find_data", lambda dataset, data_dir=None: tmp_path)
    _, plans = _runner._setup(TEMPLATES[name], RunOptions(out=tmp_path), print)
    assert all(run.skipped is None for runs in plans.values() for run in runs)  # all found
    run = shutil.copytree(RESULTS / name, tmp_path / name)
    doc = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert rerender(run, log=lambda _: None) == doc
    published = (RESULTS / name / "report.md").read_bytes()
    assert (run / "report.md").read_bytes() == published


@dataclass(frozen=True)
class Few(Settings):
    pass


NOT_RUN = "not run here: needs nothing"
DECLARED: list[tuple[str, ...]] = []
"""The runs every call of :func:`_claims` was given as trained, in order."""


def _runs(setup: Setup[Few], seed: int) -> list[Run]:
    x = torch.ones(4, 1)
    task = Task(
        model=lambda: nn.Linear(1, 1),
        data=(x, 2 * x),
        loss=lambda net, batch: nn.functional.mse_loss(net(batch[0]), batch[1]),
        optimizer=torch.optim.SGD,
        epochs=0, batch_size=4, seed=seed, settings={"seed": seed},
    )  # fmt: skip
    return [Run("line", task=task), Run("absent", skipped=NOT_RUN)]


def _measure(setup: Setup[Few], trained: Trained) -> Measurement:
    assert trained.run.skipped is None, "a skipped run is not measured"
    return Measurement({"weight": float(trained.load().weight.item())})


def _claims(setup: Setup[Few]) -> list[Claim]:
    DECLARED.append(setup.trained)
    weights = [Metric("weight").of(run) for run in setup.trained]
    return [
        Claim(f"{ref.run}_weight_finite", f"{ref.run}: its weight is a number", "a number",
              ours=lambda v, ref=ref: v[ref], holds=lambda v, ref=ref: abs(v[ref]) < 1e9,
              kind="check", detail="ours: the weight")
        for ref in weights
    ]  # fmt: skip


TEMPLATE = Template(
    name="trained-runs",
    description="a test experiment with a run that trains and one that does not",
    title="Trained runs",
    modes={"quick": Few(seeds=2), "standard": Few(), "full": Few()},
    runs=_runs,
    measure=_measure,
    claims=_claims,
    epoch_fields=(),
)


@pytest.fixture
def registered():
    register_template(TEMPLATE)
    DECLARED.clear()
    yield TEMPLATE.name
    del _REGISTRY[TEMPLATE.name]
    del _runner._TEMPLATES[TEMPLATE.name]


def test_claims_are_declared_on_the_runs_that_trained(tmp_path: Path, registered: str) -> None:
    out = tmp_path / "out"
    options = RunOptions(out=out, quick=True, device="cpu", progress=False)
    doc: dict[str, Any] = dict(run_experiment(registered, options, log=lambda _: None))
    assert DECLARED == [("line",)]
    assert list(doc["claims"]) == ["line_weight_finite"]
    assert doc["claims"]["line_weight_finite"]["status"] == "passed"
    assert doc["metrics"]["absent"] == {} and set(doc["metrics"]["line"]) == {"weight"}
    assert doc["details"]["absent"] == [{"not_run": NOT_RUN}] * 2
    assert not (out / "absent").exists()
    report = (out / "report.md").read_text(encoding="utf-8")
    assert rerender(out, log=lambda _: None) == doc  # from results.json: the same runs
    assert DECLARED == [("line",), ("line",)]
    assert (out / "report.md").read_text(encoding="utf-8") == report


def test_a_claim_may_not_read_a_run_that_does_not_train(registered: str) -> None:
    check_declaration(TEMPLATE, "quick")
    every_run = dataclasses.replace(
        TEMPLATE,
        claims=lambda setup: _claims(dataclasses.replace(setup, trained=("line", "absent"))),
    )
    with pytest.raises(KeyError, match="absent"):
        check_declaration(every_run, "quick")


@pytest.mark.parametrize(
    "column",
    [
        Col("weight", Metric("weight"), run="{run}/absent"),
        Col.joined("weights", Metric("weight"), Col("other", Metric("weight"), run="absent")),
    ],
    ids=["run-pattern", "joined"],
)
def test_a_table_may_not_read_a_run_that_does_not_train(registered: str, column: Col) -> None:
    fine = Table("run", [Row("line", "line")], [Col("weight", Metric("weight"), run="{run}")])
    check_declaration(dataclasses.replace(TEMPLATE, tables=lambda setup: {"t": fine}), "quick")
    bad = dataclasses.replace(fine, columns=[column])
    with pytest.raises(KeyError, match="absent"):
        check_declaration(dataclasses.replace(TEMPLATE, tables=lambda setup: {"t": bad}), "quick")
