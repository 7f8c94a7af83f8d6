"""Where a run came from: the commit, the versions, the machine and its load.

Every experiment's ``results.json`` carries a ``provenance`` object
(:func:`provenance_started`, then :meth:`Provenance.finish`), and
:func:`~odebench.experiments.publish` refuses a run whose provenance does not
tie it to a clean commit of the current history (:func:`publishable`).

The commit is read with ``git`` from the checkout that holds odebench's source (an
editable install) or, failing that, from the working directory (``nox -s
reproductions`` runs there with the packages installed from it). ``dirty`` is true
when ``git status --porcelain`` lists anything: a modified, staged or untracked
file that is not ignored.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import platform
import re
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

PACKAGES = ("odecore", "odelayers", "contnet", "odebench")
"""The project's packages, whose versions every provenance records."""

LOAD_SAMPLE_SECONDS = 30.0
"""How often the 1-minute load average is read while a run trains."""

_HEX40 = re.compile(r"[0-9a-f]{40}")


def _git(args: list[str], cwd: Path) -> str | None:
    """``git args`` in ``cwd``: its stdout stripped, or ``None`` where git fails."""
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def repository() -> Path | None:
    """The top of the git checkout the run's code comes from, or ``None``.

    The checkout that holds odebench's own source when it is installed in editable
    mode, else the one around the working directory.
    """
    for start in (Path(__file__).resolve().parent, Path.cwd()):
        top = _git(["rev-parse", "--show-toplevel"], start)
        if top:
            return Path(top)
    return None


def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    for name in ("numpy", *PACKAGES):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _cpu() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # not on this platform
        return None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
        self.finished = _now()
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
    top = repository()
    commit = _git(["rev-parse", "HEAD"], top) if top else None
    status = _git(["status", "--porcelain"], top) if top else None
    return Provenance(
        commit=commit if commit and _HEX40.fullmatch(commit) else None,
        dirty=None if status is None else bool(status),
        versions=_versions(),
        threads=torch.get_num_threads(),
        cpu=_cpu(),
        cores=os.cpu_count() or 1,
        device=device,
        started=_now(),
        load={"before": _load()},
        _sampler=_LoadSampler(sample_every),
    )


def publishable(doc: Mapping[str, Any], where: str) -> str | None:
    """Why a run's ``results.json`` may not be published, in one line, or ``None``.

    A run is published only when its provenance names a commit of the current
    history (``git merge-base --is-ancestor``) and a clean tree.

    Args:
        doc: the run's ``results.json``.
        where: the run's folder, for the message.
    """
    prov = doc.get("provenance")
    if not isinstance(prov, Mapping) or not prov.get("commit"):
        return f"{where} records no commit (no provenance): rerun it from a clean checkout"
    commit = str(prov["commit"])
    if not _HEX40.fullmatch(commit):
        return f"{where} records the commit {commit!r}, which is not 40 hex digits"
    if prov.get("dirty") is not False:
        return f"{where} ran from a dirty tree at {commit[:10]}: commit, then rerun it"
    top = repository()
    if top is None:
        return f"{where}: no git checkout here to check its commit {commit[:10]} against"
    if _git(["merge-base", "--is-ancestor", commit, "HEAD"], top) is None:
        return f"{where} ran at {commit[:10]}, which is not in the current history (HEAD)"
    return None
