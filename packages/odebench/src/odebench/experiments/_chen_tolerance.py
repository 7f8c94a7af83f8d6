"""``odebench run chen-tolerance``: Chen et al. (2018), Fig. 3 on MNIST, on chen-table1's
trained ODE-Net and a softplus twin; docs/odebench/experiments/chen-tolerance.md says what
it measures and why its claims are judged only off the solver's minimum."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from .._metrics import Ref, Values
from .._tables import Col, Row, Table, by_run
from . import _chen_tolerance_probe as probe
from ._chen import MODES as TABLE1_MODES
from ._chen import TEST_ERROR, MnistTraining, mnist_config
from ._claims import Claim
from ._runner import register_template
from ._template import Plot, Run, Setup, Template

# The two models, by their field's activation: chen-table1's ODE-Net and its smooth twin.
ACTIVATIONS = ("relu", "softplus")
ENDS = ("first", "last")  # the epochs of the training whose NFE is measured


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


def _table1s(mode: str, tols: tuple[float, ...], eval_batch: int, probe: int) -> ToleranceSettings:
    """chen-table1's training in ``mode``, and the tolerances and batches measured here."""
    table1 = TABLE1_MODES[mode]
    trained = {f.name: getattr(table1, f.name) for f in dataclasses.fields(MnistTraining)}
    return ToleranceSettings(**trained, tolerances=tols, eval_batch=eval_batch, probe_size=probe)


FIVE = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5)
MODES = {
    # The code path in seconds.
    "quick": _table1s("quick", (1e-1, 1e-3, 1e-5), eval_batch=128, probe=64),
    # Three seeds, one torch thread: about 20 minutes a seed on an idle core (the docs page
    # gives the trial).
    "standard": _table1s("standard", FIVE, eval_batch=500, probe=256),
    # torchdiffeq's reproduction of the paper.
    "full": _table1s("full", FIVE, eval_batch=500, probe=512),
}


def runs(setup: Setup[ToleranceSettings], seed: int) -> list[Run]:
    """The ReLU model (chen-table1's ODE-Net) and its softplus twin."""
    s = setup.settings
    odenet = mnist_config(s, seed, "odenet", s.train_tol)
    return [Run(a, config=dataclasses.replace(odenet, activation=a)) for a in ACTIVATIONS]


def _grows(values: list[float]) -> bool:
    """Never falls from one value to the next, and ends higher than it starts (negated:
    never rises, and ends lower)."""
    return all(b >= a for a, b in itertools.pairwise(values)) and values[-1] > values[0]


def _off(claim: Claim, *guards: Ref) -> Claim:
    """``claim``, holding only where each NFE it reads is off the solver's minimum: every
    one of ``guards`` above 0.5 (a share of seeds on the means)."""
    test = claim.holds
    return dataclasses.replace(claim, holds=lambda v: all(v[g] > 0.5 for g in guards) and test(v))


def claims(setup: Setup[ToleranceSettings]) -> list[Claim]:
    """Fig. 3's claims on the trained models, each holding only where the NFE it reads is
    off the solver's minimum (the text says why)."""
    s = setup.settings
    sweep, tight = s.sweep, s.tolerances[-1]
    nfe, solve, error = (  # the sweep's model at each tolerance, loosest first
        [metric.of(sweep, tol=tol) for tol in s.tolerances]
        for metric in (probe.SWEEP_NFE, probe.SOLVE_ERROR, probe.SWEEP_ERROR)
    )
    first, last = (probe.TRAINING_NFE.of(sweep, way="forward", end=e) for e in ENDS)
    swept = probe.SWEEP_OFF.of(sweep, tol=tight)
    ratio, ratios_off = probe.RATIO.of("softplus"), probe.RATIO_TOLERANCES.of("softplus")
    return [
        _off(Claim(
            "nfe_grows_as_tolerance_tightens",
            "forward NFE grows as the tolerance tightens (Fig. 3a-b)",
            "grows; numbers not published", ours=lambda v: v[nfe[-1]] / v[nfe[0]],
            holds=lambda v: _grows([v[ref] for ref in nfe]), spec=".2f", unit="×", kind="paper",
        ), swept),
        _off(Claim(
            "solve_error_falls_as_tolerance_tightens",
            "the ODE solve's error falls as the tolerance tightens (Fig. 3a)",
            "falls; numbers not published", ours=lambda v: v[solve[-1]] / v[solve[0]],
            holds=lambda v: _grows([-v[ref] for ref in solve]), spec=".2g", unit="×", kind="paper",
        ), probe.PROBE_OFF.of(sweep, tol=tight)),
        _off(Claim(
            "error_at_tightest_not_above_loosest",
            "test error is no higher at the tightest tolerance (Fig. 3a)",
            "falls as it tightens; numbers not published",
            ours=lambda v: v[error[-1]] - v[error[0]], holds=lambda v: v[error[-1]] <= v[error[0]],
            spec="+.2f", scale=100, unit=" points", kind="paper",
        ), swept),
        _off(Claim.at_least(
            "time_proportional_to_nfe", "forward time is proportional to NFE (Fig. 3b)",
            "proportional; slope not published", probe.TIME_NFE["correlation"].of(sweep), 0.9,
            strict=True, spec=".3g", kind="paper", timing=True,
        ), swept),
        _off(Claim.between(
            "softplus_ratio_roughly_half",
            "softplus backward NFE is roughly half the forward (Fig. 3c)",
            "about 0.5", ratio, 0.35, 0.65, kind="paper",
        ), ratios_off),
        _off(Claim.between(
            "softplus_ratio_near_corrected",
            "the softplus ratio is near the corrected ~0.8 (third party, Fig. 3c)",
            "about 0.8 (0.78-0.86)", ratio, 0.7, 0.95, kind="paper",
        ), ratios_off),
        _off(Claim.difference(
            "relu_ratio_above_softplus",
            "the ReLU field's backward/forward NFE ratio exceeds the softplus one",
            "not published (smooth fields only)", probe.RATIO.of("relu"), ratio, above=0.0,
            kind="paper",
        ), *(probe.RATIO_TOLERANCES.of(n) for n in ACTIVATIONS)),
        *(_off(Claim.difference(
            f"seminorm_fewer_backward_nfe_{n}",
            f"the seminorm needs fewer backward NFE ({n}; Kidger et al., 2021)",
            "fewer (Kidger et al., 2021)", probe.SEMINORM_OFF.of(n), probe.BACKWARD_OFF.of(n),
            below=0.0, kind="paper", spec="+.1f",
        ), probe.SEMINORM_TOLERANCES.of(n)) for n in ACTIVATIONS),
        _off(Claim.ratio(
            "nfe_increases_during_training", "forward NFE increases during training (Fig. 3d)",
            "increases; numbers not published", last, first, above=1.0, kind="paper",
        ), probe.SWEEP_OFF.of(sweep, tol=s.train_tol)),
    ]  # fmt: skip


def _probe_ratio(v: Values, row: Row) -> float:
    """The probe's backward over forward NFE at the row's tolerance."""
    forward, backward = (v[probe.PROBE.of(row.run, way=w, **row.at)] for w in probe.WAYS[:2])
    return backward / forward


def tables(setup: Setup[ToleranceSettings]) -> dict[str, Table]:
    """The sweep (Fig. 3a-b), the probe at each tolerance (Fig. 3c), each model's training
    (Fig. 3d), its solver's minimum and its ratio off it."""
    s = setup.settings

    def ends(way: str) -> Col:
        first, last = (Col("", probe.TRAINING_NFE, {"way": way, "end": e}) for e in ENDS)
        return Col.joined(f"{way} NFE, first / last epoch", first, last)

    floors = (Col("", probe.FLOOR, {"way": way}) for way in probe.WAYS[:2])
    probed = [Row(f"{n}, {tol:g}", n, {"tol": tol}) for n in ACTIVATIONS for tol in s.tolerances]
    swept = [Row(f"{tol:g}", s.sweep, {"tol": tol}) for tol in s.tolerances]
    return {
        "sweep": Table("tolerance", swept, [
            Col("test error", probe.SWEEP_ERROR), Col("forward NFE", probe.SWEEP_NFE),
            Col("off the minimum (share of seeds)", probe.SWEEP_OFF, spread=False),
            Col("forward time per batch, ms", probe.SECONDS),
            Col("solve error (probe)", probe.SOLVE_ERROR)]),
        "probe": Table("model, tolerance", probed, [
            *(Col(f"{w.replace('_', ', ')} NFE", probe.PROBE, {"way": w}) for w in probe.WAYS),
            Col.per_seed("backward/forward", _probe_ratio, ".2f", spread=False)]),
        "models": by_run("model", {n: n for n in ACTIVATIONS}, [
            Col("test error", TEST_ERROR), ends("forward"), ends("backward"),
            Col.joined("NFE at the minimum, forward / backward", *floors),
            Col("backward/forward off the minimum", probe.RATIO),
            Col("tolerances off the minimum", probe.RATIO_TOLERANCES),
            Col("training, s", probe.TRAIN_SECONDS)]),
    }  # fmt: skip


register_template(
    Template(
        name="chen-tolerance",
        description="Chen et al. (2018) Fig. 3 on chen-table1's trained ODE-Net and a "
        "softplus twin: error, time and NFE against the solver tolerance, backward/forward "
        "NFE with and without the seminorm, NFE over training",
        title="Chen et al. (2018), Fig. 3: tolerance and NFE on MNIST",
        modes=MODES, runs=runs, measure=probe.measure, claims=claims, tables=tables,
        words=lambda result: {"floor_tol": probe.FLOOR_TOL, "reference_tol": probe.REFERENCE_TOL},
        figures=[
            Plot("fig3a_error_vs_tol.png", probe.error_panels, size=(4, 3.4)),
            Plot("fig3b_time_vs_nfe.png", probe.time_panels),
            Plot("fig3c_ratio.png", probe.ratio_panels, size=(5, 3.8)),
            Plot("fig3d_nfe.png", probe.training_panels),
        ],
        one_thread_modes=("quick", "standard"),
    )
)  # fmt: skip
