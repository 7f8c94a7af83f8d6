"""odebench's public API, and its use of odecore through odecore's public API only."""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

import odebench
import odebench.perf

SRC = Path(odebench.__file__).resolve().parent


def test_all_snapshot():
    # Changing the public API is a decision: update these lists in the same change.
    assert odebench.__all__ == ["main"]
    assert sorted(odebench.perf.__all__) == [
        "Bars",
        "ContnetConfig",
        "Lines",
        "SolversConfig",
        "format_contnet_report",
        "format_report",
        "plot_solvers",
        "run_contnet",
        "run_solvers",
        "solver_panels",
    ]


def test_subpackage_snapshots():
    import odebench.data
    import odebench.experiments
    import odebench.models
    import odebench.training

    assert sorted(odebench.data.__all__) == [
        "Augment", "DataError", "DataNotFoundError", "Dataset", "annuli", "download",
        "horizontal_flip", "load_cifar", "load_mnist", "load_svhn", "nested_spirals", "pendulum",
        "random_crop", "read_idx", "reflection",
    ]  # fmt: skip
    assert sorted(odebench.models.__all__) == [
        "MODELS", "ModelInfo", "build_model", "count_parameters", "nfe", "ode_layers",
    ]  # fmt: skip
    assert sorted(odebench.training.__all__) == [
        "DATASETS", "DatasetInfo", "Epoch", "Interrupted", "RunExistsError", "Task",
        "TrainConfig", "Training", "TrainingFailedError", "default_out",
        "default_row", "evaluate", "find_data", "fit", "load_model", "resolve_device",
        "search_paths", "train",
    ]  # fmt: skip
    assert sorted(odebench.experiments.__all__) == [
        "Claim", "Col", "DEFAULT_MODE", "EXPERIMENTS", "Experiment", "Figure", "MODES",
        "Measurement", "Metric", "Plot", "Provenance", "Ref", "Result", "Row", "Run",
        "RunOptions", "Settings", "Setup", "Source", "Stat", "TEMPLATES", "Table", "Template",
        "Trained",
        "TrainingSettings", "Values",
        "Verdict", "check_declaration", "combine_reports", "publish", "register",
        "register_template", "reproductions_table", "rerender", "run_experiment",
        "run_template", "verdict_status",
    ]  # fmt: skip
    for package in (odebench.data, odebench.models, odebench.training, odebench.experiments):
        assert (package.__doc__ or "").strip(), package
        for name in package.__all__:
            obj = getattr(package, name)
            if callable(obj):
                assert (obj.__doc__ or "").strip(), f"{package.__name__}.{name}"


def test_version_matches_the_distribution():
    assert odebench.__version__ == importlib.metadata.version("odebench")


def test_public_objects_have_docstrings():
    public = [getattr(odebench.perf, name) for name in odebench.perf.__all__]
    for obj in (odebench, odebench.perf, odebench.main, *public):
        assert (obj.__doc__ or "").strip(), obj


def test_odecore_is_used_through_its_public_api_only():
    offences = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("odecore"):
                offences.append(f"{path.name}:{node.lineno}: from {node.module} import ...")
            elif isinstance(node, ast.Import):
                offences += [
                    f"{path.name}:{node.lineno}: import {a.name}"
                    for a in node.names
                    if a.name.startswith("odecore.")
                ]
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "odecore"
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                offences.append(f"{path.name}:{node.lineno}: odecore.{node.attr}")
    assert offences == []
