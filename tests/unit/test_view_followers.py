"""The views' own per-node figures follow the REST read model as warming rebuilds it.

The overview's sums (:class:`Ledger`) and a sorted workloads page's runs
(:class:`Runs`) are kept per node; once a view is read they follow the node
cache (:meth:`NodeCache.follow`), so after a round of changes warming has
brought them up to date and the next request finds nothing to redo. Each is
checked against the same figures made afresh from the cache.
"""

from __future__ import annotations

import heapq
import itertools
from operator import itemgetter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_rest import NOW, fill, simulated, source

from collector.auth.access import CLUSTER
from collector.store.latest import Store
from collector.views.cache import NodeCache
from collector.views.presented import Presented
from collector.web.ui.overview import Ledger
from collector.web.ui.workloads import Runs, Spec, contenders
from simulator.node import SimulatedNode


class Follower:
    """Notes each node presented and each set of nodes kept."""

    def __init__(self) -> None:
        self.told: list[Presented] = []
        self.kept: list[set[str]] = []

    def presented(self, presented: Presented) -> None:
        self.told.append(presented)

    def pruned(self, live: set[str]) -> None:
        self.kept.append(live)


def changed(store: Store, nodes: list[SimulatedNode], minutes: int = 1) -> None:
    """Every node's readings a little later, put again (a new view of each)."""
    for node in nodes:
        node.step(NOW + 60 * minutes)
    fill(store, nodes)


def filled() -> tuple[list[SimulatedNode], Store, NodeCache]:
    """Four simulated nodes in a store, and a node cache over it that has presented none."""
    nodes = simulated(4)
    store = Store(60)
    fill(store, nodes)
    return nodes, store, NodeCache()


def fresh_ledger(cache: NodeCache, store: Store) -> Ledger:
    """A ledger summed afresh from the cache's nodes."""
    ledger = Ledger()
    ledger.update(cache.all(store))
    return ledger


def test_followers_hear_of_each_node_warming_presents_and_of_dropped_ones() -> None:
    nodes, store, cache = filled()
    follower = Follower()
    cache.follow(follower)
    cache.follow(follower)  # once, however often asked
    assert cache.refresh(store, 1.0)
    assert [p.usage.node for p in follower.told] == sorted(n.name for n in nodes)
    assert all(p is cache.one(store, p.usage.node) for p in follower.told)

    # Only the nodes that changed are presented again, and told again.
    follower.told.clear()
    changed(store, nodes[:2])
    assert cache.refresh(store, 1.0)
    assert sorted(p.usage.node for p in follower.told) == sorted(n.name for n in nodes[:2])

    # A node the store dropped: the follower hears which are kept.
    store.remove(source(nodes[0]).id)
    assert cache.refresh(store, 1.0)
    assert follower.kept[-1] == {n.name for n in nodes[1:]}


def test_the_overviews_sums_follow_warming() -> None:
    nodes, store, cache = filled()
    ledger = Ledger()
    ledger.update(cache.all(store))
    cache.follow(ledger)
    before = [list(row) for row in ledger.namespaces.values()]

    changed(store, nodes, minutes=5)
    assert cache.refresh(store, 1.0)
    fresh = fresh_ledger(cache, store)
    assert ledger.namespaces == fresh.namespaces
    assert ledger.figures == fresh.figures
    assert ledger.bands == fresh.bands
    assert [list(row) for row in ledger.namespaces.values()] != before, "the readings moved"

    store.remove(source(nodes[0]).id)
    assert cache.refresh(store, 1.0)
    fresh = fresh_ledger(cache, store)
    assert (ledger.namespaces, ledger.figures) == (fresh.namespaces, fresh.figures)
    assert ledger.total(CLUSTER) == fresh.total(CLUSTER)


def test_a_sorts_runs_follow_warming() -> None:
    nodes, store, cache = filled()
    runs = Runs()
    spec: Spec = ("memory_used_bytes", True, None)
    runs.page(cache.all(store), spec, 1)
    cache.follow(runs)

    changed(store, nodes, minutes=5)
    assert cache.refresh(store, 1.0)
    presented = cache.all(store)
    held = runs._nodes  # before the next page: warming sorted every node's run
    assert all(held[p.usage.node][0] is p for p in presented)
    kept = runs.page(presented, spec, 1)
    fresh = Runs().page(presented, spec, 1)
    assert [(p.usage.node, r) for p, r in kept.rows] == [(p.usage.node, r) for p, r in fresh.rows]
    assert kept.total == fresh.total


@settings(max_examples=300, deadline=None)
@given(
    keys=st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=5), max_size=40),
    rows=st.integers(1, 25),
    descending=st.booleans(),
)
def test_the_runs_a_page_merges_give_the_whole_merges_first_rows(
    keys: list[list[int]], rows: int, descending: bool
) -> None:
    """Ties among many runs included: the same rows, in the same order."""
    runs: list[list[Any]] = [
        [(k, run, i) for i, k in enumerate(sorted(ks, reverse=descending))]
        for run, ks in enumerate(keys)
    ]

    def first(of: list[list[Any]]) -> list[Any]:
        merged = heapq.merge(*of, key=itemgetter(0), reverse=descending)
        return list(itertools.islice(merged, rows))

    kept = contenders(runs, rows, descending)
    assert first(kept) == first(runs)
    assert len(kept) <= len(runs)
