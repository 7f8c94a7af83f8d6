"""``odebench run chen-table1``: Chen et al. (2018), Table 1 on MNIST."""

from __future__ import annotations

import math
import statistics
import timeit
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import odecore
from torch import Tensor, nn

from .._figures import Lines, Style
from .._metrics import Metric
from .._tables import Col, Row, Table, by_run
from ..models import nfe, ode_layers
from ..perf import saved_bytes
from ..training import Optimizer, TrainConfig, load_splits
from ._claims import Claim
from ._runner import register_template
from ._template import Measurement, Plot, Run, Template, TrainingSettings

if TYPE_CHECKING:
    from ._result import Result
    from ._template import Setup, Trained


class Published(TypedDict):
    """One row of Table 1: test error (%), parameters, memory and time complexities."""

    error: float
    params: str
    memory: str
    time: str


#: Table 1 of Chen et al. (2018); L: layers, L~: function evaluations.
PUBLISHED: dict[str, Published] = {
    "mlp": {"error": 1.60, "params": "0.24M", "memory": "–", "time": "–"},
    "resnet": {"error": 0.41, "params": "0.60M", "memory": "O(L)", "time": "O(L)"},
    "rknet": {"error": 0.47, "params": "0.22M", "memory": "O(L~)", "time": "O(L~)"},
    "odenet": {"error": 0.42, "params": "0.22M", "memory": "O(1)", "time": "O(L~)"},
}
LABELS = {"mlp": "1-layer MLP", "resnet": "ResNet", "rknet": "RK-Net", "odenet": "ODE-Net"}

MNIST_10K = (8004, 1996)  # the training and test images of the 10,000-digit subset
# The claims' bars; the docs page says why.
TARGET_ERROR = 0.02  # the deep models' test error, at most
GAP_POINTS = 0.005  # the ODE-Net's test error minus the ResNet's, paired by seed, below
FLAT_SLOPE = 0.05  # the adjoint's MiB per step over backprop's, below
# The memory sweep: the ODE-Net's block in L fixed RK4 steps, by each gradient method.
MEMORY_STEPS = (2, 4, 8)
MEMORY_GRADIENTS = ("adjoint", "backprop")

# What each run measures; the costs are of one training step on the cost batch.
TEST_ERROR = Metric("test_error", spec=".2f", scale=100, unit="%")
PARAMETERS = Metric("parameters", spec=".3f", scale=1e-6, unit="M")
SAVED = Metric("saved_mib", spec=".1f")  # what autograd saves for the backward pass
STEP = Metric("step_seconds", spec=".0f", scale=1e3)
NFE_FORWARD = Metric("nfe_forward", spec=".0f")
NFE_BACKWARD = Metric("nfe_backward", spec=".0f")
TRAIN_IMAGES = Metric("train_images", spec=".0f")
TEST_IMAGES = Metric("test_images", spec=".0f")
# The ODE-Net's block in `steps` RK4 steps: the saved MiB, and their slope against `steps`.
SAVED_AT_DEPTH = Metric(
    "saved_mib", over=("gradient", "steps"), spec=".1f", key_format="saved_mib_{gradient}@{steps}"
)
MIB_PER_STEP = Metric(
    "mib_per_step", over=("gradient",), spec=".2f", key_format="mib_per_step_{gradient}"
)


@dataclass(frozen=True, kw_only=True)
class MnistTraining(TrainingSettings):
    """How chen-table1 trains its models on MNIST (chen-tolerance trains its two alike).

    Args:
        milestones: epochs (from 0) at which the rate is multiplied by 0.1.
        augment: random crops with padding 4.
        optimizer: ``"sgd"`` (momentum 0.9) or ``"adam"``.
    """

    milestones: tuple[int, ...]
    augment: bool
    optimizer: Optimizer = "sgd"


@dataclass(frozen=True, kw_only=True)
class ChenSettings(MnistTraining):
    """The training of the four models, and the batch their costs are measured on.

    Args:
        cost_batch: the batch of test images memory and time are measured on.
    """

    cost_batch: int


MODES = {
    # A smoke test of the standard mode's code path: 16 steps on 512 images.
    "quick": ChenSettings(
        epochs=1, batch_size=32, lr=1e-3, milestones=(), augment=False, optimizer="adam",
        train_size=512, test_size=256, cost_batch=32,
    ),
    # Sized for a 2-core CPU: the docs page gives the epochs' costs, and why Adam and no crops.
    "standard": ChenSettings(
        seeds=3, epochs=8, batch_size=64, lr=1e-3, milestones=(6,), augment=False,
        optimizer="adam", train_size=MNIST_10K[0], test_size=MNIST_10K[1], cost_batch=128,
    ),
    # torchdiffeq's reproduction of the paper (the paper states no epochs or optimiser),
    # on all of MNIST; the paper reports one run per model.
    "full": ChenSettings(
        seeds=1, epochs=160, batch_size=128, lr=0.1, milestones=(60, 100, 140), augment=True,
        optimizer="sgd", train_size=None, test_size=None, cost_batch=128,
    ),
}  # fmt: skip


def mnist_config(s: MnistTraining, seed: int, model: str, tol: float = 1e-3) -> TrainConfig:
    """The training of ``model`` for ``seed``: the ODE-Net's with the adjoint at
    ``rtol = atol = tol``, the others' by backprop."""
    return TrainConfig(
        model=model, dataset="mnist", epochs=s.epochs, batch_size=s.batch_size, lr=s.lr,
        optimizer=s.optimizer, milestones=s.milestones, augment=s.augment,
        train_size=s.train_size, test_size=s.test_size, rtol=tol, atol=tol, seed=seed,
        gradient="adjoint" if model == "odenet" else "backprop",
    )  # fmt: skip


def runs(setup: Setup[ChenSettings], seed: int) -> list[Run]:
    """The four models of Table 1 on the same data; the ODE-Net trains with the adjoint."""
    return [Run(model, config=mnist_config(setup.settings, seed, model)) for model in PUBLISHED]


def measure(setup: Setup[ChenSettings], trained: Trained) -> Measurement:
    """Test error, parameters, and the costs of one training step on ``cost_batch`` test
    images (the time: the median of three after a warm-up); the ODE-Net's memory sweep."""
    assert trained.config is not None  # every run of `runs` has a config
    acc = trained.final_metrics()["test_acc"]
    train, test = load_splits(trained.config)
    model = trained.load(setup.device).train()
    batch = setup.settings.cost_batch
    x = test.normalize(test.inputs[:batch].to(setup.device))
    y = test.targets[:batch].to(setup.device)
    saved = saved_bytes(model, x, y) / 2**20
    times = timeit.repeat(
        lambda: nn.functional.cross_entropy(model(x), y).backward(),  # type: ignore[no-untyped-call]
        setup=lambda: model.zero_grad(set_to_none=True), repeat=4, number=1,
    )  # fmt: skip
    forward, backward = nfe(model)
    result = trained.result
    metrics: dict[str, float | None] = {
        PARAMETERS.name: result["parameters"], TEST_ERROR.name: None if acc is None else 1 - acc,
        "epochs": result["epochs"], "train_seconds": result["train_seconds"],
        TRAIN_IMAGES.name: float(len(train)), TEST_IMAGES.name: float(len(test)),
        SAVED.name: saved, STEP.name: statistics.median(times[1:]),
        NFE_FORWARD.name: float(forward), NFE_BACKWARD.name: float(backward),
        "batch": float(len(y)),
    }  # fmt: skip
    if trained.run.name == "odenet":
        metrics |= _memory_by_depth(model, x, y)
    return Measurement(metrics)


@contextmanager
def ode_specs(
    model: nn.Module, spec: odecore.OdeSpec | Callable[[odecore.OdeSpec], odecore.OdeSpec]
) -> Iterator[None]:
    """Every ODE layer of ``model`` solved by ``spec`` (or ``spec(its spec)``), then put back."""
    layers = ode_layers(model)
    kept = [layer.spec for layer in layers]
    try:
        for layer, own in zip(layers, kept):
            layer.spec = spec(own) if callable(spec) else spec
        yield
    finally:
        for layer, own in zip(layers, kept):
            layer.spec = own


def _memory_by_depth(model: nn.Module, x: Tensor, y: Tensor) -> dict[str, float | None]:
    """What autograd saves (MiB) with the ODE blocks in ``L`` fixed RK4 steps, for each
    ``L`` and gradient of the sweep, and the slope through them."""
    model.train()
    metrics: dict[str, float | None] = {}
    for gradient in MEMORY_GRADIENTS:
        mibs = []
        for steps in MEMORY_STEPS:
            rk4 = odecore.OdeSpec.from_method("rk4", options={"n_steps": steps}, gradient=gradient)
            with ode_specs(model, rk4):
                mibs.append(saved_bytes(model, x, y) / 2**20)
            metrics[SAVED_AT_DEPTH.key(gradient=gradient, steps=steps)] = mibs[-1]
        depths = [float(steps) for steps in MEMORY_STEPS]
        metrics[MIB_PER_STEP.key(gradient=gradient)] = statistics.linear_regression(depths, mibs)[0]
    return metrics


def claims(setup: Setup[ChenSettings]) -> list[Claim]:
    """The paper's claims about error, tested by training, and the checks of memory and
    size, which the architectures and the gradient method set (the same on every seed)."""
    adjoint, backprop = (MIB_PER_STEP.of("odenet", gradient=g) for g in ("adjoint", "backprop"))
    return [
        *(
            Claim.at_most(
                f"{name}_error_at_most_{100 * TARGET_ERROR:g}pct",
                f"the {LABELS[name]} reaches a low MNIST test error (Table 1)",
                PUBLISHED[name]["error"] / 100, TEST_ERROR.of(name), TARGET_ERROR, kind="paper",
            )
            for name in ("resnet", "rknet", "odenet")
        ),
        Claim.difference(
            "odenet_error_near_resnet",
            "the ODE-Net's test error is about the ResNet's (Table 1)",
            (PUBLISHED["odenet"]["error"] - PUBLISHED["resnet"]["error"]) / 100,
            TEST_ERROR.of("odenet"), TEST_ERROR.of("resnet"),
            below=GAP_POINTS, kind="paper", scale=100, unit=" points",
        ),
        Claim.ratio(
            "odenet_params_about_a_third_of_resnet",
            "the ODE-Net has about a third of the ResNet's parameters (Table 1)",
            0.22 / 0.60,
            PARAMETERS.of("odenet"), PARAMETERS.of("resnet"),
            above=0.25, below=0.45, kind="check",
        ),
        *(
            Claim.ratio(
                f"odenet_saves_less_than_{name}",
                f"the ODE-Net's memory is below the {LABELS[name]}'s (Table 1: O(1) against {o})",
                f"O(1) against {o}", SAVED.of("odenet"), SAVED.of(name), below=1.0, kind="check",
            )
            for name, o in (("rknet", "O(L~)"), ("resnet", "O(L)"))
        ),
        Claim.between(
            "adjoint_memory_constant_in_depth",
            "the adjoint's memory is constant in depth (Table 1: O(1) against O(L))",
            "O(1) against O(L)",  # the MiB per step of the adjoint over backprop's, if positive
            lambda v: v[adjoint] / v[backprop] if v[backprop] > 0 else math.nan,
            -FLAT_SLOPE, FLAT_SLOPE, strict=True, spec=".3f", unit="×", kind="check",
        ),
    ]  # fmt: skip


def tables(setup: Setup[ChenSettings]) -> dict[str, Table]:
    """Table 1, ours beside the paper's column by column, and memory against depth."""
    papers = {
        name: {"test error (paper)": f"{p['error']:.2f}%", "parameters (paper)": p["params"],
               "memory (paper)": p["memory"], "time (paper)": p["time"]}
        | ({} if name in ("rknet", "odenet") else {"NFE forward / backward": "–"})  # no ODE block
        for name, p in PUBLISHED.items()
    }  # fmt: skip
    table1 = by_run("model", LABELS, [
        Col("test error (ours)", TEST_ERROR), Col("test error (paper)"),
        Col("parameters (ours)", PARAMETERS), Col("parameters (paper)"),
        Col("saved for backward, MiB", SAVED), Col("memory (paper)"),
        Col("time per step, ms", STEP), Col("time (paper)"),
        Col.joined("NFE forward / backward", NFE_FORWARD, NFE_BACKWARD),
    ], papers)  # fmt: skip
    memory = Table(
        "gradient",
        [Row(gradient, "odenet", {"gradient": gradient}, {"paper": paper})
         for gradient, paper in zip(MEMORY_GRADIENTS, ("O(1)", "O(L)"))],
        [*(Col(f"L = {L}, MiB", SAVED_AT_DEPTH, {"steps": L}) for L in MEMORY_STEPS),
         Col("MiB per step", MIB_PER_STEP), Col("paper")],
    )  # fmt: skip
    return {"table1": table1, "memory": memory}


def words(result: Result[ChenSettings]) -> dict[str, object]:
    """The images the runs trained and were tested on, for the text."""
    return {m.name: result.cell(m.of("resnet")) for m in (TRAIN_IMAGES, TEST_IMAGES)}


def _memory_panels(result: Result[ChenSettings]) -> list[Lines]:
    """The memory table's cells: saved MiB against the RK4 steps L, one line per gradient."""
    series = {
        g: [(float(L), result.stat(SAVED_AT_DEPTH.of("odenet", gradient=g, steps=L)).mean)
            for L in MEMORY_STEPS]
        for g in MEMORY_GRADIENTS
    }  # fmt: skip
    return [
        Lines("memory against depth", "RK4 steps L of the ODE block", "saved for backward (MiB)",
              series, {"backprop": Style("s--")}, xticks=MEMORY_STEPS, ylim=(0, None))
    ]  # fmt: skip


register_template(
    Template(
        name="chen-table1",
        description="Chen et al. (2018) Table 1: MNIST test error, parameters, memory and "
        "time of the 1-layer MLP, ResNet, RK-Net and ODE-Net, and memory against depth",
        title="Chen et al. (2018), Table 1: MNIST",
        modes=MODES, runs=runs, measure=measure, claims=claims, tables=tables, words=words,
        figures=[Plot("memory_vs_depth.png", _memory_panels, size=(4.5, 3.4))], published=PUBLISHED,
    )
)  # fmt: skip
