"""A short in-memory history of every node's series, for range queries.

Why this layout: every batch of a node arrives at one time, so a node keeps one
array of times and each of its series an array of float64 values aligned to it.
A kept point costs 8 bytes for its value plus its share of the node's times and
of the per-series overhead (``make bench`` measured 22 bytes a point with 61
points a series; more points a series, less overhead each). Points are appended
in time order only;
a reading older than the node's newest point (a backlog replayed into a live
collector) updates the store but not the history.

A series that vanishes from its node gets one staleness marker (Prometheus'
own), so range queries stop it at once instead of carrying it for the lookback.
Points older than ``retention`` go, and so do the oldest when ``max_points`` is
passed (oldest first, across all nodes).
"""

from __future__ import annotations

import bisect
import struct
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from collector.exposition.render import key_labels, key_name
from collector.tsdb.series import ABSENT, STALE, Columns, LabelSet, Matcher, is_stale

_ABSENT_BYTES = struct.pack("<d", ABSENT)


def _columns(node: _Node, found: list[tuple[_Line, int, int]]) -> Columns:
    """One node's matching lines as a group: its times ``[lo, hi)``, rows padded with ABSENT."""
    lo = min([a for _, a, _ in found])
    hi = max([b for _, _, b in found])
    rows: list[bytes | memoryview] = []
    for line, a, b in found:  # one bytes join of views: a single copy
        if a > lo:
            rows.append(_ABSENT_BYTES * (a - lo))
        rows.append(memoryview(line.values)[a - line.start : b - line.start])
        if b < hi:
            rows.append(_ABSENT_BYTES * (hi - b))
    values = np.frombuffer(b"".join(rows), dtype=np.float64).reshape(len(found), hi - lo)
    times = np.frombuffer(node.times[lo:hi], dtype=np.float64)
    return Columns(times, [line.labels for line, _, _ in found], values)


@dataclass(slots=True)
class _Line:
    """One series of one node: values for the node's times from index ``start`` on.

    Its labels are parsed from the key the first time a query needs them: most
    series are never queried, and a dict per series would outweigh its points.
    """

    key: bytes
    node: str
    start: int
    values: array[float] = field(default_factory=lambda: array("d"))
    parsed: LabelSet | None = None

    @property
    def end(self) -> int:
        return self.start + len(self.values)

    @property
    def labels(self) -> dict[str, str]:
        if self.parsed is None:
            name, labels = key_labels(self.key)
            self.parsed = LabelSet({"__name__": name, **dict(labels), "node": self.node})
        return self.parsed


@dataclass(slots=True)
class _Node:
    times: array[float] = field(default_factory=lambda: array("d"))
    lines: dict[bytes, _Line] = field(default_factory=dict)
    by_name: dict[str, dict[bytes, _Line]] = field(default_factory=dict)
    last_keys: tuple[bytes, ...] = ()
    """The keys of the latest record, in its order, and their value arrays."""
    last_arrays: list[array[float]] = field(default_factory=list)


class History:
    """Recent points per node and series; implements the evaluator's ``Queryable``."""

    def __init__(
        self,
        retention: float = 3600.0,
        max_points: int = 50_000_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.retention = retention
        self.max_points = max_points
        self.points = 0
        self._clock = clock
        self._nodes: dict[str, _Node] = {}

    def record(
        self, node: str, series: Mapping[bytes, float], sampled: float | None = None
    ) -> None:
        """Add one point per series of ``node`` at wall time ``sampled`` (default: now).

        Series that vanished since the node's last point are marked stale.
        """
        t = self._clock() if sampled is None else sampled
        state = self._nodes.get(node)
        if state is None:
            if not series:
                return
            state = self._nodes[node] = _Node()
        times = state.times
        if times and t <= times[-1]:
            return
        index = len(times)
        times.append(t)
        self.points += len(series)
        keys = tuple(series)
        if keys and keys == state.last_keys:
            # steady state: the same series as last time, all appended in C
            any(map(array.append, state.last_arrays, series.values()))
            return
        lines = state.lines
        for key, value in series.items():
            line = lines.get(key)
            if line is None:
                line = self._new_line(state, node, key, index)
            elif line.end < index:
                gap = index - line.end  # back after a gap: stale all along it
                line.values.extend([STALE] * gap)
                self.points += gap
            line.values.append(value)
        state.last_keys = keys
        state.last_arrays = [lines[key].values for key in keys]
        for key in lines.keys() - series.keys():
            line = lines[key]
            if line.end == index and not is_stale(line.values[-1]):
                line.values.append(STALE)
                self.points += 1

    def trim(self, now: float | None = None) -> None:
        """Forget points past the retention, then the oldest ones past ``max_points``."""
        now = self._clock() if now is None else now
        cutoff = now - self.retention
        for _ in range(20):
            for node in list(self._nodes):
                self._trim_node(node, cutoff)
            if self.points <= self.max_points:
                return
            cutoff += self.retention / 20

    def select(self, matchers: Sequence[Matcher], start: float, end: float) -> Iterable[Columns]:
        """Every series matching all ``matchers`` with its points in ``[start, end]``.

        One group per node: the node's times in the window, a row per series
        (ABSENT where a series has no point). The arrays are copies.
        """
        node: _Node | None = None
        found: list[tuple[_Line, int, int]] = []
        for state, line, a, b in self._matching(matchers, start, end):
            if state is not node:  # _matching goes node by node
                if node is not None:
                    yield _columns(node, found)
                node, found = state, []
            found.append((line, a, b))
        if node is not None:
            yield _columns(node, found)

    def label_names(self, matchers: Sequence[Matcher], start: float, end: float) -> set[str]:
        """Label names of the matching series with points in the window."""
        return {
            name for _, line, _, _ in self._matching(matchers, start, end) for name in line.labels
        }

    def label_values(
        self, name: str, matchers: Sequence[Matcher], start: float, end: float
    ) -> set[str]:
        """Values of label ``name`` among the matching series with points in the window."""
        return {
            line.labels[name]
            for _, line, _, _ in self._matching(matchers, start, end)
            if name in line.labels
        }

    def _matching(
        self, matchers: Sequence[Matcher], start: float, end: float
    ) -> Iterator[tuple[_Node, _Line, int, int]]:
        """Matching lines with the node-time indexes ``[a, b)`` of their points in the window.

        Label lookups (Grafana's variables) need no copy of the points.
        """
        by_name = next((m for m in matchers if m.name == "__name__" and m.op == "="), None)
        rest = [m for m in matchers if m is not by_name]
        for state in self._nodes.values():
            lo = bisect.bisect_left(state.times, start)
            hi = bisect.bisect_right(state.times, end)
            if lo >= hi:
                continue
            if by_name is None:
                candidates: Iterable[_Line] = state.lines.values()
            else:
                candidates = state.by_name.get(by_name.value, {}).values()
            for line in candidates:
                a, b = max(lo, line.start), min(hi, line.end)
                if a < b and all(m.matches(line.labels) for m in rest):
                    yield state, line, a, b

    def _new_line(self, state: _Node, node: str, key: bytes, index: int) -> _Line:
        line = _Line(key, node, index)
        state.lines[key] = line
        state.by_name.setdefault(key_name(key), {})[key] = line
        return line

    def _trim_node(self, node: str, cutoff: float) -> None:
        state = self._nodes[node]
        cut = bisect.bisect_right(state.times, cutoff)
        if cut == 0:
            return
        del state.times[:cut]
        for key, line in list(state.lines.items()):
            drop = max(0, min(cut - line.start, len(line.values)))
            if drop:
                del line.values[:drop]
                self.points -= drop
            line.start = max(0, line.start - cut)
            if not line.values:
                state.last_keys, state.last_arrays = (), []
                del state.lines[key]
                name = key_name(key)
                del state.by_name[name][key]
                if not state.by_name[name]:
                    del state.by_name[name]
        if not state.times:
            del self._nodes[node]
