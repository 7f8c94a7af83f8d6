"""The stiff problems of ``odebench perf solvers``: their definitions, the
work-precision sweep (kvaerno5, rodas4, rodas5p, SciPy's Radau, BDF and LSODA, dopri5 out of its
step budget), the report and the plot."""

from __future__ import annotations

import json

import pytest
import torch
from odebench import _figures
from odebench.perf import SolversConfig, format_report, plot_solvers, run_solvers
from odebench.perf._libraries import Method, OdecoreLibrary, discover
from odebench.perf._plot import STIFF_XLABEL, STIFF_YLABEL, plot_stiff, stiff_panels, stiff_path
from odebench.perf._problems import (
    KNOWN_PROBLEMS,
    PROBLEMS,
    STIFF_PROBLEMS,
    Sizes,
    make_problem,
)
from odebench.perf._stiff import run_stiff, stiff_methods, stiff_reference

F64 = torch.float64
QUICK = Sizes.quick()


def _states(n=16, seed=3):
    gen = torch.Generator().manual_seed(seed)
    return (4 * torch.rand(n, 2, generator=gen, dtype=F64) - 2) * torch.tensor([1.0, 3.0])


def test_vdp_stiff_is_van_der_pol_at_mu_1000_from_2_0_in_float64():
    problem = make_problem("vdp_stiff")
    assert problem.name == "vdp_stiff" and "vdp_stiff" in KNOWN_PROBLEMS
    assert problem.y0.dtype == F64 and problem.y0.tolist() == [[2.0, 0.0]]
    assert (problem.t0, problem.t1) == (0.0, 3000.0)
    assert make_problem("vdp_stiff", QUICK).t1 == 300.0
    # float64 whatever dtype asks: the reference and the tight tolerances need it
    assert make_problem("vdp_stiff", dtype=torch.float32).y0.dtype == F64
    y = _states()
    x, v = y[:, 0], y[:, 1]
    expected = torch.stack([v, 1000.0 * (1 - x * x) * v - x], dim=-1)
    with torch.no_grad():
        assert torch.allclose(problem.field(torch.tensor(0.0, dtype=F64), y), expected)


def test_vdp_stiff_is_stiff_at_its_initial_state():
    problem = make_problem("vdp_stiff")
    t = torch.tensor(0.0, dtype=F64)
    jacobian = torch.autograd.functional.jacobian(lambda y: problem.field(t, y), problem.y0[0])
    eigenvalues = torch.linalg.eigvals(jacobian.detach()).real
    assert eigenvalues.min() < -2900  # near -3 mu
    assert abs(float(eigenvalues.min())) * (problem.t1 - problem.t0) > 1e6


def test_robertson_is_the_kinetics_problem_in_float64_at_atol_1e_4_rtol():
    problem = make_problem("robertson", QUICK, dtype=torch.float32)
    assert problem.name == "robertson" and "robertson" in KNOWN_PROBLEMS
    assert problem.y0.dtype == F64 and problem.y0.tolist() == [[1.0, 0.0, 0.0]]
    assert (problem.t0, problem.t1, problem.atol_ratio) == (0.0, 1e5, 1e-4)
    assert make_problem("vdp_stiff").atol_ratio == 1.0
    assert problem.field.rates.tolist() == [0.04, 3e7, 1e4]  # exactly, not float32's 0.04
    y = torch.tensor([[0.9, 2e-5, 0.1], [0.3, 1e-6, 0.7]], dtype=F64)
    y1, y2, y3 = y.unbind(-1)
    expected = torch.stack(
        [-0.04 * y1 + 1e4 * y2 * y3, 0.04 * y1 - 1e4 * y2 * y3 - 3e7 * y2**2, 3e7 * y2**2], -1
    )
    with torch.no_grad():
        out = problem.field(torch.tensor(0.0, dtype=F64), y)
    torch.testing.assert_close(out, expected)
    assert out.sum(-1).abs().max() < 1e-12  # the total mass is conserved


def test_stiff_problems_are_left_out_of_quick_and_the_explicit_runs_are_unchanged():
    assert STIFF_PROBLEMS == ("vdp_stiff", "robertson")
    assert PROBLEMS == ("mlp", "conv_relu", "conv_softplus", "vdp", "linear")
    assert SolversConfig(quick=True).problem_names == PROBLEMS
    assert SolversConfig().problem_names == (*PROBLEMS, "vdp_stiff", "robertson")
    assert SolversConfig(quick=True, problems=("vdp_stiff",)).problem_names == ("vdp_stiff",)
    assert [m.label for m in SolversConfig().methods] == ["dopri5@0.001", "dopri5@1e-06", "rk4x100"]
    assert [m.label for m in SolversConfig(quick=True).methods] == ["dopri5@0.001", "rk4x40"]
    with pytest.raises(
        ValueError, match=r"Unknown problems \['stiff'\]; known problems: .*vdp_stiff"
    ):
        SolversConfig(problems=("stiff",))


def test_stiff_sweep_is_six_stiff_solvers_over_tolerances_and_a_budgeted_dopri5():
    full = [m.label for m in stiff_methods()]
    assert full[:5] == [f"kvaerno5@{t:g}" for t in (1e-4, 1e-5, 1e-6, 1e-7, 1e-8)]
    assert {m.name for m in stiff_methods()} == {
        "kvaerno5", "rodas4", "rodas5p", "scipy:Radau", "scipy:BDF", "scipy:LSODA", "dopri5"
    }  # fmt: skip
    assert len(full) == 31 and full[-1] == "dopri5@1e-06,max_steps=10000"
    assert len(stiff_methods(quick=True)) == 13


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "kvaerno5"}, "`kvaerno5` needs `rtol` and `atol`"),
        ({"name": "rk4", "n_steps": 3, "max_steps": 5}, "`max_steps` is for adaptive methods"),
        ({"name": "dopri5", "rtol": 1e-3, "atol": 1e-3, "max_steps": 0}, "`max_steps` must be"),
        ({"name": "scipy:RK45", "rtol": 1e-3, "atol": 1e-3}, "knows dopri5, rk4, kvaerno5, rodas4"),
    ],
)
def test_method_validation_of_the_stiff_configurations(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Method(**kwargs)


def test_peers_and_gradient_modes_leave_the_stiff_configurations_to_odecore_forward():
    libraries, _ = discover(["odecore", "torchdiffeq"])
    odecore_lib, torchdiffeq_lib = libraries
    kvaerno5 = Method("kvaerno5", rtol=1e-6, atol=1e-6)
    budget = Method("dopri5", rtol=1e-6, atol=1e-6, max_steps=10)
    assert odecore_lib.unsupported(kvaerno5, "forward") is None
    assert "forward only" in (odecore_lib.unsupported(kvaerno5, "backprop") or "")
    assert "odecore only" in (torchdiffeq_lib.unsupported(kvaerno5, "forward") or "")
    assert "odecore only" in (torchdiffeq_lib.unsupported(budget, "forward") or "")


@pytest.fixture(scope="module")
def quick_stiff():
    """The quick sweep on [0, 300], one run each, and its reference; the rows as the
    document holds them."""
    pytest.importorskip("scipy")
    problem = make_problem("vdp_stiff", QUICK)
    reference, note = stiff_reference(problem)
    rows = run_stiff(
        OdecoreLibrary(), problem, stiff_methods(quick=True), reference, repeats=1, warm_up=False
    )
    return problem, reference, note, [r.to_json() for r in rows]


def test_stiff_reference_is_scipy_radau_and_agrees_with_the_exact_jacobian_solve(quick_stiff):
    from scipy.integrate import solve_ivp

    problem, reference, note, _ = quick_stiff
    assert note.startswith("SciPy Radau") and "1e-12" in note
    mu = 1000.0

    def f(t, y):
        return [y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]]

    def jac(t, y):
        return [[0.0, 1.0], [-2 * mu * y[0] * y[1] - 1, mu * (1 - y[0] ** 2)]]

    exact_jac = solve_ivp(
        f, (0.0, problem.t1), [2.0, 0.0], method="Radau", rtol=1e-12, atol=1e-12, jac=jac
    )
    assert torch.allclose(reference[0], torch.tensor(exact_jac.y[:, -1], dtype=F64), atol=1e-9)


SOLVERS = ["kvaerno5", "rodas4", "rodas5p", "scipy:Radau", "scipy:BDF", "scipy:LSODA"]


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("tol", [1e-4, 1e-6])
def test_sweep_rows_have_time_evaluations_and_an_error_the_tolerance_bounds(
    quick_stiff, solver, tol
):
    _, _, _, rows = quick_stiff
    label = Method(solver, rtol=tol, atol=tol).label
    mine = {r["figure"]: r for r in rows if r["method"] == label}
    assert set(mine) == {"forward_time_s", "nfe_forward", "error"}
    assert all(r["library"] == "odecore" and r["solver"] == solver for r in mine.values())
    assert mine["forward_time_s"]["value"] > 0 and mine["forward_time_s"]["unit"] == "s"
    assert mine["nfe_forward"]["value"] > 10
    # a global error at t1 within a hundred times the local tolerance
    assert 0 < mine["error"]["value"] < 100 * tol


def test_tighter_tolerances_cost_more_evaluations(quick_stiff):
    _, _, _, rows = quick_stiff
    nfe = {r["method"]: r["value"] for r in rows if r["figure"] == "nfe_forward"}
    for solver in SOLVERS[1:]:
        assert nfe[f"{solver}@1e-06"] > nfe[f"{solver}@0.0001"]


def test_dopri5_runs_out_of_its_step_budget_and_says_so(quick_stiff):
    _, _, _, rows = quick_stiff
    mine = [r for r in rows if r["solver"] == "dopri5"]
    assert {r["figure"] for r in mine} == {"forward_time_s", "nfe_forward", "error"}
    for r in mine:
        assert r["value"] is None and r["max_steps"] == 2000
        assert r["note"].startswith("failed: SolverError")
        assert "maximum number of steps reached" in r["note"]


def test_robertson_sweep_scales_atol_and_meets_a_radau_reference_with_the_exact_jacobian():
    pytest.importorskip("scipy")
    from scipy.integrate import solve_ivp

    problem = make_problem("robertson", QUICK)
    reference, _ = stiff_reference(problem)

    def f(t, y):
        return [-0.04 * y[0] + 1e4 * y[1] * y[2], 0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
                3e7 * y[1] ** 2]  # fmt: skip

    def jac(t, y):
        return [[-0.04, 1e4 * y[2], 1e4 * y[1]],
                [0.04, -1e4 * y[2] - 6e7 * y[1], -1e4 * y[1]],
                [0.0, 6e7 * y[1], 0.0]]  # fmt: skip

    exact_jac = solve_ivp(f, (0.0, 1e5), [1.0, 0.0, 0.0], "Radau", rtol=1e-12, atol=1e-14, jac=jac)
    assert torch.allclose(reference[0], torch.tensor(exact_jac.y[:, -1], dtype=F64), atol=1e-9)
    methods = [m for m in stiff_methods(quick=True) if m.name in ("rodas4", "scipy:LSODA")]
    rows = run_stiff(OdecoreLibrary(), problem, methods, reference, repeats=1, warm_up=False)
    errors = {(r.solver, r.rtol, r.atol): r.value for r in rows if r.figure == "error"}
    assert set(errors) == {
        (s, tol, tol * 1e-4) for s in ("rodas4", "scipy:LSODA") for tol in (1e-4, 1e-6)
    }
    assert {r.method for r in rows} >= {"rodas4@1e-06/1e-10", "scipy:LSODA@0.0001/1e-08"}
    for (_, rtol, _), error in errors.items():
        assert error is not None and 0 < error < 100 * rtol


def test_run_solvers_with_the_stiff_problem_alone(tmp_path):
    pytest.importorskip("scipy")
    config = SolversConfig(
        quick=True, problems=("vdp_stiff",), memory=False, gradients=False, threads=1
    )
    doc = run_solvers(config)
    assert doc["environment"]["schema_version"] == 5
    assert doc["results"] == [] and doc["ratios"] == []
    assert [p["name"] for p in doc["problems"]] == ["vdp_stiff"]
    assert doc["problems"][0]["reference"].startswith("SciPy Radau")
    assert {r["method"] for r in doc["stiff"]} == {m.label for m in stiff_methods(quick=True)}
    json.dumps(doc, allow_nan=False)
    report = format_report(doc)
    assert "Stiff problems" in report and "kvaerno5@1e-06" in report
    assert "Failed runs:\n  stiff: vdp_stiff dopri5@1e-06,max_steps=2000" in report
    out = plot_solvers(doc, tmp_path / "solvers.png")
    assert out.exists() and stiff_path(out).exists()


def _stiff_doc():
    rows = []
    for solver, scale in (("kvaerno5", 3.0), ("scipy:Radau", 1.0), ("scipy:BDF", 0.5)):
        for tol in (1e-4, 1e-6, 1e-5):  # out of order on purpose
            for figure, value in (
                ("forward_time_s", scale * -0.1 * torch.log10(torch.tensor(tol)).item()),
                ("nfe_forward", 100.0),
                ("error", 10 * tol * scale),
            ):
                rows.append(
                    {
                        "problem": "vdp_stiff", "method": f"{solver}@{tol:g}", "solver": solver,
                        "rtol": tol, "atol": tol, "max_steps": None, "library": "odecore",
                        "figure": figure, "value": value, "unit": "", "note": None,
                    }
                )  # fmt: skip
    for figure in ("forward_time_s", "nfe_forward", "error"):
        rows.append(
            {
                "problem": "vdp_stiff", "method": "dopri5@1e-06,max_steps=10", "solver": "dopri5",
                "rtol": 1e-6, "atol": 1e-6, "max_steps": 10, "library": "odecore",
                "figure": figure, "value": None, "unit": "",
                "note": "failed: SolverError: solve() stopped at t = 0.01",
            }
        )  # fmt: skip
    return {
        "environment": {"date": "2026-12-03T10:00:00+00:00", "torch": "2.13.0", "threads": 1},
        "problems": [{"name": "vdp_stiff", "description": "Van der Pol, mu = 1000"}],
        "results": [],
        "stiff": rows,
        "memory": [],
        "gradients": [],
    }


def test_stiff_panel_reads_error_against_time_per_solver_in_words():
    doc = _stiff_doc()
    (panel,) = stiff_panels(doc)
    assert panel.xlabel == STIFF_XLABEL and panel.ylabel == STIFF_YLABEL
    assert "Van der Pol, mu = 1000" in panel.title
    assert list(panel.series) == [
        "kvaerno5: odecore's ESDIRK 5(4), implicit",
        "Radau IIA, order 5: SciPy through odecore",
        "BDF, orders 1 to 5: SciPy through odecore",
    ]
    radau = panel.series["Radau IIA, order 5: SciPy through odecore"]
    assert panel.labels["Radau IIA, order 5: SciPy through odecore"] == ["0.0001", "1e-05", "1e-06"]
    assert [e for e, _ in radau] == pytest.approx([1e-3, 1e-4, 1e-5])
    assert [t for _, t in radau] == pytest.approx([0.4, 0.5, 0.6])
    assert panel.notes == ["dopri5@1e-06,max_steps=10: failed: solve() stopped at t = 0.01"]
    assert stiff_panels({**doc, "stiff": []}) == []


def test_stiff_plot_draws_log_axes_with_their_labels(tmp_path, monkeypatch):
    drawn = []
    save = _figures.save_png

    def keep(path, fig, **options):
        drawn.append(
            [
                (ax.get_xlabel(), ax.get_ylabel(), ax.get_xscale(), ax.get_yscale())
                for ax in fig.axes
            ]
        )
        drawn[-1].append([t.get_text() for t in fig.axes[0].get_legend().get_texts()])
        save(path, fig, **options)

    monkeypatch.setattr(_figures, "save_png", keep)
    out = plot_stiff(_stiff_doc(), tmp_path / "w.png")
    assert out.exists()
    (axis, legend) = drawn[0][0], drawn[0][1]
    assert axis == (STIFF_XLABEL, STIFF_YLABEL, "log", "log")
    assert "error" in STIFF_XLABEL and "wall time" in STIFF_YLABEL
    assert legend[0] == "kvaerno5: odecore's ESDIRK 5(4), implicit"


def test_plot_solvers_writes_the_stiff_figure_beside_only_when_there_are_stiff_rows(tmp_path):
    doc = _stiff_doc()
    out = plot_solvers(doc, tmp_path / "solvers.png")
    assert stiff_path(out) == tmp_path / "solvers_stiff.png" and stiff_path(out).exists()
    plot_solvers({**doc, "stiff": []}, tmp_path / "plain.png")
    assert not (tmp_path / "plain_stiff.png").exists()
    with pytest.raises(ValueError, match="no stiff rows"):
        plot_stiff({**doc, "stiff": []}, tmp_path / "none.png")
