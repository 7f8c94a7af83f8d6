"""The registry of experiments that ``odebench run NAME`` runs."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from .._io import CHECKPOINT, JsonObject
from .._provenance import publishable

Log = Callable[[str], None]

MODES = ("quick", "standard", "full")
"""The modes of every experiment: ``quick``, a smoke test for CI (never published);
``standard``, real training sized for a 2-core CPU; ``full``, the paper's settings."""
DEFAULT_MODE = "standard"
"""The mode ``odebench run NAME`` runs without ``--mode`` or ``--quick``."""


@dataclass(frozen=True)
class RunOptions:
    """The options every experiment takes (``odebench run NAME [options]``).

    Args:
        out: the output directory of the experiment.
        quick: the mode ``"quick"``.
        mode: the mode by name, one of :data:`~odebench.experiments.MODES`; ``None``:
            ``"quick"`` with ``quick``, else :data:`~odebench.experiments.DEFAULT_MODE`.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        epochs: override the experiment's number of epochs.
        data_dir: where the image data sets are.
        seed: the seed of every run.
        resume: continue the runs from their checkpoints.
        overwrite: move what ``out`` holds aside to ``<out>.old-<time>`` first.
        progress: a progress bar per epoch on stderr: ``None``: only on a terminal.
        bf16: bfloat16 autocast in every training run (its loss, for a run's own task).

    Example:
        >>> RunOptions(out=Path("runs/quickstart")).mode_name
        'standard'
    """

    out: Path
    quick: bool = False
    mode: str | None = None
    device: str = "auto"
    epochs: int | None = None
    data_dir: str | None = None
    seed: int = 0
    resume: bool = False
    overwrite: bool = False
    progress: bool | None = None
    bf16: bool = False

    def __post_init__(self) -> None:
        from ..training import check_device

        check_device(self.device)
        if self.quick and self.mode not in (None, "quick"):
            raise ValueError(f"`quick` runs the mode 'quick', not `mode` {self.mode!r}; give one.")

    @property
    def mode_name(self) -> str:
        """The mode that runs (see ``mode``)."""
        if self.mode is not None:
            return self.mode
        return "quick" if self.quick else DEFAULT_MODE


@dataclass(frozen=True)
class Experiment:
    """A named experiment: a one-line description, the function that runs it, its modes.

    ``run(options, log)`` writes its files under ``options.out`` and returns what it
    writes to ``results.json``; ``modes`` maps each mode to what it runs, in words.
    """

    name: str
    description: str
    run: Callable[[RunOptions, Log], JsonObject]
    modes: Mapping[str, str] = field(default_factory=lambda: dict.fromkeys(MODES, ""))


_REGISTRY: dict[str, Experiment] = {}
EXPERIMENTS: Mapping[str, Experiment] = MappingProxyType(_REGISTRY)


def register(name: str, description: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: add ``fn(options, log) -> dict`` to :data:`EXPERIMENTS` as ``name``."""

    def wrap(fn: Callable[[RunOptions, Log], JsonObject]) -> Callable[..., Any]:
        _REGISTRY[name] = Experiment(name, description, fn)
        return fn

    return wrap


def run_experiment(name: str, options: RunOptions, log: Log = print) -> JsonObject:
    """Run the experiment ``name`` with ``options``, holding the lock of ``options.out``.

    A folder that holds anything is refused unless ``options.resume`` or
    ``options.overwrite``; ``options.resume`` refuses a folder that holds another
    experiment or a run of ``odebench train``, whose files the run would replace.

    Raises:
        ValueError: an unknown name or mode (the message lists the known ones).
        odebench.training.RunExistsError: ``options.out`` holds a run and neither flag
            is set, or another process holds its lock (a ``FileExistsError``); or,
            with ``options.resume``, holds a run of something else.
    """
    from ..training import RunFolder

    if name not in EXPERIMENTS:
        raise ValueError(f"Unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}.")
    modes = EXPERIMENTS[name].modes
    if options.mode_name not in modes:
        raise ValueError(
            f"{name} has no mode {options.mode_name!r}; its modes: {', '.join(modes)}."
        )
    folder = RunFolder(options.out)
    try:
        if os.environ.get("RANK", "0") == "0":
            folder.acquire(log)
            folder.prepare(resume=options.resume, overwrite=options.overwrite, log=log)
            if options.resume:
                _check_same_experiment(name, options.out)
        return EXPERIMENTS[name].run(options, log)
    finally:
        folder.release()


def _check_same_experiment(name: str, out: Path) -> None:
    """Refuse to resume ``name`` in ``out`` when ``out`` holds a run of something else."""
    from ..training import RunExistsError

    results = out / "results.json"
    if (out / "config.json").is_file():
        what = "a run of `odebench train`"
    else:
        other = read_results(results).get("experiment", name) if results.is_file() else name
        if other == name:
            return
        what = f"a run of {other!r}"
    raise RunExistsError(
        f"{out} holds {what}, not of {name!r}, whose files resuming {name} there would "
        "replace; resume it in its own folder, or pass --overwrite to move it aside"
    )


@contextlib.contextmanager
def one_thread(enabled: bool) -> Iterator[int]:
    """One torch thread while ``enabled``, the previous count afterwards; yields the count."""
    threads = torch.get_num_threads()
    if enabled:
        torch.set_num_threads(1)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)


def command(name: str, options: RunOptions) -> str:
    """The ``odebench run`` command line that reproduces a run with ``options``."""
    mode = options.mode_name
    flags = {
        "--quick": mode == "quick",
        f"--mode {mode}": mode not in ("quick", DEFAULT_MODE),
        f"--epochs {options.epochs}": options.epochs is not None,
        "--bf16": options.bf16,
        f"--seed {options.seed}": options.seed != 0,
    }
    return " ".join([f"odebench run {name}", *(flag for flag, given in flags.items() if given)])


def combine_reports(run_dirs: list[Path], out: Path) -> str:
    """One Markdown page from the ``report.md`` of several experiment directories, each
    a section, its image links relative to ``out``'s directory.

    Raises:
        FileNotFoundError: a directory without ``report.md``.
        ValueError: two directories share a name (the anchor of their sections), or
            ``out`` is a folder, or a file other than such a page (a run's ``report.md``,
            say), which writing the page would replace.
    """
    missing = [str(d) for d in run_dirs if not (d / "report.md").exists()]
    if missing:
        raise FileNotFoundError(
            f"no report.md in {', '.join(missing)}; run the experiment there first"
        )
    names = [d.resolve().name for d in run_dirs]
    if len(set(names)) < len(names):  # each section's anchor is its folder's name
        raise ValueError(f"two RUN_DIRs share a name ({', '.join(names)}); each needs its own")
    title = "# Reproductions"
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; give the page's file, such as {out}/page.md")
    if out.is_file() and read_text(out).split("\n", 1)[0] != title:
        raise ValueError(
            f"--out {out} holds something other than a page of `odebench report`, which "
            "writing the page would replace; choose another --out"
        )
    parts = [title, ""]
    parts += [f"- [{d.name}](#{d.name})" for d in run_dirs]
    for d in run_dirs:
        rel = Path(os.path.relpath(d, out.parent)).as_posix()
        parts += ["", f'<a id="{d.name}"></a>', ""]
        for line in read_text(d / "report.md").splitlines():
            if line.startswith("#"):
                line = "#" + line
            line = re.sub(r"(!\[[^\]]*\]\()", rf"\g<1>{rel}/", line)  # a figure's path only
            parts.append(line)
    return "\n".join(parts) + "\n"


#: The figures a report shows: ``![alt](path)`` with a relative path.
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def publish(run_dir: Path, dest: Path) -> list[Path]:
    """Copy what a run's report shows into ``dest``: the light files worth committing.

    That is ``report.md``, ``results.json`` and every figure ``report.md`` links to, at
    the same relative paths, for a run tied to a clean commit of the current history
    (the rules: the design notes). What an earlier publish wrote to ``dest`` goes first.

    Returns:
        The files written, relative to ``dest``.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``report.md`` or ``results.json``, or the
            report links to a figure that is not there.
        ValueError: ``dest`` or a folder above it is a file, a file to copy is a
            symbolic link or outside ``run_dir``, ``dest`` is ``run_dir`` or holds it,
            ``results.json`` is not a JSON object,
            the run is quick or not publishable, ``dest`` is named for another
            experiment, or ``dest`` is a non-empty directory without a published report
            (a run's folder, say).

    Example:
        A run made at the checkout's ``HEAD`` from a clean tree:

        >>> import subprocess, tempfile
        >>> from odebench._provenance import repository
        >>> head = subprocess.run(
        ...     ["git", "rev-parse", "HEAD"], cwd=repository(), capture_output=True, text=True
        ... ).stdout.strip()
        >>> run = Path(tempfile.mkdtemp())
        >>> _ = (run / "report.md").write_text("# Run\\n\\n![loss](loss.png)\\n")
        >>> provenance = {"commit": head, "dirty": False}
        >>> _ = (run / "results.json").write_text(json.dumps({"provenance": provenance}))
        >>> _ = (run / "loss.png").write_bytes(b"png")
        >>> _ = (run / "checkpoint.pt").write_bytes(b"weights")
        >>> [str(p) for p in publish(run, run.parent / (run.name + "-published"))]
        ['report.md', 'results.json', 'loss.png']
    """
    run_dir, dest = Path(run_dir), Path(dest)
    for folder in (dest, *dest.parents):
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{folder} is a file; --to needs a folder")
    if run_dir.resolve().is_relative_to(dest.resolve()):
        raise ValueError(
            f"{dest} is the run's own folder {run_dir} or holds it, whose report, results "
            "and figures publishing there would delete; publish it to another folder"
        )
    for name in ("report.md", "results.json"):
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"no {name} in {run_dir}; run the experiment there first")
        _refuse_links(run_dir, Path(name))
    doc = read_results(run_dir / "results.json")
    if doc.get("mode") == "quick":
        raise ValueError(
            f"{run_dir} holds a quick run, a smoke test and not a result; publish a standard "
            "or full run (`odebench run NAME`)"
        )
    if dest.name in EXPERIMENTS and doc.get("experiment") != dest.name:
        raise ValueError(
            f"{run_dir} holds a run of {doc.get('experiment')!r}, not of {dest.name!r}, "
            f"which the docs would show {dest} as; publish it to a folder of its own name"
        )
    from ..training import load_checkpoint

    trainings = [
        (str(path.parent), read_results(path))
        for path in sorted(run_dir.rglob("results.json"))
        if path.parent != run_dir and (path.parent / "config.json").is_file()
    ]
    for path in sorted(run_dir.rglob(CHECKPOINT)):  # a task's training: in its checkpoint
        if path.parent != run_dir and not (path.parent / "config.json").is_file():
            segments = load_checkpoint(path, torch.device("cpu")).get("segments")
            trainings.append((str(path.parent), {"provenance": {"segments": segments}}))
    why = publishable(doc, str(run_dir), trainings)
    if why is not None:
        raise ValueError(why)
    report = read_text(run_dir / "report.md")
    files = [Path("report.md"), Path("results.json")]
    root = run_dir.resolve()
    for link in dict.fromkeys(_IMAGE.findall(report)):
        if Path(link).is_absolute() or os.path.normpath(link).split(os.sep)[0] == os.pardir:
            raise ValueError(f"{run_dir / 'report.md'} links to {link}, outside {run_dir}")
        _refuse_links(run_dir, Path(link))
        source = (run_dir / link).resolve()
        if not source.is_relative_to(root):
            raise ValueError(f"{run_dir / 'report.md'} links to {link}, outside {run_dir}")
        if not source.is_file():
            raise FileNotFoundError(f"{run_dir / 'report.md'} links to {link}, which is missing")
        files.append(source.relative_to(root))
    for file in files:  # writing through a link in dest would write outside it
        _refuse_links(dest, file)
    _unpublish(dest)
    for file in files:
        (dest / file).parent.mkdir(parents=True, exist_ok=True)
        (dest / file).write_bytes((run_dir / file).read_bytes())
    return files


def _refuse_links(run_dir: Path, path: Path) -> None:
    """Refuse ``run_dir / path`` when it, or a folder on the way to it, is a symbolic link."""
    here = run_dir
    for part in path.parts:
        here = here / part
        if here.is_symlink():
            raise ValueError(
                f"{run_dir / path} is not a regular file: {here} is a symbolic link; "
                "publish copies only the files inside the run folder"
            )


def read_text(path: Path) -> str:
    """The text of a UTF-8 file; a ``ValueError`` naming the first byte that is not."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise ValueError(
            f"{path} is not UTF-8 text (byte {byte:#04x} at offset {exc.start}); save it as UTF-8"
        ) from None


def read_results(path: Path) -> dict[str, Any]:
    """The object a ``results.json`` holds; a ``ValueError`` naming the file if it holds none."""
    try:
        doc = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(
            f"{path} holds a JSON {type(doc).__name__}, not the object of an experiment's results"
        )
    return doc


def _unpublish(dest: Path) -> None:
    """Remove what an earlier :func:`publish` wrote to ``dest`` (and nothing else)."""
    if not dest.exists() or not any(dest.iterdir()):
        return
    report = dest / "report.md"
    if not report.is_file():
        raise ValueError(f"{dest} is not empty and holds no published report.md; choose another")
    if next(dest.rglob(CHECKPOINT), None) is not None:  # publish copies none
        raise ValueError(f"{dest} holds a run, not a published report; choose another")
    root = dest.resolve()
    old = [(dest / link).resolve() for link in _IMAGE.findall(read_text(report))]
    for path in [*old, report.resolve(), root / "results.json"]:
        if not path.is_relative_to(root):
            continue  # a hand-edited link out of dest: never delete outside it
        path.unlink(missing_ok=True)
        for parent in path.parents:
            if parent == root or not parent.is_relative_to(root) or any(parent.iterdir()):
                break
            parent.rmdir()
