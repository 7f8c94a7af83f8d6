"""Where a run's code came from and what it ran on: a training's :func:`segment` per
stretch and :func:`environment`, an experiment's :class:`Provenance` and whether it is
:func:`publishable`, ``odebench perf``'s :func:`machine`."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.metadata
import os
import platform
import re
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypedDict

import torch

from ._io import JsonObject

PACKAGES = ("odecore", "odelayers", "contnet", "odebench")
"""The project's packages, whose versions and sources every provenance records."""

HEX40 = re.compile(r"[0-9a-f]{40}")


class Machine(TypedDict):
    """The machine and torch, as :func:`machine` records them for ``odebench perf``."""

    python: str
    platform: str
    machine: str
    processor: str
    cpu_count: int | None
    torch: str
    threads: int


UNKNOWN_SEGMENT: JsonObject = dict.fromkeys(("commit", "dirty", "source", "started", "finished"))
"""The segment of a stretch that recorded none (a checkpoint of an older release)."""


def git(args: list[str], cwd: Path) -> str | None:
    """``git args`` in ``cwd``: its stdout stripped, or ``None`` where git fails."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def repository() -> Path | None:
    """The top of the git checkout of odebench's own source (an editable install), else of
    the working directory; ``None`` outside one."""
    for start in (Path(__file__).resolve().parent, Path.cwd()):
        top = git(["rev-parse", "--show-toplevel"], start)
        if top:
            return Path(top)
    return None


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
    if git(["merge-base", "--is-ancestor", commit, "HEAD"], top) is None:
        return f"{where} ran at {commit[:10]}, which is not in the current history (HEAD)"
    return None


def source_hash() -> str:
    """A SHA-256 of the installed Python sources of :data:`PACKAGES`, paths included: the
    same hash, the same code of every package, whatever the commit (no git needed)."""
    digest = hashlib.sha256()
    for name in PACKAGES:
        root = Path(str(importlib.import_module(name).__file__)).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def now() -> str:
    """The time, ISO 8601 in UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def segment() -> JsonObject:
    """The segment of a stretch of a run that starts now (``finished``: ``None``): the
    checkout's ``HEAD`` and whether ``git status --porcelain`` lists anything (``None``
    outside a checkout), the hash of the sources, the time.

    Example:
        >>> sorted(segment())
        ['commit', 'dirty', 'finished', 'source', 'started']
    """
    top = repository()
    commit = None if top is None else git(["rev-parse", "HEAD"], top)
    status = None if top is None else git(["status", "--porcelain"], top)
    return {
        "commit": commit if commit and HEX40.fullmatch(commit) else None,
        "dirty": None if status is None else bool(status),
        "source": source_hash(),
        "started": now(),
        "finished": None,
    }


def _cpu() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def environment(device: torch.device | str) -> JsonObject:
    """What a run runs on: :class:`Provenance`'s ``versions``, ``threads``, ``cpu``, ``cores``
    and ``device``.

    Args:
        device: the device it trains on; a GPU is named with its model.
    """
    versions: JsonObject = {
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    for name in ("numpy", *PACKAGES):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    device = torch.device(device)
    named = str(device)
    if device.type == "cuda" and torch.cuda.is_available():
        named += f" ({torch.cuda.get_device_name(device)})"
    return {
        "versions": versions,
        "threads": torch.get_num_threads(),
        "cpu": _cpu(),
        "cores": os.cpu_count() or 1,
        "device": named,
    }


def machine() -> Machine:
    """The machine and torch (its threads too), as ``odebench perf``'s documents record them."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


LOAD_SAMPLE_SECONDS = 30.0
"""How often the 1-minute load average is read while a run trains."""


def load_average() -> float | None:
    """The machine's one-minute load average (others slow the timings), ``None`` without one."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on this platform
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
            load = load_average()
            if load is not None:
                self.samples.append(load)

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.samples


@dataclass
class Provenance:
    """Where one run came from (made by ``provenance_started()``); :meth:`to_json` is
    ``results.json``'s ``provenance``.

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

    def __post_init__(self) -> None:
        # Not a field, so not in the JSON: provenance_started() sets it.
        self._sampler: _LoadSampler | None = None

    def finish(self, threads: int | None = None) -> Provenance:
        """Record the end: the load after the run, the samples, the time.

        Args:
            threads: torch's thread count while the runs trained, where it differed
                from the count at the start (an experiment that trains on one thread).
        """
        samples = self._sampler.stop() if self._sampler is not None else []
        after = load_average()
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
        """Whether the largest load seen exceeds the run's own threads by half a core or
        more (timings so taken are not judged: the ``timing`` of
        :class:`~odebench.experiments.Claim`)."""
        peak = self.load.get("max")
        return peak is not None and peak >= min(self.threads, self.cores) + 0.5

    def to_json(self) -> JsonObject:
        """The JSON object (``contended`` included)."""
        return {**dataclasses.asdict(self), "contended": self.contended}


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
    started = {**segment(), **environment(device)}
    provenance = Provenance(**started, load={"before": load_average()})  # type: ignore[arg-type]
    provenance._sampler = _LoadSampler(sample_every)
    return provenance
