"""The one way any surface evaluates PromQL, as Prometheus' ``promql.Engine`` is its.

The Prometheus API, chargeback, the overview's trend and the workloads page all
hand their queries to one :class:`Engine`, so each one gets the same:

- **admission**: at most ``max_concurrency`` works hold a slot at once, the rest
  wait (within their timeout); one identity has at most
  ``max_concurrency_per_identity`` waiting or holding, one more is
  :class:`Unavailable`;
- **limits**: one deadline for the whole work, queue wait included, and a
  sample budget per query (:class:`~.limits.Limits`);
- **the hand-off**: a work plans and evaluates in a worker thread; its reads of
  the history are made on the event loop a slice at a time
  (:mod:`.onloop`), so pushes, scrapes and other requests are served between
  them; a request that goes away cancels its queries at their next check;
- **busy and idle**: events set while some work holds a slot or none does; the
  memory policy (``collector/memory/malloc.py``) and the heap's sweeps (``collector/memory/heap.py``)
  follow them;
- **no cold start**: :meth:`Engine.warm` compiles every compiled loop
  (:mod:`.warmup`) before the collector says it is ready, so a first query
  after a start is as fast as the next.

A *work* is a function of :class:`Queries`, run in the worker thread: it plans
one or more queries through it and shapes its answer there too, so nothing of
a query's size is touched on the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from collector.tsdb.series import Queryable

from . import warmup
from .onloop import LoopReader
from .query import Prepared, prepare_instant, prepare_range
from .values import MatrixColumns, QueryError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """What every query of the engine may use; the collector's ``--query-*`` and ``--lookback``."""

    lookback: float = 300.0
    """Seconds an instant selector looks back for a series' newest point."""
    timeout: float = 120.0
    """Seconds a work may take, waiting for its slot included."""
    max_samples: int = 50_000_000
    """Samples one query may hold (Prometheus' ``--query.max-samples``)."""
    max_concurrency: int = 4
    """Works holding a slot at once."""
    max_concurrency_per_identity: int = 4
    """Works one identity may have waiting or holding a slot at once."""


class Unavailable(QueryError):
    """The identity already has as many works as it may; the API answers 429 ``Retry-After: 1``."""

    def __init__(self, message: str) -> None:
        super().__init__("unavailable", message)


class Queries:
    """What a work plans its queries through, in its worker thread.

    Each query reads through the work's one reader, within what is left of the
    work's deadline, restricted to the reader's ``namespaces`` (None: a cluster
    reader, every series).
    """

    def __init__(
        self,
        reader: Queryable,
        limits: EngineLimits,
        deadline: float,
        namespaces: frozenset[str] | None,
    ) -> None:
        self._reader = reader
        self._limits = limits
        self._deadline = deadline
        self.namespaces = namespaces
        self.made: list[Prepared] = []
        """Every query planned so far: the engine cancels them when the work's caller goes."""

    def instant(self, query: str, at: float) -> Prepared:
        """Plan ``query`` at ``at`` (Unix seconds) and read what it needs."""
        prepared = prepare_instant(
            query,
            at,
            self._reader,
            self._limits.lookback,
            self._left(),
            self._limits.max_samples,
            self.namespaces,
        )
        self.made.append(prepared)
        return prepared

    def range(self, query: str, start: float, end: float, step: float) -> Prepared:
        """Plan a range query over ``start``..``end`` every ``step`` seconds and read what it needs."""
        prepared = prepare_range(
            query,
            start,
            end,
            step,
            self._reader,
            self._limits.lookback,
            self._left(),
            self._limits.max_samples,
            self.namespaces,
        )
        self.made.append(prepared)
        return prepared

    def remaining(self) -> float:
        """Seconds left of the work's deadline, never negative."""
        return max(0.0, self._deadline - time.monotonic())

    def _left(self) -> float:
        left = self.remaining()
        if not left:
            raise QueryError("timeout", "query timed out in expression evaluation")
        return left


class Engine:
    """Admits, limits and runs every PromQL work of the collector over ``storage``.

    Made on the event loop that writes ``storage``; its works run in worker
    threads, reading ``storage`` through that loop.
    """

    def __init__(self, storage: Queryable, limits: EngineLimits | None = None) -> None:
        self.storage = storage
        self.limits = limits or EngineLimits()
        self._slots = asyncio.Semaphore(self.limits.max_concurrency)
        self._works: dict[str, int] = {}
        """Works waiting or holding a slot, by identity."""
        self.evaluating = 0
        """Works holding a slot: reading or being evaluated."""
        self.idle = asyncio.Event()
        """Set while no work holds a slot."""
        self.idle.set()
        self.busy = asyncio.Event()
        """Set while a work holds a slot (the memory policy follows it: collector/memory/malloc.py)."""
        self.warmed = asyncio.Event()
        """Set once :meth:`warm` has compiled the loops: the collector is ready only then."""

    async def warm(self, body: Callable[[MatrixColumns], object]) -> float:
        """Compile every compiled loop in a worker thread (:func:`.warmup.warm`; ``body``
        shapes its range answers as the API does), then set :attr:`warmed`. Seconds it took."""
        stop = threading.Event()
        compiling = _in_thread(partial(warmup.warm, body, stop))
        try:
            seconds = await asyncio.shield(compiling)
        except asyncio.CancelledError:
            stop.set()
            await asyncio.wait([compiling])  # it ends after the query under way
            raise
        self.warmed.set()
        return seconds

    async def run(
        self,
        work: Callable[[Queries], T],
        *,
        identity: str,
        namespaces: frozenset[str] | None = None,
        time_limit: float | None = None,
    ) -> T:
        """Wait for a slot, then run ``work`` in a worker thread and return what it returns.

        ``time_limit`` (seconds) lowers the engine's timeout for this work, never
        raises it; past the lower, ``QueryError("timeout")``. The slot is held until the thread
        is done, even if the caller goes away (its queries are then canceled at
        their next check); so is the work's place among its ``identity``'s.
        """
        allowed = (
            self.limits.timeout if time_limit is None else min(time_limit, self.limits.timeout)
        )
        deadline = time.monotonic() + allowed
        self._admit(identity)
        try:
            if allowed <= 0:
                raise TimeoutError
            async with asyncio.timeout(allowed):  # 3.11 wait_for can swallow a cancel
                await self._slots.acquire()
        except TimeoutError:
            self._leave(identity)
            raise QueryError("timeout", "query timed out in query queue") from None
        except BaseException:  # canceled while waiting
            self._leave(identity)
            raise
        self._hold()
        reader = LoopReader(self.storage, asyncio.get_running_loop())
        queries = Queries(reader, self.limits, deadline, namespaces)

        def in_thread() -> T:
            try:
                return work(queries)
            finally:
                if reader.canceled:  # canceled after its last read: the canceller may not see it
                    _cancel(queries)

        running = _in_thread(in_thread)
        running.add_done_callback(lambda done: self._finished(done, identity))
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            reader.cancel()
            _cancel(queries)
            raise

    def _admit(self, identity: str) -> None:
        held = self._works.get(identity, 0)
        if held >= self.limits.max_concurrency_per_identity:
            raise Unavailable(
                "too many queries of this reader at once "
                f"(at most {self.limits.max_concurrency_per_identity}); retry"
            )
        self._works[identity] = held + 1

    def _hold(self) -> None:
        self.evaluating += 1
        self.idle.clear()
        self.busy.set()

    def _finished(self, work: asyncio.Future[Any], identity: str) -> None:
        """A work's thread is done: free its slot (its outcome went to the caller, if any)."""
        self.evaluating -= 1
        if not self.evaluating:
            self.busy.clear()
            self.idle.set()
        self._slots.release()
        self._leave(identity)
        if not work.cancelled():
            work.exception()  # retrieved here too, for a caller that went away

    def _leave(self, identity: str) -> None:
        left = self._works.pop(identity) - 1
        if left:
            self._works[identity] = left


def _in_thread(call: Callable[[], T]) -> asyncio.Future[T]:
    """``call()`` in a worker thread (with this context's variables, as ``asyncio.to_thread``),
    as the executor's future, which its caller awaits.

    Not a task (``ensure_future(to_thread(...))`` was one): a thread cannot be
    cancelled, so its caller shields this future and waits for it (:meth:`Engine.warm`)
    or its done-callback frees the work's slot (:meth:`Engine.run`) when the thread
    ends, even if the caller went away. Nothing on the loop is left to own; the
    thread is the executor's, which the loop's shutdown waits for. A task here
    could be cancelled by that shutdown while its thread still ran, freeing the slot
    early.
    """
    context = contextvars.copy_context()
    return asyncio.get_running_loop().run_in_executor(None, context.run, call)


def _cancel(queries: Queries) -> None:
    for prepared in queries.made:
        prepared.cancel()
