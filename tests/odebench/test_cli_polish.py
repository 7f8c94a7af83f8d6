"""The command line's help (fast, every default in it), progress bars only on a terminal,
and the human labels and whole-epoch ticks of the training figures."""

from __future__ import annotations

import argparse
import dataclasses
import io
import math
import shlex
import subprocess
import sys
from types import SimpleNamespace

import pytest
from odebench import _figures, cli, main
from odebench._io import metric_label
from odebench.training import TrainConfig, train
from odebench.training._config import show_progress
from subprocess_env import odebench_env

TOY = {
    "model": "toy-node", "dataset": "annuli-1d", "optimizer": "adam", "lr": 3e-3, "epochs": 1,
    "batch_size": 32, "train_size": 64, "test_size": 64, "device": "cpu",
}  # fmt: skip
TOY_ARGS = [
    "train", "--model", "toy-node", "--dataset", "annuli-1d", "--optimizer", "adam",
    "--lr", "3e-3", "--epochs", "1", "--batch-size", "32", "--train-size", "64",
    "--test-size", "64", "--device", "cpu",
]  # fmt: skip


def _parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``parser`` and every sub-command's parser, nested ones included, by their words
    (``""``, ``"train"``, ``"perf solvers"``)."""
    found = {"": parser}
    queue = [parser]
    while queue:
        for action in queue.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    found[child.prog.removeprefix("odebench ")] = child
                    queue.append(child)
    return found


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help of ``action`` as ``--help`` prints it (before wrapping)."""
    return parser._get_formatter()._expand_help(action)


def _arguments(parser: argparse.ArgumentParser) -> list[tuple[object, ...]]:
    """What defines each argument of ``parser`` (its sub-commands left out): its flags or
    name, default, type (by name: each build makes its own), choices, help."""
    return [
        (
            tuple(a.option_strings), a.dest, a.default, getattr(a.type, "__qualname__", a.type),
            a.choices, a.required, a.help,
        )
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction)
    ]  # fmt: skip


FULL = _parsers(cli._parser())
COMMANDS = sorted(name for name in FULL if name)


# --- help without torch, each sub-command's arguments only when it is named ---------------


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], [], ["list", "--help"], ["report", "--help"],
     ["publish", "--help"], ["perf", "--help"], ["perf", "plot", "--help"]],
)  # fmt: skip
def test_help_and_version_import_no_torch(argv):
    script = (
        "import sys\n"
        "from odebench import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "               ('torch', 'numpy', 'matplotlib', 'odecore', 'contnet', 'tqdm'))\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=odebench_env(),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout, proc.stdout.splitlines()[-1]


def test_the_top_level_help_lists_every_command_with_its_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for name, command in cli._COMMANDS.items():
        assert f"{name} {command.help}" in out


@pytest.mark.parametrize("name", COMMANDS)
def test_a_named_command_gets_all_its_arguments_and_no_other_command_any(name):
    parsers = _parsers(cli._parser(cli._named([*name.split(), "--flag", "value"])))
    assert _arguments(parsers[name]) == _arguments(FULL[name])
    for other in COMMANDS:
        if other != name:
            assert [a[1] for a in _arguments(parsers[other])] == ["help"], other


def test_train_help_lists_the_models_and_data_sets(monkeypatch, capsys):
    from odebench.models import MODELS
    from odebench.training import DATASETS

    monkeypatch.setattr(sys, "argv", ["odebench", "train", "--help"])  # main() reads it
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"--model M one of: {', '.join(MODELS)}" in out
    assert f"--dataset D one of: {', '.join(DATASETS)}" in out


@pytest.mark.parametrize(
    ("argv", "unknown"),
    [
        (["trian"], "trian"),
        (["trian", "--help"], "trian"),
        (["perf", "solver", "--quick"], "solver"),
    ],
)
def test_an_unknown_command_is_a_usage_error(argv, unknown, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"invalid choice: {unknown!r}" in err
    assert err.count("\n") == 1  # one line, no usage


def test_train_options_default_to_the_train_config_defaults():
    args = cli._parser().parse_args(["train", "--model", "odenet", "--dataset", "mnist"])
    fields = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    # solver_options has a default factory: its append option starts from None
    shared = sorted(set(fields) & set(vars(args)) - {"model", "dataset", "solver_options"})
    assert len(shared) >= 20
    assert {n: getattr(args, n) for n in shared} == {n: fields[n] for n in shared}
    assert TrainConfig(model="odenet", dataset="mnist", epochs=args.epochs) == TrainConfig(
        model="odenet", dataset="mnist"
    )


def test_run_options_default_to_the_run_options_defaults():
    from odebench.experiments import RunOptions

    args = cli._parser().parse_args(["run", "quickstart"])
    fields = {f.name: f.default for f in dataclasses.fields(RunOptions) if f.name != "out"}
    assert set(fields) <= set(vars(args))
    assert {n: getattr(args, n) for n in fields} == fields


# --- every default in the help -------------------------------------------------------


def _options() -> list[tuple[argparse.ArgumentParser, argparse.Action]]:
    return [
        (parser, action)
        for parser in FULL.values()
        for action in parser._actions
        if action.option_strings and action.default is not argparse.SUPPRESS
    ]


def _option_id(option: tuple[argparse.ArgumentParser, argparse.Action]) -> str:
    parser, action = option
    return f"{parser.prog.removeprefix('odebench ')}:{action.option_strings[-1]}"


@pytest.mark.parametrize("option", _options(), ids=_option_id)
def test_every_option_states_its_default(option):
    parser, action = option
    text = _help(parser, action)
    # a flag, off unless given; or a --no-X flag, on unless given
    if action.nargs == 0 and (action.default in (False, None) or action.const is False):
        assert "(default: False)" not in text
        if isinstance(action, argparse.BooleanOptionalAction):
            assert "(default: " in text
        return
    if action.required:
        return
    assert "(default: " in text, text
    if action.default is not None:
        shown = "none" if action.default == () else str(action.default)
        assert f"(default: {shown}" in text, text


def test_the_help_lists_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    default = TrainConfig(model="odenet", dataset="mnist")
    for phrase in (
        f"--epochs N number of epochs (default: {default.epochs})",
        f"--batch-size N the global batch, split over the processes "
        f"(default: {default.batch_size})",
        f"--rtol RTOL relative tolerance (default: {default.rtol:g},",
        f"--seed S random seed (default: {default.seed})",
        "--progress, --no-progress progress bars per epoch on stderr (default: only when",
    ):
        assert phrase in out


@pytest.mark.parametrize(
    ("benchmark", "option", "attribute"),
    [("solvers", "--repeats N", "n_repeats"), ("contnet", "--repeats N", "n_repeats"),
     ("contnet", "--batch N", "n_batch"), ("contnet", "--n-steps N", "steps")],
)  # fmt: skip
def test_the_perf_help_gives_the_defaults_of_the_configuration(
    benchmark, option, attribute, capsys
):
    from odebench.perf import ContnetConfig, SolversConfig

    config = {"solvers": SolversConfig, "contnet": ContnetConfig}[benchmark]
    with pytest.raises(SystemExit):
        main(["perf", benchmark, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    full, quick = getattr(config(), attribute), getattr(config(quick=True), attribute)
    assert f"{option} " in out
    assert f"(default: {full}; with --quick: {quick})" in out.split(f"{option} ", 1)[1]


def test_every_perf_option_reaches_its_field():
    from odebench.perf import ContnetConfig, SolversConfig

    argv = shlex.split(
        "perf solvers --quick --threads 1 --repeats 2 --problems vdp,linear "
        "--libraries odecore --no-memory --no-gradients --compile"
    )
    assert cli._from_args(SolversConfig, cli._parser().parse_args(argv)) == SolversConfig(
        quick=True, threads=1, repeats=2, problems=("vdp", "linear"), libraries=("odecore",),
        memory=False, gradients=False, compile=True,
    )  # fmt: skip
    argv = shlex.split("perf contnet --quick --threads 1 --repeats 3 --batch 4 --n-steps 2")
    assert cli._from_args(ContnetConfig, cli._parser().parse_args(argv)) == ContnetConfig(
        quick=True, threads=1, repeats=3, batch=4, n_steps=2
    )


# --- progress bars only on a terminal --------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _closed() -> io.StringIO:
    stream = io.StringIO()
    stream.close()
    return stream


@pytest.mark.parametrize(
    ("progress", "stream", "shown"),
    [(None, _Terminal(), True), (None, io.StringIO(), False), (None, _closed(), False),
     (True, io.StringIO(), True), (False, _Terminal(), False)],
)  # fmt: skip
def test_show_progress_is_automatic_only_for_none(progress, stream, shown):
    assert show_progress(progress, stream) is shown


def test_progress_must_be_a_bool_or_none():
    with pytest.raises(ValueError, match=r"`progress` must be True, False or None"):
        TrainConfig(**{**TOY, "progress": "yes"})


@pytest.mark.parametrize(("progress", "bar"), [(None, False), (True, True), (False, False)])
def test_a_run_draws_its_bar_on_a_log_only_when_asked(progress, bar, tmp_path, capsys):
    train(TrainConfig(**TOY, progress=progress), tmp_path / "run", log=lambda line: None)
    err = capsys.readouterr().err
    assert ("\r" in err) is bar
    assert ("epoch 1/1" in err) is bar


def test_a_run_draws_its_bar_on_a_terminal(tmp_path, monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    train(TrainConfig(**TOY), tmp_path / "run", log=lambda line: None)
    assert "\r" in terminal.getvalue() and "epoch 1/1" in terminal.getvalue()


@pytest.mark.parametrize(("flags", "bar"), [([], False), (["--progress"], True),
                                            (["--no-progress"], False)])  # fmt: skip
def test_train_progress_flags(flags, bar, tmp_path, capsys):
    assert main([*TOY_ARGS, "--out", str(tmp_path / "run"), *flags]) == 0
    err = capsys.readouterr().err
    assert ("\r" in err) is bar
    assert "epoch 1/1" in err  # the epoch's summary line comes either way


@pytest.mark.parametrize(
    ("flags", "progress"), [([], None), (["--progress"], True), (["--no-progress"], False)]
)
def test_run_progress_flags(flags, progress, monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(
        "odebench.experiments.run_experiment",
        lambda name, options, log: seen.append(options.progress),
    )
    assert main(["run", "quickstart", "--quick", "--out", str(tmp_path / "q"), *flags]) == 0
    assert seen == [progress]  # None: the training loop looks whether stderr is a terminal


# --- figures: words and whole epochs -----------------------------------------------------


def _rows(epochs: int) -> list[dict[str, float | None]]:
    return [
        {
            "epoch": e, "train_loss": 1 / e, "test_loss": 1.2 / e, "train_acc": 0.5 + e / 40,
            "test_acc": 0.4 + e / 40, "nfe_forward": 20.0 + e, "nfe_backward": 30.0 + e,
            "test_nfe": 20.0 + e,
        }
        for e in range(1, epochs + 1)
    ]  # fmt: skip


def _whole_ticks(ax) -> bool:
    ax.figure.canvas.draw()
    return all(float(t).is_integer() for t in ax.get_xticks())


def _curves(rows, loss, tmp_path, monkeypatch):
    """The figure of a run's curves.png, as the run draws it (kept open, not saved)."""
    figures = []
    monkeypatch.setattr(_figures, "save_png", lambda path, fig, **options: figures.append(fig))
    panels = _figures.curve_panels(rows, loss=loss)
    _figures.draw(tmp_path / "curves.png", panels, size=(4.2, 3.4), title="a run")
    return figures[0]


@pytest.mark.parametrize("epochs", [1, 2, 3, 7])
def test_curves_have_words_for_labels_and_whole_epochs(epochs, tmp_path, monkeypatch):
    from odebench._io import pyplot

    fig = _curves(_rows(epochs), "cross_entropy", tmp_path, monkeypatch)
    try:
        axes = fig.axes
        assert [ax.get_ylabel() for ax in axes] == [
            "cross-entropy loss", "accuracy (%)", "function evaluations per batch",
        ]  # fmt: skip
        assert axes[0].get_yscale() == "log" and axes[1].get_yscale() == "linear"
        for ax in axes:
            assert ax.get_xlabel() == "epoch"
            assert _whole_ticks(ax), ax.get_xticks()
            for text in ax.get_legend().get_texts():
                assert "_" not in text.get_text()
        legend = [t.get_text() for t in axes[2].get_legend().get_texts()]
        assert legend == [metric_label(k) for k in ("nfe_forward", "nfe_backward", "test_nfe")]
        accuracy = axes[1].get_lines()[1].get_ydata()
        assert math.isclose(accuracy[-1], 100 * (0.4 + epochs / 40))  # in percent
    finally:
        pyplot().close(fig)


def test_curves_leave_out_a_panel_without_data(tmp_path, monkeypatch):
    from odebench._io import pyplot

    rows = [{"epoch": e, "train_loss": 1.0 / e, "test_loss": 1.0 / e} for e in (1, 2)]
    fig = _curves(rows, "mse", tmp_path, monkeypatch)
    assert [ax.get_ylabel() for ax in fig.axes] == ["mean squared error"]
    pyplot().close(fig)


@pytest.mark.parametrize(
    ("key", "label"),
    [("test_acc", "test accuracy (%)"), ("nfe_backward", "function evaluations (backward)"),
     ("images_per_second", "images per second"), ("some_new_metric", "some new metric")],
)  # fmt: skip
def test_metric_labels(key, label):
    assert metric_label(key) == label


def test_the_quickstart_figure_has_words_and_whole_epochs(tmp_path):
    from odebench.experiments import RunOptions
    from odebench.experiments import _quickstart as quickstart

    settings = quickstart.TEMPLATE.settings_for("quick")
    options = RunOptions(out=tmp_path / "out", mode="quick")
    setup = quickstart.Setup("quickstart", "quick", settings, options, (0,), lambda line: None)
    for name, model in quickstart.TOY:
        config = TrainConfig(**{**TOY, "model": model, "epochs": 2, "progress": False})
        train(config, setup.run_dir(name, 0), log=lambda line: None)
    _, loss, nfe = quickstart.toy_panels(SimpleNamespace(setup=setup))
    assert (loss.xlabel, nfe.xlabel) == ("epoch", "epoch")
    assert loss.ylabel == "train loss (mean squared error)"
    assert nfe.ylabel == "function evaluations (forward) per batch"
    assert all(float(x).is_integer() for x in (*loss.xticks, *nfe.xticks))
