"""An experiment's report: its header, the claims' table, and its text with its tables
(the format of ``text/<name>.md``: the design notes)."""

from __future__ import annotations

import dataclasses
import functools
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from .._io import markdown_table, text_parts
from .._provenance import Provenance
from ._verdicts import Verdict

if TYPE_CHECKING:
    from ._claims import Claim
    from ._result import Result
    from ._template import Template

CLAIMS_MARK = "<!-- claims -->"


@dataclass(frozen=True)
class Prose:
    """The text of an experiment's report, read from ``text/<file>``.

    Args:
        report: the sections, with ``str.format`` fields.
        details: each claim's details by its key, with fields as well.
        parts: the paragraphs after ``<!-- part: NAME -->`` lines, by name.
    """

    report: str
    details: Mapping[str, str]
    parts: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @staticmethod
    @functools.cache
    def of(file: str) -> Prose:
        """The text of ``text/<file>`` (or of ``file``, an absolute path); a ``ValueError``
        for a claims paragraph without new ``key:`` heads."""
        path = Path(file)
        where = path if path.is_absolute() else resources.files(__package__) / "text" / file
        text = where.read_text(encoding="utf-8")
        text, _, claims = text.partition(CLAIMS_MARK)
        report, parts = text_parts(text)
        details: dict[str, str] = {}
        for paragraph in claims.strip().split("\n\n") if claims.strip() else ():
            head, colon, detail = paragraph.partition(":")
            keys = [key.strip() for key in head.split(",")]
            if not colon or not all(k.isidentifier() and k not in details for k in keys):
                raise ValueError(
                    f"text/{file}: after {CLAIMS_MARK}, each paragraph is `key: details` (or "
                    f"`key, key: details`) with new claim keys; got {paragraph[:60]!r}"
                )
            details.update(dict.fromkeys(keys, " ".join(detail.split())))
        return Prose(report, details, parts)

    def part(self, name: str, **fields: object) -> str:
        """The paragraph ``name`` with its fields filled in; a ``KeyError`` if none."""
        if name not in self.parts:
            raise KeyError(f"no part {name!r} in the text; its parts: {', '.join(self.parts)}")
        return self.parts[name].format(**fields)

    def tables(self) -> set[str]:
        """The names of the tables its text shows (``{table[name]}``)."""
        texts = [self.report, *self.details.values()]
        names = (name for text in texts for _, name, _, _ in string.Formatter().parse(text))
        return {name[6:-1] for name in names if name and name.startswith("table[")}


def namespace(template: Template[Any], result: Result[Any]) -> dict[str, object]:
    """What the fields of an experiment's text read: ``s``, ``mode``, ``data`` (the data
    the runs trained on, in words), ``table``, ``claim`` (a claim's bounds by its key:
    ``{claim[key].low}``, ``{claim[key].high}``) and the experiment's ``words``."""
    tables = template.tables(result.setup)
    return {
        "s": result.settings,
        "mode": result.setup.mode,
        "data": result.data or "none found",
        "table": {name: table.markdown(result) for name, table in tables.items()},
        "claim": {claim.key: _bounds(claim) for claim in template.claims(result.setup)},
        **template.words(result),
    }


def _bounds(claim: Claim) -> SimpleNamespace:
    """The bounds ``claim`` has, as its numbers are shown (times its ``scale``); a bound
    it lacks is no attribute, so a text that reads one fails instead of showing ``None``."""
    bounds = {"low": claim.low, "high": claim.high}
    return SimpleNamespace(**{k: b * claim.scale for k, b in bounds.items() if b is not None})


def with_details(template: Template[Any], result: Result[Any]) -> tuple[Verdict, ...]:
    """The verdicts of ``result``, each with its details from the experiment's text
    where the claim gives none in code."""
    if not template.text:
        return result.verdicts
    details = Prose.of(template.text).details
    values = namespace(template, result)
    return tuple(
        v
        if v.detail or v.key not in details
        else dataclasses.replace(v, detail=details[v.key].format_map(values))
        for v in result.verdicts
    )


def report(template: Template[Any], result: Result[Any]) -> str:
    """``report.md``: title, command, date, mode, seeds, wall time, claims, then the text."""
    setup = result.setup
    seeds = ", ".join(str(s) for s in setup.seeds)
    resumed = f" (resumed: {result.train_seconds:.0f} s of training over every run and seed)"
    lines = [
        f"# {template.title}",
        "",
        f"`{result.command}`, {result.date}, mode {setup.mode}, "
        f"seed{'s' if len(setup.seeds) > 1 else ''} {seeds}, {result.wall_seconds:.0f} s in all"
        f"{resumed if setup.options.resume else ''}.",
        "",
        *_provenance_lines(result.provenance),
    ]
    if result.data_files:
        files = ", ".join(f"{f['file']} (SHA-256 {f['sha256'][:16]})" for f in result.data_files)
        lines += [f"Data files read: {files}.", ""]
    papers = [v for v in result.verdicts if v.kind == "paper"]
    checks = [v for v in result.verdicts if v.kind == "check"]
    common = Prose.of("common.md")
    lines.append(common.part("paper" if papers else "no_paper"))
    if papers:
        lines += ["", _verdict_table(papers)]
    if checks:
        lines += ["", common.part("checks"), "", _verdict_table(checks)]
    lines.append("")
    body = ""
    if template.text:
        body = Prose.of(template.text).report.format_map(namespace(template, result)).strip("\n")
    return "\n".join([*lines, "", *([body, ""] if body else [])])


def _verdict_table(verdicts: Sequence[Verdict]) -> str:
    """The report's table of some verdicts: the claim with its details, published, ours, verdict."""
    rows = []
    for v in verdicts:
        n = v.ours.n
        ours = f"{v.ours.cell(*v.format)} ({n} seed{'' if n == 1 else 's'})"
        claim = f"**{v.text}**" + (f": {v.detail}" if v.detail else "")
        rows.append([claim, v.published, ours, v.words])
    header = ["claim", "published", "ours (mean ± std, n seeds)", "verdict"]
    return markdown_table(header, rows)


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
    device = "" if provenance.device == "cpu" else f", trained on {provenance.device}"
    return [
        f"Commit {commit}; {versions}; {provenance.threads} thread"
        f"{'' if provenance.threads == 1 else 's'} on {provenance.cores} × {provenance.cpu}"
        f"{device}; "
        f"load {load.get('before')} before, {load.get('max')} at most, {load.get('after')} "
        f"after{busy}.",
        "",
    ]
