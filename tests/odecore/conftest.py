"""Shared set-up for the odecore tests.

``oracles.py`` (reference solutions) lives next to the tests; this directory goes
on ``sys.path`` so that ``import oracles`` works however pytest imports the test
modules (``prepend`` or ``importlib`` import mode).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(autouse=True)
def _seed():
    """Every test draws the same random numbers, whatever ran before it."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _fresh_compile(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A test marked ``compile`` starts with no compiled graph or step, and compiles with
    ``aot_eager`` (dynamo and AOTAutograd, without inductor's C++) unless it says otherwise."""
    if request.node.get_closest_marker("compile") is None:
        yield
        return
    from odecore import _compiled, _compiled_step

    torch._dynamo.reset()
    _compiled._compiled.cache_clear()
    _compiled._schedule.cache_clear()
    _compiled_step._compiled_step.cache_clear()
    _compiled._FAILED.clear()
    _compiled._STEPPED.clear()
    monkeypatch.setattr(_compiled, "_BACKEND", "aot_eager")
    yield
    torch._dynamo.reset()
