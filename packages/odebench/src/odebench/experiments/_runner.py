"""The runner of declared experiments: train every run of every seed, measure, check
the claims, write the report; and write a published report again from its values."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import torch

from .._io import JsonObject, write_json, write_text
from .._metrics import Stat, Values
from .._provenance import now, provenance_started
from ..training import Task, TrainConfig, find_data, fit, resolve_device, train
from ._images import not_run
from ._registry import (
    _REGISTRY,
    MODES,
    Experiment,
    Log,
    RunOptions,
    command,
    one_thread,
    read_results,
)
from ._report import Prose, report, with_details
from ._result import Result
from ._template import Measurement, Run, S, Setup, Template, Trained

_TEMPLATES: dict[str, Template[Any]] = {}
TEMPLATES: Mapping[str, Template[Any]] = MappingProxyType(_TEMPLATES)
"""The declared experiments by name, as :func:`register_template` added them."""


def register_template(template: Template[S]) -> Template[S]:
    """Add ``template`` to :data:`~odebench.experiments.EXPERIMENTS` under its name, run
    by :func:`run_template`.

    Returns:
        ``template``, unchanged.
    """
    _TEMPLATES[template.name] = template
    seeds = {mode: template.modes[mode].seeds for mode in MODES}
    modes = {mode: f"{n} seed{'s' if n > 1 else ''}" for mode, n in seeds.items()}
    run = partial(run_template, template)
    _REGISTRY[template.name] = Experiment(template.name, template.description, run, modes)
    return template


def run_template(template: Template[S], options: RunOptions, log: Log = print) -> JsonObject:
    """Run an experiment declared by ``template``: train, measure, aggregate, report.

    Every run of every seed trains into :meth:`Setup.run_dir` and is measured; then
    each metric is aggregated over the seeds, the claims checked, the figures drawn,
    and ``results.json`` and ``report.md`` written. Use it through
    :func:`~odebench.experiments.run_experiment`, which locks ``options.out`` first.

    Args:
        template: the experiment.
        options: the options of ``odebench run``; ``options.mode_name`` picks the mode.
        log: where progress lines go, each tagged with its run (and seed).

    Returns:
        The content of ``results.json``.

    Raises:
        ValueError: ``--epochs`` where it does not apply, or runs that differ in name
            from seed to seed.
    """
    started = time.perf_counter()
    provenance = provenance_started(str(resolve_device(options.device)))
    setup, plans = _setup(template, options, log)
    measured: dict[str, tuple[Measurement, ...]] = {}
    trained: list[Trained] = []
    with one_thread(setup.mode in template.one_thread_modes) as threads:
        try:
            for i, run in enumerate(plans[setup.seeds[0]]):
                done = [_train(setup, plans[seed][i], seed) for seed in setup.seeds]
                measured[run.name] = tuple(
                    template.measure(setup, t)
                    if t.run.skipped is None
                    else Measurement({}, {"not_run": t.run.skipped})
                    for t in done
                )
                trained += done
        finally:
            provenance.finish(threads)
    metrics = {
        name: {
            metric: Stat.of([m.metrics.get(metric) for m in ms])
            for metric in dict.fromkeys(k for m in ms for k in m.metrics)
        }
        for name, ms in measured.items()
    }
    result = Result(
        setup=setup,
        command=command(template.name, options),
        date=now(),
        wall_seconds=time.perf_counter() - started,
        metrics=metrics,
        measurements=measured,
        verdicts=(),
        figures=tuple(f.path for f in template.figures),
        published=template.published,
        train_seconds=sum(t.seconds for t in trained),
        data=template.data(setup) if template.data else _data(trained),
        data_files=_data_files(trained),
        provenance=provenance,
    )
    result = _checked(template, result)
    for figure in template.figures:
        figure.draw(result, options.out / figure.path)
    result = dataclasses.replace(result, wall_seconds=time.perf_counter() - started)
    doc = result.to_json()
    write_json(options.out / "results.json", doc)
    _write_report(template, result, log)
    return doc


def _checked(template: Template[S], result: Result[S]) -> Result[S]:
    """``result`` with its claims checked on its values, each with its details."""
    contended = result.provenance is not None and result.provenance.contended
    claims = template.claims(result.setup)
    verdicts = tuple(c.check(result.per_seed(), contended=contended) for c in claims)
    result = dataclasses.replace(result, verdicts=verdicts)
    return dataclasses.replace(result, verdicts=with_details(template, result))


def _write_report(template: Template[S], result: Result[S], log: Log) -> None:
    """Write ``report.md`` into the output directory, and the tables to ``log``."""
    write_text(result.setup.out / "report.md", report(template, result))
    for name, table in template.tables(result.setup).items():
        log(f"{name}:\n{table.text(result)}")
    log(f"{template.name}: {result.wall_seconds:.0f} s; report in {result.setup.out / 'report.md'}")


def rerender(run_dir: Path, log: Log = print) -> JsonObject:
    """Write an experiment's ``report.md`` again from the per-seed values its
    ``results.json`` holds, with this code and no training; the claims are checked
    again and ``results.json``'s ``claims`` replaced, all else kept.

    Returns:
        The new ``results.json``.

    Raises:
        ValueError: a ``results.json`` of no declared experiment, of a run without
            provenance (one made before it was recorded), or with a ``correction`` of
            its report.
    """
    doc = read_results(run_dir / "results.json")
    template = TEMPLATES.get(doc.get("experiment", ""))
    if template is None or "provenance" not in doc:
        raise ValueError(
            f"{run_dir / 'results.json'} is not the result of a declared experiment with its "
            "provenance; rerun it (`odebench run NAME`)"
        )
    if "correction" in doc:
        raise ValueError(
            f"{run_dir / 'results.json'} holds a correction of its report, which a report "
            "written again would drop; rerun it (`odebench run NAME`)"
        )
    result = _checked(template, Result.from_json(template, doc, run_dir))
    doc = {**doc, "claims": result.to_json()["claims"]}
    write_json(run_dir / "results.json", doc)
    _write_report(template, result, log)
    return doc


def _data(trained: Sequence[Trained]) -> str:
    """The data sets of the ``config`` runs with their sizes, in words."""
    seen = {
        f"{t.result['dataset']} ({t.result['examples']['train']} train / "
        f"{t.result['examples']['test']} test)": None
        for t in trained
        if "examples" in t.result
    }
    return ", ".join(seen)


def _data_files(trained: Sequence[Trained]) -> tuple[dict[str, str], ...]:
    """The files the ``config`` runs read (``results.json``'s ``data_files``), each once."""
    paths = [
        (Path(f["path"]), f["sha256"]) for t in trained for f in t.result.get("data_files", ())
    ]
    seen = {(f"{path.parent.name}/{path.name}", sha256): None for path, sha256 in paths}
    return tuple({"file": file, "sha256": sha256} for file, sha256 in seen)


def _setup(
    template: Template[S], options: RunOptions, log: Log
) -> tuple[Setup[S], dict[int, list[Run]]]:
    """The setup of ``template`` run with ``options``, and the runs of each seed."""
    settings = template.settings_for(options.mode_name, options.epochs)
    seeds = tuple(options.seed + k for k in range(settings.seeds))
    setup = Setup(template.name, options.mode_name, settings, options, seeds, log)
    runs = {seed: template.runs(setup, seed) for seed in seeds}
    skipped: dict[str | None, str] = {}  # each data set a run needs, looked for once
    for dataset in dict.fromkeys(
        run.needs for rs in runs.values() for run in rs if run.needs is not None
    ):
        why = _missing(dataset, options.data_dir)
        if why is not None:
            log(f"{dataset} skipped: {why}")
            skipped[dataset] = not_run(dataset)
    plans = {
        seed: [Run(r.name, skipped=skipped[r.needs]) if r.needs in skipped else r for r in rs]
        for seed, rs in runs.items()
    }
    names = [run.name for run in plans[seeds[0]]]
    for seed, plan in plans.items():
        if [run.name for run in plan] != names or len(set(names)) < len(names):
            raise ValueError(
                f"{template.name}: the runs of seed {seed} are {[r.name for r in plan]}, "
                f"those of seed {seeds[0]} {names}; each seed needs the same distinct names."
            )
    trained = tuple(run.name for run in plans[seeds[0]] if run.skipped is None)
    return dataclasses.replace(setup, trained=trained), plans


def _missing(dataset: str, data_dir: str | None) -> str | None:
    """Why the data set ``dataset`` is not found; ``None``: it is."""
    try:
        find_data(dataset, data_dir)
    except FileNotFoundError as exc:
        return str(exc)
    return None


def _train(setup: Setup[Any], run: Run, seed: int) -> Trained:
    """Train one run of one seed into its folder (resuming it with ``--resume``)."""
    out = setup.run_dir(run.name, seed)
    tag = run.name if len(setup.seeds) == 1 else f"{run.name} seed {seed}"
    if run.skipped is not None:
        return Trained(run, seed, out, None, {}, [])
    options = setup.options

    def log(line: str) -> None:
        setup.log(f"[{tag}] {line}")

    if run.task is not None:
        done = fit(
            _bf16(run.task) if options.bf16 else run.task,
            out, resume=options.resume, log=log,
            device=options.device, progress=options.progress,
        )  # fmt: skip
        return Trained(run, seed, out, None, {}, done.rows, done.model.eval(), done.seconds)
    config = dataclasses.replace(
        cast(TrainConfig, run.config),  # Run checks that it has one of the two
        device=options.device,
        data_dir=options.data_dir,
        progress=options.progress,
        bf16=options.bf16 or cast(TrainConfig, run.config).bf16,
    )
    result = train(config, out, resume=options.resume, log=log)
    history = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    seconds = result["train_seconds"]
    assert isinstance(seconds, (int, float))  # train() sums the epochs' times
    return Trained(run, seed, out, config, result, history, seconds=seconds)


def _bf16(task: Task) -> Task:
    """``task`` with its loss under bfloat16 autocast, on its batch's device, as ``--bf16``
    trains a configured run; its settings say so, and a resume compares them."""

    def loss(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> Any:
        with torch.autocast(batch[0].device.type, dtype=torch.bfloat16):
            return task.loss(model, batch)

    return dataclasses.replace(task, loss=loss, settings={**task.settings, "bf16": True})


def check_declaration(template: Template[Any], mode: str) -> None:
    """Check ``template``'s declaration for ``mode`` before any training: its claims and
    tables read only runs the mode trains, its text details exactly the claims without
    details in code and shows only declared tables.

    Raises:
        KeyError: a claim or a table that reads an unknown run.
        ValueError: a claim without details, details of no claim, or an undeclared
            table in the text.
    """
    setup, _ = _setup(template, RunOptions(out=Path("unused"), mode=mode), lambda _: None)
    claims = list(template.claims(setup))
    for claim in claims:  # a KeyError names the claim and the unknown run
        claim.check([Values.dry_run(setup.trained)])
    for name, table in template.tables(setup).items():
        refs = (ref for row in table.rows for col in table.columns for ref in col.refs(row))
        for ref in refs:
            if ref.run not in setup.trained:
                raise KeyError(f"{template.name}: table {name!r} reads unknown run {ref.run!r}")
    if not template.text:
        return
    prose = Prose.of(template.text)
    bare = {c.key for c in claims if not c.detail}
    if bare != set(prose.details):
        raise ValueError(
            f"text/{template.text}: details for {sorted(set(prose.details) - bare)} match no "
            f"claim without details; {sorted(bare - set(prose.details))} have none"
        )
    unknown = prose.tables() - set(template.tables(setup))
    if unknown:
        raise ValueError(f"text/{template.text}: no table {sorted(unknown)} is declared")
