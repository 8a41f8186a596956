"""Long-lived tasks with an owner, restarted when they crash, reported when they cannot go on.

An owner starts its tasks and, at its end, cancels and awaits them in reverse
order (as aiohttp's ``cleanup_ctx`` does with its contexts): either one
:class:`Supervisor` that owns several tasks, or :func:`owned` for one task and
one block. A crash is logged at once with its traceback. A task that must live
is started again after a backoff (exponential, with jitter, reset by a healthy
run), and every restart is counted; one that crashes past the policy's limit,
or ends while it should run until shutdown, is dead, and :meth:`Supervisor.dead`
names it for the health check. A task started ``once`` has a job with an end (a
warm-up): it ends when its job is done, and is restarted only if it crashes.

Short computations that callers share are :class:`Flights`: one per key at a
time, joined by every caller of that key, and owned too (its owner stops it).
This module is the one place of the product that makes a task: a test
(``tests/integration/test_source_scans.py``) holds every other module to it.

A module of its own in ``core`` so that both programs use it; it imports
neither of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Hashable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar

from core.durations import duration

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """When a crashed task comes back, and when it is given up on.

    The n-th crash in a row waits a random time between half of and all of
    ``first * 2**(n-1)`` seconds, at most ``cap``; a run of ``healthy`` seconds
    or more starts the count again. The crash after ``limit`` restarts in a row
    makes the task dead.
    """

    first: float = 0.1
    cap: float = 30.0
    healthy: float = 60.0
    limit: int = 10

    def delay(self, crashes: int) -> float:
        """The wait before restarting after ``crashes`` crashes in a row."""
        ceiling = min(self.cap, self.first * 2 ** (crashes - 1))
        return random.uniform(ceiling / 2, ceiling)


def _uncounted(kind: str) -> None:
    """No restart counter: for owners that do not export metrics."""


class Supervised:
    """One task of a :class:`Supervisor`: its kind, its name, its restarts, whether it is dead."""

    def __init__(
        self,
        kind: str,
        name: str,
        run: Callable[[], Awaitable[None]],
        restart: bool,
        policy: RestartPolicy,
        restarted: Callable[[str], None],
        once: bool = False,
    ) -> None:
        self.kind = kind
        self.name = name
        self.restarts = 0
        self.dead = False
        self._run = run
        self._restart = restart
        self._once = once
        self._policy = policy
        self._restarted = restarted
        self._task = asyncio.create_task(self._guard(), name=name)

    async def _guard(self) -> None:
        crashes = 0
        while True:
            started = time.monotonic()
            try:
                await self._run()
            except Exception:
                crashes = 1 if time.monotonic() - started >= self._policy.healthy else crashes + 1
                delay = self._next(crashes)
                then = "giving up" if delay is None else f"restarting in {duration(delay)}"
                log.error("task %r crashed; %s", self.name, then, exc_info=True)
            else:
                if self._once:
                    return
                log.error("task %r ended, but it should run until shutdown", self.name)
                delay = None
            if delay is None:
                self.dead = True
                return
            await asyncio.sleep(delay)
            self.restarts += 1
            self._restarted(self.kind)

    def _next(self, crashes: int) -> float | None:
        if not self._restart or crashes > self._policy.limit:
            return None
        return self._policy.delay(crashes)

    def cancel(self) -> None:
        """Ask the task to stop; :meth:`wait` for it."""
        self._task.cancel()

    async def wait(self) -> None:
        """Wait until the task has stopped; the caller's own cancellation still goes through."""
        await asyncio.wait([self._task])
        if self._task.cancelled():
            # A cancelled task keeps its CancelledError until someone asks for it, and
            # the error's traceback holds the frames of _guard (this object, so the task)
            # and of what it ran (a target's scrape loop with its caches): a reference
            # cycle, freed only by a full collection, which collector.memory.heap makes rare. Taken
            # out here, the error goes, and with it all the task held, at once.
            with contextlib.suppress(asyncio.CancelledError):
                self._task.result()


class Supervisor:
    """Owns several tasks; ``restarted(kind)`` is called for every restart (for a counter)."""

    def __init__(
        self,
        restarted: Callable[[str], None] = _uncounted,
        policy: RestartPolicy | None = None,
    ) -> None:
        self._restarted = restarted
        self._policy = policy or RestartPolicy()
        self._tasks: dict[Supervised, None] = {}  # ordered, and quick to remove one from

    def start(
        self,
        kind: str,
        run: Callable[[], Awaitable[None]],
        name: str | None = None,
        restart: bool = True,
        once: bool = False,
    ) -> Supervised:
        """Start ``run()`` as a task; with ``restart``, start it again each time it crashes.

        ``kind`` says what the task is (the restart counter's label); ``name``,
        which defaults to it, tells one task of that kind from another in logs.
        ``once``: the task ends when its job is done, and that is no failure.
        """
        task = Supervised(
            kind, name or kind, run, restart, self._policy, self._restarted, once=once
        )
        self._tasks[task] = None
        return task

    @contextlib.asynccontextmanager
    async def running(
        self, kind: str, run: Callable[[], Awaitable[None]], name: str | None = None
    ) -> AsyncIterator[Supervised]:
        """Start a task that must live for the block, and stop it at the block's end."""
        task = self.start(kind, run, name)
        try:
            yield task
        finally:
            await self.stop([task])

    def dead(self) -> list[str]:
        """The names of the tasks that cannot go on, in start order."""
        # tuple() copies the keys in one step: the agent's health thread calls this
        return [task.name for task in tuple(self._tasks) if task.dead]

    async def stop(self, tasks: Iterable[Supervised]) -> None:
        """Cancel ``tasks`` in this order, wait for them all, and forget them."""
        stopping = list(tasks)
        for task in stopping:
            task.cancel()
            self._tasks.pop(task, None)
        for task in stopping:
            await task.wait()

    async def close(self) -> None:
        """Stop every task, the last started first, each one awaited before the next."""
        for task in reversed(tuple(self._tasks)):
            await self.stop([task])

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


@contextlib.asynccontextmanager
async def owned(coro: Coroutine[Any, Any, None], name: str) -> AsyncIterator[Supervised]:
    """Run a task that should live as long as the block, without restarts.

    A crash is logged at once, with its traceback.
    """
    try:
        async with Supervisor() as tasks:
            yield tasks.start(name, lambda: coro, restart=False)
    finally:
        coro.close()  # a task cancelled before its first step never started the coroutine


class _Flight(Generic[V]):
    """One computation in flight, and how many callers wait for it now."""

    __slots__ = ("task", "waiting")

    def __init__(self, task: asyncio.Task[V]) -> None:
        self.task = task
        self.waiting = 0


class Flights(Generic[K, V]):
    """At most one computation in flight per key, shared by every caller of that key; owned.

    - :meth:`start` returns the key's flight, and starts one, as a task of ``make()``, only
      if none is in flight; it never waits. ``make`` is called at once, on the caller's
      turn: what it does before it returns its coroutine is done before any other caller
      runs (the snapshot a computation is of).
    - :meth:`join` starts or finds the key's flight and waits for its end: every caller of
      one flight gets its one result, or its one error. A caller cancelled while it waits
      leaves alone: the flight goes on, for the others and for what it keeps.
    - A flight is forgotten when it ends, however it ends. Nothing is kept here, so a
      failure is not cached: the next call starts afresh. A result to keep is kept by the
      coroutine itself as its last step, so a caller that finds no flight finds it kept.
    - A failure that reached no caller (a refresh nobody waits for, or every caller gone)
      is logged under ``what``: on one line if it is one of ``expected``, with its
      traceback otherwise. One that reached a caller is that caller's.
    - :meth:`cancel` cancels one key's flight (its key is free at once); :meth:`stop`
      cancels every flight and waits until all have ended, those cancelled before
      included. The owner calls it at its end (a cleanup context); no flight starts
      after it.
    """

    def __init__(self, what: str, expected: tuple[type[Exception], ...] = ()) -> None:
        self.what = what
        self._expected = expected
        self._flying: dict[K, _Flight[V]] = {}
        self._running: dict[_Flight[V], None] = {}  # the cancelled too, until they end
        self._stopped = False

    def flight(self, key: K) -> asyncio.Future[V] | None:
        """The key's flight, None if none is in flight; wait on it, never cancel it."""
        flight = self._flying.get(key)
        return None if flight is None or flight.task.done() else flight.task

    def start(self, key: K, make: Callable[[], Coroutine[Any, Any, V]]) -> asyncio.Future[V]:
        """The key's flight, started as ``make()`` now if none is in flight."""
        return self._start(key, make).task

    async def join(self, key: K, make: Callable[[], Coroutine[Any, Any, V]]) -> V:
        """The result of the key's flight, started as ``make()`` now if none is in flight."""
        flight = self._start(key, make)
        flight.waiting += 1
        try:
            return await asyncio.shield(flight.task)
        finally:
            flight.waiting -= 1

    def cancel(self, key: K) -> None:
        """Cancel the key's flight, if one is in flight; :meth:`stop` still waits for it."""
        flight = self._flying.pop(key, None)
        if flight is not None:
            flight.task.cancel()

    async def stop(self) -> None:
        """Cancel every flight and wait until all have ended; none starts from now on."""
        self._stopped = True
        for flight in self._flying.values():
            flight.task.cancel()  # once: one cancelled already is ending, let it
        tasks = [flight.task for flight in self._running]
        if tasks:
            await asyncio.wait(tasks)

    def _start(self, key: K, make: Callable[[], Coroutine[Any, Any, V]]) -> _Flight[V]:
        flight = self._flying.get(key)
        if flight is not None and not flight.task.done():
            return flight
        if self._stopped:
            raise RuntimeError(f"{self.what}: stopped, no computation starts")
        flight = _Flight(asyncio.create_task(make(), name=self.what))
        self._flying[key] = flight
        self._running[flight] = None
        flight.task.add_done_callback(lambda _: self._ended(key, flight))
        return flight

    def _ended(self, key: K, flight: _Flight[V]) -> None:
        """Forget ``flight``; log its failure if no caller waited for it."""
        if self._flying.get(key) is flight:
            del self._flying[key]
        del self._running[flight]
        task = flight.task
        if task.cancelled():
            with contextlib.suppress(asyncio.CancelledError):
                task.result()  # the error's frames go now, not at a full collection (Supervised.wait)
            return
        error = task.exception()
        if error is None or flight.waiting:
            return
        if isinstance(error, self._expected):
            log.warning("%s failed: %s", self.what, error)
        else:
            log.error("%s failed", self.what, exc_info=error)
