"""The PromQL evaluator on small hand-written series with exact expected results."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from collector.promql.query import instant_query, range_query
from collector.promql.values import Element, QueryError, RangeSeries, Scalar, String
from collector.tsdb.series import ABSENT, STALE, Columns, LabelSet, Lookup, Matcher


class MemoryStorage:
    """A :class:`~collector.tsdb.series.Queryable` over series given as point lists.

    Series whose points in the window have the same times come as one group,
    so the evaluator's grouped path is exercised, with plain dicts for labels;
    ``spread`` lays every series out on the union of its group's times instead
    (absent points where it has none) with :class:`LabelSet` labels, the other
    shapes a storage may hand out.
    """

    def __init__(self, spread: bool = False) -> None:
        self.series: list[tuple[dict[str, str], list[float], list[float]]] = []
        self.selects = 0
        self.spread = spread

    def add(self, labels: Mapping[str, str], points: Iterable[tuple[float, float]]) -> None:
        """Add one series; ``points`` are ``(unix seconds, value)``, oldest first."""
        pts = list(points)
        kept = LabelSet(labels) if self.spread else dict(labels)
        self.series.append((kept, [t for t, _ in pts], [v for _, v in pts]))

    def _matching(
        self, matchers: Sequence[Matcher], start: float, end: float
    ) -> Iterable[tuple[dict[str, str], list[float], list[float]]]:
        for labels, times, values in self.series:
            if all(m.matches(labels) for m in matchers):
                lo, hi = bisect_left(times, start), bisect_right(times, end)
                if hi > lo:
                    yield labels, times[lo:hi], values[lo:hi]

    def select(
        self,
        matchers: Sequence[Matcher],
        start: float,
        end: float,
        newest: bool = False,
        lookup: Lookup | None = None,
    ) -> Iterable[Columns]:
        self.selects += 1
        found = list(self._matching(matchers, start, end))
        if self.spread:
            return [_spread(found)] if found else []
        groups: dict[tuple[float, ...], list[tuple[dict[str, str], list[float]]]] = {}
        for labels, times, values in found:
            groups.setdefault(tuple(times), []).append((labels, values))
        return [
            Columns(np.array(times), [labels for labels, _ in rows], np.array([v for _, v in rows]))
            for times, rows in groups.items()
        ]

    def label_names(self, matchers: Sequence[Matcher], start: float, end: float) -> set[str]:
        return {name for labels, _, _ in self._matching(matchers, start, end) for name in labels}

    def label_values(
        self, name: str, matchers: Sequence[Matcher], start: float, end: float
    ) -> set[str]:
        return {
            labels[name] for labels, _, _ in self._matching(matchers, start, end) if name in labels
        }


def _spread(found: list[tuple[dict[str, str], list[float], list[float]]]) -> Columns:
    """Every series on the union of their times, ABSENT where one has no point."""
    axis = sorted({t for _, times, _ in found for t in times})
    where = {t: i for i, t in enumerate(axis)}
    values = np.full((len(found), len(axis)), ABSENT)
    for row, (_, times, vals) in enumerate(found):
        values[row, [where[t] for t in times]] = vals
    return Columns(np.array(axis), [labels for labels, _, _ in found], values)


# --- the data: every series sampled every 15 s over [0, 600] unless said ---

TIMES = [float(t) for t in range(0, 601, 15)]
T = 600.0


def series(name: str, **labels: str) -> dict[str, str]:
    return {"__name__": name, **labels}


@pytest.fixture(params=[False, True], ids=["grouped", "spread"])
def db(request: pytest.FixtureRequest) -> MemoryStorage:
    s = MemoryStorage(spread=request.param)
    s.add(series("mem", node="n1", pod="p1"), [(t, 10.0) for t in TIMES])
    s.add(series("mem", node="n1", pod="p2"), [(t, 20.0) for t in TIMES])
    s.add(series("mem", node="n2", pod="p3"), [(t, 30.0) for t in TIMES])
    s.add(series("memcopy", node="n1", pod="p1"), [(t, 1.0) for t in TIMES])
    s.add(series("cap", node="n1", zone="z1"), [(t, 100.0) for t in TIMES])
    s.add(series("cap", node="n2", zone="z2"), [(t, 50.0) for t in TIMES])
    s.add(series("req_total", path="/a"), [(t, t * 2 / 3) for t in TIMES])  # +10 per 15 s
    s.add(
        series("req_total", path="/b"),  # a counter reset at 60
        [(0.0, 0.0), (15.0, 10.0), (30.0, 20.0), (45.0, 30.0), (60.0, 5.0), (75.0, 15.0)],
    )
    s.add(series("ramp"), [(t, t) for t in TIMES])
    # Ends with a staleness marker at 105 (it vanished from its source).
    s.add(series("gone", pod="x"), [*[(float(t), 5.0) for t in range(0, 91, 15)], (105.0, STALE)])
    # Vanishes at 15, comes back at 30.
    s.add(series("back", pod="y"), [(0.0, 1.0), (15.0, STALE), (30.0, 2.0)])
    return s


Key = frozenset[tuple[str, str]]


def vec(query: str, db: MemoryStorage, at: float = T, lookback: float = 300.0) -> dict[Key, float]:
    """An instant query's vector as {label set: value} (order ignored)."""
    result = instant_query(query, at, db, lookback)
    assert isinstance(result, list)
    out: dict[Key, float] = {}
    for s in result:
        assert isinstance(s, Element)
        out[frozenset(s.labels.items())] = s.value
    assert len(out) == len(result)
    return out


def ordered(query: str, db: MemoryStorage, at: float = T) -> list[tuple[dict[str, str], float]]:
    result = instant_query(query, at, db)
    assert isinstance(result, list)
    return [(s.labels, s.value) for s in result if isinstance(s, Element)]


def L(**labels: str) -> Key:  # a label set
    return frozenset(labels.items())


def M(name: str, **labels: str) -> Key:
    return frozenset({"__name__": name, **labels}.items())


def scalar(query: str, db: MemoryStorage, at: float = T) -> float:
    result = instant_query(query, at, db)
    assert isinstance(result, Scalar)
    return result.value


def error(query: str, db: MemoryStorage, at: float = T) -> QueryError:
    with pytest.raises(QueryError) as info:
        instant_query(query, at, db)
    return info.value


# --- selectors, lookback, staleness, offset ---


def test_label_matchers(db: MemoryStorage) -> None:
    assert vec('mem{node="n1"}', db) == {
        M("mem", node="n1", pod="p1"): 10,
        M("mem", node="n1", pod="p2"): 20,
    }
    assert vec('mem{node!="n1"}', db) == {M("mem", node="n2", pod="p3"): 30}
    assert vec('mem{pod=~"p[12]", node=~"n."}', db).keys() == {
        M("mem", node="n1", pod="p1"),
        M("mem", node="n1", pod="p2"),
    }
    assert vec('mem{pod!~"p[12]"}', db) == {M("mem", node="n2", pod="p3"): 30}
    assert vec('{__name__=~"mem|cap", node="n2"}', db) == {
        M("mem", node="n2", pod="p3"): 30,
        M("cap", node="n2", zone="z2"): 50,
    }
    assert vec('mem{missing=""}', db).keys() == vec("mem", db).keys()  # absent label = ""


def test_instant_selector_takes_the_newest_point_at_or_before_t(db: MemoryStorage) -> None:
    assert vec("ramp", db, at=37.0) == {M("ramp"): 30.0}
    assert vec("ramp", db, at=45.0) == {M("ramp"): 45.0}


def test_lookback_expiry(db: MemoryStorage) -> None:
    assert vec("ramp", db, at=T + 300) == {M("ramp"): 600.0}  # both ends included (2.x)
    assert vec("ramp", db, at=T + 300.001) == {}
    assert vec("ramp", db, at=T + 30, lookback=20.0) == {}
    assert vec("ramp", db, at=T + 30, lookback=30.0) == {M("ramp"): 600.0}


def test_a_stale_series_is_gone_at_once(db: MemoryStorage) -> None:
    assert vec("gone", db, at=104.0) == {M("gone", pod="x"): 5.0}
    for at in (105.0, 120.0, 200.0, 390.0):
        assert vec("gone", db, at=at) == {}, at
    assert vec("back", db, at=10.0) == {M("back", pod="y"): 1.0}
    assert vec("back", db, at=20.0) == {}
    assert vec("back", db, at=30.0) == {M("back", pod="y"): 2.0}


def test_range_selections_skip_staleness_markers(db: MemoryStorage) -> None:
    assert vec("count_over_time(gone[5m])", db, at=200.0) == {L(pod="x"): 7.0}
    assert vec("count_over_time(back[1m])", db, at=30.0) == {L(pod="y"): 2.0}


def test_offset(db: MemoryStorage) -> None:
    assert vec("ramp offset 1m", db) == {M("ramp"): 540.0}
    assert vec("ramp offset 10m", db) == {M("ramp"): 0.0}
    assert vec("ramp offset -1m", db, at=300.0) == {M("ramp"): 360.0}
    assert vec("sum_over_time(ramp[30s] offset 1m)", db) == {L(): 510.0 + 525.0 + 540.0}


def test_top_level_range_selector_is_a_matrix(db: MemoryStorage) -> None:
    result = instant_query("ramp[1m]", T, db)
    assert result == [
        RangeSeries(
            {"__name__": "ramp"},
            [(540.0, 540.0), (555.0, 555.0), (570.0, 570.0), (585.0, 585.0), (600.0, 600.0)],
        )
    ]
    # Both ends are included; staleness markers are not points.
    result = instant_query("gone[1m]", 105.0, db)
    assert result == [
        RangeSeries(
            {"__name__": "gone", "pod": "x"}, [(45.0, 5.0), (60.0, 5.0), (75.0, 5.0), (90.0, 5.0)]
        )
    ]


# --- literals and scalars ---


def test_literals(db: MemoryStorage) -> None:
    assert scalar("1+1", db) == 2.0
    assert scalar("-(3)", db) == -3.0
    assert scalar("2 ^ 3 ^ 2", db) == 512.0
    assert scalar("7 % 3 - 10 / 4", db) == 1 - 2.5
    assert scalar("1 / 0", db) == math.inf
    assert scalar("-1 / 0", db) == -math.inf
    assert math.isnan(scalar("0 / 0", db))
    assert math.isnan(scalar("5 % 0", db))
    assert scalar("0 ^ -1", db) == math.inf
    assert math.isnan(scalar("(-8) ^ 0.5", db))
    assert scalar("2 > bool 1", db) == 1.0
    assert scalar("time()", db) == T
    assert scalar("-time() + 1", db) == 1 - T
    assert instant_query('"hello"', T, db) == String("hello")


# --- aggregation ---


def test_aggregations(db: MemoryStorage) -> None:
    assert vec("sum by (node) (mem)", db) == {L(node="n1"): 30.0, L(node="n2"): 30.0}
    assert vec("sum without (pod) (mem)", db) == {L(node="n1"): 30.0, L(node="n2"): 30.0}
    assert vec("sum(mem) by (__name__)", db) == {L(__name__="mem"): 60.0}
    assert vec("avg(mem)", db) == {L(): 20.0}
    assert vec("min by (node) (mem)", db) == {L(node="n1"): 10.0, L(node="n2"): 30.0}
    assert vec("max(mem)", db) == {L(): 30.0}
    assert vec("count without (node, pod) (mem)", db) == {L(): 3.0}
    assert vec("group by (node) (mem)", db) == {L(node="n1"): 1.0, L(node="n2"): 1.0}
    assert vec("stdvar(mem)", db) == {L(): pytest.approx(200 / 3)}
    assert vec("stddev by (node) (mem)", db) == {L(node="n1"): 5.0, L(node="n2"): 0.0}
    assert vec("quantile(0.5, mem)", db) == {L(): 20.0}
    assert vec("quantile(0.9, mem)", db) == {L(): pytest.approx(28.0)}
    assert vec("quantile(2, mem)", db) == {L(): math.inf}
    assert vec("sum(nope)", db) == {}


def answers(query: str, db: MemoryStorage) -> list[Any]:
    """A range query's series and every instant query at its steps, in answer order, NaN
    equal to NaN."""
    ranged = range_query(query, 0, 30, 10, db, lookback=5)
    out: list[Any] = [(sorted(s.labels.items()), repr(s.points)) for s in ranged]
    for at in (0, 10, 20, 30):
        found = instant_query(query, at, db, lookback=5)
        assert isinstance(found, list)
        out.append(
            [(sorted(e.labels.items()), repr(e.value)) for e in found if isinstance(e, Element)]
        )
    return out


cell = st.sampled_from(
    [None, None, None, math.nan, math.nan, 0.0, 1.0, 1.0, 2.0, -math.inf, math.inf]
)


def prometheus_top(elements: list[tuple[str, float]], k: int, bottom: bool) -> list[str]:
    """What Prometheus 2.42 answers for ``topk``/``bottomk`` of one group at one step, in order.

    Written from its promql/engine.go (``aggregation``: the heap of ``vectorByValueHeap`` or
    ``vectorByReverseValueHeap`` fed element by element) over Go 1.19's container/heap
    (``up``, ``down``, ``Pop`` swapping the root to the end), then ``sort.Sort(sort.Reverse(...))``,
    which is insertion sort up to 12 elements: ``elements`` in the vector's order.
    """

    def less(a: tuple[str, float], b: tuple[str, float]) -> bool:
        return math.isnan(a[1]) or (a[1] > b[1] if bottom else a[1] < b[1])

    def swap(i: int, j: int) -> None:
        heap[i], heap[j] = heap[j], heap[i]

    heap: list[tuple[str, float]] = []
    for element in elements if k >= 1 else []:
        if not heap:
            heap.append(element)
            continue
        root = heap[0][1]
        if (
            len(heap) < k
            or (root > element[1] if bottom else root < element[1])
            or math.isnan(root)
        ):
            if len(heap) == k:
                if k == 1:
                    heap[0] = element
                    continue
                swap(0, len(heap) - 1)
                i, n = 0, len(heap) - 1
                while 2 * i + 1 < n:  # down
                    j = 2 * i + 1
                    if j + 1 < n and less(heap[j + 1], heap[j]):
                        j += 1
                    if not less(heap[j], heap[i]):
                        break
                    swap(i, j)
                    i = j
                heap.pop()
            heap.append(element)
            j = len(heap) - 1
            while j > 0 and less(heap[j], heap[(j - 1) // 2]):  # up
                swap(j, (j - 1) // 2)
                j = (j - 1) // 2
    assert len(heap) <= 12
    for i in range(1, len(heap)):  # insertion sort by the reverse order
        j = i
        while j > 0 and less(heap[j - 1], heap[j]):
            swap(j, j - 1)
            j -= 1
    return [name for name, _ in heap]


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.lists(cell, min_size=4, max_size=4), min_size=1, max_size=30),
    k=st.integers(0, 10),
    op=st.sampled_from(["topk", "bottomk"]),
)
@example(rows=[[math.nan, 1.0, 1.0, 1.0], *[[None, 2.0, 2.0, 2.0]] * 6], k=1, op="topk")
@example(rows=[[1.0] * 4, [1.0] * 4, [5.0] * 4], k=2, op="topk")
def test_topk_keeps_and_orders_what_prometheus_heap_does(
    rows: list[list[float | None]], k: int, op: str
) -> None:
    """Ties, NaNs, infinities, absent points, steps with fewer than ``k`` numbers, a ``k`` that
    changes with the step: each step's series, and an instant query's order, are the model's."""
    db = MemoryStorage()
    for i, row in enumerate(rows):
        points = [(10.0 * step, v) for step, v in enumerate(row) if v is not None]
        db.add({"__name__": "m", "i": f"{i:02}"}, points)
    query = f"{op}({k} + time() / 10 % 3, m)"
    ranged = range_query(query, 0, 30, 10, db, lookback=5)
    for step in range(4):
        here = [(f"{i:02}", v) for i, row in enumerate(rows) if (v := row[step]) is not None]
        want = prometheus_top(here, k + step % 3, op == "bottomk")
        got = instant_query(query, 10.0 * step, db, lookback=5)
        assert isinstance(got, list)
        assert [e.labels["i"] for e in got if isinstance(e, Element)] == want
        kept = {s.labels["i"] for s in ranged if any(t == 10.0 * step for t, _ in s.points)}
        assert kept == set(want)


def prometheus_fold(values: list[float], mean: bool) -> float:
    """``sum`` (or ``avg``, ``mean``) of one group at one step, as Prometheus 2.42 makes it:
    written from promql/engine.go's ``aggregation``, which takes the group's first element
    as it is, then adds each next one (``group.value += s.V``) or folds it into the mean
    (``group.mean += s.V/n - group.mean/n``, an infinite mean kept against finite values
    and infinities of its sign), in the vector's order."""
    total = values[0]
    for n, v in enumerate(values[1:], start=2):
        if not mean:
            total += v
        elif not (
            math.isinf(total) and (math.isfinite(v) or (math.isinf(v) and (total > 0) == (v > 0)))
        ):
            total += v / n - total / n
    return total


def same_bits(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (
        a == b and math.copysign(1, a) == math.copysign(1, b)
    )


fraction = st.one_of(
    st.none(),
    st.floats(-1000, 1000).map(lambda v: round(v, 3)),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308]),
)


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.lists(fraction, min_size=4, max_size=4), min_size=1, max_size=20))
@example(rows=[[-0.0] * 4])
@example(rows=[[0.1] * 4, [0.2] * 4, [0.3] * 4, [1e308] * 4, [1e308] * 4])
def test_sum_and_avg_make_prometheus_bits(rows: list[list[float | None]]) -> None:
    """Each group's ``sum`` and ``avg`` at each step are the bits of Prometheus' fold over
    its elements in label order: the rows are stored backwards, their groups interleaved,
    so neither the storage's order nor adding by pairs, nor sum over count, gives them."""
    db = MemoryStorage()
    for i, row in reversed(list(enumerate(rows))):
        points = [(10.0 * step, v) for step, v in enumerate(row) if v is not None]
        db.add({"__name__": "m", "g": "ab"[i % 2], "i": f"{i:02}"}, points)
    for op in ("sum", "avg"):
        query = f"{op} by (g) (m)"
        ranged = {
            s.labels["g"]: dict(s.points) for s in range_query(query, 0, 30, 10, db, lookback=5)
        }
        for step in range(4):
            for g in "ab":
                here = [row[step] for i, row in enumerate(rows) if i % 2 == "ab".index(g)]
                values = [v for v in here if v is not None]
                got = ranged.get(g, {}).get(10.0 * step)
                if not values:
                    assert got is None
                    continue
                want = prometheus_fold(values, op == "avg")
                assert got is not None, (op, g, step)
                assert same_bits(got, want), (op, g, step, got, want)
                now = instant_query(query, 10.0 * step, db, lookback=5)
                assert isinstance(now, list)
                found = {e.labels["g"]: e.value for e in now if isinstance(e, Element)}
                assert same_bits(found[g], want), (op, g, step, "instant")


def test_topk_keeps_the_tied_series_its_heap_keeps() -> None:
    """Where a bigger element pops the heap's root, the root is the last of the tied elements
    pushed, not the first: ``topk(2)`` of a=1, b=1, c=5 keeps c and b (a ranking that breaks
    ties by order would keep a); bottomk mirrors it."""
    db = MemoryStorage()
    for name, value in (("a", 1.0), ("b", 1.0), ("c", 5.0)):
        db.add({"__name__": "up", "job": name}, [(0.0, value)])
        db.add({"__name__": "down", "job": name}, [(0.0, -value)])
    assert [labels["job"] for labels, _ in ordered("topk(2, up)", db, at=0)] == ["c", "b"]
    assert [labels["job"] for labels, _ in ordered("bottomk(2, down)", db, at=0)] == ["c", "b"]
    assert {s.labels["job"] for s in range_query("topk(2, up)", 0, 60, 30, db)} == {"c", "b"}


def test_topk_bottomk_keep_labels_and_order(db: MemoryStorage) -> None:
    assert ordered("topk(2, mem)", db) == [
        ({"__name__": "mem", "node": "n2", "pod": "p3"}, 30.0),
        ({"__name__": "mem", "node": "n1", "pod": "p2"}, 20.0),
    ]
    assert ordered("bottomk by (node) (1, mem)", db) == [
        ({"__name__": "mem", "node": "n1", "pod": "p1"}, 10.0),
        ({"__name__": "mem", "node": "n2", "pod": "p3"}, 30.0),
    ]
    assert ordered("topk(0, mem)", db) == []
    assert error("topk(scalar(nope), mem)", db).error_type == "execution"


def test_count_values(db: MemoryStorage) -> None:
    assert vec('count_values("v", mem)', db) == {L(v="10"): 1.0, L(v="20"): 1.0, L(v="30"): 1.0}
    assert vec('count_values by (node) ("v", mem / 4)', db) == {
        L(node="n1", v="2.5"): 1.0,
        L(node="n1", v="5"): 1.0,
        L(node="n2", v="7.5"): 1.0,
    }
    assert vec('count_values("v", vector(1e21))', db) == {L(v="1000000000000000000000"): 1.0}
    assert error('count_values("a-b", mem)', db).message == 'invalid label name "a-b"'


# --- binary operators ---


def test_vector_scalar_arithmetic_drops_the_name(db: MemoryStorage) -> None:
    assert vec("mem * 2", db) == {
        L(node="n1", pod="p1"): 20.0,
        L(node="n1", pod="p2"): 40.0,
        L(node="n2", pod="p3"): 60.0,
    }
    assert vec("100 - mem{pod='p1'}", db) == {L(node="n1", pod="p1"): 90.0}
    assert vec("-mem{pod='p1'}", db) == {L(node="n1", pod="p1"): -10.0}
    assert vec("mem{pod='p1'} / 0", db) == {L(node="n1", pod="p1"): math.inf}


def test_comparisons_filter_or_return_bool(db: MemoryStorage) -> None:
    assert vec("mem > 15", db) == {
        M("mem", node="n1", pod="p2"): 20.0,
        M("mem", node="n2", pod="p3"): 30.0,
    }
    assert vec("15 < mem", db) == vec("mem > 15", db)  # the vector's value either way
    assert vec("mem == bool 20", db) == {
        L(node="n1", pod="p1"): 0.0,
        L(node="n1", pod="p2"): 1.0,
        L(node="n2", pod="p3"): 0.0,
    }
    assert vec("mem{pod='p1'} != 10", db) == {}
    assert vec("mem >= on (node) group_left cap / 5", db) == {
        M("mem", node="n1", pod="p2"): 20.0,
        M("mem", node="n2", pod="p3"): 30.0,
    }
    assert vec("mem{pod='p3'} <= bool on (node) cap", db) == {L(node="n2"): 1.0}


def test_one_to_one_matching(db: MemoryStorage) -> None:
    assert vec("mem{pod='p3'} + on (node) cap", db) == {L(node="n2"): 80.0}
    assert vec("mem{pod='p3'} - ignoring (pod, zone) cap", db) == {L(node="n2"): -20.0}
    assert vec("mem{pod='p1'} / mem{pod='p1'}", db) == {L(node="n1", pod="p1"): 1.0}
    assert vec("mem / cap", db) == {}  # label sets differ: no match


def test_many_to_one_and_one_to_many(db: MemoryStorage) -> None:
    assert vec("mem / on (node) group_left cap", db) == {
        L(node="n1", pod="p1"): 0.1,
        L(node="n1", pod="p2"): 0.2,
        L(node="n2", pod="p3"): 0.6,
    }
    assert vec("mem * on (node) group_left (zone) cap", db) == {
        L(node="n1", pod="p1", zone="z1"): 1000.0,
        L(node="n1", pod="p2", zone="z1"): 2000.0,
        L(node="n2", pod="p3", zone="z2"): 1500.0,
    }
    assert vec("cap - on (node) group_right mem", db) == {
        L(node="n1", pod="p1"): 90.0,
        L(node="n1", pod="p2"): 80.0,
        L(node="n2", pod="p3"): 20.0,
    }


def test_matching_errors(db: MemoryStorage) -> None:
    err = error("mem * on (node) mem", db)
    assert err.error_type == "execution"
    assert err.message == (
        'found duplicate series for the match group {node="n1"} on the right hand-side of the operation: '
        '[{__name__="mem", node="n1", pod="p2"}, {__name__="mem", node="n1", pod="p1"}]'
        ";many-to-many matching not allowed: matching labels must be unique on one side"
    )
    assert "on the left hand-side" in error("mem * on (node) group_right mem", db).message
    assert error("mem + on (node) cap", db).message == (
        "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)"
    )
    assert error('{__name__=~"mem|memcopy"} * on (node) group_left cap', db).message == (
        "multiple matches for labels: grouping labels must ensure unique matches"
    )
    # Nothing on one side: nothing to match, no error (as Prometheus).
    assert vec("mem * on (node) nope", db) == {}


def test_same_labelset_errors(db: MemoryStorage) -> None:
    for query in (
        '{__name__=~"mem|memcopy"} * 2',
        '-{__name__=~"mem|memcopy"}',
        'rate({__name__=~"mem|memcopy"}[1m])',
        'label_replace(mem, "pod", "", "node", ".*")',
    ):
        err = error(query, db)
        assert (err.error_type, err.message) == (
            "execution",
            "vector cannot contain metrics with the same labelset",
        ), query
    assert len(vec('last_over_time({__name__=~"mem|memcopy"}[1m])', db)) == 4  # keeps names


def test_set_operators(db: MemoryStorage) -> None:
    assert vec("mem and on (node) cap{node='n1'}", db).keys() == {
        M("mem", node="n1", pod="p1"),
        M("mem", node="n1", pod="p2"),
    }
    assert vec("mem unless on (node) cap{node='n1'}", db).keys() == {M("mem", node="n2", pod="p3")}
    assert vec("mem{pod='p1'} or mem{pod='p2'}", db).keys() == {
        M("mem", node="n1", pod="p1"),
        M("mem", node="n1", pod="p2"),
    }
    assert len(vec("cap or mem", db)) == 5
    assert vec("mem{pod='p1'} or memcopy", db) == {M("mem", node="n1", pod="p1"): 10.0}
    assert vec("mem and nope", db) == {}
    assert len(vec("mem unless nope", db)) == 3


# --- functions ---


def test_math_functions(db: MemoryStorage) -> None:
    assert vec("abs(-mem{pod='p1'})", db) == {L(node="n1", pod="p1"): 10.0}
    assert vec("ceil(ramp / 7)", db) == {L(): 86.0}
    assert vec("floor(ramp / 7)", db) == {L(): 85.0}
    assert vec("round(ramp / 7)", db) == {L(): 86.0}
    assert vec("round(ramp, 7)", db) == {L(): pytest.approx(602.0)}
    assert vec("round(vector(-2.5))", db) == {L(): -2.0}
    assert vec("round(vector(2.5))", db) == {L(): 3.0}
    assert vec("exp(vector(0))", db) == {L(): 1.0}
    assert vec("ln(vector(1))", db) == {L(): 0.0}
    assert vec("ln(vector(0))", db) == {L(): -math.inf}
    assert math.isnan(vec("ln(vector(-1))", db)[L()])
    assert vec("log2(vector(8))", db) == {L(): 3.0}
    assert vec("log10(vector(1000))", db) == {L(): 3.0}
    assert vec("sqrt(vector(16))", db) == {L(): 4.0}
    assert math.isnan(vec("sqrt(vector(-1))", db)[L()])


def test_clamp(db: MemoryStorage) -> None:
    assert vec("clamp(mem, 15, 25)", db) == {
        L(node="n1", pod="p1"): 15.0,
        L(node="n1", pod="p2"): 20.0,
        L(node="n2", pod="p3"): 25.0,
    }
    assert vec("clamp(mem, 25, 15)", db) == {}
    assert sorted(vec("clamp_min(mem, 15)", db).values()) == [15.0, 20.0, 30.0]
    assert sorted(vec("clamp_max(mem, 15)", db).values()) == [10.0, 15.0, 15.0]


def test_label_replace_and_join(db: MemoryStorage) -> None:
    assert vec('label_replace(mem{pod="p1"}, "n", "<$1>", "node", "n(.*)")', db) == {
        M("mem", node="n1", pod="p1", n="<1>"): 10.0
    }
    assert vec('label_replace(mem{pod="p1"}, "n", "${1}x$2", "node", "(?P<a>n)(1)")', db) == {
        M("mem", node="n1", pod="p1", n="nx1"): 10.0
    }
    # No match: unchanged. Empty result: the label is removed.
    assert vec('label_replace(mem{pod="p1"}, "n", "$1", "node", "x(.*)")', db) == {
        M("mem", node="n1", pod="p1"): 10.0
    }
    assert vec('label_replace(mem{pod="p1"}, "pod", "", "node", ".*")', db) == {
        M("mem", node="n1"): 10.0
    }
    assert vec('label_join(mem{pod="p1"}, "id", "/", "node", "pod")', db) == {
        M("mem", node="n1", pod="p1", id="n1/p1"): 10.0
    }
    assert error('label_replace(mem, "a-b", "", "node", ".*")', db).error_type == "execution"


def test_time_functions(db: MemoryStorage) -> None:
    assert vec("timestamp(mem{pod='p1'})", db, at=607.0) == {L(node="n1", pod="p1"): 600.0}
    assert vec("timestamp(mem{pod='p1'} * 1)", db, at=607.0) == {L(node="n1", pod="p1"): 607.0}
    assert vec("vector(time())", db, at=607.0) == {L(): 607.0}


def test_vector_and_scalar(db: MemoryStorage) -> None:
    assert vec("vector(3)", db) == {L(): 3.0}
    assert math.isnan(scalar("scalar(mem)", db))
    assert scalar("scalar(mem{pod='p1'})", db) == 10.0
    assert vec("mem{pod='p1'} + scalar(mem{pod='p2'})", db) == {L(node="n1", pod="p1"): 30.0}


def test_sort(db: MemoryStorage) -> None:
    assert [labels["pod"] for labels, _ in ordered("sort(mem)", db)] == ["p1", "p2", "p3"]
    assert [labels["pod"] for labels, _ in ordered("sort_desc(mem)", db)] == ["p3", "p2", "p1"]
    assert ordered("sort(mem)", db)[0][0]["__name__"] == "mem"


def test_absent(db: MemoryStorage) -> None:
    assert vec("absent(mem)", db) == {}
    assert vec("absent(nope)", db) == {L(): 1.0}
    assert vec('absent(nope{a="b", c=~"d", e="f", e="g"})', db) == {L(a="b"): 1.0}
    assert vec("absent(sum(nope))", db) == {L(): 1.0}


def test_rate_increase_delta(db: MemoryStorage) -> None:
    a = '{path="/a"}'
    assert vec(f"increase(req_total{a}[1m])", db) == {L(path="/a"): pytest.approx(40.0)}
    assert vec(f"rate(req_total{a}[1m])", db) == {L(path="/a"): pytest.approx(40 / 60)}
    # Off-grid: 4 points cover 45 s of the 60 s window and are extrapolated to it.
    assert vec(f"increase(req_total{a}[1m])", db, at=607.5) == {L(path="/a"): pytest.approx(40.0)}
    # Extrapolation stops at the counter's zero point.
    assert vec(f"increase(req_total{a}[1m])", db, at=37.5) == {L(path="/a"): pytest.approx(25.0)}
    # A counter reset adds the value before it.
    b = '{path="/b"}'
    assert vec(f"increase(req_total{b}[75s])", db, at=75.0) == {L(path="/b"): pytest.approx(45.0)}
    assert vec(f"irate(req_total{b}[1m])", db, at=75.0) == {L(path="/b"): pytest.approx(10 / 15)}
    assert vec(f"irate(req_total{b}[1m])", db, at=60.0) == {L(path="/b"): pytest.approx(5 / 15)}
    assert vec("delta(ramp[1m])", db) == {L(): pytest.approx(60.0)}
    assert vec("deriv(ramp[5m])", db) == {L(): pytest.approx(1.0)}
    assert vec("deriv(mem{pod='p1'}[5m])", db) == {L(node="n1", pod="p1"): 0.0}
    assert vec("rate(ramp[10s])", db) == {}  # one point: no rate


def test_over_time(db: MemoryStorage) -> None:
    assert vec("avg_over_time(ramp[1m])", db) == {L(): 570.0}
    assert vec("min_over_time(ramp[1m])", db) == {L(): 540.0}
    assert vec("max_over_time(ramp[1m])", db) == {L(): 600.0}
    assert vec("sum_over_time(ramp[1m])", db) == {L(): 2850.0}
    assert vec("count_over_time(ramp[1m])", db) == {L(): 5.0}
    assert vec("last_over_time(ramp[1m])", db) == {M("ramp"): 600.0}
    assert vec("quantile_over_time(0.5, ramp[1m])", db) == {L(): 570.0}
    assert vec("stdvar_over_time(ramp[1m])", db) == {L(): pytest.approx(450.0)}
    assert vec("stddev_over_time(ramp[1m])", db) == {L(): pytest.approx(math.sqrt(450.0))}
    assert vec("present_over_time(ramp[1m])", db) == {L(): 1.0}
    assert vec("avg_over_time(ramp[1m])", db, at=T + 61) == {}


# --- range queries ---


def test_range_query_steps_and_shapes(db: MemoryStorage) -> None:
    assert range_query("mem{pod='p1'}", 500, 700, 100, db) == [
        RangeSeries(
            {"__name__": "mem", "node": "n1", "pod": "p1"},
            [(500.0, 10.0), (600.0, 10.0), (700.0, 10.0)],
        )
    ]
    assert range_query("time()", 0, 40, 15, db) == [
        RangeSeries({}, [(0.0, 0.0), (15.0, 15.0), (30.0, 30.0)])
    ]
    # Series come sorted by labels; a series is only where it has values.
    result = range_query("mem > 15 or ramp < 30", 0, 30, 15, db)
    assert [(s.labels, len(s.points)) for s in result] == [
        ({"__name__": "mem", "node": "n1", "pod": "p2"}, 3),
        ({"__name__": "mem", "node": "n2", "pod": "p3"}, 3),
        ({"__name__": "ramp"}, 2),
    ]


def test_range_query_staleness(db: MemoryStorage) -> None:
    assert range_query("gone", 0, 300, 15, db) == [
        RangeSeries({"__name__": "gone", "pod": "x"}, [(float(t), 5.0) for t in range(0, 91, 15)])
    ]
    assert range_query("back", 0, 45, 5, db)[0].points == [
        (0.0, 1.0),
        (5.0, 1.0),
        (10.0, 1.0),
        (30.0, 2.0),
        (35.0, 2.0),
        (40.0, 2.0),
        (45.0, 2.0),
    ]


def test_range_query_reads_each_selector_once(db: MemoryStorage) -> None:
    db.selects = 0
    result = range_query(
        "sum by (node) (rate(req_total[1m])) + on () group_left count(mem)", 0, 600, 5, db
    )
    assert db.selects == 2
    assert result
    # Each step of a range query is the instant query at that time.
    ranged = range_query("rate(req_total[1m])", 300, 450, 150, db)
    for series in ranged:
        for t, v in series.points:
            assert instant_query("rate(req_total[1m])", t, db) == [Element(series.labels, v)]
    assert [s.labels for s in ranged] == [{"path": "/a"}]
    assert [t for t, _ in ranged[0].points] == [300.0, 450.0]
    assert [v for _, v in ranged[0].points] == pytest.approx([2 / 3, 2 / 3])


def test_range_query_bad_parameters(db: MemoryStorage) -> None:
    for args in ((0, 10, 0), (10, 0, 1), (0, 11001, 1)):
        with pytest.raises(QueryError) as info:
            range_query("mem", *args, db)
        assert info.value.error_type == "bad_data"
    assert len(range_query("vector(1)", 0, 11000, 1, db)[0].points) == 11001
    for query in ("mem[5m]", '"s"'):
        with pytest.raises(QueryError) as info:
            range_query(query, 0, 10, 1, db)
        assert info.value.error_type == "bad_data"


# --- errors ---


@pytest.mark.parametrize(
    "query", ["sum(", "mem{", "rate(mem)", "1 > 2", "mem +", "foo(mem)", "mem{a=~'('}"]
)
def test_bad_syntax_is_bad_data(db: MemoryStorage, query: str) -> None:
    err = error(query, db)
    assert err.error_type == "bad_data"
    assert err.message


@pytest.mark.parametrize(
    ("query", "feature"),
    [
        ("histogram_count(mem)", "native histogram function histogram_count"),
        ("histogram_sum(mem)", "native histogram function histogram_sum"),
        ("histogram_fraction(0, 1, mem)", "native histogram function histogram_fraction"),
        ("mad_over_time(mem[5m])", "function mad_over_time"),
        ("histogram_avg(mem)", "function histogram_avg"),
        ("histogram_stddev(mem)", "function histogram_stddev"),
        ("mem @ -100", "@ modifier before 1970"),
        ("limitk(1, mem)", "aggregation limitk"),
        ("limit_ratio(0.5, mem)", "aggregation limit_ratio"),
        ("mem + fill(0) cap", "fill modifiers"),
        ("sort_by_label(mem, 'pod')", "function sort_by_label"),
    ],
)
def test_unsupported_is_execution_naming_the_feature(
    db: MemoryStorage, query: str, feature: str
) -> None:
    db.selects = 0
    err = error(query, db)
    assert (err.error_type, err.message) == ("execution", f"unsupported: {feature}")
    assert db.selects == 0  # refused before reading anything


def test_timeout() -> None:
    class Slow(MemoryStorage):
        def select(
            self,
            matchers: Sequence[Matcher],
            start: float,
            end: float,
            newest: bool = False,
            lookup: Lookup | None = None,
        ) -> Iterable[Columns]:
            import time

            time.sleep(0.05)  # the slowness under test: a select outlasting the query's timeout
            return super().select(matchers, start, end, newest)

    with pytest.raises(QueryError) as info:
        instant_query("up", 0, Slow(), timeout=0.01)
    assert info.value.error_type == "timeout"


def test_identical_selectors_are_read_once(db: MemoryStorage) -> None:
    db.selects = 0
    assert vec("mem{pod='p1'} / mem{pod='p1'}", db) == {L(node="n1", pod="p1"): 1.0}
    assert db.selects == 1


# --- subqueries, @, and the functions of the vectorised engine ---


def test_subqueries(db: MemoryStorage) -> None:
    # Steps at multiples of 10 s in [540, 600]: ramp's newest points at or before each.
    assert vec("max_over_time(ramp[1m:10s])", db) == {L(): 600.0}
    assert vec("count_over_time(ramp[1m:10s])", db) == {L(): 7.0}
    assert vec("sum_over_time(ramp[1m:10s])", db) == {L(): 540 + 540 + 555 + 570 + 570 + 585 + 600}
    assert vec("sum_over_time(ramp[30s:15s] offset 1m)", db) == {L(): 510.0 + 525.0 + 540.0}
    assert vec("count_over_time(ramp[5m:])", db) == {L(): 6.0}  # default step: one minute
    assert vec("max_over_time(sum(mem)[2m:1m])", db) == {L(): 60.0}
    assert vec('rate(req_total{path="/a"}[1m:15s])', db) == {L(path="/a"): pytest.approx(2 / 3)}
    assert instant_query("ramp[30s:15s]", T, db) == [
        RangeSeries({"__name__": "ramp"}, [(570.0, 570.0), (585.0, 585.0), (600.0, 600.0)])
    ]
    assert instant_query("nope[30s:15s]", T, db) == []
    with pytest.raises(QueryError) as info:
        range_query("ramp[1m:10s]", 0, 60, 10, db)
    assert info.value.error_type == "bad_data"


def test_at_modifier(db: MemoryStorage) -> None:
    assert vec("ramp @ 100", db) == {M("ramp"): 90.0}
    assert vec("ramp @ 100 offset 1m", db) == {M("ramp"): 30.0}
    assert vec("sum_over_time(ramp[30s] @ 60)", db) == {L(): 30.0 + 45.0 + 60.0}
    assert vec("timestamp(ramp @ 100)", db) == {L(): 90.0}
    assert vec("ramp @ 100", db, at=1e6) == {M("ramp"): 90.0}  # whatever the evaluation time
    result = range_query("ramp @ start() + ramp @ end()", 0, 600, 300, db)
    assert result == [RangeSeries({}, [(0.0, 600.0), (300.0, 600.0), (600.0, 600.0)])]
    assert range_query("max_over_time(ramp[1m:30s] @ 120)", 0, 600, 600, db)[0].points == [
        (0.0, 120.0),
        (600.0, 120.0),
    ]


def test_changes_resets_idelta(db: MemoryStorage) -> None:
    b = '{path="/b"}'
    assert vec(f"changes(req_total{b}[2m])", db, at=75.0) == {L(path="/b"): 5.0}
    assert vec(f"resets(req_total{b}[2m])", db, at=75.0) == {L(path="/b"): 1.0}
    assert vec(f"resets(req_total{b}[30s])", db, at=45.0) == {L(path="/b"): 0.0}
    assert vec("changes(mem{pod='p1'}[5m])", db) == {L(node="n1", pod="p1"): 0.0}
    assert vec(f"idelta(req_total{b}[1m])", db, at=60.0) == {L(path="/b"): -25.0}
    assert vec("idelta(ramp[1m])", db) == {L(): 15.0}
    assert vec("idelta(ramp[10s])", db) == {}  # one point


def test_predict_linear_and_holt_winters(db: MemoryStorage) -> None:
    assert vec("predict_linear(ramp[1m], 60)", db) == {L(): pytest.approx(660.0)}
    assert vec("predict_linear(ramp[1m] offset 1m, 0)", db) == {L(): pytest.approx(600.0)}
    assert vec("predict_linear(mem{pod='p1'}[5m], 600)", db) == {L(node="n1", pod="p1"): 10.0}
    # Double exponential smoothing follows a straight line exactly.
    assert vec("holt_winters(ramp[1m], 0.5, 0.5)", db) == {L(): pytest.approx(600.0)}
    assert error("holt_winters(ramp[1m], 1, 0.5)", db).message == (
        "invalid smoothing factor. Expected: 0 < sf < 1, got: 1.000000"
    )
    assert error("holt_winters(ramp[1m], 0.5, -2)", db).message == (
        "invalid trend factor. Expected: 0 < tf < 1, got: -2.000000"
    )
    assert vec("holt_winters(nope[1m], 1, 0.5)", db) == {}  # checked only where there are points


def test_absent_over_time(db: MemoryStorage) -> None:
    assert vec("absent_over_time(nope[1m])", db) == {L(): 1.0}
    assert vec('absent_over_time(nope{a="b"}[1m])', db) == {L(a="b"): 1.0}
    assert vec("absent_over_time(ramp[1m])", db) == {}
    # Staleness markers are not points: gone has none in [140, 200].
    assert vec('absent_over_time(gone{pod="x"}[1m])', db, at=200.0) == {L(pod="x"): 1.0}
    assert vec('absent_over_time(gone{pod="x"}[1m])', db, at=100.0) == {}


def test_sgn_and_dates(db: MemoryStorage) -> None:
    assert vec("sgn(ramp - 300)", db) == {L(): 1.0}
    assert vec("sgn(vector(-2)) + sgn(vector(0))", db) == {L(): -1.0}
    # T is 1970-01-01 00:10:00 UTC, a Thursday.
    assert vec("minute() + hour() * 100", db) == {L(): 10.0}
    assert vec("day_of_month() + day_of_week() * 10 + day_of_year() * 100", db) == {L(): 141.0}
    assert vec("days_in_month() + month() * 100 + year() * 1000", db) == {L(): 1970131.0}
    at = "vector(1700000000)"  # 2023-11-14T22:13:20Z, a Tuesday
    assert vec(f"year({at}) * 10000 + month({at}) * 100 + day_of_month({at})", db) == {
        L(): 20231114.0
    }
    assert vec(f"hour({at}) * 100 + minute({at}) + day_of_week({at}) / 10", db) == {L(): 2213.2}
    leap = "vector(1709251199)"  # 2024-02-29T23:59:59Z
    assert vec(f"days_in_month({leap}) + day_of_year({leap}) * 100", db) == {L(): 6029.0}
    assert vec("minute(ramp)", db) == {L(): 10.0}  # the name goes, as for any function


def test_sample_limit(db: MemoryStorage) -> None:
    with pytest.raises(QueryError) as info:
        instant_query("sum(mem)", T, db, max_samples=10)
    assert (info.value.error_type, info.value.message) == (
        "execution",
        "query processing would load too many samples into memory in query execution",
    )
    assert vec("sum(mem)", db) == {L(): 60.0}
    assert instant_query("sum(mem)", T, db, max_samples=1000) == [Element({}, 60.0)]


@pytest.fixture(params=[False, True], ids=["grouped", "spread"])
def split(request: pytest.FixtureRequest) -> MemoryStorage:
    """Series that share labels (or signatures) but never a step."""
    s = MemoryStorage(spread=request.param)
    s.add(series("mem", node="n1", pod="p1"), [(t, 10.0) for t in TIMES])
    s.add(series("early", node="n1"), [(t, 1.0) for t in TIMES if t <= 90])
    s.add(series("late", node="n1"), [(t, 2.0) for t in TIMES if t >= 500])
    s.add(series("side", node="n1", part="a"), [(t, 1.0) for t in TIMES if t <= 90])
    s.add(series("side", node="n1", part="b"), [(t, 2.0) for t in TIMES if t >= 500])
    s.add(series("side", node="n1", part="c"), [(t, 3.0) for t in TIMES if t >= 300])
    return s


def test_conflicts_only_fail_where_they_meet(split: MemoryStorage) -> None:
    # Same labels once the name goes, never at one step: one series in a range query.
    result = range_query('{__name__=~"early|late"} * 2', 0, 600, 100, split)
    assert result == [
        RangeSeries(
            {"node": "n1"}, [(0.0, 2.0), (100.0, 2.0), (200.0, 2.0), (300.0, 2.0), (600.0, 4.0)]
        )
    ]
    # A range function's whole result is checked, as Prometheus does.
    with pytest.raises(QueryError) as info:
        range_query('count_over_time({__name__=~"early|late"}[1m])', 0, 600, 100, split)
    assert info.value.message == "vector cannot contain metrics with the same labelset"
    # Two "one" side series with one signature: fine while they never meet.
    a_or_b = 'side{part=~"a|b"}'
    ok = range_query(f"mem + on (node) {a_or_b}", 0, 600, 100, split)
    assert [(s.labels, [v for _, v in s.points]) for s in ok] == [
        ({"node": "n1"}, [11.0, 11.0, 11.0, 11.0, 12.0])
    ]
    with pytest.raises(QueryError) as info:
        range_query('mem + on (node) side{part=~"a|c"}', 0, 600, 100, split)
    assert "many-to-many matching not allowed" in info.value.message
    assert instant_query('mem + on (node) side{part=~"a|c"}', 100, split) == [
        Element({"node": "n1"}, 11.0)
    ]


def test_a_series_with_a_gap_beside_unbroken_ones_finds_the_point_before_its_gap() -> None:
    """One block holds both: the unbroken rows take the short path, the gappy one its own."""
    db = MemoryStorage(spread=True)
    times = [float(t) for t in range(0, 121, 10)]
    db.add({"__name__": "m", "pod": "whole"}, [(t, t) for t in times])
    db.add({"__name__": "m", "pod": "gap"}, [(t, -t) for t in times if not 30 <= t <= 70])
    db.add({"__name__": "m", "pod": "late"}, [(t, 2 * t) for t in times if t >= 50])
    got = {s.labels["pod"]: s.points for s in range_query("m", 0, 120, 10, db)}
    assert got["whole"] == [(t, t) for t in times]
    assert got["gap"] == [(t, -t if not 30 <= t <= 70 else -20.0) for t in times]
    assert got["late"] == [(t, 2 * t) for t in times if t >= 50]


# --- histogram_quantile, trigonometry, atan2, pi ---


def test_histogram_quantile_follows_the_buckets_present_at_each_step() -> None:
    """Buckets come and go between steps: each step interpolates in the ones it has."""
    db = MemoryStorage(spread=True)
    times = [0.0, 60.0, 120.0]
    for le, count in [("1", 2.0), ("2", 6.0), ("+Inf", 8.0)]:
        db.add({"__name__": "h_bucket", "job": "a", "le": le}, [(t, count) for t in times])
    db.add({"__name__": "h_bucket", "job": "a", "le": "1.5"}, [(60.0, 4.0)])
    db.add({"__name__": "h_bucket", "job": "b", "le": "0x1p1"}, [(t, 1.0) for t in times])
    db.add({"__name__": "h_bucket", "job": "b", "le": "+inf"}, [(t, 1.0) for t in times])
    db.add({"__name__": "h_bucket", "job": "c", "le": "1_0"}, [(t, 1.0) for t in times])
    got = {
        s.labels["job"]: s.points
        for s in range_query("histogram_quantile(0.5, h_bucket)", 0, 120, 60, db, lookback=30)
    }
    # a: rank 4 lies in (1, 2] at 0 and 120 s, exactly at the 1.5 bucket at 60 s
    assert got["a"] == [(0.0, 1.5), (60.0, 1.5), (120.0, 1.5)]
    assert got["b"] == [(0.0, 1.0), (60.0, 1.0), (120.0, 1.0)]  # Go reads 0x1p1 and +inf
    assert "c" not in got  # "1_0" is no number to Go: skipped, so no group
    at_60 = instant_query("histogram_quantile(0.75, h_bucket)", 60, db, lookback=30)
    assert isinstance(at_60, list)
    # a: rank 6 in (1.5, 2] (4 to 6 observations); b: rank 0.75 of 1 in (0, 2]
    assert sorted((e.labels["job"], e.value) for e in at_60 if isinstance(e, Element)) == [
        ("a", 2.0),
        ("b", 1.5),
    ]


def test_go_float_parsing_of_bucket_bounds() -> None:
    from collector.promql.histogram import parse_go_float

    assert parse_go_float("+Inf") == math.inf
    assert parse_go_float("-Infinity") == -math.inf
    assert parse_go_float("1e3") == 1000.0
    assert parse_go_float(".5") == 0.5
    assert parse_go_float("0x1p-2") == 0.25
    assert math.isnan(parse_go_float("NaN") or 0.0)
    for bad in ["", " 1", "1_000", "0x10", "1e400", "abc", "1.2.3"]:
        assert parse_go_float(bad) is None, bad


def test_trigonometry_atan2_and_pi(db: MemoryStorage) -> None:
    assert scalar("pi()", db) == math.pi
    assert vec("deg(vector(pi()))", db) == {L(): 180.0}
    assert vec('sin(mem{pod="p1"})', db) == {L(node="n1", pod="p1"): math.sin(10)}
    assert vec('acos(mem{pod="p1"})', db) == {
        L(node="n1", pod="p1"): pytest.approx(math.nan, nan_ok=True)
    }
    # atan2 keeps the metric name, unlike the other arithmetic operators
    assert vec('mem{pod="p1"} atan2 10', db) == {M("mem", node="n1", pod="p1"): math.pi / 4}
    assert scalar("1 atan2 1", db) == math.pi / 4


def test_a_plan_is_shared_by_its_text_and_a_tenants_restriction_never_reaches_it() -> None:
    """The plan of a query text is kept; a tenant's query gets a fresh one to restrict."""
    from collector.promql.query import Prepared, prepare_instant

    def sums(prepared: Prepared) -> list[float]:
        answer = prepared.run()
        assert isinstance(answer, list)
        return [e.value for e in answer if isinstance(e, Element)]

    s = MemoryStorage()
    s.add({"__name__": "x", "namespace": "a"}, [(10, 1.0)])
    s.add({"__name__": "x", "namespace": "b"}, [(10, 2.0)])
    text = "sum(x)"
    cluster = prepare_instant(text, 10, s)
    tenant = prepare_instant(text, 10, s, namespaces=frozenset({"a"}))
    again = prepare_instant(text, 10, s)
    assert again.root is cluster.root
    assert tenant.root is not cluster.root
    assert sums(cluster) == [3.0]
    assert sums(tenant) == [1.0]
    assert sums(again) == [3.0]
    assert sums(prepare_instant(text, 10, s, namespaces=frozenset({"b"}))) == [2.0]
