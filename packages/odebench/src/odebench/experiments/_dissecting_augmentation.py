"""``odebench run dissecting-augmentation``: Massaroli et al. (2020)'s augmentation table, four
ways to start an image Neural ODE beside the authors' NeurIPS poster;
docs/odebench/experiments/dissecting-augmentation.md says what it trains and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._figures import Bars, Lines, mean_band
from .._metrics import Metric, Values
from .._tables import Col, Row, Table
from . import _anode_common as common
from ._anode_common import NFE_FIRST, PARAMETERS, TEST_ACC
from ._claims import Claim
from ._images import data_name, trained_datasets
from ._report import Prose
from ._result import Result
from ._runner import register_template
from ._template import Measurement, Plot, Run, Setup, Template, Trained, TrainingSettings

DATASETS = ("mnist", "cifar10")
"""MNIST always; CIFAR-10 when :func:`odebench.training.find_data` finds it."""
MODELS = {"node": "dissecting-node", "anode": "dissecting-anode", "ilnode": "ilnode",
          "sonode": "sonode"}  # fmt: skip
"""``{short name: model name}`` of the four variants, in the poster's order."""
LABELS = {"node": "NODE (no augmentation)", "anode": "ANODE (0-augmented)",
          "ilnode": "IL-NODE (input layer)", "sonode": "2nd-order"}  # fmt: skip
SHORT = {"node": "NODE", "anode": "0-aug", "ilnode": "IL", "sonode": "2nd order"}
"""The poster's short names, for the figures' axes."""

PUBLISHED: dict[str, dict[str, dict[str, float]]] = {
    "mnist": {"node": {"acc": 0.968, "nfe": 98, "params": 21_400},
              "anode": {"acc": 0.989, "nfe": 71, "params": 20_400},
              "ilnode": {"acc": 0.991, "nfe": 44, "params": 20_700},
              "sonode": {"acc": 0.992, "nfe": 43, "params": 20_000}},
    "cifar10": {"node": {"acc": 0.589, "nfe": 93, "params": 37_100},
                "anode": {"acc": 0.708, "nfe": 169, "params": 35_000},
                "ilnode": {"acc": 0.734, "nfe": 65, "params": 36_100},
                "sonode": {"acc": 0.728, "nfe": 59, "params": 34_600}},
}  # fmt: skip
"""The poster's "Ranking Augmentation Strategies" panel: rounded means, no std."""

NFE = Metric("nfe_forward", spec=".1f")
"""The forward NFE per training batch in the last epoch: the poster's "NFE"."""
OURS = {"acc": TEST_ACC, "nfe": NFE, "params": PARAMETERS}  # by the poster's keys

NEAR_BEST = 0.01  # IL-NODE "performs best" within this of the best model's accuracy
POSTER_PARAMS = 0.05  # our parameter counts "match" the poster's within this fraction
TRAINED = {"mnist": 0.90}
"""``{data set: test accuracy}`` that the models a claim compares must reach on a seed."""
THRESHOLDS = {"bar": TRAINED["mnist"], "near_best": NEAR_BEST * 100, "within": POSTER_PARAMS}
"""The thresholds as the claims' details in the text name them."""
TEXT = "dissecting-augmentation.md"


@dataclass(frozen=True)
class AugmentationSettings(TrainingSettings):
    """The sizes of one mode; where they differ from the notebooks' defaults, Adam's rate
    ``lr`` (the notebooks': 1e-3), times ``gamma`` after each of the ``milestones``,
    dopri5's ``rtol = atol = tol``, and the ``gradient``."""

    milestones: tuple[int, ...] = (5, 10, 15)
    gamma: float = 0.9
    tol: float = 1e-4  # the notebooks'
    gradient: str = "adjoint"


MODES = {
    "quick": AugmentationSettings(seeds=1, epochs=1, batch_size=32, lr=1e-3, train_size=64,
                                  test_size=64),
    # Three seeds in an hour of one core: at the notebooks' settings the NODE stays near
    # chance for long, at 1.4-3.2 s a step (docs/odebench/experiments/dissecting-augmentation.md).
    "standard": AugmentationSettings(seeds=3, epochs=2, batch_size=32, train_size=3200,
                                     test_size=1000, lr=1e-2, milestones=(1,), gamma=0.1,
                                     tol=1e-3, gradient="backprop"),
    # The notebooks: 20 epochs, batch 64, all images; the paper's table: the mean of 10 runs.
    "full": AugmentationSettings(seeds=10, epochs=20, batch_size=64, lr=1e-3),
}  # fmt: skip


def runs(setup: Setup[AugmentationSettings], seed: int) -> list[Run]:
    """The four variants on every data set (:func:`common.image_runs`), with the notebooks'
    settings as far as :class:`~odebench.training.TrainConfig` has them (Adam for AdamW,
    StepLR as milestones), and the mode's rate, schedule, tol and gradient."""
    s = setup.settings
    return common.image_runs(DATASETS, MODELS, lambda model, dataset: common.train_config(
        s, model, dataset, seed, milestones=s.milestones, gamma=s.gamma, rtol=s.tol, atol=s.tol,
        gradient=s.gradient, activation="softplus"))  # fmt: skip


def measure(setup: Setup[AugmentationSettings], trained: Trained) -> Measurement:
    """The last epoch's numbers, and the forward NFE per batch of the first and every epoch."""
    nfe = [row["nfe_forward"] for row in trained.history]
    return Measurement({**trained.final_metrics(), NFE_FIRST.key(): nfe[0]}, {"nfe_per_epoch": nfe})


Get = Callable[[str, str], float]  # get(model, the poster's key): a number of a model
ALL = tuple(MODELS)
CLAIMS = {
    "every_model_trained": (
        f"every model trains past {TRAINED['mnist']:.0%} test accuracy", ".1f", "%", ALL),
    "input_layer_beats_vanilla": ("no augmentation performs worse: the IL-NODE is more "
                                  "accurate than the NODE", "+.1f", " points", ("ilnode", "node")),
    "second_order_beats_vanilla": ("no augmentation performs worse: the 2nd-order NODE is "
                                   "more accurate", "+.1f", " points", ("sonode", "node")),
    "zero_augmentation_needs_more_nfe": ("0-augmentation cannot learn the initial condition "
                                         "and needs more NFE", "+.1f", " NFE", ("anode", "ilnode")),
    "input_layer_near_best": ("an input layer gives the best performance", "+.1f", " points", ALL),
    "second_order_fewest_parameters": ("2nd order is the most parameter-efficient", ".3f", "×", ()),
    "parameters_match_poster": ("the poster's parameter counts", ".1%", "", ()),
}  # fmt: skip
"""``{claim: (what the poster says, spec, unit, the models that must pass the bar)}``."""
CHECKS = ("second_order_fewest_parameters", "parameters_match_poster")  # the same every seed
PAIRS = {"input_layer_beats_vanilla": ("ilnode", "node", "acc"),
         "second_order_beats_vanilla": ("sonode", "node", "acc"),
         "zero_augmentation_needs_more_nfe": ("anode", "ilnode", "nfe")}  # fmt: skip


def _test(key: str, g: Get, p: Get) -> tuple[float, bool]:
    """Claim ``key``'s number and test on our numbers ``g`` and the poster's ``p``; on the
    poster's alone (``g = p``), its number is the published value."""
    if key in PAIRS:  # the first model's number above the second's, paired per seed
        first, second, k = PAIRS[key]
        return g(first, k) - g(second, k), g(first, k) - g(second, k) > 0.0
    if key == "every_model_trained":
        return float(np.min([g(n, "acc") for n in MODELS])), True
    if key == "input_layer_near_best":
        il, best = g("ilnode", "acc"), float(np.max([g(n, "acc") for n in MODELS]))
        return il - best, il >= best - NEAR_BEST
    if key == "second_order_fewest_parameters":
        others = float(np.min([g(n, "params") for n in MODELS if n != "sonode"]))
        so = g("sonode", "params")
        return so / others, so <= others
    counts = [(g(n, "params"), p(n, "params")) for n in MODELS]  # parameters_match_poster
    return float(np.max([abs(a / b - 1) for a, b in counts])), all(
        abs(a - b) <= POSTER_PARAMS * b for a, b in counts
    )


def dataset_claims(dataset: str) -> list[Claim]:
    """The claims of :data:`CLAIMS` on one data set, holding on a seed only where the models
    they compare pass its bar (the first, only where it has one). MNIST's details are in the
    text; another data set's are the same without the bar.

    Example:
        >>> [(c.key, c.published) for c in dataset_claims("mnist")][3]  # the poster's 71 - 44
        ('mnist_zero_augmentation_needs_more_nfe', 27)
    """
    poster, bar = PUBLISHED[dataset], TRAINED.get(dataset)

    def on_poster(model: str, key: str) -> float:
        return poster[model][key]

    published: dict[str, str | float] = {k: _test(k, on_poster, on_poster)[0] for k in CLAIMS}
    counts = (f"{poster[n]['params'] / 1e3:.1f}k" for n in MODELS)
    published["parameters_match_poster"] = " / ".join(counts)

    def claim(key: str, text: str, spec: str, unit: str, reach: tuple[str, ...]) -> Claim:
        def test(v: Values) -> tuple[float, bool]:
            return _test(key, lambda model, k: v[OURS[k].of(f"{dataset}/{model}")], on_poster)

        def holds(v: Values) -> bool:
            reached = bar is None or all(v[TEST_ACC.of(f"{dataset}/{n}")] >= bar for n in reach)
            return reached and test(v)[1]

        detail = Prose.of(TEXT).details[f"mnist_{key}"].partition(", and where")[0]
        return Claim(
            f"{dataset}_{key}", f"{data_name(dataset)}: {text}", published[key],
            lambda v: test(v)[0], holds, spec=spec, scale=100 if unit in ("%", " points") else 1,
            unit=unit, kind="check" if key in CHECKS else "paper",
            detail="" if dataset == "mnist" else detail.format_map(THRESHOLDS),
        )  # fmt: skip

    keys = [k for k in CLAIMS if bar is not None or k != "every_model_trained"]
    return [claim(k, *CLAIMS[k]) for k in keys]


def tables(setup: Setup[AugmentationSettings]) -> dict[str, Table]:
    """Per data set, the four models beside the poster; ours "not run" where not trained."""
    trained = trained_datasets(setup)
    ours = [Col(f"test accuracy (ours, {len(setup.seeds)} seed(s))", TEST_ACC),
            Col("NFE in the first epoch (ours)", NFE_FIRST), Col("NFE at convergence (ours)", NFE),
            Col("parameters (ours)", PARAMETERS, spread=False)]  # fmt: skip
    poster = [Col(f"{what} (poster)") for what in ("test accuracy", "NFE", "parameters")]
    columns = [ours[0], poster[0], ours[1], ours[2], poster[1], ours[3], poster[2]]

    def row(d: str, m: str) -> Row:
        p = PUBLISHED[d][m]
        cells = (f"{p['acc'] * 100:.1f}%", f"{p['nfe']:.0f}", f"{p['params'] / 1e3:.1f}k")
        text = {col.header: cell for col, cell in zip(poster, cells)}
        missing = {} if d in trained else {col.header: "not run" for col in ours}
        return Row(LABELS[m], f"{d}/{m}", text=text | missing)

    return {d: Table("model", [row(d, m) for m in MODELS], columns) for d in DATASETS}


def words(result: Result[AugmentationSettings]) -> dict[str, object]:
    """The claims' thresholds and the settings in words."""
    s = result.settings
    after = ", ".join(str(m) for m in s.milestones if m < s.epochs)
    sizes = f"{s.train_size} training and {s.test_size} test images"
    return {
        **THRESHOLDS,
        "schedule": f"times {s.gamma:g} after epoch(s) {after}" if after else "constant",
        "gradient": "the adjoint" if s.gradient == "adjoint" else "backprop through the steps",
        "sizes": "all training and test images" if s.train_size is None else sizes,
    }


def _poster_panels(result: Result[AugmentationSettings]) -> list[Bars]:
    """Per data set: accuracy, NFE and parameters of the four models, ours and the poster's."""
    panels = (("acc", 100.0, "test accuracy, %"), ("nfe", 1.0, "NFE at convergence"),
              ("params", 1e-3, "parameters, thousands"))  # fmt: skip
    return [
        Bars(f"{data_name(dataset)}: {label}", label, list(SHORT.values()), series={
            "ours": [None if (m := result.stat(OURS[key].of(f"{dataset}/{n}")).mean) is None
                     else m * scale for n in MODELS],  # None: "n/a", not a bar at 0
            "poster": [PUBLISHED[dataset][n][key] * scale for n in MODELS],
        })
        for dataset in trained_datasets(result.setup) for key, scale, label in panels
    ]  # fmt: skip


def _nfe_panels(result: Result[AugmentationSettings]) -> list[Lines]:
    """Forward NFE per batch against the epoch, the mean over the seeds of each model, a
    panel per data set."""
    return [
        Lines(data_name(dataset), "epoch", "forward NFE per batch", series={
            LABELS[n]: mean_band([m.details["nfe_per_epoch"]
                                  for m in result.measurements[f"{dataset}/{n}"]])[0]
            for n in MODELS
        })
        for dataset in trained_datasets(result.setup)
    ]  # fmt: skip


TEMPLATE = register_template(
    Template(
        name="dissecting-augmentation",
        description="Massaroli et al. (2020) augmentation table: NODE, 0-augmented, input-layer "
        "and second-order image NODEs on MNIST (CIFAR-10 when found): accuracy, NFE, parameters",
        title="Augmentation strategies for image NODEs (Massaroli et al. 2020)",
        modes=MODES, runs=runs, measure=measure, tables=tables, words=words,
        claims=lambda setup: [c for d in trained_datasets(setup) for c in dataset_claims(d)],
        figures=[Plot("augmentation.png", _poster_panels, columns=3, size=(13 / 3, 3.4)),
                 Plot("nfe.png", _nfe_panels)],
        published=PUBLISHED, one_thread_modes=("quick", "standard"),  # one thread per run
    )
)  # fmt: skip
