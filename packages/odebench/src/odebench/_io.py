"""Files of a run, each written atomically: a temporary file, then a rename."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

import torch


def whole(least: int) -> Callable[[object], bool]:
    """Whether a value is an integer (not a bool) of at least ``least``."""
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and value >= least


#: The parsers of the command line's values, by the names :func:`flag` takes
#: (``odebench.cli`` holds them).
Parse = Literal[
    "positive_int", "positive_float", "non_negative_float", "fraction", "int_list", "option",
    "names",
]  # fmt: skip


def flag(
    help: str,
    *,
    metavar: str | None = None,
    type: Parse | None = None,
    choices: tuple[str, ...] | None = None,
    action: Literal["store_true", "store_false", "append"] | None = None,
    option: str | None = None,
    resolved: str | None = None,
) -> Mapping[str, Any]:
    """The metadata of a config's field that is an option of an ``odebench`` command:
    ``add_argument``'s keywords, an ``option`` of another name than ``--FIELD-NAME``, and
    ``resolved``, the property whose value, without and with ``--quick``, the help gives as
    the default."""
    keywords = {"help": help, "metavar": metavar, "type": type, "choices": choices,
                "action": action, "option": option, "resolved": resolved}  # fmt: skip
    return MappingProxyType({"flag": {k: v for k, v in keywords.items() if v is not None}})


CHECKPOINT = "checkpoint.pt"

Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"
"""A value that JSON writes as it is: what a results file or a row of metrics holds."""
JsonObject: TypeAlias = "dict[str, Json]"
"""A JSON object: a document or a record as it is written, keys and values checked by mypy."""


class WriteError(OSError):
    """A file of a run could not be written (a full disk, say); the old one is kept.

    ``filename`` is the file; ``errno`` and ``strerror`` are the system's.
    """


_UMASK = os.umask(0)
os.umask(_UMASK)


def write_atomic(path: Path, write: Callable[[io.BufferedWriter], object]) -> None:
    """Write ``path`` through ``write(file)`` into a temporary file, then rename it: a crash
    leaves the old file or the new one, never half of one.

    Raises:
        WriteError: the file cannot be written (a full disk, say); ``path`` is as it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise WriteError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide the run from others
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise WriteError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` as indented JSON, atomically."""
    write_text(path, json.dumps(value, indent=2, allow_nan=False) + "\n")


def write_csv(path: Path, rows: Sequence[JsonObject]) -> None:
    """Write rows of dicts as CSV (the union of the keys as the header, ``None`` and a
    missing key as an empty cell), atomically."""
    fields = dict.fromkeys(key for row in rows for key in row)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(fields), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, out.getvalue())


def save_checkpoint(path: Path, state: Mapping[str, object]) -> None:
    """``torch.save`` atomically, unless a weight (of ``state["model"]``) is not finite.

    Raises:
        ValueError: a weight is NaN or infinite; the file in ``path`` is kept.
    """
    model = state.get("model")
    for name, tensor in model.items() if isinstance(model, Mapping) else ():
        if tensor.is_floating_point() and not tensor.isfinite().all():
            raise ValueError(
                f"{path}: not saved: the weight {name} is not finite; the checkpoint there is kept"
            )
    write_atomic(path, lambda f: torch.save(state, f))


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files only, no display), imported late
    so that nothing but plotting pays for matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(path: Path, fig: Any, *, dpi: int = 110, tight: bool = True) -> None:
    """Lay ``fig`` out tight (unless ``tight`` is false: one laid out already, or with a
    colour bar), render it as a PNG, close it, and write it to ``path`` atomically."""
    if tight:
        fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    pyplot().close(fig)
    write_atomic(path, lambda f: f.write(buffer.getvalue()))


#: Words for the metric keys of a run (``metrics.json``), for axes and legends.
METRIC_LABELS: dict[str, str] = {
    "epoch": "epoch",
    "lr": "learning rate",
    "train_loss": "train loss",
    "test_loss": "test loss",
    "train_acc": "train accuracy (%)",
    "test_acc": "test accuracy (%)",
    "nfe_forward": "function evaluations (forward)",
    "nfe_backward": "function evaluations (backward)",
    "test_nfe": "function evaluations (test)",
    "images_per_second": "images per second",
    "epoch_seconds": "seconds per epoch",
    "n_steps": "steps N_t = M",
    "parameters": "parameters",
}

#: The loss of a run (``TrainConfig.loss``) in words.
LOSS_LABELS = {"cross_entropy": "cross-entropy loss", "mse": "mean squared error"}


def metric_label(key: str) -> str:
    """A metric key in words, by :data:`METRIC_LABELS`, else with spaces for underscores.

    Example:
        >>> metric_label("nfe_forward"), metric_label("grad_norm")
        ('function evaluations (forward)', 'grad norm')
    """
    return METRIC_LABELS.get(key, key.replace("_", " "))


def text_parts(text: str) -> tuple[str, dict[str, str]]:
    r"""A text file beside the code, split at its ``<!-- part: NAME -->`` lines: the text
    before the first, and each part by name (blank lines around them dropped).

    Example:
        >>> text_parts("intro\n<!-- part: found -->\nfound it\n\n<!-- part: lost -->\nlost\n")
        ('intro\n', {'found': 'found it', 'lost': 'lost'})
    """
    head, *pieces = re.split(r"^<!-- part: (\w+) -->\n", text, flags=re.MULTILINE)
    return head, {name: part.strip("\n") for name, part in zip(pieces[::2], pieces[1::2])}


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table: the header, its rule, then a line per row (``|`` in a cell escaped).

    Example:
        >>> print(markdown_table(["model", "error"], [["ResNet", "0.41%"], ["a|b", ""]]))
        | model | error |
        |---|---|
        | ResNet | 0.41% |
        | a\\|b | |
    """
    lines = [_markdown_row(header), "|" + "---|" * len(header)]
    return "\n".join(lines + [_markdown_row(row) for row in rows])


def _markdown_row(cells: Sequence[object]) -> str:
    texts = (str(c).replace("|", "\\|") for c in cells)
    return "|" + "|".join(f" {t} " if t else " " for t in texts) + "|"


_NUMBER = re.compile(r"^([-+]?[\d.]|–$|$)")
"""A cell that a terminal table aligns to the right: a number, or a missing one."""


def text_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """The same table for a terminal: columns aligned, numbers (or en dashes) to the right
    except in the first column, a rule below the header.

    Example:
        >>> print(text_table(["model", "error"], [["ResNet", "0.41%"], ["ODE-Net", "0.42%"]]))
        model    error
        --------------
        ResNet   0.41%
        ODE-Net  0.42%
    """
    table = [[str(c) for c in header], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[k]) for row in table) for k in range(len(header))]
    numeric = [
        k > 0 and all(_NUMBER.match(row[k]) for row in table[1:]) for k in range(len(header))
    ]
    text = [
        "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(row, widths, numeric)).rstrip()
        for row in table
    ]
    return "\n".join([text[0], "-" * len(text[0]), *text[1:]])
