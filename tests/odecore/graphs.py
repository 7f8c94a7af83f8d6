"""The size of an autograd graph: what backprop keeps alive, counted in nodes."""

from __future__ import annotations

import torch


def graph_size(tensor: torch.Tensor) -> int:
    """Number of distinct autograd nodes reachable from ``tensor``."""
    seen, stack = set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)
