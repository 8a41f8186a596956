"""Plain-text tables of three columns, as a benchmark run on its own prints its figures."""

from __future__ import annotations

from collections.abc import Sequence

Line = tuple[str, str, str]
"""One row: what, the figure measured, and its goal or peer."""


def aligned(rows: Sequence[Line]) -> list[str]:
    """The rows as lines: first column left-aligned, second right-aligned, third as is."""
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    return [f"{a:<{width[0]}}  {b:>{width[1]}}  {c}" for a, b, c in rows]
