"""The rows of ``odebench perf solvers``'s document: typed while measured, the same
JSON objects as before when written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from odebench.perf import ContnetConfig, format_contnet_report, format_report, run_contnet
from odebench.perf._document import (
    CompiledRow,
    Document,
    GradientRow,
    MemoryRow,
    ResultRow,
    StiffRow,
    figure_rows,
)
from odebench.perf._memory import MARK, Peak

PUBLISHED = Path(__file__).resolve().parents[2] / "docs" / "results" / "perf-solvers"
PUBLISHED_SECTIONS = ("problems", "evaluations", "results", "ratios", "memory", "gradients")


@pytest.fixture(scope="module")
def published() -> dict:
    return json.loads((PUBLISHED / "solvers.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("section", PUBLISHED_SECTIONS)
def test_every_published_row_reads_back_and_writes_the_same_object(published, section):
    rows = published[section]
    assert rows
    written = Document.from_json(published).to_json()[section]
    assert written == rows
    assert all(list(a) == list(b) for a, b in zip(written, rows))  # the keys' order too


def test_the_published_document_still_reads_as_a_report(published):
    text = format_report(published)
    assert "Speed (medians)" in text and "Peak memory" in text and "Gradient error" in text


# The keys of the rows that the published document has none of, as the benchmark
# wrote them before its rows were typed.
@pytest.mark.parametrize(
    ("row", "keys"),
    [
        (
            CompiledRow("linear", "rk4x40", "forward", 1.0, 0.5, 0.5, 3.0, 0.0, None, None),
            "problem method mode eager_time_s compiled_time_s ratio first_call_s "
            "y1_max_abs_diff grad_rel_diff note",
        ),
        (
            StiffRow(
                "vdp_stiff",
                "kvaerno5@1e-06",
                "kvaerno5",
                1e-6,
                1e-6,
                None,
                "odecore",
                "error",
                1e-7,
                "max abs error at t1",
                None,
            ),
            "problem method solver rtol atol max_steps library figure value unit note",
        ),
    ],
)
def test_rows_without_a_published_example_write_the_keys_of_the_schema(row, keys):
    assert list(row.to_json()) == keys.split()


@pytest.mark.parametrize("value", [math.nan, math.inf, None, True])
def test_a_figure_that_is_not_a_finite_number_is_null_and_says_why(value):
    row = ResultRow("mlp", "rk4x40", "odecore", "nfe_forward", value, "evaluations")
    assert row.value is None and row.note == "not measured"
    failed = MemoryRow(
        "mlp", "rk4x10", 10, "odecore", "adjoint", "peak_rss_mib", value, "MiB", "failed: boom"
    )
    assert failed.to_json()["value"] is None and failed.note == "failed: boom"


def test_a_count_is_written_as_a_float():
    row = ResultRow("mlp", "rk4x40", "odecore", "nfe_forward", 160, "evaluations")
    assert row.to_json()["value"] == 160.0 and isinstance(row.value, float)


def test_figure_rows_put_the_key_first_and_the_unit_of_each_figure():
    units = {"grad_abs_error": "abs", "time_s": "s"}
    key = ("conv_relu", "dopri5@1e-06", "odecore", "adjoint")
    rows = figure_rows(
        GradientRow, key, {"grad_abs_error": (1e-4, None), "time_s": (0.5, None)}, units
    )
    assert rows == [
        GradientRow(*key, "grad_abs_error", 1e-4, "abs"),
        GradientRow(*key, "time_s", 0.5, "s"),
    ]
    missing = figure_rows(GradientRow, key, "no such mode", units)
    assert [(r.value, r.note, r.supported) for r in missing] == [(None, "no such mode", False)] * 2


@pytest.mark.parametrize(
    "peak", [Peak(1.0, 2.5, 1.5, 40, 40, "VmHWM after clear_refs"), Peak(error="SolverError: boom")]
)
def test_a_memory_child_line_reads_back(peak):
    line = peak.line()
    assert line.startswith(MARK)
    assert Peak(**json.loads(line[len(MARK) :])) == peak


@pytest.mark.parametrize(
    ("config", "field", "value"),
    [
        ("SolversConfig", "repeats", 2.5),
        ("SolversConfig", "repeats", True),
        ("SolversConfig", "threads", 0),
        ("ContnetConfig", "repeats", True),
        ("ContnetConfig", "batch", 1.5),
        ("ContnetConfig", "n_steps", 0),
    ],
)
def test_benchmark_configs_refuse_counts_that_are_not_positive_integers(config, field, value):
    """A bool or a float is not a count: each is refused, naming the field."""
    import odebench.perf as perf

    with pytest.raises(ValueError, match=rf"`{field}` must be a positive integer, got {value!r}"):
        getattr(perf, config)(**{field: value})


def test_a_quick_run_with_repeats_is_not_said_to_be_one_run():
    from odebench.perf._solvers import SolversConfig, _general_notes

    first = _general_notes(SolversConfig(quick=True, repeats=3))[0]
    assert "one run" not in first and first.endswith("(quick mode: no warm-up).")


def test_the_reports_speed_line_shows_the_documents_values(published):
    """The declared speed table reads each figure of its problem, method and library."""
    key = ("mlp", "dopri5@1e-06", "odecore")
    values = {
        r["figure"]: r["value"]
        for r in published["results"]
        if (r["problem"], r["method"], r["library"]) == key
    }
    lines = format_report(published).splitlines()
    line = next(x for x in lines if x.split()[:3] == list(key)).split()
    ms = format(values["forward_time_s"] * 1e3, ".3g")
    assert line[3:8] == [
        ms,
        f"{values['nfe_forward']:.0f}",
        f"{values['forward_overhead']:.2f}",
        f"{values['forward_cost_per_eval_us']:.1f}",
        f"{values['error']:.1e}",
    ]
    # a library without a figure shows an en dash in its cell
    peer = next(x for x in lines if x.split()[:1] == ["torchode"]).split()
    assert "–" in peer and "-" not in peer


def test_a_ratio_far_below_one_is_not_shown_as_zero(published):
    # torchdyn's rk4 is first order on the conv fields: odecore's error there is 0.0022
    # times its, which two decimals wrote as 0.00, an error of zero.
    key = ["conv_relu", "rk4x100", "torchdyn"]
    (value,) = [r["value"] for r in published["ratios"] if [r["problem"], r["method"],
                r["peer"]] == key and r["figure"] == "error"]  # fmt: skip
    assert 0 < value < 0.005
    lines = format_report(published).splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("Ratios odecore / peer"))
    line = next(x for x in lines[start:] if x.split()[:3] == key)
    assert line.split()[5] == format(value, ".3g")  # fwd, NFE, error


def test_no_ratio_of_times_against_a_run_whose_gradient_is_not_finite():
    # The run's time stands in results beside its note, and the failure is listed; a
    # ratio of it said odecore was faster than a run that gave no gradient.
    from odebench.perf._solvers import _ratio_rows

    results = [
        ResultRow("vdp", "rk4x100", "odecore", "adjoint_time_s", 0.2, "s"),
        ResultRow("vdp", "rk4x100", "torchdiffeq", "adjoint_time_s", 0.1, "s",
                  "the gradient holds NaN or inf"),
    ]  # fmt: skip
    (row,) = [r for r in _ratio_rows(results, ["torchdiffeq"]) if r.figure == "adjoint_time_s"]
    assert row.value is None and "NaN" in (row.note or "")


def test_no_ratio_of_a_cost_per_evaluation_below_zero():
    # forward_cost_per_eval_us subtracts NFE x one evaluation from the time: below the
    # noise it comes out negative, and -5 / -10 read 0.5, odecore the cheaper.
    from odebench.perf._solvers import _ratio_rows

    figure = "forward_cost_per_eval_us"
    results = [
        ResultRow("linear", "rk4x100", "odecore", figure, -5.0, "us"),
        ResultRow("linear", "rk4x100", "torchdiffeq", figure, -10.0, "us"),
    ]
    (row,) = [r for r in _ratio_rows(results, ["torchdiffeq"]) if r.figure == figure]
    assert row.value is None and "negative" in (row.note or "")


def test_a_run_that_failed_after_others_stood_is_listed_under_failed_runs():
    # Its figures are the medians of the runs before it, its note says that a later
    # one failed; the report showed the numbers and no failure.
    rows = [
        ResultRow("vdp", "dopri5@1e-06", "torchdyn", "adjoint_time_s", 0.5, "s",
                  "a later run failed: EvaluationLimitError: stopped after 20,000"),
    ]  # fmt: skip
    env = {"date": "", "torch": "", "threads": 1, "cpu_count": 1, "machine": "", "python": ""}
    doc = Document({**env, "libraries": {"torchdyn": ""}}, results=rows).to_json()
    assert "results: vdp dopri5@1e-06 torchdyn adjoint: a later run failed" in format_report(doc)


def test_the_contnet_report_tables_each_models_figures():
    figures = {"train_step_time_s": 0.0185, "forward_time_s": 0.00684,
               "saved_for_backward_mib": 2.284, "parameters": 7726.0}  # fmt: skip
    doc = {
        "environment": {"date": "d", "torch": "t", "threads": 1, "batch": 8,
                        "channels": [4, 8, 8], "n_steps": 2, "repeats": 2},
        "results": [{"model": m, "figure": f, "value": v * k, "unit": ""}
                    for k, m in ((1, "net"), (2, "export")) for f, v in figures.items()],
        "ratios": [], "checks": {"max_abs_output_difference_eval": 0.0}, "notes": [],
    }  # fmt: skip
    lines = format_contnet_report(doc).splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:7] if line[:1].isalpha()}
    assert rows["net"] == ["18.5", "6.8", "2.28", "7726"]
    assert rows["export"] == ["37.0", "13.7", "4.57", "15452"]


def test_the_contnet_benchmark_leaves_the_callers_threads_and_random_state():
    threads = torch.get_num_threads()
    state = torch.random.get_rng_state()
    config = ContnetConfig(quick=True, threads=threads + 1, repeats=1, channels=(2, 2, 2))
    doc = run_contnet(config, log=lambda _: None)
    assert doc["environment"]["threads"] == threads + 1  # it ran with its own
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.random.get_rng_state(), state)
