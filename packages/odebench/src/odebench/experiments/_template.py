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
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, Literal, TypeVar, cast

import torch
from torch import nn

from .._io import write_json, write_text
from .._provenance import Provenance, provenance_started
from ..training import Task, TrainConfig, fit, load_model, resolve_device, train
from ._registry import (
    _REGISTRY,
    MODES,
    Experiment,
    Log,
    RunOptions,
    command,
    fmt,
    one_thread,
    prefixed,
)


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
class Stat:
    """A metric over seeds: mean and sample standard deviation of the finite values.

    The one place where per-seed values are aggregated. ``std`` is
    ``statistics.stdev`` (``n - 1`` in the denominator); one value has no spread,
    and ``std`` is ``None``.

    Args:
        mean: the mean of the finite values; ``None`` when there are none.
        std: their sample standard deviation; ``None`` for fewer than two.
        n: how many values were finite.
        values: the value of each seed (``None`` where missing or not finite).

    Example:
        >>> Stat.of([0.1, 0.2, None, 0.3]).cell(".1f", 100, "%")
        '20.0 ± 10.0%'
        >>> Stat.of([0.25]).cell(".1f", 100, "%")
        '25.0%'
    """

    mean: float | None
    std: float | None
    n: int
    values: tuple[float | None, ...]

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Stat:
        """The statistics of one value per seed."""
        kept = tuple(float(v) if v is not None and math.isfinite(v) else None for v in values)
        finite = [v for v in kept if v is not None]
        mean = statistics.fmean(finite) if finite else None
        std = statistics.stdev(finite) if len(finite) > 1 else None
        return cls(mean, std, len(finite), kept)

    def cell(self, spec: str = ".4g", scale: float = 1.0, unit: str = "") -> str:
        """A table cell: ``mean ± std`` (``mean`` alone for one seed, ``–`` for none)."""
        if self.mean is None:
            return "–"
        if self.std is None:
            return f"{fmt(self.mean, spec, scale)}{unit}"
        return f"{fmt(self.mean, spec, scale)} ± {fmt(self.std, spec, scale)}{unit}"

    def to_json(self) -> dict[str, Any]:
        """``{"mean", "std", "n", "seeds"}`` for ``results.json``."""
        return {"mean": self.mean, "std": self.std, "n": self.n, "seeds": list(self.values)}


@dataclass(frozen=True)
class Values:
    """One set of metric values, looked up as ``values[run, metric]``: one seed's, or
    the means over the seeds. What a :class:`Claim` tests.

    Args:
        table: ``{run: {metric: value}}``.
        what: which set it is (``"seed 0"``, ``"the means"``), for error messages.

    Example:
        >>> v = Values({"odenet": {"saved_mib": 14.2, "nfe": None}}, "seed 0")
        >>> v["odenet", "saved_mib"], v["odenet", "nfe"]
        (14.2, nan)
        >>> v["odenet", "memory"]
        Traceback (most recent call last):
        ...
        KeyError: "no metric 'memory' of run 'odenet' in seed 0; known: saved_mib, nfe"
    """

    table: Mapping[str, Mapping[str, float | None]]
    what: str = "these values"

    @classmethod
    def means(cls, seeds: Sequence[Values]) -> Values:
        """The means over the seeds of every metric (see :class:`Stat`)."""
        names: dict[str, dict[str, None]] = {}
        for v in seeds:
            for run, metrics in v.table.items():
                names.setdefault(run, {}).update(dict.fromkeys(metrics))
        table = {
            run: {m: Stat.of([v.table.get(run, {}).get(m) for v in seeds]).mean for m in metrics}
            for run, metrics in names.items()
        }
        return cls(table, "the means over the seeds")

    def __getitem__(self, key: tuple[str, str]) -> float:
        """The value of ``(run, metric)``; NaN when it is missing or not finite."""
        run, metric = key
        if run not in self.table:
            raise KeyError(f"no run {run!r} in {self.what}; known: {', '.join(self.table)}")
        metrics = self.table[run]
        if metric not in metrics:
            raise KeyError(
                f"no metric {metric!r} of run {run!r} in {self.what}; known: {', '.join(metrics)}"
            )
        value = metrics[metric]
        return math.nan if value is None or not math.isfinite(value) else float(value)


ClaimKind = Literal["paper", "check"]
"""What a :class:`Claim` is: ``"paper"``, a claim of the paper tested by training;
``"check"``, a property of our implementation (a parameter count, a bound, an exact
identity) that would hold on any seed. Only paper claims count as reproduced."""

CLAIM_KINDS: tuple[ClaimKind, ...] = ("paper", "check")

MAX_CLAIM_TEXT = 90
"""The longest :attr:`Claim.text`: the index shows it in one table cell; the
details go in :attr:`Claim.detail`, which the experiment's report shows."""


@dataclass(frozen=True)
class Claim:
    """A claim of the paper, or a check of our code, and how our numbers test it.

    Args:
        key: a stable identifier (``results.json`` and tests look the verdict up by it).
        text: the claim in a few words (at most ``MAX_CLAIM_TEXT`` (90) characters).
        published: the paper's value: a number (formatted like ours) or a statement.
        ours: the number that shows our side of the claim, from one set of
            :class:`Values` (a metric, a ratio, a difference).
        holds: the test, with its threshold. It is run on the means over the seeds
            and on each seed; see :class:`Verdict` for how the two make the verdict.
            A missing value reads as NaN, and comparisons with NaN are false.
        spec: the format of ``ours`` (and of a numeric ``published``).
        scale: multiplies them before formatting (100 for percent).
        unit: follows them (``"%"``, ``" MiB"``, ``"×"``).
        kind: ``"paper"`` or ``"check"`` (see ``ClaimKind``); no default, so
            that every claim says which it is.
        timing: the claim compares times. It is judged only when the machine was
            not contended while the run trained (:attr:`Provenance.contended`).
        detail: what ``ours`` is and how the threshold was chosen, for the report.

    Raises:
        ValueError: an unknown ``kind``, a ``text`` longer than
            ``MAX_CLAIM_TEXT`` (90), or a timing claim that is a check.

    Example:
        >>> claim = Claim(key="cheap", text="the ODE-Net saves less than the RK-Net",
        ...               published="O(1) against O(L~)",
        ...               ours=lambda v: v["odenet", "mib"] / v["rknet", "mib"],
        ...               holds=lambda v: v["odenet", "mib"] < v["rknet", "mib"],
        ...               spec=".2f", unit="×", kind="paper")
        >>> seeds = [Values({"odenet": {"mib": m}, "rknet": {"mib": 60.0}}) for m in (14.0, 70.0)]
        >>> verdict = claim.check(seeds)
        >>> verdict.ours.cell(".2f"), verdict.status, verdict.words
        ('0.70 ± 0.66', 'mixed', 'mixed: held on 1 of 2 seeds')
    """

    key: str
    text: str
    published: str | float
    ours: Callable[[Values], float]
    holds: Callable[[Values], bool]
    spec: str = ".3g"
    scale: float = 1.0
    unit: str = ""
    kind: ClaimKind = field(kw_only=True)
    timing: bool = field(default=False, kw_only=True)
    detail: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if self.kind not in CLAIM_KINDS:
            raise ValueError(
                f"Claim {self.key!r}: `kind` must be one of {', '.join(CLAIM_KINDS)}, "
                f"got {self.kind!r}."
            )
        if len(self.text) > MAX_CLAIM_TEXT:
            raise ValueError(
                f"Claim {self.key!r}: `text` has {len(self.text)} characters, at most "
                f"{MAX_CLAIM_TEXT} fit the index; move the rest into `detail`."
            )
        if self.timing and self.kind != "paper":
            raise ValueError(f"Claim {self.key!r}: a timing claim is a claim of the paper.")

    @classmethod
    def difference(
        cls,
        key: str,
        text: str,
        published: str | float,
        first: tuple[str, str],
        second: tuple[str, str],
        *,
        kind: ClaimKind,
        above: float | None = None,
        below: float | None = None,
        spec: str = "+.2f",
        scale: float = 1.0,
        unit: str = "",
        detail: str = "",
    ) -> Claim:
        """A comparison of two models by their paired per-seed difference ``v[first] - v[second]``.

        Both models train on the same seeds, so ``ours`` is the difference on each seed:
        its spread over the seeds is the paired spread, not that of two unpaired means.

        Args:
            key, text, published, kind, spec, scale, unit, detail: as for :class:`Claim`.
            first: ``(run, metric)`` of the first model.
            second: ``(run, metric)`` of the second.
            above: the claim holds when the difference is above this.
            below: the claim holds when the difference is below this (with ``above``: both).

        Raises:
            ValueError: neither ``above`` nor ``below``.

        Example:
            >>> claim = Claim.difference("better", "the ANODE is more accurate", "+1.2 points",
            ...                          ("anode", "acc"), ("node", "acc"), above=0.0,
            ...                          kind="paper", scale=100, unit=" points")
            >>> seeds = [Values({"anode": {"acc": a}, "node": {"acc": 0.9}})
            ...          for a in (0.92, 0.93, 0.89)]
            >>> verdict = claim.check(seeds)
            >>> verdict.ours.cell(*claim.format), verdict.words
            ('+1.33 ± +2.08 points', 'held on 2 of 3 seeds')
        """
        if above is None and below is None:
            raise ValueError(f"Claim.difference {key!r}: give `above`, `below` or both.")

        def diff(v: Values) -> float:
            return v[first] - v[second]

        def holds(v: Values) -> bool:
            d = diff(v)
            return (above is None or d > above) and (below is None or d < below)

        return cls(
            key, text, published, diff, holds, spec=spec, scale=scale, unit=unit,
            kind=kind, detail=detail,
        )  # fmt: skip

    @classmethod
    def ratio(
        cls,
        key: str,
        text: str,
        published: str | float,
        over: tuple[str, str],
        under: tuple[str, str],
        *,
        kind: ClaimKind,
        below: float | None = None,
        above: float | None = None,
        spec: str = ".2f",
        timing: bool = False,
        detail: str = "",
    ) -> Claim:
        """A claim on the ratio of two metrics, ``v[over] / v[under]``, shown as ``0.23×``.

        Args:
            key, text, published, kind, timing, detail: as for :class:`Claim`.
            over: ``(run, metric)`` of the numerator.
            under: ``(run, metric)`` of the denominator.
            below: the claim holds when the ratio is below this.
            above: the claim holds when the ratio is above this (with ``below``: both).
            spec: the format of the ratio.

        Raises:
            ValueError: neither ``below`` nor ``above``.

        Example:
            >>> claim = Claim.ratio("small", "the ODE-Net is small", 0.37,
            ...                     ("odenet", "parameters"), ("resnet", "parameters"),
            ...                     below=0.5, kind="check")
            >>> seed = Values({"odenet": {"parameters": 2e5}, "resnet": {"parameters": 6e5}})
            >>> claim.check([seed]).ours.cell(*claim.format), claim.check([seed]).words
            ('0.33×', 'passed')
        """
        if below is None and above is None:
            raise ValueError(f"Claim.ratio {key!r}: give `below`, `above` or both.")

        def ratio(v: Values) -> float:
            return v[over] / v[under]

        def holds(v: Values) -> bool:
            r = ratio(v)
            return (below is None or r < below) and (above is None or r > above)

        return cls(
            key, text, published, ratio, holds, spec=spec, unit="×", kind=kind,
            timing=timing, detail=detail,
        )  # fmt: skip

    def check(self, seeds: Sequence[Values], *, contended: bool = False) -> Verdict:
        """The verdict on the values of each seed (in order) and on their means.

        ``ours`` shows the number the verdict is judged on, ``ours`` of the means, with
        the spread of its values over the seeds: for a claim that is not linear in the
        metrics (a maximum, a ratio) the mean of the per-seed values would differ.

        Args:
            seeds: one set of values per seed.
            contended: the machine was busier than the run alone while it trained
                (:attr:`Provenance.contended`); a timing claim is then not judged.
        """
        means = Values.means(seeds)
        try:
            ours = Stat.of([self.ours(v) for v in seeds])
            on_means = self.ours(means)
            if math.isfinite(on_means):
                ours = dataclasses.replace(ours, mean=float(on_means))
            held_on = tuple(bool(self.holds(v)) for v in seeds)
            holds = bool(self.holds(means))
        except KeyError as exc:
            raise KeyError(f"claim {self.key!r}: {exc.args[0]}") from None
        published = (
            self.published
            if isinstance(self.published, str)
            else f"{fmt(self.published, self.spec, self.scale)}{self.unit}"
        )
        return Verdict(
            self.key, self.text, published, ours, holds, held_on, self.format,
            kind=self.kind, detail=self.detail, contended=self.timing and contended,
        )  # fmt: skip

    @property
    def format(self) -> tuple[str, float, str]:
        """``(spec, scale, unit)`` of the claim's numbers."""
        return self.spec, self.scale, self.unit


VERDICTS = ("held", "mixed", "not held", "contended", "passed", "failed")
"""The statuses of a :class:`Verdict`: the first four of a paper claim, the last two
of a check."""


def verdict_status(kind: str, holds: bool, held_on: Sequence[bool], contended: bool = False) -> str:
    """The one rule that turns a claim's test results into its status.

    A **paper claim** is ``"held"`` when it holds on the means *and* on most seeds
    (more than half), ``"not held"`` when it holds on neither the means nor any seed,
    and ``"mixed"`` otherwise. A timing claim measured on a contended machine is
    ``"contended"``, whatever its numbers. A **check** (``kind="check"``) is
    ``"passed"`` only when it holds on the means and on every seed, else ``"failed"``.

    Example:
        >>> verdict_status("paper", True, [True, False, True])
        'held'
        >>> verdict_status("paper", True, [True, False, False])
        'mixed'
        >>> verdict_status("paper", False, [False, False])
        'not held'
        >>> verdict_status("check", True, [True, False])
        'failed'
    """
    count, n = sum(held_on), len(held_on)
    if kind == "check":
        return "passed" if holds and count == n else "failed"
    if contended:
        return "contended"
    if holds and 2 * count > n:
        return "held"
    return "not held" if not holds and count == 0 else "mixed"


@dataclass(frozen=True)
class Verdict:
    """A checked :class:`Claim`: what the report's table shows of it.

    Args:
        key: the claim's key.
        text: the claim.
        published: the paper's value, as text.
        ours: the claim's number over the seeds.
        holds: whether the claim holds on the means.
        held_on: whether it holds on each seed, in the order of the seeds.
        format: ``(spec, scale, unit)`` of ``ours``.
        kind: the claim's kind, ``"paper"`` or ``"check"``.
        detail: the claim's details, for the report.
        contended: a timing claim measured on a contended machine: not judged.
    """

    key: str
    text: str
    published: str
    ours: Stat
    holds: bool
    held_on: tuple[bool, ...]
    format: tuple[str, float, str] = (".3g", 1.0, "")
    kind: ClaimKind = "paper"
    detail: str = ""
    contended: bool = False

    @property
    def status(self) -> str:
        """One of ``VERDICTS``, by :func:`verdict_status`."""
        return verdict_status(self.kind, self.holds, self.held_on, self.contended)

    @property
    def words(self) -> str:
        """The status in words, with the per-seed count where there are several seeds.

        ``"held on 3 of 3 seeds"``, ``"mixed: held on 1 of 3 seeds, not on the mean"``,
        ``"not held"``, ``"contended: not judged"``, ``"passed"``,
        ``"failed on 1 of 3 seeds"``.
        """
        status, count, n = self.status, sum(self.held_on), len(self.held_on)
        seeds = f"{count} of {n} seeds"
        if status == "held":
            return f"held on {seeds}" if n > 1 else "held"
        if status == "mixed":
            return f"mixed: held on {seeds}" + ("" if self.holds else ", not on the mean")
        if status == "contended":
            return "contended: not judged"
        if status == "failed":
            return f"failed on {n - count} of {n} seeds" if n > 1 else "failed"
        return status

    def to_json(self) -> dict[str, Any]:
        """The verdict for ``results.json``."""
        return {
            "kind": self.kind,
            "text": self.text,
            "detail": self.detail,
            "published": self.published,
            "ours": self.ours.to_json(),
            "holds": self.holds,
            "held_on_seeds": list(self.held_on),
            "status": self.status,
            "verdict": self.words,
            "cell": self.ours.cell(*self.format),
        }


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

    def stat(self, run: str, metric: str) -> Stat:
        """The :class:`Stat` of one metric of one run (all missing if the run has none)."""
        missing = Stat(None, None, 0, tuple(None for _ in self.setup.seeds))
        return self.metrics.get(run, {}).get(metric, missing)

    def cell(
        self, run: str, metric: str, spec: str = ".4g", scale: float = 1.0, unit: str = ""
    ) -> str:
        """A table cell of one metric: ``mean ± std`` over the seeds (see :meth:`Stat.cell`)."""
        return self.stat(run, metric).cell(spec, scale, unit)

    def details(self, run: str) -> Mapping[str, Any]:
        """The details of ``run`` measured on the first seed."""
        return self.measurements[run][0].details

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
            table (its tables, figure links, notes).
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


def register_template(template: Template[S]) -> Template[S]:
    """Add ``template`` to :data:`~odebench.experiments.EXPERIMENTS` under its name.

    ``odebench run NAME`` then runs it with :func:`run_template`, and its modes show
    in the :class:`~odebench.experiments.Experiment` record.

    Returns:
        ``template``, unchanged.
    """
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
    # Every metric in every seed's values: one missing in a seed reads as NaN there.
    per_seed = [
        Values(
            {run: {m: st.values[k] for m, st in stats.items()} for run, stats in metrics.items()},
            f"seed {seed}",
        )
        for k, seed in enumerate(seeds)
    ]
    result = Result(
        setup=setup,
        command=command(template.name, options),
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        wall_seconds=time.perf_counter() - started,
        metrics=metrics,
        measurements=measured,
        verdicts=tuple(
            claim.check(per_seed, contended=provenance.contended)
            for claim in template.claims(setup)
        ),
        figures=tuple(f.path for f in template.figures),
        published=template.published,
        train_seconds=sum(t.seconds for t in trained),
        data=template.data(setup) if template.data else _data(trained),
        data_files=_data_files(trained),
        provenance=provenance,
    )
    for figure in template.figures:
        figure.draw(result, options.out / figure.path)
    result = dataclasses.replace(result, wall_seconds=time.perf_counter() - started)
    doc = result.to_json()
    write_json(options.out / "results.json", doc)
    write_text(options.out / "report.md", _report(template, result))
    log(f"{template.name}: {result.wall_seconds:.0f} s; report in {options.out / 'report.md'}")
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


def _report(template: Template[S], result: Result[S]) -> str:
    """``report.md``: title, command, date, mode, seeds, wall time, claims, sections.

    Args:
        template: the experiment.
        result: its result.

    Returns:
        The Markdown text.
    """
    setup = result.setup
    seeds = ", ".join(str(s) for s in setup.seeds)
    lines = [
        f"# {template.title}",
        "",
        f"`{result.command}`, {result.date}, mode {setup.mode}, "
        f"seed{'s' if len(setup.seeds) > 1 else ''} {seeds}, {result.wall_seconds:.0f} s in all"
        + (
            f" (resumed: {result.train_seconds:.0f} s of training over every run and seed)."
            if setup.options.resume
            else "."
        ),
        "",
        *_provenance_lines(result.provenance),
    ]
    if result.data_files:
        files = ", ".join(f"{f['file']} (SHA-256 {f['sha256'][:16]})" for f in result.data_files)
        lines += [f"Data files read: {files}.", ""]
    papers = [v for v in result.verdicts if v.kind == "paper"]
    checks = [v for v in result.verdicts if v.kind == "check"]
    lines += ["## Claims of the paper", ""]
    if papers:
        lines += [
            "A claim holds when it holds on the mean over the seeds and on most seeds; "
            "otherwise it is mixed, with the per-seed count. A comparison of two models "
            "shows their paired per-seed difference.",
            "",
            *_verdict_table(papers),
        ]
    else:
        lines.append("No claim of a paper is checked here.")
    if checks:
        lines += [
            "",
            "## Checks of our code",
            "",
            "Properties of the implementation (counts, bounds, exact identities): they "
            "hold on every seed or not at all, and are not counted as reproductions.",
            "",
            *_verdict_table(checks),
        ]
    lines.append("")
    sections = template.sections(result).strip("\n")
    return "\n".join([*lines, "", *([sections, ""] if sections else [])])


def _verdict_table(verdicts: Sequence[Verdict]) -> list[str]:
    """The report's table of some verdicts: the claim with its details, published, ours, verdict."""
    lines = [
        "| claim | published | ours (mean ± std, n seeds) | verdict |",
        "|---|---|---|---|",
    ]
    for v in verdicts:
        n = v.ours.n
        ours = f"{v.ours.cell(*v.format)} ({n} seed{'' if n == 1 else 's'})"
        claim = f"**{v.text}**" + (f": {v.detail}" if v.detail else "")
        lines.append(f"| {claim} | {v.published} | {ours} | {v.words} |")
    return lines


def _provenance_lines(provenance: Provenance | None) -> list[str]:
    """One paragraph of where the run came from, for the report."""
    if provenance is None:
        return []
    commit = provenance.commit[:10] if provenance.commit else "no commit"
    if provenance.dirty:
        commit += " (dirty tree: not publishable)"
    load = provenance.load
    busy = " (contended: timings not judged)" if provenance.contended else ""
    versions = ", ".join(f"{k} {v}" for k, v in provenance.versions.items() if v)
    return [
        f"Commit {commit}; {versions}; {provenance.threads} thread"
        f"{'' if provenance.threads == 1 else 's'} on {provenance.cores} × {provenance.cpu}; "
        f"load {load.get('before')} before, {load.get('max')} at most, {load.get('after')} "
        f"after{busy}.",
        "",
    ]


def _json_ready(value: Any) -> Any:
    """``value`` as plain JSON: lists for tuples, ``None`` for NaN and infinities."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    return value
