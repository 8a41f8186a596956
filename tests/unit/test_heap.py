"""The heap policy: long-lived objects leave the cyclic collector's walks; cycles still go."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from typing import Literal

import pytest
from helpers import eventually, holds

from collector.memory import heap


class Node:
    """An object that can sit in a reference cycle and be watched by a weak reference."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def cycle() -> tuple[Node, weakref.ref[Node]]:
    """Two nodes referring to each other: one of them, and a weak reference to it."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


def test_freezing_keeps_a_full_collection_off_what_lived_and_a_sweep_frees_its_cycles() -> None:
    held, watched = cycle()
    assert heap.freeze() > 0
    del held  # the cycle is garbage now, among frozen objects
    gc.collect()
    assert watched() is not None, "frozen: the full collection did not walk it"
    assert heap.sweep() >= 2
    assert watched() is None, "the sweep gave the permanent generation back and collected"
    assert gc.get_freeze_count() > 0, "what is left is frozen again"


def test_garbage_waiting_at_a_freeze_is_collected_not_frozen() -> None:
    watched = cycle()[1]  # garbage already, not yet collected
    heap.freeze()
    assert watched() is None


def test_a_cycle_made_after_the_freeze_is_collected_as_usual() -> None:
    heap.freeze()
    watched = cycle()[1]
    gc.collect()
    assert watched() is None


def test_collections_run_less_often_inside_the_block_and_as_before_after_it() -> None:
    before = gc.get_threshold()
    with heap.fewer_collections():
        assert gc.get_threshold() == heap.THRESHOLDS
        assert heap.THRESHOLDS[0] > before[0]
        # young ticks count towards a full collection: a sweep must come first
        assert heap.THRESHOLDS[2] * heap.YOUNG > heap.SWEEP
    assert gc.get_threshold() == before


def test_sweeps_take_their_share_of_the_time_within_a_settle_and_the_longest_wait() -> None:
    cost = 0.11  # seconds of CPU a sweep took at 1,000 nodes
    assert heap.sweep_interval(cost) == pytest.approx(cost / heap.SWEEP_SHARE)
    assert heap.SETTLE < heap.sweep_interval(cost) < heap.SWEEP
    assert heap.sweep_interval(0.0) == heap.SETTLE, "a cheap sweep still waits a settle"
    assert heap.sweep_interval(60.0) == heap.SWEEP, "a slow one still comes within the longest wait"


@pytest.fixture
def done(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the task froze or swept, in order (neither is done)."""
    found: list[str] = []

    def did(what: str) -> int:
        found.append(what)
        return 0

    monkeypatch.setattr(heap, "sweep", lambda: did("sweep"))
    monkeypatch.setattr(heap, "freeze", lambda: did("freeze"))
    return found


async def test_young_garbage_is_collected_each_tick_whatever_the_count(done: list[str]) -> None:
    # CPython's count of young objects is made less freed: in steady state it stays low
    # while young objects pile up, so no automatic collection comes. Stand for that with
    # automatic collections off: only the task's ticks collect.
    held, watched = cycle()
    del held
    gc.disable()
    try:
        task = asyncio.create_task(heap.keep_frozen(settle=3600, young=0.001))
        try:
            await eventually(lambda: holds(watched() is None), 5, "the young cycle collected")
            assert done == [], "no freeze or sweep before a settle passed"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        gc.enable()


class Watched(asyncio.Event):
    """An event that counts who waited on it."""

    waits = 0

    async def wait(self) -> Literal[True]:
        self.waits += 1
        return await super().wait()


async def test_a_freeze_or_sweep_waits_while_queries_are_evaluated(done: list[str]) -> None:
    idle = Watched()  # a query is being evaluated
    task = asyncio.create_task(heap.keep_frozen(settle=0.001, idle=idle))
    try:
        await eventually(lambda: holds(idle.waits == 1), 5, "a settle passed: waiting on the query")
        assert done == [], "nothing frozen or swept while a query is evaluated"
        idle.set()
        await eventually(lambda: holds(bool(done)), 5, "the first sweep once it ended")
        assert done[0] == "sweep"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_heap_frozen_before_the_task_is_frozen_again_not_swept_at_first(
    done: list[str],
) -> None:
    """A sweep walks everything frozen: a task that starts over a frozen heap (restarted, or
    its process froze what it made first) freezes until the longest wait has passed."""
    gc.freeze()
    idle = asyncio.Event()
    idle.set()
    task = asyncio.create_task(heap.keep_frozen(settle=0.001, idle=idle))
    try:
        await eventually(lambda: holds(len(done) >= 3), 5, "three settles passed")
        assert set(done) == {"freeze"}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_cancel_ends_the_task_whenever_it_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "sweep", lambda: 0)
    monkeypatch.setattr(heap, "freeze", lambda: 0)
    idle = asyncio.Event()
    idle.set()  # no query: each tick's wait ends at once, the cancel can meet it ending
    for ticks in range(40):
        task = asyncio.create_task(heap.keep_frozen(settle=0, idle=idle))
        for _ in range(ticks):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5)
        assert done, f"canceled after {ticks} loop turns, the task went on"
