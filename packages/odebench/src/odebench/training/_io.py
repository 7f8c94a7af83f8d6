"""Files of a run, each written atomically: a temporary file, then a rename."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

CHECKPOINT = "checkpoint.pt"
_UMASK = os.umask(0)
os.umask(_UMASK)


def write_atomic(path: Path, write: Callable[[io.BufferedWriter], object]) -> None:
    """Write ``path`` through ``write(file)`` into a temporary file, then rename it.

    A crash at any moment leaves either the old file or the new one, never half of
    one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide the run from others
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` as indented JSON, atomically."""
    write_text(path, json.dumps(value, indent=2, allow_nan=False) + "\n")


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write rows of dicts as CSV (the union of the keys as the header), atomically."""
    fields: list[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    write_text(path, out.getvalue())


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """``torch.save`` atomically."""
    write_atomic(path, lambda f: torch.save(state, f))


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files only, no display), imported late
    so that nothing but plotting pays for matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(path: Path, fig: Any, *, dpi: int = 110) -> None:
    """Render ``fig`` as a PNG, close it, and write it to ``path`` atomically."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    pyplot().close(fig)
    write_atomic(path, lambda f: f.write(buffer.getvalue()))


def plot_curves(path: Path, metrics: Sequence[dict[str, Any]], title: str) -> None:
    """Loss, accuracy and NFE against the epoch, as a PNG."""
    plt = pyplot()
    epochs = [m["epoch"] for m in metrics]
    panels: list[tuple[str, tuple[str, ...]]] = [
        ("loss", ("train_loss", "test_loss")),
        ("accuracy", ("train_acc", "test_acc")),
        ("NFE per batch", ("nfe_forward", "nfe_backward", "test_nfe")),
    ]
    panels = [
        (label, keys)
        for label, keys in panels
        if any(m.get(k) is not None for m in metrics for k in keys)
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (label, keys) in zip(axes[0], panels):
        for key in keys:
            values = [m.get(key) for m in metrics]
            if any(v is not None for v in values):
                ax.plot(epochs, [float("nan") if v is None else v for v in values], "o-", label=key)
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        if label == "loss":
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    save_png(path, fig)
