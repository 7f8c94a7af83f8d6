"""The benchmark's text report: the split of the forward overhead factor."""

from __future__ import annotations

from odebench.perf._report import _forward_split


def _row(library, figure, value):
    return {
        "problem": "mlp", "method": "dopri5@1e-06", "library": library, "figure": figure,
        "value": value, "unit": "", "note": None, "supported": True,
    }  # fmt: skip


def test_the_forward_split_adds_up_to_the_overhead_factor():
    doc = {
        "evaluations": [
            {
                "problem": "mlp",
                "method": "dopri5@1e-06",
                "mode": "forward",
                "eval_time_s": 0.5e-3,
                "chained_eval_time_s": 0.51e-3,
            },
            {
                "problem": "mlp",
                "method": "dopri5@1e-06",
                "mode": "backprop",
                "eval_time_s": None,
                "chained_eval_time_s": None,
            },
        ],
        "results": [
            # 20 evaluations of 0.5 ms: 10 ms of field; 15 ms in all, 3 ms replayed.
            _row("odecore", "forward_overhead", 1.5),
            _row("odecore", "forward_solver_overhead", 0.3),
            _row("odecore", "forward_solver_cost_per_eval_us", 150.0),
            # A library whose replay failed gets no row.
            _row("torchdiffeq", "forward_overhead", 2.0),
            _row("torchdiffeq", "forward_solver_overhead", None),
        ],
    }
    lines = _forward_split(doc)
    (row,) = [line for line in lines if "odecore" in line]
    # ovh 1.50 = floor 1.02 + solver 0.30 + rest 0.18
    assert row.split()[-5:] == ["1.50", "1.02", "0.30", "0.18", "150.0"]
    assert not any("torchdiffeq" in line for line in lines)


def test_a_run_without_replays_has_no_split():
    assert (
        _forward_split({"evaluations": [], "results": [_row("odecore", "forward_overhead", 1.2)]})
        == []
    )
