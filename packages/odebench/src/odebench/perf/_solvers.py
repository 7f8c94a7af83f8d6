"""``odebench perf solvers``: the solver benchmark, from configuration to the JSON document."""

from __future__ import annotations

import itertools
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from importlib import resources
from typing import Any

import torch

from .._io import JsonObject, flag, text_parts, whole
from .._provenance import load_average, now
from ._document import (
    CompiledRow,
    Document,
    EvaluationRow,
    ProblemRow,
    RatioRow,
    ResultRow,
    environment,
    figure_rows,
    unmeasured,
)
from ._gradcheck import GradcheckSizes, gradient_check
from ._libraries import (
    COMPILED,
    GRADIENT_MODES,
    LIBRARIES,
    MODES,
    Library,
    Method,
    describe_error,
    discover,
)
from ._problems import (
    KNOWN_PROBLEMS,
    PROBLEMS,
    STIFF_PROBLEMS,
    CountingField,
    Problem,
    Sizes,
    error_figure,
    make_problem,
    reference_solution,
)
from ._stats import cost_per_evaluation, finite, median, overhead_factor, ratio
from ._stiff import STIFF_FIGURE_UNITS, run_stiff, stiff_methods, stiff_reference
from ._timing import FieldTimer, Observation, Tape, loss_weight, record, replay_once, run_once

SCHEMA_VERSION = 5

FULL_METHODS = (
    Method("dopri5", rtol=1e-3, atol=1e-3),
    Method("dopri5", rtol=1e-6, atol=1e-6),
    Method("rk4", n_steps=100),
)
# rk4 needs 40 steps for Van der Pol on [0, 5] to stay stable (h |lambda| < 2.8).
QUICK_METHODS = (Method("dopri5", rtol=1e-3, atol=1e-3), Method("rk4", n_steps=40))

MODE_FIGURES: dict[str, dict[str, str]] = {
    "forward": {
        **STIFF_FIGURE_UNITS,
        "forward_overhead": "ratio",
        "forward_cost_per_eval_us": "us",
        "forward_solver_time_s": "s",
        "forward_solver_overhead": "ratio",
        "forward_solver_cost_per_eval_us": "us",
    },
    **{
        mode: {
            f"{mode}_time_s": "s",
            f"{mode}_nfe_backward": "evaluations",
            f"{mode}_overhead": "ratio",
            **({f"{mode}_grad_diff": "relative"} if mode != "backprop" else {}),
        }
        for mode in GRADIENT_MODES
    },
}
"""The figures of the ``results`` list for each mode, with their units."""

FIGURE_UNITS = {f: unit for figures in MODE_FIGURES.values() for f, unit in figures.items()}

# Figures compared as odecore / peer in ``ratios``.
RATIO_FIGURES = (
    "forward_time_s",
    "nfe_forward",
    "error",
    "forward_overhead",
    "forward_cost_per_eval_us",
    "forward_solver_cost_per_eval_us",
    "backprop_time_s",
    "adjoint_time_s",
    "adjoint_nfe_backward",
    "adjoint_seminorm_time_s",
    "adjoint_seminorm_nfe_backward",
)


def count_flag(help: str, resolved: str | None = None) -> Mapping[str, Any]:
    """The metadata of a field that is an option ``--NAME N``, a positive count."""
    return flag(help, type="positive_int", metavar="N", resolved=resolved)


@dataclass(frozen=True)
class SolversConfig:
    """What ``odebench perf solvers`` runs.

    Args:
        quick: smaller problems, fewer methods and step counts, one repetition, no
            warm-up: every code path in a few minutes.
        threads: ``torch.set_num_threads`` for the run and every child process.
        repeats: timed repetitions per library and configuration (default 5, quick 1).
            A configuration whose one run is slow gets fewer (see ``cell_budget_s``).
        problems: the problems to run, each named once (default: all of ``KNOWN_PROBLEMS``, the
            explicit ones and then the stiff ones, ``vdp_stiff`` and ``robertson``;
            quick: the explicit ones only). A stiff problem gets its own sweep (``stiff_methods``).
        libraries: the libraries to try (default odecore and every peer that imports).
        memory: measure peak memory in child processes.
        gradients: check gradients against finite differences.
        cell_budget_s: seconds of timed runs one (problem, method, mode) may take
            across all libraries; the repetitions are cut to fit, down to the warm-up
            run alone. Default 20 (quick: no limit, one run).
        seed: the seed of the problems' parameters and initial states.
        compile: add odecore's compiled solve (``compile=True``) beside eager odecore where
            it compiles, its first call timed apart (the document's ``compiled``); the
            memory measurements and the gradient check run the eager libraries alone.
    """

    quick: bool = field(default=False, metadata=flag(
        "small problems, fewer methods and steps, one run each (a few minutes)",
        action="store_true"))  # fmt: skip
    threads: int = field(default=2, metadata=count_flag("torch threads"))
    repeats: int | None = field(default=None, metadata=count_flag(
        "timed runs per library and configuration", "n_repeats"))  # fmt: skip
    problems: tuple[str, ...] | None = field(default=None, metadata=flag(
        f"comma-separated subset of: {', '.join(KNOWN_PROBLEMS)} (default: all)",
        type="names", metavar="NAMES"))  # fmt: skip
    libraries: tuple[str, ...] | None = field(default=None, metadata=flag(
        f"comma-separated subset of: {', '.join(LIBRARIES)} (default: all that import)",
        type="names", metavar="NAMES"))  # fmt: skip
    memory: bool = field(default=True, metadata=flag(
        "skip the peak-memory measurements", option="--no-memory",
        action="store_false"))  # fmt: skip
    gradients: bool = field(default=True, metadata=flag(
        "skip the finite-difference gradient check", option="--no-gradients",
        action="store_false"))  # fmt: skip
    cell_budget_s: float = 20.0
    seed: int = 0
    compile: bool = field(default=False, metadata=flag(
        "add odecore's compiled solve (compile=True) beside eager odecore where it compiles "
        "(explicit methods, forward and backprop), its first call timed apart",
        action="store_true"))  # fmt: skip

    def __post_init__(self) -> None:
        for name in ("repeats", "threads"):
            value = getattr(self, name)
            if (value is not None or name == "threads") and not whole(1)(value):
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
        if self.problems is not None:
            unknown = [p for p in self.problems if p not in KNOWN_PROBLEMS]
            if unknown:
                raise ValueError(
                    f"Unknown problems {unknown}; known problems: {', '.join(KNOWN_PROBLEMS)}."
                )
            twice = sorted({p for p in self.problems if self.problems.count(p) > 1})
            if twice:  # a second run would double its rows, the report showing one
                raise ValueError(f"`problems` names {twice} more than once.")
        if self.compile and self.libraries is not None and "odecore" not in self.libraries:
            raise ValueError("`compile` compares with eager odecore: keep odecore in `libraries`.")

    @property
    def n_repeats(self) -> int:
        return self.repeats if self.repeats is not None else (1 if self.quick else 5)

    @property
    def problem_names(self) -> tuple[str, ...]:
        """The problems this run takes, in order: ``problems``, or the default."""
        if self.problems is not None:
            return self.problems
        return PROBLEMS if self.quick else KNOWN_PROBLEMS

    @property
    def methods(self) -> tuple[Method, ...]:
        return QUICK_METHODS if self.quick else FULL_METHODS

    @property
    def sizes(self) -> Sizes:
        return Sizes.quick() if self.quick else Sizes()

    @property
    def memory_steps(self) -> tuple[int, ...]:
        return (10, 100) if self.quick else (10, 100, 1000, 10_000)


def command_line(argv: list[str] | None = None) -> str | None:
    """The command that started this run as the user would type it again, without the
    machine's paths (``python -m odebench`` for ``.../odebench/__main__.py``)."""
    argv = sys.argv if argv is None else argv
    if not argv or not argv[0]:
        return None
    program = os.path.basename(argv[0])
    if program == "__main__.py" and os.path.basename(os.path.dirname(argv[0])) == "odebench":
        program = "python -m odebench"
    return " ".join([program, *argv[1:]])


@dataclass
class _Cell:
    """Observations of one (problem, method, mode) for every library, with the field's
    blocks of each round (``eval_s``, ``vjp_s``, ``chained_s``) and the replays' seconds."""

    observations: dict[str, list[Observation]]
    failures: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    eval_s: list[float] = field(default_factory=list)
    vjp_s: list[float] = field(default_factory=list)
    chained_s: list[float] = field(default_factory=list)
    solver_s: dict[str, list[float]] = field(default_factory=dict)
    solver_notes: dict[str, str] = field(default_factory=dict)
    first_call_s: dict[str, float] = field(default_factory=dict)


_MAX_BLOCK_CALLS = 100


def _time_field(cell: _Cell, timer: FieldTimer, mode: str) -> None:
    """The blocks of the field alone that ``mode``'s factors divide by, each as many calls
    as a run of this cell makes (at most ``_MAX_BLOCK_CALLS``)."""
    nfe = median(o.nfe_forward + o.nfe_backward for obs in cell.observations.values() for o in obs)
    calls = max(1, min(_MAX_BLOCK_CALLS, round(nfe or 1)))
    if mode != "backprop":
        cell.eval_s.append(timer.block(calls, vjp=False))
    if mode == "forward":
        cell.chained_s.append(timer.chained_block(calls))
    if mode != "forward":
        cell.vjp_s.append(timer.block(calls, vjp=True))


def _measure_cell(
    libraries: list[Library],
    problem: Problem,
    method: Method,
    mode: str,
    weight: torch.Tensor,
    config: SolversConfig,
    timer: FieldTimer,
) -> _Cell:
    """Warm up, then time every library and the field alone in interleaved rounds:
    ``A B ... F``, in a forward cell ``A B ... A' B' ... F`` (``A'``: ``A``'s replay)."""
    counter = timer.counter
    cell = _Cell({lib.name: [] for lib in libraries})
    obs, failures, notes = cell.observations, cell.failures, cell.notes

    def attempt(lib: Library) -> Observation | None:
        try:
            return run_once(lib, problem, counter, method, mode, weight)
        except Exception as exc:
            failures[lib.name] = describe_error(exc)
            return None

    def timed_run(lib: Library) -> None:
        if lib.name not in failures and (o := attempt(lib)) is not None:
            obs[lib.name].append(o)

    # The compile, timed apart: never a warm-up or a timed run.
    compiles = [lib for lib in libraries if lib.compiles]
    cell.first_call_s = {lib.name: o.time_s for lib in compiles if (o := attempt(lib)) is not None}
    repeats = config.n_repeats
    if not config.quick:
        warm = {lib.name: o for lib in libraries if (o := attempt(lib)) is not None}
        round_s = sum(o.time_s for o in warm.values())
        if round_s > 0:
            affordable = math.floor(config.cell_budget_s / round_s)
            if affordable < 1:
                for name, o in warm.items():
                    obs[name].append(o)
                    notes[name] = (
                        f"1 run (the warm-up): one round takes {round_s:.1f} s, over the "
                        f"{config.cell_budget_s:g} s budget"
                    )
                _time_field(cell, timer, mode)
                return cell
            if affordable < repeats:
                for name in warm:
                    notes[name] = f"{affordable} runs instead of {repeats} to fit the time budget"
                repeats = affordable
    ready = [lib for lib in libraries if lib.name not in failures]
    steps: list[Callable[[], None]] = [partial(timed_run, lib) for lib in ready]
    if mode == "forward":
        for lib in ready:
            if lib.compiles:
                cell.solver_notes[lib.name] = "not recorded: a graph does not run a Python tape"
                continue
            try:
                tape = record(lib, problem, counter, method)
            except Exception as exc:
                cell.solver_notes[lib.name] = f"not recorded: {describe_error(exc)}"
                continue
            steps.append(partial(_replay, cell, lib, problem, tape, method))
    steps.append(partial(_time_field, cell, timer, mode))  # the field alone ends each round
    for step in steps * repeats:  # rounds: A B ... F A B ... F
        step()
    return cell


def _replay(cell: _Cell, lib: Library, problem: Problem, tape: Tape, method: Method) -> None:
    """Time ``lib``'s solve of its tape into ``cell.solver_s``; after a failure, no more."""
    if lib.name in cell.solver_notes:
        return
    try:
        cell.solver_s.setdefault(lib.name, []).append(replay_once(lib, problem, tape, method))
    except Exception as exc:
        cell.solver_s.pop(lib.name, None)
        cell.solver_notes[lib.name] = f"replay failed: {describe_error(exc)}"


def _grad_diff(o: Observation | None, reference: Observation | None) -> float | None:
    if o is None or reference is None or o.gradient is None or reference.gradient is None:
        return None
    den = float(reference.gradient.norm())
    return None if den == 0.0 else float((o.gradient - reference.gradient).norm()) / den


def run_solvers(
    config: SolversConfig | None = None, *, log: Callable[[str], None] | None = None
) -> JsonObject:
    """Run the solver benchmark and return its JSON document (see :doc:`/odebench/perf`).

    Args:
        config: what to run; default the full benchmark.
        log: called with a line of progress now and then (default: silent).

    Returns:
        The document: ``environment``, ``problems``, ``results``, ``ratios``,
        ``memory``, ``gradients`` and ``notes``.
    """
    config = config or SolversConfig()
    say = log or (lambda _: None)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        return _run(config, say)
    finally:
        torch.set_num_threads(threads_before)


@dataclass
class _Run:
    """A run in progress: what it runs, and the document it fills."""

    config: SolversConfig
    libraries: list[Library]
    say: Callable[[str], None]
    doc: Document = field(default_factory=Document)


def _run(config: SolversConfig, say: Callable[[str], None]) -> JsonObject:
    started = time.perf_counter()
    date = now()
    load_start = load_average()
    libraries, missing = discover(config.libraries, compiled=config.compile)
    eager = [lib for lib in libraries if not lib.compiles]
    has_odecore = any(lib.name == "odecore" for lib in libraries)
    run = _Run(config, libraries, say)
    notes = run.doc.notes
    notes += _general_notes(config)
    notes += [f"{name} is left out: {reason}." for name, reason in missing.items()]
    if not has_odecore:
        notes.append("odecore is not among the libraries: no ratios.")
    say(f"libraries: {', '.join(f'{lib.name} {lib.version}' for lib in libraries)}")
    for name, reason in missing.items():
        say(f"left out: {name} ({reason})")
    for pname in config.problem_names:
        if pname not in STIFF_PROBLEMS:
            _explicit_problem(run, pname)
    if has_odecore:
        peers = [lib.name for lib in eager if lib.name != "odecore"]
        run.doc.ratios = _ratio_rows(run.doc.results, peers)
    for pname in config.problem_names:
        if pname in STIFF_PROBLEMS:
            _stiff_problem(run, pname)
    _memory_and_gradients(run, eager)
    run.doc.environment = environment(
        SCHEMA_VERSION,
        date,
        libraries={lib.name: lib.version for lib in libraries},
        unavailable=dict(missing),
        quick=config.quick,
        repeats=config.n_repeats,
        cell_budget_s=None if config.quick else config.cell_budget_s,
        dtype="float32 (gradient check and stiff problems: float64)",
        command=command_line(),
        load_average_start=load_start,
        load_average_end=load_average(),
        wall_time_s=time.perf_counter() - started,
    )
    if load_start is not None and load_start >= 1.0:
        notes += _text_notes(["load"], load=f"{load_start:.2f}")
    return run.doc.to_json()


def _memory_and_gradients(run: _Run, eager: list[Library]) -> None:
    """Peak memory in fresh processes and the gradient check, each unless switched off."""
    config, say = run.config, run.say
    if config.memory:
        from ._memory import measure_memory  # not at import time: the child runs it as __main__

        say(f"memory: rk4 with {', '.join(map(str, config.memory_steps))} steps, fresh processes")
        run.doc.memory = measure_memory(
            eager,
            config.memory_steps,
            threads=config.threads,
            batch=config.sizes.mlp_batch,
            log=say,
            # As many children at once as the cores hold without sharing: oversubscribed
            # torch threads wait for each other and would slow the run manyfold.
            workers=max(1, (os.cpu_count() or 1) // config.threads),
        )
    else:
        run.doc.notes.append("Memory was not measured (--no-memory).")
    if config.gradients:
        say("gradient check against finite differences (float64)")
        sizes = GradcheckSizes.quick() if config.quick else GradcheckSizes()
        run.doc.gradients = gradient_check(eager, sizes=sizes, log=say, seed=config.seed)
    else:
        run.doc.notes.append(
            "Gradients were not checked against finite differences (--no-gradients)."
        )


@dataclass(frozen=True)
class _Setup:
    """A problem ready for its runs, its field timed and its reference ``y(t1)`` solved."""

    problem: Problem
    timer: FieldTimer
    reference: torch.Tensor | None
    eval_s: float
    vjp_s: float


def _setup(
    run: _Run, pname: str, reference: Callable[[Problem], tuple[torch.Tensor, str]] | None
) -> _Setup:
    """Build ``pname``, time its field, solve its ``reference`` (``None``: not run) and add its
    row of ``problems``."""
    problem = make_problem(pname, run.config.sizes, seed=run.config.seed)
    timer = FieldTimer(CountingField(problem.field), problem)
    y1, note = (None, "none: not run") if reference is None else reference(problem)
    if run.config.quick:
        eval_s, vjp_s = timer.evaluation_times(block_s=0.005, blocks=3)
    else:
        eval_s, vjp_s = timer.evaluation_times()
    run.say(
        f"{pname}: {problem.description}; one evaluation {eval_s * 1e6:.0f} us, "
        f"with its VJP {vjp_s * 1e6:.0f} us; reference: {note}"
    )
    shape = list(problem.y0.shape)
    run.doc.problems.append(
        ProblemRow(pname, problem.description, shape, problem.n_parameters, problem.t0,
                   problem.t1, eval_s, vjp_s, note)
    )  # fmt: skip
    return _Setup(problem, timer, y1, eval_s, vjp_s)


def _explicit_problem(run: _Run, pname: str) -> None:
    """Every method, mode and library on one explicit problem, into the document."""
    tol = 1e-8 if run.config.quick else 1e-10
    setup = _setup(run, pname, partial(reference_solution, tol=tol))
    for method in run.config.methods:
        backprop_obs: dict[str, Observation] = {}  # for the other modes' grad_diff
        for mode in MODES:
            cell = _cell(run, setup, method, mode, backprop_obs)
            if mode == "backprop":
                backprop_obs = {name: obs[-1] for name, obs in cell.observations.items() if obs}


def _cell(
    run: _Run, s: _Setup, method: Method, mode: str, backprop_obs: dict[str, Observation]
) -> _Cell:
    """Measure one cell into the document: why each library that cannot run it cannot, its
    evaluation times, each library's figures and, with the compiled library, its row of
    ``compiled``."""
    pname = s.problem.name
    libraries = []
    for lib in run.libraries:
        why = lib.unsupported(method, mode)
        if why is None:
            libraries.append(lib)
            continue
        key = (pname, method.label, lib.name)
        run.doc.results += figure_rows(ResultRow, key, why, MODE_FIGURES[mode])
    if not libraries:
        return _Cell({})
    t0 = time.perf_counter()
    weight = loss_weight(s.problem)
    cell = _measure_cell(libraries, s.problem, method, mode, weight, run.config, s.timer)
    eval_s, vjp_s = median(cell.eval_s), median(cell.vjp_s)
    blocks = max(len(cell.eval_s), len(cell.vjp_s))
    chained_s = median(cell.chained_s)
    run.doc.evaluations.append(
        EvaluationRow(pname, method.label, mode, eval_s, vjp_s, chained_s, blocks)
    )
    run.say(
        f"  {pname} {method.label} {mode}: "
        + ", ".join(_summary(lib.name, cell) for lib in libraries)
        + f" ({time.perf_counter() - t0:.1f} s)"
    )
    eval_s, vjp_s = eval_s or s.eval_s, vjp_s or s.vjp_s
    assert s.reference is not None  # an explicit problem's reference is always solved
    for lib in libraries:
        figures = _cell_figures(lib.name, cell, mode, eval_s, vjp_s, s.reference, backprop_obs)
        key = (pname, method.label, lib.name)
        run.doc.results += figure_rows(ResultRow, key, figures, FIGURE_UNITS)
    if COMPILED in cell.first_call_s or COMPILED in cell.failures:
        run.doc.compiled.append(_compiled_row(pname, method, mode, cell))
    return cell


def _ratio_rows(results: list[ResultRow], peers: list[str]) -> list[RatioRow]:
    """odecore's figure over each peer's, for each problem, method and figure of
    ``RATIO_FIGURES``."""
    values = {(r.problem, r.method, r.library, r.figure): r.value for r in results}
    # a run whose gradient is not finite keeps its time in results, its note says so
    nan = {
        (r.problem, r.method, r.library, r.figure)
        for r in results
        if (r.note or "").startswith("the gradient holds NaN")
    }
    rows = []
    for problem, method in dict.fromkeys((r.problem, r.method) for r in results):
        for peer, figure in itertools.product(peers, RATIO_FIGURES):
            ours = values.get((problem, method, "odecore", figure))
            theirs = values.get((problem, method, peer, figure))
            value, note = ratio(ours, theirs), None
            if nan & {(problem, method, name, figure) for name in ("odecore", peer)}:
                value, note = None, "a gradient of the two holds NaN or inf"
            elif ours is None:
                note = "odecore's figure is missing"
            elif theirs is None:
                note = f"{peer}'s figure is missing"
            elif min(ours, theirs) < 0:  # a cost by subtraction below the noise: no ratio
                value, note = None, "a figure of the two is negative"
            elif value is None:
                note = f"{peer}'s figure is zero"
            rows.append(RatioRow(problem, method, figure, "odecore", peer, value, note))
    return rows


def _compiled_row(pname: str, method: Method, mode: str, cell: _Cell) -> CompiledRow:
    """Compiled against eager odecore in one cell: their median times, the ratio,
    the first call, and how far the compiled solve's result is from the eager one's."""
    eager_obs, compiled_obs = cell.observations["odecore"], cell.observations[COMPILED]
    eager_s = median(o.time_s for o in eager_obs)
    compiled_s = median(o.time_s for o in compiled_obs)
    y1_diff = grad_diff = None
    if eager_obs and compiled_obs:
        a, b = eager_obs[-1], compiled_obs[-1]
        y1_diff = finite(float((a.y1 - b.y1).abs().max()))
        grad_diff = _grad_diff(b, a)
    return CompiledRow(
        pname, method.label, mode, eager_s, compiled_s, ratio(compiled_s, eager_s),
        cell.first_call_s.get(COMPILED), y1_diff, grad_diff, cell.failures.get(COMPILED),
    )  # fmt: skip


def _stiff_problem(run: _Run, pname: str) -> None:
    """Run a stiff problem's sweep into the document, its reference solved once for all of it."""
    odecore_lib = next((lib for lib in run.libraries if lib.name == "odecore"), None)
    s = _setup(run, pname, stiff_reference if odecore_lib else None)
    if odecore_lib is None or s.reference is None:
        run.doc.notes.append(f"{pname} was not run: its methods are odecore's, which is left out.")
        return
    quick = run.config.quick
    run.doc.stiff += run_stiff(
        odecore_lib,
        s.problem,
        stiff_methods(quick),
        s.reference,
        repeats=run.config.n_repeats,
        warm_up=not quick,
        budget_s=None if quick else run.config.cell_budget_s,
        log=run.say,
    )


def _summary(name: str, cell: _Cell) -> str:
    if name in cell.failures:
        return f"{name} failed ({cell.failures[name]})"
    times = median(o.time_s for o in cell.observations[name])
    return f"{name} -" if times is None else f"{name} {times * 1e3:.1f} ms"


def _cell_figures(
    name: str,
    cell: _Cell,
    mode: str,
    eval_s: float,
    vjp_s: float,
    reference: torch.Tensor,
    backprop_obs: dict[str, Observation],
) -> dict[str, tuple[float | None, str | None]]:
    """The figures of one library in one cell, each ``(value, note)``."""
    obs = cell.observations[name]
    if not obs:
        failed = f"failed: {cell.failures[name]}" if name in cell.failures else "no run"
        return unmeasured(MODE_FIGURES[mode], failed)
    note = cell.notes.get(name)
    if name in cell.failures:  # the runs before it stand, as the stiff sweep's do
        note = f"a later run failed: {cell.failures[name]}"
    t = median(o.time_s for o in obs)
    nfe_f = median(o.nfe_forward for o in obs)
    nfe_b = median(o.nfe_backward for o in obs)
    counts = {(o.nfe_forward, o.nfe_backward) for o in obs}
    nfe_note = "evaluations varied between runs; median shown" if len(counts) > 1 else None
    if mode == "forward":
        solver_t = median(cell.solver_s.get(name, []))
        solver_note = cell.solver_notes.get(name)
        return {
            "forward_time_s": (t, note),
            "nfe_forward": (nfe_f, nfe_note),
            "error": error_figure(obs[-1].y1, reference),
            "forward_overhead": (overhead_factor(t, [(nfe_f, eval_s)]), note),
            "forward_cost_per_eval_us": (_us(cost_per_evaluation(t, nfe_f, eval_s)), note),
            "forward_solver_time_s": (solver_t, solver_note),
            "forward_solver_overhead": (overhead_factor(solver_t, [(nfe_f, eval_s)]), solver_note),
            "forward_solver_cost_per_eval_us": (_us(ratio(solver_t, nfe_f)), solver_note),
        }
    terms = [(nfe_f, vjp_s)] if mode == "backprop" else [(nfe_f, eval_s), (nfe_b, vjp_s)]
    gradient = obs[-1].gradient
    not_finite = gradient is not None and not bool(torch.isfinite(gradient).all())
    if not_finite:
        note = "the gradient holds NaN or inf" + (f"; {note}" if note else "")
    out: dict[str, tuple[float | None, str | None]] = {
        f"{mode}_time_s": (t, note),
        f"{mode}_nfe_backward": (nfe_b, nfe_note),
        f"{mode}_overhead": (overhead_factor(t, terms), note),
    }
    if mode != "backprop":
        diff = _grad_diff(obs[-1], backprop_obs.get(name))
        why = "no backprop gradient of this library to compare" if diff is None else None
        out[f"{mode}_grad_diff"] = (
            (None, "the gradient holds NaN or inf") if not_finite else (diff, why)
        )
    return out


def _us(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e6


def _general_notes(config: SolversConfig) -> list[str]:
    """The notes of ``text/solvers.md`` that apply to ``config``, in order."""
    stiff = any(p in STIFF_PROBLEMS for p in config.problem_names)
    wanted = {"compile": config.compile, "stiff": stiff}
    names = [name for name in ("first", "compile", "costs", "stiff") if wanted.get(name, True)]
    return _text_notes(names, warmup=" (quick mode: no warm-up)." if config.quick else ".")


def _text_notes(names: list[str], **fields: str) -> list[str]:
    """The paragraphs of the parts ``names`` of ``text/solvers.md``, each on one line, with
    ``{field}`` filled in."""
    parts = text_parts((resources.files(__package__) / "text" / "solvers.md").read_text("utf-8"))[1]
    notes = [" ".join(p.split()) for name in names for p in parts[name].split("\n\n")]
    for key, value in fields.items():
        notes = [note.replace("{" + key + "}", value) for note in notes]
    return notes
