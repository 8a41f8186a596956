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


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_freezing_keeps_a_full_collection_off_what_lived_and_a_sweep_frees_its_cycles() -> None:
    watched = cycle()
    assert heap.freeze() > 0
    gc.collect()
    assert watched() is not None, "frozen: the full collection did not walk it"
    assert heap.sweep() >= 2
    assert watched() is None, "the sweep gave the permanent generation back and collected"
    assert gc.get_freeze_count() > 0, "what is left is frozen again"


def test_a_cycle_made_after_the_freeze_is_collected_as_usual() -> None:
    heap.freeze()
    watched = cycle()
    gc.collect()
    assert watched() is None
