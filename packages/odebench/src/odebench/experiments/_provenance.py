"""Where an experiment came from: its segments, the machine and its load.

Every experiment's ``results.json`` carries a ``provenance`` object
(:func:`provenance_started`, then :meth:`Provenance.finish`): the commit, the tree's
state and the hash of the sources of the segment that finished it
(:mod:`odebench._provenance`, which every training run records per segment
too), the versions and the machine, and the load while it ran. :func:`publishable`
refuses a run that is not tied to a clean commit of the current history, or one of
whose training runs has a segment that ran other code.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._provenance import HEX40, environment, now, repository, segment
from .._provenance import git as _git

LOAD_SAMPLE_SECONDS = 30.0
"""How often the 1-minute load average is read while a run trains."""


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # not on this platform
        return None


class _LoadSampler:
    """Reads the 1-minute load average every :data:`LOAD_SAMPLE_SECONDS` in a daemon thread."""

    def __init__(self, every: float) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(every,), daemon=True)
        self._thread.start()

    def _loop(self, every: float) -> None:
        while not self._stop.wait(every):
            load = _load()
            if load is not None:
                self.samples.append(load)

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.samples


@dataclass
class Provenance:
    """Where one run came from; :meth:`to_json` is ``results.json``'s ``provenance``.

    Made by ``provenance_started()``; :meth:`finish` records the end.

    Args:
        commit: the checkout's ``HEAD`` (40 hex digits), ``None`` outside a checkout.
        dirty: whether the checkout had changes (``None`` outside a checkout).
        source: the hash of the installed sources of the four packages.
        versions: python, torch, numpy and the four packages.
        threads: torch's thread count while the runs trained.
        cpu: the CPU's model name.
        cores: how many CPUs the machine has.
        device: the device the runs trained on.
        load: the 1-minute load average ``before`` the run, ``after`` it, and the
            ``max`` and ``mean`` of the samples taken while it ran.
        started: when it started, ISO 8601 in UTC.
        finished: when it finished.
    """

    commit: str | None
    dirty: bool | None
    source: str | None
    versions: dict[str, str | None]
    threads: int
    cpu: str
    cores: int
    device: str
    started: str
    load: dict[str, float | None] = field(default_factory=dict)
    finished: str | None = None
    _sampler: _LoadSampler | None = field(default=None, repr=False, compare=False)

    def finish(self, threads: int | None = None) -> Provenance:
        """Record the end: the load after the run, the samples, the time.

        Args:
            threads: torch's thread count while the runs trained, where it differed
                from the count at the start (an experiment that trains on one thread).
        """
        samples = self._sampler.stop() if self._sampler is not None else []
        after = _load()
        seen = [x for x in (self.load.get("before"), *samples, after) if x is not None]
        self.load.update(
            after=after,
            max=max(seen) if seen else None,
            mean=round(sum(samples) / len(samples), 2) if samples else None,
        )
        if threads is not None:
            self.threads = threads
        self.finished = now()
        self._sampler = None
        return self

    @property
    def contended(self) -> bool:
        """Whether the machine was busier than this run alone.

        True when the largest load seen exceeds the run's own threads by half a core
        or more. Timings taken so are not judged (see the ``timing`` of
        :class:`~odebench.experiments.Claim`)."""
        peak = self.load.get("max")
        return peak is not None and peak >= min(self.threads, self.cores) + 0.5

    def to_json(self) -> dict[str, Any]:
        """The JSON object (``contended`` included)."""
        doc = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if not f.name.startswith("_")
        }
        doc["contended"] = self.contended
        return doc


def provenance_started(
    device: str = "cpu", *, sample_every: float = LOAD_SAMPLE_SECONDS
) -> Provenance:
    """The provenance of a run that starts now; the load is sampled until :meth:`Provenance.finish`.

    Args:
        device: the device the run trains on, in words.
        sample_every: seconds between readings of the load average.

    Example:
        >>> p = provenance_started(sample_every=3600).finish()
        >>> sorted(p.to_json()["versions"])[:3], p.finished is not None
        (['contnet', 'numpy', 'odebench'], True)
    """
    here = segment()
    del here["finished"]
    return Provenance(
        **here, **environment(device), load={"before": _load()}, _sampler=_LoadSampler(sample_every)
    )


def publishable(
    doc: Mapping[str, Any],
    where: str,
    trainings: Sequence[tuple[str, Mapping[str, Any]]] = (),
) -> str | None:
    """Why a run's ``results.json`` may not be published, in one line, or ``None``.

    A run is published only when its provenance names a commit of the current
    history (``git merge-base --is-ancestor``) and a clean tree, and when every
    segment of each of its training runs (a start, or a ``--resume``) ran the code it
    finished with: the same hash of the four packages' sources, or (a segment that
    recorded none) the same commit from a clean tree. Their settings cannot differ: a
    resume refuses changed settings but for where and how long it runs. A resumed run
    whose trainings record no segments is refused.

    Args:
        doc: the run's ``results.json``.
        where: the run's folder, for the message.
        trainings: ``(folder, results.json)`` of each of its training runs.
    """
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
