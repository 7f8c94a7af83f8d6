"""The figure of a solver benchmark: what each panel reads from the JSON document, and
the ``odebench perf plot`` command."""

from __future__ import annotations

import json

import pytest
from matplotlib.image import imread
from odebench import main
from odebench.perf import Bars, Lines, plot_solvers, solver_panels


def _row(problem, method, library, figure, value, **extra):
    return {
        "problem": problem, "method": method, "library": library, "figure": figure,
        "value": value, "unit": "", "note": None, "supported": value is not None, **extra,
    }  # fmt: skip


def _doc(memory=True, gradients=True):
    """A small document of the benchmark's layout with values that differ everywhere."""
    results = []
    for i, method in enumerate(("dopri5@0.001", "dopri5@1e-06", "rk4x100")):
        for j, problem in enumerate(("mlp", "vdp")):
            for k, library in enumerate(("odecore", "torchdiffeq")):
                for figure in ("forward_overhead", "backprop_overhead", "nfe_forward"):
                    value = 1.0 + i + 0.1 * j + 0.01 * k + (figure == "backprop_overhead")
                    results.append(_row(problem, method, library, figure, value))
    mem = [
        _row("mlp", f"rk4x{n}", library, "peak_delta_mib", size, n_steps=n, gradient=gradient)
        for n in (100, 10, 1000)  # out of order on purpose
        for library, gradient, size in (
            ("odecore", "backprop", 1.5 * n),
            ("odecore", "adjoint", 0.5),
            ("torchdiffeq", "adjoint", 0.0),  # not above the baseline: no point on a log axis
        )
    ]
    mem.append(
        _row("mlp", "rk4", "odecore", "mib_per_step", 1.5, n_steps=None, gradient="backprop")
    )
    grads = [
        _row(problem, "dopri5@1e-06", library, figure, value, gradient=gradient)
        for problem in ("conv_relu", "conv_softplus")
        for gradient in ("backprop", "adjoint_seminorm")
        for library, value in (
            ("odecore", 1e-7),
            ("torchdiffeq", None),
            ("finite differences", 3.0),
        )
        for figure in ("grad_rel_error", "nfe_backward")
        if library != "finite differences" or figure == "nfe_backward"
    ]
    return {
        "environment": {
            "schema_version": 2, "date": "2026-12-01T12:21:11+00:00", "torch": "2.13.0+cpu",
            "threads": 2, "cpu_count": 2, "quick": False,
            "libraries": {"odecore": "0.1.0", "torchdiffeq": "0.2.5"},
        },
        "problems": [{"name": "mlp"}, {"name": "vdp"}],
        "results": results,
        "memory": mem if memory else [],
        "gradients": grads if gradients else [],
    }  # fmt: skip


def test_overhead_panels_read_the_tightest_dopri5_rows():
    doc = _doc()
    forward, backprop, _, _ = solver_panels(doc)
    assert isinstance(forward, Bars) and forward.title == "Forward solve, dopri5 at 1e-06"
    assert forward.groups == ["mlp", "vdp"] and forward.reference == 1.0
    expected = {
        (r["problem"], r["library"]): r["value"]
        for r in doc["results"]
        if r["method"] == "dopri5@1e-06" and r["figure"] == "backprop_overhead"
    }
    assert backprop.series == {
        lib: [expected[(p, lib)] for p in ("mlp", "vdp")] for lib in ("odecore", "torchdiffeq")
    }
    assert forward.series["odecore"] == pytest.approx([2.0, 2.1])


def test_the_forward_panel_draws_the_field_and_solver_alone_inside_each_bar(tmp_path):
    doc = _doc()
    # The solver's part of each factor; torchdiffeq has none on vdp, and no row at 1e-3
    # is drawn (the panel shows the tightest tolerance).
    for problem, library, value in (
        ("mlp", "odecore", 0.25), ("vdp", "odecore", 0.5), ("mlp", "torchdiffeq", 1.0),
        ("vdp", "torchdiffeq", None),
    ):  # fmt: skip
        doc["results"].append(
            _row(problem, "dopri5@1e-06", library, "forward_solver_overhead", value)
        )
    doc["results"].append(_row("mlp", "dopri5@0.001", "odecore", "forward_solver_overhead", 9.0))
    forward, backprop, _, _ = solver_panels(doc)
    assert forward.inner == {"odecore": [1.25, 1.5], "torchdiffeq": [2.0, None]}
    assert "solver alone" in forward.title
    assert backprop.inner == {} and "solver" not in backprop.title
    assert solver_panels(_doc())[0].inner == {}  # a run without replays draws plain bars
    assert imread(plot_solvers(doc, tmp_path / "solvers.png")).shape[:2] == (935, 1320)


def test_a_cell_without_a_value_leaves_none():
    doc = _doc()
    for r in doc["results"]:
        if (r["method"], r["problem"], r["library"], r["figure"]) == (
            "dopri5@1e-06",
            "vdp",
            "torchdiffeq",
            "forward_overhead",
        ):
            r["value"], r["supported"] = None, False
    forward = solver_panels(doc)[0]
    assert forward.series["torchdiffeq"] == [pytest.approx(2.01), None]


def test_memory_panel_sorts_the_steps_and_drops_what_a_log_axis_cannot_show():
    memory = solver_panels(_doc())[2]
    assert isinstance(memory, Lines) and memory.title.endswith("mlp, rk4")
    assert memory.series == {
        "odecore, backprop": [(10.0, 15.0), (100.0, 150.0), (1000.0, 1500.0)],
        "odecore, adjoint": [(10.0, 0.5), (100.0, 0.5), (1000.0, 0.5)],
    }


def test_gradient_panel_groups_by_problem_and_method():
    gradients = solver_panels(_doc())[3]
    assert gradients.groups == ["backprop", "seminorm", "backprop", "seminorm"]
    assert gradients.sections == [("conv_relu", 0, 1), ("conv_softplus", 2, 3)]
    assert gradients.series == {"odecore": [1e-7] * 4, "torchdiffeq": [None] * 4}


def test_sections_a_run_left_out_are_said_to_be_missing(tmp_path):
    doc = _doc(memory=False, gradients=False)
    _, _, memory, gradients = solver_panels(doc)
    assert memory.empty == "memory not measured in this run" and not memory.series
    assert gradients.empty == "gradients not checked in this run"
    out = plot_solvers(doc, tmp_path / "new" / "solvers.png")
    assert imread(out).shape[:2] == (935, 1320)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([1, 2], "got a list"),
        ({"environment": {}, "results": []}, "no 'problems'"),
        ({"environment": {}, "problems": [], "results": {}}, "must be a list of rows"),
        (
            {"environment": {"libraries": {}}, "problems": [], "results": [{"method": "x"}]},
            "does not have the fields",
        ),
    ],
)
def test_a_document_of_another_kind_is_refused(doc, message):
    with pytest.raises(ValueError, match=message):
        solver_panels(doc)


def test_plot_solvers_refuses_what_is_not_a_document_before_drawing(tmp_path):
    with pytest.raises(ValueError, match="got a list"):
        plot_solvers([1, 2], tmp_path / "solvers.png")
    assert not (tmp_path / "solvers.png").exists()


def test_the_command_draws_next_to_the_json(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_doc()), encoding="utf-8")
    assert main(["perf", "plot", str(path)]) == 0
    assert f"wrote {tmp_path / 'run.png'}" in capsys.readouterr().err
    assert imread(tmp_path / "run.png").shape[:2] == (935, 1320)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read it: No such file"),
        ("{", "not a JSON file"),
        ('{"environment": {}, "results": []}', "not a result of `odebench perf solvers"),
    ],
)
def test_the_command_names_what_is_wrong_with_its_input(tmp_path, capsys, content, message):
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["perf", "plot", str(path), "--out", str(tmp_path / "fig.png")])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "fig.png").exists()
