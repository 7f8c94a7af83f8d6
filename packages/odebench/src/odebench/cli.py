"""The ``odebench`` command line.

::

    odebench list
    odebench run NAME [--quick] [--device cpu|cuda] [--epochs N] [--data-dir DIR]
                      [--out DIR] [--seed S] [--resume | --overwrite] [--no-progress]
    odebench report RUN_DIR... [--out PATH]
    odebench train --model M --dataset D [--epochs N] [--batch-size N] [--lr LR]
                   [--optimizer sgd|adam] [--method NAME] [--rtol R] [--atol A]
                   [--gradient G] [--n-steps N] [--refine-epochs E,E,...] ...
                   [--resume | --overwrite]
    odebench perf solvers [--quick] [--json PATH] [--plot PATH] [--threads N]
                          [--repeats N] [--problems NAMES] [--libraries NAMES]
                          [--no-memory] [--no-gradients]
    odebench perf plot JSON [--out PATH]
    odebench perf contnet [--quick] [--json PATH] [--threads N] [--repeats N]
                          [--batch N] [--n-steps N]

``python -m odebench`` is the same command, and
``torchrun --nproc_per_node=N -m odebench train ...`` trains on N processes.
Usage errors exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import __version__

#: The largest integer an option takes: torch keeps integers in 64 bits.
_MAX_INT = 2**63 - 1


def _int_at_least(low: int, what: str, high: int = _MAX_INT) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high``, described as ``what`` in errors."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        if value > high:
            raise argparse.ArgumentTypeError(f"expected {what} of at most {high}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "a non-negative integer")


def _float(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def _positive_float(text: str) -> float:
    value = _float(text, "a positive number")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = _float(text, "a finite number >= 0")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def _fraction(text: str) -> float:
    value = _float(text, "a number in [0, 1)")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text}")
    return value


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
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(
                    f"{text}: {parent} is a file, not a folder; give a folder"
                )
            break
    return path


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (``odebench train: error: ...``), status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of names")
    return names


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    from .perf._libraries import LIBRARIES
    from .perf._problems import PROBLEMS

    parser = _Parser(
        prog="odebench",
        description="Benchmarks for continuous-depth networks.",
    )
    parser.add_argument("--version", action="version", version=f"odebench {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_training_commands(commands)
    perf = commands.add_parser(
        "perf", help="performance benchmarks", description="Performance benchmarks."
    )
    perf_commands = perf.add_subparsers(dest="perf_command", metavar="BENCHMARK")
    solvers = perf_commands.add_parser(
        "solvers",
        help="odecore against torchdiffeq (and torchode, torchdyn where installed)",
        description=(
            "Time odecore against torchdiffeq, and torchode and torchdyn where they import, "
            "on an MLP, two conv fields, Van der Pol and a linear system with dopri5 at "
            "1e-3 and 1e-6 and rk4 with 100 steps: forward, forward + backward by backprop, "
            "adjoint, adjoint with seminorm and checkpointing; NFE, error, overhead factors "
            "and ratios; peak memory in fresh processes; gradient error against finite "
            "differences. Prints tables; --json writes every figure."
        ),
    )
    solvers.add_argument(
        "--quick",
        action="store_true",
        help="small problems, fewer methods and steps, one run each (a few minutes)",
    )
    solvers.add_argument("--json", metavar="PATH", type=Path, help="write the results here")
    solvers.add_argument(
        "--plot", metavar="PATH", type=Path, help="draw the results here, as a PNG"
    )
    solvers.add_argument(
        "--threads", type=_positive_int, default=2, metavar="N", help="torch threads (default 2)"
    )
    solvers.add_argument(
        "--repeats",
        type=_positive_int,
        default=None,
        metavar="N",
        help="timed runs per library and configuration (default 5; --quick: 1)",
    )
    solvers.add_argument(
        "--problems",
        type=_names,
        default=None,
        metavar="NAMES",
        help=f"comma-separated subset of: {', '.join(PROBLEMS)}",
    )
    solvers.add_argument(
        "--libraries",
        type=_names,
        default=None,
        metavar="NAMES",
        help=f"comma-separated subset of: {', '.join(LIBRARIES)} (default: all that import)",
    )
    solvers.add_argument(
        "--no-memory", action="store_true", help="skip the peak-memory measurements"
    )
    solvers.add_argument(
        "--no-gradients", action="store_true", help="skip the finite-difference gradient check"
    )
    contnet = perf_commands.add_parser(
        "contnet",
        help="ContinuousNet against its own ResNet export",
        description=(
            "Time forward + backward and the forward pass of ContinuousNet[Euler, N_t = M] "
            "against its to_resnet() export on the same batch, and of the RK4 "
            "manifestation; memory saved for the backward pass. Prints a table; --json "
            "writes every figure."
        ),
    )
    contnet.add_argument("--quick", action="store_true", help="a small batch, seconds")
    contnet.add_argument("--json", metavar="PATH", type=Path, help="write the results here")
    contnet.add_argument(
        "--threads", type=_positive_int, default=2, metavar="N", help="torch threads (default 2)"
    )
    contnet.add_argument(
        "--repeats", type=_positive_int, default=None, metavar="N",
        help="timed runs per model (default 7; --quick: 2)",
    )  # fmt: skip
    contnet.add_argument(
        "--batch", type=_positive_int, default=None, metavar="N",
        help="images per batch (default 32; --quick: 8)",
    )  # fmt: skip
    contnet.add_argument(
        "--n-steps", type=_positive_int, default=None, metavar="N",
        help="N_t = M of every block (default 4; --quick: 2)",
    )  # fmt: skip
    plot = perf_commands.add_parser(
        "plot",
        help="draw the results of `perf solvers --json` as a PNG",
        description=(
            "Draw the JSON file of `odebench perf solvers --json` as one PNG: the forward "
            "and the forward + backward overhead factors per problem and library, peak "
            "memory against the number of steps, and the gradient error against finite "
            "differences."
        ),
    )
    plot.add_argument("json", metavar="JSON", type=Path, help="the results of `perf solvers`")
    plot.add_argument(
        "--out", metavar="PATH", type=Path, default=None,
        help="the PNG to write (default: JSON with the suffix .png)",
    )  # fmt: skip
    return parser, perf


def _add_training_commands(commands: Any) -> None:
    import odecore

    from .data._download import DOWNLOADABLE
    from .experiments import EXPERIMENTS
    from .experiments._registry import DEFAULT_MODE, MODES
    from .models import MODELS
    from .models._build import TRAIN_TOL
    from .training import DATASETS

    commands.add_parser(
        "list",
        help="the experiments, models and data sets, one line each",
        description="List the experiments of `odebench run`, the models and the data sets.",
    )
    run = commands.add_parser(
        "run",
        help="run an experiment (`odebench list` shows them)",
        description="Run an experiment; its files go to --out (default runs/NAME).",
    )
    run.add_argument(
        "name", metavar="NAME",
        help=f"one of: {', '.join(EXPERIMENTS)}; or all, each into --out/NAME (default runs/NAME)",
    )  # fmt: skip
    run.add_argument(
        "--bf16", action="store_true", help="bfloat16 autocast in every training run (GPU)"
    )
    mode = run.add_mutually_exclusive_group()
    mode.add_argument(
        "--mode", choices=MODES, default=None,
        help=f"quick: a smoke test, seconds; standard: real training sized for a 2-core "
        f"CPU, at most about an hour; full: the paper's settings, for a GPU "
        f"(default {DEFAULT_MODE})",
    )  # fmt: skip
    mode.add_argument("--quick", action="store_true", help="the same as --mode quick")
    _add_common(run)
    run.set_defaults(command_parser=run)
    report = commands.add_parser(
        "report",
        help="combine the reports of experiment runs into one page",
        description="Combine the report.md of each RUN_DIR into one Markdown page.",
    )
    report.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    report.add_argument(
        "--out", type=Path, default=Path("reproductions.md"), metavar="PATH",
        help="the page to write (default reproductions.md)",
    )  # fmt: skip
    report.set_defaults(command_parser=report)
    download = commands.add_parser(
        "download",
        help="download an image data set from its official mirror, checked by MD5",
        description=(
            "Download NAME into DIR (default $ODEBENCH_DATA_DIR, else ~/.cache/odebench), "
            "where `odebench run` and `odebench train` look for it."
        ),
    )
    download.add_argument(
        "name", metavar="NAME", choices=DOWNLOADABLE,
        help=f"one of: {', '.join(DOWNLOADABLE)}",
    )  # fmt: skip
    download.add_argument("--data-dir", type=Path, default=None, metavar="DIR")
    download.add_argument(
        "--force", action="store_true", help="fetch again even if the files are there"
    )
    download.set_defaults(command_parser=download)
    publish = commands.add_parser(
        "publish",
        help="copy runs' reports, results and figures (no checkpoints) for committing",
        description=(
            "Copy report.md, results.json and the figures the report shows of each "
            "RUN_DIR into DEST/<name of RUN_DIR>/, leaving checkpoints and per-epoch "
            "files behind: the docs include reports published into docs/results/."
        ),
    )
    publish.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    publish.add_argument(
        "--to", type=Path, required=True, metavar="DEST",
        help="the directory that receives one sub-directory per run",
    )  # fmt: skip
    publish.set_defaults(command_parser=publish)
    train = commands.add_parser(
        "train",
        help="train one model on one data set",
        description=(
            "Train one model on one data set, with a progress bar per epoch, metrics "
            "(JSON, CSV, PNG) and a checkpoint after every epoch in --out (default "
            "runs/MODEL-DATASET). Under torchrun the global batch is split over the "
            "processes."
        ),
    )
    train.add_argument("--model", required=True, metavar="M", help=f"one of: {', '.join(MODELS)}")
    train.add_argument(
        "--dataset", required=True, metavar="D", help=f"one of: {', '.join(DATASETS)}"
    )
    add = train.add_argument
    add("--batch-size", type=_positive_int, default=128, metavar="N", help="global batch (128)")
    add("--eval-batch-size", type=_positive_int, default=1000, metavar="N", help="(1000)")
    add("--lr", type=_positive_float, default=0.1, help="learning rate (0.1)")
    add("--optimizer", choices=("sgd", "adam"), default="sgd", help="(sgd, momentum 0.9)")
    add("--momentum", type=_fraction, default=0.9, help="SGD momentum, in [0, 1) (0.9)")
    add("--weight-decay", type=_non_negative_float, default=0.0, help="L2 penalty (0)")
    add("--milestones", type=_int_list, default=(), metavar="E,E,...",
        help="epochs at which the learning rate is multiplied by --gamma")  # fmt: skip
    add("--gamma", type=_positive_float, default=0.1, help="learning-rate factor (0.1)")
    add("--train-size", type=_positive_int, default=None, metavar="N", help="a seeded subset")
    add("--test-size", type=_positive_int, default=None, metavar="N", help="a seeded subset")
    add("--augment", action="store_true", help="random crops (pad 4); flips on CIFAR")
    add("--activation", default="relu", help="of the vector field: relu (default), softplus, ...")
    add("--method", default=None, metavar="NAME",
        help="ODE method: an adaptive one (dopri5, tsit5, bosh3, ...) or a fixed-step one "
        "with --n-steps (euler, rk4, ...); default dopri5 for ODE models, euler for "
        "ContinuousNet models (odecore's default is dopri5)")  # fmt: skip
    add("--rtol", type=_positive_float, default=TRAIN_TOL,
        help=f"relative tolerance ({TRAIN_TOL:g}, Chen et al.'s MNIST setting; odecore's "
        "default, 1e-7, is for reference accuracy and costs several times more)")  # fmt: skip
    add("--atol", type=_positive_float, default=TRAIN_TOL,
        help=f"absolute tolerance ({TRAIN_TOL:g}; odecore's default is 1e-9)")  # fmt: skip
    add("--gradient", choices=tuple(odecore.GRADIENTS), default="backprop",
        help="gradient method of ODE models (backprop, odecore's default)")  # fmt: skip
    add("--n-steps", type=_positive_int, default=None, metavar="N",
        help="steps of a fixed-step --method; ContinuousNet models: N_t = M of every "
        "block at epoch 0 (8)")  # fmt: skip
    add("--refine-epochs", type=_int_list, default=(), metavar="E,E,...",
        help="ContinuousNet models: epochs at whose start N_t and M double")  # fmt: skip
    add("--bf16", action="store_true", help="bfloat16 autocast")
    add("--compile", action="store_true", help="torch.compile the vector fields (or the model)")
    _add_common(train)
    train.set_defaults(command_parser=train)


def _add_common(parser: argparse.ArgumentParser) -> None:
    from .training._config import MAX_SEED

    add = parser.add_argument
    add("--device", default="auto", help="auto (default: cuda when available), cpu, cuda")
    add("--epochs", type=_non_negative_int, default=None, metavar="N", help="number of epochs")
    add("--data-dir", default=None, metavar="DIR", help="where the data sets are")
    add("--out", type=_out_dir, default=None, metavar="DIR", help="output directory")
    seed = _int_at_least(0, "a non-negative integer", high=MAX_SEED)
    add("--seed", type=seed, default=0, metavar="S", help="random seed (0)")
    again = parser.add_mutually_exclusive_group()
    again.add_argument(
        "--resume", action="store_true",
        help="continue the run in --out from its checkpoint (same settings but --epochs, "
        "--device, --data-dir, --no-progress, --compile)",
    )  # fmt: skip
    again.add_argument(
        "--overwrite", action="store_true",
        help="move the run in --out aside to DIR.old-TIME, then start afresh",
    )  # fmt: skip
    add("--no-progress", action="store_true", help="no progress bars")


def _log(line: str) -> None:
    if os.environ.get("RANK", "0") == "0":
        print(line, file=sys.stderr, flush=True)


def _list() -> int:
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
    """Run a training job; turn its expected failures into an exit status and one line.

    2: bad input (unknown name, missing data, an existing run, a folder in use, a
    resume with changed settings, a bad checkpoint); 130: interrupted
    (after a checkpoint, or by a second Ctrl-C without one); 1: training failed.
    """
    from .training import Interrupted, RunExistsError, TrainingFailedError

    try:
        job()
    except (ValueError, FileNotFoundError, RunExistsError) as exc:
        return _fail(parser, str(exc))
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
        failed = [
            name
            for name in EXPERIMENTS
            if _run_one(parser, args, name, (args.out or Path("runs")) / name)
        ]
        if failed:
            _log(f"odebench run all: failed: {', '.join(failed)}")
        return 1 if failed else 0
    return _run_one(parser, args, args.name, args.out or Path("runs") / args.name)


def _run_one(
    parser: argparse.ArgumentParser, args: argparse.Namespace, name: str, out: Path
) -> int:
    from .experiments import RunOptions, run_experiment

    options = RunOptions(
        out=out,
        quick=args.quick,
        mode=args.mode,
        device=args.device,
        epochs=args.epochs,
        data_dir=args.data_dir,
        seed=args.seed,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        bf16=args.bf16,
    )
    return _guarded(parser, lambda: run_experiment(name, options, log=_log))


def _report(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .experiments import combine_reports
    from .training._io import write_text

    try:
        text = combine_reports(args.run_dirs, args.out)
    except FileNotFoundError as exc:
        return _fail(parser, str(exc))
    write_text(args.out, text)
    _log(f"wrote {args.out}")
    return 0


def _download(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .data import DataError, download
    from .training._data import download_root

    root = args.data_dir or download_root()
    _log(f"downloading {args.name} into {root}")
    try:
        where = download(args.name, root, force=args.force)
    except DataError as exc:
        return _fail(parser, str(exc))
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
        config = TrainConfig(
            model=args.model,
            dataset=args.dataset,
            epochs=1 if args.epochs is None else args.epochs,
            batch_size=args.batch_size,
            eval_batch_size=args.eval_batch_size,
            lr=args.lr,
            optimizer=args.optimizer,
            momentum=args.momentum,
            weight_decay=args.weight_decay,
            milestones=args.milestones,
            gamma=args.gamma,
            seed=args.seed,
            device=args.device,
            data_dir=args.data_dir,
            train_size=args.train_size,
            test_size=args.test_size,
            augment=args.augment,
            activation=args.activation,
            method=args.method,
            rtol=args.rtol,
            atol=args.atol,
            gradient=args.gradient,
            n_steps=args.n_steps,
            refine_epochs=args.refine_epochs,
            bf16=args.bf16,
            compile=args.compile,
            progress=not args.no_progress,
        )
        out = args.out or default_out(config)
        train(config, out, resume=args.resume, overwrite=args.overwrite, log=_log)

    return _guarded(parser, job)


def _check_output(
    parser: argparse.ArgumentParser, path: Path, flag: str = "--json", example: str = "solvers.json"
) -> None:
    """Fail before a long run, not after it, if an output file cannot be written."""
    if path.exists() and path.is_dir():
        parser.error(f"{flag} {path}: is a directory; give a file name such as {path}/{example}")
    parent = path.parent if str(path.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"{flag} {path}: cannot create the directory {parent}: {exc.strerror}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        parser.error(f"{flag} {path}: not writable")


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
    parser, perf_parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.command == "list":
        return _list()
    if args.command == "report":
        return _report(args.command_parser, args)
    if args.command == "publish":
        return _publish(args.command_parser, args)
    if args.command == "download":
        return _download(args.command_parser, args)
    if args.command in ("run", "train"):
        sub = args.command_parser
        return _run(sub, args) if args.command == "run" else _train(sub, args)
    if args.perf_command is None:
        perf_parser.print_help(sys.stderr)
        return 2
    if args.perf_command == "contnet":
        return _contnet(parser, args)
    if args.perf_command == "plot":
        return _plot(parser, args)
    from .perf import SolversConfig, format_report, plot_solvers, run_solvers
    from .perf._libraries import LIBRARIES

    if args.libraries is not None:
        unknown = [n for n in args.libraries if n not in LIBRARIES]
        if unknown:
            parser.error(f"--libraries: unknown {unknown}; known: {', '.join(LIBRARIES)}")
    try:
        config = SolversConfig(
            quick=args.quick,
            repeats=args.repeats,
            threads=args.threads,
            problems=args.problems,
            libraries=args.libraries,
            memory=not args.no_memory,
            gradients=not args.no_gradients,
        )
    except ValueError as exc:
        parser.error(str(exc))
    return _benchmark(
        parser, args, lambda log: run_solvers(config, log=log), format_report, draw=plot_solvers
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
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _contnet(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .perf import ContnetConfig, format_contnet_report, run_contnet

    config = ContnetConfig(
        quick=args.quick,
        repeats=args.repeats,
        threads=args.threads,
        batch=args.batch,
        n_steps=args.n_steps,
    )
    return _benchmark(parser, args, lambda log: run_contnet(config, log=log), format_contnet_report)


def _benchmark(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    run: Callable[[Callable[[str], None]], dict[str, Any]],
    report: Callable[[dict[str, Any]], str],
    *,
    draw: Callable[[dict[str, Any], Path], object] | None = None,
) -> int:
    """Run a benchmark: progress on stderr, the report on stdout, the JSON to --json,
    and with ``draw`` the figure to --plot (after the JSON, which a failure to draw
    cannot lose)."""
    figure: Path | None = args.plot if draw is not None else None
    if args.json is not None:
        _check_output(parser, args.json)
    if figure is not None:
        _check_output(parser, figure, "--plot", "solvers.png")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        doc = run(log)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    print(report(doc), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        log(f"wrote {args.json}")
    if draw is not None and figure is not None:
        draw(doc, figure)
        log(f"wrote {figure}")
    return 0
