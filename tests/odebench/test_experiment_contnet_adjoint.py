"""The ``contnet-adjoint`` experiment: the solve of the block against contnet's own,
its gradients against autograd, the claims on constructed values, and a quick run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from odebench.experiments import RunOptions, Values, run_experiment
from odebench.experiments import _contnet_adjoint as adjoint
from odebench.experiments._contnet_adjoint import COMPARED, TRAINED
from odebench.experiments._contnet_adjoint_net import (
    ALL,
    BACKPROP,
    BLOCK,
    AdjointNet,
    Method,
    full_gradient,
    gradient_errors,
    integrate,
)
from odebench.experiments._report import Prose

PNG = b"\x89PNG\r\n\x1a\n"


def _net(pieces: int = 2, dtype: torch.dtype = torch.float32) -> AdjointNet:
    torch.manual_seed(0)
    return AdjointNet(1, 10, channels=4, pieces=pieces, pool=2).to(dtype)


def _batch(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(6, 1, 8, 8, generator=gen, dtype=dtype), torch.arange(6) % 10


def test_registered():
    from odebench.experiments import EXPERIMENTS

    assert EXPERIMENTS["contnet-adjoint"].run.args[0].runs is adjoint.runs


def test_methods():
    assert [m.key for m in TRAINED] == [
        "backprop", "adjoint-1M", "adjoint-2M", "adjoint-3M", "adjoint-4M", "knot-1M",
    ]  # fmt: skip
    assert [m.key for m in COMPARED][-1] == "checkpoint-1M"
    assert Method("backprop", 2).key == "backprop-2M"
    assert Method("checkpoint", 1, knots=True).label == "checkpoint, N_t = M"
    assert Method("adjoint", 3).n_steps(4) == 12


@pytest.mark.parametrize("method", [*COMPARED, Method("checkpoint", 2)], ids=lambda m: m.key)
def test_the_solve_computes_contnets_block(method: Method):
    """odecore.solve of the block's field, with or without jump_ts, is the network
    contnet's block computes at the same N_t: the methods differ in gradients only."""
    net = _net(pieces=4)
    x = net.stem(_batch()[0])
    expected = net.block.manifest(n_steps=method.n_steps(4))(x)
    torch.testing.assert_close(integrate(net.block, x, method), expected, rtol=1e-6, atol=1e-6)
    with torch.no_grad():  # no gradient recorded: contnet's block itself
        torch.testing.assert_close(integrate(net.block, x, method), expected)


def test_backprop_reference_is_autograd():
    net = _net()
    images, labels = _batch()
    loss = torch.nn.functional.cross_entropy(net(images), labels)
    loss.backward()
    expected = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
    torch.testing.assert_close(full_gradient(net, images, labels, BACKPROP), expected)


def test_checkpoint_gradient_is_backprops_in_float64():
    net = _net(pieces=2, dtype=torch.float64)
    images, labels = _batch(torch.float64)
    errors = gradient_errors(net, images, labels, [Method("checkpoint", k) for k in (1, 3)])
    assert max(errors.values()) < 1e-12


def test_gradient_errors_against_autograd_by_hand():
    """The relative error is |g - g_bp| / |g_bp| of the flattened gradients, and the
    block's part is the block's coefficients alone."""
    net = _net()
    images, labels = _batch()
    method = Method("adjoint", 2)
    errors = gradient_errors(net, images, labels, [method])
    grads = {}
    for m in (Method("backprop", 2), method):
        net.zero_grad()
        torch.nn.functional.cross_entropy(net(images, m), labels).backward()
        grads[m.key] = [p.grad.clone() for p in net.parameters()]
    full = [torch.cat([g.reshape(-1) for g in grads[k]]) for k in ("backprop-2M", "adjoint-2M")]
    assert errors["adjoint-2M", ALL] == pytest.approx(
        float((full[1] - full[0]).norm() / full[0].norm())
    )
    n_stem, n_block = 1, len(list(net.block.parameters()))
    block = [torch.cat([g.reshape(-1) for g in grads[k][n_stem : n_stem + n_block]])
             for k in ("backprop-2M", "adjoint-2M")]  # fmt: skip
    expected = float((block[1] - block[0]).norm() / block[0].norm())
    assert errors["adjoint-2M", BLOCK] == pytest.approx(expected)


def test_without_knots_the_first_piece_gets_no_gradient():
    """The plain adjoint at N_t = M steps backward from each knot and reads the next
    piece there: piece 0 is never read, so it gets no gradient; with jump_ts it does."""
    net = _net(pieces=4)
    images, labels = _batch()

    def first_piece(method: Method) -> float:
        net.zero_grad()
        torch.nn.functional.cross_entropy(net(images, method), labels).backward()
        weight = net.block.continuous.coefficient("2.weight").grad
        return float(weight[0].norm())

    assert first_piece(Method("adjoint", 1)) == 0.0
    assert first_piece(Method("adjoint", 1, knots=True)) > 0.0
    assert first_piece(Method("adjoint", 2)) > 0.0
    assert first_piece(BACKPROP) > 0.0


def test_adjoint_errors_shrink_with_steps_and_knots():
    net = _net(pieces=2)
    images, labels = _batch()
    errors = gradient_errors(net, images, labels, COMPARED)
    for name in ("adjoint", "knot"):
        series = [errors[f"{name}-{k}M", ALL] for k in (1, 2, 3, 4)]
        assert series == sorted(series, reverse=True)
    assert errors["knot-1M", ALL] < errors["adjoint-1M", ALL]
    assert errors["knot-1M", ALL] > 1e-2  # not backprop's gradient: O(h) remains


def test_settings_refuse_non_positive_counts():
    from dataclasses import replace

    with pytest.raises(ValueError, match="`epochs` must be a positive integer, got 0"):
        replace(adjoint.MODES["quick"], epochs=0)


# The claims on constructed values: each can fail.


def _values(acc: dict[str, float] | None = None, errors: dict[str, float] | None = None) -> Values:
    """One seed's values: test accuracies per run, gradient errors of backprop's run."""
    acc = {"backprop": 0.80, "adjoint-1M": 0.77, "adjoint-2M": 0.79, "adjoint-3M": 0.80,
           "adjoint-4M": 0.80, "knot-1M": 0.79, **(acc or {})}  # fmt: skip
    errors = {"adjoint-1M": 0.6, "adjoint-4M": 0.2, "knot-1M": 0.4, "knot-4M": 0.13,
              "checkpoint-1M": 0.0, **(errors or {})}  # fmt: skip
    table: dict[str, dict[str, float | None]] = {k: {"test_accuracy": v} for k, v in acc.items()}
    table["backprop"].update(
        {adjoint.GRAD_ERROR.key(method=k, part=ALL): v for k, v in errors.items()}
    )
    trained = adjoint.GRAD_ERROR_TRAINED.key(method="checkpoint-1M", part=ALL)
    table["backprop"][trained] = errors["checkpoint-1M"]
    return Values(table, "seed 0")


def _statuses(values: Values) -> dict[str, str]:
    return {c.key: c.check([values]).status for c in adjoint.CLAIMS}


def test_claims_hold_and_pass_on_the_expected_values():
    statuses = _statuses(_values())
    assert statuses == {
        "adjoint_m_below_backprop": "held",
        "adjoint_3m_reaches_backprop": "held",
        "adjoint_4m_reaches_backprop": "held",
        "checkpoint_is_backprop": "passed",
        "adjoint_error_falls_with_nt": "passed",
        "knots_lower_adjoint_error": "passed",
        "knot_adjoint_error_is_first_order": "passed",
    }
    kinds = {c.key: c.kind for c in adjoint.CLAIMS}
    assert [k for k, v in kinds.items() if v == "paper"] == [
        "adjoint_m_below_backprop", "adjoint_3m_reaches_backprop", "adjoint_4m_reaches_backprop",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("key", "values", "status"),
    [
        ("adjoint_m_below_backprop", _values(acc={"adjoint-1M": 0.795}), "not held"),
        ("adjoint_3m_reaches_backprop", _values(acc={"adjoint-3M": 0.785}), "not held"),
        ("adjoint_4m_reaches_backprop", _values(acc={"adjoint-4M": 0.70}), "not held"),
        ("checkpoint_is_backprop", _values(errors={"checkpoint-1M": 1e-3}), "failed"),
        ("adjoint_error_falls_with_nt", _values(errors={"adjoint-4M": 0.4}), "failed"),
        ("knots_lower_adjoint_error", _values(errors={"knot-1M": 0.59}), "failed"),
        ("knot_adjoint_error_is_first_order", _values(errors={"knot-1M": 1e-6}), "failed"),
        ("knot_adjoint_error_is_first_order", _values(errors={"knot-4M": 0.3}), "failed"),
    ],
)
def test_each_claim_can_fail(key: str, values: Values, status: str):
    assert _statuses(values)[key] == status


def test_checkpoint_check_fails_where_the_trained_error_is_missing():
    """A non-finite error after training (read as NaN) fails the check, though the error
    at initialisation is exact."""
    table = {run: dict(metrics) for run, metrics in _values().table.items()}
    table["backprop"][adjoint.GRAD_ERROR_TRAINED.key(method="checkpoint-1M", part=ALL)] = None
    assert _statuses(Values(table, "seed 0"))["checkpoint_is_backprop"] == "failed"


def test_accuracy_claims_are_paired_over_seeds():
    """The adjoint at M 3 points below backprop on two seeds, 1 above on the third:
    held on 2 of 3 seeds and on the mean of the paired differences; below on one seed
    only: mixed."""
    claim = next(c for c in adjoint.CLAIMS if c.key == "adjoint_m_below_backprop")

    def seeds(*pairs: tuple[float, float]) -> list[Values]:
        return [_values(acc={"backprop": b, "adjoint-1M": a}) for b, a in pairs]

    verdict = claim.check(seeds((0.80, 0.77), (0.70, 0.67), (0.75, 0.76)))
    assert verdict.ours.mean == pytest.approx(-0.05 / 3)
    assert verdict.held_on == (True, True, False)
    assert verdict.words == "held on 2 of 3 seeds"
    verdict = claim.check(seeds((0.80, 0.77), (0.70, 0.71), (0.75, 0.76)))
    assert verdict.words == "mixed: held on 1 of 3 seeds, not on the mean"


@pytest.mark.parametrize(("mode", "data"), [("standard", "fashion-mnist"), ("full", "cifar10")])
def test_missing_data_fails_before_training(tmp_path: Path, mode: str, data: str) -> None:
    options = RunOptions(out=tmp_path / "out", mode=mode, data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=f"no {data} data"):
        run_experiment("contnet-adjoint", options, log=lambda _: None)
    assert not (tmp_path / "out" / "results.json").exists()


def test_every_claim_has_its_details_in_the_text():
    details = Prose.of(adjoint.TEMPLATE.text).details  # every claim's details are text
    assert set(details) == {claim.key for claim in adjoint.CLAIMS}


# A quick run: the structure of what it writes, and the numbers the claims read.


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("contnet-adjoint")
    lines: list[str] = []
    summary = run_experiment(
        "contnet-adjoint",
        RunOptions(out=out, quick=True, device="cpu", progress=False),
        log=lines.append,
    )
    assert any("report in" in line for line in lines)
    return out, summary


@pytest.mark.slow
def test_quick_run_files(quick_run: tuple[Path, dict[str, Any]]):
    out, summary = quick_run
    assert (out / "adjoint.png").read_bytes()[:8] == PNG
    on_disk = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert on_disk == json.loads(json.dumps(summary))
    assert on_disk["experiment"] == "contnet-adjoint" and on_disk["quick"] is True
    assert list(on_disk["metrics"]) == [m.key for m in TRAINED]
    for key, metrics in on_disk["metrics"].items():
        accuracy = metrics["test_accuracy"]["mean"]
        assert 0.0 <= accuracy <= 1.0, key
        assert math.isfinite(metrics["train_loss"]["mean"]), key
        assert metrics["n_steps"]["mean"] == BY_STEPS[key]
    backprop = {k: v["mean"] for k, v in on_disk["metrics"]["backprop"].items()}
    for method in COMPARED:
        for prefix in ("grad_error", "grad_error_trained"):
            for part in ("", "/block"):
                assert math.isfinite(backprop[f"{prefix}@{method.key}{part}"])
    assert backprop["grad_error@checkpoint-1M"] < 1e-5
    assert backprop["grad_error@knot-1M"] < backprop["grad_error@adjoint-1M"]
    claims = on_disk["claims"]
    assert [claims[k]["kind"] for k in claims].count("paper") == 3
    assert claims["checkpoint_is_backprop"]["status"] == "passed"
    assert "holds below 1e-05: the solve" in claims["checkpoint_is_backprop"]["detail"]
    report = (out / "report.md").read_text(encoding="utf-8")
    for heading in ("## Claims of the paper", "## Checks of our code",
                    "## Test accuracy per gradient method",
                    "## Gradients against backprop's at the same N_t"):  # fmt: skip
        assert heading in report
    assert "![gradient error against N_t](adjoint.png)" in report


BY_STEPS = {m.key: m.n_steps(adjoint.MODES["quick"].pieces) for m in TRAINED}
