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
