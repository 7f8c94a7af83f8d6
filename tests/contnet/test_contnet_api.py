"""The public API: a snapshot of ``contnet.__all__`` and a docstring on everything in it."""

from __future__ import annotations

import importlib.metadata
import inspect
import types

import contnet
import pytest

# Changing the public API is a decision: update this list in the same change.
EXPECTED_ALL = [
    "CarriedStatisticsWarning",
    "ContinuousModule",
    "Convergence",
    "ContinuousNet",
    "OdeBlock",
    "RefinementSchedule",
    "ResNet",
    "ResNetBlock",
    "ResidualUnit",
    "Stitch",
    "carry_optimizer",
    "carry_statistics",
    "convergence_study",
    "fixed_solver",
    "make_basis",
    "manifestation_sweep",
    "recalibrate",
    "refine",
    "residual_module",
    "transfer",
]


def test_all_snapshot():
    assert sorted(contnet.__all__) == sorted(EXPECTED_ALL)


def test_every_public_name_is_in_all():
    public = {
        name
        for name, value in vars(contnet).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - set(contnet.__all__) == set()


def test_version_matches_the_distribution():
    assert contnet.__version__ == importlib.metadata.version("contnet")


@pytest.mark.parametrize("name", EXPECTED_ALL)
def test_public_object_has_a_docstring(name):
    doc = inspect.getdoc(getattr(contnet, name)) or ""
    assert len(doc) >= 10, f"{name} has no docstring"
