"""Timed runs and the figures made from them (no assertion on how long anything takes)."""

from __future__ import annotations

import pytest
import torch
from odebench.perf._libraries import Method, OdecoreLibrary, discover
from odebench.perf._problems import CountingField, EvaluationLimitError, Sizes, make_problem
from odebench.perf._solvers import (
    MODE_FIGURES,
    SolversConfig,
    _Cell,
    _cell_figures,
    _measure_cell,
    _replay,
)
from odebench.perf._timing import (
    FieldTimer,
    Observation,
    ReplayError,
    loss_weight,
    record,
    replay_once,
    run_once,
)

SMALL = Sizes.quick()
Y1 = torch.zeros(2)


def test_run_once_forward_counts_and_keeps_no_graph():
    problem = make_problem("mlp", SMALL)
    counter = CountingField(problem.field)
    obs = run_once(
        OdecoreLibrary(), problem, counter, Method("rk4", n_steps=5), "forward",
        loss_weight(problem),
    )  # fmt: skip
    assert obs.nfe_forward == 20
    assert obs.nfe_backward == 0
    assert obs.gradient is None
    assert not obs.y1.requires_grad
    assert obs.time_s > 0


def test_run_once_backprop_fills_the_gradient():
    problem = make_problem("mlp", SMALL)
    counter = CountingField(problem.field)
    obs = run_once(
        OdecoreLibrary(), problem, counter, Method("rk4", n_steps=5), "backprop",
        loss_weight(problem),
    )  # fmt: skip
    assert (obs.nfe_forward, obs.nfe_backward) == (20, 0)
    assert obs.gradient is not None
    assert obs.gradient.numel() == problem.y0.numel() + problem.n_parameters
    assert bool(torch.isfinite(obs.gradient).all())


def test_run_once_adjoint_counts_the_backward_pass():
    problem = make_problem("mlp", SMALL)
    counter = CountingField(problem.field)
    weight = loss_weight(problem)
    lib = OdecoreLibrary()
    rk4 = Method("rk4", n_steps=5)
    back = run_once(lib, problem, counter, rk4, "backprop", weight)
    adj = run_once(lib, problem, counter, rk4, "adjoint", weight)
    assert adj.nfe_forward == 20
    assert adj.nfe_backward >= 20  # 5 backward rk4 steps of the augmented system, at least
    torch.testing.assert_close(adj.gradient, back.gradient, rtol=1e-3, atol=1e-5)


def test_evaluation_times_are_positive_and_reset_the_count():
    problem = make_problem("linear", SMALL)
    counter = CountingField(problem.field)
    eval_s, vjp_s = FieldTimer(counter, problem).evaluation_times(block_s=0.001, blocks=2)
    assert eval_s > 0 and vjp_s > 0
    assert counter.nfe == 0


@pytest.mark.parametrize(
    ("mode", "kinds"),
    [("forward", (True, False)), ("backprop", (False, True)), ("adjoint", (True, True))],
)
def test_cells_time_the_field_once_per_round_as_the_mode_needs(mode, kinds):
    problem = make_problem("linear", SMALL)
    counter = CountingField(problem.field)
    config = SolversConfig(repeats=3)
    cell = _measure_cell(
        [OdecoreLibrary()], problem, Method("rk4", n_steps=2), mode,
        loss_weight(problem), config, FieldTimer(counter, problem),
    )  # fmt: skip
    assert len(cell.observations["odecore"]) == 3
    wants_eval, wants_vjp = kinds
    assert len(cell.eval_s) == (3 if wants_eval else 0)
    assert len(cell.vjp_s) == (3 if wants_vjp else 0)
    forward = mode == "forward"  # only a forward cell chains the field and replays the solve
    assert len(cell.chained_s) == (3 if forward else 0)
    assert len(cell.solver_s.get("odecore", [])) == (3 if forward else 0)
    assert not cell.solver_notes
    assert all(s > 0 for s in (*cell.eval_s, *cell.vjp_s, *cell.chained_s))


def test_a_cell_over_its_budget_still_times_the_field():
    problem = make_problem("linear", SMALL)
    counter = CountingField(problem.field)
    config = SolversConfig(repeats=3, cell_budget_s=1e-9)
    cell = _measure_cell(
        [OdecoreLibrary()], problem, Method("rk4", n_steps=2), "forward",
        loss_weight(problem), config, FieldTimer(counter, problem),
    )  # fmt: skip
    assert len(cell.observations["odecore"]) == 1
    assert "budget" in cell.notes["odecore"]
    assert len(cell.eval_s) == 1


def test_field_timer_blocks_reset_the_count():
    problem = make_problem("mlp", SMALL)
    counter = CountingField(problem.field)
    timer = FieldTimer(counter, problem)
    assert timer.block(5, vjp=False) > 0
    assert timer.block(2, vjp=True) > 0
    assert counter.nfe == 0


def test_the_chained_block_makes_as_many_evaluations_as_asked():
    problem = make_problem("mlp", SMALL)
    counter = CountingField(problem.field, limit=6)  # one untimed evaluation, then 5
    timer = FieldTimer(counter, problem)
    assert timer.chained_block(5) > 0
    assert counter.nfe == 0
    with pytest.raises(EvaluationLimitError):
        timer.chained_block(6)


class _GradModes(torch.nn.Module):
    """A field that notes whether autograd was recording at each call."""

    def __init__(self, field):
        super().__init__()
        self.field = field
        self.modes = []

    def forward(self, t, y):
        self.modes.append(torch.is_grad_enabled())
        return self.field(t, y)


def test_blocks_start_with_an_untimed_call_and_record_a_graph_only_for_the_vjp():
    problem = make_problem("mlp", SMALL)
    field = _GradModes(problem.field)
    timer = FieldTimer(CountingField(field), problem)
    timer.block(3, vjp=False)
    assert field.modes == [False] * 4
    field.modes.clear()
    timer.block(2, vjp=True)
    assert field.modes == [True] * 3


@pytest.mark.parametrize("library", discover()[0], ids=lambda lib: lib.name)
@pytest.mark.parametrize(
    "method", [Method("dopri5", rtol=1e-5, atol=1e-5), Method("rk4", n_steps=40)],
    ids=lambda m: m.label,
)  # fmt: skip
def test_a_replay_takes_the_recorded_steps_without_calling_the_field(library, method):
    if library.unsupported(method, "forward") is not None:
        pytest.skip(library.unsupported(method, "forward"))
    problem = make_problem("vdp", SMALL)
    counter = CountingField(problem.field)
    run = run_once(library, problem, counter, method, "forward", loss_weight(problem))
    tape = record(library, problem, counter, method)
    assert tape.nfe == run.nfe_forward and torch.equal(tape.y1, run.y1)
    for _ in range(2):  # a tape replays any number of times
        assert replay_once(library, problem, tape, method) > 0
        assert counter.nfe == 0  # the field itself was never called
        assert tape.position == tape.nfe
    # The tape carries the field's parameters, for libraries that look for them.
    assert list(tape.parameters()) == list(problem.field.parameters())


def test_a_replay_that_strays_from_the_recording_raises():
    problem = make_problem("linear", SMALL)
    counter = CountingField(problem.field)
    lib, rk4 = OdecoreLibrary(), Method("rk4", n_steps=2)
    tape = record(lib, problem, counter, rk4)
    assert tape.nfe == 8
    tape.outputs.append(tape.outputs[-1])
    with pytest.raises(ReplayError, match="made 8 evaluations, the recorded run 9"):
        replay_once(lib, problem, tape, rk4)
    del tape.outputs[-2:]
    with pytest.raises(ReplayError, match="more than the 7 recorded evaluations"):
        replay_once(lib, problem, tape, rk4)
    tape = record(lib, problem, counter, rk4)
    tape.outputs[3] = tape.outputs[3] * 2  # as if a solver changed it in place
    with pytest.raises(ReplayError, match="another y\\(t1\\)"):
        replay_once(lib, problem, tape, rk4)


def test_a_failed_replay_leaves_a_note_and_no_time():
    problem = make_problem("linear", SMALL)
    counter = CountingField(problem.field)
    lib, rk4 = OdecoreLibrary(), Method("rk4", n_steps=2)
    tape = record(lib, problem, counter, rk4)
    cell = _cell(Observation(0.1, 8, 0, Y1))
    _replay(cell, lib, problem, tape, rk4)
    tape.outputs.pop()
    _replay(cell, lib, problem, tape, rk4)
    assert "odecore" not in cell.solver_s
    assert cell.solver_notes["odecore"].startswith("replay failed: ReplayError: the replay asked")
    figures = _cell_figures("odecore", cell, "forward", 0.01, 0.04, torch.zeros(2), {})
    assert figures["forward_solver_time_s"] == (None, cell.solver_notes["odecore"])
    assert figures["forward_time_s"] == (0.1, None)  # the run's own figures stand


def _cell(*observations, name="odecore", failures=None, notes=None):
    return _Cell({name: list(observations)}, failures or {}, notes or {})


def test_forward_figures_are_medians_and_overheads():
    cell = _cell(
        Observation(0.3, 10, 0, Y1), Observation(0.1, 10, 0, Y1), Observation(0.2, 10, 0, Y1)
    )
    figures = _cell_figures("odecore", cell, "forward", 0.01, 0.04, torch.zeros(2), {})
    assert figures["forward_time_s"] == (0.2, None)
    assert figures["nfe_forward"] == (10, None)
    assert figures["forward_overhead"][0] == pytest.approx(0.2 / (10 * 0.01))
    assert figures["forward_cost_per_eval_us"][0] == pytest.approx((0.2 - 0.1) / 10 * 1e6)
    assert figures["error"] == (0.0, None)
    assert figures["forward_solver_time_s"] == (None, None)  # no replay in this cell

    cell.solver_s["odecore"] = [0.05, 0.01, 0.02]
    figures = _cell_figures("odecore", cell, "forward", 0.01, 0.04, torch.zeros(2), {})
    assert figures["forward_solver_time_s"] == (0.02, None)
    assert figures["forward_solver_overhead"][0] == pytest.approx(0.02 / (10 * 0.01))
    assert figures["forward_solver_cost_per_eval_us"][0] == pytest.approx(0.02 / 10 * 1e6)


def test_backprop_overhead_uses_the_evaluation_with_its_vjp():
    cell = _cell(Observation(0.8, 10, 0, Y1, torch.ones(3)))
    figures = _cell_figures("odecore", cell, "backprop", 0.01, 0.04, torch.zeros(2), {})
    assert figures["backprop_overhead"][0] == pytest.approx(0.8 / (10 * 0.04))
    assert figures["backprop_nfe_backward"] == (0, None)


def test_adjoint_overhead_counts_both_passes_and_compares_gradients():
    backprop = Observation(0.5, 10, 0, Y1, torch.tensor([1.0, 0.0]))
    cell = _cell(Observation(1.0, 10, 20, Y1, torch.tensor([1.0, 0.1])))
    figures = _cell_figures(
        "odecore", cell, "adjoint", 0.01, 0.04, torch.zeros(2), {"odecore": backprop}
    )
    assert figures["adjoint_overhead"][0] == pytest.approx(1.0 / (10 * 0.01 + 20 * 0.04))
    assert figures["adjoint_nfe_backward"] == (20, None)
    assert figures["adjoint_grad_diff"][0] == pytest.approx(0.1)


def test_failed_and_non_finite_runs_become_notes():
    failed = _Cell({"odecore": []}, {"odecore": "SolverError: boom"}, {})
    figures = _cell_figures("odecore", failed, "adjoint", 0.01, 0.04, torch.zeros(2), {})
    assert set(figures) == set(MODE_FIGURES["adjoint"])
    assert all(v is None and note == "failed: SolverError: boom" for v, note in figures.values())

    nan = _cell(Observation(0.1, 4, 0, torch.tensor([float("nan"), 0.0])))
    figures = _cell_figures("odecore", nan, "forward", 0.01, 0.04, torch.zeros(2), {})
    assert figures["error"] == (None, "the solution holds NaN or inf")

    bad = _cell(Observation(0.1, 4, 8, Y1, torch.tensor([float("inf")])))
    figures = _cell_figures("odecore", bad, "adjoint", 0.01, 0.04, torch.zeros(2), {})
    assert figures["adjoint_grad_diff"] == (None, "the gradient holds NaN or inf")
    assert figures["adjoint_time_s"][1] == "the gradient holds NaN or inf"


def test_a_run_that_fails_after_others_is_noted():
    cell = _cell(Observation(0.1, 4, 8, Y1, torch.ones(2)), failures={"odecore": "SolverError: x"})
    figures = _cell_figures("odecore", cell, "adjoint", 0.01, 0.04, torch.zeros(2), {})
    assert figures["adjoint_time_s"] == (0.1, "a later run failed: SolverError: x")


def test_varying_counts_are_noted():
    cell = _cell(Observation(0.1, 10, 0, Y1), Observation(0.1, 12, 0, Y1))
    figures = _cell_figures("odecore", cell, "forward", 0.01, 0.04, torch.zeros(2), {})
    assert figures["nfe_forward"] == (11, "evaluations varied between runs; median shown")


def test_a_run_past_the_evaluation_limit_fails_and_the_cell_says_so():
    problem = make_problem("linear", SMALL)
    counter = CountingField(problem.field, limit=7)  # rk4 x 2 takes 8
    rk4 = Method("rk4", n_steps=2)
    with pytest.raises(EvaluationLimitError, match="stopped after 7 evaluations"):
        run_once(OdecoreLibrary(), problem, counter, rk4, "forward", loss_weight(problem))
    cell = _measure_cell(
        [OdecoreLibrary()], problem, rk4, "forward",
        loss_weight(problem), SolversConfig(repeats=2), FieldTimer(counter, problem),
    )  # fmt: skip
    assert cell.observations["odecore"] == []
    assert cell.failures["odecore"].startswith("EvaluationLimitError: stopped after 7")


def test_the_limit_counts_from_each_reset_and_spares_the_field_timer():
    problem = make_problem("linear", SMALL)
    counter = CountingField(problem.field, limit=8)
    rk4 = Method("rk4", n_steps=2)
    for _ in range(3):  # run_once resets the count: 8 evaluations each time
        obs = run_once(OdecoreLibrary(), problem, counter, rk4, "forward", loss_weight(problem))
        assert obs.nfe_forward == 8
    FieldTimer(counter, problem).block(50, vjp=False)  # far past the limit, in one block
    unlimited = CountingField(problem.field, limit=None)
    unlimited.nfe = 10**9
    unlimited(torch.tensor(0.0), problem.y0)
    assert unlimited.nfe == 10**9 + 1


@pytest.mark.parametrize("limit", [0, -3])
def test_the_evaluation_limit_must_be_positive(limit):
    with pytest.raises(ValueError, match=f"`limit` must be a positive number.*got {limit}"):
        CountingField(torch.nn.Identity(), limit=limit)
