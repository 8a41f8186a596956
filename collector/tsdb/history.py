"""A short in-memory history of every node's series, for range queries.

Why this layout: each source of a node (a monitor, an agent, two pods during a
rollout) has its own time axis, appended a whole batch at a time in numpy
blocks (:mod:`collector.tsdb.blocks`), and records only the series it wins in
the node's deduplicated view; a selection merges a series' points across its
node's axes by time. So each point is kept once, and a source whose clock runs
behind the collector's, or that replays a backlog, loses nothing. A series gets
a number on its node when first seen; its key is kept for its labels, decoded
once into the node's label index (:mod:`collector.tsdb.labels`).

Measured (``python -m bench.query``, tracemalloc while 40 nodes of ~250 series
fill an hour, pods replaced ~4% a minute): 10.0 bytes per kept point at 60 s,
5.7 at 15 s, label index included (the array-per-series history it replaced:
22).

A series that leaves its node gets one staleness marker (Prometheus' own) on the
axis that recorded it, so range queries stop it at once; one that passes to
another source of the node does not. Points older than ``retention`` are hidden
at once and go with their whole block; the oldest go too when ``max_points`` is
passed (oldest first, across all nodes).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Container, Generator, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

import numpy as np

from collector.tsdb.axis import Axis
from collector.tsdb.labels import Mask, Verdicts
from collector.tsdb.latest import Latest, latest
from collector.tsdb.lookups import LookedUp, Windows, gridded, looked_up
from collector.tsdb.nodes import Found, NodeSeries
from collector.tsdb.series import Columns, LabelSet, Lookup, Matcher

LOOKUP_IDS = 8192
"""Series ids of the nodes one lookup serves at once: enough to spread a pass's fixed cost
over many nodes, few enough for its arrays to stay in the CPU's cache and for a group to fit
in one of the event loop's short slices of reading (:mod:`collector.promql.onloop`)."""
NAMED = 64
"""Sets of ``node`` matchers whose nodes :meth:`History._named` keeps."""


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
        self._nodes: dict[str, NodeSeries] = {}
        self._floor = -math.inf
        """Points at or before it are hidden: past the retention, or cut by ``max_points``."""
        self._named_nodes: dict[tuple[Matcher, ...], list[NodeSeries]] = {}
        """The nodes each set of ``node`` matchers passes, until a node comes or goes."""

    def record(
        self,
        node: str,
        series: Mapping[bytes, float],
        sampled: float | None = None,
        source: str = "",
        kept: Container[bytes] | None = None,
    ) -> None:
        """Add one point per series of ``node`` on ``source``'s time axis at ``sampled`` (wall time).

        ``sampled`` defaults to now. The series this axis recorded last time
        that ``series`` lacks get a staleness marker, except those in ``kept``
        (the node's series after this change: they passed to another source of
        the node, which records them). A time not after the axis' newest is
        ignored, unless that newest only marked the series of a source that went
        (:meth:`forget`): a backlog replayed after an outage then takes its place.
        """
        t = self._clock() if sampled is None else sampled
        state = self._nodes.get(node)
        if t <= self._floor or (state is None and not series):
            return
        if state is None:
            state = self._nodes[node] = NodeSeries(node)
            self._named_nodes.clear()
        axis = state.axes.get(source)
        if axis is None:
            if not series:
                return
            axis = state.axes[source] = Axis()
        self.points += axis.record(state, series, t, kept)

    def forget(self, node: str, source: str, kept: Container[bytes]) -> None:
        """``source`` left ``node``: the series it recorded that ``kept`` lacks get a marker now.

        ``kept`` is the node's series without it (others pass to another source).
        """
        state = self._nodes.get(node)
        axis = state.axes.get(source) if state is not None else None
        if state is not None and axis is not None:
            self.points += axis.end(state, kept, self._clock())

    def trim(self, now: float | None = None) -> None:
        """Forget points past the retention, then the oldest ones past ``max_points``."""
        now = self._clock() if now is None else now
        cutoff = now - self.retention
        for _ in range(20):
            self._cut(cutoff)
            if self.points <= self.max_points:
                return
            cutoff += self.retention / 20

    def _cut(self, cutoff: float) -> None:
        self._floor = max(self._floor, cutoff)
        for name, state in list(self._nodes.items()):
            state.trim(self._floor)
            if not state.axes:
                del self._nodes[name]
                self._named_nodes.clear()
        self.points = sum(
            axis.visible(self._floor)
            for state in self._nodes.values()
            for axis in state.axes.values()
        )

    @property
    def bytes(self) -> int:
        """Bytes the history holds (numpy arrays, keys, label values and their containers)."""
        return sum(state.nbytes for state in self._nodes.values())

    @property
    def series(self) -> int:
        """Series with points held (an ended one stays until its last block goes)."""
        return sum(state.size for state in self._nodes.values())

    def select(
        self,
        matchers: Sequence[Matcher],
        start: float,
        end: float,
        newest: bool = False,
        lookup: Lookup | None = None,
    ) -> Iterable[Columns]:
        """Every series matching all ``matchers`` with its points in ``[start, end]``.

        One group per node: the times of all its axes, merged, and a row per
        series with :data:`ABSENT` where it has no point, so the evaluator
        handles a node's series in whole-array steps. ``newest``: the reader
        only looks up each series' newest point at or before a millisecond
        before ``end`` (an instant selector), so a node may give just those.
        ``lookup``: a node of one axis answers with the lookups made, from its
        newest points (:mod:`collector.tsdb.latest`) if ``newest``, else from its
        runs (:mod:`collector.tsdb.lookups`).
        """
        start = max(start, float(np.nextafter(self._floor, math.inf)))
        wanted: Iterable[tuple[NodeSeries, Mask | None]] = self._wanted(matchers)
        if lookup is not None:
            if newest:
                wanted = yield from _latest(wanted, start, end, lookup)
            # a node whose newest points cannot tell (one looked up before them: a chart's
            # last whole step, an instant query at a time past) is looked up from its runs
            # with the others: read node by node, a one-step sum over 5,000 nodes took
            # 1.0-1.1 s, at once 0.29 s
            wanted = yield from _looked_up(wanted, start, end, lookup)
        elif not newest:
            wanted = yield from _gridded(wanted, start, end)
        for state, want in wanted:
            read = state.newest if newest else state.grid
            grid = read(want, start, end)
            if grid is not None:
                ids, times, values = grid
                yield Columns(times, state.label_sets(ids), values)

    def label_names(self, matchers: Sequence[Matcher], start: float, end: float) -> set[str]:
        """Label names of the matching series with points in the window."""
        names: set[str] = set()
        for state, (sids, _, _) in self._matching(matchers, start, end):
            names |= state.index.names(np.unique(sids))
            if state.name:
                names.add("node")
        return names

    def label_values(
        self, name: str, matchers: Sequence[Matcher], start: float, end: float
    ) -> set[str]:
        """Values of label ``name`` among the matching series with points in the window."""
        values: set[str] = set()
        for state, (sids, _, _) in self._matching(matchers, start, end):
            if name == "node":
                if state.name:
                    values.add(state.name)
            else:
                values |= state.index.values(name, np.unique(sids))
        return values

    def _matching(
        self, matchers: Sequence[Matcher], start: float, end: float
    ) -> Iterator[tuple[NodeSeries, Found]]:
        """Each node with matching series, and their points in the window."""
        start = max(start, float(np.nextafter(self._floor, math.inf)))
        for state, want in self._wanted(matchers):
            found = state.found(want, start, end)
            if found is not None:
                yield state, found

    def _wanted(self, matchers: Sequence[Matcher]) -> Iterator[tuple[NodeSeries, Mask | None]]:
        """Each node with series that pass ``matchers``, and which (None: all).

        ``node`` matchers go first: they decide a whole node on its name, before
        any array is read (:meth:`_named`). Then equality matchers: a ``__name__``
        or value the node never had rules it out.
        """
        others = sorted(
            (m for m in matchers if m.name != "node"),
            key=lambda m: (m.op != "=", m.name != "__name__"),
        )
        verdicts: Verdicts = {}
        for state in self._named(tuple(m for m in matchers if m.name == "node")):
            want = state.want(others, verdicts)
            if want is not False:
                yield state, None if want is True else want

    def _named(self, matchers: tuple[Matcher, ...]) -> list[NodeSeries]:
        """The nodes whose names pass every one of ``matchers`` (all ``node`` matchers).

        Why kept until a node comes or goes: a regex over two of 80 nodes' names
        took 0.1 ms of a 0.8 ms query, asking every node each time (a dashboard
        asks the same matchers at every refresh); before that it went on the other
        nodes' ``__name__`` masks (0.3 ms of 1.2). A ``node`` equality names the
        only node that can match (a view's pod chart at 5,000 nodes asked each: 8 ms).
        """
        if not matchers:
            return list(self._nodes.values())
        found = self._named_nodes.get(matchers)
        if found is None:
            node = next((m.value for m in matchers if m.op == "="), None)
            states = self._nodes.values() if node is None else [self._nodes.get(node)]
            found = [
                state
                for state in states
                if state is not None and all(m.matches({"node": state.name}) for m in matchers)
            ]
            if len(self._named_nodes) >= NAMED:
                self._named_nodes.clear()
            self._named_nodes[matchers] = found
        return found


Part = TypeVar("Part", Windows, Latest)
Rest = list[tuple[NodeSeries, Mask | None]]


def _gridded(
    wanted: Iterable[tuple[NodeSeries, Mask | None]], start: float, end: float
) -> Generator[Columns, None, Rest]:
    """The wanted series' points in ``[start, end]``, many nodes at once, a group per node;
    returns the nodes whose runs cannot tell (:meth:`NodeSeries.windows`), to be read alone."""

    def groups(states: list[NodeSeries], parts: list[Windows]) -> Iterator[Columns]:
        found = gridded(parts)
        if not len(found.sids):
            return
        bounds = np.flatnonzero(np.diff(found.nodes)) + 1
        for a, b in itertools.pairwise([0, *bounds.tolist(), len(found.nodes)]):
            i = int(found.nodes[a])
            times = np.concatenate([seg.times[lo:hi] for seg, lo, hi in parts[i].segments])
            values = found.values[a:b, : len(times)]
            yield Columns(times, states[i].label_sets(found.sids[a:b]), values)

    return (
        yield from _many(
            wanted,
            lambda state, want: state.windows(want, start, end),
            lambda windows: windows.size if windows.segments else 0,
            groups,
        )
    )


def _looked_up(
    wanted: Iterable[tuple[NodeSeries, Mask | None]],
    start: float,
    end: float,
    lookup: Lookup,
) -> Generator[Columns, None, Rest]:
    """The wanted series looked up from their runs, many nodes at once; returns the nodes
    whose runs cannot tell (:meth:`NodeSeries.windows`), to be read as windows."""
    return (
        yield from _many(
            wanted,
            lambda state, want: state.windows(want, start, end),
            lambda windows: windows.size if windows.times_ms.size else 0,
            lambda states, reads: _group(
                states, looked_up(reads, lookup.at, lookup.lookback_ms), lookup
            ),
        )
    )


def _latest(
    wanted: Iterable[tuple[NodeSeries, Mask | None]],
    start: float,
    end: float,
    lookup: Lookup,
) -> Generator[Columns, None, Rest]:
    """The wanted series looked up at one time (an instant selector) from their newest
    points, many nodes at once; returns the nodes whose newest points cannot tell
    (:meth:`NodeSeries.latest`), to be read node by node."""
    at_ms, lookback, steps = int(lookup.at[-1]), lookup.lookback_ms, len(lookup.at)
    return (
        yield from _many(
            wanted,
            lambda state, want: state.latest(want, start, at_ms),
            lambda part: part.points,
            lambda states, parts: _group(states, latest(parts, at_ms, lookback, steps), lookup),
        )
    )


def _many(
    wanted: Iterable[tuple[NodeSeries, Mask | None]],
    read: Callable[[NodeSeries, Mask | None], Part | None],
    size: Callable[[Part], int],
    look: Callable[[list[NodeSeries], list[Part]], Iterator[Columns]],
) -> Generator[Columns, None, Rest]:
    """Nodes read many at once, a group each :data:`LOOKUP_IDS`: ``read`` gives a node's
    part (None: it cannot tell, and the node is returned to be read alone), ``size`` what
    the part holds (0: nothing to find), ``look`` the columns a group of parts gives."""
    rest: Rest = []
    states: list[NodeSeries] = []
    parts: list[Part] = []
    held = 0
    for state, want in wanted:
        part = read(state, want)
        if part is None:
            rest.append((state, want))
            continue
        holds = size(part)
        if holds:
            states.append(state)
            parts.append(part)
            held += holds
        if held >= LOOKUP_IDS:
            yield from look(states, parts)
            states, parts, held = [], [], 0
    if parts:
        yield from look(states, parts)
    return rest


def _group(states: list[NodeSeries], found: LookedUp, lookup: Lookup) -> Iterator[Columns]:
    """The group of the series a lookup of ``states`` found (none if it found none)."""
    if not len(found.sids):
        return
    bounds = np.flatnonzero(np.diff(found.nodes)) + 1
    labels: list[LabelSet] = []
    for a, b in itertools.pairwise([0, *bounds.tolist(), len(found.nodes)]):
        labels += states[int(found.nodes[a])].label_sets(found.sids[a:b])
    yield Columns(lookup.at / 1000, labels, found.values, looked_up=True)
