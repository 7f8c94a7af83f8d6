"""The public API: a snapshot of ``odelayers.__all__`` and a docstring on everything in it."""

from __future__ import annotations

import importlib.metadata
import inspect
import types

import odelayers
import pytest
from odelayers import basis

# Changing the public API is a decision: update this list in the same change.
EXPECTED_ALL = [
    "CNF",
    "AdaptiveDepthNODE",
    "DataControl",
    "DepthConcat",
    "DepthLayer",
    "DepthSequential",
    "DropAugmented",
    "GalerkinConv2d",
    "GalerkinLinear",
    "HigherOrder",
    "InputLayerAugmentation",
    "IntegralLoss",
    "IntegralTerm",
    "JacobianFrobenius",
    "KineticEnergy",
    "NegativeTrace",
    "NeuralODE",
    "ProjectAugmented",
    "ZeroAugmentation",
    "basis",
    "standard_normal_log_prob",
]
EXPECTED_BASIS = [
    "AbstractBasis",
    "Chebyshev",
    "Fourier",
    "Legendre",
    "PiecewiseConstant",
    "PiecewiseLinear",
    "SavesBasis",
    "check_saved_state",
    "project",
]


def test_all_snapshots():
    assert sorted(odelayers.__all__) == sorted(EXPECTED_ALL)
    assert sorted(basis.__all__) == EXPECTED_BASIS


def test_every_public_name_is_in_all():
    public = {
        name
        for name, value in vars(odelayers).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - set(odelayers.__all__) == set()


def test_version_matches_the_distribution():
    assert odelayers.__version__ == importlib.metadata.version("odelayers")


OBJECTS = [(odelayers, n) for n in EXPECTED_ALL if n != "basis"] + [
    (basis, n) for n in EXPECTED_BASIS
]


@pytest.mark.parametrize(("module", "name"), OBJECTS, ids=[n for _, n in OBJECTS])
def test_public_object_has_a_docstring(module, name):
    doc = inspect.getdoc(getattr(module, name)) or ""
    assert len(doc) >= 10, f"{name} has no docstring"
