"""A finished experiment: its numbers over the seeds, its verdicts, and ``results.json``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic

from .._io import Json, JsonObject
from .._metrics import Ref, Stat, Values
from .._provenance import Provenance
from ._registry import RunOptions
from ._template import Measurement, S, Setup, Template
from ._verdicts import Verdict


@dataclass(frozen=True)
class Result(Generic[S]):
    """A finished experiment: what the report, the figures and ``results.json`` show.

    Args:
        setup: the mode, settings and options it ran with.
        command: the ``odebench run`` command that reproduces it.
        date: when it finished, ISO 8601 in UTC.
        wall_seconds: its wall time.
        metrics: ``{run: {metric: Stat}}``, in the order the runs were trained.
        measurements: ``{run: (one Measurement per seed)}``.
        verdicts: the checked claims, in the template's order.
        figures: the figure files, relative to ``setup.out``.
        published: the template's published numbers.
        train_seconds: the training time of every run and seed, summed.
        data: the data the runs trained on, in words.
        data_files: the files the ``config`` runs read, each once: ``{"file", "sha256"}``
            (``file`` is its folder and name only).
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

    def stat(self, ref: Ref) -> Stat:
        """The :class:`Stat` of one metric of one run (all missing if the run has none)."""
        missing = Stat(None, None, 0, tuple(None for _ in self.setup.seeds))
        return self.metrics.get(ref.run, {}).get(ref.key, missing)

    def cell(self, ref: Ref) -> str:
        """A table cell of one metric: ``mean ± std`` in the metric's format."""
        return self.stat(ref).cell(*ref.format)

    def per_seed(self) -> list[Values]:
        """The values of each seed, in order: what a claim is tested on."""
        return [
            Values({run: _seed(stats, k) for run, stats in self.metrics.items()}, f"seed {seed}")
            for k, seed in enumerate(self.setup.seeds)
        ]

    def details(self, run: str) -> Mapping[str, Any]:
        """The details of ``run`` measured on the first seed."""
        return self.measurements[run][0].details

    @classmethod
    def from_json(cls, template: Template[S], doc: Mapping[str, Any], out: Path) -> Result[S]:
        """The result ``results.json`` (``doc``, in ``out``) holds, without its verdicts."""
        mode, seeds, path = doc["mode"], doc["seeds"], out / "results.json"
        if not isinstance(seeds, list) or not seeds or any(type(s) is not int for s in seeds):
            raise ValueError(
                f"{path}: `seeds` must list the run's seeds (integers, at least one), got {seeds!r}"
            )
        if mode not in template.modes:
            modes = ", ".join(template.modes)
            raise ValueError(f"{path}: `mode` {mode!r} is none of {template.name}'s: {modes}")
        seeds = tuple(seeds)
        settings = _like(template.modes[mode], doc["settings"])
        known = {f.name for f in dataclasses.fields(Provenance)}
        prov = {"source": None, **{k: v for k, v in doc["provenance"].items() if k in known}}
        options = RunOptions(out=out, mode=mode, seed=seeds[0], resume=doc["provenance"]["resumed"])
        metrics = {
            run: {m: Stat.of(s["seeds"]) for m, s in stats.items()}
            for run, stats in doc["metrics"].items()
        }
        for run, stats in metrics.items():
            for m, stat in stats.items():
                if len(stat.values) != len(seeds):
                    raise ValueError(
                        f"{path}: metric {m!r} of run {run!r} has {len(stat.values)} values, "
                        f"not one for each of its {len(seeds)} `seeds` {list(seeds)}"
                    )
                if stat.to_json() != (stored := doc["metrics"][run][m]):
                    raise ValueError(
                        f"{path}: metric {m!r} of run {run!r} holds {stored}, whose mean, std "
                        f"and n are not those of its values ({stat.to_json()}); give it the "
                        "statistics of its values, or rerun the experiment"
                    )
        details = doc.get("details", {})
        if any(len(d) != len(seeds) for d in details.values() if d):
            raise ValueError(f"{path}: `details` must hold one entry per seed of `seeds` {seeds}")
        measurements = {
            run: tuple(
                Measurement(_seed(stats, k), (details.get(run) or [{}] * len(seeds))[k])
                for k in range(len(seeds))
            )
            for run, stats in metrics.items()
        }
        trained = tuple(run for run, ms in measurements.items() if "not_run" not in ms[0].details)
        return cls(
            setup=Setup(template.name, mode, settings, options, seeds, print, trained),
            command=doc["command"], date=doc["date"], wall_seconds=doc["wall_seconds"],
            metrics=metrics, measurements=measurements, verdicts=(),
            figures=tuple(doc.get("figures", ())), published=doc.get("published", {}),
            train_seconds=doc["train_seconds"], data=doc.get("data", ""),
            data_files=tuple(doc.get("data_files", ())), provenance=Provenance(**prov),
        )  # fmt: skip

    def to_json(self) -> JsonObject:
        """The content of ``results.json``."""
        setup = self.setup
        details = {
            run: [m.details for m in ms]
            for run, ms in self.measurements.items()
            if any(m.details for m in ms)
        }
        doc: dict[str, object] = {
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
            doc["provenance"] = {**self.provenance.to_json(), "resumed": setup.options.resume}
        if self.published:
            doc["published"] = dict(self.published)
        return {k: _json_ready(v) for k, v in doc.items()}


def _seed(stats: Mapping[str, Stat], k: int) -> dict[str, float | None]:
    """The value of each metric of ``stats`` on the ``k``-th seed."""
    return {metric: stat.values[k] for metric, stat in stats.items()}


def _like(example: Any, value: Any) -> Any:
    """``value`` read from JSON in the type of ``example`` (a tuple, a dataclass)."""
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


def _json_ready(value: object) -> Json:
    """``value`` as plain JSON: lists for tuples, ``None`` for NaN and infinities."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"{type(value).__name__} is not JSON: {value!r}")
