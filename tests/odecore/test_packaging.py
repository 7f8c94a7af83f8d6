"""Packaging: what a package imports is what it declares, and what its wheel carries.

The checks read the *installed* distribution, its source files and its metadata, so under
nox they test what pip built from ``packages/<name>``, in an environment that holds that
package and the layers below it only. The helpers below are shared:
``tests/odebench/test_packaging_layers.py`` runs the same checks on the layers above
``odecore``, in the environment where those are installed.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# Bottom layer first; each imports only from the ones before it.
LAYERS = ("odecore", "odelayers", "contnet", "odebench")
URL_LABELS = ("Homepage", "Documentation", "Repository", "Changelog", "Issues")
# Base dependencies a package may declare without importing them itself, and why.
IMPLICIT = {
    # torch imports numpy when it starts and, without it, warns "Failed to initialize
    # NumPy" on every `import torch` (and its tensor <-> array conversions fail).
    # torch's metadata does not ask for numpy, so the bottom layer that needs torch
    # declares it.
    "numpy": "torch needs it",
}


@dataclass(frozen=True)
class Import:
    """One ``import`` statement's top-level module.

    Attributes:
        module: the top-level module name (``scipy`` for ``import scipy.io``).
        where: ``file:line`` of the statement, relative to the package's folder.
        deferred: True when the import runs only on demand: inside a function, under a
            ``try`` that catches ``ImportError``, or under ``if TYPE_CHECKING:``.
    """

    module: str
    where: str
    deferred: bool


def _catches_import_error(node: ast.Try) -> bool:
    names = set()
    for handler in node.handlers:
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        names |= {t.id for t in types if isinstance(t, ast.Name)}
    return bool(names & {"ImportError", "ModuleNotFoundError"})


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, deferred: bool, where: str, found: list[Import]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import):
            for alias in child.names:
                module = alias.name.partition(".")[0]
                found.append(Import(module, f"{where}:{child.lineno}", deferred))
        elif isinstance(child, ast.ImportFrom):
            if child.level == 0 and child.module:  # relative imports stay in the package
                module = child.module.partition(".")[0]
                found.append(Import(module, f"{where}:{child.lineno}", deferred))
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            _walk(child, True, where, found)
        elif isinstance(child, ast.Try) and _catches_import_error(child):
            for statement in child.body:
                _walk(ast.Module(body=[statement], type_ignores=[]), True, where, found)
            for part in (*child.handlers, *child.orelse, *child.finalbody):
                _walk(ast.Module(body=[part], type_ignores=[]), deferred, where, found)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for statement in child.body:
                _walk(ast.Module(body=[statement], type_ignores=[]), True, where, found)
            for statement in child.orelse:
                _walk(ast.Module(body=[statement], type_ignores=[]), deferred, where, found)
        else:
            _walk(child, deferred, where, found)


def third_party_imports(package: str) -> list[Import]:
    """The imports of an installed package's source, less the standard library and itself.

    Args:
        package: an installed package of the monorepo, e.g. ``"odecore"``.

    Returns:
        One entry per imported top-level module and statement, in file order; the lower
        layers of the monorepo are included (a package must declare them too).
    """
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, f"{package} is not installed"
    found: list[Import] = []
    for folder in map(Path, spec.submodule_search_locations):
        for file in sorted(folder.rglob("*.py")):
            tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
            _walk(tree, False, file.relative_to(folder.parent).as_posix(), found)
    ignored = set(sys.stdlib_module_names) | {"__future__", package}
    return [i for i in found if i.module not in ignored]


@functools.cache
def _module_distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def distributions_of(module: str) -> set[str]:
    """The (canonical) names of the distributions that provide a top-level module.

    A layer of the monorepo is its own distribution. A module that is not installed here
    (an optional import) is assumed to come from the distribution of the same name.
    """
    if module in LAYERS:
        return {module}
    names = _module_distributions().get(module)
    return {canonicalize_name(n) for n in names} if names else {canonicalize_name(module)}


def declared(package: str) -> tuple[set[str], set[str]]:
    """The distributions an installed package requires: always, and through an extra."""
    base: set[str] = set()
    extras: set[str] = set()
    for line in importlib.metadata.requires(package) or []:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            base.add(name)
        else:
            extras.add(name)
    return base, extras


def check_imports_declared(package: str) -> None:
    """Every import is a declared dependency: a base one when the import runs at import time.

    Raises:
        AssertionError: listing each undeclared import with where it is.
    """
    base, extras = declared(package)
    problems = []
    for imp in third_party_imports(package):
        dists = distributions_of(imp.module)
        if dists & base:
            continue
        if imp.deferred and dists & extras:
            continue
        kind = "an extra or a base dependency" if imp.deferred else "a base dependency"
        problems.append(f"{imp.where}: `{imp.module}` ({', '.join(sorted(dists))}) needs {kind}")
    assert not problems, f"{package} imports what it does not declare:\n" + "\n".join(problems)


def check_dependencies_used(package: str) -> None:
    """Every base dependency is imported by the package, or is listed in :data:`IMPLICIT`.

    Raises:
        AssertionError: naming the unused dependencies.
    """
    base, _ = declared(package)
    used = set().union(*(distributions_of(i.module) for i in third_party_imports(package)))
    unused = sorted(base - used - set(IMPLICIT))
    assert not unused, f"{package} declares dependencies it never imports: {unused}"


def check_imports_cleanly(package: str) -> None:
    """``python -W error -c "import <package>"`` succeeds and writes nothing to stderr.

    Raises:
        AssertionError: with the child's stderr.
    """
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", f"import {package}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == "", (
        f"`import {package}` with warnings as errors exited with {done.returncode}:\n{done.stderr}"
    )


def check_metadata(package: str) -> None:
    """The installed metadata names the authors, the project's URLs and the licence file.

    Raises:
        AssertionError: naming what is missing.
    """
    meta = importlib.metadata.metadata(package)
    assert meta.get("Author") or meta.get("Author-email"), f"{package}: no authors"
    labels = {url.partition(",")[0].strip() for url in meta.get_all("Project-URL") or []}
    missing = [label for label in URL_LABELS if label not in labels]
    assert not missing, f"{package}: no Project-URL for {missing}"
    assert "LICENSE" in (meta.get_all("License-File") or []), f"{package}: no License-File"


OWN = ["odecore"]


@pytest.mark.parametrize("package", OWN)
def test_imports_are_declared(package: str) -> None:
    check_imports_declared(package)


@pytest.mark.parametrize("package", OWN)
def test_base_dependencies_are_used(package: str) -> None:
    check_dependencies_used(package)


@pytest.mark.parametrize("package", OWN)
def test_imports_without_warnings(package: str) -> None:
    check_imports_cleanly(package)


@pytest.mark.parametrize("package", OWN)
def test_metadata_names_authors_urls_and_license(package: str) -> None:
    check_metadata(package)


def test_odecore_declares_numpy() -> None:
    # The environment that tests odecore installs numpy for the tests anyway, which would
    # hide a missing declaration from test_imports_without_warnings: a bare
    # `pip install odecore` would then warn on every import.
    base, _ = declared("odecore")
    assert "torch" in base and "numpy" in base


def test_each_package_ships_the_root_license() -> None:
    packages = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
    assert packages, f"no packages under {ROOT / 'packages'}"
    root = (ROOT / "LICENSE").read_bytes()

    def same(package: Path) -> bool:
        path = package / "LICENSE"
        return path.is_file() and path.read_bytes() == root

    different = [p.name for p in packages if not same(p)]
    assert not different, f"packages/<name>/LICENSE missing or unlike ./LICENSE: {different}"


def test_import_collection_sees_deferred_imports() -> None:
    source = (
        "import torch\n"
        "from typing import TYPE_CHECKING\n"
        "try:\n    import scipy.io\nexcept ImportError:\n    scipy = None\n"
        "if TYPE_CHECKING:\n    import numpy\n"
        "def f():\n    from matplotlib import pyplot\n"
        "from . import sibling\n"
    )
    found: list[Import] = []
    _walk(ast.parse(source), False, "m.py", found)
    assert [(i.module, i.deferred) for i in found] == [
        ("torch", False),
        ("typing", False),
        ("scipy", True),
        ("numpy", True),
        ("matplotlib", True),
    ]
