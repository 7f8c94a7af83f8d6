"""Packaging of the layers above odecore: odelayers, contnet and odebench.

The checks are those of ``tests/odecore/test_packaging.py`` (loaded from there, not
copied): each import is declared, each base dependency used, the package imports with
warnings as errors, and its metadata names the authors, the URLs and the licence file.
They run here because this is the environment where all three are installed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_SHARED = Path(__file__).resolve().parents[1] / "odecore" / "test_packaging.py"
_spec = importlib.util.spec_from_file_location("odecore_packaging_checks", _SHARED)
assert _spec is not None and _spec.loader is not None
checks = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = checks  # dataclasses look their module up there
_spec.loader.exec_module(checks)

LAYERS = [name for name in checks.LAYERS[1:] if importlib.util.find_spec(name) is not None]


@pytest.mark.parametrize("package", LAYERS)
def test_imports_are_declared(package: str) -> None:
    checks.check_imports_declared(package)


@pytest.mark.parametrize("package", LAYERS)
def test_base_dependencies_are_used(package: str) -> None:
    checks.check_dependencies_used(package)


@pytest.mark.parametrize("package", LAYERS)
def test_imports_without_warnings(package: str) -> None:
    checks.check_imports_cleanly(package)


@pytest.mark.parametrize("package", LAYERS)
def test_metadata_names_authors_urls_and_license(package: str) -> None:
    checks.check_metadata(package)


def test_every_layer_is_checked() -> None:
    # odebench needs the other two: all three are installed wherever odebench is.
    assert LAYERS == ["odelayers", "contnet", "odebench"]
