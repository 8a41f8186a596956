"""Selecting series: each selector read once a query from the storage, then found at each step.

An instant selector at ``t`` takes each series' newest point in
``[t - lookback, t]`` unless that point is a staleness marker; a range selector
``x[r]`` at ``t`` takes the points in ``[t - r, t]`` without staleness markers;
``offset`` shifts both. Every selector is read once, over the window the whole
query needs; each step then finds its points by bisection, so a range query
never costs steps x storage reads. Times are whole milliseconds, as in Prometheus.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from collector.tsdb.series import Matcher, Queryable, is_stale

from .deadline import Deadline
from .plan import MatrixNode, Node, SelectorNode, selectors
from .values import Labels, StepMatrix, TimedVector, labels_of


@dataclass(slots=True)
class _Series:
    labels: Labels
    times: list[int]
    values: list[float]


class Selection:
    """The series every selector of one query read, and their points at any step."""

    def __init__(self, data: dict[int, list[_Series]], lookback_ms: int) -> None:
        self._data = data
        self._lookback_ms = lookback_ms

    def instant(self, node: SelectorNode, ts: int) -> TimedVector:
        """The instant selector at ``ts``: each series' newest live point within the lookback."""
        ref = ts - node.offset_ms
        oldest = ref - self._lookback_ms
        out: TimedVector = []
        for s in self._data[id(node)]:
            i = bisect_right(s.times, ref) - 1
            if i >= 0 and s.times[i] >= oldest:
                v = s.values[i]
                if v != v and is_stale(v):
                    continue
                out.append((s.labels, s.times[i], v))
        return out

    def matrix(self, node: MatrixNode, ts: int) -> StepMatrix:
        """The raw points of a range selector at ``ts`` (series without points left out)."""
        ref = ts - node.selector.offset_ms
        lo = ref - node.range_ms
        out: StepMatrix = []
        for s in self._data[id(node.selector)]:
            i0 = bisect_left(s.times, lo)
            i1 = bisect_right(s.times, ref)
            if i1 > i0:
                out.append((s.labels, s.times[i0:i1], s.values[i0:i1]))
        return out


def prefetch(
    root: Node,
    storage: Queryable,
    start_ms: int,
    end_ms: int,
    lookback_ms: int,
    deadline: Deadline,
) -> Selection:
    """Read every selector of ``root`` once, for steps from ``start_ms`` to ``end_ms``."""
    reads: dict[tuple[tuple[Matcher, ...], int, int, bool], list[_Series]] = {}
    data: dict[int, list[_Series]] = {}
    for sel, range_ms in selectors(root):
        width = range_ms if range_ms else lookback_ms
        lo = start_ms - sel.offset_ms - width
        hi = end_ms - sel.offset_ms
        key = (sel.matchers, lo, hi, bool(range_ms))
        series = reads.get(key)
        if series is None:
            series = reads[key] = _read(storage, sel, lo, hi, bool(range_ms))
            deadline.check()
        data[id(sel)] = series
    return Selection(data, lookback_ms)


def _read(
    storage: Queryable, sel: SelectorNode, lo: int, hi: int, for_range: bool
) -> list[_Series]:
    # Read a millisecond wider either side; the exact bounds are applied per step.
    found = storage.select(list(sel.matchers), (lo - 1) / 1000, (hi + 1) / 1000)
    series: list[_Series] = []
    for sd in found:
        times = [round(t * 1000) for t in sd.times]
        values = list(sd.values)
        if for_range:  # range selections never see staleness markers
            keep = [i for i, v in enumerate(values) if not (v != v and is_stale(v))]
            if len(keep) != len(values):
                times = [times[i] for i in keep]
                values = [values[i] for i in keep]
        series.append(_Series(labels_of(dict(sd.labels)), times, values))
    series.sort(key=lambda s: s.labels)
    return series
