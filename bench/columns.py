"""Plain-text tables of three columns, as a benchmark run on its own prints its figures."""

from __future__ import annotations

from collections.abc import Sequence


def aligned(rows: Sequence[tuple[str, str, str]]) -> list[str]:
    """The rows as lines: first column left-aligned, second right-aligned, third as is."""
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    return [f"{a:<{width[0]}}  {b:>{width[1]}}  {c}" for a, b, c in rows]
