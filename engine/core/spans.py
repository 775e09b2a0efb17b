"""Numbers in messages as people read them: block lists ("0..47", "3..5,9,12..13"), counts ("1 thread")."""

from __future__ import annotations

from typing import Sequence


def block_span(blocks: Sequence[int]) -> str:
    """Runs of consecutive numbers as `first..last`, single numbers as they are, comma-separated."""
    blocks = [int(b) for b in blocks]
    if not blocks:
        return "none"
    parts, start = [], blocks[0]
    for prev, cur in zip(blocks, blocks[1:] + [None]):
        if cur is None or cur != prev + 1:
            parts.append(str(start) if start == prev else f"{start}..{prev}")
            start = cur
    return ",".join(parts)


def count_of(n: int, noun: str) -> str:
    """"1 thread", "16 threads": a count with its noun in the right number."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
