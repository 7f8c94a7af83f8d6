"""What figures read back from run folders (``experiments._run_files``), and the panel of
one column of runs' rows over their seeds (``_figures.seed_lines``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from odebench._figures import Style, seed_lines
from odebench.experiments import RunOptions, Setup
from odebench.experiments._run_files import first_model, seed_rows
from odebench.experiments._template import Settings
from torch import nn


def _setup(out: Path, seeds: tuple[int, ...]) -> Setup[Settings]:
    options = RunOptions(out=out)
    return Setup("test", "quick", Settings(seeds=len(seeds)), options, seeds, print)


def test_seed_rows_reads_each_seeds_metrics_in_the_order_of_the_seeds(tmp_path: Path) -> None:
    setup = _setup(tmp_path, (3, 4))
    for seed in (4, 3):
        folder = setup.run_dir("toy/node", seed)
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps([{"epoch": 1, "loss": float(seed)}]))
    assert seed_rows(setup, "toy/node") == [
        [{"epoch": 1, "loss": 3.0}],
        [{"epoch": 1, "loss": 4.0}],
    ]


def test_first_model_loads_the_checkpoints_weights_and_draws_no_random_number(
    tmp_path: Path,
) -> None:
    setup = _setup(tmp_path, (7, 8))
    trained = nn.Linear(3, 2)
    folder = setup.run_dir("toy", 7)
    folder.mkdir(parents=True)
    torch.save({"model": trained.state_dict()}, folder / "checkpoint.pt")
    state = torch.get_rng_state()
    model = first_model(setup, "toy", lambda: nn.Linear(3, 2))
    assert torch.equal(torch.get_rng_state(), state)  # the fresh weights were drawn aside
    assert not model.training
    assert isinstance(model, nn.Linear)
    assert torch.equal(model.weight, trained.weight) and torch.equal(model.bias, trained.bias)


def test_first_model_refuses_a_checkpoint_of_another_model(tmp_path: Path) -> None:
    setup = _setup(tmp_path, (0,))
    setup.run_dir("toy", 0).mkdir(parents=True)
    torch.save({"model": nn.Linear(3, 2).state_dict()}, setup.run_dir("toy", 0) / "checkpoint.pt")
    with pytest.raises(RuntimeError, match="size mismatch"):
        first_model(setup, "toy", lambda: nn.Linear(4, 2))


def test_seed_lines_draws_the_mean_and_band_of_each_run_and_its_test_column_dashed() -> None:
    seeds = [
        [{"it": 10, "loss": 1.0, "test": 2.0}, {"it": 20, "loss": None, "test": 1.0}],
        [{"it": 10, "loss": 3.0, "test": 4.0}, {"it": 20, "loss": 0.5, "test": 3.0}],
    ]
    panel = seed_lines(
        "t",
        "iteration",
        "MSE",
        {"NODE": seeds},
        "loss",
        styles={"NODE": Style("o-", "C3")},
        x="it",
        test="test",
        yscale="log",
    )
    assert panel.series == {
        "NODE": [(10.0, 2.0), (20.0, None)],
        "NODE test": [(10.0, 3.0), (20.0, 2.0)],
    }
    assert panel.bands == {"NODE": [(10.0, 1.0, 3.0)]}  # the gap has no band; the test none
    assert panel.styles == {"NODE": Style("o-", "C3"), "NODE test": Style("--", "C3")}
    assert (panel.title, panel.xlabel, panel.ylabel, panel.yscale) == (
        "t",
        "iteration",
        "MSE",
        "log",
    )


def test_seed_lines_numbers_the_rows_from_one_without_an_x_column() -> None:
    runs = {"a": [[{"loss": 4.0}, {"loss": 2.0}, {"loss": 1.0}]], "b": [[{"loss": 1.0}]]}
    panel = seed_lines("", "epoch", "loss", runs, "loss")
    assert panel.series == {"a": [(1, 4.0), (2, 2.0), (3, 1.0)], "b": [(1, 1.0)]}
    assert panel.styles == {}
