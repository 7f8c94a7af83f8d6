"""Verdicts on claims over the seeds, and the one rule that judges them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .._io import JsonObject
from .._metrics import Stat

ClaimKind = Literal["paper", "check"]
CLAIM_KINDS: tuple[ClaimKind, ...] = ("paper", "check")


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
        """Its status, by :func:`verdict_status`."""
        return verdict_status(self.kind, self.holds, self.held_on, self.contended)

    @property
    def words(self) -> str:
        """The status in words, with the per-seed count where there are several seeds
        (``"mixed: held on 1 of 3 seeds, not on the mean"``)."""
        status, count, n = self.status, sum(self.held_on), len(self.held_on)
        seeds = f"{count} of {n} seeds"
        words = {
            "held": f"held on {seeds}" if n > 1 else "held",
            "mixed": f"mixed: held on {seeds}{'' if self.holds else ', not on the mean'}",
            "contended": "contended: not judged",
            "failed": "failed on the mean"  # on no seed
            if count == n
            else (f"failed on {n - count} of {n} seeds" if n > 1 else "failed"),
        }
        return words.get(status, status)

    def to_json(self) -> JsonObject:
        """The verdict for ``results.json``."""
        return {
            "kind": self.kind,
            "text": self.text,
            "detail": self.detail,
            "published": self.published,
            "ours": self.ours.to_json(),
            "holds": self.holds,
            "held_on_seeds": [*self.held_on],
            "status": self.status,
            "verdict": self.words,
            "cell": self.ours.cell(*self.format),
        }
