"""An experiment's report: its header, the claims' table, and its text with its tables.

The text of an experiment lives in Markdown beside the code, ``text/<name>.md``
(:class:`Prose`): the report's sections, then, after a line ``<!-- claims -->``, the
details of its claims, a paragraph each that starts with the claim's key (or several
keys, comma-separated, that share it) and a colon. Paragraphs that the experiment
chooses between follow the sections, each after a line ``<!-- part: NAME -->``.
Both are filled in by ``str.format_map`` from :func:`namespace`: ``{s.epochs}`` (the
settings), ``{table[name]}`` (a declared table, in Markdown), and what the
experiment's ``words`` adds.
"""

from __future__ import annotations

import dataclasses
import functools
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._io import text_parts
from .._provenance import Provenance
from ._verdicts import Verdict

if TYPE_CHECKING:
    from ._result import Result
    from ._template import Template

CLAIMS_MARK = "<!-- claims -->"
"""The line of a text file after which the claims' details stand."""


@dataclass(frozen=True)
class Prose:
    """The text of an experiment's report, read from ``text/<file>``.

    Args:
        report: the sections, with ``str.format`` fields.
        details: each claim's details by its key, with fields as well.
        parts: paragraphs that the experiment's ``words`` chooses between (a data set
            found or skipped, a model trained or not), by name: each follows a line
            ``<!-- part: NAME -->`` after the report's sections; see :meth:`part`.
    """

    report: str
    details: Mapping[str, str]
    parts: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @staticmethod
    @functools.cache
    def of(file: str) -> Prose:
        """The text of ``text/<file>`` in this package (or of ``file``, an absolute path).

        Raises:
            ValueError: a paragraph after the claims mark that does not start with
                ``key:``, or a key given twice.
        """
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
        """The paragraph ``name`` of the text with its fields filled in.

        Raises:
            KeyError: naming the part and the parts there are.
        """
        if name not in self.parts:
            raise KeyError(f"no part {name!r} in the text; its parts: {', '.join(self.parts)}")
        return self.parts[name].format(**fields)

    def tables(self) -> set[str]:
        """The names of the tables its text shows (``{table[name]}``)."""
        texts = [self.report, *self.details.values()]
        names = (name for text in texts for _, name, _, _ in string.Formatter().parse(text))
        return {name[6:-1] for name in names if name and name.startswith("table[")}


def namespace(template: Template[Any], result: Result[Any]) -> dict[str, object]:
    """What the fields of an experiment's text read: ``s``, ``mode``, ``table`` and the
    experiment's ``words``."""
    tables = template.tables(result.setup)
    return {
        "s": result.settings,
        "mode": result.setup.mode,
        "table": {name: table.markdown(result) for name, table in tables.items()},
        **template.words(result),
    }


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
    """``report.md``: title, command, date, mode, seeds, wall time, claims, then the text.

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
    body = ""
    if template.text:
        body = Prose.of(template.text).report.format_map(namespace(template, result)).strip("\n")
    return "\n".join([*lines, "", *([body, ""] if body else [])])


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
