"""Whether an experiment's run may be published, from the provenance it recorded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._provenance import HEX40, repository
from .._provenance import git as _git


def publishable(
    doc: Mapping[str, Any],
    where: str,
    trainings: Sequence[tuple[str, Mapping[str, Any]]] = (),
) -> str | None:
    """Why a run's ``results.json`` (``doc``, in ``where``) may not be published, in one
    line, or ``None``; ``trainings`` are ``(folder, results.json)`` of its training runs."""
    prov = doc.get("provenance")
    if not isinstance(prov, Mapping) or not prov.get("commit"):
        return f"{where} records no commit (no provenance): rerun it from a clean checkout"
    commit = str(prov["commit"])
    if not HEX40.fullmatch(commit):
        return f"{where} records the commit {commit!r}, which is not 40 hex digits"
    if prov.get("dirty") is not False:
        return f"{where} ran from a dirty tree at {commit[:10]}: commit, then rerun it"
    for run, result in trainings:
        segments = result.get("provenance", {}).get("segments")
        if not segments:
            if prov.get("resumed"):
                return (
                    f"{where} was resumed, but its training {run} records no segments "
                    "(where each part of it came from): rerun it with --overwrite"
                )
            continue
        for part in segments:
            same = (
                part.get("source") == prov.get("source")
                if part.get("source") and prov.get("source")
                else part.get("commit") == commit and part.get("dirty") is False
            )
            if not same:
                at = str(part.get("commit") or "no commit")[:10]
                dirty = "" if part.get("dirty") is False else " from a dirty tree"
                return (
                    f"{where}: its training {run} ran a part at {at}{dirty} (started "
                    f"{part.get('started')}) with code other than {commit[:10]}'s: rerun it "
                    "with --overwrite"
                )
    top = repository()
    if top is None:
        return f"{where}: no git checkout here to check its commit {commit[:10]} against"
    if _git(["merge-base", "--is-ancestor", commit, "HEAD"], top) is None:
        return f"{where} ran at {commit[:10]}, which is not in the current history (HEAD)"
    return None
