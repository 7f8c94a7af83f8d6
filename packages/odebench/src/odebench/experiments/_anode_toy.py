"""``odebench run anode-toy``: Dupont et al. (2019)'s toy experiments, NODE against ANODE
on g(x) and on a held-out slice of the plane (docs/odebench/experiments/anode-toy.md).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .._figures import Lines, Point, Style
from .._metrics import Metric, Values
from .._tables import Col, by_run
from ..data import Dataset, annuli
from ..models import build_model
from ..training import Task, load_splits
from . import _anode_common as common
from ._anode_common import LABELS, MODELS, NFE_FIRST, NFE_LAST
from ._claims import Claim
from ._result import Result
from ._run_files import first_model
from ._runner import register_template
from ._template import Measurement, Plot, Run, Setup, Template, Trained, TrainingSettings

DIMS = (1, 2)
SLICE = (0.0, math.pi / 5)  # the angles of the points the slice test holds out

# The claims' thresholds (the report states each).
NEAR_ZERO = 0.05  # an MSE below this is "about zero"
FLOOR_MARGIN = 0.9  # a 1-D NODE "sits at the floor": train MSE at least this × the floor
DOUBLES = 1.5  # NFE growth (last epoch over first) at least this: "nearly doubles"
HARDLY = 1.25  # NFE growth at most this: "hardly increases"
LARGE_GAP = 0.1  # held-out-slice MSE minus train MSE at least this: "a large gap"

TRAIN_MSE = Metric("train_mse", spec=".3f")
TEST_MSE = Metric("test_mse", spec=".3f")
SLICE_MSE = Metric("slice_mse", spec=".3f")


@dataclass(frozen=True, kw_only=True)
class ToySettings(TrainingSettings):
    """The runs of one mode, the slice test's too; ``slice_points``: the points it draws."""

    slice_points: int


MODES = {
    "quick": ToySettings(seeds=2, epochs=6, lr=3e-3, batch_size=64, train_size=960,
                         test_size=300, slice_points=1200),
    "standard": (PAPER := ToySettings(seeds=5, epochs=30, lr=1e-3, batch_size=64,
                                      slice_points=3000)),
    "full": PAPER,
}  # fmt: skip


def runs(setup: Setup[ToySettings], seed: int) -> list[Run]:
    """Both models on g(x) in each dimension, then both in the slice test."""
    s = setup.settings
    return [
        *(Run(f"{dim}d/{m}", config=common.train_config(s, f"toy-{m}", f"annuli-{dim}d", seed))
          for dim in DIMS for m in MODELS),
        *(Run(f"slice/{m}", task=_slice_task(s, f"toy-{m}", seed)) for m in MODELS),
    ]  # fmt: skip


def _slice_data(s: ToySettings, seed: int) -> tuple[Dataset, Tensor]:
    """The slice test's points, and the mask of those in :data:`SLICE`."""
    data = annuli(s.slice_points, dim=2, generator=torch.Generator().manual_seed(10_007 + seed))
    angle = torch.atan2(data.inputs[:, 1], data.inputs[:, 0])
    return data, (angle >= SLICE[0]) & (angle <= SLICE[1])


def _slice_task(s: ToySettings, model: str, seed: int) -> Task:
    """``model`` (its default solver) on the slice test's points outside the slice."""
    data, held = _slice_data(s, seed)
    build = functools.partial(build_model, model, in_channels=2, num_classes=1, image_size=0)
    return common.mse_task(s, build, (data.inputs[~held], data.targets[~held]), seed,
                           f"slice/{model}")  # fmt: skip


def measure(setup: Setup[ToySettings], trained: Trained) -> Measurement:
    """Final MSEs and NFE, the 1-D NODE's monotone floor; for the slice test, the MSE on
    the points kept and held out."""
    if trained.config is not None:
        extra: dict[str, float | None] = {}
        if trained.run.name == "1d/node":
            train_set, _ = load_splits(trained.config)
            extra[common.FLOOR.key()] = common.monotone_floor(train_set.inputs, train_set.targets)
        final = {TRAIN_MSE.key(): "train_loss", TEST_MSE.key(): "test_loss"}
        return common.epoch_numbers(trained, final, extra)
    data, held = _slice_data(setup.settings, trained.seed)
    model = trained.load()
    mse = {
        TRAIN_MSE.key(): common.mse(model, data.inputs[~held], data.targets[~held]),
        SLICE_MSE.key(): common.mse(model, data.inputs[held], data.targets[held]),
    }
    counts = {"train_points": int((~held).sum()), "slice_points": int(held.sum())}
    return Measurement(mse, {"angles": list(SLICE), **counts})


def _growth(v: Values, name: str, dim: int) -> float:
    """Forward NFE per batch, last epoch over first."""
    return v[NFE_LAST.of(f"{dim}d/{name}")] / v[NFE_FIRST.of(f"{dim}d/{name}")]


NODE_1D, ANODE_1D = TRAIN_MSE.of("1d/node"), TRAIN_MSE.of("1d/anode")
CLAIMS = [
    common.floor_claim(
        "Prop. 1: a 1-D NODE cannot fit g(x); its MSE stays at the floor of monotone maps",
        "cannot fit g(x); no MSE published", TRAIN_MSE, FLOOR_MARGIN, ".2f",
    ),
    Claim.at_most("anode_1d_near_zero", "an ANODE fits 1-D g(x), MSE about 0",
                  "about 0 (0.0000 in a replication)", ANODE_1D, NEAR_ZERO, strict=True,
                  kind="paper"),
    Claim.difference("anode_1d_below_node", "an ANODE fits 1-D g(x) better than a NODE",
                     "ANODE ~0, NODE at a floor", ANODE_1D, NODE_1D, below=0.0, spec="+.3f",
                     kind="paper"),
    Claim("node_nfe_nearly_doubles", 'Fig. 8: the NFE of a NODE "nearly doubles" during training',
          '"nearly doubles" (curves only)',
          ours=lambda v: float(np.min([_growth(v, "node", dim) for dim in DIMS])),
          holds=lambda v: all(_growth(v, "node", dim) >= DOUBLES for dim in DIMS),
          spec=".2f", unit="×", kind="paper", low=DOUBLES),
    Claim("anode_nfe_hardly_increases",
          'Fig. 8: the NFE of an ANODE "hardly increases" during training',
          '"hardly increases" (curves only)',
          ours=lambda v: float(np.max([_growth(v, "anode", dim) for dim in DIMS])),
          holds=lambda v: all(_growth(v, "anode", dim) <= HARDLY for dim in DIMS),
          spec=".2f", unit="×", kind="paper", high=HARDLY),
    Claim.at_least("node_slice_gap_large",
                   "Fig. 9: NODEs show a large generalisation gap on a held-out slice",
                   "a large gap (curves only)",
                   lambda v: v[SLICE_MSE.of("slice/node")] - v[TRAIN_MSE.of("slice/node")],
                   LARGE_GAP, spec=".3f", kind="paper"),
    Claim.at_most("anode_slice_near_zero",
                  "Fig. 9: ANODEs reach near-zero loss on the held-out slice",
                  "near zero (curves only)", SLICE_MSE.of("slice/anode"), NEAR_ZERO, strict=True,
                  kind="paper"),
]  # fmt: skip

GROUPS = (("1d", "1-D g(x)"), ("2d", "2-D g(x)"), ("slice", "slice test"))
RUNS = {f"{prefix}/{m}": f"{title}, {LABELS[m]}" for prefix, title in GROUPS for m in MODELS}
NUMBERS = by_run("run", RUNS, [
    Col("train MSE", TRAIN_MSE), Col("monotone floor", common.FLOOR), Col("test MSE", TEST_MSE),
    Col("held-out slice MSE", SLICE_MSE),
    Col.joined("forward NFE per batch, first → last epoch", NFE_FIRST, NFE_LAST, sep=" → "),
])  # fmt: skip


CLASSES = {"_g = -1": Style(".", "#3b4cc0"), "_g = +1": Style(".", "#b40426")}


def _by_target(points: Tensor, targets: Tensor) -> dict[str, list[Point]]:
    """The first two coordinates of ``points`` of each target (-1, +1), as :data:`CLASSES`."""
    return {name: _points(points[targets == sign]) for name, sign in zip(CLASSES, (-1.0, 1.0))}


def _points(points: Tensor) -> list[Point]:
    return [(float(a), float(b)) for a, b in points[:, :2].tolist()]


def _features_panels(result: Result[ToySettings]) -> list[Lines]:
    """2-D: the test inputs and the features at t = 1 of NODE and ANODE, by target."""
    config = common.train_config(result.settings, "toy-node", "annuli-2d", result.setup.seeds[0])
    _, test_set = load_splits(config)  # the runs' own test points
    x, y = test_set.inputs[:600], test_set.targets[:600, 0]
    views = {"test inputs (blue: g = -1)": ("x1", "x2", x)}
    for name in MODELS:
        z = common.trajectory(first_model(result.setup, f"2d/{name}"), x, [0.0, 1.0])[-1]
        views[f"{LABELS[name]} features at t = 1"] = ("h1", "h2", z)
    return [
        Lines(title, xlabel, ylabel, _by_target(points, y), CLASSES, legend=None, equal=True)
        for title, (xlabel, ylabel, points) in views.items()
    ]


def _slice_panels(result: Result[ToySettings]) -> list[Lines]:
    """The training points of the slice test, and the slice left out of training."""
    data, held = _slice_data(result.settings, result.setup.seeds[0])
    points = _by_target(data.inputs[~held], data.targets[~held, 0])
    points["held out: angle in [0, π/5]"] = _points(data.inputs[held])
    styles = {**CLASSES, "held out: angle in [0, π/5]": Style(".", "k")}
    return [Lines("training points and the held-out slice", "x1", "x2", points, styles, equal=True)]


PANELS = GROUPS[:2]  # g(x) in 1-D and 2-D
TEMPLATE = register_template(Template(
    name="anode-toy",
    description="Dupont et al.'s toy experiments: NODE against ANODE on g(x) in 1-D and "
    "2-D over seeds (loss, NFE, flows, features) and the held-out-slice generalisation test",
    title="NODE against ANODE on Dupont et al.'s toy problems",
    modes=MODES, one_thread_modes=tuple(MODES),  # the models are tiny
    runs=runs, measure=measure, claims=lambda setup: CLAIMS,
    tables=lambda setup: {"numbers": NUMBERS},
    figures=[
        Plot("loss.png", lambda result: common.curve_panels(
            result, PANELS, "train_loss", "MSE", test="test_loss", yscale="log")),
        Plot("nfe.png", lambda result: common.curve_panels(
            result, PANELS, "nfe_forward", "forward NFE per batch")),
        Plot("flows_1d.png", lambda result: common.flow_panels(
            {m: common.flow_1d(first_model(result.setup, f"1d/{m}")) for m in MODELS})),
        Plot("features_2d.png", _features_panels, size=(13 / 3, 4.0)),
        Plot("slice.png", _slice_panels, size=(5.0, 4.0)),
    ],
))  # fmt: skip
