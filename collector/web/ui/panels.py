"""The status page's sections after its sources: discovery, remote write, and any other
part of the collector's (a :class:`Panel` each).

Each is made per request from what its stage already keeps (a discovery
stream's :class:`~collector.views.sourcestate.DiscoveryStream`, a remote-write
destination's :class:`~collector.remote.stats.DestinationStats`): nothing is
kept for the page, and the stages format nothing for it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from collector.remote.writer import RemoteWriter
from collector.views.sourcestate import DiscoveryStream
from collector.web.ui import units


@dataclass(frozen=True, slots=True)
class Panel:
    """A section of the status page: a titled table (remote write, discovery, ...).

    Cells are plain text, escaped when rendered; the cells of a column named
    ``State`` are shown as state badges (``up``, ``failing``, ...). ``empty``
    is said when there are no rows.
    """

    title: str
    columns: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    note: str = ""
    empty: str = "Nothing yet."


def discovery_panel(streams: Sequence[DiscoveryStream]) -> Panel:
    """The discovery streams: each one's state, what it holds and its latest error."""
    rows = [
        (
            s.what,
            "error" if s.error else "synced" if s.synced else "waiting",
            str(s.objects),
            s.error,
        )
        for s in streams
    ]
    return Panel(
        "Discovery",
        ("Stream", "State", "Objects", "Last error"),
        rows,
        "Targets come from these streams; while one fails, its last known targets are kept.",
        "No discovery configured.",
    )


def remote_panel(writer: RemoteWriter) -> Panel:
    """The remote-write destinations, one row each: its URL without credentials, state,
    counts, last success and last error."""
    now = time.time()
    rows = []
    for destination in writer.destinations:
        stats = destination.stats
        totals = stats.totals
        if stats.failing:
            state = "failing"
        elif stats.last_success is None:
            state = "pending"
        else:
            state = "up"
        success = units.ago(stats.last_success, now)
        if stats.last_success is not None:
            success += f" ({units.utc(stats.last_success)})"
        rows.append(
            (
                stats.name,
                state,
                str(totals["pending"]),
                str(totals["sent"]),
                str(totals["dropped"]),
                str(totals["failed"]),
                success,
                stats.last_error,
            )
        )
    return Panel(
        "Remote write",
        (
            "Destination",
            "State",
            "Pending",
            "Sent",
            "Dropped",
            "Failed",
            "Last success",
            "Last error",
        ),
        rows,
        "Samples since start, per receiver. Failing: the latest request failed and is retried"
        " (5xx, 429, no connection) or its samples were refused (4xx); dropped: the queue was full.",
        "No remote-write destination.",
    )
