"""``odebench run anode-images``: Dupont et al. (2019), Sec. 5.2, Table 1 and Fig. 10, NODE
against ANODE on MNIST, CIFAR-10 and SVHN (docs/odebench/experiments/anode-images.md).
"""

from __future__ import annotations

import math

from .._figures import Bars, Lines, Style
from . import _anode_common as common
from ._anode_common import LABELS, MODELS, NFE_FIRST, NFE_LAST
from ._claims import Claim
from ._images import available_datasets, data_name, mode_note, trained_datasets
from ._metrics import Metric, Values
from ._report import Prose
from ._result import Result
from ._runner import register_template
from ._tables import Col, Table, by_run
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

TEST_ACC = Metric("test_acc", spec=".1f", scale=100, unit="%")
PARAMETERS = Metric("parameters", spec=",.0f")
TEST_IMAGES = Metric("test_images")

MODES = {
    "quick": TrainingSettings(seeds=2, epochs=1, lr=1e-3, batch_size=32, train_size=128,
                              test_size=128),
    "standard": TrainingSettings(seeds=3, epochs=2, lr=1e-3, batch_size=8, train_size=2000,
                                 test_size=1000),
    "full": TrainingSettings(seeds=5, epochs=20, lr=1e-3, batch_size=256),
}  # fmt: skip


def runs(setup: Setup[TrainingSettings], seed: int) -> list[Run]:
    """Both models on every data set found (a skipped one is logged once)."""
    log = setup.log if seed == setup.seeds[0] else lambda _: None
    return [
        Run(f"{dataset}/{model}", config=common.train_config(setup.settings, model, dataset, seed))
        for dataset in available_datasets(DATASETS, setup.options, log)
        for model in MODELS
    ]


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


def claim_fields(dataset: str, test_images: int | None) -> dict[str, object]:
    """The numbers the details of ``dataset``'s claims name."""
    paper = PUBLISHED[dataset]
    images = (
        f"On {test_images:,} test images per seed one image is {100 / test_images:.2g} points"
        if test_images
        else "On n test images one image is 100/n points"
    )
    gap = 100 * (paper["anode"]["acc"] - paper["node"]["acc"])
    budget = paper["node"]["params"] / 1e3
    return {"bar": TRAINED[dataset], "gap": gap, "images": images, "budget": budget,
            "matched": MATCHED, "within": BUDGET}  # fmt: skip


def dataset_claims(dataset: str, test_images: int | None = None) -> list[Claim]:
    """The claims on ``dataset``; their details MNIST's words (in the text) with its numbers
    and ``test_images`` per seed (``None``: all)."""
    label, node, anode = data_name(dataset), f"{dataset}/node", f"{dataset}/anode"
    paper, bar = PUBLISHED[dataset], TRAINED[dataset]
    budget = paper["node"]["params"]
    accs = TEST_ACC.of(node), TEST_ACC.of(anode)
    params = PARAMETERS.of(node), PARAMETERS.of(anode)

    def detail(key: str) -> str:
        if dataset == "mnist":
            return ""
        return Prose.of(TEXT).details[f"mnist_{key}"].format_map(claim_fields(dataset, test_images))

    def lower(v: Values) -> float:
        return min(v[acc] for acc in accs)

    def diff(v: Values) -> float:
        return v[accs[1]] - v[accs[0]]

    def off_budget(v: Values) -> float:
        return max(abs(v[p] - budget) / budget for p in params)

    return [
        Claim.at_least(
            f"{dataset}_both_trained",
            f"{label}, Table 1: both models reach {bar:.0%} test accuracy",
            min(paper["node"]["acc"], paper["anode"]["acc"]), lower, bar, spec=".1f", scale=100,
            unit="%", kind="paper", detail=detail("both_trained"),
        ),
        Claim(
            f"{dataset}_anode_more_accurate",
            f"{label}, Table 1: ANODEs are more accurate than NODEs",
            paper["anode"]["acc"] - paper["node"]["acc"],
            ours=diff,
            holds=lambda v: lower(v) >= bar and diff(v) > standard_error(v, node, anode),
            spec="+.1f", scale=100, unit=" points", kind="paper",
            detail=detail("anode_more_accurate"),
        ),
        Claim.difference(
            f"{dataset}_anode_fewer_nfe",
            f"{label}, Fig. 10: ANODEs need fewer function evaluations than NODEs",
            "fewer (curves only)", NFE_LAST.of(anode), NFE_LAST.of(node),
            below=0.0, kind="paper", spec="+.1f", unit=" NFE", detail=detail("anode_fewer_nfe"),
        ),
        Claim(
            f"{dataset}_parameters_matched",
            f"{label}, Sec. 5.2: the two models have matched parameter counts",
            1.0, ours=lambda v: v[params[1]] / v[params[0]],
            holds=lambda v: abs(v[params[1]] - v[params[0]]) <= MATCHED * v[params[0]],
            spec=".3f", unit="×", kind="check", detail=detail("parameters_matched"),
        ),
        Claim(
            f"{dataset}_parameters_on_budget",
            f"{label}, Sec. 5.2: {budget / 1e3:.0f}k parameters",
            0.0, ours=off_budget, holds=lambda v: all(
                abs(v[p] - budget) <= BUDGET * budget for p in params
            ), spec=".1%", kind="check", detail=detail("parameters_on_budget"),
        ),
    ]  # fmt: skip


def claims(setup: Setup[TrainingSettings]) -> list[Claim]:
    """The claims of every data set trained on."""
    return [c for d in _trained(setup) for c in dataset_claims(d, setup.settings.test_size)]


def _part(name: str, **fields: object) -> str:
    """The part ``name`` of the text, filled in."""
    return Prose.of(TEXT).part(name, **fields)


def trained_note(result: Result[TrainingSettings], dataset: str) -> str:
    """Whether both models reached :data:`TRAINED` on every seed, said plainly."""
    bar, n, label = TRAINED[dataset], len(result.setup.seeds), data_name(dataset)
    accs = {m: result.stat(TEST_ACC.of(f"{dataset}/{m}")).values for m in MODELS}
    reached = {m: [v is not None and v >= bar for v in values] for m, values in accs.items()}
    if all(all(r) for r in reached.values()):
        return _part("trained", label=label, bar=bar)
    both = sum(all(pair) for pair in zip(*reached.values(), strict=True))
    counts = ", ".join(f"the {LABELS[m]} on {sum(r)} of {n}" for m, r in reached.items())
    return _part("untrained", label=label, bar=bar, counts=counts, failed=n - both, n=n)


def _pct(paper: dict[str, float]) -> str:
    """A published accuracy, ``mean ± std%``."""
    return f"{100 * paper['acc']:.1f} ± {100 * paper['acc_std']:.1f}%"


def tables(setup: Setup[TrainingSettings]) -> dict[str, Table]:
    """Table 1 of each data set trained on, ours beside the paper's."""
    columns = [
        Col(f"test accuracy (ours, {len(setup.seeds)} seeds)", TEST_ACC),
        Col("test accuracy (paper)"), Col("parameters (ours)", PARAMETERS, spread=False),
        Col("parameters (paper)"), Col.joined("forward NFE per batch, first → last epoch (ours)", *(
            Col("", m, spread=False) for m in (NFE_FIRST, NFE_LAST)), sep=" → "),
        Col("NFE (paper)", text="not published (Fig. 10: curves)"),
    ]  # fmt: skip
    return {
        dataset: by_run("model", {f"{dataset}/{m}": LABELS[m] for m in MODELS}, columns, {
            f"{dataset}/{m}": {"test accuracy (paper)": _pct(p),
                               "parameters (paper)": f"{p['params'] / 1e3:.0f}k"}
            for m, p in PUBLISHED[dataset].items()
        })
        for dataset in _trained(setup)
    }  # fmt: skip


def words(result: Result[TrainingSettings]) -> dict[str, object]:
    """The notes, the section of each data set, and the MNIST claims' numbers."""
    s, setup = result.settings, result.setup
    found = tables(setup)
    sections = [_part("found", label=data_name(d), table=t.markdown(result))
                for d, t in found.items()]  # fmt: skip
    for dataset, reason in trained_datasets(DATASETS, setup)[1].items():
        node, anode = PUBLISHED[dataset]["node"], PUBLISHED[dataset]["anode"]
        sections.append(_part(
            "skipped", label=data_name(dataset), reason=f"{reason[0].upper()}{reason[1:]}",
            node=_pct(node), anode=_pct(anode), budget=node["params"] / 1e3,
        ))  # fmt: skip
    sizes = f"{s.train_size} training and {s.test_size} test images"
    return {
        "trained": "\n\n".join(trained_note(result, d) for d in found),
        "sizes": "all training and test images" if s.train_size is None else sizes,
        "datasets": "\n\n".join(sections),
        "mode_note": _mode_note(setup.mode, s),
        **claim_fields("mnist", s.test_size),
    }


def _mode_note(mode: str, s: TrainingSettings) -> str:
    """What the mode's training is beside the authors', for the report."""
    authors = (
        "the authors' configuration trains 20 epochs of all 60,000 at batch 256 (about 4,700 steps)"
    )
    if mode != "standard":
        tests = "the comparison of the two models after the same training"
        return mode_note(mode, s.epochs, s.train_size, s.batch_size, authors, tests)
    steps = s.epochs * (s.train_size or 0) // s.batch_size
    return _part("standard", s=s, steps=steps, authors=authors, bar=TRAINED["mnist"])


def _accuracy_params(result: Result[TrainingSettings]) -> list[Bars]:
    """Bars: test accuracy per data set and parameters, ours against the paper's."""
    groups = [(d, m) for d in _trained(result.setup) for m in MODELS]
    names = [f"{data_name(d)}\n{LABELS[m]}" for d, m in groups]
    panels = []
    for metric, paper_key, scale, title, ylabel in (
        (TEST_ACC, "acc", 100.0, "test accuracy (Table 1)", "test accuracy, %"),
        (PARAMETERS, "params", 1e-3, "parameters (Sec. 5.2)", "parameters, thousands"),
    ):
        ours = [result.stat(metric.of(f"{d}/{m}")) for d, m in groups]
        paper = [PUBLISHED[d][m] for d, m in groups]
        values = {"ours": [(st.mean or 0.0) * scale for st in ours],
                  "paper": [pp[paper_key] * scale for pp in paper]}  # fmt: skip
        errors = {"ours": [(st.std or 0.0) * scale for st in ours],
                  "paper": [pp["acc_std"] * scale for pp in paper]}  # fmt: skip
        panels.append(Bars(title, ylabel, names, values, errors if metric is TEST_ACC else {}))
    return panels


def _loss_nfe(result: Result[TrainingSettings]) -> list[Lines]:
    """Fig. 10: training loss against forward NFE per batch, each seed a line."""
    panels = []
    for dataset in _trained(result.setup):
        series, styles = {}, {}
        for model in MODELS:
            for k, curve in enumerate(common.curves(result, f"{dataset}/{model}")):
                label = LABELS[model] if k == 0 else f"_{LABELS[model]} {k}"  # "_": no legend
                series[label] = [(r["nfe_forward"], r["train_loss"]) for r in curve]
                styles[label] = Style("o-", common.COLORS[model], alpha=0.8)
        title = f"{data_name(dataset)}: loss against NFE (Fig. 10)"
        panels.append(Lines(title, "forward NFE per batch", "training loss", series, styles))
    return panels


def _trained(setup: Setup[TrainingSettings]) -> list[str]:
    """The data sets the runs trained on."""
    return trained_datasets(DATASETS, setup)[0]


TEMPLATE = register_template(
    Template(
        name="anode-images",
        description="Dupont et al. (2019) Table 1 and Fig. 10: NODE against ANODE on MNIST "
        "(and CIFAR-10 and SVHN when found): accuracy, parameters, NFE over training, loss "
        "against NFE",
        title="NODE against ANODE on images (Dupont et al. 2019, Table 1 and Fig. 10)",
        modes=MODES, runs=runs, measure=measure, claims=claims, tables=tables,
        words=words, figures=[
            Plot("accuracy_params.png", _accuracy_params),
            Plot("nfe.png", lambda result: common.curve_panels(
                result, [(d, data_name(d)) for d in _trained(result.setup)], "nfe_forward",
                "forward NFE per batch",
            )),
            Plot("loss_nfe.png", _loss_nfe),
        ], one_thread_modes=("quick", "standard"), published=PUBLISHED,
    )
)  # fmt: skip
