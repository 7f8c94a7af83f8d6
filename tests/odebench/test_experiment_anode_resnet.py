"""``odebench run anode-resnet``: its data, its ResNet, its claims, and a quick run."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from odebench.experiments import EXPERIMENTS, RunOptions, Values, run_experiment
from odebench.experiments import _anode_resnet as exp  # registers the experiment
from odebench.experiments._anode_common import (
    MAP_POINTS,
    NODE_DEPTHS,
    PATH_STARTS,
    flow_1d,
    monotone_floor,
)
from odebench.models import count_parameters

PNG = b"\x89PNG\r\n\x1a\n"
RUNS = [f"{task}/{model}" for task, _ in exp.TASKS for model in exp.MODELS]


def test_registered() -> None:
    assert EXPERIMENTS["anode-resnet"].run.args[0] is exp.TEMPLATE
    assert EXPERIMENTS["anode-resnet"].modes == {
        "quick": "2 seeds", "standard": "5 seeds", "full": "20 seeds",
    }  # fmt: skip


def test_settings_are_checked() -> None:
    quick = exp.MODES["quick"]
    with pytest.raises(ValueError, match="`record_every` must be a positive integer"):
        dataclasses.replace(quick, record_every=0)
    with pytest.raises(ValueError, match="`batch_size` \\(64\\) must not exceed"):
        dataclasses.replace(quick, train_size=10)
    with pytest.raises(ValueError, match="`lr` must be a positive number"):
        dataclasses.replace(quick, lr=0.0)
    assert exp.TEMPLATE.settings_for("standard", epochs=3).epochs == 3


def test_shifted_sines_are_labelled_by_their_curve() -> None:
    data = exp.shifted_sines(3001, generator=torch.Generator().manual_seed(4))
    x1, x2, y = data.inputs[:, 0].double(), data.inputs[:, 1].double(), data.targets[:, 0]
    assert data.inputs.shape == (3001, 2) and data.targets.shape == (3001, 1)
    assert int((y > 0).sum()) == 1501 and int((y < 0).sum()) == 1500
    assert bool(((x1 >= -1) & (x1 <= 1)).all())
    # Height above the unshifted sine: +shift/2 or -shift/2 plus noise of std 0.1.
    offset = x2 - torch.sin(math.pi * x1)
    assert torch.equal(torch.sign(offset).float(), y)  # separated: no point on the wrong side
    centred = offset - y.double() * exp.SHIFT / 2
    assert float(centred.std()) == pytest.approx(exp.NOISE, rel=0.1)
    again = exp.shifted_sines(3001, generator=torch.Generator().manual_seed(4))
    assert torch.equal(again.inputs, data.inputs) and torch.equal(again.targets, data.targets)
    with pytest.raises(ValueError, match="`n` must be an integer of at least 2"):
        exp.shifted_sines(1)


def test_task_data_is_fixed_by_seed_and_split() -> None:
    train = exp.task_data("2d", 90, 3)
    assert train is exp.task_data("2d", 90, 3)  # both models get these points
    test = exp.task_data("2d", 90, 3, test=True)
    assert not torch.equal(train.inputs, test.inputs)
    assert not torch.equal(train.inputs, exp.task_data("2d", 90, 4).inputs)
    assert exp.task_data("1d", 30, 0).inputs.shape == (30, 1)


@pytest.mark.parametrize("dim", [1, 2])
def test_resnet_parameters_match_the_node(dim: int) -> None:
    blocks = exp.resnet_blocks(dim)
    resnet = exp.build("resnet", dim)
    n, r = count_parameters(exp.build("node", dim)), count_parameters(resnet)
    assert len(resnet.blocks) == blocks
    assert r == blocks * exp.block_parameters(dim) + dim + 1
    assert abs(r / n - 1) <= exp.MATCHED
    for other in (blocks - 1, blocks + 1):  # one block more or fewer: farther from the NODE's
        assert abs(count_parameters(exp.ToyResNet(dim, 1, blocks=other)) - n) > abs(r - n)


def test_resnet_is_a_sequence_of_euler_steps() -> None:
    torch.manual_seed(1)
    net = exp.ToyResNet(2, 1, blocks=3, hidden=4).double()
    x = torch.randn(7, 2, dtype=torch.float64)
    states = net.states(x)
    assert len(states) == 4 and torch.equal(states[0], x)
    for block, before, after in zip(net.blocks, states, states[1:]):
        torch.testing.assert_close(after, before + block(before))
    torch.testing.assert_close(net(x), net.head(states[-1]))
    # The gradient the training loop uses is the derivative of the MSE.
    target = torch.randn(7, 1, dtype=torch.float64)
    params = tuple(net.parameters())

    def loss(*weights: torch.Tensor) -> torch.Tensor:
        tensors = dict(zip((n for n, _ in net.named_parameters()), weights))
        out = torch.func.functional_call(net, tensors, (x,))
        return torch.nn.functional.mse_loss(out, target)

    assert torch.autograd.gradcheck(loss, tuple(p.detach().requires_grad_() for p in params))


def _hand_set_resnet() -> exp.ToyResNet:
    """Two blocks and a readout that compute g(x) exactly on its support.

    Block 1: h -> h - 2 relu(h) = -|h|. Block 2 clamps to [-1, -0.5]:
    h -> h + relu(-1 - h) - relu(h + 0.5). Readout -4 h - 3 maps -1 (the shell) to +1
    and -0.5 (the ball) to -1.
    """
    net = exp.ToyResNet(1, 1, blocks=2)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        first, second = net.blocks
        first[0].weight[0, 0] = 1.0
        first[2].weight[0, 0] = -2.0
        second[0].weight[0, 0], second[0].bias[0] = -1.0, -1.0
        second[0].weight[1, 0], second[0].bias[1] = 1.0, 0.5
        second[2].weight[0, 0], second[2].weight[0, 1] = 1.0, -1.0
        net.head.weight[0, 0], net.head.bias[0] = -4.0, -3.0
    return net


def test_a_resnet_represents_what_no_node_can() -> None:
    """Discrete steps let trajectories cross: a two-block ResNet fits 1-D g(x) exactly,
    below the floor that binds every monotone map, and so every 1-D NODE."""
    data = exp.task_data("1d", 600, 0)
    net = _hand_set_resnet()
    with torch.no_grad():
        mse = float(torch.nn.functional.mse_loss(net(data.inputs), data.targets))
    assert mse < 1e-12
    assert monotone_floor(data.inputs, data.targets) > 0.6
    # The trajectories cross: after the first block (-|x|) the outer point 1.2 sits
    # below the inner -0.2, which it started above.
    states = net.states(torch.tensor([[-1.2], [-0.2], [1.2]]))
    assert states[0][0] < states[0][1] < states[0][2]
    assert states[1][2] < states[1][1] and states[1][0] < states[1][1]


def test_node_paths_do_not_cross_and_end_at_the_output() -> None:
    torch.manual_seed(0)
    node = exp.build("node", 1).eval()
    details = flow_1d(node)
    states = torch.tensor(details["paths"]["states"])  # (starts, depths)
    assert states.shape == (len(PATH_STARTS), NODE_DEPTHS)
    torch.testing.assert_close(states[:, 0], torch.tensor(PATH_STARTS))
    # A flow keeps the order of its trajectories at every depth.
    assert bool((states[1:] > states[:-1]).all())
    with torch.no_grad():
        end = node.ode(torch.tensor(PATH_STARTS)[:, None])[:, 0]
        mapped = node(torch.linspace(-1.5, 1.5, MAP_POINTS)[:, None])[:, 0]
    torch.testing.assert_close(states[:, -1], end, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.tensor(details["map"]["prediction"]), mapped)
    hand_set = _hand_set_resnet()
    resnet = flow_1d(hand_set, hand_set.states)["paths"]
    assert resnet["depths"] == [0.0, 0.5, 1.0]
    rows = torch.tensor(resnet["states"])
    assert not bool((rows[1:, 1] > rows[:-1, 1]).all())  # the hand-set ResNet's cross


def _values(**numbers: float) -> Values:
    """One seed's values; keys ``<task>_<model>`` give the train MSE."""
    table: dict[str, dict[str, float | None]] = {}
    for task, _ in exp.TASKS:
        for model in exp.MODELS:
            table[f"{task}/{model}"] = {
                "train_mse": numbers.get(f"{task}_{model}", 0.01),
                "parameters": numbers.get(f"{task}_{model}_params", 1000.0),
            }
    table["1d/node"]["monotone_floor"] = numbers.get("floor", 0.66)
    return Values(table, "a constructed seed")


def _verdict(key: str, seeds: list[Values]) -> str:
    claim = next(c for c in exp.CLAIMS if c.key == key)
    return claim.check(seeds).status


def test_claims_have_kinds_short_texts_and_details() -> None:
    kinds = {c.key: c.kind for c in exp.CLAIMS}
    assert kinds == {
        "resnet_fits_1d": "paper", "resnet_below_node_2d": "paper",
        "separable_gap_smaller": "paper", "matched_parameters": "check",
        "node_1d_at_floor": "check",
    }  # fmt: skip


def test_claims_hold_and_fail_on_constructed_values() -> None:
    good = _values(**{"1d_node": 0.67, "1d_resnet": 0.01, "2d_node": 0.02, "2d_resnet": 0.005,
                      "separable_node": 0.003, "separable_resnet": 0.002})  # fmt: skip
    for key in ("resnet_fits_1d", "resnet_below_node_2d", "separable_gap_smaller"):
        assert _verdict(key, [good] * 3) == "held"
    for key in ("matched_parameters", "node_1d_at_floor"):
        assert _verdict(key, [good] * 3) == "passed"
    # 1-D: a ResNet at a fifth of the NODE's loss is below it but not "easily" so.
    fifth = _values(**{"1d_node": 0.67, "1d_resnet": 0.13})
    assert _verdict("resnet_fits_1d", [fifth]) == "not held"
    # 2-D: 0.6 of the NODE's loss is not "struggles".
    most = _values(**{"2d_node": 0.02, "2d_resnet": 0.012})
    assert _verdict("resnet_below_node_2d", [most]) == "not held"
    # Separable: a gap as large as on g(x) fails; so does a NODE better than the ResNet on g(x).
    same = _values(**{"2d_node": 0.02, "2d_resnet": 0.0, "separable_node": 0.02})
    assert _verdict("separable_gap_smaller", [same]) == "not held"
    reversed_ = _values(**{"2d_node": 0.0, "2d_resnet": 0.02})
    assert _verdict("separable_gap_smaller", [reversed_]) == "not held"
    # One seed in three off: a paper claim is still held, a check fails.
    assert _verdict("resnet_fits_1d", [good, good, same]) == "held"
    unmatched = _values(**{"2d_resnet_params": 1150.0})
    assert _verdict("matched_parameters", [good, good, unmatched]) == "failed"
    below_floor = _values(**{"1d_node": 0.6, "floor": 0.66})
    assert _verdict("node_1d_at_floor", [good, below_floor]) == "failed"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("anode-resnet") / "run"
    lines: list[str] = []
    options = RunOptions(out=out, quick=True, device="cpu", progress=False)
    summary = run_experiment("anode-resnet", options, log=lines.append)
    assert any("report in" in line for line in lines)
    return out, summary


@pytest.mark.slow
def test_quick_run_numbers(quick_run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = quick_run
    on_disk = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert on_disk == json.loads(json.dumps(summary))
    assert on_disk["experiment"] == "anode-resnet" and on_disk["seeds"] == [0, 1]
    assert list(on_disk["metrics"]) == RUNS
    s = exp.MODES["quick"]
    iterations = s.epochs * (s.train_size // s.batch_size)
    for run in RUNS:
        m = on_disk["metrics"][run]
        for key in ("train_mse", "test_mse", "mean_train_loss", "parameters"):
            assert m[key]["n"] == 2 and all(math.isfinite(v) for v in m[key]["seeds"]), (run, key)
        for curve in (d["curve"] for d in on_disk["details"][run]):
            assert len(curve) == math.ceil(iterations / s.record_every)
            assert curve[-1]["iteration"] == iterations
            mean = sum(r["train_loss"] for r in curve) / len(curve)
        assert m["mean_train_loss"]["seeds"][-1] == pytest.approx(mean)
    # Every check holds on any seed: the counts are the architectures', and no
    # monotone map (no 1-D NODE) goes below the floor.
    claims = on_disk["claims"]
    assert {k: c["kind"] for k, c in claims.items()} == {c.key: c.kind for c in exp.CLAIMS}
    assert claims["matched_parameters"]["status"] == "passed"
    assert "test: within 10% of 1" in claims["matched_parameters"]["detail"]
    assert claims["node_1d_at_floor"]["status"] == "passed"
    floor = on_disk["metrics"]["1d/node"]["monotone_floor"]["seeds"]
    node = on_disk["metrics"]["1d/node"]["train_mse"]["seeds"]
    assert all(n >= 0.99 * f for n, f in zip(node, floor))
    ratio = claims["resnet_fits_1d"]["ours"]["seeds"]
    resnet = on_disk["metrics"]["1d/resnet"]["train_mse"]["seeds"]
    assert ratio == pytest.approx([r / n for r, n in zip(resnet, node)])
    assert on_disk["details"]["2d/resnet"][0]["blocks"] == exp.resnet_blocks(2)
    assert "annuli-1d, annuli-2d, shifted sines" in on_disk["data"]


@pytest.mark.slow
def test_quick_run_report_and_figures(quick_run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = quick_run
    for name in ("loss.png", "crossing_1d.png"):
        assert (out / name).read_bytes()[:8] == PNG
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "`odebench run anode-resnet --quick`" in report
    assert "## Claims of the paper" in report and "## Checks of our code" in report
    assert "![training loss](loss.png)" in report
    assert "![1-D trajectories](crossing_1d.png)" in report
    rows = [line for line in report.splitlines() if line.startswith(("| g(x)", "| separable"))]
    assert len(rows) == 3 and all(len(r.strip("|").split("|")) == 9 for r in rows)
