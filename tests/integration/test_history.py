"""The history: aligned points per node, staleness markers, retention and a point cap."""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.normalise.batch import Series
from collector.normalise.labelsets import key_labels
from collector.promql.query import instant_query, range_query
from collector.promql.values import Element
from collector.tsdb.blocks import OpenBlock, Segment, pack
from collector.tsdb.ends import KEEP
from collector.tsdb.history import History
from collector.tsdb.series import STALE, Columns, Lookup, Matcher, absent_mask, is_stale

A, B = b'm{pod="a"}', b'm{pod="b"}'


class Row(NamedTuple):
    """One series of a selection, its absent points left out."""

    labels: Mapping[str, str]
    times: list[float]
    values: list[float]


def rows(history: History, matchers: Sequence[Matcher], start: float, end: float) -> list[Row]:
    """Every series ``select`` yields, row by row, whatever its grouping."""
    out = []
    for group in history.select(matchers, start, end):
        gone = absent_mask(group.values)
        for i, labels in enumerate(group.labels):
            kept = ~gone[i]
            out.append(Row(labels, group.times[kept].tolist(), group.values[i][kept].tolist()))
    return out


def points(
    history: History, *matchers: Matcher, start: float = 0, end: float = 1e12
) -> dict[str, list[tuple[float, float | str]]]:
    out: dict[str, list[tuple[float, float | str]]] = {}
    for s in rows(history, list(matchers), start, end):
        label = f"{s.labels['node']}/{s.labels.get('pod', '')}/{s.labels['__name__']}"
        out[label] = [
            (t, "stale" if is_stale(v) else v) for t, v in zip(s.times, s.values, strict=True)
        ]
    return out


def test_points_align_and_vanished_series_get_one_stale_marker() -> None:
    history = History()
    history.record("n1", {A: 1.0, B: 2.0}, sampled=10)
    history.record("n1", {A: 1.5, B: 2.5}, sampled=20)
    history.record("n1", {A: 2.0}, sampled=30)
    history.record("n1", {A: 2.5}, sampled=40)
    history.record("n1", {A: 3.0, B: 9.0}, sampled=50)
    assert points(history) == {
        "n1/a/m": [(10, 1.0), (20, 1.5), (30, 2.0), (40, 2.5), (50, 3.0)],
        "n1/b/m": [(10, 2.0), (20, 2.5), (30, "stale"), (50, 9.0)],
    }
    assert history.points == 9, "the gap at 40 holds no point: one marker, then nothing"


def test_a_node_that_goes_marks_everything_stale() -> None:
    history = History()
    history.record("n1", {A: 1.0}, sampled=10)
    history.record("n1", {}, sampled=20)
    history.record("n1", {}, sampled=30)
    assert points(history) == {"n1/a/m": [(10, 1.0), (20, "stale")]}
    history.record("n9", {}, sampled=30)
    assert "n9" not in str(points(history))


def test_select_filters_by_matchers_and_window() -> None:
    history = History()
    for t in (10, 20, 30):
        history.record("n1", {A: t, B: -t}, sampled=t)
        history.record("n2", {A: t * 10}, sampled=t)
    got = points(
        history, Matcher.of("__name__", "=", "m"), Matcher.of("pod", "=~", "a|z"), start=15, end=30
    )
    assert got == {"n1/a/m": [(20, 20.0), (30, 30.0)], "n2/a/m": [(20, 200.0), (30, 300.0)]}
    assert points(history, Matcher.of("node", "!=", "n1"), Matcher.of("pod", "!~", "a")) == {}
    assert history.label_values("node", [Matcher.of("pod", "=", "b")], 0, 100) == {"n1"}
    assert history.label_names([], 0, 100) == {"__name__", "pod", "node"}


def test_a_node_equality_selects_that_node_alone() -> None:
    history = History()
    for node in ("n1", "n2", ""):  # "": the collector's own series, no node label
        history.record(node, {A: 1.0, B: 2.0}, sampled=10)
    n2, b = Matcher.of("node", "=", "n2"), Matcher.of("pod", "=", "b")
    assert sorted(points(history, n2)) == ["n2/a/m", "n2/b/m"]
    assert sorted(points(history, b, n2)) == ["n2/b/m"]
    assert points(history, n2, Matcher.of("node", "=", "n1")) == {}, "two nodes: none"
    assert points(history, Matcher.of("node", "=", "n9")) == {}
    own = rows(history, [Matcher.of("node", "=", "")], 0, 100)
    assert sorted(r.labels["pod"] for r in own) == ["a", "b"]
    assert all("node" not in r.labels for r in own)


def test_node_matchers_follow_the_nodes_that_come_and_go() -> None:
    """The nodes a set of ``node`` matchers passes are kept between queries, until a node
    comes or goes."""
    history = History(retention=100)
    history.record("n1", {A: 1.0}, sampled=10)
    history.record("x1", {A: 1.0}, sampled=10)
    n = [Matcher.of("node", "=~", "n.*"), Matcher.of("node", "!=", "n3")]
    assert sorted(points(history, *n)) == ["n1/a/m"]
    history.record("n2", {A: 2.0}, sampled=50)
    history.record("n3", {A: 3.0}, sampled=50)
    assert sorted(points(history, *n)) == ["n1/a/m", "n2/a/m"], "a node that came"
    assert sorted(points(history, Matcher.of("node", "=", "n2"))) == ["n2/a/m"]
    history.trim(now=120)  # n1 and x1 have nothing after 20
    assert sorted(points(history, *n)) == ["n2/a/m"], "a node that went"
    history.record("n1", {A: 4.0}, sampled=130)
    assert points(history, *n, start=125) == {"n1/a/m": [(130, 4.0)]}, "and came back"


def test_out_of_order_points_are_not_recorded() -> None:
    history = History()
    history.record("n1", {A: 1.0}, sampled=20)
    history.record("n1", {A: 9.0}, sampled=10)
    history.record("n1", {A: 9.0}, sampled=20)
    assert points(history) == {"n1/a/m": [(20, 1.0)]}


def test_retention_and_the_point_cap_drop_the_oldest_first() -> None:
    now = [0.0]
    history = History(retention=100, max_points=1000, clock=lambda: now[0])
    for t in range(0, 200, 10):
        history.record("n1", {A: t, B: t}, sampled=t)
    history.trim(now=195)
    assert [t for t, _ in points(history)["n1/a/m"]] == list(range(100, 200, 10))
    assert history.points == 20
    history.max_points = 10
    history.trim(now=195)
    assert history.points <= 10
    kept = [t for t, _ in points(history)["n1/a/m"]]
    assert kept == sorted(kept)
    assert kept[-1] == 190, "the newest points stay"
    history.trim(now=1000)
    assert points(history) == {}
    assert history.points == 0


def test_a_series_that_only_trims_away_is_forgotten_and_steady_state_continues() -> None:
    history = History(retention=25)
    history.record("n1", {A: 1.0, B: 1.0}, sampled=10)
    for t in (20, 30, 40):
        history.record("n1", {A: float(t)}, sampled=t)
    history.trim(now=50)
    history.record("n1", {A: 50.0}, sampled=50)
    assert points(history) == {"n1/a/m": [(30, 30.0), (40, 40.0), (50, 50.0)]}


def test_columns_are_what_select_yields() -> None:
    history = History()
    history.record("n1", {A: math.nan}, sampled=1)
    (group,) = history.select([], 0, 2)
    assert isinstance(group, Columns)
    assert group.values.shape == (1, 1)
    assert math.isnan(group.values[0, 0])
    assert not is_stale(group.values[0, 0]), "a NaN reading is not a staleness marker"


# --------------------------------------------------------------------------
# Columnar storage: many blocks, three states per cell, a reference model
# --------------------------------------------------------------------------

KEYS = [f'm{{ns="{"ab"[i % 2]}",pod="p{i}"}}'.encode() for i in range(8)]
VALUES = (0.0, 1.0, 2.5, -3.0, math.nan)
Batches = list[tuple[float, dict[bytes, float]]]


def reference(batches: Batches, floor: float = -math.inf) -> dict[str, list[tuple[float, Any]]]:
    """What a single-source history holds: a point per reading, one marker when a series goes."""
    out: dict[bytes, list[tuple[float, float]]] = {}
    live: set[bytes] = set()
    last = -math.inf
    for t, series in batches:
        if t <= last or not (series or live):
            continue  # a batch that writes nothing takes no time of the axis
        last = t
        for key, value in series.items():
            out.setdefault(key, []).append((t, value))
        for key in live - series.keys():
            out[key].append((t, STALE))
        live = set(series)
    return {
        f"n1/{dict(key_labels(key)[1])['pod']}/m": [
            (t, "stale" if is_stale(v) else v) for t, v in kept
        ]
        for key, points in out.items()
        if (kept := [(t, v) for t, v in points if t > floor])
    }


def same(a: dict[str, list[tuple[float, Any]]], b: dict[str, list[tuple[float, Any]]]) -> bool:
    """Equal, a NaN reading equal to a NaN reading."""

    def norm(points: list[tuple[float, Any]]) -> list[tuple[float, Any]]:
        return [(t, "nan" if isinstance(v, float) and math.isnan(v) else v) for t, v in points]

    return {k: norm(v) for k, v in a.items()} == {k: norm(v) for k, v in b.items()}


batches = st.lists(
    st.tuples(
        st.sampled_from((1.0, 1.0, 1.0, 7.0, 0.0, -5.0)),
        st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=len(KEYS)),
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=60, deadline=None)
@given(steps=batches, cut=st.integers(100, 220))
def test_the_blocks_hold_what_a_list_of_points_would(
    steps: list[tuple[float, dict[bytes, float]]], cut: int
) -> None:
    """Across open blocks, packed and merged segments, gaps, repeats and trims alike."""
    history = History(retention=1e9)
    timeline: Batches = []
    t = 100.0
    for step, series in steps:
        t += step
        timeline.append((t, series))
        history.record("n1", series, sampled=t)
    assert same(points(history), reference(timeline))
    assert history.points == sum(map(len, reference(timeline).values()))
    # A window and a matcher read only part of each block: the same points, cut.
    lo, hi, pod = float(cut), float(cut + 60), Matcher.of("pod", "=~", "p[02]")
    windowed = {
        name: kept
        for name, listed in reference(timeline).items()
        if name.split("/")[1] in ("p0", "p2") and (kept := [p for p in listed if lo <= p[0] <= hi])
    }
    assert same(points(history, pod, start=lo, end=hi), windowed)
    floor = float(cut)
    history.trim(now=floor + 1e9)
    assert same(points(history), reference(timeline, floor))
    assert history.points == sum(map(len, reference(timeline, floor).values()))


def test_a_window_read_between_writes_sees_every_block_closed_merged_and_trimmed() -> None:
    """Each read finds the segments as they are then: an axis keeps its closed segments' times
    laid end to end between reads, made again once a block closes, blocks merge or a trim
    drops some."""
    history = History(retention=1e9)
    timeline: Batches = []
    floor = -math.inf
    for i in range(150):
        t = 100.0 + 2 * i
        series = {key: float(i) for k, key in enumerate(KEYS) if (i + k) % 40 < 36}
        timeline.append((t, series))
        history.record("n1", series, sampled=t)
        if i in (60, 120):
            floor = t - 40
            history.trim(now=floor + 1e9)
        lo = t - 70
        want = {
            name: kept
            for name, listed in reference(timeline, floor).items()
            if (kept := [p for p in listed if lo <= p[0] <= t])
        }
        assert same(points(history, start=lo, end=t), want), t


def test_a_cell_keeps_a_reading_a_marker_or_nothing_apart_in_every_block() -> None:
    history = History()
    present = [t for t in range(1, 200) if t % 50 >= 5]  # A is away for 5 times out of 50
    for t in range(1, 200):
        batch = {B: float(t)}
        if t in present:
            batch[A] = math.nan if t % 3 else float(t)
        history.record("n1", batch, sampled=t)
    (series,) = rows(history, [Matcher.of("pod", "=", "a")], 0, 1e9)
    states = [
        "stale" if is_stale(v) else "nan" if math.isnan(v) else "value" for v in series.values
    ]
    assert list(series.times) == sorted([*present, 50, 100, 150]), "one marker a gap, then nothing"
    assert [t for t, s in zip(series.times, states, strict=True) if s == "stale"] == [50, 100, 150]
    assert states.count("value") == sum(1 for t in present if not t % 3)
    assert states.count("nan") == sum(1 for t in present if t % 3)


def test_ended_series_cost_nothing_once_their_blocks_go() -> None:
    history = History(retention=300)
    for t in range(0, 3000, 10):
        pod = f'm{{pod="p{t // 100}"}}'.encode()  # a new pod every 10 points
        history.record("n1", {A: 1.0, pod: float(t)}, sampled=t)
    history.trim(now=3000)
    assert history.series <= 2 + 300 // 100 + 2, "only the series of the kept blocks stay"
    got = points(history, start=2700)
    assert got["n1/a/m"][-1] == (2990, 1.0)
    assert got["n1/p29/m"] == [(t, float(t)) for t in range(2900, 3000, 10)]
    assert history.bytes > 0
    history.trim(now=1e6)
    assert (history.points, history.series, history.bytes) == (0, 0, 0)


def test_an_axis_keeps_apart_only_the_series_that_left_recently() -> None:
    """Each pod's series ends with a marker; only those of the last KEEP seconds are kept apart
    for instant lookups, however long the history."""
    history = History(retention=100_000)
    for t in range(0, 20_000, 10):
        pod = f'm{{pod="p{t // 100}"}}'.encode()  # a new pod every 100 s
        history.record("n1", {A: 1.0, pod: float(t)}, sampled=t)
    (axis,) = history._nodes["n1"].axes.values()
    ended = axis.ended.times
    assert len(ended) <= KEEP // 100 + 1, "one marker per pod that ended within KEEP"
    assert ended.min() >= ended.max() - KEEP
    found = instant_query('m{pod="p150"}', 15_095, history)
    assert found == [Element({"__name__": "m", "node": "n1", "pod": "p150"}, 15_090.0)]


# --------------------------------------------------------------------------
# Time axes: one per source of a node, merged by time on selection
# --------------------------------------------------------------------------


def test_the_axes_of_a_node_are_merged_by_time_and_a_shared_time_is_kept_once() -> None:
    history = History()
    history.record("n1", {A: 1.0, B: 1.0}, sampled=10, source="monitor", kept={A, B})
    history.record("n1", {A: 2.0}, sampled=12, source="agent", kept={A, B})
    history.record("n1", {B: 3.0}, sampled=20, source="monitor", kept={A, B})
    history.record("n1", {A: 4.0}, sampled=20, source="agent", kept={A, B})
    history.record("n1", {A: 5.0}, sampled=5, source="agent", kept={A, B})
    assert points(history) == {
        "n1/a/m": [(10, 1.0), (12, 2.0), (20, 4.0)],
        "n1/b/m": [(10, 1.0), (20, 3.0)],
    }, "the agent's A passed from the monitor without a marker; 5 s is older than its axis"


def test_a_source_that_goes_marks_its_series_and_its_backlog_takes_the_marks_place() -> None:
    now = [100.0]
    history = History(clock=lambda: now[0])
    history.record("n1", {A: 1.0, B: 1.0}, sampled=10, source="agent")
    now[0] = 60.0
    history.forget("n1", "agent", kept={})
    assert points(history)["n1/a/m"] == [(10, 1.0), (60, "stale")]
    history.record("n1", {A: 2.0}, sampled=30, source="agent")
    history.record("n1", {A: 3.0}, sampled=45, source="agent")
    assert points(history) == {
        "n1/a/m": [(10, 1.0), (30, 2.0), (45, 3.0)],
        "n1/b/m": [(10, 1.0), (30, "stale")],
    }, "the replayed readings fill the outage; B, not replayed, ends at the first of them"
    history.record("n1", {A: 9.0}, sampled=20, source="agent")
    assert points(history)["n1/a/m"][-1] == (45, 3.0), "older than a reading: ignored"
    assert history.points == 5


def test_regexes_are_decided_once_per_label_value(monkeypatch: pytest.MonkeyPatch) -> None:
    history = History()
    series = {f'm{{ns="team-{i % 3}",pod="p{i}"}}'.encode(): 1.0 for i in range(60)}
    history.record("n1", series, sampled=1)
    history.record("n2", series, sampled=1)
    decided: list[str] = []
    matches = Matcher.matches

    def counted(self: Matcher, labels: Mapping[str, str]) -> bool:
        decided.append(labels.get(self.name, ""))
        return matches(self, labels)

    monkeypatch.setattr(Matcher, "matches", counted)
    got = list(rows(history, [Matcher.of("ns", "=~", "team-(0|1)")], 0, 2))
    assert len(got) == 80
    assert sorted(decided) == ["", "team-0", "team-1", "team-2"], "per value, once for all nodes"
    assert {s.labels["ns"] for s in rows(history, [Matcher.of("ns", "=", "team-2")], 0, 2)} == {
        "team-2"
    }
    assert len(list(rows(history, [Matcher.of("ns", "!=", "team-2")], 0, 2))) == 80
    assert list(rows(history, [Matcher.of("__name__", "=", "other")], 0, 2)) == []
    assert history.label_values("pod", [Matcher.of("ns", "=", "team-0")], 0, 2) == {
        f"p{i}" for i in range(0, 60, 3)
    }


def test_a_window_of_packed_runs_reads_each_series_own_values() -> None:
    """Runs of one repeated value are kept once; a window into them reads the right one."""
    history = History(retention=1e9)
    timeline: Batches = []
    for t in range(1, 100):  # p0..p3 constant, p4 changing, p5 from t=40 on: segments merge
        series = {KEYS[i]: float(i) for i in range(4)}
        series[KEYS[4]] = float(t)
        if t >= 40:
            series[KEYS[5]] = 5.0
        timeline.append((float(t), series))
        history.record("n1", series, sampled=float(t))
    pods = Matcher.of("pod", "=~", "p[135]")
    want = {
        name: [p for p in listed if 30 <= p[0] <= 70]
        for name, listed in reference(timeline).items()
        if name.split("/")[1] in ("p1", "p3", "p5")
    }
    assert same(points(history, pods, start=30, end=70), want)


# --------------------------------------------------------------------------
# Instant lookups: each series' newest point, read without the blocks
# --------------------------------------------------------------------------


class EveryPoint:
    """The history, always read whole, without the reader's hints: what a lookup finds with
    no shortcut."""

    def __init__(self, history: History) -> None:
        self.history = history

    def select(
        self,
        matchers: Sequence[Matcher],
        start: float,
        end: float,
        newest: bool = False,
        lookup: Lookup | None = None,
    ) -> Any:
        return self.history.select(matchers, start, end)

    def label_names(self, matchers: Sequence[Matcher], start: float, end: float) -> set[str]:
        return self.history.label_names(matchers, start, end)

    def label_values(
        self, name: str, matchers: Sequence[Matcher], start: float, end: float
    ) -> set[str]:
        return self.history.label_values(name, matchers, start, end)


events = st.lists(
    st.tuples(
        st.sampled_from(("monitor", "monitor", "agent", "forget", "trim")),
        st.sampled_from((0.0, 1.0, 7.0, 30.0, -4.0)),
        st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=len(KEYS)),
    ),
    min_size=1,
    max_size=80,
)


def lookups(storage: Any, times: Sequence[float]) -> list[list[tuple[Any, ...]]]:
    out = []
    for t in times:
        for query in ('m{ns="a"}', "count(m)", "timestamp(m)", "m offset 20s"):
            found = instant_query(query, t, storage, lookback=40.0)
            assert isinstance(found, list)
            elements = [e for e in found if isinstance(e, Element)]
            assert len(elements) == len(found)
            out.append([(sorted(e.labels.items()), repr(e.value)) for e in elements])
    return out


@settings(max_examples=80, deadline=None)
@given(steps=events, probes=st.lists(st.integers(-3, 3), min_size=1, max_size=4))
def test_an_instant_lookup_of_the_newest_points_finds_what_reading_every_point_finds(
    steps: list[tuple[str, float, dict[bytes, float]]], probes: list[int]
) -> None:
    """Two sources (one ahead of the other's clock), ends, replays, trims and compactions."""
    now = [100.0]
    history = History(retention=150, clock=lambda: now[0])
    sampled: list[float] = []
    for what, step, series in steps:
        now[0] += abs(step)
        if what == "forget":
            history.forget("n1", "agent", kept=set())
        elif what == "trim":
            history.trim()
        else:
            t = now[0] + (step if what == "agent" else 0.0)
            sampled.append(t)
            history.record("n1", series, sampled=t, source=what, kept=set(series))
    # At, just before and after sample times (a point at the lookup time is the edge).
    times = [t + d / 1000 for t in sampled[-3:] for d in probes] + [now[0] + 5]
    assert lookups(history, times) == lookups(EveryPoint(history), times)


def elements(vector: Any) -> list[tuple[Any, ...]]:
    """An instant query's answer in label order (an aggregation's follows its rows), NaN
    equal to NaN."""
    return sorted((sorted(e.labels.items()), repr(e.value)) for e in vector)


def by_step(matrix: Any) -> dict[float, list[tuple[Any, ...]]]:
    """A range query's answer as the instant answers at each of its steps."""
    out: dict[float, list[tuple[Any, ...]]] = {}
    for series in matrix:
        for t, value in series.points:
            out.setdefault(t, []).append((sorted(series.labels.items()), repr(value)))
    return {t: sorted(found) for t, found in out.items()}


@settings(max_examples=60, deadline=None)
@given(steps=events, every=st.sampled_from((1.0, 3.0, 7.0, 13.0)), back=st.integers(0, 60))
def test_a_range_query_finds_at_each_step_what_an_instant_query_there_finds(
    steps: list[tuple[str, float, dict[bytes, float]]], every: float, back: int
) -> None:
    """A range query looks each selector up as it reads it, at its steps only."""
    now = [100.0]
    history = History(retention=150, clock=lambda: now[0])
    for what, step, series in steps:
        now[0] += abs(step)
        if what == "forget":
            history.forget("n1", "agent", kept=set())
        elif what == "trim":
            history.trim()
        else:
            t = now[0] + (step if what == "agent" else 0.0)
            history.record("n1", series, sampled=t, source=what, kept=set(series))
    start, end = now[0] - back - 0.5, now[0] + 5
    for query in ('m{ns="a"}', "sum by (ns) (m)", "m offset 20s", "timestamp(m)"):
        ranged = by_step(range_query(query, start, end, every, history, lookback=40.0))
        for k in range(int((end - start) // every) + 1):
            t = start + k * every
            found = instant_query(query, t, history, lookback=40.0)
            assert isinstance(found, list)
            elements = [e for e in found if isinstance(e, Element)]
            want = sorted((sorted(e.labels.items()), repr(e.value)) for e in elements)
            assert ranged.get(t, []) == want, (query, t)


# Mostly none: a series that stops and starts again within a block leaves a gap in its run,
# which only the window's points can answer for.
rarely_one_key = st.sampled_from([frozenset()] * 120 + [frozenset({key}) for key in KEYS])
one_source = st.lists(
    st.tuples(
        st.sampled_from((1.0, 5.0, 15.0, 15.0, 15.0, 45.0, 120.0)),
        rarely_one_key,  # a series that starts or stops
        st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3),  # new values
        st.booleans(),  # whether it stops unmarked (it passed elsewhere)
        st.sampled_from((False,) * 9 + (True,)),  # whether the source goes after this batch
    ),
    min_size=40,  # several merged segments
    max_size=120,
)


@settings(max_examples=60, deadline=None)
@given(
    steps=one_source,
    every=st.sampled_from((7.0, 15.0, 60.0, 61.0)),
    lookback=st.sampled_from((10.0, 30.0, 300.0)),
    skip=st.floats(0, 600),
)
def test_lookups_made_from_the_runs_find_what_the_window_s_points_find(
    steps: list[tuple[float, frozenset[bytes], dict[bytes, float], bool, bool]],
    every: float,
    lookback: float,
    skip: float,
) -> None:
    """One source over many blocks: churn, markers, series that pass elsewhere unmarked,
    sources that go, gaps beyond the lookback, runs of one value; windows that start
    inside a block."""
    history, end = one_source_history({"n1": (0, 0.0)}, steps)
    assert_lookups_agree(history, 1000.0 + skip, end + lookback, every, lookback)


@settings(max_examples=40, deadline=None)
@given(
    steps=one_source,
    nodes=st.lists(st.tuples(st.integers(0, 60), st.floats(0, 14.9)), min_size=2, max_size=4),
    every=st.sampled_from((7.0, 15.0, 60.0)),
    lookback=st.sampled_from((10.0, 300.0)),
)
def test_lookups_of_many_nodes_find_what_each_node_s_points_find(
    steps: list[tuple[float, frozenset[bytes], dict[bytes, float], bool, bool]],
    nodes: list[tuple[int, float]],
    every: float,
    lookback: float,
) -> None:
    """Nodes that start later than others (steps before a node's first point), each sampled
    at its own offset within the step, as a scrape loop spreads its targets."""
    history, end = one_source_history(
        {f"n{i}": (first, offset) for i, (first, offset) in enumerate(nodes)}, steps
    )
    assert_lookups_agree(history, 1000.0, end + lookback, every, lookback)


@settings(max_examples=40, deadline=None)
@given(
    steps=one_source,
    nodes=st.lists(st.tuples(st.integers(0, 60), st.floats(0, 14.9)), min_size=2, max_size=5),
    lookback=st.sampled_from((10.0, 300.0)),
    group=st.sampled_from((1, 6, 10_000)),
    probes=st.lists(st.floats(-400, 30), min_size=1, max_size=4),
    trimmed=st.booleans(),
)
def test_instant_lookups_of_many_nodes_at_once_find_what_each_node_s_points_find(
    steps: list[tuple[float, frozenset[bytes], dict[bytes, float], bool, bool]],
    nodes: list[tuple[int, float]],
    lookback: float,
    group: int,
    probes: list[float],
    trimmed: bool,
) -> None:
    """An instant selector reads many nodes' newest points at once (groups of ``group``
    points): series that passed elsewhere unmarked, sources that went, nodes that started
    later; times before a node's newest point (read node by node instead); an ``@`` time
    looked up at every step of a range query; points hidden by the retention within the
    lookback."""
    history, end = one_source_history(
        {f"n{i}": (first, offset) for i, (first, offset) in enumerate(nodes)}, steps
    )
    if trimmed:
        history.retention = lookback / 2
        history.trim(end)
    queries = ("m", 'm{ns="a"}', "sum by (node) (m)", f"m @ {end - 2:.3f}")
    # the edges of the first node's lookback: after its last batch, or its source's going
    edges = [
        end - gone - nodes[0][1] + lookback + e / 1000 for gone in (0, 0.5) for e in (-1, 0, 1)
    ]
    with patch("collector.tsdb.history.LOOKUP_IDS", group):
        for t in [end + d for d in probes] + edges:
            for query in queries:
                got = instant_query(query, t, history, lookback=lookback)
                want = instant_query(query, t, EveryPoint(history), lookback=lookback)
                assert elements(got) == elements(want), (query, t)
            got = range_query(queries[-1], t - 30, t, 10, history, lookback=lookback)
            want = range_query(queries[-1], t - 30, t, 10, EveryPoint(history), lookback=lookback)
            assert by_step(got) == by_step(want), t


def one_source_history(
    nodes: dict[str, tuple[int, float]],
    steps: list[tuple[float, frozenset[bytes], dict[bytes, float], bool, bool]],
) -> tuple[History, float]:
    """Each node recording ``steps`` from its first one on, its sample times ``offset`` early;
    the history and the last step's time."""
    now = [1000.0]
    history = History(retention=100_000, clock=lambda: now[0])
    held = dict.fromkeys(KEYS[:4], 1.0)
    for k, (step, toggled, changes, unmarked, goes) in enumerate(steps):
        now[0] += step
        for key in toggled:
            if held.pop(key, None) is None:
                held[key] = 0.0
        held.update((key, value) for key, value in changes.items() if key in held)
        kept = toggled if unmarked else frozenset()
        for node, (first, offset) in nodes.items():
            if k >= first:
                history.record(node, dict(held), sampled=now[0] - offset, kept=kept)
        if goes:
            now[0] += 0.5
            for node in nodes:
                history.forget(node, "", kept=kept)
    return history, now[0]


def assert_lookups_agree(
    history: History, start: float, end: float, every: float, lookback: float
) -> None:
    for query in ("m", "sum by (ns) (m)", "m offset 40s", "count(m)", "count by (node) (m)"):
        got = range_query(query, start, end, every, history, lookback=lookback)
        want = range_query(query, start, end, every, EveryPoint(history), lookback=lookback)
        assert by_step(got) == by_step(want), query


def test_an_open_block_packs_as_it_is_after_every_change() -> None:
    """Its packed form is kept for many reads, never past a change."""
    block = OpenBlock(np.array([0, 1]))

    def fields(segment: Segment | None) -> list[Any]:
        assert segment is not None
        arrays = (segment.times, segment.ids, segment.first, segment.width, segment.stored)
        return [a.tolist() for a in arrays] + [segment.values.tobytes(), segment.points]

    def packs_as_it_is() -> None:
        n, rows = block.n, block.rows
        fresh = pack(block.times[:n].copy(), block.ids[:rows].copy(), block.values[:n, :rows])
        assert fields(block.packed()) == fields(fresh)

    block.write(1.0, slice(0, 2), np.array([1.0, 2.0]))
    packs_as_it_is()
    rows = block.rows_of(np.array([0, 2]), 3)  # a new row
    block.write(2.0, rows, np.array([3.0, 4.0]))
    packs_as_it_is()
    block.write(3.0, rows[:1], 5.0, marks=rows[1:])
    packs_as_it_is()
    assert block.retract().tolist() == [2]
    packs_as_it_is()
    block.renumber(np.array([2, 0, 1]))
    packs_as_it_is()


def test_a_lookup_reads_the_open_block_as_it_is_after_every_change() -> None:
    """The open block is packed once for many reads: a new column, new series, a source
    that goes, a late batch that takes its markers' place, renumbered ids."""
    now = [1000.0]
    history = History(retention=100, clock=lambda: now[0])
    changes: list[tuple[str, dict[bytes, float]]] = [
        ("record", {A: 1.0, B: 2.0}),
        ("record", {A: 3.0, B: 4.0}),
        ("record", {A: 5.0, B: 6.0, KEYS[0]: 7.0}),  # a new series: a new row
        ("forget", {}),  # the source goes: a column of markers
        ("late", {A: 8.0, KEYS[0]: 9.0}),  # its backlog takes the markers' place
        ("record", {A: 10.0}),
        ("trim", {}),  # B's points go: the ids are renumbered
        ("record", {A: 11.0, KEYS[1]: 12.0}),
    ]
    for what, series in changes:
        if what == "forget":
            history.forget("n1", "", kept=set())
        elif what == "trim":
            now[0] += 150
            history.trim()
        else:
            now[0] += 15
            t = now[0] - (10 if what == "late" else 0)
            history.record("n1", series, sampled=t)
        for query in ("m", "sum(m)", 'm{pod="a"}'):
            got = range_query(query, now[0] - 60, now[0], 5, history, lookback=30)
            want = range_query(query, now[0] - 60, now[0], 5, EveryPoint(history), lookback=30)
            assert by_step(got) == by_step(want), (what, query)


def test_a_packed_batch_is_recorded_as_its_mapping_would_be() -> None:
    packed, plain = History(), History()
    for t, series in enumerate(({A: 1.0, B: 2.0}, {A: 1.5}, {A: 2.0, B: math.nan}), 1):
        keys = tuple(series)
        packed.record("n1", Series(keys, array("d", series.values())), sampled=float(t))
        plain.record("n1", dict(series), sampled=float(t))
    assert same(points(packed), points(plain))
    assert packed.points == plain.points


def test_an_axis_without_the_wanted_series_changes_nothing_of_a_read() -> None:
    """Every node also has the collector's own series about it, on an axis of their own."""
    alone, beside = History(), History()
    for t in range(1, 40):
        batch = {A: float(t), B: float(-t)} if t % 7 else {A: float(t)}
        alone.record("n1", batch, sampled=float(t), source="monitor")
        beside.record("n1", batch, sampled=float(t), source="monitor")
        beside.record("n1", {b'up{source="m"}': 1.0}, sampled=t + 0.5, source="self")
    wanted = Matcher.of("__name__", "=", "m")
    assert same(points(beside, wanted), points(alone, wanted))
    assert same(points(beside, wanted, start=30, end=35), points(alone, wanted, start=30, end=35))
    assert lookups(beside, [20.0, 39.0, 39.5]) == lookups(alone, [20.0, 39.0, 39.5])
    assert "n1//up" in points(beside), "the own series are still read where asked"


@settings(max_examples=40, deadline=None)
@given(
    steps=one_source,
    nodes=st.lists(st.tuples(st.integers(0, 60), st.floats(0, 14.9)), min_size=2, max_size=5),
    window=st.tuples(st.floats(0, 1.1), st.floats(0, 1.1)),
    ns=st.sampled_from((None, "a")),
)
def test_a_range_read_of_many_nodes_at_once_gives_each_node_s_own_grid(
    steps: list[tuple[float, frozenset[bytes], dict[bytes, float], bool, bool]],
    nodes: list[tuple[int, float]],
    window: tuple[float, float],
    ns: str | None,
) -> None:
    """A range selector reads the nodes' runs in one pass (``gridded``): each node's
    series, times and cells (readings, markers, NaN readings apart) are its own grid's."""
    history, end = one_source_history(
        {f"n{i}": (first, offset) for i, (first, offset) in enumerate(nodes)}, steps
    )
    start, stop = sorted(1000.0 + w * (end - 1000.0) for w in window)  # a part, or past the end
    matchers = [Matcher("ns", "=", ns)] if ns else []

    def cells(times: Any, labels: Any, values: Any) -> list[tuple[Any, ...]]:
        bits = np.asarray(values).view(np.uint64).tolist()
        return sorted(
            (tuple(sorted(dict(lab).items())), tuple(np.asarray(times).tolist()), tuple(row))
            for lab, row in zip(labels, bits, strict=True)
        )

    got = [
        c
        for group in history.select(matchers, start, stop)
        for c in cells(group.times, group.labels, group.values)
    ]
    want = []
    for state, mask in history._wanted(matchers):
        grid = state.grid(mask, start, stop)
        if grid is not None:
            ids, times, values = grid
            want += cells(times, state.label_sets(ids), values)
    assert sorted(got) == sorted(want)
