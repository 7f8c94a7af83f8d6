"""Declared table columns: metrics of the row's run or of a run named after it, joined
cells, and per-seed values paired within each seed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from odebench.experiments import (
    Col,
    Metric,
    Result,
    Row,
    RunOptions,
    Settings,
    Setup,
    Stat,
    Table,
    Values,
)

MSE = Metric("mse", spec=".2f")
NFE = Metric("nfe", over=("end",), spec=".0f")


def _result(metrics: dict[str, dict[str, list[float | None]]]) -> Result[Settings]:
    """A finished experiment over two seeds with these per-seed values."""
    setup = Setup("t", "quick", Settings(seeds=2), RunOptions(Path("out")), (0, 1), print)
    stats = {run: {m: Stat.of(v) for m, v in ms.items()} for run, ms in metrics.items()}
    return Result(setup, "", "", 0.0, stats, {}, ())


RESULT = _result({
    "2d": {"nfe@first": [20.0, 22.0], "nfe@last": [30.0, 34.0]},
    "2d/node": {"mse": [0.5, 0.3]},
    "2d/resnet": {"mse": [1.0, 0.3]},
})  # fmt: skip


def test_a_column_names_its_run_after_the_rows() -> None:
    table = Table("task", [Row("2-D", "2d")], [
        Col("NODE", MSE, run="{run}/node"), Col("ResNet", MSE, run="{run}/resnet"),
        Col("fixed", MSE, run="2d/node"),
    ])  # fmt: skip
    assert table.render(RESULT)[1] == ["2-D", "0.40 ± 0.14", "0.65 ± 0.49", "0.40 ± 0.14"]


def test_a_column_says_which_metrics_it_reads() -> None:
    """What a declaration's test checks against the runs: the run named after the row's,
    each part of a joined column, nothing where the row has text or the cell is computed."""
    row = Row("2-D", "2d")
    assert Col("NODE", MSE, run="{run}/node").refs(row) == [MSE.of("2d/node")]
    joined = Col.joined("NFE", Col("", NFE, {"end": "last"}), Col("", MSE, run="{run}/resnet"))
    assert joined.refs(row) == [NFE.of("2d", end="last"), MSE.of("2d/resnet")]
    assert Col("paper").refs(row) == []
    assert Col("NODE", MSE).refs(Row("2-D", "2d", text={"NODE": "n/a"})) == []
    assert Col.per_seed("x", lambda v, row: 0.0).refs(row) == []


def test_a_joined_column_joins_its_parts_cells() -> None:
    first, last = (Col("", NFE, {"end": end}) for end in ("first", "last"))
    col = Col.joined("NFE first → last", first, last, sep=" → ")
    assert col.render(RESULT, Row("2-D", "2d")) == "21 ± 1 → 32 ± 3"
    both = Col.joined(
        "NODE / ResNet", Col("", MSE, run="{run}/node"), Col("", MSE, run="{run}/resnet")
    )
    assert both.render(RESULT, Row("2-D", "2d")) == "0.40 ± 0.14 / 0.65 ± 0.49"
    bare = Col.joined("MSE", MSE)  # a metric: of the row's own run
    assert bare.render(RESULT, Row("NODE", "2d/node")) == "0.40 ± 0.14"
    # The row's text under the header still wins.
    assert col.render(RESULT, Row("2-D", "2d", text={"NFE first → last": "–"})) == "–"


def test_a_per_seed_column_pairs_the_values_of_each_seed() -> None:
    """The ratios 0.5 and 1 of the seeds: their mean and spread, not the ratio of the
    means (0.62)."""

    def ratio(v: Values, row: Row) -> float:
        return v[MSE.of(f"{row.run}/node")] / v[MSE.of(f"{row.run}/resnet")]

    col = Col.per_seed("NODE / ResNet", ratio, ".3f", unit="×")
    assert col.render(RESULT, Row("2-D", "2d")) == "0.750 ± 0.354×"
    nan = Col.per_seed("none", lambda v, row: math.nan)
    assert nan.render(RESULT, Row("2-D", "2d")) == "–"


def test_a_column_without_spread_shows_the_mean_alone() -> None:
    """A metric, joined columns' metrics and a per-seed column: the mean of the seeds
    without its ± (a missing one is still a dash)."""
    row = Row("2-D", "2d")
    assert Col("NODE", MSE, run="{run}/node", spread=False).render(RESULT, row) == "0.40"
    ends = (Col("", NFE, {"end": end}, spread=end == "last") for end in ("first", "last"))
    assert Col.joined("NFE", *ends, sep=" → ").render(RESULT, row) == "21 → 32 ± 3"
    assert Col("MSE", MSE, spread=False).render(RESULT, Row("none", "2d")) == "–"

    def ratio(v: Values, row: Row) -> float:
        return v[MSE.of(f"{row.run}/node")] / v[MSE.of(f"{row.run}/resnet")]

    mean = Col.per_seed("NODE / ResNet", ratio, ".3f", unit="×", spread=False)
    assert mean.render(RESULT, row) == "0.750×"  # the mean of the ratios, not 0.615


class _Measured:
    """A source that is no experiment's result: one value per metric key, as perf has."""

    def __init__(self, values: dict[str, float]) -> None:
        self.values = values

    def stat(self, ref):
        return Stat.of([self.values.get(ref.key)])


def test_a_table_labels_rows_by_several_cells_and_reads_any_source() -> None:
    time = Metric("time", over=("problem", "method"), spec=".3g", scale=1e3)
    rows = [Row((p, m), at={"problem": p, "method": m}) for p, m in (("vdp", "rk4"), ("vdp", "x"))]
    table = Table(("problem", "method"), rows, [Col("ms", time)])
    source = _Measured({"time@vdp@rk4": 0.01234})
    assert table.render(source) == [["problem", "method", "ms"], ["vdp", "rk4", "12.3"],
                                    ["vdp", "x", "–"]]  # fmt: skip
    assert table.text(source).splitlines()[2:] == ["vdp      rk4     12.3", "vdp      x          –"]


def test_a_g_format_writes_whole_numbers_where_it_would_write_an_exponent() -> None:
    stat = Stat.of([12.3456])
    assert stat.cell(".3g", 1e3) == "12346"  # not 1.23e+04
    assert Stat.of([0.0123456]).cell(".3g", 1e3) == "12.3"
    assert Stat.of([1.5e-7]).cell(".2g") == "1.5e-07"  # small numbers keep theirs
    assert Stat.of([12345.0]).cell(".1e") == "1.2e+04"  # as "e" asks
    # the sign, fill and width of the spec are kept
    assert [Stat.of([v]).cell(spec) for v, spec in [(12345.0, "+.3g"), (-12345.0, ">8.2g")]] == [
        "+12345",
        "  -12345",
    ]
    # a diverged loss kept its exponent, not the 31 digits of a double
    # ("1000000000000000019884624838656")
    assert Stat.of([1e30]).cell(".3g") == "1e+30"


def test_a_metric_refuses_a_coordinate_called_name() -> None:
    with pytest.raises(ValueError, match="no coordinate may be called `name`"):
        Metric("eval_time_s", over=("name",))
