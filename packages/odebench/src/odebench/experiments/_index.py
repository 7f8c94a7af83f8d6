"""The Reproductions index: one table of every published claim, read from ``results.json``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ._registry import EXPERIMENTS, read_results
from ._template import Stat

HEADER = (
    "| experiment | claim | published | ours (mean ± std, n seeds) | data | mode | "
    "training time | verdict |"
)


def reproductions_table(
    results: Path, link: Callable[[str], str | None] = lambda name: f"{name}.md"
) -> str:
    """The Markdown table of the claims of every published run under ``results``.

    One row per claim of each ``results/NAME/results.json`` whose ``NAME`` is an
    experiment (one row for a run without claims), in the order of
    :data:`~odebench.experiments.EXPERIMENTS`: the claim, the published value, ours
    with its spread and seed count, the data, the mode, the training time summed over
    runs and seeds, and the verdict on the mean. Every cell comes from the JSON, so
    the table regenerates whenever a run is published again.

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
        >>> _ = (root / "pendulum" / "results.json").write_text(json.dumps({
        ...     "experiment": "pendulum", "mode": "standard", "seeds": [0, 1, 2],
        ...     "data": "pendulum", "train_seconds": 150.0, "claims": {"k": {
        ...         "text": "RK4 learns the field", "published": "yes",
        ...         "cell": "0.1 ± 0.02", "verdict": "held"}}}))
        >>> for cell in reproductions_table(root).splitlines()[-1].strip("| ").split(" | "):
        ...     print(cell)
        [pendulum](pendulum.md)
        RK4 learns the field
        yes
        0.1 ± 0.02 (3 seeds)
        pendulum
        standard
        2.5 min
        held
    """
    found = [name for name in EXPERIMENTS if (results / name / "results.json").is_file()]
    if not found:
        raise FileNotFoundError(f"no */results.json under {results}; publish runs there first")
    lines = [HEADER, "|---|---|---|---|---|---|---|---|"]
    for name in found:
        page = link(name)
        label = name if page is None else f"[{name}]({page})"
        lines += _rows(label, read_results(results / name / "results.json"))
    return "\n".join(lines) + "\n"


def _rows(name: str, doc: dict[str, Any]) -> Iterable[str]:
    seeds = len(doc.get("seeds", [])) or 1
    mode = doc.get("mode", "–")
    if mode == "quick":
        mode = "quick (a smoke test, not a result)"
    common = (doc.get("data") or "–", mode, _minutes(doc))
    claims = doc.get("claims") or {}
    not_run = _not_run(doc)
    for reason in not_run:
        yield _row(name, reason, "–", "–", *common, "not run here")
    if not claims and not not_run:
        yield _row(name, "(no claim checked)", "–", "–", *common, "–")
    for claim in claims.values():
        ours = f"{_cell(claim)} ({seeds} seed{'s' if seeds > 1 else ''})"
        verdict = claim.get("verdict") or ("held" if claim["holds"] else "did not hold")
        yield _row(name, claim["text"], claim["published"], ours, *common, verdict)


def _cell(claim: dict[str, Any]) -> str:
    """The report's cell; for a run published before cells were recorded, mean ± std."""
    if "cell" in claim:
        return str(claim["cell"])
    ours = claim["ours"]
    return Stat(ours["mean"], ours["std"], ours["n"], tuple(ours["seeds"])).cell(".3g")


def _not_run(doc: dict[str, Any]) -> list[str]:
    """Why runs were not trained (a data set that is absent), each reason once."""
    details = doc.get("details") or {}
    reasons = (d.get("not_run") for seeds in details.values() for d in seeds if d)
    return list(dict.fromkeys(r for r in reasons if r))


def _minutes(doc: dict[str, Any]) -> str:
    seconds = doc.get("train_seconds") or doc.get("wall_seconds")
    if seconds is None:
        return "–"
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
