"""The ``odebench`` command line.

::

    odebench perf solvers [--quick] [--json PATH] [--threads N] [--repeats N]
                          [--problems NAMES] [--libraries NAMES]
                          [--no-memory] [--no-gradients]
    odebench perf contnet [--quick] [--json PATH] [--threads N] [--repeats N]
                          [--batch N] [--steps N]

``python -m odebench`` is the same command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of names")
    return names


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    from .perf._libraries import LIBRARIES
    from .perf._problems import PROBLEMS

    parser = argparse.ArgumentParser(
        prog="odebench",
        description="Benchmarks for continuous-depth networks.",
    )
    parser.add_argument("--version", action="version", version=f"odebench {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
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
        help="small problems, fewer methods and steps, one run each (well under a minute)",
    )
    solvers.add_argument("--json", metavar="PATH", type=Path, help="write the results here")
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
        "--steps", type=_positive_int, default=None, metavar="N",
        help="N_t = M of every block (default 4; --quick: 2)",
    )  # fmt: skip
    return parser, perf


def _check_output(parser: argparse.ArgumentParser, path: Path) -> None:
    """Fail before a long run, not after it, if the JSON file cannot be written."""
    if path.exists() and path.is_dir():
        parser.error(f"--json {path}: is a directory; give a file name such as {path}/solvers.json")
    parent = path.parent if str(path.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--json {path}: cannot create the directory {parent}: {exc.strerror}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        parser.error(f"--json {path}: not writable")


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
    if args.perf_command is None:
        perf_parser.print_help(sys.stderr)
        return 2
    if args.perf_command == "contnet":
        return _contnet(parser, args)
    from .perf import SolversConfig, format_report, run_solvers
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
    if args.json is not None:
        _check_output(parser, args.json)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        doc = run_solvers(config, log=log)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    print(format_report(doc), flush=True)
    if args.json is not None:
        text = json.dumps(doc, indent=2, allow_nan=False)
        args.json.write_text(text + "\n", encoding="utf-8")
        log(f"wrote {args.json}")
    return 0


def _contnet(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .perf import ContnetConfig, format_contnet_report, run_contnet

    config = ContnetConfig(
        quick=args.quick,
        repeats=args.repeats,
        threads=args.threads,
        batch=args.batch,
        n_steps=args.steps,
    )
    if args.json is not None:
        _check_output(parser, args.json)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        doc = run_contnet(config, log=log)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    print(format_contnet_report(doc), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        log(f"wrote {args.json}")
    return 0
