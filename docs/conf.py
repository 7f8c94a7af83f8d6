"""Sphinx configuration of the continuous-depth documentation site.

Build (warnings are errors) and run the examples of the pages::

    sphinx-build -W --keep-going -b html docs docs/_build/html
    pytest --doctest-glob="*.md" docs

The examples of the docstrings run with the package's tests
(``pytest --doctest-modules --pyargs odecore``); the tutorials (MyST-markdown
notebooks under ``docs/tutorials/``) run during the build, and one that fails fails it.

At build time this file also writes the tables of schemes
(``docs/_generated/odecore_schemes.md`` and ``odecore_implicit_schemes.md``) from the
tableaus themselves, and the
Reproductions index (``docs/_generated/reproductions.md``) from the published
``docs/results/*/results.json``, so that neither page disagrees with its source.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import math
import posixpath
import re
import sys
import urllib.parse
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
GENERATED = DOCS / "_generated"

# The packages of the monorepo, lowest layer first. Only the ones that exist are
# documented.
PACKAGES = ["odecore", "odelayers", "contnet", "odebench"]

# Use the installed packages; fall back to the sources under packages/*/src.
for _name in PACKAGES:
    _src = ROOT / "packages" / _name / "src"
    if importlib.util.find_spec(_name) is None and (_src / _name).is_dir():
        sys.path.insert(0, str(_src))

PUBLISHED = [name for name in PACKAGES if importlib.util.find_spec(name) is not None]
# Public sub-packages, whose __all__ the API reference must cover as well.
SUBPACKAGES = [
    f"odebench.{name}"
    for name in ("perf", "data", "models", "training", "experiments")
    if "odebench" in PUBLISHED
]

# -- Project ---------------------------------------------------------------------------

project = "continuous-depth"
author = "the continuous-depth contributors"
copyright = "the continuous-depth contributors"

# -- General ---------------------------------------------------------------------------
#
# Why each extension:
# - myst_nb: the Markdown parser (it includes myst-parser, so every page reads as
#   before) that also reads MyST-markdown notebooks, the tutorials, and executes them
#   at build time: a tutorial that stops working fails the build.
# - sphinx.ext.autodoc + napoleon: the API reference, from Google-style docstrings.
# - sphinx.ext.viewcode: a [source] link beside every documented object, to its
#   highlighted source.
# - sphinx.ext.mathjax + sphinx-mathjax-offline: math rendered by MathJax 3, shipped
#   with the site (the extension copies it to _static/mathjax/ and points
#   mathjax_path there), so pages offline or behind a firewall show formulas, not
#   raw TeX.
# - sphinx_copybutton: a copy button on every code block that leaves out the prompts
#   and the printed output.

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",
    "sphinx_copybutton",
]

# myst_nb registers .md (and .ipynb) for itself; no myst_parser mapping here.
source_suffix = {".md": "myst-nb", ".rst": "restructuredtext"}
# docs/results/ holds published runs, shown through {include} on the experiment pages.
exclude_patterns = [
    "_build",
    "_generated",
    "results",
    "jupyter_execute",
    "**.ipynb_checkpoints",
    "Thumbs.db",
    ".DS_Store",
]
root_doc = "index"

myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

# -- Notebooks (myst-nb) ---------------------------------------------------------------
#
# Pages with a jupytext front matter (the tutorials) run at build time. Their outputs
# are cached under <build dir>/../.jupyter_cache, keyed on the notebook's code only:
# after a change to the library, rebuild with ``-D nb_execution_mode=force`` (or
# delete the cache) to run them again.

nb_execution_mode = "cache"
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_execution_show_tb = True

# -- HTML ------------------------------------------------------------------------------
#
# furo: maintained; the page's own table of contents beside it on a wide screen (behind
# a button on a narrow one); a dark mode; a layout that works on a phone as well as
# on a wide screen. The options add links to each page's source in the repository.

REPOSITORY = "https://github.com/continuous-depth/continuous-depth"

html_theme = "furo"
html_title = "continuous-depth"
html_static_path = ["_static"]
html_css_files = ["figures.css"]
html_theme_options = {
    "source_repository": REPOSITORY,
    "source_branch": "main",
    "source_directory": "docs/",
}

# Copy only the code: prompts (">>> ", "... ", "$ ") are stripped, and the prompts and
# printed output that Pygments marks in pycon and console blocks are left out.
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_exclude = ".linenos, .gp, .go"

# -- autodoc + napoleon ----------------------------------------------------------------

autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_member_order = "bysource"
autodoc_class_signature = "mixed"
autodoc_default_options = {"exclude-members": "__init__, __new__, __post_init__"}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_attr_annotations = True

# -- Cross references ------------------------------------------------------------------
#
# No intersphinx (the build runs offline), so references to types outside this
# project cannot resolve. They, and only they, are listed here (Sphinx itself
# resolves the built-ins and ``typing.Any``).

nitpicky = True
nitpick_ignore = [
    ("py:class", "abc.ABC"),
    ("py:class", "collections.abc.Callable"),
    ("py:class", "collections.abc.Iterable"),
    ("py:class", "collections.abc.Iterator"),
    ("py:class", "collections.abc.Mapping"),
    ("py:class", "collections.abc.Sequence"),
    ("py:class", "os.PathLike"),
    ("py:class", "pathlib.Path"),
    # The settings type of the experiment template (Template[S], Setup[S], ...), and the
    # names of the experiments' signatures that autodoc leaves as written where a module
    # imports a type only for checking (Result and Template refer to each other).
    ("py:class", "odebench.experiments._template.S"),
    ("py:class", "S"),
    ("py:class", "Coordinate"),
    ("py:class", "Path"),
    # contnet.recalibrate returns the module it is given (any nn.Module subclass).
    ("py:class", "contnet._recalibrate.M"),
    # odebench's JSON value types (odebench._io.Json, JsonObject) and the figure
    # module's Style and Mark, as string annotations leave them.
    ("py:class", "Json"),
    ("py:class", "JsonObject"),
    # Where such a signature is left as written: the experiments' log, Callable[[str], None].
    ("py:class", "Log"),
    ("py:class", "Style"),
    ("py:class", "Mark"),
]
nitpick_ignore_regex = [
    # torch.Tensor, torch.dtype, torch.device, torch.Size, torch.nn.Module, ...;
    # functions and methods too (torch.autograd.graph.saved_tensors_hooks in a tutorial).
    (r"py:(class|obj|data|func|meth|attr)", r"torch\.[\w.]+"),
]


_PRIVATE_NAME = re.compile(r"\b(?P<package>\w+)\._\w+\.(?P<name>\w+)")


def _public_types(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """Write ``:type: odecore._solve.Stats`` (napoleon's attribute types) as ``odecore.Stats``.

    Public objects are defined in private modules and re-exported under the
    package; the pages should name them the way users import them.
    """

    for i, line in enumerate(lines):
        if line.lstrip().startswith(":type"):
            lines[i] = _PRIVATE_NAME.sub(_public_name, line)


def _public_name(match: re.Match[str]) -> str:
    """``odecore._solve.Stats`` -> ``odecore.Stats``, for the packages documented here."""
    if match["package"] not in PUBLISHED:
        return match[0]
    return f"{match['package']}.{match['name']}"


def _init_typehints(
    app: Any, what: str, name: str, obj: Any, options: Any, args: Any, retann: Any
) -> None:
    """The parameter types of a class come from its ``__init__``, evaluated.

    For a class, autodoc evaluates only the class's own annotations; the parameters of
    an ``__init__`` written under ``from __future__ import annotations`` keep their
    source text (``Tensor``, ``nn.Module``, a private alias), which resolves nowhere
    (the ``nn.Module`` layers of odelayers). Dataclasses are left as they are: their
    fields are the class's annotations.
    """
    init = vars(obj).get("__init__") if what == "class" else None
    if not inspect.isfunction(init) or dataclasses.is_dataclass(obj):
        return
    from sphinx.util.inspect import signature
    from sphinx.util.typing import stringify_annotation

    try:
        sig = signature(init)
    except (TypeError, ValueError):
        return
    annotations = app.env.current_document.autodoc_annotations.setdefault(name, {})
    for param in sig.parameters.values():
        if param.annotation is not param.empty:
            text = stringify_annotation(param.annotation, "smart")
            annotations[param.name] = _PRIVATE_NAME.sub(_public_name, text)


def _private_attr_doc(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Module-level constants re-exported by a package take the docstring of their definition.

    ``odecore.DOPRI5_TABLEAU`` is documented where it is defined, in
    ``odecore._tableau``; autodoc only looks in ``odecore/__init__.py``.
    """
    if what != "data":
        return
    from sphinx.pycode import ModuleAnalyzer

    package, _, attr = name.rpartition(".")
    if package not in PUBLISHED:
        return
    for modname in sorted(sys.modules):
        if not modname.startswith(package + "._"):
            continue
        module = sys.modules[modname]
        if getattr(module, attr, None) is not obj:
            continue
        docs = ModuleAnalyzer.for_module(modname).find_attr_docs()
        # Without a docstring of its own, autodoc would show the docstring of its type.
        lines[:] = list(docs.get(("", attr), []))
        return


_INITIAL = re.compile(r"^(\s+)([A-Z])\. ")


def _escape_initials(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Keep ``L. Euler, ...`` in a ``References:`` section from becoming a list item "L.".

    reST reads a line that starts with a capital letter and a full stop as an
    enumerated list; the author's initial would vanish from the page. Runs before
    napoleon, on the Google-style text.
    """
    in_references = False
    for i, line in enumerate(lines):
        if line.strip() == "References:":
            in_references = True
        elif line and not line[0].isspace():
            in_references = False
        elif in_references:
            lines[i] = _INITIAL.sub(r"\1\2\\. ", line)


def _link_images(app: Any, doctree: Any, docname: str) -> None:
    """Make every image of an HTML page a link to its full-size file.

    The theme scales a wide figure (the solver benchmark) down to the text column;
    a click on it opens the file itself. Sphinx links only the images given a width
    or a scale (``html_scaled_image_link``); this links the others the same way, to
    their copy in ``_images/``. An image already inside a link, one with the class
    ``no-scaled-link`` and a remote one are left as they are. The links have the
    class ``full-size-link``, to which ``_static/figures.css`` gives a zoom-in cursor.
    """
    if app.builder.format != "html":
        return
    from docutils import nodes
    from sphinx.util.osutil import relative_uri

    imgpath = relative_uri(app.builder.get_target_uri(docname), app.builder.imagedir)
    for image in list(doctree.findall(nodes.image)):
        uri = image["uri"]
        if (
            isinstance(image.parent, nodes.reference)
            or "no-scaled-link" in image["classes"]
            or uri not in app.env.images
        ):
            continue
        target = posixpath.join(imgpath, urllib.parse.quote(app.env.images[uri][1]))
        reference = nodes.reference("", "", internal=True, refuri=target)
        reference["classes"].append("full-size-link")
        image.replace_self(reference)
        reference.append(image)


def _public_bases(app: Any, name: str, obj: Any, options: Any, bases: list[Any]) -> None:
    """Show a class's public ancestors in place of a private base (``:show-inheritance:``).

    ``odecore.AbstractImplicitRK`` derives from a private helper class that holds the
    shared dense output; the page names the first public class above it instead.
    """
    for i, base in enumerate(bases):
        if isinstance(base, type) and base.__name__.startswith("_"):
            public = [b for b in base.__mro__[1:] if not b.__name__.startswith("_")]
            bases[i] = public[0] if public else object


# -- The table of schemes, generated from the tableaus ---------------------------------
#
# The order of the method comes from the solver class; the order of the embedded
# estimate and of the dense output are computed here from the Butcher order
# conditions (one per rooted tree), and the class's order is checked the same way.

_ORDER_TOL = 1e-10


@functools.cache
def _trees(n: int) -> list[tuple[Any, ...]]:
    """Rooted trees with ``n`` nodes, each a sorted tuple of its subtrees."""
    if n == 1:
        return [()]
    return sorted({new for tree in _trees(n - 1) for new in _grow(tree)})


def _grow(tree: tuple[Any, ...]) -> Any:
    """Every tree made from ``tree`` by adding one leaf."""
    yield tuple(sorted((*tree, ())))
    for i, child in enumerate(tree):
        for new in _grow(child):
            yield tuple(sorted((*tree[:i], new, *tree[i + 1 :])))


def _size(tree: tuple[Any, ...]) -> int:
    return 1 + sum(_size(child) for child in tree)


def _density(tree: tuple[Any, ...]) -> int:
    return _size(tree) * math.prod(_density(child) for child in tree)


def _stage_weights(tree: tuple[Any, ...], a: list[list[float]]) -> list[float]:
    """The elementary weights ``Phi_i(tree)`` of every stage ``i``."""
    s = len(a)
    out = [1.0] * s
    for child in tree:
        inner = _stage_weights(child, a)
        out = [out[i] * math.fsum(a[i][j] * inner[j] for j in range(s)) for i in range(s)]
    return out


def _order(
    a: list[list[float]], weights: Any, limit: int, thetas: tuple[float, ...] = (1.0,)
) -> int:
    """Largest ``p <= limit`` such that ``weights`` meet every order condition up to ``p``.

    ``weights(theta)`` gives the stage weights of the (continuous) solution at
    ``theta`` of the step; the conditions are ``sum_i b_i(theta) Phi_i(t) =
    theta**|t| / gamma(t)``, checked at each of ``thetas``.
    """
    for p in range(1, limit + 1):
        for tree in _trees(p):
            phi = _stage_weights(tree, a)
            for theta in thetas:
                b = weights(theta)
                lhs = math.fsum(bi * x for bi, x in zip(b, phi))
                if abs(lhs - theta**p / _density(tree)) > _ORDER_TOL:
                    return p - 1
    return limit


def _fixed(values: tuple[float, ...]) -> Any:
    return lambda theta: values


def _references(cls: type) -> str:
    """The ``References:`` section of a class docstring, on one line."""
    lines = inspect.getdoc(cls).splitlines()  # type: ignore[union-attr]
    try:
        start = lines.index("References:") + 1
    except ValueError:
        return ""
    out = []
    for line in lines[start:]:
        if line and not line.startswith(" "):
            break
        out.append(line.strip())
    return " ".join(x for x in out if x)


def _schemes_table() -> tuple[str, list[str]]:
    import odecore

    rows = [
        "| Method | Class | Order | Error estimate | Stages | Evaluations per step "
        "| FSAL | Step size | Dense output | Reference |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    methods = [
        (method, cls)
        for method, cls in [*odecore.FIXED_METHODS.items(), *odecore.ADAPTIVE_METHODS.items()]
        if issubclass(cls, odecore.AbstractExplicitRK)  # the implicit ones: their own table
    ]
    problems = []
    for method, cls in methods:
        tab = cls.tableau
        s = tab.stages
        a = [list(row) + [0.0] * (s - len(row)) for row in tab.a]
        order = _order(a, _fixed(tab.b), cls.order + 1)
        if order != cls.order:
            problems.append(
                f"{cls.__name__}.order is {cls.order}, but its tableau has order {order}"
            )
        if tab.b_err is None:
            estimate = "none"
        else:
            b_hat = tuple(b - e for b, e in zip(tab.b, tab.b_err))
            estimate = f"order {_order(a, _fixed(b_hat), cls.order)}"
        solver = cls()
        if solver.dense_kind == "hermite":
            m = max(0, math.ceil((cls.order - 3) / 2))
            per_node = s - 1 if tab.fsal else s
            extra = m * per_node + (0 if tab.fsal else 1)
            dense = f"Hermite, degree {2 * m + 3}, {m} sub-step(s), +{extra} per step with outputs"
        else:
            assert tab.dense is not None
            dense_rows = tab.dense

            def continuous(theta: float, rows: Any = dense_rows) -> tuple[float, ...]:
                return tuple(
                    math.fsum(c * theta ** (j + 1) for j, c in enumerate(row)) for row in rows
                )

            degree = max(len(row) for row in dense_rows)
            dense_order = _order(a, continuous, cls.order, (0.2, 0.5, 0.7, 1.0))
            if dense_order != tab.dense_order:
                problems.append(
                    f"{cls.__name__}: tableau.dense_order is {tab.dense_order}, but its "
                    f"extension has order {dense_order}"
                )
            dense = f"free polynomial, degree {degree}, order {dense_order}"
        reference = _references(cls) or "—"
        rows.append(
            f"| `{method}` | {{py:class}}`~odecore.{cls.__name__}` | {cls.order} "
            f"| {estimate} | {s} | {tab.evaluations_per_step} | {'yes' if tab.fsal else 'no'} "
            f"| {'adaptive' if tab.adaptive else 'fixed'} | {dense} | {reference} |"
        )
    return "\n".join(rows) + "\n", problems


def _implicit_schemes_table() -> tuple[str, list[str]]:
    """Every named method whose stages are implicit: order (checked against the
    tableau's order conditions, which hold for a full stage matrix as they do for a
    strictly lower one), stiff accuracy and the stability function at infinity."""
    import numpy as np
    import odecore

    rows = [
        "| Method | Class | Order | Error estimate | Stages | Implicit stages "
        "| Stiffly accurate | $\\lvert R(-\\infty) \\rvert$ | Step size | Reference |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    registries = [odecore.IMPLICIT_METHODS, odecore.FIXED_METHODS, odecore.ADAPTIVE_METHODS]
    problems = []
    for method, cls in [item for registry in registries for item in registry.items()]:
        if issubclass(cls, odecore.AbstractExplicitRK):
            continue
        tab = cls.tableau
        s = len(tab.c)
        a = [list(row) + [0.0] * (s - len(row)) for row in tab.a]
        order = _order(a, _fixed(tuple(tab.b)), cls.order + 1)
        if order != cls.order:
            problems.append(
                f"{cls.__name__}.order is {cls.order}, but its tableau has order {order}"
            )
        if tab.b_err is None:
            estimate = "none"
        else:
            b_hat = tuple(b - e for b, e in zip(tab.b, tab.b_err))
            estimate = f"order {_order(a, _fixed(b_hat), cls.order)}"
        implicit = sum(1 for i in range(s) if any(a[i][j] != 0.0 for j in range(i, s)))
        stiffly = tab.c[-1] == 1.0 and all(abs(x - y) <= 1e-12 for x, y in zip(a[-1], tab.b))
        # One step on y' = lambda y with z = h lambda far out on the negative axis:
        # R(z) = 1 + z b^T (I - z A)^{-1} 1.
        z = -1e8
        inner = np.linalg.solve(np.eye(s) - z * np.array(a), np.ones(s))
        at_infinity = abs(1.0 + z * float(np.array(tab.b) @ inner))
        reference = _references(cls) or "—"
        rows.append(
            f"| `{method}` | {{py:class}}`~odecore.{cls.__name__}` | {cls.order} | {estimate} "
            f"| {s} | {implicit} | {'yes' if stiffly else 'no'} | {round(at_infinity, 4):g} "
            f"| {'adaptive' if tab.b_err is not None else 'fixed'} | {reference} |"
        )
    return "\n".join(rows) + "\n", problems


def _write_generated(app: Any) -> None:
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    GENERATED.mkdir(exist_ok=True)
    if "odecore" not in PUBLISHED:
        return
    text, problems = _schemes_table()
    for problem in problems:
        logger.warning("schemes table: %s", problem)
    _write_if_changed("odecore_schemes.md", "the tableaus", text)
    text, problems = _implicit_schemes_table()
    for problem in problems:
        logger.warning("implicit schemes table: %s", problem)
    _write_if_changed("odecore_implicit_schemes.md", "the implicit tableaus", text)
    if "odebench" in PUBLISHED:
        from odebench.experiments import reproductions_table

        # The summary, the paper's claims and the checks, each experiment linked to its
        # page (the quickstart's is the training guide), relative to the page that
        # includes them, odebench/experiments/index.md.
        pages = DOCS / "odebench" / "experiments"
        elsewhere = {"quickstart": "../training.md"}

        def link(name: str) -> str | None:
            if (pages / f"{name}.md").exists():
                return f"{name}.md"
            page = elsewhere.get(name)
            return page if page is not None and (pages / page).exists() else None

        index = reproductions_table(DOCS / "results", link=link)
        _write_if_changed("reproductions.md", "docs/results/*/results.json", index)


def _write_if_changed(name: str, source: str, text: str) -> None:
    """Write ``_generated/NAME`` (only when it changes, so Sphinx rebuilds no more)."""
    text = f"<!-- Generated by docs/conf.py from {source}; do not edit. -->\n\n{text}"
    path = GENERATED / name
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def _check_all_documented(app: Any, env: Any) -> None:
    """Every name in a package's ``__all__`` has an entry in the API reference."""
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    documented = set(env.domains["py"].objects)
    for name in PUBLISHED + SUBPACKAGES:
        package = importlib.import_module(name)
        missing = [x for x in package.__all__ if f"{name}.{x}" not in documented]
        if missing:
            logger.warning("%s.__all__ has names the API reference lacks: %s", name, missing)


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _write_generated)
    app.connect("autodoc-process-docstring", _private_attr_doc, priority=200)
    app.connect("autodoc-process-docstring", _escape_initials, priority=100)
    app.connect("env-check-consistency", _check_all_documented)
    app.connect("autodoc-process-docstring", _public_types, priority=900)
    app.connect("autodoc-process-signature", _init_typehints)
    app.connect("doctree-resolved", _link_images)
    app.connect("autodoc-process-bases", _public_bases)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
