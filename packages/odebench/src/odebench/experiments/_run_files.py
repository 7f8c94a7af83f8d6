"""What the figures read back from the run folders."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from odelayers import NeuralODE
from torch import Tensor, nn

from .._io import CHECKPOINT
from ..training import load_model
from ._template import Setup


def seed_rows(setup: Setup[Any], run: str) -> list[Sequence[Mapping[str, Any]]]:
    """The rows of ``run``'s ``metrics.json``, a list per seed."""
    return [
        json.loads((setup.run_dir(run, seed) / "metrics.json").read_text(encoding="utf-8"))
        for seed in setup.seeds
    ]


def states_at(node: NeuralODE, ts: list[float], call: Callable[[], Tensor]) -> Tensor:
    """``call()`` without gradients, with ``node`` returning its states at depths ``ts``."""
    saved, node.ts = node.ts, ts
    try:
        with torch.no_grad():
            return call()
    finally:
        node.ts = saved


def first_model(
    setup: Setup[Any], run: str, build: Callable[[], nn.Module] | None = None
) -> nn.Module:
    """The trained model of ``run``'s first seed on the CPU in eval mode, a ``task`` run's
    built by ``build()`` under a forked random state."""
    out = setup.run_dir(run, setup.seeds[0])
    if build is None:
        return load_model(out, "cpu")[0]
    with torch.random.fork_rng(devices=[]):
        model = build()
    state = torch.load(out / CHECKPOINT, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    return model.eval()
