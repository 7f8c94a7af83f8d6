"""The ``odebench`` command line (``odebench --help`` lists its sub-commands and options).

Only the sub-command named on the command line gets its arguments, whose help reads
the registries and defaults from modules that import torch; ``--help`` imports none.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeVar, cast

from . import __version__

if TYPE_CHECKING:
    from ._io import JsonObject

_Config = TypeVar("_Config")

#: The largest integer an option takes: torch keeps integers in 64 bits.
_MAX_INT = 2**63 - 1

_Number = TypeVar("_Number", int, float)


def _number(
    convert: Callable[[str], _Number],
    what: str,
    within: Callable[[_Number], bool],
    high: _Number | None = None,
) -> Callable[[str], _Number]:
    """An argparse type: a number for which ``within`` holds, at most ``high``, described
    as ``what`` in errors."""

    def parse(text: str) -> _Number:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"expected {what} of at most {high}, got {value}")
        if not within(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    return parse


_non_negative_int = _number(int, "a non-negative integer", lambda value: value >= 0, _MAX_INT)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = (0,)
    if any(not 1 <= v <= _MAX_INT for v in values):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated epochs (positive integers) such as 60,100,140, got {text!r}"
        )
    return values


def _out_dir(text: str) -> Path:
    """An argparse type: a folder a run can be written to (missing, or a folder)."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder; give a folder")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: {parent} is a file, not a folder; give a folder")
    return path


def _option(text: str) -> tuple[str, bool | int | float | str]:
    """An argparse type: ``NAME=VALUE``, the value a number, true, false or a word."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    words: dict[str, bool | str] = {"true": True, "false": False}
    for parse in (int, float):
        try:
            return name.strip(), parse(value)
        except ValueError:
            pass
    return name.strip(), words.get(value.lower(), value)


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of names")
    return names


#: The parsers of the options' values, by the names their fields' metadata give.
_PARSERS: dict[str, Callable[[str], Any]] = {
    "positive_int": _number(int, "a positive integer", lambda value: value >= 1, _MAX_INT),
    "positive_float": _number(float, "a positive number", lambda value: 0 < value < math.inf),
    "non_negative_float": _number(
        float, "a finite number >= 0", lambda value: 0 <= value < math.inf
    ),
    "fraction": _number(float, "a number in [0, 1)", lambda value: 0 <= value < 1),
    "int_list": _int_list,
    "option": _option,
    "names": _names,
}


class _HelpFormatter(argparse.HelpFormatter):
    """``(default: ...)`` after each option's help, but for flags, ``None`` defaults and a
    help that states its default itself."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            "(default" in text  # also "%(default)s"
            or action.default is None
            or action.default is argparse.SUPPRESS
            or not action.option_strings
            or action.nargs == 0
        ):
            return action.help
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (``odebench train: error: ...``), status 2, also in
    the sub-commands' parsers."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _from_args(config: type[_Config], args: argparse.Namespace, **given: Any) -> _Config:
    """The dataclass ``config`` made of ``given`` and, for each other field, the value of
    the option of its name in ``args`` (a field without an option keeps its default)."""
    names = [f.name for f in dataclasses.fields(cast(Any, config)) if f.name not in given]
    return config(**{n: getattr(args, n) for n in names if hasattr(args, n)}, **given)


# The arguments of each sub-command: each function imports what its help names (torch),
# and runs only for the sub-command named on the command line.


def _run_arguments(run: argparse.ArgumentParser) -> None:
    from .experiments import DEFAULT_MODE, EXPERIMENTS, MODES, RunOptions

    run.add_argument(
        "name", metavar="NAME",
        help=f"one of: {', '.join(EXPERIMENTS)}; or all, each into its own folder of --out",
    )  # fmt: skip
    run.add_argument(
        "--bf16", action="store_true", help="bfloat16 autocast in every training run (GPU)"
    )
    mode = run.add_mutually_exclusive_group()
    mode.add_argument(
        "--mode", choices=MODES, default=None,
        help=f"quick: a smoke test, seconds; standard: real training sized for a 2-core "
        f"CPU, at most about an hour; full: the paper's settings, for a GPU "
        f"(default: {DEFAULT_MODE})",
    )  # fmt: skip
    mode.add_argument("--quick", action="store_true", help="the same as --mode quick")
    _add_common(
        run,
        RunOptions,
        epochs="the experiment's, for its mode",
        out="runs/NAME; runs/EXPERIMENT for each experiment of all",
    )


def _run_dirs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="the folder of an `odebench run`"
    )


def _report_arguments(report: argparse.ArgumentParser) -> None:
    _run_dirs(report)
    report.add_argument(
        "--out", type=Path, default=Path("reproductions.md"), metavar="PATH",
        help="the page to write; a file there must be such a page, which it replaces",
    )  # fmt: skip


def _download_arguments(download: argparse.ArgumentParser) -> None:
    from .data import DOWNLOADABLE

    download.add_argument(
        "name", metavar="NAME", choices=DOWNLOADABLE,
        help=f"one of: {', '.join(DOWNLOADABLE)}",
    )  # fmt: skip
    download.add_argument(
        "--data-dir", type=Path, default=None, metavar="DIR",
        help="where to put it (default: $ODEBENCH_DATA_DIR, else ~/.cache/odebench)",
    )  # fmt: skip
    download.add_argument(
        "--force", action="store_true", help="fetch again even if the files are there"
    )


def _publish_arguments(publish: argparse.ArgumentParser) -> None:
    _run_dirs(publish)
    publish.add_argument(
        "--to", type=Path, required=True, metavar="DEST",
        help="the directory that receives one sub-directory per run",
    )  # fmt: skip


def _add_fields(
    parser: argparse.ArgumentParser, config: type, names: Collection[str] | None = None
) -> None:
    """One option per field of the dataclass ``config`` (of ``names``; ``None``: all) from
    the field's metadata ``flag`` (:func:`odebench._io.flag`); none for a field without
    it, nor for one that ``run`` has too (``"shared"``: :func:`_add_common` adds those)."""
    for f in dataclasses.fields(config):
        flag = f.metadata.get("flag")
        if flag is None or flag == "shared" or (names is not None and f.name not in names):
            continue
        keywords = dict(flag)
        option = keywords.pop("option", "--" + f.name.replace("_", "-"))
        if "type" in keywords:
            keywords["type"] = _PARSERS[keywords["type"]]
        resolved = keywords.pop("resolved", None)
        if resolved is not None:
            full, quick = (getattr(c, resolved) for c in (config(), config(quick=True)))
            keywords["help"] += f" (default: {full}; with --quick: {quick})"
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default = None if f.default is dataclasses.MISSING else f.default
        parser.add_argument(option, dest=f.name, required=required, default=default, **keywords)


def _train_arguments(train: argparse.ArgumentParser) -> None:
    from .training import TrainConfig

    _add_fields(train, TrainConfig)
    _add_common(train, TrainConfig, out="runs/MODEL-DATASET")


def _add_common(
    parser: argparse.ArgumentParser, config: Any, *, epochs: str = "", out: str
) -> None:
    """Add the options of ``run`` and ``train`` with the defaults of the dataclass ``config``
    (its class attributes); ``epochs`` and ``out`` name, in the help, what sets the epochs
    and the folder when not given."""
    from .training import MAX_SEED, check_device

    def device(text: str) -> str:
        try:
            check_device(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    add = parser.add_argument
    add("--device", type=device, default=config.device,
        help="auto (cuda when available), cpu, cuda or cuda:N")  # fmt: skip
    add("--epochs", type=_non_negative_int, default=config.epochs, metavar="N",
        help="number of epochs" + (f" (default: {epochs})" if epochs else ""))  # fmt: skip
    add("--data-dir", default=config.data_dir, metavar="DIR",
        help="where the data sets are (default: search $ODEBENCH_DATA_DIR, "
        "~/.cache/odebench, ./data and a few more places; an error names them all)")  # fmt: skip
    add("--out", type=_out_dir, default=None, metavar="DIR",
        help=f"output directory (default: {out})")  # fmt: skip
    seed = _number(int, "a non-negative integer", lambda value: value >= 0, MAX_SEED)
    add("--seed", type=seed, default=config.seed, metavar="S", help="random seed")
    again = parser.add_mutually_exclusive_group()
    again.add_argument(
        "--resume", action="store_true",
        help="continue the run in --out from its checkpoint (same settings but --epochs, "
        "--device, --data-dir, --progress, --compile)",
    )  # fmt: skip
    again.add_argument(
        "--overwrite", action="store_true",
        help="move the run in --out aside to DIR.old-TIME, then start afresh",
    )  # fmt: skip
    add("--progress", action=argparse.BooleanOptionalAction, default=config.progress,
        help="progress bars per epoch on stderr (default: only when stderr is a "
        "terminal)")  # fmt: skip


def _benchmark_arguments(
    parser: argparse.ArgumentParser, config: str, *, plot: bool = False
) -> None:
    """Add a benchmark's options, those of its config, the class ``config`` of
    :mod:`odebench.perf`: ``--quick`` first, then ``--json``, with ``plot`` ``--plot``, then
    the others."""
    from . import perf

    config_class = getattr(perf, config)
    _add_fields(parser, config_class, ["quick"])
    parser.add_argument(
        "--json", metavar="PATH", type=Path, help="write the results here (default: not written)"
    )
    if plot:
        parser.add_argument(
            "--plot", metavar="PATH", type=Path,
            help="draw the results here, as a PNG (default: not drawn)",
        )  # fmt: skip
    _add_fields(parser, config_class, [f.name for f in dataclasses.fields(config_class)][1:])


def _plot_arguments(plot: argparse.ArgumentParser) -> None:
    plot.add_argument("json", metavar="JSON", type=Path, help="the results of `perf solvers`")
    plot.add_argument(
        "--out", metavar="PATH", type=Path, default=None,
        help="the PNG to write (default: JSON with the suffix .png)",
    )  # fmt: skip


def _log(line: str) -> None:
    if os.environ.get("RANK", "0") == "0":
        print(line, file=sys.stderr, flush=True)


def _list(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .experiments import EXPERIMENTS
    from .models import MODELS
    from .training import DATASETS

    def modes(modes: Mapping[str, str]) -> str:
        return "; ".join(f"{mode}: {what}" if what else mode for mode, what in modes.items())

    sections: list[tuple[str, dict[str, str]]] = [
        (
            "Experiments (odebench run NAME [--mode MODE])",
            {n: f"{e.description}\n    modes: {modes(e.modes)}" for n, e in EXPERIMENTS.items()},
        ),
        ("Models (odebench train --model M)", {n: m.description for n, m in MODELS.items()}),
        ("Data sets (--dataset D)", {n: d.description for n, d in DATASETS.items()}),
    ]
    for title, rows in sections:
        print(title)
        width = max(len(n) for n in rows)
        for name, text in rows.items():
            first, *more = text.splitlines()
            print(f"  {name:<{width}}  {first}")
            for line in more:
                print(f"  {'':<{width}}  {line.strip()}")
        print()
    return 0


def _fail(parser: argparse.ArgumentParser, message: str) -> int:
    print(f"{parser.prog}: error: {message}", file=sys.stderr, flush=True)
    return 2


def _guarded(parser: argparse.ArgumentParser, job: Callable[[], object]) -> int:
    """Run a training job; its expected failures become one line and an exit status (2: bad
    input or a file not written, 130: interrupted, 1: training failed)."""
    from ._io import WriteError
    from .training import Interrupted, RunExistsError, TrainingFailedError

    try:
        job()
    except (ValueError, FileNotFoundError, RunExistsError) as exc:
        return _fail(parser, str(exc))
    except WriteError as exc:  # a full disk: each file is written whole or not at all
        where = Path(exc.filename)
        return _fail(
            parser,
            f"cannot write {where.name} in {where.parent} ({exc.strerror or exc}); every file "
            "there is whole, as last written: free some space, then --resume",
        )
    except Interrupted as exc:
        _log(str(exc))
        return 130
    except KeyboardInterrupt:
        _log("interrupted")
        return 130
    except TrainingFailedError as exc:
        print(f"{parser.prog}: training failed: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .experiments import EXPERIMENTS

    if args.name != "all" and args.name not in EXPERIMENTS:
        known = ", ".join(EXPERIMENTS)
        return _fail(parser, f"unknown experiment {args.name!r}; known: {known}, or all")
    if args.name == "all":
        inside = _run_folder_at(args.out) if args.out is not None else None
        if inside is not None:
            where = "a run's folder" if inside == args.out else f"inside the run folder {inside}"
            return _fail(
                parser,
                f"--out {args.out} is {where}; `run all` writes one folder per experiment "
                "under --out: give it a folder of its own (e.g. runs)",
            )
        return _run_all(parser, args, list(EXPERIMENTS))
    return _run_one(parser, args, args.name, args.out or Path("runs") / args.name)


def _run_all(parser: argparse.ArgumentParser, args: argparse.Namespace, names: list[str]) -> int:
    """Run the experiments ``names``, each into its folder of --out; a failure does not stop
    the others (status 1), an interruption stops all (130), naming those not run."""
    failed: list[str] = []
    for i, name in enumerate(names):
        try:
            status = _run_one(parser, args, name, (args.out or Path("runs")) / name)
        except KeyboardInterrupt:  # outside the training's own handling
            status = 130
        if status == 130:
            rest = ", ".join(names[i + 1 :]) or "none"
            also = f"; failed: {', '.join(failed)}" if failed else ""
            _log(f"odebench run all: interrupted in {name}; not run: {rest}{also}")
            return 130
        if status:
            failed.append(name)
    if failed:
        _log(f"odebench run all: failed: {', '.join(failed)}")
    return 1 if failed else 0


#: What marks a run's folder, each pair together (pytest's temporary folders hold a
#: ``.lock`` too).
_RUN_MARKS = (
    ("results.json", "report.md"),
    ("config.json", "checkpoint.pt"),
    ("config.json", ".lock"),
)


def _run_folder_at(path: Path) -> Path | None:
    """The run folder that ``path`` is or lies in, or ``None``."""
    for folder in (path, *path.resolve().parents):
        if any(all((folder / m).is_file() for m in marks) for marks in _RUN_MARKS):
            return folder
    return None


def _run_one(
    parser: argparse.ArgumentParser, args: argparse.Namespace, name: str, out: Path
) -> int:
    from .experiments import RunOptions, run_experiment

    options = _from_args(RunOptions, args, out=out)
    return _guarded(parser, lambda: run_experiment(name, options, log=_log))


def _report(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from ._io import write_text
    from .experiments import combine_reports

    try:
        text = combine_reports(args.run_dirs, args.out)
    except (FileNotFoundError, ValueError) as exc:
        return _fail(parser, str(exc))
    try:
        write_text(args.out, text)
    except OSError as exc:  # a part of the path that is a file, a full disk
        return _fail(parser, f"cannot write --out {args.out}: {exc.strerror or exc}")
    _log(f"wrote {args.out}")
    return 0


def _download(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .data import DataError, download
    from .training import download_root

    root = args.data_dir or download_root()
    _log(f"downloading {args.name} into {root}")
    try:
        where = download(args.name, root, force=args.force)
    except DataError as exc:
        return _fail(parser, str(exc))
    except OSError as exc:  # a folder that cannot be made or written
        return _fail(parser, f"cannot write {exc.filename or root}: {exc.strerror or exc}")
    _log(f"{args.name} is in {where}")
    return 0


def _publish(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .experiments import publish

    names = [d.resolve().name for d in args.run_dirs]
    if len(set(names)) < len(names):
        return _fail(parser, f"two RUN_DIRs share a name ({', '.join(names)}); each needs its own")
    for run_dir, name in zip(args.run_dirs, names):
        try:
            files = publish(run_dir, args.to / name)
        except (FileNotFoundError, ValueError) as exc:
            return _fail(parser, str(exc))
        _log(f"published {run_dir} to {args.to / name} ({len(files)} files)")
    return 0


def _train(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .training import TrainConfig, default_out, train

    def job() -> None:
        options = dict(args.solver_options or ())  # each --solver-option N=V
        config = _from_args(TrainConfig, args, solver_options=options)
        out = args.out or default_out(config)
        train(config, out, resume=args.resume, overwrite=args.overwrite, log=_log)

    return _guarded(parser, job)


def _check_output(
    parser: argparse.ArgumentParser, path: Path, flag: str = "--json", example: str = "solvers.json"
) -> None:
    """Fail before a long run, not after it, if an output file cannot be written."""
    if path.exists() and path.is_dir():
        parser.error(f"{flag} {path}: is a directory; give a file name such as {path}/{example}")
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"{flag} {path}: cannot create the directory {parent}: {exc.strerror}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        parser.error(f"{flag} {path}: not writable")


def _solvers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .perf import LIBRARIES, SolversConfig, format_report, plot_solvers, run_solvers

    unknown = [n for n in args.libraries or () if n not in LIBRARIES]
    if unknown:
        parser.error(f"--libraries: unknown {unknown}; known: {', '.join(LIBRARIES)}")
    try:
        config = _from_args(SolversConfig, args)
    except ValueError as exc:
        parser.error(str(exc))
    return _benchmark(
        parser, args, lambda: run_solvers(config, log=_log), format_report, draw=plot_solvers
    )


def _plot(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .perf import plot_solvers

    out = args.out if args.out is not None else args.json.with_suffix(".png")
    _check_output(parser, out, "--out", "solvers.png")
    try:
        doc = json.loads(args.json.read_text(encoding="utf-8"))
    except OSError as exc:
        parser.error(f"JSON {args.json}: cannot read it: {exc.strerror}")
    except json.JSONDecodeError as exc:
        parser.error(f"JSON {args.json}: not a JSON file ({exc})")
    try:
        plot_solvers(doc, out)
    except ValueError as exc:
        parser.error(f"JSON {args.json}: {exc}")
    _log(f"wrote {out}")
    return 0


def _contnet(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .perf import ContnetConfig, format_contnet_report, run_contnet

    config = _from_args(ContnetConfig, args)
    return _benchmark(parser, args, lambda: run_contnet(config, log=_log), format_contnet_report)


def _benchmark(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    run: Callable[[], JsonObject],
    report: Callable[[JsonObject], str],
    *,
    draw: Callable[[JsonObject, Path], object] | None = None,
) -> int:
    """Run a benchmark: progress on stderr, the report on stdout, the JSON to --json, then
    with ``draw`` the figure to --plot (a failure to draw cannot lose the JSON)."""
    from ._io import write_json

    figure: Path | None = args.plot if draw is not None else None
    if args.json is not None:
        _check_output(parser, args.json)
    if figure is not None:
        _check_output(parser, figure, "--plot", "solvers.png")
    try:
        doc = run()
    except KeyboardInterrupt:
        _log("interrupted")
        return 130
    print(report(doc), flush=True)
    if args.json is not None:
        write_json(args.json, doc)
        _log(f"wrote {args.json}")
    if draw is not None and figure is not None:
        draw(doc, figure)
        _log(f"wrote {figure}")
    return 0


class _Command(NamedTuple):
    """A sub-command: its help line, its description, what adds its arguments, and what runs
    it and returns the exit status (``None``: it has sub-commands)."""

    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    run: Callable[[argparse.ArgumentParser, argparse.Namespace], int] | None = None


#: The sub-commands, in the order ``odebench --help`` lists them.
_COMMANDS = {
    "list": _Command(
        "the experiments, models and data sets, one line each",
        "List the experiments of `odebench run`, the models and the data sets.",
        run=_list,
    ),
    "run": _Command(
        "run an experiment (`odebench list` shows them)",
        "Run an experiment; its files go to --out (default runs/NAME).",
        _run_arguments,
        _run,
    ),
    "report": _Command(
        "combine the reports of experiment runs into one page",
        "Combine the report.md of each RUN_DIR into one Markdown page.",
        _report_arguments,
        _report,
    ),
    "download": _Command(
        "download an image data set from its official mirror, checked by MD5",
        "Download NAME into DIR (default $ODEBENCH_DATA_DIR, else ~/.cache/odebench), "
        "where `odebench run` and `odebench train` look for it.",
        _download_arguments,
        _download,
    ),
    "publish": _Command(
        "copy runs' reports, results and figures (no checkpoints) for committing",
        "Copy report.md, results.json and the figures the report shows of each RUN_DIR "
        "into DEST/<name of RUN_DIR>/, leaving checkpoints and per-epoch files behind: "
        "the docs include reports published into docs/results/. A run is refused unless "
        "it ran at a clean commit of the current history; symbolic links are never copied.",
        _publish_arguments,
        _publish,
    ),
    "train": _Command(
        "train one model on one data set",
        "Train one model on one data set, with a progress bar per epoch on a terminal, "
        "metrics (JSON, CSV, PNG) and a checkpoint after every epoch in --out (default "
        "runs/MODEL-DATASET). Under torchrun the global batch is split over the processes.",
        _train_arguments,
        _train,
    ),
    "perf": _Command("performance benchmarks", "Performance benchmarks."),
}

#: The benchmarks of ``odebench perf``, in the order its help lists them.
_BENCHMARKS = {
    "solvers": _Command(
        "odecore against torchdiffeq (and torchode, torchdyn where installed)",
        "Time odecore against torchdiffeq, and torchode and torchdyn where they import, on "
        "an MLP, two conv fields, Van der Pol and a linear system with dopri5 at 1e-3 and "
        "1e-6 and rk4 with 100 steps: forward, forward + backward by backprop, adjoint, "
        "adjoint with seminorm, checkpointing and the reversible method; NFE, error, "
        "overhead factors and ratios; peak memory in fresh processes; gradient error "
        "against finite differences. "
        "Prints tables; --json writes every figure.",
        functools.partial(_benchmark_arguments, config="SolversConfig", plot=True),
        _solvers,
    ),
    "contnet": _Command(
        "ContinuousNet against its own ResNet export",
        "Time forward + backward and the forward pass of ContinuousNet[Euler, N_t = M] "
        "against its to_resnet() export on the same batch, and of the RK4 manifestation; "
        "memory saved for the backward pass. Prints a table; --json writes every figure.",
        functools.partial(_benchmark_arguments, config="ContnetConfig"),
        _contnet,
    ),
    "plot": _Command(
        "draw the results of `perf solvers --json` as a PNG",
        "Draw the JSON file of `odebench perf solvers --json` as one PNG: the forward and "
        "the forward + backward overhead factors per problem and library, peak memory "
        "against the number of steps, and the gradient error against finite differences.",
        _plot_arguments,
        _plot,
    ),
}


def _add_commands(
    parent: argparse.ArgumentParser,
    table: Mapping[str, _Command],
    *,
    dest: str,
    metavar: str,
    prefix: str,
    commands: Collection[str] | None,
) -> dict[str, argparse.ArgumentParser]:
    """Give ``parent`` the sub-commands of ``table``, with their arguments where ``commands``
    names them (as ``prefix`` + the name; ``None``: all)."""
    subparsers = parent.add_subparsers(dest=dest, metavar=metavar)
    parsers = {}
    for name, command in table.items():
        sub = subparsers.add_parser(
            name, help=command.help, description=command.description, formatter_class=_HelpFormatter
        )
        sub.set_defaults(command_parser=sub, run=command.run)
        if command.arguments is not None and (commands is None or prefix + name in commands):
            command.arguments(sub)
        parsers[name] = sub
    return parsers


def _parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser, where only the sub-commands in ``commands`` (``None``: all) get their
    arguments; its namespace holds the sub-command's ``command_parser`` and ``run``."""
    parser = _Parser(
        prog="odebench",
        description="Benchmarks for continuous-depth networks.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"odebench {__version__}")
    parser.set_defaults(command_parser=parser, run=None)
    parsers = _add_commands(
        parser, _COMMANDS, dest="command", metavar="COMMAND", prefix="", commands=commands
    )
    _add_commands(
        parsers["perf"], _BENCHMARKS, dest="perf_command", metavar="BENCHMARK",
        prefix="perf ", commands=commands,
    )  # fmt: skip
    return parser


def _named(argv: Sequence[str]) -> frozenset[str]:
    """The sub-command that ``argv`` names: its first word that is no option, and after
    ``perf`` the next one.

    Example:
        >>> sorted(_named(["--help"])), sorted(_named(["train", "--model", "odenet"]))
        ([], ['train'])
        >>> sorted(_named(["perf", "solvers", "--quick"]))
        ['perf solvers']
    """
    words = [arg for arg in argv if not arg.startswith("-")]
    if words[:1] == ["perf"]:
        return frozenset([" ".join(words[:2])])
    return frozenset(words[:1])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``odebench`` command line.

    Args:
        argv: the arguments after the program name; default ``sys.argv[1:]``.

    Returns:
        The exit status: 0 on success, 2 for a usage error (argparse's), 130 when
        interrupted.

    Example:
        >>> import odebench
        >>> odebench.main(["perf"])  # no benchmark named: the help goes to stderr
        2
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser(_named(argv)).parse_args(argv)
    if args.run is None:  # no command, or perf without a benchmark: the help, on stderr
        args.command_parser.print_help(sys.stderr)
        return 2
    status: int = args.run(args.command_parser, args)
    return status
