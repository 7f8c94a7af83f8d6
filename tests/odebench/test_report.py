"""The benchmark's text report: the split of the forward overhead factor."""

from __future__ import annotations

from odebench.perf._document import Document, EvaluationRow, ResultRow
from odebench.perf._report import _forward_split


def _row(library, figure, value):
    return ResultRow("mlp", "dopri5@1e-06", library, figure, value, "")


def _evaluation(mode, eval_s, chained_s):
    return EvaluationRow("mlp", "dopri5@1e-06", mode, eval_s, None, chained_s, 1)


def test_the_forward_split_adds_up_to_the_overhead_factor():
    doc = Document(
        evaluations=[
            _evaluation("forward", 0.5e-3, 0.51e-3),
            _evaluation("backprop", None, None),
        ],
        results=[
            # 20 evaluations of 0.5 ms: 10 ms of field; 15 ms in all, 3 ms replayed.
            _row("odecore", "forward_overhead", 1.5),
            _row("odecore", "forward_solver_overhead", 0.3),
            _row("odecore", "forward_solver_cost_per_eval_us", 150.0),
            # A library whose replay failed gets no row.
            _row("torchdiffeq", "forward_overhead", 2.0),
            _row("torchdiffeq", "forward_solver_overhead", None),
        ],
    )
    lines = "\n".join(_forward_split(doc)).splitlines()
    (row,) = [line for line in lines if "odecore" in line]
    # ovh 1.50 = floor 1.02 + solver 0.30 + rest 0.18
    assert row.split()[-5:] == ["1.50", "1.02", "0.30", "0.18", "150.0"]
    assert not any("torchdiffeq" in line for line in lines)


def test_a_run_without_replays_has_no_split():
    assert _forward_split(Document(results=[_row("odecore", "forward_overhead", 1.2)])) == []
