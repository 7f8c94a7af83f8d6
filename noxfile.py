"""Every check of the monorepo, one nox session per concern.

``nox`` runs the default sessions (what CI runs); ``nox -l`` lists them all.
Each package's tests run in a virtual environment holding that package and the
packages below it only, so an accidental upward import fails there.

The tests run on every supported Python (3.10 to 3.13) that this machine can start,
the other sessions on one (3.11 where it is present). A supported version that does
not start is skipped, with one line that names it. Each session installs the torch
that constraints.txt pins; that is cheap only where a CPU build of it exists for the
session's Python on the configured index (PyPI's Linux wheel is the CUDA build, several
GB with its NVIDIA libraries; see the README for the CPU index).
"""

from __future__ import annotations

import functools
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import nox

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - nox itself depends on tomli below Python 3.11
    import tomli as tomllib

ROOT = pathlib.Path(__file__).parent
CONSTRAINTS = ("-c", str(ROOT / "constraints.txt"))
# Bottom layer first. A package is tested once packages/<name>/ exists.
LAYERS = ["odecore", "odelayers", "contnet", "odebench"]
PACKAGES = [name for name in LAYERS if (ROOT / "packages" / name / "pyproject.toml").exists()]
TORCHDIFFEQ = "torchdiffeq>=0.2.3"
TEST_DEPS = ["pytest>=8", "hypothesis>=6.100", "numpy", "scipy>=1.10", TORCHDIFFEQ]
# The peers `odebench perf solvers` compares with, besides torchdiffeq. torchdyn's
# metadata asks for torchvision (which does not import beside the CPU torch), Jupyter
# and scikit-learn, none of which `torchdyn.core` imports: it goes in without its
# dependencies, followed by the ones it does import.
PEERS = ["torchode>=1.0"]
TORCHDYN = ["torchdyn>=1.0.6,<1.1"]
TORCHDYN_IMPORTS = ["pytorch-lightning>=2", "torchcde>=0.2.3,<0.3", "torchsde>=0.2.5"]

# requires-python is >=3.10 for every package; these are the versions tested.
SUPPORTED_PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def _starts(version: str) -> bool:
    """Whether ``python<version>`` runs here.

    Being on PATH is not enough: a pyenv shim for a version that is installed but not
    enabled is on PATH and fails with "command not found", so the interpreter is run.
    """
    executable = shutil.which(f"python{version}")
    if executable is None:
        return False
    try:
        done = subprocess.run(
            [executable, "-c", ""],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


# The running interpreter stands in when none of the supported versions starts, so
# that nox still lists the sessions and says what is missing.
PYTHONS = [v for v in SUPPORTED_PYTHONS if _starts(v)] or [
    f"{sys.version_info.major}.{sys.version_info.minor}"
]
MISSING_PYTHONS = [v for v in SUPPORTED_PYTHONS if v not in PYTHONS]
if MISSING_PYTHONS:
    nox.logger.logger.warning(
        "Python %s not found (or does not start): tests skipped there; testing on %s.",
        ", ".join(MISSING_PYTHONS),
        ", ".join(PYTHONS),
    )
# The one interpreter of every session but the tests.
DEFAULT_PYTHON = "3.11" if "3.11" in PYTHONS else PYTHONS[0]

nox.options.sessions = ["lint", "tests", "layers", "typecheck", "docs", "examples"]
nox.options.reuse_existing_virtualenvs = True
# Sessions exist only for the interpreters found above, so one that goes missing
# all the same is an error, not a skip.
nox.options.error_on_missing_interpreters = True
# Every session's environment holds its own torch (about 1 GB). On a machine short of
# disk, ODE_NOX_DISCARD_VENVS=1 (set by .ci/run) deletes each one when its session ends,
# so the run never holds more than one at a time.
DISCARD_VENVS = os.environ.get("ODE_NOX_DISCARD_VENVS", "") not in ("", "0")


def discardable(func: Callable[..., None]) -> Callable[..., None]:
    """Delete the session's virtual environment after it ends, when DISCARD_VENVS is set."""

    @functools.wraps(func)
    def wrapper(session: nox.Session, *args: Any, **kwargs: Any) -> None:
        try:
            func(session, *args, **kwargs)
        finally:
            location = getattr(session.virtualenv, "location", None)
            if DISCARD_VENVS and location:
                shutil.rmtree(location, ignore_errors=True)

    return wrapper


def _install_peers(session: nox.Session) -> None:
    """Install the benchmark's peers besides torchdiffeq: torchode and torchdyn."""
    session.install(*CONSTRAINTS, *PEERS)
    session.install(*CONSTRAINTS, "--no-deps", *TORCHDYN)
    session.install(*CONSTRAINTS, *TORCHDYN_IMPORTS)


def _install_packages(session: nox.Session, upto: str | None = None) -> None:
    """Install the packages from the bottom layer up to ``upto`` (all by default)."""
    names = PACKAGES if upto is None else PACKAGES[: PACKAGES.index(upto) + 1]
    session.install(*CONSTRAINTS, *(str(ROOT / "packages" / name) for name in names))


@nox.session(python=PYTHONS)
@nox.parametrize("package", PACKAGES)
@discardable
def tests(session: nox.Session, package: str) -> None:
    """Install one package (and the layers below it) alone, then run its tests and doctests."""
    _install_packages(session, upto=package)
    session.install(*CONSTRAINTS, *TEST_DEPS)
    if package == "odebench":
        _install_peers(session)  # the benchmark's adapters are tested too
    # pytest exits with 5 when it collects no test; nox treats that as a failure.
    session.run(
        "pytest",
        f"tests/{package}",
        "--doctest-modules",
        "--pyargs",
        package,
        *session.posargs,
    )


@nox.session(python=DEFAULT_PYTHON)
@discardable
def lint(session: nox.Session) -> None:
    """Ruff: lint rules and formatting."""
    session.install(*CONSTRAINTS, "ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=DEFAULT_PYTHON)
@discardable
def layers(session: nox.Session) -> None:
    """Check the import-linter contracts over the existing packages.

    The layers of the packages, light libraries, odebench's own layers, and no import of
    another package's private module.
    """
    _install_packages(session)
    session.install(*CONSTRAINTS, "import-linter")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    present = [name for name in config["root_packages"] if name in PACKAGES]
    lines = [
        "[importlinter]",
        "root_packages =",
        *(f"    {name}" for name in present),
        f"include_external_packages = {config['include_external_packages']}",
    ]
    for i, contract in enumerate(config["contracts"]):
        if not set(contract.get("containers", [])) <= set(present):
            continue  # the layers inside a package that is not there yet
        lines += ["", f"[importlinter:contract:{i}]"]
        for key, value in contract.items():
            if isinstance(value, list):
                if key in ("layers", "source_modules") and "containers" not in contract:
                    value = [v for v in value if v in present]
                lines.append(f"{key} =")
                lines += [f"    {v}" for v in value]
            else:
                lines.append(f"{key} = {value}")
    path = pathlib.Path(session.create_tmp()) / "importlinter.ini"
    path.write_text("\n".join(lines) + "\n")
    session.run("lint-imports", str(path), "--no-cache")


@nox.session(python=DEFAULT_PYTHON)
@discardable
def typecheck(session: nox.Session) -> None:
    """mypy --strict on every package's src/."""
    _install_packages(session)
    session.install(*CONSTRAINTS, "mypy")
    session.run("mypy", *(f"packages/{name}/src" for name in PACKAGES))


@nox.session(python=DEFAULT_PYTHON)
@discardable
def docs(session: nox.Session) -> None:
    """Build the Sphinx site with warnings as errors, then run the doctests of the guides.

    myst-nb executes the tutorials (MyST notebooks) during the build, so a tutorial that
    fails fails the build.
    """
    _install_packages(session)
    # The guide's examples run the scipy: and torchdiffeq: backends too; the tutorials
    # run on the Jupyter kernel that ipykernel provides and draw with matplotlib.
    session.install(
        *CONSTRAINTS,
        "sphinx",
        "myst-nb",
        "furo",
        "sphinx-copybutton",
        "sphinx-mathjax-offline",
        "ipykernel",
        "matplotlib>=3.7",
        "pytest>=8",
        "numpy",
        "scipy>=1.10",
        TORCHDIFFEQ,
    )
    session.run("sphinx-build", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html")
    session.run("pytest", "--doctest-glob=*.md", "docs", "-p", "no:cacheprovider")


@nox.session(python=DEFAULT_PYTHON, default=False)
@discardable
def bench(session: nox.Session) -> None:
    """Run the solver benchmark (``odebench perf solvers``) and write bench-results/solvers.json
    and its figure, bench-results/solvers.png.

    Not a default session: the full run takes several minutes and measures the
    machine, not the code. Installs odecore, odebench and the peers it compares against
    (torchdiffeq, torchode, torchdyn) with the constraints. Arguments after ``--`` go to
    the command, e.g. ``nox -s bench -- --quick`` or ``nox -s bench -- --threads 4
    --repeats 9``.
    """
    _install_packages(session)
    session.install(*CONSTRAINTS, TORCHDIFFEQ)
    _install_peers(session)
    out = ROOT / "bench-results"
    out.mkdir(exist_ok=True)
    session.run(
        "odebench", "perf", "solvers", "--json", str(out / "solvers.json"),
        "--plot", str(out / "solvers.png"), *session.posargs,
    )  # fmt: skip


@nox.session(python=DEFAULT_PYTHON, default=False)
@discardable
def reproductions(session: nox.Session) -> None:
    """Rerun every experiment's standard mode and publish the reports into docs/results/.

    Not a default session: each standard mode trains for up to about an hour on a
    2-core CPU (`odebench list` shows the modes). Arguments after ``--`` go to every
    ``odebench run``, e.g. ``nox -s reproductions -- --data-dir path/to/mnist`` or
    ``-- --quick`` for the smoke tests (run, never published: a smoke test is not a
    result); name experiments with ``ODEBENCH_ONLY=a,b``.
    """
    _install_packages(session)
    listing = session.run(
        "python", "-c", "from odebench.experiments import EXPERIMENTS; print(*EXPERIMENTS)",
        silent=True,
    )  # fmt: skip
    names = str(listing).split()
    only = [n for n in os.environ.get("ODEBENCH_ONLY", "").split(",") if n]
    unknown = sorted(set(only) - set(names))
    if unknown:
        session.error(f"ODEBENCH_ONLY: unknown {unknown}; known: {', '.join(names)}")
    runs = pathlib.Path(session.create_tmp()) / "reproductions"
    shutil.rmtree(runs, ignore_errors=True)  # fresh runs, never a resumed stale one
    for name in only or names:
        out = str(runs / name)
        session.run("odebench", "run", name, "--out", out, "--no-progress", *session.posargs)
        if "--quick" not in session.posargs and "quick" not in session.posargs:
            session.run("odebench", "publish", out, "--to", str(ROOT / "docs" / "results"))


@nox.session(python=DEFAULT_PYTHON)
@discardable
def examples(session: nox.Session) -> None:
    """Run every example in its smoke mode (a few seconds each)."""
    _install_packages(session)
    session.install(*CONSTRAINTS, "matplotlib>=3.7", "scipy>=1.10")
    out = session.create_tmp()
    scripts = sorted((ROOT / "examples").glob("*.py"))
    if not scripts:
        session.error("no examples found under examples/")
    for script in scripts:
        session.run("python", str(script), "--smoke", "--out", out)
