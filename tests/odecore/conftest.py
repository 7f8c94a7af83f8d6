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
