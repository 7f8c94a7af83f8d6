"""What an experiment measures: declared metrics, their values per seed, and their statistics."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ._io import JsonObject

Coordinate = float | str  # a tolerance, a step count, a name


def fmt(value: float | None, spec: str = ".4g", scale: float = 1.0) -> str:
    """A table cell: the formatted number, or an en dash for a missing one.

    Example:
        >>> fmt(0.01234, ".3g", 1e3), fmt(12.345, "+.3g", 1e3), fmt(None)
        ('12.3', '+12345', '–')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    text = format(value * scale, spec)
    if not (spec.endswith("g") and "e+" in text) or abs(value * scale) >= 2**53:
        return text
    # "g" writes whole numbers from 10**precision on, without an exponent (sign, fill
    # and width kept), below 2**53: digits past it are the double's, not the number's
    return format(
        value * scale, spec.rpartition(".")[0] + ".0f" if "." in spec else spec[:-1] + ".0f"
    )


@dataclass(frozen=True)
class Metric:
    """A number an experiment measures of each trained run, declared once.

    Args:
        name: the metric's name in ``results.json``.
        over: the names of its coordinates, in the order the key shows them.
        spec: the format of its numbers in tables and claims.
        scale: multiplies them before formatting (100 for percent).
        unit: follows them (``"%"``, ``" MiB"``).
        key_format: how :meth:`key` writes the name and coordinates, with fields
            ``{name}`` and those of ``over``; default ``"{name}@{c1}@{c2}..."``.

    Raises:
        ValueError: a coordinate called ``name``, or a ``key_format`` whose fields are
            not ``name`` and ``over``.

    Example:
        >>> error = Metric("test_error", over=("tol",), spec=".2f", scale=100, unit="%")
        >>> error.key(tol=1e-3)
        'test_error@0.001'
        >>> error.of("relu", tol=1e-3)
        Ref(run='relu', metric='test_error', at=(('tol', 0.001),))
        >>> error.key(rtol=1e-3)
        Traceback (most recent call last):
        ...
        ValueError: metric 'test_error' is measured over (tol), got (rtol).
    """

    name: str
    over: tuple[str, ...] = ()
    spec: str = ".4g"
    scale: float = 1.0
    unit: str = ""
    key_format: str = ""

    def __post_init__(self) -> None:
        if "name" in self.over:
            raise ValueError(f"metric {self.name!r}: no coordinate may be called `name`.")
        if not self.key_format:
            fields = "".join(f"@{{{c}}}" for c in self.over)
            object.__setattr__(self, "key_format", "{name}" + fields)
        try:
            self.key_format.format(name=self.name, **dict.fromkeys(self.over, ""))
        except (KeyError, IndexError) as exc:
            raise ValueError(
                f"metric {self.name!r}: `key_format` {self.key_format!r} may use only "
                f"{{name}} and its coordinates ({', '.join(self.over)}), not {exc}."
            ) from None

    def key(self, **at: Coordinate) -> str:
        """The name of the metric at coordinates ``at`` in ``results.json`` (numbers by
        ``:g``, or in full where ``:g``'s six digits would give another number's key)."""
        if set(at) != set(self.over):
            raise ValueError(
                f"metric {self.name!r} is measured over ({', '.join(self.over)}), "
                f"got ({', '.join(at)})."
            )
        texts = {c: v if isinstance(v, str) else _number(v) for c, v in at.items()}
        return self.key_format.format(name=self.name, **texts)

    def of(self, run: str, **at: Coordinate) -> Ref:
        """The metric of ``run`` at coordinates ``at``."""
        self.key(**at)  # checks the coordinates here, where the reference is written
        return Ref(run, self.name, tuple((c, at[c]) for c in self.over), self)

    @property
    def format(self) -> tuple[str, float, str]:
        """``(spec, scale, unit)`` of its numbers."""
        return self.spec, self.scale, self.unit


def _number(value: float) -> str:
    """``value`` by ``:g`` where that reads back as ``value`` (every published key),
    else in full, so that no two numbers share a key.

    Example:
        >>> _number(1e-6), _number(1.0000001e-6), _number(1234567), _number(2.0)
        ('1e-06', '1.0000001e-06', '1234567', '2')
    """
    text = format(value, "g")
    return text if float(text) == value else repr(value if isinstance(value, int) else float(value))


@dataclass(frozen=True)
class Ref:
    """One metric of one run at given coordinates: what a claim or a table reads.

    Made by :meth:`Metric.of`.
    """

    run: str
    metric: str
    at: tuple[tuple[str, Coordinate], ...]
    declared: Metric = field(repr=False, compare=False)

    @property
    def key(self) -> str:
        """The metric's name at its coordinates in ``results.json``."""
        return self.declared.key(**dict(self.at))

    @property
    def format(self) -> tuple[str, float, str]:
        """``(spec, scale, unit)`` of the metric."""
        return self.declared.format


@dataclass(frozen=True)
class Stat:
    """A metric over seeds: mean and sample standard deviation (``n - 1``) of the finite
    values.

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
        # fmean rounds twice (its sum, then the division): kept between the least and
        # the largest value, so that the mean of equal values is that value
        mean = min(max(statistics.fmean(finite), min(finite)), max(finite)) if finite else None
        std = statistics.stdev(finite) if len(finite) > 1 else None
        return cls(mean, std, len(finite), kept)

    def cell(
        self, spec: str = ".4g", scale: float = 1.0, unit: str = "", spread: bool = True
    ) -> str:
        """A table cell: ``mean ± std`` (``mean`` alone for one seed or without ``spread``,
        ``–`` for none); a sign that ``spec`` asks for (``+``) is the mean's alone.

        Example:
            >>> Stat.of([-2.0, -3.0]).cell("+.1f")
            '-2.5 ± 0.7'
        """
        if self.mean is None:
            return "–"
        if self.std is None or not spread:
            return f"{fmt(self.mean, spec, scale)}{unit}"
        std = fmt(self.std, spec.replace("+", ""), scale)
        return f"{fmt(self.mean, spec, scale)} ± {std}{unit}"

    def to_json(self) -> JsonObject:
        """``{"mean", "std", "n", "seeds"}`` for ``results.json``."""
        return {"mean": self.mean, "std": self.std, "n": self.n, "seeds": [*self.values]}


@dataclass(frozen=True)
class Values:
    """One set of metric values, one seed's or the means, looked up as ``values[ref]``.

    Args:
        table: ``{run: {metric: value}}``.
        what: which set it is (``"seed 0"``, ``"the means"``), for error messages.
        dry: every metric of a known run reads as NaN (see :meth:`dry_run`).

    Example:
        >>> saved, nfe, memory = Metric("saved_mib"), Metric("nfe"), Metric("memory")
        >>> v = Values({"odenet": {"saved_mib": 14.2, "nfe": None}}, "seed 0")
        >>> v[saved.of("odenet")], v[nfe.of("odenet")]
        (14.2, nan)
        >>> v[memory.of("odenet")]
        Traceback (most recent call last):
        ...
        KeyError: "no metric 'memory' of run 'odenet' in seed 0; known: saved_mib, nfe"
    """

    table: Mapping[str, Mapping[str, float | None]]
    what: str = "these values"
    dry: bool = False

    @classmethod
    def dry_run(cls, runs: Sequence[str]) -> Values:
        """Values with every metric of ``runs`` NaN and every other run unknown."""
        return cls({run: {} for run in runs}, "the declared runs", dry=True)

    @classmethod
    def means(cls, seeds: Sequence[Values]) -> Values:
        """The means over the seeds of every metric."""
        names: dict[str, dict[str, None]] = {}
        for v in seeds:
            for run, metrics in v.table.items():
                names.setdefault(run, {}).update(dict.fromkeys(metrics))
        table = {
            run: {m: Stat.of([v.table.get(run, {}).get(m) for v in seeds]).mean for m in metrics}
            for run, metrics in names.items()
        }
        return cls(table, "the means over the seeds", dry=any(v.dry for v in seeds))

    def __getitem__(self, ref: Ref) -> float:
        """The value of ``ref``; NaN when it is missing or not finite."""
        run, metric = ref.run, ref.key
        if run not in self.table:
            raise KeyError(f"no run {run!r} in {self.what}; known: {', '.join(self.table)}")
        metrics = self.table[run]
        if self.dry:
            return math.nan
        if metric not in metrics:
            raise KeyError(
                f"no metric {metric!r} of run {run!r} in {self.what}; known: {', '.join(metrics)}"
            )
        value = metrics[metric]
        return math.nan if value is None or not math.isfinite(value) else float(value)
