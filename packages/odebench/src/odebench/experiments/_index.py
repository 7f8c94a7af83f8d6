"""The Reproductions index, read from every published ``results.json``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._io import markdown_table
from ._registry import EXPERIMENTS, read_results

SUMMARY = ["experiment", "paper claims", "checks", "data", "seeds", "training", "commit"]

PAPER_STATUSES = ("held", "mixed", "not held")  # counted in every summary row


def reproductions_table(
    results: Path, link: Callable[[str], str | None] = lambda name: f"{name}.md"
) -> str:
    """The Reproductions index of every published run under ``results``, in Markdown.

    Read from each ``results/NAME/results.json`` whose ``NAME`` is an experiment, in
    the order of :data:`~odebench.experiments.EXPERIMENTS`: a summary row per
    experiment, then the claims of the papers and the checks of our code. Only paper
    claims count as reproduced.

    Args:
        results: the folder :func:`~odebench.experiments.publish` wrote into
            (``docs/results``).
        link: the page of an experiment, for its name's link; ``None``: no link.

    Raises:
        FileNotFoundError: ``results`` holds no published run.

    Example:
        >>> import json, tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "pendulum").mkdir()
        >>> claim = {"kind": "paper", "text": "RK4 learns the field", "published": "yes",
        ...          "cell": "0.1 ± 0.02", "holds": True, "held_on_seeds": [True, False, False],
        ...          "status": "mixed", "verdict": "mixed: held on 1 of 3 seeds"}
        >>> _ = (root / "pendulum" / "results.json").write_text(json.dumps({
        ...     "experiment": "pendulum", "mode": "standard", "seeds": [0, 1, 2],
        ...     "data": "pendulum", "train_seconds": 150.0, "claims": {"k": claim},
        ...     "provenance": {"commit": "0123456789abcdef" * 2 + "01234567"}}))
        >>> print(reproductions_table(root))  # doctest: +NORMALIZE_WHITESPACE
        ### Summary
        <BLANKLINE>
        | experiment | paper claims | checks | data | seeds | training | commit |
        |---|---|---|---|---|---|---|
        | [pendulum](pendulum.md) | 0 held · 1 mixed · 0 not held | – | pendulum | 3 | 2.5 min |
          `0123456789` |
        <BLANKLINE>
        ### Claims of the paper
        <BLANKLINE>
        | experiment | claim | published | ours (mean ± std) | verdict |
        |---|---|---|---|---|
        | [pendulum](pendulum.md) | RK4 learns the field | yes | 0.1 ± 0.02 |
          mixed: held on 1 of 3 seeds |
        <BLANKLINE>
        ### Checks of our code
        <BLANKLINE>
        No published run declares a check.
        <BLANKLINE>
    """
    found = [name for name in EXPERIMENTS if (results / name / "results.json").is_file()]
    if not found:
        raise FileNotFoundError(f"no */results.json under {results}; publish runs there first")
    summary: list[list[str]] = []
    tables: dict[str, list[list[str]]] = {"paper": [], "check": []}
    for name in found:
        page = link(name)
        label = name if page is None else f"[{name}]({page})"
        doc = read_results(results / name / "results.json")
        claims = list((doc.get("claims") or {}).values())
        summary.append([label, *_summary(doc, claims)])
        details = (d for seeds in (doc.get("details") or {}).values() for d in seeds if d)
        reasons = dict.fromkeys(d["not_run"] for d in details if d.get("not_run"))
        tables["paper"] += [[label, f"*{reason}*", "–", "–", "not run"] for reason in reasons]
        for c in claims:
            table = tables["check" if c["kind"] == "check" else "paper"]
            table.append([label, c["text"], str(c["published"]), c["cell"], c["verdict"]])
    parts = ["### Summary", "", markdown_table(SUMMARY, summary), ""]
    for kind, title, none in (
        ("paper", "Claims of the paper", "No published run declares a claim of its paper."),
        ("check", "Checks of our code", "No published run declares a check."),
    ):
        header = ["experiment", "claim" if kind == "paper" else "check", "published",
                  "ours (mean ± std)", "verdict"]  # fmt: skip
        text = markdown_table(header, tables[kind]) if tables[kind] else none
        parts += [f"### {title}", "", text, ""]
    return "\n".join(parts)


def _summary(doc: Mapping[str, Any], claims: list[dict[str, Any]]) -> list[str]:
    """The summary row's cells after the experiment's name."""
    provenance = doc["provenance"]  # publish refuses a run without one
    details = doc.get("details") or {}
    paper = Counter(c["status"] for c in claims if c["kind"] == "paper")
    said = []
    if paper:
        said = [f"{paper.pop(status, 0)} {status}" for status in PAPER_STATUSES]
        said += [f"{n} {status}" for status, n in paper.items()]
    skipped = [r for r, seeds in details.items() if any(d and d.get("not_run") for d in seeds)]
    if skipped:
        runs = len(set(doc.get("metrics") or {}) | set(details))
        said.append(f"{len(skipped)} of {runs} runs not run (data absent)")
    checks = [c for c in claims if c["kind"] == "check"]
    passed = sum(c["status"] == "passed" for c in checks)
    n = str(len(doc.get("seeds", [])) or 1)
    mode = doc.get("mode", "standard")
    seeds = {"standard": n, "quick": f"{n} (quick: a smoke test, not a result)"}
    contended = ", contended" if provenance.get("contended") else ""
    return [
        " · ".join(said) or "none",
        f"{passed} of {len(checks)} passed" if checks else "–",
        doc.get("data") or "–",
        seeds.get(mode, f"{n} ({mode})"),
        _minutes(doc.get("train_seconds") or doc.get("wall_seconds")) + contended,
        _commit(provenance),
    ]


def _commit(provenance: dict[str, Any]) -> str:
    commit = provenance.get("commit")
    if not commit:
        return "not from a checkout"
    return f"`{commit[:10]}`" + (" (dirty)" if provenance.get("dirty") else "")


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"
