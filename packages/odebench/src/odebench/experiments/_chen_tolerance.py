"""``odebench run chen-tolerance``: Chen et al. (2018), Fig. 3 on MNIST, on chen-table1's
trained ODE-Net and a softplus twin; docs/odebench/experiments/chen-tolerance.md says what
it measures and why its claims are judged only off the solver's minimum."""

from __future__ import annotations

import dataclasses
import itertools
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypedDict

import odecore
import torch
from torch import Tensor, nn

from .._figures import Lines, Mark, Point, Style
from ..data import Dataset
from ..models import nfe, ode_layers
from ..training import load_splits
from ._chen import MNIST_10K, MnistTraining, fit_line, mnist_config, optimiser_words
from ._claims import Claim
from ._metrics import Metric, Ref, Values
from ._registry import fmt
from ._result import Result
from ._runner import register_template
from ._tables import Col, Row, Table, by_coordinate, by_run
from ._template import Measurement, Plot, Run, Setup, Template, Trained

ACTIVATIONS = ("relu", "softplus")
"""The two trained models, named by their vector field's activation: ``relu`` is
chen-table1's ODE-Net, ``softplus`` its twin with a smooth field."""

GUARD_WORDS = "not reproduced: NFE at the solver's minimum"
"""What the report says of a claim on a seed where the NFE it reads is not off the minimum."""

FLOOR_TOL = 1e2
"""The ``rtol = atol`` of the solver's minimum: no error estimate reaches it, so every
step is accepted and grows by the controller's largest factor from the first step, and
a batch's NFE at any tighter tolerance is at least its NFE here. Much looser (1e6), the
scaled state and derivative read as zero to the first-step heuristic, which then starts
at 1e-6 and takes more steps, not fewer."""

REFERENCE_TOL = 1e-7
"""The ``rtol = atol`` of the reference solve that the probe's solve errors are
measured against (float32, two decades below the sweep's tightest)."""

Batch = tuple[Tensor, Tensor]
"""Test images and their labels."""

WAYS = ("forward", "backward", "backward_seminorm")
"""The probe's NFE: forward, backward with the default norm, backward with the seminorm."""


class SweepRow(TypedDict):
    """The sweep at one tolerance: test error, mean forward NFE and seconds per batch,
    the share of batches at the solver's minimum, and each batch's ``[NFE, seconds,
    NFE at the minimum]``."""

    tol: float
    test_error: float
    nfe_forward: float
    seconds_per_batch: float
    at_floor: float
    batches: list[list[float]]


class ProbeRow(TypedDict):
    """The probe at one tolerance: the mean NFE of each of :data:`WAYS`, the mean solve
    error, and the shares of batches whose forward and backward NFE are at the minimum."""

    tol: float
    forward: float
    backward: float
    backward_seminorm: float
    solve_error: float
    forward_at_floor: float
    backward_at_floor: float


class Probe(TypedDict):
    """The gradient probe: the mean NFE at the solver's minimum, the images, each tolerance."""

    floor_forward: float
    floor_backward: float
    images: int
    rows: list[ProbeRow]


# Of each model: test error, training, the probe, and what the claims read of the probe
# over the tolerances off the solver's minimum (see _probe_metrics).
TEST_ERROR = Metric("test_error", spec=".2f", scale=100, unit="%")
TRAIN_SECONDS, EPOCHS = Metric("train_seconds", spec=".0f"), Metric("epochs")
TRAINING_NFE = Metric("nfe", over=("way", "end"), spec=".1f", key_format="nfe_{way}_{end}")
FLOOR = Metric("floor", over=("way",), spec=".1f", key_format="floor_{way}")
PROBE = Metric("probe", over=("way", "tol"), spec=".1f", key_format="probe_{way}@{tol}")
SOLVE_ERROR = Metric("solve_error", over=("tol",), spec=".1e")
PROBE_OFF = Metric("probe_off_floor", over=("tol",))
RATIO, RATIO_TOLERANCES = Metric("ratio", spec=".2f"), Metric("ratio_tolerances", spec=".1f")
BACKWARD_OFF, SEMINORM_OFF = Metric("backward_off_floor"), Metric("backward_seminorm_off_floor")
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


@dataclass(frozen=True, kw_only=True)
class ToleranceSettings(MnistTraining):
    """The training of the two models (chen-table1's: with the same values, the ReLU
    model is the ODE-Net that chen-table1 reports; ``batch_size`` is the probe's batch
    too), and what is measured on them.

    Args:
        tolerances: the sweep's ``rtol = atol``, loosest first; they include ``train_tol``.
        eval_batch: the batch of the sweep's test passes.
        probe_size: the first test images the gradient probe runs on, in training batches.
        train_tol: ``rtol = atol`` in training (Chen et al.'s).
        sweep: the model whose sweep tests Fig. 3a-b and whose training Fig. 3d.
    """

    tolerances: tuple[float, ...]
    eval_batch: int
    probe_size: int
    train_tol: float = 1e-3
    sweep: str = "relu"

    def __post_init__(self) -> None:
        super().__post_init__()
        tols = self.tolerances
        problems = [
            (self.train_size is not None and self.train_size < self.batch_size,
             f"`train_size` ({self.train_size}) must hold one batch ({self.batch_size})."),
            (len(tols) < 2 or min(tols) <= 0 or list(tols) != sorted(set(tols), reverse=True),
             f"`tolerances` must be positive and loosest first, got {tols!r}."),
            (self.train_tol not in tols,
             f"`tolerances` {tols!r} must include `train_tol` ({self.train_tol:g}): "
             "Fig. 3d's guard reads the sweep at the training tolerance."),
            (self.sweep not in ACTIVATIONS,
             f"`sweep` must be one of {', '.join(ACTIVATIONS)}, got {self.sweep!r}."),
        ]  # fmt: skip
        for bad, message in problems:
            if bad:
                raise ValueError(message)


MODES = {
    # The code path in seconds: one epoch of 512 images, Adam.
    "quick": ToleranceSettings(
        epochs=1, batch_size=32, lr=1e-3, milestones=(), augment=False, train_size=512,
        test_size=256, optimizer="adam", tolerances=(1e-1, 1e-3, 1e-5), eval_batch=128,
        probe_size=64,
    ),
    # chen-table1's standard training for each of the two models, three seeds, one torch
    # thread: about 20 minutes a seed on an idle core (the docs page gives the trial).
    "standard": ToleranceSettings(
        seeds=3, epochs=8, batch_size=64, lr=1e-3, milestones=(6,), augment=False,
        train_size=MNIST_10K[0], test_size=MNIST_10K[1], optimizer="adam",
        tolerances=(1e-1, 1e-2, 1e-3, 1e-4, 1e-5), eval_batch=500, probe_size=256,
    ),
    # chen-table1's full training, torchdiffeq's reproduction of the paper: 160 epochs
    # of all of MNIST, SGD, the rate times 0.1 at epochs 60, 100, 140, random crops.
    "full": ToleranceSettings(
        seeds=1, epochs=160, batch_size=128, lr=0.1, milestones=(60, 100, 140), augment=True,
        train_size=None, test_size=None, optimizer="sgd",
        tolerances=(1e-1, 1e-2, 1e-3, 1e-4, 1e-5), eval_batch=500, probe_size=512,
    ),
}  # fmt: skip


def runs(setup: Setup[ToleranceSettings], seed: int) -> list[Run]:
    """The ReLU model (chen-table1's ODE-Net) and its softplus twin."""
    s = setup.settings
    odenet = mnist_config(s, seed, "odenet", s.train_tol)
    return [Run(a, config=dataclasses.replace(odenet, activation=a)) for a in ACTIVATIONS]


@contextmanager
def _solving(model: nn.Module, tol: float, seminorm: bool = False) -> Iterator[None]:
    """Every ODE layer of ``model`` at ``rtol = atol = tol``, its adjoint with or without
    the seminorm; the layers' specs are put back afterwards."""
    layers = ode_layers(model)
    kept = [layer.spec for layer in layers]
    try:
        for layer in layers:
            spec = layer.spec
            controller, gradient = spec.controller, spec.gradient
            if isinstance(controller, odecore.PIDController):
                controller = dataclasses.replace(controller, rtol=tol, atol=tol)
            if isinstance(gradient, odecore.Adjoint):
                gradient = dataclasses.replace(gradient, seminorm=seminorm)
            layer.spec = dataclasses.replace(spec, controller=controller, gradient=gradient)
        yield
    finally:
        for layer, spec in zip(layers, kept):
            layer.spec = spec


def _batches(model: nn.Module, data: Dataset, size: int, limit: int | None = None) -> list[Batch]:
    """Consecutive batches of ``size`` over the first ``limit`` items,
    normalised, on the model's device; the model in eval mode."""
    device = next(model.parameters()).device
    model.eval()
    n = len(data) if limit is None else min(limit, len(data))
    spans = [(a, min(a + size, n)) for a in range(0, n, size)]
    return [(data.normalize(data.inputs[a:b].to(device)), data.targets[a:b].to(device))
            for a, b in spans]  # fmt: skip


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
        with _solving(model, tol, seminorm):
            if grad:
                model.zero_grad(set_to_none=True)
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()  # type: ignore[no-untyped-call]
            else:
                with torch.no_grad():
                    model(x)
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
    rows: list[ProbeRow] = []
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
        nfes = (r["forward"], r["backward"], r["backward_seminorm"])
        metrics |= {PROBE.key(way=w, tol=r["tol"]): n for w, n in zip(WAYS, nfes)}
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
    history = [dict(row) for row in trained.history]
    acc = trained.final_metrics()["test_acc"]
    metrics: dict[str, float | None] = {
        TEST_ERROR.key(): None if acc is None else 1.0 - acc,
        TRAIN_SECONDS.key(): trained.seconds,
        EPOCHS.key(): float(len(history)),
        **{TRAINING_NFE.key(way=way, end=end): history[i][f"nfe_{way}"]
           for way in WAYS[:2] for end, i in (("first", 0), ("last", -1))},
    }  # fmt: skip
    probe = _probe(model, test, setup.settings)
    metrics |= _probe_metrics(probe)
    keys = ("epoch", "test_acc", "nfe_forward", "nfe_backward")
    details = {"history": [{k: row.get(k) for k in keys} for row in history], "probe": probe}
    if name == setup.settings.sweep:
        details["tolerance_sweep"] = rows = _sweep(model, test, setup.settings)
        metrics |= _sweep_metrics(rows)
        r = fmt(metrics[TIME_NFE["correlation"].key()], ".3f")
        setup.log(f"[{name}] sweep: time vs NFE correlation {r}")
    setup.log(
        f"[{name}] seed {trained.seed}: test error {fmt(metrics[TEST_ERROR.key()], '.2%')}, "
        f"minimum NFE {probe['floor_forward']:.0f}/{probe['floor_backward']:.0f}, "
        f"backward/forward {fmt(metrics[RATIO.key()], '.2f')} over "
        f"{metrics[RATIO_TOLERANCES.key()]:.0f} tolerance(s) off the minimum"
    )
    return Measurement(metrics, details)


def _grows(values: list[float]) -> bool:
    """Never falls from one value to the next, and ends higher than it starts (negated:
    never rises, and ends lower)."""
    return all(b >= a for a, b in itertools.pairwise(values)) and values[-1] > values[0]


def _guarded_claims(s: ToleranceSettings) -> list[tuple[Claim, list[Ref]]]:
    """Fig. 3's claims, each with what says whether the NFE it reads is off the solver's
    minimum: above 0.5 (a share of seeds on the means) where it is."""
    sweep, loose, tight = s.sweep, s.tolerances[0], s.tolerances[-1]
    r = TIME_NFE["correlation"].of(sweep)
    last, first = (TRAINING_NFE.of(sweep, way="forward", end=end) for end in ("last", "first"))
    sweep_off = [SWEEP_OFF.of(sweep, tol=tight)]
    ratios_off = [RATIO_TOLERANCES.of(n) for n in ACTIVATIONS]

    def at(v: Values, metric: Metric, tol: float) -> float:
        return v[metric.of(sweep, tol=tol)]

    def ratio(v: Values) -> float:
        return v[RATIO.of("softplus")]

    return [
        (Claim("nfe_grows_as_tolerance_tightens",
               "forward NFE grows as the tolerance tightens (Fig. 3a-b)",
               "grows; numbers not published",
               ours=lambda v: at(v, SWEEP_NFE, tight) / at(v, SWEEP_NFE, loose),
               holds=lambda v: _grows([at(v, SWEEP_NFE, t) for t in s.tolerances]),
               spec=".2f", unit="×", kind="paper"), sweep_off),
        (Claim("solve_error_falls_as_tolerance_tightens",
               "the ODE solve's error falls as the tolerance tightens (Fig. 3a)",
               "falls; numbers not published",
               ours=lambda v: at(v, SOLVE_ERROR, tight) / at(v, SOLVE_ERROR, loose),
               holds=lambda v: _grows([-at(v, SOLVE_ERROR, t) for t in s.tolerances]),
               spec=".2g", unit="×", kind="paper"), [PROBE_OFF.of(sweep, tol=tight)]),
        (Claim("error_at_tightest_not_above_loosest",
               "test error is no higher at the tightest tolerance (Fig. 3a)",
               "falls as it tightens; numbers not published",
               ours=lambda v: at(v, SWEEP_ERROR, tight) - at(v, SWEEP_ERROR, loose),
               holds=lambda v: at(v, SWEEP_ERROR, tight) <= at(v, SWEEP_ERROR, loose),
               spec="+.2f", scale=100, unit=" points", kind="paper"), sweep_off),
        (Claim("time_proportional_to_nfe", "forward time is proportional to NFE (Fig. 3b)",
               "proportional; slope not published", ours=lambda v: v[r],
               holds=lambda v: v[r] > 0.9, kind="paper", timing=True), sweep_off),
        (Claim("softplus_ratio_roughly_half",
               "softplus backward NFE is roughly half the forward (Fig. 3c)", "about 0.5",
               ours=ratio, holds=lambda v: 0.35 <= ratio(v) <= 0.65, spec=".2f", kind="paper"),
         ratios_off[1:]),
        (Claim("softplus_ratio_near_corrected",
               "the softplus ratio is near the corrected ~0.8 (third party, Fig. 3c)",
               "about 0.8 (0.78-0.86)", ours=ratio, holds=lambda v: 0.7 <= ratio(v) <= 0.95,
               spec=".2f", kind="paper"), ratios_off[1:]),
        (Claim.difference("relu_ratio_above_softplus",
                          "the ReLU field's backward/forward NFE ratio exceeds the softplus one",
                          "not published (smooth fields only)", RATIO.of("relu"),
                          RATIO.of("softplus"), above=0.0, kind="paper"), ratios_off),
        *((Claim.difference(f"seminorm_fewer_backward_nfe_{n}",
                            f"the seminorm needs fewer backward NFE ({n}; Kidger et al., 2021)",
                            "fewer (Kidger et al., 2021)", SEMINORM_OFF.of(n), BACKWARD_OFF.of(n),
                            below=0.0, kind="paper", spec="+.1f"), [SEMINORM_TOLERANCES.of(n)])
          for n in ACTIVATIONS),
        (Claim("nfe_increases_during_training", "forward NFE increases during training (Fig. 3d)",
               "increases; numbers not published", ours=lambda v: v[last] / v[first],
               holds=lambda v: v[last] > v[first], spec=".2f", unit="×", kind="paper"),
         [SWEEP_OFF.of(sweep, tol=s.train_tol)]),
    ]  # fmt: skip


def claims(setup: Setup[ToleranceSettings]) -> list[Claim]:
    """Fig. 3's claims on the trained models, each holding only where the NFE it reads is
    off the solver's minimum."""
    return [_guarded(claim, guards) for claim, guards in _guarded_claims(setup.settings)]


def _off(v: Values, guards: list[Ref]) -> bool:
    """Whether every one of ``guards`` is off the solver's minimum in ``v``."""
    return all(v[ref] > 0.5 for ref in guards)


def _guarded(claim: Claim, guards: list[Ref]) -> Claim:
    """``claim``, holding only where the NFE it reads is off the solver's minimum."""
    test = claim.holds
    return dataclasses.replace(claim, holds=lambda v: _off(v, guards) and test(v))


def _guard_words(result: Result[Any], guards: list[Ref]) -> str:
    """Whether the NFE a claim reads is off the solver's minimum, seed by seed, in words."""
    seeds = result.setup.seeds
    stuck = [seed for seed, v in zip(seeds, result.per_seed()) if not _off(v, guards)]
    if not stuck:
        return f"off the minimum on {len(seeds)} of {len(seeds)} seed(s)"
    which = ", ".join(str(seed) for seed in stuck)
    return f"{GUARD_WORDS} on seed(s) {which} ({len(stuck)} of {len(seeds)})"


def _probe_cell(way: str) -> Callable[[Result[Any], Row], str]:
    """A cell of the probe's table: its NFE at the row's tolerance or, on the row without
    one, at the solver's minimum."""
    return lambda result, row: result.cell(
        PROBE.of(row.run, way=way, **row.at) if row.at else FLOOR.of(row.run, way=way)
    )


def _probe_ratio(result: Result[Any], row: Row) -> str:
    """The probe's backward over forward NFE at the row's tolerance, the mean of the
    seeds' ratios."""
    pairs = zip(*(result.stat(PROBE.of(row.run, way=w, **row.at)).values for w in WAYS[:2]))
    known = [b / f for f, b in pairs if f is not None and b is not None and f != 0]
    return fmt(statistics.fmean(known) if known else None, ".2f")


def tables(setup: Setup[ToleranceSettings]) -> dict[str, Table]:
    """The guards, the sweep, the probe, the ratios, the training."""
    s = setup.settings
    guards = {claim.text: refs for claim, refs in _guarded_claims(s)}
    # The row of the solver's minimum, where neither the seminorm nor the ratio is measured.
    minimum = {
        "tolerance": f"minimum ({FLOOR_TOL:g})",
        "backward, seminorm": "",
        "backward/forward": "",
    }
    probe = [
        Row(n, n, at, text={"tolerance": f"{at['tol']:g}"} if at else minimum)
        for n in ACTIVATIONS
        for at in ({}, *({"tol": tol} for tol in s.tolerances))
    ]

    def first_last(way: str) -> Col:
        return Col(
            f"{way} NFE, first / last epoch",
            cell=lambda result, row: " / ".join(
                result.cell(TRAINING_NFE.of(row.run, way=way, end=end)) for end in ("first", "last")
            ),
        )

    def seeds_off(result: Result[Any], row: Row) -> str:
        off = result.stat(SWEEP_OFF.of(row.run, **row.at))
        return f"{sum(1 for v in off.values if v is not None and v > 0.5)} of {off.n}"

    models = {n: n for n in ACTIVATIONS}
    return {
        "guards": Table("claim", [Row(text) for text in guards], [Col(
            "the NFE it reads", cell=lambda result, row: _guard_words(result, guards[row.label]))]),
        "sweep": by_coordinate("tolerance", s.sweep, "tol", s.tolerances, [
            Col("test error", SWEEP_ERROR), Col("forward NFE", SWEEP_NFE),
            Col("off the minimum (seeds)", cell=seeds_off),
            Col("forward time per batch, ms", SECONDS), Col("solve error (probe)", SOLVE_ERROR),
            Col("paper", text="not published")]),
        "probe": Table("model", probe, [
            Col("tolerance"), Col("forward NFE", cell=_probe_cell("forward")),
            Col("backward NFE", cell=_probe_cell("backward")),
            Col("backward, seminorm", cell=_probe_cell("backward_seminorm")),
            Col("backward/forward", cell=_probe_ratio)]),
        "ratios": by_run("model", models, [
            Col("backward/forward off the minimum (ours)", RATIO),
            Col("tolerances off the minimum", RATIO_TOLERANCES), Col("paper", text="~0.5"),
            Col("corrected (third party)", text="~0.8 (0.78-0.86)")]),
        "training": by_run("model", models, [
            Col("test error", TEST_ERROR), first_last("forward"), first_last("backward"),
            Col("training, s", TRAIN_SECONDS)]),
    }  # fmt: skip


def words(result: Result[ToleranceSettings]) -> dict[str, object]:
    """What the text reads besides the settings: the training in words, the tolerances
    of the claims, and the sweep's minimum and time-NFE line."""
    s = result.settings
    return {
        "train_images": "all" if s.train_size is None else s.train_size,
        "optimiser": optimiser_words(s.optimizer, s.lr, s.milestones, s.augment),
        "floor_tol": FLOOR_TOL,
        "reference_tol": REFERENCE_TOL,
        "loosest": s.tolerances[0],
        "tightest": s.tolerances[-1],
        "floor_sweep": result.cell(FLOOR_SWEEP.of(s.sweep)),
        "correlation": result.cell(TIME_NFE["correlation"].of(s.sweep)),
        "slope": result.cell(TIME_NFE["slope"].of(s.sweep)),
    }


def error_panels(result: Result[ToleranceSettings]) -> list[Lines]:
    """Fig. 3a: test error and solve error against tolerance (the first seed)."""
    details = result.details(result.settings.sweep)
    rows, probe = details["tolerance_sweep"], details["probe"]["rows"]
    xlabel = "tolerance (rtol = atol)"
    return [
        Lines("test error", xlabel, "test error (%)", legend=None, xscale="log", invert_x=True,
              series={"test error": [(r["tol"], 100 * r["test_error"]) for r in rows]}),
        Lines("(a) solve error", xlabel, f"relative error against {REFERENCE_TOL:g}",
              series={"solve error": [(r["tol"], r["solve_error"]) for r in probe]},
              styles={"solve error": Style("s-")}, legend=None, xscale="log", yscale="log",
              invert_x=True),
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
        ends = [f(n for row in rows for n, _, _ in row["batches"]) for f in (min, max)]
        series[f"fit, r = {r:.3f}"] = [(x, slope * x + intercept) for x in ends]
        styles[f"fit, r = {r:.3f}"] = Style("--", color="k")
    return [Lines("(b) time vs NFE", "forward NFE", "forward time per batch (s)", series, styles)]


def ratio_panels(result: Result[ToleranceSettings]) -> list[Lines]:
    """Fig. 3c: the probe's backward NFE against its forward NFE, one point per
    tolerance (circles: default norm; squares, dashed: seminorm; a cross: the minimum),
    the first seed of each model, beside the paper's and the corrected slopes."""
    series: dict[str, list[Point]] = {}
    styles: dict[str, Style] = {}
    top = 0.0
    for name, colour in zip(result.metrics, ("C0", "C1")):
        probe = result.details(name)["probe"]
        forward = [r["forward"] for r in probe["rows"]]
        for label, way, line in ((name, "backward", "o-"), (f"{name}, seminorm", WAYS[2], "s--")):
            series[label] = list(zip(forward, [r[way] for r in probe["rows"]]))
            styles[label] = Style(line, colour)
        series[f"_{name} minimum"] = [(probe["floor_forward"], probe["floor_backward"])]
        styles[f"_{name} minimum"] = Style("x", colour)
        top = max(top, *forward)
    for slope, line, shade, who in ((0.5, ":", "0.5", "paper"), (0.8, "--", "0.3", "corrected")):
        series[f"{who}: {slope}"] = [(0.0, 0.0), (top, slope * top)]
        styles[f"{who}: {slope}"] = Style(line, shade)
    title = "(c) backward vs forward NFE"
    return [Lines(title, "forward NFE", "backward NFE", series, styles)]


def training_panels(result: Result[ToleranceSettings]) -> list[Lines]:
    """Fig. 3d: the mean forward NFE per training step of each epoch (the first seed of
    each model), with the solver's minimum dotted."""
    series: dict[str, list[Point]] = {}
    styles: dict[str, Style] = {}
    marks = []
    for name, colour in zip(result.metrics, ("C0", "C1")):
        history = result.details(name)["history"]
        series[name] = [(h["epoch"], h["nfe_forward"]) for h in history]
        styles[name] = Style("o-", colour)
        floor = result.stat(FLOOR.of(name, way="forward")).values[0]
        if floor is not None:
            marks.append(Mark(floor, label=f"{name}: solver's minimum", color=colour))
    title, ylabel = "(d) NFE over training", "forward NFE per step"
    return [Lines(title, "training epoch", ylabel, series, styles, marks=marks)]


register_template(
    Template(
        name="chen-tolerance",
        description="Chen et al. (2018) Fig. 3 on chen-table1's trained ODE-Net and a "
        "softplus twin: error, time and NFE against the solver tolerance, backward/forward "
        "NFE with and without the seminorm, NFE over training",
        title="Chen et al. (2018), Fig. 3: tolerance and NFE on MNIST",
        modes=MODES,
        runs=runs,
        measure=measure,
        claims=claims,
        text="chen-tolerance.md",
        tables=tables,
        words=words,
        figures=[
            Plot("fig3a_error_vs_tol.png", error_panels, size=(4, 3.4)),
            Plot("fig3b_time_vs_nfe.png", time_panels),
            Plot("fig3c_ratio.png", ratio_panels, size=(5, 3.8)),
            Plot("fig3d_nfe.png", training_panels),
        ],
        one_thread_modes=("quick", "standard"),
    )
)
