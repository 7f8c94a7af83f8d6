"""``odebench run quickstart``: the README's first job, a couple of minutes on a CPU."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._figures import Lines, Point, Style
from .._io import metric_label
from .._metrics import Metric
from .._tables import Col, Row, Table, by_run
from ..data import DataError, annuli, download
from ..training import TOY_SIZES, TrainConfig, download_root, find_data, search_paths
from ._claims import Claim
from ._report import Prose
from ._result import Result
from ._run_files import first_model, seed_rows
from ._runner import register_template
from ._template import Measurement, Plot, Run, Settings, Setup, Template, Trained

TOY = (("node", "toy-node"), ("anode", "toy-anode"))
"""The toy runs and their models."""

PARAMETERS, EPOCHS = Metric("parameters", spec=".0f"), Metric("epochs", spec=".0f")
TRAIN_LOSS, TEST_LOSS = Metric("train_loss"), Metric("test_loss")
TEST_ACC = Metric("test_acc", spec=".2f", scale=100, unit="%")
NFE_FORWARD, NFE_BACKWARD = Metric("nfe_forward", spec=".1f"), Metric("nfe_backward", spec=".1f")
IMAGES_PER_SECOND = Metric("images_per_second", spec=".0f")
TRAIN_SECONDS = Metric("train_seconds", spec=".1f")


@dataclass(frozen=True, kw_only=True)
class QuickstartSettings(Settings):
    """The toy NODE and ANODE (Adam, lr 3e-3, batch 64) and the image run (SGD, lr 0.1):
    the epochs and the training and test sizes of each (``None``, the default: all), and the
    image run's batch."""

    toy_epochs: int
    toy_train_size: int | None = None
    toy_test_size: int | None = None
    image_epochs: int
    image_batch_size: int
    image_train_size: int | None = None
    image_test_size: int | None = None


MODES = {
    "quick": QuickstartSettings(
        toy_epochs=3, toy_train_size=600, toy_test_size=300,
        image_epochs=1, image_batch_size=32, image_train_size=256, image_test_size=256,
    ),
    # A few minutes on a 2-core CPU: 3 seeds, the ODE-Net two epochs on the digits.
    "standard": QuickstartSettings(seeds=3, toy_epochs=15, image_epochs=2, image_batch_size=64),
    "full": QuickstartSettings(seeds=5, toy_epochs=30, image_epochs=10, image_batch_size=64),
}  # fmt: skip


@dataclass(frozen=True)
class Data:
    """The data set of the image run and why it was chosen (the report says both)."""

    dataset: str
    why: str


@functools.cache
def _image_data(setup: Setup[QuickstartSettings]) -> Data:
    """MNIST when found; else MNIST downloaded; else, in one line, where it was looked
    for and how to get it, and the toy spirals. Chosen once per run of the experiment."""
    data_dir = setup.options.data_dir
    # The report says what was chosen; where it lies (a path of this machine) goes
    # to the log only.
    try:
        setup.log(f"MNIST found in {find_data('mnist', data_dir)}")
        return Data("mnist", "MNIST's IDX files, found on this machine")
    except FileNotFoundError:
        root = Path(data_dir) if data_dir is not None else download_root()
    setup.log(f"no MNIST found; downloading it into {root}")
    try:
        setup.log(f"MNIST downloaded into {download('mnist', root)}")
        return Data("mnist", "MNIST, not found on this machine, downloaded")
    except DataError:
        places = [str(p) for p in ([Path(data_dir)] if data_dir else search_paths())]
    spirals = "the toy ANODE on two nested spirals instead"
    setup.log(
        f"no MNIST in {', '.join(places)} and the download failed (get it with "
        f"`odebench download mnist`, or give --data-dir DIR); {spirals}"
    )
    return Data("spirals", f"no MNIST on this machine and the download failed; {spirals}")


def runs(setup: Setup[QuickstartSettings], seed: int) -> list[Run]:
    """The toy NODE and ANODE on g(x), then an ODE-Net on MNIST, or without it the toy
    ANODE on the spirals."""
    s, data = setup.settings, _image_data(setup)
    toy = functools.partial(TrainConfig, epochs=s.toy_epochs, batch_size=64, optimizer="adam",
                            seed=seed, train_size=s.toy_train_size,
                            test_size=s.toy_test_size)  # fmt: skip
    if data.dataset == "mnist":
        image = TrainConfig(model="odenet", dataset="mnist", epochs=s.image_epochs,
                            batch_size=s.image_batch_size, optimizer="sgd", lr=0.1, seed=seed,
                            train_size=s.image_train_size, test_size=s.image_test_size)  # fmt: skip
    else:
        drop = _drop(s)
        image = toy(model="toy-anode", dataset="spirals", lr=1e-2, train_size=None,
                    test_size=None, milestones=(drop,) if drop else ())  # fmt: skip
    toys = [Run(name, config=toy(model=model, dataset="annuli-1d", lr=3e-3)) for name, model in TOY]
    return [*toys, Run("image", config=image)]


def _drop(s: QuickstartSettings) -> int:
    """The (0-based) epoch from which the spirals run's learning rate is a tenth; 0: none."""
    return 2 * s.toy_epochs // 3


def measure(setup: Setup[QuickstartSettings], trained: Trained) -> Measurement:
    """The run's final numbers; the image run also says which model and data set, and why."""
    config = trained.config
    if trained.run.name != "image" or config is None:
        return Measurement(trained.final_metrics())
    examples = trained.result.get("examples") or {}
    details = {"model": config.model, "dataset": config.dataset,
               "why": _image_data(setup).why, "train_images": examples.get("train"),
               "test_images": examples.get("test")}  # fmt: skip
    return Measurement(trained.final_metrics(), details)


CLAIMS = [
    Claim.difference(
        "anode_fits_better",
        "an ANODE fits g(x) better than a NODE, which cannot represent it (Dupont et al. 2019)",
        "the NODE cannot represent g(x); the ANODE can", TEST_LOSS.of("anode"),
        TEST_LOSS.of("node"), below=0.0, kind="paper", spec="+.3g",
    )
]  # fmt: skip
"""The claim checked on the toy runs; the image run only shows that training works."""


def tables(setup: Setup[QuickstartSettings]) -> dict[str, Table]:
    """The toy runs side by side, and the image run under the model it trained."""
    toy = by_run("model", {name: name.upper() for name, _ in TOY}, [
        Col("parameters", PARAMETERS), Col("epochs", EPOCHS), Col("train MSE", TRAIN_LOSS),
        Col("test MSE", TEST_LOSS), Col("forward NFE", NFE_FORWARD),
        Col("backward NFE", NFE_BACKWARD),
    ])  # fmt: skip
    model = Row("image", "image", label_of=lambda result: str(result.details("image")["model"]))
    image = Table("model", [model], [
        Col("parameters", PARAMETERS), Col("epochs", EPOCHS), Col("test accuracy", TEST_ACC),
        Col("test loss", TEST_LOSS), Col("forward NFE", NFE_FORWARD),
        Col("images/s", IMAGES_PER_SECOND), Col("train time (s)", TRAIN_SECONDS),
    ])  # fmt: skip
    return {"toy": toy, "image": image}


def words(result: Result[QuickstartSettings]) -> dict[str, object]:
    """The image run's model, data and training, and where its curves are."""
    setup, image = result.setup, result.details("image")
    curves = setup.run_dir("image", setup.seeds[0]).relative_to(setup.out).as_posix()
    return {"image": image, "training": _training(result.settings, image), "curves": curves}


MNIST_SPLIT = (60_000, 10_000)
"""MNIST's own training and test split; files with fewer images are a subset."""


def _training(s: QuickstartSettings, image: Mapping[str, Any]) -> str:
    """How the image run trained, with the number of images it read (not "all")."""
    if image["dataset"] != "mnist":
        drop = _drop(s)  # the rows count the epochs from 1
        after = f" (0.001 from epoch {drop + 1})" if drop else ""
        return Prose.of("quickstart.md").part("spirals", **TOY_SIZES, drop=after)
    train, test = image.get("train_images"), image.get("test_images")
    full = train is None or test is None or (train >= MNIST_SPLIT[0] and test >= MNIST_SPLIT[1])
    subset = "" if full else f" (a subset: MNIST has {MNIST_SPLIT[0]:,} and {MNIST_SPLIT[1]:,})"
    fields = {"train": train, "test": test, "subset": subset, "batch": s.image_batch_size}
    return Prose.of("quickstart.md").part("mnist", **fields)


def toy_panels(result: Result[QuickstartSettings]) -> list[Lines]:
    """What the NODE and ANODE of the first seed learned of g(x), and their loss and
    NFE per epoch."""
    data = annuli(400, dim=1, generator=torch.Generator().manual_seed(0))
    x = torch.linspace(-1.6, 1.6, 400)[:, None]
    learned = {"g(x) samples": list(zip(data.inputs[:, 0].tolist(), data.targets[:, 0].tolist()))}
    styles = {"g(x) samples": Style(".", "0.6")}
    loss: dict[str, list[Point]] = {}
    nfe: dict[str, list[Point]] = {}
    for name, _ in TOY:
        model = first_model(result.setup, name)
        with torch.no_grad():
            learned[name.upper()] = list(zip(x[:, 0].tolist(), model(x)[:, 0].tolist()))
        styles[name.upper()] = Style("-")
        metrics = seed_rows(result.setup, name)[0]
        loss[name.upper()] = [(m["epoch"], m["train_loss"]) for m in metrics]
        nfe[name.upper()] = [(m["epoch"], m["nfe_forward"]) for m in metrics]
    epochs = [m["epoch"] for m in metrics][:: 1 + len(metrics) // 16]  # whole, at most 16
    epoch = metric_label("epoch")
    return [
        Lines("learned g(x)", "x", "prediction", learned, styles),
        Lines("loss", epoch, f"{metric_label('train_loss')} (mean squared error)", loss,
              yscale="log", xticks=epochs),
        Lines("function evaluations during training", epoch,
              f"{metric_label('nfe_forward')} per batch", nfe, xticks=epochs),
    ]  # fmt: skip


TEMPLATE = register_template(
    Template(
        name="quickstart",
        description="NODE against ANODE on the 1-D g(x), and a small ODE-Net on MNIST digits "
        "(downloaded when absent; the toy spirals when that fails); a report with plots",
        title="odebench quickstart",
        modes=MODES, runs=runs, measure=measure, claims=lambda setup: CLAIMS, tables=tables,
        words=words, figures=[Plot("toy.png", toy_panels)],
        epoch_fields=("toy_epochs", "image_epochs"),
    )
)  # fmt: skip
