"""Tables and result files: the summary rows of ``python -m bench``, and the one writer of ``bench/results/``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"
"""One current result per bench: each run overwrites its own stem."""


def write_result(stem: str, markdown: str, document: Any = None) -> Path:
    """Overwrite ``<stem>.md`` and, given a ``document``, ``<stem>.json`` in :data:`RESULTS`."""
    RESULTS.mkdir(exist_ok=True)
    if document is not None:
        (RESULTS / f"{stem}.json").write_text(json.dumps(document, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text(markdown)
    return RESULTS / f"{stem}.md"


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
