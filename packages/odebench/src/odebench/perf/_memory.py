"""Peak memory of forward + backward, each configuration in a fresh process::

    python -m odebench.perf._memory --library odecore --gradient adjoint --steps 1000

How a child measures its peak: docs/odebench/perf.md, ``memory``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import dataclasses
import gc
import json
import os
import re
import resource
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

from ._document import Measured, MemoryRow, figure_rows
from ._libraries import LIBRARIES, Library, Method, describe_error, discover
from ._problems import CountingField, Sizes, make_problem
from ._stats import finite, ratio
from ._timing import loss_weight, run_once

MARK = "ODEBENCH-MEMORY "
MEMORY_MODES = ("backprop", "adjoint", "checkpoint", "reversible")
GROWING = {"backprop": 1000, "checkpoint": 1000}
"""The most steps of the gradient methods whose memory grows with the steps (backprop:
about 2 MiB a step)."""


def _runs(gradient: str, n: int) -> bool:
    """Whether the sweep runs ``gradient`` with ``n`` steps (see :data:`GROWING`)."""
    return n <= GROWING.get(gradient, n)


_MIB = 1024.0


def _status_kib(key: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), or ``None``."""
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii")
    except OSError:
        return None
    found = re.search(rf"^{key}:\s+(\d+) kB$", status, re.MULTILINE)
    return int(found[1]) if found else None


def _reset_peak() -> bool:
    """Reset the high-water mark of the resident set; ``False`` where the kernel forbids it."""
    try:
        Path("/proc/self/clear_refs").write_text("5", encoding="ascii")
    except OSError:
        return False
    return _status_kib("VmHWM") is not None and _status_kib("VmRSS") is not None


def _maxrss_kib() -> int:
    # Linux reports ru_maxrss in KiB, macOS in bytes.
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value // 1024 if sys.platform == "darwin" else value


def _release_free_memory() -> None:
    """Hand the free pages of malloc's heap back to the system, where libc can
    (glibc's ``malloc_trim``; elsewhere nothing happens)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return
    trim(0)


_T = TypeVar("_T")


def _peak_of(run: Callable[[], _T]) -> tuple[int, int, str, _T]:
    """Call ``run`` once: the live resident set before it and its peak (KiB), how the peak
    was read, and what ``run`` returned."""
    gc.collect()
    _release_free_memory()
    resettable = _reset_peak()
    baseline = _status_kib("VmRSS") if resettable else _maxrss_kib()
    result = run()
    peak = _status_kib("VmHWM") if resettable else _maxrss_kib()
    assert baseline is not None and peak is not None
    how = "VmHWM after clear_refs" if resettable else "ru_maxrss (peak not resettable)"
    return baseline, peak, how, result


@dataclass(frozen=True)
class Peak:
    """What a child prints after :data:`MARK`: its peak above the baseline, or an error."""

    baseline_rss_mib: float | None = None
    peak_rss_mib: float | None = None
    peak_delta_mib: float | None = None
    nfe_forward: int | None = None
    nfe_backward: int | None = None
    how: str | None = None
    error: str | None = None

    def line(self) -> str:
        return MARK + json.dumps(dataclasses.asdict(self))


def child(argv: Sequence[str] | None = None) -> int:
    """The child process: measure one configuration and print its JSON line."""
    parser = argparse.ArgumentParser(prog="python -m odebench.perf._memory")
    parser.add_argument("--library", required=True, choices=LIBRARIES)
    parser.add_argument("--gradient", required=True, choices=MEMORY_MODES)
    parser.add_argument("--steps", required=True, type=int)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=Sizes().mlp_batch)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    libraries, missing = discover([args.library])
    if not libraries:
        print(Peak(error=missing.get(args.library, "unavailable")).line())
        return 0
    library = libraries[0]
    problem = make_problem("mlp", Sizes(mlp_batch=args.batch))
    counter = CountingField(problem.field, limit=None)  # fixed steps: no runaway solve
    weight = loss_weight(problem)
    method = Method("rk4", n_steps=args.steps)
    try:
        run_once(library, problem, counter, Method("rk4", n_steps=2), args.gradient, weight)
        baseline, peak, how, obs = _peak_of(
            lambda: run_once(library, problem, counter, method, args.gradient, weight)
        )
    except Exception as exc:
        print(Peak(error=describe_error(exc)).line())
        return 0
    result = Peak(
        baseline_rss_mib=baseline / _MIB,
        peak_rss_mib=peak / _MIB,
        peak_delta_mib=(peak - baseline) / _MIB,
        nfe_forward=obs.nfe_forward,
        nfe_backward=obs.nfe_backward,
        how=how,
    )
    print(result.line())
    return 0


def _child_env() -> dict[str, str]:
    """The environment of a child: this process's, with odebench's own location on the path."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[2])  # the directory that holds odebench/
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = here if not path else here + os.pathsep + path
    return env


_Job = tuple[str, str, int]
"""A child's configuration: library, gradient method, number of steps."""


def _run_child(job: _Job, threads: int, batch: int, timeout_s: float) -> Peak:
    library, gradient, steps = job
    cmd = [sys.executable, "-m", "odebench.perf._memory", "--library", library]
    cmd += ["--gradient", gradient, "--steps", str(steps)]
    cmd += ["--threads", str(threads), "--batch", str(batch)]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=_child_env(), check=False
        )
    except subprocess.TimeoutExpired:
        return Peak(error=f"the child process ran past {timeout_s:g} s")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            return Peak(**json.loads(line[len(MARK) :]))
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return Peak(error=f"the child process exited with status {proc.returncode}: {tail[:200]}")


_FIGURES = {
    "peak_delta_mib": "MiB",
    "peak_rss_mib": "MiB",
    "baseline_rss_mib": "MiB",
    "nfe_forward": "evaluations",
    "nfe_backward": "evaluations",
}
_GROWTH = {"mib_per_step": "MiB/step", "delta_growth": "ratio"}


def measure_memory(
    libraries: list[Library],
    steps: Sequence[int],
    *,
    threads: int,
    batch: int,
    log: Callable[[str], None] = lambda _: None,
    workers: int = 2,
    timeout_s: float = 600.0,
) -> list[MemoryRow]:
    """The ``memory`` rows of every (library, gradient method, number of steps), each in a
    fresh process, ``workers`` at a time, then each (library, gradient)'s growth with the steps."""
    rows: list[MemoryRow] = []
    jobs: list[_Job] = []
    for n in steps:
        for library in libraries:
            for gradient in MEMORY_MODES:
                reason = library.unsupported(Method("rk4", n_steps=n), gradient)
                if not _runs(gradient, n):
                    reason = (
                        f"not run: its memory grows with the steps (run to {GROWING[gradient]})"
                    )
                if reason is None:
                    jobs.append((library.name, gradient, n))
                    continue
                key = _key(library.name, gradient, n)
                rows += figure_rows(MemoryRow, key, reason, _FIGURES)
    peaks: dict[_Job, Peak] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        done = pool.map(lambda job: _run_child(job, threads, batch, timeout_s), jobs)
        for (lib, grad, n), peak in zip(jobs, done):  # in the order of jobs
            peaks[(lib, grad, n)] = peak
            failed = f"failed: {peak.error}" if peak.error else None  # under Failed runs
            log(f"  memory {lib} {grad} rk4x{n}: {failed or f'{peak.peak_delta_mib:.1f} MiB'}")
            figures = {f: (None if failed else getattr(peak, f), failed) for f in _FIGURES}
            rows += figure_rows(MemoryRow, _key(lib, grad, n), figures, _FIGURES)
    for library in libraries:
        for gradient in MEMORY_MODES:
            rows += _growth(library, gradient, steps, peaks)
    return rows


def _key(library: str, gradient: str, n: int | None) -> tuple[object, ...]:
    """The key fields of a memory row: ``n`` steps, or ``None`` for the derived figures."""
    return ("mlp", f"rk4x{n}" if n is not None else "rk4", n, library, gradient)


def _growth(
    library: Library, gradient: str, steps: Sequence[int], peaks: dict[_Job, Peak]
) -> list[MemoryRow]:
    """``mib_per_step`` and ``delta_growth`` of one library and gradient method, from the
    fewest steps to the most it ran."""
    lo = min(steps)
    hi = max((n for n in steps if _runs(gradient, n)), default=lo)
    key = _key(library.name, gradient, None)
    reason = library.unsupported(Method("rk4", n_steps=lo), gradient)
    if reason is not None and lo != hi:
        return figure_rows(MemoryRow, key, reason, _GROWTH)
    note = "needs two step counts" if lo == hi else None
    a = peaks.get((library.name, gradient, lo), Peak())
    b = peaks.get((library.name, gradient, hi), Peak())
    if note is None and (a.error or b.error):
        note = "a configuration failed"
    da, db = finite(a.peak_delta_mib), finite(b.peak_delta_mib)
    slope = None if note or da is None or db is None else (db - da) / (hi - lo)
    growth = None if note else ratio(db, da)
    zero = None if growth is not None else "zero peak at the fewest steps"
    figures: Measured = {"mib_per_step": (slope, note), "delta_growth": (growth, note or zero)}
    return figure_rows(MemoryRow, key, figures, _GROWTH)


if __name__ == "__main__":
    raise SystemExit(child())
