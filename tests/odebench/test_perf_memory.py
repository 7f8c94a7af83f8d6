"""The peak memory of ``odebench perf solvers``: what a child counts above its baseline."""

from __future__ import annotations

import sys

import pytest
from odebench.perf._memory import _peak_of, _reset_peak

CHUNK, COUNT = 64 * 1024, 128  # 8 MiB in pieces below malloc's mmap threshold: from its heap


def _touch_and_free(kept: list[bytearray]) -> None:
    """Write 8 MiB and free it, keeping a piece allocated after it, so that the freed
    pages lie below the top of the heap and stay resident in malloc's free lists."""
    chunks = [bytearray(CHUNK) for _ in range(COUNT)]  # bytearray(n) writes its n zeros
    kept.append(bytearray(CHUNK))
    del chunks


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _reset_peak(),
    reason="the peak above a baseline needs a resettable high-water mark (Linux)",
)
def test_memory_that_the_warm_up_freed_counts_again_in_the_measured_run():
    # The child's warm-up leaves its pages in malloc's free lists; the measured run
    # reuses them. Its peak is what it touches, not a few pages above that cache.
    kept: list[bytearray] = []
    _touch_and_free(kept)
    baseline, peak, how, _ = _peak_of(lambda: _touch_and_free(kept))
    assert how == "VmHWM after clear_refs"
    assert peak - baseline >= 6 * 1024  # KiB, of the 8 MiB written


def test_a_gradient_whose_memory_grows_is_not_run_past_its_limit(monkeypatch):
    # Backprop's memory grows by about 2 MiB a step: 10,000 steps would take 20 GiB. Its
    # growth is judged up to the most steps it ran; the flat methods run them all.
    import odebench.perf._memory as memory
    from odebench.perf import _libraries

    ran = []

    def child(job, threads, batch, timeout_s):
        ran.append(job)
        return memory.Peak(peak_delta_mib=1.0 + (job[2] if job[1] == "backprop" else 0) / 100)

    monkeypatch.setattr(memory, "_run_child", child)
    rows = memory.measure_memory(
        [_libraries.OdecoreLibrary()], (10, 1000, 10_000), threads=1, batch=1
    )
    assert ("odecore", "backprop", 10_000) not in ran
    assert ("odecore", "reversible", 10_000) in ran and ("odecore", "adjoint", 10_000) in ran
    got = {(r.gradient, r.n_steps, r.figure): r for r in rows}
    assert got["backprop", 10_000, "peak_delta_mib"].note.startswith("not run")
    assert got["backprop", None, "mib_per_step"].value == pytest.approx(0.01)  # 10 to 1000
    assert got["backprop", None, "delta_growth"].value == pytest.approx(11.0 / 1.1)
    assert got["reversible", None, "delta_growth"].value == 1.0


def test_a_child_that_dies_or_runs_out_of_time_is_a_failed_run_of_the_report(monkeypatch):
    # A timeout or a crash has no exception name in its message: its rows said why
    # without "failed", and the report showed a dash, as for a gradient the library
    # lacks, without listing it under Failed runs.
    import odebench.perf._memory as memory
    from odebench.perf import _libraries, format_report
    from odebench.perf._document import Document

    def child(job, threads, batch, timeout_s):
        if job[1] == "adjoint":
            return memory.Peak(error="the child process ran past 600 s")
        return memory.Peak(peak_delta_mib=1.0)

    monkeypatch.setattr(memory, "_run_child", child)
    rows = memory.measure_memory([_libraries.OdecoreLibrary()], (10, 100), threads=1, batch=1)
    env = {"date": "", "torch": "", "threads": 1, "cpu_count": 1, "machine": "", "python": ""}
    report = format_report(Document({**env, "libraries": {"odecore": ""}}, memory=rows).to_json())
    assert "memory: mlp rk4x10 odecore adjoint: failed: the child process ran past 600 s" in report
