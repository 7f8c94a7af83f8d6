"""Claims of a paper and checks of our code, and the verdicts on them over the seeds."""

from __future__ import annotations

import dataclasses
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._metrics import Ref, Stat, Values, fmt
from ._verdicts import CLAIM_KINDS, ClaimKind, Verdict

MAX_CLAIM_TEXT = 90  # the index shows a claim's text in one cell; the rest is its detail


@dataclass(frozen=True)
class Claim:
    """A claim of the paper, or a check of our code, and how our numbers test it.

    Args:
        key: a stable identifier (``results.json`` and tests look the verdict up by it).
        text: the claim in a few words (at most ``MAX_CLAIM_TEXT`` (90) characters).
        published: the paper's value: a number (formatted like ours) or a statement.
        ours: our number, from one set of :class:`Values`.
        holds: the test, run on the means and on each seed (a missing value is NaN).
        spec: the format of ``ours`` (and of a numeric ``published``).
        scale: multiplies them before formatting (100 for percent).
        unit: follows them (``"%"``, ``" MiB"``, ``"×"``).
        kind: ``"paper"`` (a claim of the paper) or ``"check"`` (of our code).
        timing: the claim compares times: not judged on a contended machine.
        detail: what ``ours`` is and how the threshold was chosen, for the report.
        low, high: the bounds ``holds`` tests ``ours`` against, which the text reads as
            ``{claim[key].low}`` (``None``: no such bound, or one ``holds`` keeps to itself);
            the constructors below set them.

    Raises:
        ValueError: an unknown ``kind``, a ``text`` longer than
            ``MAX_CLAIM_TEXT`` (90), or a timing claim that is a check.

    Example:
        >>> from odebench.experiments import Metric
        >>> ode, rk = Metric("mib").of("odenet"), Metric("mib").of("rknet")
        >>> claim = Claim(key="cheap", text="the ODE-Net saves less than the RK-Net",
        ...               published="O(1) against O(L~)", ours=lambda v: v[ode] / v[rk],
        ...               holds=lambda v: v[ode] < v[rk], spec=".2f", unit="×", kind="paper")
        >>> seeds = [Values({"odenet": {"mib": m}, "rknet": {"mib": 60.0}}) for m in (14.0, 70.0)]
        >>> verdict = claim.check(seeds)
        >>> verdict.ours.cell(".2f"), verdict.status, verdict.words
        ('0.70 ± 0.66', 'mixed', 'mixed: held on 1 of 2 seeds')
    """

    key: str
    text: str
    published: str | float
    ours: Callable[[Values], float]
    holds: Callable[[Values], bool]
    spec: str = ".3g"
    scale: float = 1.0
    unit: str = ""
    kind: ClaimKind = field(kw_only=True)
    timing: bool = field(default=False, kw_only=True)
    detail: str = field(default="", kw_only=True)
    low: float | None = field(default=None, kw_only=True)
    high: float | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if self.kind not in CLAIM_KINDS:
            raise ValueError(
                f"Claim {self.key!r}: `kind` must be one of {', '.join(CLAIM_KINDS)}, "
                f"got {self.kind!r}."
            )
        if len(self.text) > MAX_CLAIM_TEXT:
            raise ValueError(
                f"Claim {self.key!r}: `text` has {len(self.text)} characters, at most "
                f"{MAX_CLAIM_TEXT} fit the index; move the rest into `detail`."
            )
        if self.timing and self.kind != "paper":
            raise ValueError(f"Claim {self.key!r}: a timing claim is a claim of the paper.")

    @classmethod
    def difference(
        cls,
        key: str,
        text: str,
        published: str | float,
        first: Ref,
        second: Ref,
        *,
        kind: ClaimKind,
        above: float | None = None,
        below: float | None = None,
        spec: str = "+.2f",
        scale: float = 1.0,
        unit: str = "",
        detail: str = "",
    ) -> Claim:
        """A comparison of two models by their paired per-seed difference ``v[first] - v[second]``.

        Args:
            key, text, published, kind, spec, scale, unit, detail: as for :class:`Claim`.
            first: the metric of the first model.
            second: that of the second.
            above: the claim holds when the difference is above this.
            below: the claim holds when the difference is below this (with ``above``: both).

        Raises:
            ValueError: neither ``above`` nor ``below``.

        Example:
            >>> from odebench.experiments import Metric
            >>> acc = Metric("acc")
            >>> claim = Claim.difference("better", "the ANODE is more accurate", "+1.2 points",
            ...                          acc.of("anode"), acc.of("node"), above=0.0,
            ...                          kind="paper", scale=100, unit=" points")
            >>> seeds = [Values({"anode": {"acc": a}, "node": {"acc": 0.9}})
            ...          for a in (0.92, 0.93, 0.89)]
            >>> verdict = claim.check(seeds)
            >>> verdict.ours.cell(*claim.format), verdict.words
            ('+1.33 ± 2.08 points', 'held on 2 of 3 seeds')
        """
        return cls._between(
            "difference", key, text, published, lambda v: v[first] - v[second], above, below,
            strict=True, spec=spec, scale=scale, unit=unit, kind=kind, detail=detail,
        )  # fmt: skip

    @classmethod
    def ratio(
        cls,
        key: str,
        text: str,
        published: str | float,
        over: Ref,
        under: Ref,
        *,
        kind: ClaimKind,
        below: float | None = None,
        above: float | None = None,
        spec: str = ".2f",
        detail: str = "",
    ) -> Claim:
        """A claim on the ratio of two metrics, ``v[over] / v[under]``, shown as ``0.23×``.

        Args:
            key, text, published, kind, detail: as for :class:`Claim`.
            over: the numerator.
            under: the denominator.
            below: the claim holds when the ratio is below this.
            above: the claim holds when the ratio is above this (with ``below``: both).
            spec: the format of the ratio.

        Raises:
            ValueError: neither ``above`` nor ``below``.

        Example:
            >>> from odebench.experiments import Metric
            >>> params = Metric("parameters")
            >>> claim = Claim.ratio("small", "the ODE-Net is small", 0.37,
            ...                     params.of("odenet"), params.of("resnet"),
            ...                     below=0.5, kind="check")
            >>> seed = Values({"odenet": {"parameters": 2e5}, "resnet": {"parameters": 6e5}})
            >>> claim.check([seed]).ours.cell(*claim.format), claim.check([seed]).words
            ('0.33×', 'passed')
        """
        return cls._between(
            "ratio", key, text, published, lambda v: v[over] / v[under], above, below,
            strict=True, spec=spec, unit="×", kind=kind, detail=detail,
        )  # fmt: skip

    @classmethod
    def at_least(
        cls,
        key: str,
        text: str,
        published: str | float,
        value: Ref | Callable[[Values], float],
        low: float,
        *,
        kind: ClaimKind,
        strict: bool = False,
        spec: str | None = None,
        scale: float | None = None,
        unit: str | None = None,
        timing: bool = False,
        detail: str = "",
    ) -> Claim:
        """The claim that one value is at least ``low``: ``value >= low``, or
        ``value > low`` with ``strict``. A missing value (NaN) never holds.

        Args:
            key, text, published, kind, timing, detail: as for :class:`Claim`.
            value: the value, ``ours``: a metric (a :class:`Ref`) or a function of the
                :class:`Values`.
            low: the bound.
            strict: the bound itself fails (default: it holds).
            spec, scale, unit: as for :class:`Claim`; by default the metric's format
                where ``value`` is a :class:`Ref`, else the claim's default.

        Raises:
            ValueError: a bound that is NaN.

        Example:
            >>> from odebench.experiments import Metric
            >>> acc = Metric("test_acc", spec=".1f", scale=100, unit="%").of("anode")
            >>> claim = Claim.at_least("learns", "the ANODE learns", 0.98, acc, 0.9, kind="paper")
            >>> [claim.check([Values({"anode": {"test_acc": a}})]).words
            ...  for a in (0.95, 0.9, 0.85, None)]
            ['held', 'held', 'not held', 'not held']
            >>> claim.check([Values({"anode": {"test_acc": 0.95}})]).ours.cell(*claim.format)
            '95.0%'
        """
        return cls._between(
            "at_least", key, text, published, value, low, None, strict=strict, spec=spec,
            scale=scale, unit=unit, kind=kind, timing=timing, detail=detail,
        )  # fmt: skip

    @classmethod
    def at_most(
        cls,
        key: str,
        text: str,
        published: str | float,
        value: Ref | Callable[[Values], float],
        high: float,
        *,
        kind: ClaimKind,
        strict: bool = False,
        spec: str | None = None,
        unit: str | None = None,
    ) -> Claim:
        """The claim that one value is at most ``high``: ``value <= high``, or
        ``value < high`` with ``strict``; the arguments as for :meth:`at_least`.

        Example:
            >>> from odebench.experiments import Metric
            >>> error = Metric("error").of("flow")
            >>> claim = Claim.at_most("exact", "the flow is exact", "exact", error, 1e-4,
            ...                       strict=True, spec=".1e", kind="check")
            >>> [claim.check([Values({"flow": {"error": e}})]).words for e in (1e-5, 1e-4)]
            ['passed', 'failed']
        """
        return cls._between(
            "at_most", key, text, published, value, None, high, strict=strict, spec=spec,
            unit=unit, kind=kind,
        )  # fmt: skip

    @classmethod
    def between(
        cls,
        key: str,
        text: str,
        published: str | float,
        value: Ref | Callable[[Values], float],
        low: float,
        high: float,
        *,
        kind: ClaimKind,
        strict: bool = False,
        spec: str | None = None,
        unit: str | None = None,
        detail: str = "",
    ) -> Claim:
        """The claim that one value lies between ``low`` and ``high``, both included
        (``low <= value <= high``), or both excluded with ``strict``; the arguments as
        for :meth:`at_least`.

        Raises:
            ValueError: a bound that is NaN, or ``low`` above ``high``.

        Example:
            >>> from odebench.experiments import Metric
            >>> ratio = Metric("ratio", spec=".2f").of("softplus")
            >>> claim = Claim.between("half", "the ratio is about half", "about 0.5",
            ...                       ratio, 0.35, 0.65, kind="paper")
            >>> [claim.check([Values({"softplus": {"ratio": r}})]).words
            ...  for r in (0.3, 0.35, 0.5, 0.65, 0.7)]
            ['not held', 'held', 'held', 'held', 'not held']
        """
        return cls._between(
            "between", key, text, published, value, low, high, strict=strict, spec=spec,
            unit=unit, kind=kind, detail=detail,
        )  # fmt: skip

    @classmethod
    def _between(
        cls, how: str, key: str, text: str, published: str | float,
        value: Ref | Callable[[Values], float], low: float | None, high: float | None, *,
        strict: bool, spec: str | None = None, scale: float | None = None,
        unit: str | None = None, **kwargs: Any,
    ) -> Claim:  # fmt: skip
        """The claim that ``value`` lies above ``low`` and below ``high`` (``None``: no
        bound), each bound included unless ``strict``."""
        if low is None and high is None:
            raise ValueError(f"Claim.{how} {key!r}: give `above`, `below` or both.")
        if any(b is not None and math.isnan(b) for b in (low, high)):
            raise ValueError(f"Claim.{how} {key!r}: a bound must be a number, got NaN.")
        if low is not None and high is not None and low > high:
            raise ValueError(
                f"Claim.{how} {key!r}: the lower bound {low:g} is above the upper, {high:g}."
            )
        read = operator.itemgetter(value) if isinstance(value, Ref) else value
        default = value.format if isinstance(value, Ref) else (".3g", 1.0, "")
        spec = default[0] if spec is None else spec
        scale = default[1] if scale is None else scale
        unit = default[2] if unit is None else unit

        def holds(v: Values) -> bool:
            x = read(v)
            if strict:
                return (low is None or x > low) and (high is None or x < high)
            return (low is None or x >= low) and (high is None or x <= high)

        return cls(
            key, text, published, read, holds, spec, scale, unit, low=low, high=high, **kwargs
        )

    def check(self, seeds: Sequence[Values], *, contended: bool = False) -> Verdict:
        """The verdict on the values of each seed (in order) and on their means.

        Args:
            seeds: one set of values per seed.
            contended: the machine was contended: a timing claim is not judged.
        """

        def number(v: Values) -> float:  # a ratio over 0 has no number (NaN), not a crash
            try:
                return self.ours(v)
            except ZeroDivisionError:
                return math.nan

        def held(v: Values) -> bool:  # and does not hold
            try:
                return bool(self.holds(v))
            except ZeroDivisionError:
                return False

        try:
            per_seed = [number(v) for v in seeds]
            # Judged on the means over the seeds where the claim has a number, so that a
            # difference or ratio pairs seeds (with one missing, means over all seeds
            # would compare one model's seeds with another's); with none, every mean is NaN.
            paired = [v for v, x in zip(seeds, per_seed, strict=True) if math.isfinite(x)]
            means = Values.means(paired or seeds)
            if not paired:
                means = dataclasses.replace(means, dry=True)
            ours = Stat.of(per_seed)
            on_means = number(means)  # judged on: not the mean of a ratio over seeds
            finite = math.isfinite(on_means)  # (none where the means divide by 0)
            ours = dataclasses.replace(ours, mean=float(on_means) if finite else None)
            held_on = tuple(held(v) for v in seeds)
            holds = held(means)
        except KeyError as exc:
            raise KeyError(f"claim {self.key!r}: {exc.args[0]}") from None
        published = self.published
        if not isinstance(published, str):
            published = f"{fmt(published, self.spec, self.scale)}{self.unit}"
        spec = _resolving(self.spec, self.scale, ours.mean, (self.low, self.high))
        return Verdict(
            self.key, self.text, published, ours, holds, held_on, (spec, self.scale, self.unit),
            kind=self.kind, detail=self.detail, contended=self.timing and contended,
        )  # fmt: skip

    @property
    def format(self) -> tuple[str, float, str]:
        """``(spec, scale, unit)`` of the claim's numbers."""
        return self.spec, self.scale, self.unit


def _resolving(spec: str, scale: float, value: float | None, bounds: Sequence[float | None]) -> str:
    """``spec`` with a digit more, up to 17, while ``value`` reads as one of ``bounds`` that
    it is not (2.004% as "2.00%", and not held at most 2%)."""
    for _ in range(17):
        shown = None if value is None else fmt(value, spec, scale)
        if all(b in (None, value) or fmt(b, spec, scale) != shown for b in bounds):
            break
        spec = re.sub(r"\.(\d+)", lambda m: f".{int(m[1]) + 1}", spec, count=1)
    return spec
