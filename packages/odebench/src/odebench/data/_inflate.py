"""Limits on decompression: what a compressed file of a given size can inflate to."""

from __future__ import annotations

DEFLATE_MAX_RATIO = 1032
"""The most bytes one compressed byte of a deflate stream (gzip, zlib) can inflate to.

A deflate stream codes at best 258 repeated bytes in two bits, so no stream inflates
to more than 1032 times its own length.
"""

CHUNK = 1 << 20
"""Bytes inflated (or copied) at a time."""

TRAILING_SCAN = 1 << 20
"""How far past its declared end a compressed stream is inflated to report its excess."""


def deflate_bound(compressed: int) -> int:
    """The most bytes ``compressed`` bytes of deflate data (with gzip or zlib framing) can hold."""
    return DEFLATE_MAX_RATIO * compressed
