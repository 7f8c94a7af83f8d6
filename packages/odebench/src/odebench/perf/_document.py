"""The rows of the solver benchmark's JSON document (docs/odebench/perf.md), one frozen
dataclass per kind, whose fields are the row's keys in order."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar, cast, get_args, get_type_hints

from .._io import Json, JsonObject
from .._provenance import machine
from ._stats import finite


@dataclass(frozen=True)
class Row:
    """A row of a section: its JSON object is its fields, in order."""

    def to_json(self) -> JsonObject:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls: type[R], value: Json) -> R:
        """The row that :meth:`to_json` wrote as ``value``."""
        return cls(**json_object(value))


R = TypeVar("R", bound=Row)


@dataclass(frozen=True)
class _Figure(Row):
    """A row with a ``value`` and a ``note``: the value kept only if finite, and a
    ``None`` without a note is "not measured"."""

    def __post_init__(self) -> None:
        row = cast("FigureRow", self)  # each subclass declares the fields
        value = finite(row.value)
        object.__setattr__(self, "value", value)
        if value is None and row.note is None:
            object.__setattr__(self, "note", "not measured")


Measured = Mapping[str, tuple[float | None, str | None]]
"""Figures as a measurement gives them: ``{figure: (value, note)}``."""


def unmeasured(figures: Iterable[str], why: str) -> dict[str, tuple[float | None, str | None]]:
    """Every figure of ``figures`` without a value, for the reason ``why``."""
    return {f: (None, why) for f in figures}


def figure_rows(
    kind: Callable[..., R],
    key: tuple[object, ...],
    figures: Measured | str,
    units: Mapping[str, str],
) -> list[R]:
    """A row of ``kind`` per figure: ``kind(*key, figure, value, unit, note)``, as every row
    type with figures lists its key fields first. ``figures`` a string: why the library
    cannot run them, a row per figure of ``units`` without a value and ``supported=False``."""
    if isinstance(figures, str):
        return [kind(*key, f, None, unit, figures, supported=False) for f, unit in units.items()]
    return [kind(*key, f, value, units[f], note) for f, (value, note) in figures.items()]


def environment(schema_version: int, date: str, **fields: Json) -> JsonObject:
    """How a benchmark's ``environment`` starts: its schema, its date and the machine
    (``machine()`` of ``odebench._provenance``); then ``fields``, in order."""
    return {"schema_version": schema_version, "date": date, **cast(JsonObject, machine()), **fields}


@dataclass(frozen=True)
class ProblemRow(Row):
    name: str
    description: str
    state_shape: list[int]
    n_parameters: int
    t0: float
    t1: float
    eval_time_s: float
    eval_vjp_time_s: float
    reference: str


@dataclass(frozen=True)
class EvaluationRow(Row):
    problem: str
    method: str
    mode: str
    eval_time_s: float | None
    eval_vjp_time_s: float | None
    chained_eval_time_s: float | None
    blocks: int


@dataclass(frozen=True)
class ResultRow(_Figure):
    problem: str
    method: str
    library: str
    figure: str
    value: float | None
    unit: str
    note: str | None = None
    supported: bool = True


@dataclass(frozen=True)
class RatioRow(Row):
    problem: str
    method: str
    figure: str
    library: str
    peer: str
    value: float | None
    note: str | None


@dataclass(frozen=True)
class CompiledRow(Row):
    problem: str
    method: str
    mode: str
    eager_time_s: float | None
    compiled_time_s: float | None
    ratio: float | None
    first_call_s: float | None
    y1_max_abs_diff: float | None
    grad_rel_diff: float | None
    note: str | None


@dataclass(frozen=True)
class StiffRow(_Figure):
    problem: str
    method: str
    solver: str
    rtol: float | None
    atol: float | None
    max_steps: int | None
    library: str
    figure: str
    value: float | None
    unit: str
    note: str | None


@dataclass(frozen=True)
class MemoryRow(_Figure):
    problem: str
    method: str
    n_steps: int | None
    library: str
    gradient: str
    figure: str
    value: float | None
    unit: str
    note: str | None = None
    supported: bool = True


@dataclass(frozen=True)
class GradientRow(_Figure):
    problem: str
    method: str
    library: str
    gradient: str
    figure: str
    value: float | None
    unit: str
    note: str | None = None
    supported: bool = True


FigureRow = ResultRow | RatioRow | StiffRow | MemoryRow | GradientRow
"""The rows with a ``figure``, a ``value`` and a ``note``."""


@dataclass
class Document:
    """The document of ``odebench perf solvers``, filled section by section."""

    environment: JsonObject = field(default_factory=dict)
    problems: list[ProblemRow] = field(default_factory=list)
    evaluations: list[EvaluationRow] = field(default_factory=list)
    results: list[ResultRow] = field(default_factory=list)
    ratios: list[RatioRow] = field(default_factory=list)
    compiled: list[CompiledRow] = field(default_factory=list)
    stiff: list[StiffRow] = field(default_factory=list)
    memory: list[MemoryRow] = field(default_factory=list)
    gradients: list[GradientRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: JsonObject, skip: Collection[str] = ()) -> Document:
        """Read a document back; sections that an older schema lacks, and those of ``skip``,
        come back empty.

        Raises:
            ValueError: a section or a row is not of the JSON type the schema says.
        """
        hints = get_type_hints(cls)
        sections = {
            f.name: [
                get_args(hints[f.name])[0].from_json(row)
                for row in json_array(doc.get(f.name), f"`doc[{f.name!r}]` must be a list of rows")
            ]
            for f in dataclasses.fields(cls)
            if f.name not in ("environment", "notes", *skip)
        }
        notes = [str(note) for note in json_array(doc.get("notes"))]
        return cls(dict(json_object(doc["environment"])), notes=notes, **sections)

    def libraries(self, rows: Iterable[FigureRow]) -> list[str]:
        """The libraries of ``rows``, in the run's order (odecore first), then any other."""
        order = list(json_object(self.environment.get("libraries", {})))
        seen = {r.library for r in rows}
        return [n for n in order if n in seen] + sorted(seen.difference(order))


def json_object(value: Json) -> JsonObject:
    """``value``, which the schema says is a JSON object."""
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {value!r}")
    return value


def json_array(value: Json, what: str = "expected a JSON array") -> list[Json]:
    """``value``, which the schema says is a JSON array; none for a section an older
    schema lacks. ``what`` says what was expected, when it is not."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{what}, got {type(value).__name__}.")
    return value
