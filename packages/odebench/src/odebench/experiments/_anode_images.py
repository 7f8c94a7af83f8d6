"""``odebench run anode-images``: Dupont et al. (2019), Sec. 5.2, Table 1 and Fig. 10, NODE
against ANODE on MNIST, CIFAR-10 and SVHN (docs/odebench/experiments/anode-images.md).
"""

from __future__ import annotations

import math

import numpy as np

from .._figures import Bars, Lines, Style
from .._metrics import Metric, Values
from .._tables import Col, Table, by_run
from . import _anode_common as common
from ._anode_common import LABELS, MODELS, NFE_FIRST, NFE_LAST, PARAMETERS, TEST_ACC
from ._claims import Claim
from ._images import data_name, trained_datasets
from ._report import Prose
from ._result import Result
from ._runner import register_template
from ._template import Measurement, Plot, Run, Setup, Template, Trained, TrainingSettings

DATASETS = ("mnist", "cifar10", "svhn")  # MNIST always; the others when found

PUBLISHED: dict[str, dict[str, dict[str, float]]] = {
    "mnist": {"node": {"acc": 0.964, "acc_std": 0.005, "params": 84_000},
              "anode": {"acc": 0.982, "acc_std": 0.001, "params": 84_000}},
    "cifar10": {"node": {"acc": 0.537, "acc_std": 0.002, "params": 172_000},
                "anode": {"acc": 0.606, "acc_std": 0.004, "params": 172_000}},
    "svhn": {"node": {"acc": 0.810, "acc_std": 0.006, "params": 172_000},
             "anode": {"acc": 0.835, "acc_std": 0.005, "params": 172_000}},
}  # fmt: skip
"""Table 1 as two third-party documents quote it (not yet checked against the PDF), and
the rounded budgets of Sec. 5.2."""

MATCHED = 0.02  # the two models' parameter counts differ by at most this fraction
BUDGET = 0.05  # each count within this fraction of the paper's budget
TRAINED = {"mnist": 0.95, "cifar10": 0.50, "svhn": 0.78}  # both models reach this: trained
TEXT = "anode-images.md"

TEST_IMAGES = Metric("test_images")

MODES = {
    "quick": TrainingSettings(seeds=2, epochs=1, lr=1e-3, batch_size=32, train_size=128,
                              test_size=128),
    "standard": TrainingSettings(seeds=3, epochs=2, lr=1e-3, batch_size=8, train_size=2000,
                                 test_size=1000),
    "full": TrainingSettings(seeds=5, epochs=20, lr=1e-3, batch_size=256),
}  # fmt: skip


def runs(setup: Setup[TrainingSettings], seed: int) -> list[Run]:
    """Both models on every data set (:func:`common.image_runs`)."""
    return common.image_runs(DATASETS, {m: m for m in MODELS}, lambda model, dataset: (
        common.train_config(setup.settings, model, dataset, seed)))  # fmt: skip


def measure(setup: Setup[TrainingSettings], trained: Trained) -> Measurement:
    """Final test accuracy and training loss, parameters, NFE, and the test images."""
    result = trained.result
    final = {TEST_ACC.name: "test_acc", "train_loss": "train_loss"}
    extra = {PARAMETERS.name: result["parameters"], "train_seconds": result["train_seconds"],
             TEST_IMAGES.name: result["examples"]["test"]}  # fmt: skip
    return common.epoch_numbers(trained, final, extra)


def standard_error(v: Values, node: str, anode: str) -> float:
    """The binomial standard error of the difference of the two models' test accuracies
    (larger than the paired difference's: it errs on the strict side)."""
    a, b, n = v[TEST_ACC.of(anode)], v[TEST_ACC.of(node)], v[TEST_IMAGES.of(node)]
    return math.sqrt((a * (1 - a) + b * (1 - b)) / n)


def dataset_claims(dataset: str) -> list[Claim]:
    """The claims on ``dataset``; their details the text's parts of the same names."""
    label, node, anode = data_name(dataset), f"{dataset}/node", f"{dataset}/anode"
    paper, bar = PUBLISHED[dataset], TRAINED[dataset]
    budget = paper["node"]["params"]
    accs = TEST_ACC.of(node), TEST_ACC.of(anode)
    params = PARAMETERS.of(node), PARAMETERS.of(anode)

    def detail(key: str) -> str:
        return Prose.of(TEXT).part(key, matched=MATCHED, within=BUDGET)

    def lower(v: Values) -> float:
        return float(np.min([v[acc] for acc in accs]))  # NaN where one is: min drops a later one

    def diff(v: Values) -> float:
        return v[accs[1]] - v[accs[0]]

    def off_budget(v: Values) -> float:
        return float(np.max([abs(v[p] - budget) / budget for p in params]))

    return [
        Claim.at_least(f"{dataset}_both_trained",
                       f"{label}, Table 1: both models reach {bar:.0%} test accuracy",
                       min(paper["node"]["acc"], paper["anode"]["acc"]), lower, bar, spec=".1f",
                       scale=100, unit="%", kind="paper", detail=detail("both_trained")),
        Claim(f"{dataset}_anode_more_accurate",
              f"{label}, Table 1: ANODEs are more accurate than NODEs",
              paper["anode"]["acc"] - paper["node"]["acc"], ours=diff,
              holds=lambda v: lower(v) >= bar and diff(v) > standard_error(v, node, anode),
              spec="+.1f", scale=100, unit=" points", kind="paper",
              detail=detail("anode_more_accurate")),
        Claim.difference(f"{dataset}_anode_fewer_nfe",
                         f"{label}, Fig. 10: ANODEs need fewer function evaluations than NODEs",
                         "fewer (curves only)", NFE_LAST.of(anode), NFE_LAST.of(node), below=0.0,
                         kind="paper", spec="+.1f", unit=" NFE", detail=detail("anode_fewer_nfe")),
        Claim(f"{dataset}_parameters_matched",
              f"{label}, Sec. 5.2: the two models have matched parameter counts", 1.0,
              ours=lambda v: v[params[1]] / v[params[0]],
              holds=lambda v: abs(v[params[1]] - v[params[0]]) <= MATCHED * v[params[0]],
              spec=".3f", unit="×", kind="check", detail=detail("parameters_matched")),
        Claim(f"{dataset}_parameters_on_budget",
              f"{label}, Sec. 5.2: {budget / 1e3:.0f}k parameters", 0.0, ours=off_budget,
              holds=lambda v: all(abs(v[p] - budget) <= BUDGET * budget for p in params),
              spec=".1%", kind="check", detail=detail("parameters_on_budget")),
    ]  # fmt: skip


def tables(setup: Setup[TrainingSettings]) -> dict[str, Table]:
    """Table 1 on the data sets trained on, ours beside the paper's."""
    trained = trained_datasets(setup)
    runs = {f"{d}/{m}": f"{data_name(d)}, {LABELS[m]}" for d in trained for m in MODELS}
    paper = {
        f"{d}/{m}": {"test accuracy (paper)": f"{100 * p['acc']:.1f} ± {100 * p['acc_std']:.1f}%",
                     "parameters (paper)": f"{p['params'] / 1e3:.0f}k"}
        for d in trained for m, p in PUBLISHED[d].items()
    }  # fmt: skip
    return {"table1": by_run("model", runs, [
        Col("test accuracy (ours)", TEST_ACC), Col("test accuracy (paper)"),
        Col("parameters (ours)", PARAMETERS, spread=False), Col("parameters (paper)"),
        Col.joined("forward NFE per batch, first → last epoch (ours)", *(
            Col("", m, spread=False) for m in (NFE_FIRST, NFE_LAST)), sep=" → "),
    ], paper)}  # fmt: skip


def _accuracy(result: Result[TrainingSettings]) -> list[Bars]:
    """Bars: test accuracy per data set and model, ours against the paper's (Table 1)."""
    groups = [(d, m) for d in trained_datasets(result.setup) for m in MODELS]
    ours = [result.stat(TEST_ACC.of(f"{d}/{m}")) for d, m in groups]
    paper = [PUBLISHED[d][m] for d, m in groups]
    names = [f"{data_name(d)}\n{LABELS[m]}" for d, m in groups]
    return [Bars(
        "test accuracy (Table 1)", "test accuracy, %", names,
        {"ours": [None if st.mean is None else 100 * st.mean for st in ours],
         "paper": [100 * p["acc"] for p in paper]},
        {"ours": [None if st.std is None else 100 * st.std for st in ours],
         "paper": [100 * p["acc_std"] for p in paper]},
    )]  # fmt: skip


def _loss_nfe(result: Result[TrainingSettings]) -> list[Lines]:
    """Fig. 10: training loss against forward NFE per batch, each seed a line."""
    panels = []
    for dataset in trained_datasets(result.setup):
        series, styles = {}, {}
        for model in MODELS:
            for k, curve in enumerate(common.curves(result, f"{dataset}/{model}")):
                label = LABELS[model] if k == 0 else f"_{LABELS[model]} {k}"  # "_": no legend
                series[label] = [(r["nfe_forward"], r["train_loss"]) for r in curve]
                styles[label] = Style("o-", common.COLORS[model], alpha=0.8)
        title = f"{data_name(dataset)}: loss against NFE (Fig. 10)"
        panels.append(Lines(title, "forward NFE per batch", "training loss", series, styles))
    return panels


TEMPLATE = register_template(Template(
    name="anode-images",
    description="Dupont et al. (2019) Table 1 and Fig. 10: NODE against ANODE on MNIST "
    "(and CIFAR-10 and SVHN when found): accuracy, parameters, NFE over training, loss "
    "against NFE",
    title="NODE against ANODE on images (Dupont et al. 2019, Table 1 and Fig. 10)",
    modes=MODES, one_thread_modes=("quick", "standard"), published=PUBLISHED,
    runs=runs, measure=measure, tables=tables,
    claims=lambda setup: [c for d in trained_datasets(setup) for c in dataset_claims(d)],
    figures=[
        Plot("accuracy_params.png", _accuracy),
        Plot("nfe.png", lambda result: common.curve_panels(
            result, [(d, data_name(d)) for d in trained_datasets(result.setup)], "nfe_forward",
            "forward NFE per batch")),
        Plot("loss_nfe.png", _loss_nfe),
    ],
))  # fmt: skip
