"""Shared set-up for the odebench tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    """Every test draws the same random numbers, whatever ran before it."""
    torch.manual_seed(0)


def write_idx(path: Path, data: torch.Tensor) -> None:
    """An IDX file of unsigned bytes, as MNIST's files are."""
    header = bytes([0, 0, 0x08, data.dim()])
    dims = b"".join(int(n).to_bytes(4, "big") for n in data.shape)
    path.write_bytes(header + dims + data.to(torch.uint8).numpy().tobytes())


@pytest.fixture(scope="session")
def digits(tmp_path_factory):
    """A small data set in MNIST's files: noise images whose class sets a bright row.

    Written once per session; tests only read it.
    """
    gen = torch.Generator().manual_seed(0)
    root = tmp_path_factory.mktemp("digits")
    for split, n in (("train", 640), ("t10k", 256)):
        labels = torch.randint(0, 10, (n,), generator=gen)
        images = torch.randint(0, 60, (n, 28, 28), generator=gen)
        images[torch.arange(n), 2 * labels + 4] = 255
        write_idx(root / f"{split}-images-idx3-ubyte", images)
        write_idx(root / f"{split}-labels-idx1-ubyte", labels)
    return root
