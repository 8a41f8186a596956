"""The heap policy: long-lived objects leave the cyclic collector's walks; cycles still go."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from core import heap


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
    assert gc.get_threshold() == before


def test_sweeps_take_their_share_of_the_time_within_a_settle_and_the_longest_wait() -> None:
    cost = 0.11  # seconds of CPU a sweep took at 1,000 nodes
    assert heap.sweep_interval(cost) == pytest.approx(cost / heap.SWEEP_SHARE)
    assert heap.SETTLE < heap.sweep_interval(cost) < heap.SWEEP
    assert heap.sweep_interval(0.0) == heap.SETTLE, "a cheap sweep still waits a settle"
    assert heap.sweep_interval(60.0) == heap.SWEEP, "a slow one still comes within the longest wait"
