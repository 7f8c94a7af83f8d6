"""``odebench run chen-tolerance``: Chen et al. (2018), Fig. 3 on MNIST, on chen-table1's
trained ODE-Net and a softplus twin; docs/odebench/experiments/chen-tolerance.md says what
it measures and why its claims are judged only off the solver's minimum."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import _chen_tolerance_probe as probe
from ._chen import MNIST_10K, TEST_ERROR, MnistTraining, mnist_config, optimiser_words
from ._claims import Claim
from ._metrics import Ref, Values
from ._result import Result
from ._runner import register_template
from ._tables import Col, Row, Table, by_coordinate, by_run
from ._template import Plot, Run, Setup, Template

# The two models, by their field's activation: chen-table1's ODE-Net and its smooth twin.
ACTIVATIONS = ("relu", "softplus")
# What the report says of a claim on a seed where the NFE it reads is at the minimum.
GUARD_WORDS = "not reproduced: NFE at the solver's minimum"


@dataclass(frozen=True, kw_only=True)
class ToleranceSettings(MnistTraining):
    """The training of the two models (chen-table1's, whose ODE-Net the ReLU model is;
    ``batch_size`` is the probe's batch too), and what is measured on them.

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
    # The code path in seconds.
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
    # chen-table1's full training, torchdiffeq's reproduction of the paper.
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


def _grows(values: list[float]) -> bool:
    """Never falls from one value to the next, and ends higher than it starts (negated:
    never rises, and ends lower)."""
    return all(b >= a for a, b in itertools.pairwise(values)) and values[-1] > values[0]


def _guarded_claims(s: ToleranceSettings) -> list[tuple[Claim, list[Ref]]]:
    """Fig. 3's claims, each with what says whether the NFE it reads is off the solver's
    minimum: above 0.5 (a share of seeds on the means) where it is."""
    sweep, tight = s.sweep, s.tolerances[-1]
    nfe, solve, error = (  # the sweep's model at each tolerance, loosest first
        [metric.of(sweep, tol=tol) for tol in s.tolerances]
        for metric in (probe.SWEEP_NFE, probe.SOLVE_ERROR, probe.SWEEP_ERROR)
    )
    last, first = (probe.TRAINING_NFE.of(sweep, way="forward", end=e) for e in ("last", "first"))
    sweep_off = [probe.SWEEP_OFF.of(sweep, tol=tight)]
    ratio, ratios_off = probe.RATIO.of("softplus"), [probe.RATIO_TOLERANCES.of("softplus")]
    return [
        (Claim("nfe_grows_as_tolerance_tightens",
               "forward NFE grows as the tolerance tightens (Fig. 3a-b)",
               "grows; numbers not published", ours=lambda v: v[nfe[-1]] / v[nfe[0]],
               holds=lambda v: _grows([v[ref] for ref in nfe]),
               spec=".2f", unit="×", kind="paper"), sweep_off),
        (Claim("solve_error_falls_as_tolerance_tightens",
               "the ODE solve's error falls as the tolerance tightens (Fig. 3a)",
               "falls; numbers not published", ours=lambda v: v[solve[-1]] / v[solve[0]],
               holds=lambda v: _grows([-v[ref] for ref in solve]),
               spec=".2g", unit="×", kind="paper"), [probe.PROBE_OFF.of(sweep, tol=tight)]),
        (Claim("error_at_tightest_not_above_loosest",
               "test error is no higher at the tightest tolerance (Fig. 3a)",
               "falls as it tightens; numbers not published",
               ours=lambda v: v[error[-1]] - v[error[0]],
               holds=lambda v: v[error[-1]] <= v[error[0]],
               spec="+.2f", scale=100, unit=" points", kind="paper"), sweep_off),
        (Claim.at_least("time_proportional_to_nfe",
                        "forward time is proportional to NFE (Fig. 3b)",
                        "proportional; slope not published",
                        probe.TIME_NFE["correlation"].of(sweep), 0.9, strict=True, spec=".3g",
                        kind="paper", timing=True), sweep_off),
        (Claim.between("softplus_ratio_roughly_half",
                       "softplus backward NFE is roughly half the forward (Fig. 3c)", "about 0.5",
                       ratio, 0.35, 0.65, kind="paper"), ratios_off),
        (Claim.between("softplus_ratio_near_corrected",
                       "the softplus ratio is near the corrected ~0.8 (third party, Fig. 3c)",
                       "about 0.8 (0.78-0.86)", ratio, 0.7, 0.95, kind="paper"), ratios_off),
        (Claim.difference("relu_ratio_above_softplus",
                          "the ReLU field's backward/forward NFE ratio exceeds the softplus one",
                          "not published (smooth fields only)", probe.RATIO.of("relu"), ratio,
                          above=0.0, kind="paper"),
         [probe.RATIO_TOLERANCES.of(n) for n in ACTIVATIONS]),
        *((Claim.difference(f"seminorm_fewer_backward_nfe_{n}",
                            f"the seminorm needs fewer backward NFE ({n}; Kidger et al., 2021)",
                            "fewer (Kidger et al., 2021)", probe.SEMINORM_OFF.of(n),
                            probe.BACKWARD_OFF.of(n), below=0.0, kind="paper", spec="+.1f"),
           [probe.SEMINORM_TOLERANCES.of(n)]) for n in ACTIVATIONS),
        (Claim.ratio("nfe_increases_during_training",
                     "forward NFE increases during training (Fig. 3d)",
                     "increases; numbers not published", last, first, above=1.0, kind="paper"),
         [probe.SWEEP_OFF.of(sweep, tol=s.train_tol)]),
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
        probe.PROBE.of(row.run, way=way, **row.at) if row.at else probe.FLOOR.of(row.run, way=way)
    )


def _probe_ratio(v: Values, row: Row) -> float:
    """The probe's backward over forward NFE at the row's tolerance."""
    forward, backward = (v[probe.PROBE.of(row.run, way=w, **row.at)] for w in probe.WAYS[:2])
    return backward / forward


def tables(setup: Setup[ToleranceSettings]) -> dict[str, Table]:
    """The guards, the sweep, the probe, the ratios, the training."""
    s = setup.settings
    guards = {claim.text: refs for claim, refs in _guarded_claims(s)}
    # The row of the solver's minimum, where neither the seminorm nor the ratio is measured.
    minimum = {
        "tolerance": f"minimum ({probe.FLOOR_TOL:g})",
        "backward, seminorm": "",
        "backward/forward": "",
    }
    probe_rows = [
        Row(n, n, at, text={"tolerance": f"{at['tol']:g}"} if at else minimum)
        for n in ACTIVATIONS
        for at in ({}, *({"tol": tol} for tol in s.tolerances))
    ]

    def first_last(way: str) -> Col:
        ends = (Col("", probe.TRAINING_NFE, {"way": way, "end": end}) for end in ("first", "last"))
        return Col.joined(f"{way} NFE, first / last epoch", *ends)

    def seeds_off(result: Result[Any], row: Row) -> str:
        off = result.stat(probe.SWEEP_OFF.of(row.run, **row.at))
        return f"{sum(1 for v in off.values if v is not None and v > 0.5)} of {off.n}"

    models = {n: n for n in ACTIVATIONS}
    return {
        "guards": Table("claim", [Row(text) for text in guards], [Col(
            "the NFE it reads", cell=lambda result, row: _guard_words(result, guards[row.label]))]),
        "sweep": by_coordinate("tolerance", s.sweep, "tol", s.tolerances, [
            Col("test error", probe.SWEEP_ERROR), Col("forward NFE", probe.SWEEP_NFE),
            Col("off the minimum (seeds)", cell=seeds_off),
            Col("forward time per batch, ms", probe.SECONDS),
            Col("solve error (probe)", probe.SOLVE_ERROR),
            Col("paper", text="not published")]),
        "probe": Table("model", probe_rows, [
            Col("tolerance"), Col("forward NFE", cell=_probe_cell("forward")),
            Col("backward NFE", cell=_probe_cell("backward")),
            Col("backward, seminorm", cell=_probe_cell("backward_seminorm")),
            Col.per_seed("backward/forward", _probe_ratio, ".2f", spread=False)]),
        "ratios": by_run("model", models, [
            Col("backward/forward off the minimum (ours)", probe.RATIO),
            Col("tolerances off the minimum", probe.RATIO_TOLERANCES), Col("paper", text="~0.5"),
            Col("corrected (third party)", text="~0.8 (0.78-0.86)")]),
        "training": by_run("model", models, [
            Col("test error", TEST_ERROR), first_last("forward"), first_last("backward"),
            Col("training, s", probe.TRAIN_SECONDS)]),
    }  # fmt: skip


def words(result: Result[ToleranceSettings]) -> dict[str, object]:
    """What the text reads besides the settings: the training in words, the tolerances
    of the claims, and the sweep's minimum and time-NFE line."""
    s = result.settings
    return {
        "train_images": "all" if s.train_size is None else s.train_size,
        "optimiser": optimiser_words(s.optimizer, s.lr, s.milestones, s.augment),
        "floor_tol": probe.FLOOR_TOL,
        "reference_tol": probe.REFERENCE_TOL,
        "loosest": s.tolerances[0],
        "tightest": s.tolerances[-1],
        "floor_sweep": result.cell(probe.FLOOR_SWEEP.of(s.sweep)),
        "correlation": result.cell(probe.TIME_NFE["correlation"].of(s.sweep)),
        "slope": result.cell(probe.TIME_NFE["slope"].of(s.sweep)),
    }


register_template(
    Template(
        name="chen-tolerance",
        description="Chen et al. (2018) Fig. 3 on chen-table1's trained ODE-Net and a "
        "softplus twin: error, time and NFE against the solver tolerance, backward/forward "
        "NFE with and without the seminorm, NFE over training",
        title="Chen et al. (2018), Fig. 3: tolerance and NFE on MNIST",
        modes=MODES,
        runs=runs,
        measure=probe.measure,
        claims=claims,
        tables=tables,
        words=words,
        figures=[
            Plot("fig3a_error_vs_tol.png", probe.error_panels, size=(4, 3.4)),
            Plot("fig3b_time_vs_nfe.png", probe.time_panels),
            Plot("fig3c_ratio.png", probe.ratio_panels, size=(5, 3.8)),
            Plot("fig3d_nfe.png", probe.training_panels),
        ],
        one_thread_modes=("quick", "standard"),
    )
)
