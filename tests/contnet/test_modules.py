"""The package's own modules import one another in one direction only."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import contnet
import pytest

SOURCE = Path(contnet.__file__).parent
MODULES = sorted(p.stem for p in SOURCE.glob("_*.py") if p.stem != "__init__")


def imported_modules(module: str) -> set[str]:
    """The sibling modules that ``contnet.<module>`` imports, anywhere in its source
    (inside functions and ``TYPE_CHECKING`` blocks too: a hidden import still closes a
    circle)."""
    tree = ast.parse((SOURCE / f"{module}.py").read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                out.add(node.module.split(".")[0])
            elif node.level == 1:  # from . import _x
                out.update(alias.name for alias in node.names)
            elif node.level == 0 and (node.module or "").startswith("contnet."):
                out.add((node.module or "").split(".")[1])
            elif node.level == 0 and node.module == "contnet":
                out.update(alias.name for alias in node.names if alias.name in MODULES)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("contnet."):
                    out.add(alias.name.split(".")[1])
                elif alias.name == "contnet":
                    out.add("__init__")
    return out & (set(MODULES) | {"__init__"})


GRAPH = {module: imported_modules(module) for module in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports in ``graph`` as a list of modules, or ``None``."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_modules_were_found():
    assert {"_block", "_continuous", "_net", "_refine"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports(module):
    importlib.import_module(f"contnet.{module}")


@pytest.mark.parametrize("module", MODULES)
def test_no_module_imports_the_package_itself(module):
    assert "__init__" not in GRAPH[module]


def test_no_import_cycle_between_the_modules():
    assert find_cycle(GRAPH) is None, " -> ".join(find_cycle(GRAPH) or [])


def test_the_cycle_check_finds_a_hidden_cycle():
    graph = {**GRAPH, "_net": GRAPH["_net"] | {"_refine"}}  # refine's old import in a method
    assert find_cycle(graph) is not None
