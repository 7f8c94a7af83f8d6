"""chen-tolerance's measurement and figures: the tolerance sweep, the gradient probe at the
solver's minimum and off it, their metrics, and the panels of the figures."""

from __future__ import annotations

import dataclasses
import statistics
import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, TypedDict

import odecore
import torch
from torch import Tensor, nn

from .._figures import Lines, Mark, Point, Style
from .._metrics import Metric
from ..data import Dataset
from ..models import nfe, ode_layers
from ..training import load_splits
from ._chen import TEST_ERROR, ode_specs
from ._result import Result
from ._template import Measurement

if TYPE_CHECKING:
    from ._chen_tolerance import ToleranceSettings
    from ._template import Setup, Trained


FLOOR_TOL = 1e2  # the rtol = atol of the solver's minimum (the docs page says why 1e2)
REFERENCE_TOL = 1e-7  # of the reference solve the probe's solve errors are measured against
Batch = tuple[Tensor, Tensor]  # test images and their labels
# The probe's NFE: forward, backward with the default norm, backward with the seminorm.
WAYS = ("forward", "backward", "backward_seminorm")


class SweepRow(TypedDict):
    """The sweep at one tolerance; each batch is ``[NFE, seconds, NFE at the minimum]``."""

    tol: float
    test_error: float
    nfe_forward: float
    seconds_per_batch: float
    at_floor: float
    batches: list[list[float]]


class Probe(TypedDict):
    """The gradient probe: the mean NFE at the solver's minimum, the images, and a row per
    tolerance: ``tol``, the means over its batches (``forward``, ``backward``,
    ``backward_seminorm`` NFE, ``solve_error``) and the shares of its batches at the
    minimum (``forward_at_floor``, ``backward_at_floor``)."""

    floor_forward: float
    floor_backward: float
    images: int
    rows: list[dict[str, float]]


# Of each model (its test error is chen-table1's TEST_ERROR): training, the probe, and what
# the claims read of the probe over the tolerances off the solver's minimum (_probe_metrics).
TRAIN_SECONDS = Metric("train_seconds", spec=".0f")
EPOCHS = Metric("epochs")
TRAINING_NFE = Metric("nfe", over=("way", "end"), spec=".1f", key_format="nfe_{way}_{end}")
FLOOR = Metric("floor", over=("way",), spec=".1f", key_format="floor_{way}")
PROBE = Metric("probe", over=("way", "tol"), spec=".1f", key_format="probe_{way}@{tol}")
SOLVE_ERROR = Metric("solve_error", over=("tol",), spec=".1e")
PROBE_OFF = Metric("probe_off_floor", over=("tol",))
RATIO = Metric("ratio", spec=".2f")
RATIO_TOLERANCES = Metric("ratio_tolerances", spec=".1f")
BACKWARD_OFF = Metric("backward_off_floor")
SEMINORM_OFF = Metric("backward_seminorm_off_floor")
SEMINORM_TOLERANCES = Metric("seminorm_tolerances")

# Of the sweep's model: the sweep, the line through forward time against NFE, the minimum.
SWEEP_ERROR = Metric("test_error", over=("tol",), spec=".2f", scale=100, unit="%")
SWEEP_NFE = Metric("nfe_forward", over=("tol",), spec=".1f")
SECONDS = Metric("seconds_per_batch", over=("tol",), spec=".1f", scale=1e3)
SWEEP_OFF = Metric("sweep_off_floor", over=("tol",))
TIME_NFE = {
    "slope": Metric("time_nfe_slope", spec=".2f", scale=1e3),
    "intercept": Metric("time_nfe_intercept"),
    "correlation": Metric("time_nfe_correlation", spec=".3f"),
}
FLOOR_SWEEP = Metric("floor_sweep", spec=".1f")


def _solving(model: nn.Module, tol: float, seminorm: bool = False) -> AbstractContextManager[None]:
    """Every ODE layer of ``model`` at ``rtol = atol = tol``, its adjoint with or without
    the seminorm, until the block ends."""

    def at_tol(spec: odecore.OdeSpec) -> odecore.OdeSpec:
        controller, gradient = spec.controller, spec.gradient
        if isinstance(controller, odecore.PIDController):
            controller = dataclasses.replace(controller, rtol=tol, atol=tol)
        if isinstance(gradient, odecore.Adjoint):
            gradient = dataclasses.replace(gradient, seminorm=seminorm)
        return dataclasses.replace(spec, controller=controller, gradient=gradient)

    return ode_specs(model, at_tol)


def _batches(model: nn.Module, data: Dataset, size: int, limit: int | None = None) -> list[Batch]:
    """Consecutive batches of ``size`` over the first ``limit`` items,
    normalised, on the model's device; the model in eval mode."""
    device = next(model.parameters()).device
    model.eval()
    inputs, targets = data.inputs[:limit].to(device), data.targets[:limit].to(device)
    return list(zip(torch.split(data.normalize(inputs), size), torch.split(targets, size)))


def _at_floor(nfes: list[float], floors: list[float]) -> float:
    """The share of batches whose NFE is at (or, by a rounding of the last step,
    under) their NFE at the solver's minimum."""
    return sum(n <= f for n, f in zip(nfes, floors)) / len(nfes)


def _sweep(model: nn.Module, test: Dataset, s: ToleranceSettings) -> list[SweepRow]:
    """At each tolerance, over the test set in batches of ``eval_batch``: test error,
    forward NFE, forward seconds, and the NFE of each batch at the solver's minimum."""
    batches = _batches(model, test, s.eval_batch)
    device = batches[0][0].device
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda _: None
    passes = []
    for tol in (FLOOR_TOL, *s.tolerances):
        wrong, nfes, seconds = 0, [], []
        with torch.no_grad(), _solving(model, tol):
            for x, y in batches:
                sync(device)
                start = time.perf_counter()
                logits = model(x)
                sync(device)
                seconds.append(time.perf_counter() - start)
                nfes.append(float(nfe(model)[0]))
                wrong += int((logits.argmax(1) != y).sum().item())
        passes.append((wrong, nfes, seconds))
    (_, floors, _), *swept = passes
    return [{
        "tol": tol, "test_error": wrong / len(test), "nfe_forward": statistics.mean(nfes),
        "seconds_per_batch": statistics.mean(seconds), "at_floor": _at_floor(nfes, floors),
        "batches": [[n, t, f] for n, t, f in zip(nfes, seconds, floors)],
    } for tol, (wrong, nfes, seconds) in zip(s.tolerances, swept)]  # fmt: skip


def _pass(
    model: nn.Module, x: Tensor, y: Tensor, tol: float, *, grad: bool = True, seminorm: bool = False
) -> tuple[Tensor, float, float]:
    """The ODE layers' outputs on ``x`` at ``rtol = atol = tol``, flattened and detached, and
    the forward and backward NFE; with ``grad``, of a gradient pass of the cross-entropy."""
    outputs: list[Tensor] = []
    hooks = [
        layer.register_forward_hook(lambda _m, _i, out: outputs.append(out.detach().flatten(1)))
        for layer in ode_layers(model)
    ]
    try:
        with _solving(model, tol, seminorm), torch.set_grad_enabled(grad):
            model.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            if grad:
                loss.backward()  # type: ignore[no-untyped-call]
    finally:
        for hook in hooks:
            hook.remove()
    forward, backward = nfe(model)
    return torch.cat(outputs, dim=1), float(forward), float(backward)


def _probe(model: nn.Module, test: Dataset, s: ToleranceSettings) -> Probe:
    """The gradient probe on the first ``probe_size`` test images, in training batches:
    a solve at :data:`REFERENCE_TOL`, a gradient pass at :data:`FLOOR_TOL`, then at each
    tolerance one with the default norm and one with the seminorm (the weights unchanged)."""
    batches = _batches(model, test, s.batch_size, s.probe_size)
    references = [_pass(model, x, y, REFERENCE_TOL, grad=False)[0] for x, y in batches]
    floors = [_pass(model, x, y, FLOOR_TOL)[1:] for x, y in batches]
    rows: list[dict[str, float]] = []
    for tol in s.tolerances:
        forward, backward, seminorm, errors = [], [], [], []
        for (x, y), reference in zip(batches, references):
            out, f, b = _pass(model, x, y, tol)
            forward.append(f)
            backward.append(b)
            errors.append(float((out - reference).norm() / reference.norm()))
            seminorm.append(_pass(model, x, y, tol, seminorm=True)[2])
        rows.append({
            "tol": tol, "forward": statistics.mean(forward), "backward": statistics.mean(backward),
            "backward_seminorm": statistics.mean(seminorm), "solve_error": statistics.mean(errors),
            "forward_at_floor": _at_floor(forward, [f for f, _ in floors]),
            "backward_at_floor": _at_floor(backward, [b for _, b in floors]),
        })  # fmt: skip
    model.zero_grad(set_to_none=True)
    return {
        "floor_forward": statistics.mean(f for f, _ in floors),
        "floor_backward": statistics.mean(b for _, b in floors),
        "images": sum(len(y) for _, y in batches),
        "rows": rows,
    }


def _probe_metrics(probe: Probe) -> dict[str, float | None]:
    """The probe's numbers per tolerance, and what the claims read of them over the
    tolerances off the solver's minimum (the text's claim details say what)."""
    rows = probe["rows"]
    metrics: dict[str, float | None] = {
        FLOOR.key(way="forward"): probe["floor_forward"],
        FLOOR.key(way="backward"): probe["floor_backward"],
    }
    for r in rows:
        metrics |= {PROBE.key(way=w, tol=r["tol"]): r[w] for w in WAYS}
        metrics[SOLVE_ERROR.key(tol=r["tol"])] = r["solve_error"]
        metrics[PROBE_OFF.key(tol=r["tol"])] = float(r["forward_at_floor"] < 0.5)
    off = [r for r in rows if r["forward_at_floor"] < 0.5]
    back = [r for r in rows if r["backward_at_floor"] < 0.5]
    return metrics | {
        RATIO.key(): statistics.median(r["backward"] / r["forward"] for r in off) if off else None,
        RATIO_TOLERANCES.key(): float(len(off)),
        BACKWARD_OFF.key(): statistics.mean(r["backward"] for r in back) if back else None,
        SEMINORM_OFF.key(): statistics.mean(r["backward_seminorm"] for r in back) if back else None,
        SEMINORM_TOLERANCES.key(): float(len(back)),
    }


def fit_line(points: list[tuple[float, float]]) -> dict[str, float | None]:
    """Least squares ``y = slope * x + intercept`` and Pearson's correlation: ``None`` for
    all three with fewer than two points or a single ``x``, for the correlation alone with
    a constant ``y`` (whose slope is 0)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if len(points) < 2 or statistics.pvariance(xs) == 0:
        return {"slope": None, "intercept": None, "correlation": None}
    slope, intercept = statistics.linear_regression(xs, ys)
    correlation = None if statistics.pvariance(ys) == 0 else statistics.correlation(xs, ys)
    return {"slope": slope, "intercept": intercept, "correlation": correlation}


def _sweep_metrics(rows: list[SweepRow]) -> dict[str, float | None]:
    """The sweep's numbers per tolerance, the line through time against NFE over every
    batch, and the sweep's minimum."""
    metrics: dict[str, float | None] = {}
    for r in rows:
        metrics |= {
            SWEEP_ERROR.key(tol=r["tol"]): r["test_error"],
            SWEEP_NFE.key(tol=r["tol"]): r["nfe_forward"],
            SECONDS.key(tol=r["tol"]): r["seconds_per_batch"],
            SWEEP_OFF.key(tol=r["tol"]): float(r["at_floor"] < 0.5),
        }
    fit = fit_line([(n, t) for r in rows for n, t, _ in r["batches"]])
    metrics |= {TIME_NFE[key].key(): value for key, value in fit.items()}
    return metrics | {FLOOR_SWEEP.key(): statistics.mean(f for _, _, f in rows[0]["batches"])}


def measure(setup: Setup[ToleranceSettings], trained: Trained) -> Measurement:
    """The training's NFE per epoch, the probe, and for the sweep's model the sweep."""
    assert trained.config is not None  # every run of `runs` has a config
    name = trained.run.name
    model = trained.load(setup.device)
    _, test = load_splits(trained.config)
    history = trained.history
    acc = trained.final_metrics()["test_acc"]
    metrics: dict[str, float | None] = {
        TEST_ERROR.key(): None if acc is None else 1.0 - acc,
        TRAIN_SECONDS.key(): trained.seconds,
        EPOCHS.key(): float(len(history)),
        **{TRAINING_NFE.key(way=way, end=end): history[i][f"nfe_{way}"]
           for way in WAYS[:2] for end, i in (("first", 0), ("last", -1))},
    }  # fmt: skip
    probed = _probe(model, test, setup.settings)
    metrics |= _probe_metrics(probed)
    keys = ("epoch", "test_acc", "nfe_forward", "nfe_backward")
    details = {"history": [{k: row.get(k) for k in keys} for row in history], "probe": probed}
    if name == setup.settings.sweep:
        details["tolerance_sweep"] = rows = _sweep(model, test, setup.settings)
        metrics |= _sweep_metrics(rows)
    return Measurement(metrics, details)


def error_panels(result: Result[ToleranceSettings]) -> list[Lines]:
    """Fig. 3a: test error and solve error against tolerance (the first seed)."""
    details = result.details(result.settings.sweep)
    test = [(r["tol"], 100 * r["test_error"]) for r in details["tolerance_sweep"]]
    solve = [(r["tol"], r["solve_error"]) for r in details["probe"]["rows"]]
    x = "tolerance (rtol = atol)"
    return [
        Lines("test error", x, "test error (%)", {"test error": test}, legend=None,
              xscale="log", invert_x=True),
        Lines("(a) solve error", x, f"relative error against {REFERENCE_TOL:g}",
              {"solve error": solve}, {"solve error": Style("s-")}, legend=None, xscale="log",
              yscale="log", invert_x=True),
    ]  # fmt: skip


def time_panels(result: Result[ToleranceSettings]) -> list[Lines]:
    """Fig. 3b: forward time per batch against NFE, with the fit (the first seed)."""
    sweep = result.settings.sweep
    rows = result.details(sweep)["tolerance_sweep"]
    slope, intercept, r = (result.stat(m.of(sweep)).values[0] for m in TIME_NFE.values())
    series: dict[str, list[Point]] = {
        f"tol {row['tol']:g}": [(n, t) for n, t, _ in row["batches"]] for row in rows
    }
    styles = dict.fromkeys(series, Style("o", alpha=0.6))
    if slope is not None and intercept is not None:
        nfes = [n for row in rows for n, _, _ in row["batches"]]
        series[f"fit, r = {r:.3f}"] = [(n, slope * n + intercept) for n in (min(nfes), max(nfes))]
        styles[f"fit, r = {r:.3f}"] = Style("--", color="k")
    return [Lines("(b) time vs NFE", "forward NFE", "forward time per batch (s)", series, styles)]


def ratio_panels(result: Result[ToleranceSettings]) -> list[Lines]:
    """Fig. 3c: the probe's backward NFE against its forward NFE, one point per
    tolerance (circles: default norm; squares, dashed: seminorm; a cross: the minimum),
    the first seed of each model, beside the paper's and the corrected slopes."""
    series: dict[str, list[Point]] = {}
    styles: dict[str, Style] = {}
    for name, colour in zip(result.metrics, ("C0", "C1")):
        probe = result.details(name)["probe"]
        forward = [r["forward"] for r in probe["rows"]]
        for label, way, line in ((name, "backward", "o-"), (f"{name}, seminorm", WAYS[2], "s--")):
            series[label] = list(zip(forward, [r[way] for r in probe["rows"]]))
            styles[label] = Style(line, colour)
        series[f"_{name} minimum"] = [(probe["floor_forward"], probe["floor_backward"])]
        styles[f"_{name} minimum"] = Style("x", colour)
    top = max(x for name in result.metrics for x, _ in series[name])  # the largest forward NFE
    for slope, line, shade, who in ((0.5, ":", "0.5", "paper"), (0.8, "--", "0.3", "corrected")):
        series[f"{who}: {slope}"] = [(0.0, 0.0), (top, slope * top)]
        styles[f"{who}: {slope}"] = Style(line, shade)
    return [Lines("(c) backward vs forward NFE", "forward NFE", "backward NFE", series, styles)]


def training_panels(result: Result[ToleranceSettings]) -> list[Lines]:
    """Fig. 3d: the mean forward NFE per training step of each epoch (the first seed of
    each model), with the solver's minimum dotted."""
    series: dict[str, list[Point]] = {}
    styles: dict[str, Style] = {}
    marks = []
    for name, colour in zip(result.metrics, ("C0", "C1")):
        series[name] = [(h["epoch"], h["nfe_forward"]) for h in result.details(name)["history"]]
        styles[name] = Style("o-", colour)
        floor = result.stat(FLOOR.of(name, way="forward")).values[0]
        if floor is not None:
            marks.append(Mark(floor, label=f"{name}: solver's minimum", color=colour))
    return [Lines("(d) NFE over training", "training epoch", "forward NFE per step", series,
                  styles, marks=marks)]  # fmt: skip
