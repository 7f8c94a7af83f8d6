"""The environment of an ``odebench`` run in a subprocess, shared by the CLI tests."""

from __future__ import annotations

import os
from pathlib import Path

import odebench


def odebench_env(threads: int | None = 1) -> dict[str, str]:
    """This process's environment with the odebench under test first on the path, and
    ``threads`` torch threads (``None``: as inherited)."""
    env = dict(os.environ)
    src = str(Path(odebench.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env
