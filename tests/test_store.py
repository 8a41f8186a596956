"""The store: latest batch per source, dedupe by priority then freshness, forgetting."""

from __future__ import annotations

from collector.batch import Batch, Source
from collector.schema import SourceKind
from collector.store import Store

HAMI = Source("pod/a", "kube-system/hami-a", "n1", SourceKind.HAMI, 1)
HAMI_NEW = Source("pod/b", "kube-system/hami-b", "n1", SourceKind.HAMI, 1)
AGENT = Source("agent/n1", "agent n1", "n1", SourceKind.AGENT, 0)
OTHER = Source("pod/c", "kube-system/hami-c", "n2", SourceKind.HAMI, 1)


def batch(**series: float) -> Batch:
    return Batch({f"{k}{{}}".encode(): v for k, v in series.items()})


def series(store: Store, node: str) -> dict[bytes, float]:
    view = store.view(node)
    return dict(view.series) if view else {}


def test_a_new_batch_replaces_the_old_one_whole() -> None:
    store = Store(stale_after=45)
    store.put(HAMI, batch(a=1, b=2), received=0)
    store.put(HAMI, batch(a=3), received=1)
    assert series(store, "n1") == {b"a{}": 3}


def test_priority_wins_then_freshness() -> None:
    store = Store(stale_after=45)
    store.put(AGENT, batch(a=1), received=0)
    store.put(HAMI, batch(a=2, b=2), received=5)
    assert series(store, "n1") == {b"a{}": 1, b"b{}": 2}, "the agent outranks HAMI even when older"
    store.put(HAMI_NEW, batch(b=3), received=6)
    assert series(store, "n1") == {b"a{}": 1, b"b{}": 3}, "same priority: the fresher batch wins"
    store.put(HAMI, batch(a=2, b=4), received=7)
    assert series(store, "n1")[b"b{}"] == 4


def test_nodes_do_not_mix() -> None:
    store = Store(stale_after=45)
    store.put(HAMI, batch(a=1), received=0)
    store.put(OTHER, batch(a=2), received=0)
    assert series(store, "n1") == {b"a{}": 1}
    assert series(store, "n2") == {b"a{}": 2}


def test_removed_source_vanishes_and_an_empty_node_goes() -> None:
    store = Store(stale_after=45)
    store.put(HAMI, batch(a=1), received=0)
    store.put(OTHER, batch(a=2), received=0)
    generation = store.generation
    store.remove(HAMI.id)
    assert store.nodes() == ["n2"]
    assert store.view("n1") is None
    assert store.generation > generation
    store.remove("never-seen")


def test_stale_sources_expire_and_fresh_ones_stay() -> None:
    store = Store(stale_after=45)
    store.put(HAMI, batch(a=1), received=0)
    store.put(OTHER, batch(a=2), received=30)
    assert store.expire(now=44) == []
    assert store.expire(now=45) == [HAMI]
    assert store.nodes() == ["n2"]


def test_a_source_that_moves_node_leaves_the_old_one() -> None:
    store = Store(stale_after=45)
    store.put(HAMI, batch(a=1), received=0)
    moved = Source(HAMI.id, HAMI.name, "n9", SourceKind.HAMI, 1)
    store.put(moved, batch(a=1), received=1)
    assert store.nodes() == ["n9"]


def test_views_are_cached_per_generation() -> None:
    store = Store(stale_after=45)
    store.put(HAMI, batch(a=1), received=0)
    first = store.view("n1")
    assert store.view("n1") is first
    store.put(OTHER, batch(a=1), received=0)
    assert store.view("n1") is first, "another node's change leaves this view alone"
    store.put(HAMI, batch(a=2), received=1)
    assert store.view("n1") is not first
