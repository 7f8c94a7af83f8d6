"""The experiment template: an experiment declares what it trains, measures and claims.

An experiment is one :class:`Template`: its settings per mode, the runs it trains for
each seed, what it measures of each trained run, the claims it checks, and its own
report sections and figures. :func:`run_template` does everything else, the same way
for every experiment: it trains every run for every seed (``--resume`` continues each
from its checkpoint), measures it, aggregates each metric over the seeds into
:class:`Stat` (mean ± *sample* standard deviation), checks the claims on the means
(:class:`Verdict`), draws the figures, and writes ``results.json`` and ``report.md``.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Toy(Settings):
    ...     epochs: int
    >>> def runs(setup, seed):
    ...     config = TrainConfig(model="toy-node", dataset="annuli-1d", optimizer="adam",
    ...                          epochs=setup.settings.epochs, seed=seed, progress=False)
    ...     return [Run("node", config=config)]
    >>> toy = Template(
    ...     name="toy-example", description="a NODE on g(x)", title="A NODE on g(x)",
    ...     modes={"quick": Toy(epochs=1), "standard": Toy(epochs=5, seeds=3),
    ...            "full": Toy(epochs=10, seeds=5)},
    ...     runs=runs, measure=lambda setup, trained: Measurement(trained.final_metrics()),
    ...     claims=lambda setup: [Claim(
    ...         key="fits", text="the NODE's test MSE is below 1", published="not published",
    ...         ours=lambda v: v["node", "test_loss"], holds=lambda v: v["node", "test_loss"] < 1,
    ...         kind="paper")],
    ... )
    >>> toy.settings_for("standard", epochs=2)
    Toy(seeds=3, epochs=2)
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar, cast

import torch
from torch import nn

from .._io import write_json, write_text
from .._provenance import Provenance, provenance_started
from ..training import Task, TrainConfig, fit, load_model, resolve_device, train
from ._claims import Claim, Verdict
from ._metrics import Ref, Stat, Values
from ._registry import (
    _REGISTRY,
    MODES,
    Experiment,
    Log,
    RunOptions,
    command,
    one_thread,
    prefixed,
    read_results,
)
from ._report import Prose, report, with_details
from ._tables import Table


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The base of an experiment's settings: subclass it as a frozen dataclass.

    One instance per mode (``modes`` of :class:`Template`) holds every number the mode
    changes: epochs, data sizes, batch, learning rate, seeds. The runner reads only
    ``seeds``; ``results.json`` records every field. A subclass that validates its
    fields in ``__post_init__`` calls ``super().__post_init__()``.

    Args:
        seeds: how many seeds each run trains: ``--seed S`` gives ``S, S + 1, ...``.

    Example:
        >>> Settings(seeds=0)
        Traceback (most recent call last):
        ...
        ValueError: `seeds` must be a positive integer, got 0.
    """

    seeds: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 1:
            raise ValueError(f"`seeds` must be a positive integer, got {self.seeds!r}.")


S = TypeVar("S", bound=Settings)


@dataclass(frozen=True)
class Setup(Generic[S]):
    """What every hook of a :class:`Template` is given: the mode, its settings, the options.

    Args:
        name: the experiment's name.
        mode: the mode's name (``"quick"``, ``"standard"``, ``"full"``).
        settings: the mode's settings, with ``--epochs`` applied.
        options: the options of ``odebench run``.
        seeds: the seeds every run trains, in order.
        log: where progress lines go.
    """

    name: str
    mode: str
    settings: S
    options: RunOptions
    seeds: tuple[int, ...]
    log: Log

    @property
    def out(self) -> Path:
        """The experiment's output directory."""
        return self.options.out

    @property
    def device(self) -> torch.device:
        """The device of ``--device``, resolved (``"auto"``: CUDA when available)."""
        return resolve_device(self.options.device)

    def run_dir(self, run: str, seed: int) -> Path:
        """Where run ``run`` of ``seed`` is trained: ``out/<run>`` when the mode trains
        one seed, ``out/<run>/seed<N>`` when it trains several."""
        return self.out / run if len(self.seeds) == 1 else self.out / run / f"seed{seed}"


@dataclass(frozen=True)
class Run:
    """One model an experiment trains for one seed: a configuration or a task.

    Give exactly one of ``config``, ``task`` and ``skipped``.

    Args:
        name: the run's name; its folder is :meth:`Setup.run_dir`, and the claims and
            tables look its metrics up by it. A ``/`` nests folders (``"mnist/node"``).
        config: trained by :func:`odebench.training.train`, with a checkpoint per
            epoch that ``--resume`` continues from. Its ``device``, ``data_dir`` and
            ``progress`` are replaced by the options' (``--device``, ``--data-dir``,
            ``--progress``/``--no-progress``): where and how a run trains is not the
            experiment's to say.
        task: trained by :func:`odebench.training.fit` (for what
            :class:`~odebench.training.TrainConfig` cannot say), with the same
            checkpoints, ``--resume``, ``--device`` and ``--progress``.
        skipped: why the run trains nothing (its data set was not found); ``measure``
            receives it untrained, to say so.

    Example:
        >>> Run("node")
        Traceback (most recent call last):
        ...
        ValueError: Run 'node': give exactly one of `config`, `task` and `skipped`.
    """

    name: str
    config: TrainConfig | None = None
    task: Task | None = None
    skipped: str | None = None

    def __post_init__(self) -> None:
        if not self.name or self.name.startswith("/") or ".." in self.name.split("/"):
            raise ValueError(f"`name` must be a relative folder name, got {self.name!r}.")
        if [self.config, self.task, self.skipped].count(None) != 2:
            raise ValueError(
                f"Run {self.name!r}: give exactly one of `config`, `task` and `skipped`."
            )


@dataclass(frozen=True)
class Trained:
    """One trained run of one seed, as the ``measure`` of a :class:`Template` receives it.

    Args:
        run: what was trained.
        seed: its seed.
        dir: its folder.
        config: the configuration it trained with (``run.config`` with the options'
            device, data directory and progress); ``None`` for a ``task`` run.
        result: :func:`odebench.training.train`'s results (``results.json`` of the
            folder); empty for a ``task`` run.
        history: the rows of ``metrics.json`` (one per epoch).
        model: the trained model of a ``task`` run; ``None`` for a ``config`` run
            (see :meth:`load`) and a skipped one.
        seconds: its training time: the epochs' time over all its resumptions.
    """

    run: Run
    seed: int
    dir: Path
    config: TrainConfig | None
    result: Mapping[str, Any]
    history: Sequence[Mapping[str, Any]]
    model: nn.Module | None = None
    seconds: float = 0.0

    def load(self, device: torch.device | str = "cpu") -> nn.Module:
        """The trained model: the ``task``'s, or rebuilt from the checkpoint in eval mode."""
        if self.model is not None:
            return self.model
        return load_model(self.dir, str(device))[0]

    def final_metrics(self) -> dict[str, float | None]:
        """The numbers of a ``config`` run's results: ``parameters``, ``epochs``,
        ``train_seconds``, ``best_test_acc`` and every number of the last epoch's row
        (``train_loss``, ``test_loss``, ``test_acc``, ``nfe_forward``, ...)."""
        final = self.result.get("final") or {}
        numbers = {k: v for k, v in final.items() if k not in ("epoch", "lr")}
        keys = ("parameters", "epochs", "train_seconds", "best_test_acc")
        return {**{k: self.result.get(k) for k in keys}, **numbers}


@dataclass(frozen=True)
class Measurement:
    """What an experiment measures of one trained run of one seed.

    Args:
        metrics: named numbers; each is aggregated over the seeds into a :class:`Stat`
            (``None``, NaN and infinities count as missing).
        details: anything else the figures or tables need (per-step rows, a sweep),
            kept per seed in ``results.json``; JSON-ready values only.
    """

    metrics: Mapping[str, float | None]
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Result(Generic[S]):
    """A finished experiment: what the report, the figures and ``results.json`` show.

    Args:
        setup: the mode, settings and options it ran with.
        command: the ``odebench run`` command that reproduces it.
        date: when it finished, ISO 8601 in UTC.
        wall_seconds: its wall time so far (the figures are drawn before the last
            reading).
        metrics: ``{run: {metric: Stat}}``, in the order the runs were trained.
        measurements: ``{run: (one Measurement per seed)}``.
        verdicts: the checked claims, in the template's order.
        figures: the figure files, relative to ``setup.out``.
        published: the template's published numbers.
        train_seconds: the training time of every run and seed, summed (it survives
            ``--resume``, which skips finished runs).
        data: the data the runs trained on, in words (``"mnist (8004 train / 1996
            test)"``).
        data_files: the files the ``config`` runs read, each once: ``{"file", "sha256"}``,
            the file named by its folder and name only (published results hold no path
            of the machine that made them).
        provenance: where the run came from (commit, versions, machine, load).
    """

    setup: Setup[S]
    command: str
    date: str
    wall_seconds: float
    metrics: Mapping[str, Mapping[str, Stat]]
    measurements: Mapping[str, tuple[Measurement, ...]]
    verdicts: tuple[Verdict, ...]
    figures: tuple[str, ...] = ()
    published: Mapping[str, Any] = field(default_factory=dict)
    train_seconds: float = 0.0
    data: str = ""
    data_files: tuple[dict[str, str], ...] = ()
    provenance: Provenance | None = None

    @property
    def settings(self) -> S:
        """The settings of the mode."""
        return self.setup.settings

    def stat(self, run: str | Ref, metric: str = "") -> Stat:
        """The :class:`Stat` of a :class:`Ref`, or of ``metric`` of ``run`` (all missing
        if the run has none)."""
        name, key = (run.run, run.key) if isinstance(run, Ref) else (run, metric)
        missing = Stat(None, None, 0, tuple(None for _ in self.setup.seeds))
        return self.metrics.get(name, {}).get(key, missing)

    def cell(
        self,
        run: str | Ref,
        metric: str = "",
        spec: str = ".4g",
        scale: float = 1.0,
        unit: str = "",
    ) -> str:
        """A table cell of one metric: ``mean ± std`` over the seeds (see :meth:`Stat.cell`),
        in the :class:`Ref`'s format when given one."""
        if isinstance(run, Ref):
            return self.stat(run).cell(*run.format)
        return self.stat(run, metric).cell(spec, scale, unit)

    def per_seed(self) -> list[Values]:
        """The values of each seed, in order: what a claim is tested on. Every metric is
        in every seed's values; one missing in a seed reads as NaN there."""
        return [
            Values(
                {
                    run: {m: st.values[k] for m, st in stats.items()}
                    for run, stats in self.metrics.items()
                },
                f"seed {seed}",
            )
            for k, seed in enumerate(self.setup.seeds)
        ]

    def details(self, run: str) -> Mapping[str, Any]:
        """The details of ``run`` measured on the first seed."""
        return self.measurements[run][0].details

    @classmethod
    def from_json(cls, template: Template[S], doc: Mapping[str, Any], out: Path) -> Result[S]:
        """The result ``results.json`` holds (``doc``, its folder ``out``), without its
        verdicts, which :func:`rerender` checks again."""
        mode, seeds = doc["mode"], tuple(doc["seeds"])
        example = template.modes[mode]
        fields = {k: _like(getattr(example, k), v) for k, v in doc["settings"].items()}
        known = {f.name for f in dataclasses.fields(Provenance) if not f.name.startswith("_")}
        prov = {"source": None, **{k: v for k, v in doc["provenance"].items() if k in known}}
        options = RunOptions(out=out, mode=mode, seed=seeds[0], resume=doc["provenance"]["resumed"])
        metrics = {
            run: {m: Stat(s["mean"], s["std"], s["n"], tuple(s["seeds"])) for m, s in stats.items()}
            for run, stats in doc["metrics"].items()
        }
        details = doc.get("details", {})
        measurements = {
            run: tuple(
                Measurement(
                    {m: st.values[k] for m, st in stats.items()},
                    (details.get(run) or [{}] * len(seeds))[k],
                )
                for k in range(len(seeds))
            )
            for run, stats in metrics.items()
        }
        return cls(
            setup=Setup(template.name, mode, type(example)(**fields), options, seeds, print),
            command=doc["command"], date=doc["date"], wall_seconds=doc["wall_seconds"],
            metrics=metrics, measurements=measurements, verdicts=(),
            figures=tuple(doc.get("figures", ())), published=doc.get("published", {}),
            train_seconds=doc["train_seconds"], data=doc.get("data", ""),
            data_files=tuple(doc.get("data_files", ())), provenance=Provenance(**prov),
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The content of ``results.json``."""
        setup = self.setup
        details = {
            run: [m.details for m in ms]
            for run, ms in self.measurements.items()
            if any(m.details for m in ms)
        }
        doc: dict[str, Any] = {
            "experiment": setup.name,
            "mode": setup.mode,
            "quick": setup.mode == "quick",
            "command": self.command,
            "date": self.date,
            "wall_seconds": self.wall_seconds,
            "train_seconds": self.train_seconds,
            "data": self.data,
            "data_files": self.data_files,
            "seeds": list(setup.seeds),
            "settings": dataclasses.asdict(setup.settings),
            "claims": {v.key: v.to_json() for v in self.verdicts},
            "metrics": {
                run: {name: stat.to_json() for name, stat in stats.items()}
                for run, stats in self.metrics.items()
            },
            "details": details,
            "figures": list(self.figures),
        }
        if self.provenance is not None:
            # A resumed run's earlier trainings may come from another commit.
            doc["provenance"] = {**self.provenance.to_json(), "resumed": setup.options.resume}
        if self.published:
            doc["published"] = dict(self.published)
        return cast(dict[str, Any], _json_ready(doc))


@dataclass(frozen=True)
class Figure(Generic[S]):
    """One figure of the report: a file, and the function that draws it.

    Args:
        path: the file, relative to the output directory (``"fig3a.png"``); the
            experiment's sections link to it.
        draw: ``draw(result, path)`` writes the figure to ``path``.
    """

    path: str
    draw: Callable[[Result[S], Path], None]


def _no_claims(setup: Setup[Any]) -> Sequence[Claim]:
    return ()


def _no_sections(result: Result[Any]) -> str:
    return ""


def _no_tables(setup: Setup[Any]) -> Mapping[str, Table]:
    return {}


def _no_words(result: Result[Any]) -> Mapping[str, object]:
    return {}


@dataclass(frozen=True)
class Template(Generic[S]):
    """An experiment of ``odebench run``, declared; :func:`register_template` adds it.

    Args:
        name: the name of ``odebench run NAME``.
        description: one line for ``odebench list``.
        title: the report's title.
        modes: ``{mode: settings}`` for each of
            :data:`~odebench.experiments.MODES`: ``"quick"`` (seconds on a CPU, the
            same code path, for CI), ``"standard"`` (real training sized for a 2-core
            CPU; what ``odebench run NAME`` runs) and ``"full"`` (the paper's
            settings, for a GPU). Every value is of one class.
        runs: ``runs(setup, seed)``: what to train for ``seed``; the same names, in
            the same order, for every seed.
        measure: ``measure(setup, trained)``: the numbers of one trained run of one seed.
        claims: ``claims(setup)``: the paper's claims, checked on the aggregated numbers.
        sections: ``sections(result)``: the experiment's own Markdown, after the claims
            table (its tables, figure links, notes), before its ``text``.
        text: the file of its report text and claim details in ``text/``
            (:class:`~odebench.experiments._report.Prose`); ``""``: none.
        tables: ``tables(setup)``: its declared tables by name, which the text shows
            as ``{table[name]}`` and the terminal gets at the end of the run.
        words: ``words(result)``: further values the text's fields read.
        figures: drawn after the runs, before the report.
        epoch_fields: the settings' fields that ``--epochs`` sets; ``()``: the
            experiment refuses ``--epochs``.
        one_thread_modes: modes that run on one torch thread (small models on a busy
            CPU: steadier timings, and the same numbers from machine to machine).
        published: the paper's numbers, copied into ``results.json``.
        data: ``data(setup)``: the data the runs train on, in words, for experiments
            whose runs are tasks; ``None``: read from the
            configurations of the trained runs.

    Raises:
        ValueError: a mode missing or unknown, modes of different classes, or an ``epoch_fields``
            entry that is not an ``int`` field of the settings.
    """

    name: str
    description: str
    title: str
    modes: Mapping[str, S]
    runs: Callable[[Setup[S], int], Sequence[Run]]
    measure: Callable[[Setup[S], Trained], Measurement]
    claims: Callable[[Setup[S]], Sequence[Claim]] = _no_claims
    sections: Callable[[Result[S]], str] = _no_sections
    text: str = ""
    tables: Callable[[Setup[S]], Mapping[str, Table]] = _no_tables
    words: Callable[[Result[S]], Mapping[str, object]] = _no_words
    figures: Sequence[Figure[S]] = ()
    epoch_fields: tuple[str, ...] = ("epochs",)
    one_thread_modes: tuple[str, ...] = ()
    published: Mapping[str, Any] = field(default_factory=dict)
    data: Callable[[Setup[S]], str] | None = None

    def __post_init__(self) -> None:
        if set(self.modes) != set(MODES):
            raise ValueError(
                f"Template {self.name!r}: `modes` has {', '.join(self.modes) or 'none'}; "
                f"give exactly {', '.join(MODES)}."
            )
        object.__setattr__(self, "modes", MappingProxyType(dict(self.modes)))
        kinds = {type(s) for s in self.modes.values()}
        if len(kinds) > 1 or not isinstance(next(iter(self.modes.values())), Settings):
            raise ValueError(
                f"Template {self.name!r}: every mode's settings must be one Settings "
                f"subclass, got {', '.join(sorted(k.__name__ for k in kinds))}."
            )
        fields = {f.name for f in dataclasses.fields(next(iter(self.modes.values())))}
        unknown = [f for f in self.epoch_fields if f not in fields]
        if unknown:
            raise ValueError(
                f"Template {self.name!r}: `epoch_fields` {unknown} are not fields of its "
                f"settings ({', '.join(sorted(fields))})."
            )

    def settings_for(self, mode: str, epochs: int | None = None) -> S:
        """The settings of ``mode``, with ``epochs`` (``--epochs``) in every epoch field.

        Raises:
            ValueError: an unknown mode (the message lists the known ones), or
                ``epochs`` for an experiment without epoch fields.
        """
        if mode not in self.modes:
            raise ValueError(
                f"{self.name} has no mode {mode!r}; its modes: {', '.join(self.modes)}."
            )
        settings = self.modes[mode]
        if epochs is None:
            return settings
        if not self.epoch_fields:
            raise ValueError(f"--epochs does not apply to {self.name}: it trains no epochs.")
        return dataclasses.replace(settings, **{f: epochs for f in self.epoch_fields})


_TEMPLATES: dict[str, Template[Any]] = {}
TEMPLATES: Mapping[str, Template[Any]] = MappingProxyType(_TEMPLATES)
"""The declared experiments by name, as :func:`register_template` added them."""


def check_declaration(template: Template[Any], mode: str) -> None:
    """Check what ``template`` declares for ``mode`` before any training: every claim and
    table reads only runs the mode trains, and its text has details for exactly the
    claims that give none in code and shows only declared tables.

    Raises:
        KeyError: a claim or a table that reads an unknown run.
        ValueError: a claim without details, details of no claim, or an undeclared
            table in the text.
    """
    options = RunOptions(out=Path("unused"), mode=mode)
    settings = template.settings_for(mode)
    setup = Setup(template.name, mode, settings, options, (0,), lambda _: None)
    runs = [run.name for run in template.runs(setup, 0)]
    claims = list(template.claims(setup))
    for claim in claims:
        claim.check_runs(runs)
    for name, table in template.tables(setup).items():
        for row in table.rows:
            for col in table.columns:
                run = col.run or row.run
                if col.metric is not None and col.header not in row.text and run not in runs:
                    raise KeyError(f"{template.name}: table {name!r} reads unknown run {run!r}")
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


def register_template(template: Template[S]) -> Template[S]:
    """Add ``template`` to :data:`~odebench.experiments.EXPERIMENTS` under its name.

    ``odebench run NAME`` then runs it with :func:`run_template`, and its modes show
    in the :class:`~odebench.experiments.Experiment` record.

    Returns:
        ``template``, unchanged.
    """
    _TEMPLATES[template.name] = template
    _REGISTRY[template.name] = Experiment(
        template.name,
        template.description,
        partial(run_template, template),
        modes={
            mode: f"{s.seeds} seed{'s' if s.seeds > 1 else ''}"
            for mode, s in ((mode, template.modes[mode]) for mode in MODES)
        },
    )
    return template


def run_template(template: Template[S], options: RunOptions, log: Log = print) -> dict[str, Any]:
    """Run an experiment declared by ``template``: train, measure, aggregate, report.

    For every run of the template's ``runs`` and every seed (run by run, seed by
    seed): train it into :meth:`Setup.run_dir` (continuing from its checkpoint with
    ``options.resume``) and measure it. Then aggregate every metric over the seeds
    (:class:`Stat`), check the claims (:class:`Verdict`), draw the figures and write
    ``results.json`` (:meth:`Result.to_json`) and ``report.md``: the title, the
    command, date, mode, seeds and wall time, the claims table, then the
    experiment's own sections.

    Use it through :func:`~odebench.experiments.run_experiment`, which locks and
    prepares ``options.out`` first.

    Args:
        template: the experiment.
        options: the options of ``odebench run``; ``options.mode_name`` picks the mode.
        log: where progress lines go, each tagged with its run (and seed).

    Returns:
        The content of ``results.json``.

    Raises:
        ValueError: an unknown mode, ``--epochs`` where it does not apply, or runs
            that differ in name from seed to seed.
    """
    started = time.perf_counter()
    provenance = provenance_started(str(resolve_device(options.device)))
    mode = options.mode_name
    settings = template.settings_for(mode, options.epochs)
    seeds = tuple(options.seed + k for k in range(settings.seeds))
    setup = Setup(template.name, mode, settings, options, seeds, log)
    plans = {seed: list(template.runs(setup, seed)) for seed in seeds}
    names = [run.name for run in plans[seeds[0]]]
    for seed, runs in plans.items():
        if [run.name for run in runs] != names or len(set(names)) < len(names):
            raise ValueError(
                f"{template.name}: the runs of seed {seed} are {[r.name for r in runs]}, "
                f"those of seed {seeds[0]} {names}; each seed needs the same distinct names."
            )
    measured: dict[str, tuple[Measurement, ...]] = {}
    trained: list[Trained] = []
    threads = torch.get_num_threads()
    try:
        with one_thread(mode in template.one_thread_modes):
            threads = torch.get_num_threads()
            for i, name in enumerate(names):
                done = [_train(setup, plans[seed][i], seed) for seed in seeds]
                measured[name] = tuple(template.measure(setup, t) for t in done)
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
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
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


def rerender(run_dir: Path, log: Log = print) -> dict[str, Any]:
    """Write an experiment's ``report.md`` again from the per-seed values its
    ``results.json`` holds, with this code: no training.

    The claims are checked again on the stored values, and ``results.json``'s
    ``claims`` replaced; everything measured (metrics, details, settings, provenance,
    times) and the figures stay as they were. What published reports do after a
    change to an experiment's text, tables or claims.

    Returns:
        The new ``results.json``; compare its ``claims`` with the old to see a
        verdict that changed.

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


def _train(setup: Setup[Any], run: Run, seed: int) -> Trained:
    """Train one run of one seed into its folder (resuming it with ``--resume``)."""
    out = setup.run_dir(run.name, seed)
    tag = run.name if len(setup.seeds) == 1 else f"{run.name} seed {seed}"
    if run.skipped is not None:
        return Trained(run, seed, out, None, {}, [])
    options = setup.options
    if run.task is not None:
        done = fit(
            run.task, out, resume=options.resume, log=prefixed(setup.log, tag),
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
    result = train(config, out, resume=options.resume, log=prefixed(setup.log, tag))
    history = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    return Trained(run, seed, out, config, result, history, seconds=result["train_seconds"])


def _like(example: Any, value: Any) -> Any:
    """``value`` read from JSON in the type of ``example``: a tuple or a dataclass (of
    tuples or dataclasses) where the settings hold one."""
    if isinstance(example, tuple) and isinstance(value, list):
        inner = example[0] if example else None
        return tuple(_like(inner, v) for v in value)
    if (
        dataclasses.is_dataclass(example)
        and not isinstance(example, type)
        and isinstance(value, dict)
    ):
        return type(example)(**{k: _like(getattr(example, k), v) for k, v in value.items()})
    return value


def _json_ready(value: Any) -> Any:
    """``value`` as plain JSON: lists for tuples, ``None`` for NaN and infinities."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    return value
