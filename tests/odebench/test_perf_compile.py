"""``odebench perf solvers --compile``: compiled odecore beside eager odecore.

The compiled solves use dynamo's ``aot_eager`` backend: the same graph capture and
AOTAutograd as inductor, in seconds instead of minutes, and without a C++ compiler.
"""

from __future__ import annotations

import pytest
import torch
from odebench.perf import SolversConfig, format_report, run_solvers
from odebench.perf._libraries import COMPILED, CompiledOdecoreLibrary, Method, discover
from odebench.perf._problems import CountingField, Sizes, make_problem
from odecore import _compiled

pytestmark = pytest.mark.compile


@pytest.fixture(autouse=True)
def _aot_eager(monkeypatch: pytest.MonkeyPatch):
    torch._dynamo.reset()
    _compiled._compiled.cache_clear()
    monkeypatch.setattr(_compiled, "_BACKEND", "aot_eager")
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def doc() -> dict:
    config = SolversConfig(
        quick=True,
        problems=("linear",),
        libraries=("odecore",),
        memory=False,
        gradients=False,
        compile=True,
        threads=1,
    )
    torch._dynamo.reset()
    _compiled._compiled.cache_clear()
    previous = _compiled._BACKEND
    _compiled._BACKEND = "aot_eager"
    try:
        return run_solvers(config)
    finally:
        _compiled._BACKEND = previous


def test_discover_adds_the_compiled_library_after_odecore_only_when_asked():
    names = [lib.name for lib in discover(("odecore",))[0]]
    assert names == ["odecore"]
    names = [lib.name for lib in discover(("odecore",), compiled=True)[0]]
    assert names == ["odecore", COMPILED]
    with pytest.raises(ValueError, match="keep odecore"):
        discover(("torchdiffeq",), compiled=True)


def test_the_compiled_library_takes_what_compiles_and_says_why_not_the_rest():
    lib = CompiledOdecoreLibrary()
    rk4, dopri5 = Method("rk4", n_steps=10), Method("dopri5", rtol=1e-6, atol=1e-6)
    assert lib.unsupported(rk4, "forward") is None
    assert lib.unsupported(rk4, "backprop") is None
    assert lib.unsupported(dopri5, "forward") is None  # one compiled step, the loop eager
    assert lib.unsupported(dopri5, "backprop") is None
    assert "adjoint" in (lib.unsupported(rk4, "adjoint") or "")


def test_the_compiled_solve_counts_the_evaluations_the_eager_one_makes():
    problem = make_problem("vdp", Sizes.quick())
    counter = CountingField(problem.field)
    lib = CompiledOdecoreLibrary()
    with torch.no_grad():
        y1 = lib.solve(
            counter, problem.y0, problem.t0, problem.t1, Method("rk4", n_steps=40), "forward"
        )
    assert counter.nfe == 4 * 40  # the wrapper, not called inside the graph, is advanced
    assert torch.isfinite(y1).all()


def test_compiled_rows_compare_forward_and_backprop_with_eager(doc: dict):
    rows = {(r["method"], r["mode"]): r for r in doc["compiled"]}
    methods = ("dopri5@0.001", "rk4x40")
    assert set(rows) == {(m, mode) for m in methods for mode in ("forward", "backprop")}
    scale = max(1.0, float(make_problem("linear", Sizes.quick()).y0.abs().max()))
    for row in rows.values():
        assert row["note"] is None
        assert row["first_call_s"] > 0
        assert row["ratio"] == pytest.approx(row["compiled_time_s"] / row["eager_time_s"])
        assert row["y1_max_abs_diff"] <= 1e-5 * scale
    for method in methods:
        assert rows[(method, "backprop")]["grad_rel_diff"] <= 1e-5


def test_the_compiled_solves_take_the_eager_steps(doc: dict):
    # float32: an error ratio near 1 may tip the other way in the fused kernels, so an
    # adaptive solve may take a step more or less; the fixed grid takes the same steps.
    nfe = {
        (r["library"], r["method"]): r["value"]
        for r in doc["results"]
        if r["figure"] == "nfe_forward" and r["library"] in ("odecore", COMPILED)
    }
    assert nfe["odecore", "rk4x40"] == nfe[COMPILED, "rk4x40"] == 160
    assert abs(nfe["odecore", "dopri5@0.001"] - nfe[COMPILED, "dopri5@0.001"]) <= 12
    assert not any(r["peer"] == COMPILED for r in doc["ratios"])


def test_the_report_has_the_compiled_table(doc: dict):
    text = format_report(doc)
    assert "Compiled odecore / eager odecore" in text
    line = next(x for x in text.splitlines() if "rk4x40" in x and "backprop" in x)
    assert "linear" in line or line.strip().startswith("rk4x40")


def test_an_eager_fallback_fails_the_compiled_cell_instead_of_being_timed(monkeypatch):
    import odecore

    monkeypatch.setattr(_compiled, "inductor_problem", lambda device_type: "no C++ compiler")
    monkeypatch.setattr(_compiled, "_BACKEND", "inductor")
    problem = make_problem("vdp", Sizes.quick())
    with pytest.raises(odecore.CompileFallbackWarning, match=r"no C\+\+ compiler"):
        CompiledOdecoreLibrary().solve(
            problem.field, problem.y0, problem.t0, problem.t1, Method("rk4", n_steps=4), "forward"
        )


def test_the_command_refuses_compile_without_odecore_before_running(capsys):
    # The run raised from discover(), a traceback, after its first lines of progress.
    from odebench import main

    with pytest.raises(SystemExit) as exc:
        main(["perf", "solvers", "--quick", "--compile", "--libraries", "torchdiffeq"])
    assert exc.value.code == 2
    assert "keep odecore in `libraries`" in capsys.readouterr().err
