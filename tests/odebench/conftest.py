"""Shared set-up for the odebench tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    """Every test draws the same random numbers, whatever ran before it."""
    torch.manual_seed(0)
