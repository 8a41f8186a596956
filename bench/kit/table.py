"""The summary table of ``python -m bench``: its rows and their markdown."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Row:
    """One line of the summary table."""

    what: str
    measured: str
    goal: str
    peer: str
    ratio: str
    ok: str


def mark(ok: bool | None) -> str:
    """The "meets goal" cell: ``-`` where there is no goal."""
    return "-" if ok is None else ("yes" if ok else "NO")


def rate(value: float) -> str:
    """A rate per second, as the table prints it."""
    return f"{value:,.0f}/s"


def figure(what: str, measured: str, peer: str = "-", ratio: str = "-") -> Row:
    """A row without a goal: a figure shown beside the others, judged by nobody."""
    return Row(what, measured, "-", peer, ratio, "-")


def table(rows_: list[Row]) -> str:
    """A markdown table of ``rows_``."""
    head = Row("benchmark", "measured", "goal", "peer (same run)", "ratio", "meets goal")
    lines = [head, Row(*("---",) * 6), *rows_]
    return "\n".join("| " + " | ".join(asdict(row).values()) + " |" for row in lines)
