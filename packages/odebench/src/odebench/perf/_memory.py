"""Peak memory of forward + backward, each configuration in a fresh process.

The parent (:func:`measure_memory`) starts one child per (library, gradient method,
number of steps)::

    python -m odebench.perf._memory --library odecore --gradient adjoint --steps 1000

The child builds the MLP problem, runs the same configuration once with two steps
(so that lazy initialisation is not counted), resets the kernel's high-water mark
of its resident set (``/proc/self/clear_refs``), records its resident set as the
baseline, runs rk4 with ``--steps`` steps forward and backward, and prints one line
``ODEBENCH-MEMORY {json}`` with the peak (``VmHWM``) minus the baseline. Where the
high-water mark cannot be reset, it falls back to ``ru_maxrss`` before and after,
which the JSON says.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ._libraries import LIBRARIES, Library, Method, describe_error, discover
from ._problems import CountingField, Sizes, make_problem
from ._stats import finite, ratio
from ._timing import loss_weight, run_once

MARK = "ODEBENCH-MEMORY "
MEMORY_MODES = ("backprop", "adjoint", "checkpoint")
_MIB = 1024.0


def _status_kib(key: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), or ``None``."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_peak() -> bool:
    """Reset the high-water mark of the resident set; ``False`` where the kernel forbids it."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        return False
    return _status_kib("VmHWM") is not None and _status_kib("VmRSS") is not None


def _maxrss_kib() -> int:
    # Linux reports ru_maxrss in KiB, macOS in bytes.
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value // 1024 if sys.platform == "darwin" else value


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
        print(MARK + json.dumps({"error": missing.get(args.library, "unavailable")}))
        return 0
    library = libraries[0]
    problem = make_problem("mlp", Sizes(mlp_batch=args.batch))
    counter = CountingField(problem.field)
    weight = loss_weight(problem)
    method = Method("rk4", n_steps=args.steps)
    try:
        run_once(library, problem, counter, Method("rk4", n_steps=2), args.gradient, weight)
        gc.collect()
        resettable = _reset_peak()
        baseline = _status_kib("VmRSS") if resettable else _maxrss_kib()
        obs = run_once(library, problem, counter, method, args.gradient, weight)
        peak = _status_kib("VmHWM") if resettable else _maxrss_kib()
    except Exception as exc:
        print(MARK + json.dumps({"error": describe_error(exc)}))
        return 0
    assert baseline is not None and peak is not None
    result = {
        "baseline_rss_mib": baseline / _MIB,
        "peak_rss_mib": peak / _MIB,
        "peak_delta_mib": (peak - baseline) / _MIB,
        "nfe_forward": obs.nfe_forward,
        "nfe_backward": obs.nfe_backward,
        "how": "VmHWM after clear_refs" if resettable else "ru_maxrss (peak not resettable)",
        "error": None,
    }
    print(MARK + json.dumps(result))
    return 0


def _child_env() -> dict[str, str]:
    """The environment of a child: this process's, with odebench's own location on the path."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[2])  # the directory that holds odebench/
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = here if not path else here + os.pathsep + path
    return env


def _run_child(
    library: str, gradient: str, steps: int, threads: int, batch: int, timeout_s: float
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "odebench.perf._memory",
        "--library",
        library,
        "--gradient",
        gradient,
        "--steps",
        str(steps),
        "--threads",
        str(threads),
        "--batch",
        str(batch),
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=_child_env(), check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the child process ran past {timeout_s:g} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            parsed: dict[str, Any] = json.loads(line[len(MARK) :])
            return parsed
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"the child process exited with status {proc.returncode}: {tail[:200]}"}


def measure_memory(
    libraries: list[Library],
    steps: Sequence[int],
    *,
    threads: int,
    batch: int,
    log: Callable[[str], None] = lambda _: None,
    workers: int = 2,
    timeout_s: float = 600.0,
) -> list[dict[str, Any]]:
    """Peak memory of every (library, gradient method, number of steps), each in a fresh process.

    Returns:
        Rows ``{problem, method, n_steps, library, gradient, figure, value, unit, note}``
        with figures ``peak_delta_mib``, ``peak_rss_mib``, ``baseline_rss_mib``,
        ``nfe_forward``, ``nfe_backward``; then, per (library, gradient), the derived
        ``mib_per_step`` (slope between the fewest and the most steps) and
        ``delta_growth`` (the peak at the most steps over the peak at the fewest),
        with ``n_steps`` null.
    """
    rows: list[dict[str, Any]] = []

    def row(
        n: int | None,
        library: str,
        gradient: str,
        figure: str,
        value: Any,
        unit: str,
        note: str | None = None,
        supported: bool = True,
    ) -> None:
        value = finite(value)
        if value is None and note is None:
            note = "not measured"
        rows.append(
            {
                "problem": "mlp",
                "method": f"rk4x{n}" if n is not None else "rk4",
                "n_steps": n,
                "library": library,
                "gradient": gradient,
                "figure": figure,
                "value": value,
                "unit": unit,
                "note": note,
                "supported": supported,
            }
        )

    figures = {
        "peak_delta_mib": "MiB",
        "peak_rss_mib": "MiB",
        "baseline_rss_mib": "MiB",
        "nfe_forward": "evaluations",
        "nfe_backward": "evaluations",
    }
    jobs: list[tuple[str, str, int]] = []
    for n in steps:
        for library in libraries:
            for gradient in MEMORY_MODES:
                reason = library.unsupported(Method("rk4", n_steps=n), gradient)
                if reason is not None:
                    for figure, unit in figures.items():
                        row(n, library.name, gradient, figure, None, unit, reason, False)
                else:
                    jobs.append((library.name, gradient, n))

    results: dict[tuple[str, str, int], dict[str, Any]] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {
            pool.submit(_run_child, lib, grad, n, threads, batch, timeout_s): (lib, grad, n)
            for lib, grad, n in jobs
        }
        for future in concurrent.futures.as_completed(futures):
            key = futures[future]
            results[key] = future.result()
            res = results[key]
            shown = (
                f"{res['peak_delta_mib']:.1f} MiB"
                if res.get("error") is None
                else f"failed: {res['error']}"
            )
            log(f"  memory {key[0]} {key[1]} rk4x{key[2]}: {shown}")

    for key in jobs:
        lib, grad, n = key
        res = results[key]
        error = res.get("error")
        for figure, unit in figures.items():
            row(n, lib, grad, figure, None if error else res.get(figure), unit, error)

    lo, hi = min(steps), max(steps)
    for library in libraries:
        for gradient in MEMORY_MODES:
            a = results.get((library.name, gradient, lo), {})
            b = results.get((library.name, gradient, hi), {})
            note = None
            if lo == hi:
                note = "needs two step counts"
            elif (library.name, gradient, lo) not in results:
                reason = library.unsupported(Method("rk4", n_steps=lo), gradient)
                if reason is not None:
                    row(
                        None,
                        library.name,
                        gradient,
                        "mib_per_step",
                        None,
                        "MiB/step",
                        reason,
                        False,
                    )
                    row(None, library.name, gradient, "delta_growth", None, "ratio", reason, False)
                    continue
                note = "not run"
            elif a.get("error") or b.get("error"):
                note = "a configuration failed"
            da, db = finite(a.get("peak_delta_mib")), finite(b.get("peak_delta_mib"))
            slope = None if note or da is None or db is None else (db - da) / (hi - lo)
            growth = None if note else ratio(db, da)
            row(None, library.name, gradient, "mib_per_step", slope, "MiB/step", note)
            row(
                None,
                library.name,
                gradient,
                "delta_growth",
                growth,
                "ratio",
                note or (None if growth is not None else "zero peak at the fewest steps"),
            )
    return rows


if __name__ == "__main__":
    raise SystemExit(child())
