"""The public API: a snapshot of ``odecore.__all__``, and a docstring on everything in it."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import itertools
import pkgutil
import types

import odecore
import pytest

# Changing the public API is a decision: update this list in the same change.
EXPECTED_ALL = [
    "ADAPTIVE_METHODS",
    "ADAPTIVE_OPTIONS",
    "AbstractController",
    "AbstractExplicitRK",
    "AbstractGradient",
    "AbstractImplicitRK",
    "AbstractSolver",
    "Adaptation",
    "Adjoint",
    "Autograd",
    "BOSH3_TABLEAU",
    "Bosh3",
    "ButcherTableau",
    "Checkpoint",
    "CompileFallbackWarning",
    "ConfigurationError",
    "ConstantStepSize",
    "DOPRI5_TABLEAU",
    "DOPRI8_TABLEAU",
    "Dopri5",
    "Dopri8",
    "EULER_TABLEAU",
    "Euler",
    "Event",
    "FEHLBERG2_TABLEAU",
    "FIXED_METHODS",
    "FIXED_OPTIONS",
    "Fehlberg2",
    "GRADIENTS",
    "GaussLegendre2",
    "GaussLegendre4",
    "GaussLegendre6",
    "HEUN3_TABLEAU",
    "HEUN_EULER_TABLEAU",
    "HEUN_TABLEAU",
    "Heun",
    "Heun3",
    "HeunEuler",
    "IMPLICIT_METHODS",
    "IMPLICIT_OPTIONS",
    "ImplicitButcherTableau",
    "ImplicitEuler",
    "ImplicitMidpoint",
    "Kvaerno5",
    "MIDPOINT_TABLEAU",
    "Midpoint",
    "Newton",
    "OdeCoreError",
    "OdeSpec",
    "PIDController",
    "RALSTON_TABLEAU",
    "RK4",
    "RK4ThreeEighths",
    "RK4_38_TABLEAU",
    "RK4_TABLEAU",
    "RODAS4_TABLEAU",
    "RODAS5P_TABLEAU",
    "ROSENBROCK_METHODS",
    "RadauIIA3",
    "RadauIIA5",
    "Ralston",
    "Reversible",
    "Rodas4",
    "Rodas5P",
    "RosenbrockTableau",
    "SDIRK2",
    "SaveAt",
    "Solution",
    "SolveState",
    "SolverError",
    "Stats",
    "Status",
    "StepResult",
    "TRBDF2",
    "TSIT5_TABLEAU",
    "Trapezoid",
    "Tsit5",
    "odeint",
    "odeint_adjoint",
    "odeint_dense",
    "odeint_event",
    "rms_norm",
    "solve",
]

PUBLIC = sorted(odecore.__all__)


def test_all_snapshot():
    assert sorted(odecore.__all__) == EXPECTED_ALL


def test_all_has_no_duplicates():
    assert len(set(odecore.__all__)) == len(odecore.__all__)


def test_every_public_name_is_in_all():
    public = {
        name
        for name, value in vars(odecore).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - set(odecore.__all__) == set()


def test_version_matches_the_distribution():
    assert odecore.__version__ == importlib.metadata.version("odecore")


# --- docstrings ------------------------------------------------------------------------------


def _attribute_docstrings() -> dict[str, str]:
    """Module-level ``NAME = ...`` followed by a string literal, in odecore's modules."""
    docs: dict[str, str] = {}
    modules = [odecore] + [
        importlib.import_module(f"odecore.{info.name}")
        for info in pkgutil.iter_modules(odecore.__path__)
    ]
    for module in modules:
        tree = ast.parse(inspect.getsource(module))
        body = tree.body
        for node, following in itertools.pairwise(body):
            targets = []
            if isinstance(node, ast.Assign):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                targets = [node.target.id]
            if (
                targets
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                for name in targets:
                    docs[name] = following.value.value
    return docs


ATTRIBUTE_DOCS = _attribute_docstrings()


def _own_docstring(obj: object, name: str) -> str:
    doc = obj.__doc__ or ""
    # dataclasses and NamedTuples invent a docstring from the signature.
    if doc.startswith(f"{name}("):
        return ""
    return doc.strip()


@pytest.mark.parametrize("name", PUBLIC)
def test_public_object_has_a_docstring(name):
    obj = getattr(odecore, name)
    if inspect.isclass(obj) or inspect.isroutine(obj):
        doc = _own_docstring(obj, name)
    else:
        doc = ATTRIBUTE_DOCS.get(name, "").strip()
    assert len(doc) >= 10, f"{name} has no docstring"


MEMBERS = [
    (name, member)
    for name in PUBLIC
    if inspect.isclass(getattr(odecore, name))
    and not issubclass(getattr(odecore, name), (BaseException, tuple))
    for member, value in vars(getattr(odecore, name)).items()
    if not member.startswith("_")
    and (inspect.isfunction(value) or isinstance(value, (property, classmethod, staticmethod)))
]


@pytest.mark.parametrize(("name", "member"), MEMBERS, ids=[f"{n}.{m}" for n, m in MEMBERS])
def test_public_member_has_a_docstring(name, member):
    # Overrides may inherit the docstring of the method they implement.
    doc = inspect.getdoc(getattr(getattr(odecore, name), member))
    assert doc, f"{name}.{member} has no docstring"


def test_members_were_found():
    # Guards the parametrisation above against finding nothing.
    found = {f"{n}.{m}" for n, m in MEMBERS}
    assert {"ButcherTableau.fsal", "AbstractSolver.step", "PIDController.adapt"} <= found


METHODS = {**odecore.FIXED_METHODS, **odecore.ADAPTIVE_METHODS, **odecore.IMPLICIT_METHODS}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_names_map_to_public_solvers(name):
    cls = METHODS[name]
    assert getattr(odecore, cls.__name__) is cls
    assert issubclass(cls, odecore.AbstractSolver)
