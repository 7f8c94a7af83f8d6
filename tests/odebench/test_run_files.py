"""What figures read back from run folders (``experiments._run_files``), and the panel of
one column of runs' rows over their seeds (``_figures.seed_lines``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from odebench._figures import Style, seed_lines
from odebench.experiments import RunOptions, Setup
from odebench.experiments._run_files import first_model, seed_rows, states_at
from odebench.experiments._template import Settings
from odelayers import NeuralODE
from torch import Tensor, nn


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


class _Growth(nn.Module):
    """``dz/dt = a z``: ``z(t) = z(0) exp(a t)``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(-0.7, dtype=torch.float64))

    def forward(self, t: Tensor, z: Tensor) -> Tensor:
        return self.a * z


def test_states_at_solves_to_the_depths_without_gradients_and_restores_them() -> None:
    node = NeuralODE(_Growth(), ts=[0.0, 1.0])
    x = torch.tensor([[1.0], [-2.0]], dtype=torch.float64, requires_grad=True)
    depths = [0.0, 0.25, 0.5, 1.0]
    states = states_at(node, depths, lambda: node(x))
    exact = (
        x.detach()[None]
        * torch.exp(-0.7 * torch.tensor(depths, dtype=torch.float64))[:, None, None]
    )
    torch.testing.assert_close(states, exact, rtol=1e-5, atol=1e-6)
    assert not states.requires_grad
    assert node.ts == [0.0, 1.0]

    def fail() -> Tensor:
        assert node.ts == depths
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        states_at(node, depths, fail)
    assert node.ts == [0.0, 1.0]  # restored after a failure too


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
