"""Declared tables: rows of runs and coordinates, columns of metrics, rendered from a
:class:`Source` of values (an experiment's result, or perf's measured rows) to Markdown
and to the terminal."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._io import markdown_table, text_table
from ._metrics import Coordinate, Metric, Ref, Stat, Values


class Source(Protocol):
    """What a table reads: the statistics of a metric of a run at given coordinates (an
    experiment's ``Result``; a one-sample :class:`Stat` per measured value in perf)."""

    def stat(self, ref: Ref) -> Stat:
        """The :class:`Stat` of ``ref`` (all missing if there is none)."""
        ...


@dataclass(frozen=True)
class Row:
    """One row of a :class:`Table`.

    Args:
        label: the first cell, or the first cells of a table with several label columns.
        run: the run whose metrics the row shows (a column may name another).
        at: the coordinates of the row's metrics (a column adds its own).
        text: cells by column header, shown instead of what the column would show.
        label_of: ``label_of(source)``, the first cell instead of ``label``.
    """

    label: str | tuple[str, ...]
    run: str = ""
    at: Mapping[str, Coordinate] = field(default_factory=dict)
    text: Mapping[str, str] = field(default_factory=dict)
    label_of: Callable[[Any], str] | None = None

    def labels(self, source: Source) -> tuple[str, ...]:
        """The row's label cells."""
        label = self.label if self.label_of is None else self.label_of(source)
        return label if isinstance(label, tuple) else (label,)


@dataclass(frozen=True)
class Col:
    """One column of a :class:`Table`: a metric, a text, or a cell computed from the source.

    Args:
        header: the column's header.
        metric: the metric it shows, of the row's run at the row's coordinates and ``at``.
        at: coordinates the column adds.
        run: the run it shows, whatever the row's; ``{run}`` in it stands for the
            row's run (``"{run}/resnet"``).
        text: the cell where the row has no text under ``header``.
        cell: ``cell(source, row) -> str``, for what is neither a metric nor a text.
        parts: columns whose cells this one joins by ``sep`` (see :meth:`joined`).
        sep: what goes between two cells of ``parts``.
        spread: a ``metric`` shows ``mean ± std`` over the seeds; ``False``: the mean alone.

    Example:
        >>> from odebench.experiments import Metric
        >>> mse = Metric("train_mse")
        >>> Col("ResNet train MSE", mse, run="{run}/resnet").refs(Row("2-D", "2d"))
        [Ref(run='2d/resnet', metric='train_mse', at=())]
    """

    header: str
    metric: Metric | None = None
    at: Mapping[str, Coordinate] = field(default_factory=dict)
    run: str = ""
    text: str = "–"
    cell: Callable[[Any, Row], str] | None = None
    parts: Sequence[Col] = ()
    sep: str = " / "
    spread: bool = True

    @classmethod
    def joined(cls, header: str, *parts: Col | Metric, sep: str = " / ") -> Col:
        """A column whose cell joins the cells of ``parts`` by ``sep``.

        Args:
            header: the column's header.
            parts: the columns joined (their headers are not shown), or metrics of the
                row's run at the row's coordinates.
            sep: what goes between two of their cells.

        Example:
            >>> from odebench.experiments import Metric
            >>> nfe = Metric("nfe", over=("end",), spec=".0f")
            >>> first, last = (Col(end, nfe, {"end": end}) for end in ("first", "last"))
            >>> col = Col.joined("NFE, first → last", first, last, sep=" → ")
            >>> [ref.key for ref in col.refs(Row("ODE-Net", "odenet"))]
            ['nfe@first', 'nfe@last']
        """
        columns = tuple(p if isinstance(p, Col) else cls("", p) for p in parts)
        return cls(header, parts=columns, sep=sep)

    @classmethod
    def per_seed(
        cls,
        header: str,
        value: Callable[[Values, Row], float],
        spec: str = ".4g",
        scale: float = 1.0,
        unit: str = "",
        spread: bool = True,
    ) -> Col:
        """A column of ``value(values, row)`` computed on each seed's values, shown as
        ``mean ± std`` over the seeds (a paired difference or ratio).

        Args:
            header: the column's header.
            value: the number of one seed (NaN where it has none).
            spec, scale, unit: its format, as a :class:`Metric`'s.
            spread: ``False``: the mean alone.

        Example:
            >>> from odebench.experiments import Metric
            >>> acc = Metric("acc")
            >>> col = Col.per_seed("minus the NODE's", lambda v, row: v[acc.of(row.run)]
            ...                    - v[acc.of("node")], "+.1f", 100, " points")
            >>> col.header
            "minus the NODE's"
        """
        return cls(
            header,
            cell=lambda result, row: Stat.of([value(v, row) for v in result.per_seed()]).cell(
                spec, scale, unit, spread
            ),
        )

    def refs(self, row: Row) -> list[Ref]:
        """The metrics this column reads in ``row`` (none for a text or a ``cell``)."""
        if self.header in row.text or self.cell is not None:
            return []
        if self.parts:
            return [ref for part in self.parts for ref in part.refs(row)]
        if self.metric is None:
            return []
        run = self.run.replace("{run}", row.run) if self.run else row.run
        return [self.metric.of(run, **{**row.at, **self.at})]

    def render(self, source: Source, row: Row) -> str:
        """The cell of ``row`` in this column."""
        if self.header in row.text:
            return row.text[self.header]
        if self.cell is not None:
            return self.cell(source, row)
        if self.parts:
            return self.sep.join(part.render(source, row) for part in self.parts)
        if self.metric is not None:
            (ref,) = self.refs(row)
            return source.stat(ref).cell(*ref.format, spread=self.spread)
        return self.text


@dataclass(frozen=True)
class Table:
    """A table of a report.

    Args:
        header: the header of the first column, the rows' labels (or of the first
            columns, for rows labelled by several cells).
        rows: the rows, in order.
        columns: the columns after the first, in order.

    Example:
        >>> from odebench.experiments import Metric
        >>> error = Metric("test_error", over=("tol",), spec=".2f", scale=100, unit="%")
        >>> table = Table(
        ...     "tolerance",
        ...     rows=[Row(f"{tol:g}", run="relu", at={"tol": tol}) for tol in (0.1, 0.001)],
        ...     columns=[Col("test error", error), Col("paper", text="not published")],
        ... )
        >>> [col.header for col in table.columns]
        ['test error', 'paper']
    """

    header: str | tuple[str, ...]
    rows: Sequence[Row]
    columns: Sequence[Col]

    def render(self, source: Source) -> list[list[str]]:
        """The header, then every row, as cells."""
        cells = [
            [*row.labels(source), *(col.render(source, row) for col in self.columns)]
            for row in self.rows
        ]
        labels = self.header if isinstance(self.header, tuple) else (self.header,)
        return [[*labels, *(col.header for col in self.columns)], *cells]

    def markdown(self, source: Source) -> str:
        """The table in Markdown, for a report."""
        header, *rows = self.render(source)
        return markdown_table(header, rows)

    def text(self, source: Source) -> str:
        """The table aligned for a terminal."""
        header, *rows = self.render(source)
        return text_table(header, rows)


def by_run(
    header: str,
    runs: Mapping[str, str],
    columns: Sequence[Col],
    text: Mapping[str, Mapping[str, str]] | None = None,
) -> Table:
    """A table of one row per run: ``runs`` maps each run to its label, ``text`` each
    run to its text cells by column header."""
    rows = [Row(label, run, text=(text or {}).get(run, {})) for run, label in runs.items()]
    return Table(header, rows, columns)


Key = tuple[Coordinate, ...]
"""The values of a row's coordinates, in order."""


@dataclass(frozen=True)
class Measured:
    """A :class:`Source` of values measured once (no seeds), as perf's documents hold
    them: ``values`` maps a metric's name and the values of its coordinates, in order,
    to its value."""

    values: Mapping[tuple[str, Key], float | None]

    @classmethod
    def of(cls, rows: Iterable[Any], over: Sequence[str], fields: Sequence[str] = ()) -> Measured:
        """The values of ``rows`` by metric and the rows' fields ``over``: each row's
        ``figure`` and ``value``; with ``fields``, those fields of each row."""
        if fields:
            return cls({(f, key_of(r, over)): getattr(r, f) for r in rows for f in fields})
        return cls({(r.figure, key_of(r, over)): r.value for r in rows})

    def stat(self, ref: Ref) -> Stat:
        """A one-sample :class:`Stat` of ``ref``'s value."""
        return Stat.of([self.values.get((ref.metric, tuple(v for _, v in ref.at)))])


def key_of(row: Any, over: Sequence[str]) -> Key:
    """The values of ``row``'s fields ``over``, ``None`` as an empty coordinate."""
    return tuple("" if getattr(row, n) is None else getattr(row, n) for n in over)


def keyed_rows(rows: Iterable[Any], over: Sequence[str]) -> list[Row]:
    """A :class:`Row` per distinct value of the fields ``over`` of ``rows`` (those not
    ``supported=False``), in order, labelled by them."""
    keys = dict.fromkeys(key_of(r, over) for r in rows if getattr(r, "supported", True))
    return [Row(tuple(map(str, k)), at=dict(zip(over, k))) for k in keys]


Column = tuple[str, str, str, float]
"""A column of figures: its header, its figure, the format spec and scale of its values."""


def figure_columns(over: Sequence[str], columns: Iterable[Column]) -> list[Col]:
    """A :class:`Col` per ``(header, figure, spec, scale)`` of ``columns``: that figure at
    the row's coordinates ``over``."""
    return [Col(h, Metric(f, tuple(over), spec, scale)) for h, f, spec, scale in columns]
