"""The store: latest batch per source, dedupe by priority then freshness, forgetting."""

from __future__ import annotations

import random

import pytest
from test_history import rows

from collector.normalise.batch import Batch, Source
from collector.normalise.schema import SourceKind
from collector.selfmetrics import SelfMetrics
from collector.store.latest import Store
from collector.tsdb.history import History
from collector.tsdb.series import Matcher, is_stale

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


def test_each_source_expires_at_the_first_look_past_its_stale_after() -> None:
    """Arrivals out of order, re-puts, removals: expiry matches a walk of every source."""
    rng = random.Random(5)
    store = Store(stale_after=45)
    sources = [Source(f"s{i}", f"m{i}", f"n{i % 7}", SourceKind.HAMI, 1) for i in range(20)]
    held: dict[str, float] = {}
    now = 0.0
    for _ in range(2000):
        now += rng.uniform(0, 3)
        source = rng.choice(sources)
        roll = rng.random()
        if roll < 0.5:
            received = now - rng.uniform(0, 60)  # late arrivals too
            store.put(source, batch(a=1), received)
            held[source.id] = received
        elif roll < 0.55:
            store.remove(source.id)
            held.pop(source.id, None)
        else:
            stale = sorted(i for i, r in held.items() if now - r >= 45)
            assert sorted(s.id for s in store.expire(now)) == stale
            for i in stale:
                del held[i]
    assert held, "some still held at the end"


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


# --------------------------------------------------------------------------
# The history the store feeds: each point once, on its source's own time axis
# --------------------------------------------------------------------------

SHARED, MONITOR_ONLY, AGENT_ONLY = b"shared{}", b"monitor_only{}", b"agent_only{}"
Points = list[tuple[float, float | str]]


def history_store(now: list[float], stale_after: float = 45) -> Store:
    """A store whose history's clock (the collector's wall clock) reads ``now[0]``."""
    return Store(stale_after, History(clock=lambda: now[0]))


def recorded(store: Store, key: bytes, node: str = "n1") -> Points:
    name = key.decode().removesuffix("{}")
    (found,) = rows(
        store.history, [Matcher.of("__name__", "=", name), Matcher.of("node", "=", node)], 0, 1e12
    )
    return [
        (t, "stale" if is_stale(v) else v) for t, v in zip(found.times, found.values, strict=True)
    ]


def test_two_sources_of_a_node_double_nothing() -> None:
    now = [100.0]
    store = history_store(now)
    for k in range(5):
        now[0] = 100.0 + 15 * k
        store.put(AGENT, Batch({SHARED: k, AGENT_ONLY: k}), received=now[0])
        store.put(HAMI, Batch({SHARED: -k, MONITOR_ONLY: k}), received=now[0])
    times = [100.0 + 15 * k for k in range(5)]
    assert recorded(store, SHARED) == [(t, k) for k, t in enumerate(times)], "the agent's, once"
    assert recorded(store, AGENT_ONLY) == [(t, k) for k, t in enumerate(times)]
    assert recorded(store, MONITOR_ONLY) == [(t, k) for k, t in enumerate(times)]
    assert store.history.points == 15


@pytest.mark.parametrize("skew", [-5.0, 5.0])
def test_an_agent_whose_clock_is_off_loses_no_point_and_doubles_none(skew: float) -> None:
    now = [100.0]
    store = history_store(now)
    for k in range(6):
        now[0] = 100.0 + 15 * k
        store.put(AGENT, Batch({SHARED: k, AGENT_ONLY: k}), now[0], sampled=now[0] + skew)
        now[0] += 1
        store.put(HAMI, Batch({SHARED: -k, MONITOR_ONLY: k}), received=now[0])
    agent_times = [100.0 + 15 * k + skew for k in range(6)]
    assert recorded(store, SHARED) == [(t, k) for k, t in enumerate(agent_times)]
    assert recorded(store, AGENT_ONLY) == [(t, k) for k, t in enumerate(agent_times)]
    assert recorded(store, MONITOR_ONLY) == [(101.0 + 15 * k, k) for k in range(6)]


def test_a_backlog_replayed_after_an_outage_fills_the_gap() -> None:
    now = [100.0]
    store = history_store(now)
    for t in (100.0, 115.0, 130.0):
        now[0] = t
        store.put(AGENT, batch(a=t), received=t, sampled=t)
    now[0] = 200.0
    assert store.expire(now=200.0) == [AGENT], "the outage outlasts stale_after"
    assert recorded(store, b"a{}")[-1] == (200.0, "stale")
    now[0] = 210.0
    for t in (145.0, 160.0, 175.0, 190.0, 205.0):
        store.put(AGENT, batch(a=t), received=210.0, sampled=t)
    assert recorded(store, b"a{}") == [(t, t) for t in range(100, 206, 15)]


@pytest.mark.parametrize("first", [HAMI, AGENT])
def test_failover_between_sources_keeps_a_series_continuous(first: Source) -> None:
    second = AGENT if first is HAMI else HAMI
    now = [100.0]
    store = history_store(now)
    for t in (100.0, 115.0):
        now[0] = t
        store.put(first, batch(a=1), received=t)
    now[0] = 120.0
    store.put(second, batch(a=2), received=120.0)
    now[0] = 130.0
    store.put(first, batch(a=1), received=130.0)
    now[0] = 135.0
    store.remove(AGENT.id)
    now[0] = 145.0
    store.put(HAMI, batch(a=1), received=145.0)
    got = recorded(store, b"a{}")
    assert "stale" not in [v for _, v in got], "the series passed from one source to the other"
    assert [t for t, _ in got] == sorted({t for t, _ in got}), "each time once, in order"
    assert got[-1] == (145.0, 1)


def test_a_removed_or_expired_sources_series_end_with_a_stale_marker() -> None:
    now = [100.0]
    store = history_store(now)
    store.put(HAMI, batch(a=1, b=1), received=100.0)
    store.put(OTHER, batch(a=2), received=100.0)
    now[0] = 115.0
    store.put(HAMI, batch(a=1), received=115.0)
    assert recorded(store, b"b{}") == [(100.0, 1), (115.0, "stale")], "gone from its batch"
    now[0] = 120.0
    store.remove(HAMI.id)
    assert recorded(store, b"a{}") == [(100.0, 1), (115.0, 1), (120.0, "stale")]
    now[0] = 200.0
    store.expire(now=200.0)
    assert recorded(store, b"a{}", node="n2") == [(100.0, 2), (200.0, "stale")]


def test_the_history_s_size_is_in_the_collector_s_own_metrics() -> None:
    now = [100.0]
    store = history_store(now)
    store.put(HAMI, batch(a=1, b=2), received=100.0)
    page = b"".join(SelfMetrics(store).render(False)).decode()
    history = store.history
    assert f"hami_usage_collector_history_points {float(history.points)}" in page
    assert "hami_usage_collector_history_series 2.0" in page
    assert f"hami_usage_collector_history_bytes {float(history.bytes)}" in page
    assert history.bytes > 0


def test_the_store_names_the_nodes_changed_since_a_generation() -> None:
    store = Store(stale_after=60)
    store.put(HAMI, batch(a=1), received=0)
    store.put(OTHER, batch(a=2), received=0)
    seen = store.generation
    assert store.changed_since(seen) == []
    store.put(HAMI, batch(a=3), received=1)
    store.remove(OTHER.id)
    assert store.changed_since(seen) == ["n2", "n1"], "newest first, the removed node too"
    assert store.changed_since(0) == ["n2", "n1"]


def test_a_reader_older_than_the_store_s_change_log_is_told_to_look_at_every_node() -> None:
    store = Store(stale_after=60)
    store.put(HAMI, batch(a=1), received=0)
    for i in range(1100):  # nodes that come and go: the log forgets them in the end
        source = Source(f"pod/{i}", f"pod {i}", f"gone-{i}", SourceKind.HAMI, 1)
        store.put(source, batch(a=i), received=0)
        store.remove(source.id)
    assert store.changed_since(0) is None
    recent = store.generation
    store.put(HAMI, batch(a=2), received=1)
    assert store.changed_since(recent) == ["n1"]
