"""Where a run's code came from and what it ran on, one segment per start of the run.

A training run records, for each stretch it trained in (its first start and every
``--resume``), a *segment*: the git commit and whether the tree was dirty, a hash of
the installed sources of the four packages, and when the stretch started and last
saved. The segments travel in the checkpoint and end up in ``results.json``, so a run
resumed at another commit still says where each of its parts came from (see
:func:`~odebench.experiments.publish`).

The commit is read with ``git`` from the checkout that holds odebench's source (an
editable install) or, failing that, from the working directory. ``dirty`` is true
when ``git status --porcelain`` lists anything: a modified, staged or untracked file
that is not ignored. The hash of the sources needs no git: two segments with the same
hash ran the same code of every package, whatever their commits.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import platform
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

PACKAGES = ("odecore", "odelayers", "contnet", "odebench")
"""The project's packages, whose versions and sources every provenance records."""

HEX40 = re.compile(r"[0-9a-f]{40}")

UNKNOWN_SEGMENT: dict[str, Any] = {
    "commit": None,
    "dirty": None,
    "source": None,
    "started": None,
    "finished": None,
}
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
    """The top of the git checkout the run's code comes from, or ``None``.

    The checkout that holds odebench's own source when it is installed in editable
    mode, else the one around the working directory.
    """
    for start in (Path(__file__).resolve().parent, Path.cwd()):
        top = git(["rev-parse", "--show-toplevel"], start)
        if top:
            return Path(top)
    return None


def source_hash() -> str:
    """A SHA-256 of the installed Python sources of :data:`PACKAGES`, paths included."""
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


def segment() -> dict[str, Any]:
    """The segment of a stretch of a run that starts now (``finished``: ``None``).

    Example:
        >>> sorted(segment())
        ['commit', 'dirty', 'finished', 'source', 'started']
    """
    top = repository()
    commit = git(["rev-parse", "HEAD"], top) if top else None
    status = git(["status", "--porcelain"], top) if top else None
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


def environment(device: torch.device | str) -> dict[str, Any]:
    """What a run runs on: versions, torch's threads, the CPU, its cores, the device.

    Args:
        device: the device it trains on; a GPU is named with its model.
    """
    versions: dict[str, str | None] = {
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
