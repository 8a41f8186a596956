"""The remote-write destinations as a section of the status page.

Read per request from each destination's :class:`~collector.remote.stats.DestinationStats`:
nothing is kept for the page.
"""

from __future__ import annotations

import time

from collector.remote.writer import RemoteWriter
from collector.web.status import Panel, age, utc


def remote_panel(writer: RemoteWriter) -> Panel:
    """One row per destination: its URL without credentials, state, counts, last success and error."""
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
        rows.append(
            (
                stats.name,
                state,
                str(totals["pending"]),
                str(totals["sent"]),
                str(totals["dropped"]),
                str(totals["failed"]),
                f"{age(stats.last_success, now)} {utc(stats.last_success)}".strip(),
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
