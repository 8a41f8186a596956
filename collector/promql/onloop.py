"""The history as a query's worker thread reads it: every read is made on the event loop.

Why: the loop writes the history (each push and scrape records a column), so
reads must not meet a write half done; a query used to read everything it
needs on the loop before its worker thread evaluated it. A 15-minute range
over 1,200 nodes read for 100-300 ms at a stretch, and every push, scrape and
REST request that came meanwhile waited (the load bench's push p99 was seconds
at 0.2 of its cluster). Here the thread drives the read, and the loop makes it
a slice of about :data:`SLICE` seconds at a time (whole groups: a group of
nodes is read in one go), serving whatever else is due between two slices.

A read made in slices may see a node's newer points than a node read before
it: each node is read whole, as between two queries.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from collector.promql.values import QueryError
from collector.tsdb.series import Columns, Lookup, Matcher, Queryable

SLICE = 0.005
"""Seconds of reading the loop does for a query before it serves anything else."""

WAIT = 120.0
"""Longest a thread waits for the loop to make one slice (a loop that stopped, not a busy one)."""

_T = TypeVar("_T")


class LoopReader:
    """A :class:`Queryable` for worker threads over one on the loop (one reader per query).

    :meth:`cancel` (``canceled``) makes the next slice fail with ``QueryError("canceled")``.
    """

    def __init__(self, storage: Queryable, loop: asyncio.AbstractEventLoop) -> None:
        self._storage = storage
        self._loop = loop
        self.canceled = False

    def cancel(self) -> None:
        """Stop reading: the query's client went away."""
        self.canceled = True

    def select(
        self,
        matchers: Sequence[Matcher],
        start: float,
        end: float,
        newest: bool = False,
        lookup: Lookup | None = None,
    ) -> Iterator[Columns]:
        """The storage's groups, read on the loop a slice at a time (the first slice with
        the selection's start: a small query's read is one trip to the loop, not two)."""

        def first() -> tuple[Iterator[Columns], list[Columns], bool]:
            groups = iter(self._storage.select(matchers, start, end, newest, lookup))
            return groups, *_slice(groups)

        groups, part, done = self._on_loop(first)
        yield from part
        while not done:
            part, done = self._on_loop(lambda: _slice(groups))
            yield from part

    def label_names(self, matchers: Sequence[Matcher], start: float, end: float) -> set[str]:
        """The storage's answer, made on the loop."""
        return self._on_loop(lambda: self._storage.label_names(matchers, start, end))

    def label_values(
        self, name: str, matchers: Sequence[Matcher], start: float, end: float
    ) -> set[str]:
        """The storage's answer, made on the loop."""
        return self._on_loop(lambda: self._storage.label_values(name, matchers, start, end))

    def _on_loop(self, read: Callable[[], _T]) -> _T:
        """Run ``read`` on the loop and return its result here (at once if called on the loop)."""
        if self.canceled:
            raise QueryError("canceled", "query was canceled while reading")
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            return read()
        made: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                made.set_result(read())
            except BaseException as exc:  # handed to the thread, which raises it
                made.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        try:
            return made.result(WAIT)
        except concurrent.futures.TimeoutError:
            raise QueryError("timeout", "the event loop did not read for this query") from None


def _slice(groups: Iterator[Columns]) -> tuple[list[Columns], bool]:
    """The next groups, pulled for about :data:`SLICE` seconds (one at least); whether all are."""
    part: list[Columns] = []
    ends = time.monotonic() + SLICE
    for columns in groups:
        part.append(columns)
        if time.monotonic() >= ends:
            return part, False
    return part, True
