"""The command line: a smoke test of ``odebench perf solvers --quick``, and its errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import odebench
import pytest
from matplotlib.image import imread
from odebench import main
from odebench.perf import solver_panels
from odebench.perf._libraries import GRADIENT_MODES
from odebench.perf._problems import PROBLEMS
from odebench.perf._solvers import (
    FIGURE_UNITS,
    MODE_FIGURES,
    QUICK_METHODS,
    RATIO_FIGURES,
    command_line,
)
from subprocess_env import odebench_env

ROW_SECTIONS = ("results", "ratios", "memory", "gradients")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """``python -m odebench perf solvers --quick --json PATH --plot PNG``, run once for
    the module; returns the process, the JSON document and the PNG's path.

    One torch thread, so that another busy process on a two-core machine cannot stall
    the run; the timings themselves are never asserted on.
    """
    path = tmp_path_factory.mktemp("bench") / "out" / "solvers.json"
    png = path.parent / "figures" / "solvers.png"
    cmd = [
        sys.executable, "-m", "odebench", "perf", "solvers", "--quick", "--threads", "1",
        "--json", str(path), "--plot", str(png),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=odebench_env(None))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(path.read_text(encoding="utf-8")), png


@pytest.mark.slow
def test_quick_run_prints_the_tables(quick_run):
    proc, _, _ = quick_run
    for heading in (
        "Problems", "Speed", "Where the forward time goes", "Ratios odecore / peer",
        "Peak memory", "Gradient error",
    ):  # fmt: skip
        assert heading in proc.stdout
    assert "mlp" in proc.stdout and "torchdiffeq" in proc.stdout
    assert "wrote" in proc.stderr  # progress goes to stderr, tables to stdout


@pytest.mark.slow
def test_quick_run_writes_the_documented_structure(quick_run):
    _, doc, _ = quick_run
    assert set(doc) == {
        "environment", "problems", "evaluations", "results", "ratios", "compiled",
        "memory", "gradients", "stiff", "notes",
    }  # fmt: skip
    assert doc["compiled"] == []  # filled by --compile alone
    env = doc["environment"]
    for key in ("date", "torch", "threads", "libraries", "unavailable", "python", "quick"):
        assert key in env
    assert env["threads"] == 1 and env["quick"] is True
    assert env["command"].startswith("python -m odebench perf solvers --quick --threads 1")
    assert "odecore" in env["libraries"] and "torchdiffeq" in env["libraries"]
    assert [p["name"] for p in doc["problems"]] == list(PROBLEMS)
    assert all(p["eval_time_s"] > 0 and p["eval_vjp_time_s"] > 0 for p in doc["problems"])
    assert doc["notes"] and all(isinstance(n, str) and n for n in doc["notes"])


@pytest.mark.slow
def test_overheads_divide_by_the_evaluation_time_of_their_own_cell(quick_run):
    _, doc, _ = quick_run
    cells = {(e["problem"], e["method"], e["mode"]): e for e in doc["evaluations"]}
    rows = {
        (r["problem"], r["method"], r["library"], r["figure"]): r["value"] for r in doc["results"]
    }
    checked = 0
    for (problem, method, mode), e in cells.items():
        assert e["blocks"] >= 1
        if mode != "forward":
            assert e["eval_vjp_time_s"] > 0 and e["chained_eval_time_s"] is None
            continue
        assert e["eval_time_s"] > 0 and e["eval_vjp_time_s"] is None
        assert e["chained_eval_time_s"] > 0
        for library in doc["environment"]["libraries"]:
            t = rows.get((problem, method, library, "forward_time_s"))
            nfe = rows.get((problem, method, library, "nfe_forward"))
            overhead = rows.get((problem, method, library, "forward_overhead"))
            if t is None or nfe is None or overhead is None:
                continue
            assert overhead == pytest.approx(t / (nfe * e["eval_time_s"]))
            solver = rows.get((problem, method, library, "forward_solver_time_s"))
            solver_overhead = rows.get((problem, method, library, "forward_solver_overhead"))
            assert solver_overhead == pytest.approx(solver / (nfe * e["eval_time_s"]))
            checked += 1
    assert checked >= len(PROBLEMS)


@pytest.mark.slow
def test_every_figure_is_a_finite_number_or_null_with_a_note(quick_run):
    _, doc, _ = quick_run
    for section in ROW_SECTIONS:
        assert doc[section], section
        for row in doc[section]:
            value = row["value"]
            if value is None:
                assert isinstance(row["note"], str) and row["note"], row
            else:
                assert isinstance(value, (int, float)) and not isinstance(value, bool), row
                assert math.isfinite(value), row


@pytest.mark.slow
def test_results_cover_every_problem_method_library_and_figure(quick_run):
    _, doc, _ = quick_run
    libraries = list(doc["environment"]["libraries"])
    seen = {(r["problem"], r["method"], r["library"], r["figure"]) for r in doc["results"]}
    expected = {
        (p, m.label, lib, f)
        for p in PROBLEMS
        for m in QUICK_METHODS
        for lib in libraries
        for mode in ("forward", *GRADIENT_MODES)
        for f in MODE_FIGURES[mode]
    }
    assert seen == expected
    assert len(seen) == len(doc["results"])  # one row each
    assert all(r["unit"] == FIGURE_UNITS[r["figure"]] for r in doc["results"])
    # what must have been measured: odecore's forward solve and backprop of the MLP
    values = {(r["problem"], r["method"], r["library"], r["figure"]): r for r in doc["results"]}
    for method in QUICK_METHODS:
        for figure in (
            "forward_time_s", "nfe_forward", "error", "forward_solver_time_s", "backprop_time_s",
        ):  # fmt: skip
            assert values[("mlp", method.label, "odecore", figure)]["value"] is not None


@pytest.mark.slow
def test_ratios_compare_odecore_with_each_peer(quick_run):
    _, doc, _ = quick_run
    peers = [name for name in doc["environment"]["libraries"] if name != "odecore"]
    keys = {(r["problem"], r["method"], r["peer"], r["figure"]) for r in doc["ratios"]}
    assert keys == {
        (p, m.label, peer, f) for p in PROBLEMS for m in QUICK_METHODS for peer in peers
        for f in RATIO_FIGURES
    }  # fmt: skip
    nfe = [r for r in doc["ratios"] if r["figure"] == "nfe_forward" and r["problem"] == "mlp"]
    measured = {(r["method"], r["library"]): r["value"] for r in doc["results"]
                if r["figure"] == "nfe_forward" and r["problem"] == "mlp"}  # fmt: skip
    for r in nfe:
        if measured[(r["method"], r["peer"])] is None:  # a method the peer lacks (torchode: rk4)
            assert r["value"] is None
        else:
            assert r["value"] is not None and r["value"] > 0
    assert all(r["value"] for r in nfe if r["peer"] == "torchdiffeq")


@pytest.mark.slow
def test_memory_rows_and_backprop_growth(quick_run):
    _, doc, _ = quick_run
    rows = {
        (r["library"], r["gradient"], r["n_steps"], r["figure"]): r["value"] for r in doc["memory"]
    }
    assert {r["n_steps"] for r in doc["memory"]} == {10, 100, None}
    for gradient in ("backprop", "adjoint"):
        assert rows[("odecore", gradient, 10, "peak_delta_mib")] is not None
        assert rows[("odecore", gradient, 100, "nfe_forward")] == 400
    # Backprop keeps every step's activations: ten times the steps, clearly more memory.
    assert (
        rows[("odecore", "backprop", 100, "peak_delta_mib")]
        > rows[("odecore", "backprop", 10, "peak_delta_mib")]
    )


@pytest.mark.slow
def test_gradient_check_rows(quick_run):
    _, doc, _ = quick_run
    problems = {r["problem"] for r in doc["gradients"]}
    assert problems == {"conv_relu", "conv_softplus"}
    figures = {
        (r["problem"], r["library"], r["gradient"], r["figure"]): r["value"]
        for r in doc["gradients"]
    }
    for problem in problems:
        assert figures[(problem, "finite differences", "-", "fd_resolution")] is not None
        assert figures[(problem, "odecore", "backprop", "grad_abs_error")] is not None
        assert figures[(problem, "odecore", "adjoint", "nfe_backward")] > 0


def test_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["perf", "solvers", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in ("--quick", "--json", "--threads", "--repeats"):
        assert option in out


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"odebench {odebench.__version__}"


@pytest.mark.parametrize("argv", [[], ["perf"]])
def test_missing_command_prints_help(argv, capsys):
    assert main(argv) == 2
    assert "usage: odebench" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["perf", "solvers", "--threads", "0"], "expected a positive integer, got 0"),
        (["perf", "solvers", "--repeats", "two"], "expected a positive integer, got 'two'"),
        (["perf", "solvers", "--problems", "mlp,spiral"], "Unknown problems ['spiral']"),
        (["perf", "solvers", "--problems", "vdp,mlp,vdp"], "names ['vdp'] more than once"),
        (["perf", "solvers", "--libraries", "jax"], "--libraries: unknown ['jax']"),
        (["perf", "gpus"], "invalid choice: 'gpus'"),
    ],
)
def test_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_output_path_that_is_a_directory(tmp_path, capsys, flag):
    with pytest.raises(SystemExit) as exc:  # refused before the run, not after it
        main(["perf", "solvers", flag, str(tmp_path)])
    assert exc.value.code == 2
    assert f"{flag} {tmp_path}: is a directory" in capsys.readouterr().err


def test_module_entry_point_help():
    proc = subprocess.run(
        [sys.executable, "-m", "odebench", "--help"],
        capture_output=True,
        text=True,
        env=odebench_env(None),
    )
    assert proc.returncode == 0
    assert "perf" in proc.stdout


@pytest.mark.slow
def test_perf_contnet_quick_writes_json(tmp_path):
    path = tmp_path / "contnet.json"
    cmd = [
        sys.executable, "-m", "odebench", "perf", "contnet", "--quick", "--threads", "1",
        "--repeats", "1", "--batch", "2", "--json", str(path),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=odebench_env(None))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert set(doc) == {"environment", "results", "ratios", "checks", "notes"}
    figures = {(r["model"], r["figure"]) for r in doc["results"]}
    for model in ("ContinuousNet[euler, 2]", "ResNet export", "ContinuousNet[rk4, 2]"):
        for figure in ("train_step_time_s", "forward_time_s", "saved_for_backward_mib"):
            assert (model, figure) in figures
    assert all(math.isfinite(r["value"]) and r["value"] > 0 for r in doc["ratios"])
    # The export computes what the continuous form computes, and keeps as much for backward.
    assert doc["checks"]["max_abs_output_difference_eval"] < 1e-5
    saved = [r for r in doc["ratios"] if r["figure"] == "saved_for_backward_mib"]
    assert saved[0]["value"] == pytest.approx(1.0, rel=1e-6)
    assert "Ratios:" in proc.stdout


def test_perf_contnet_rejects_bad_numbers(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["perf", "contnet", "--n-steps", "0"])
    assert exc.value.code == 2
    assert "expected a positive integer" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_run_draws_the_figure_of_its_json(quick_run):
    proc, doc, png = quick_run
    assert f"wrote {png}" in proc.stderr
    assert imread(png).shape[:2] == (935, 1320)  # 12 x 8.5 inches at 110 dpi
    forward, backprop, memory, gradients = solver_panels(doc)
    assert forward.groups == list(PROBLEMS) and "dopri5 at 0.001" in forward.title
    assert set(forward.series) == set(doc["environment"]["libraries"])
    assert all(v is not None for v in forward.series["odecore"] + backprop.series["odecore"])
    assert [n for n, _ in memory.series["odecore, adjoint"]] == [10.0, 100.0]
    assert [label for label, _, _ in gradients.sections] == ["conv_relu", "conv_softplus"]


def test_the_recorded_command_carries_no_path_of_the_machine():
    assert command_line(["/srv/env/lib/odebench/__main__.py", "perf", "solvers", "--quick"]) == (
        "python -m odebench perf solvers --quick"
    )
    assert command_line(["/srv/env/bin/odebench", "perf", "contnet"]) == "odebench perf contnet"
    assert command_line(["/srv/tools/__main__.py"]) == "__main__.py"  # not odebench's own
    assert command_line([]) is None and command_line([""]) is None
