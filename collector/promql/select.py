"""Selecting series: each selector read once a query from the storage, into the evaluator's blocks.

Every selector is read once, over the window the whole query needs (all its
steps, subqueries' steps included, less offsets, back by the lookback or the
range), before anything is evaluated: this is the only part of a query that
touches the storage, so a caller can run it where the storage is safe to read
(the event loop) and evaluate the copies elsewhere. Identical reads are shared.
Groups with the same time axis are joined into one :class:`~.arrays.Block`,
so later work is per block, not per storage group.

An instant selector of a range query is looked up here, group by group, at
the very steps it will be evaluated at (:mod:`.newest`): what is kept is one
value per series and step, not every point of the hour. At 15 s resolution
that is a quarter of the cells, and joining the groups was the largest cost
of such a query.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from collector.tsdb.series import (
    STALE,
    Columns,
    LabelSet,
    Lookup,
    Matcher,
    Queryable,
    absent_mask,
    label_pairs,
    pairs_key,
    stale_mask,
)

from .arrays import Block, BoolArray, FloatArray, IntArray
from .limits import Limits
from .newest import newest
from .plan import CallNode, MatrixNode, Node, SelectorNode, SubqueryNode, children
from .timing import QueryTimes, refs, subquery_steps
from .values import Labels


@dataclass(frozen=True, slots=True)
class Selected:
    """What one selector read: its blocks, and its series' order by labels across them."""

    blocks: list[Block]
    order: IntArray
    """Row indexes into the blocks' rows laid end to end, sorted by label set (storage order)."""
    at: IntArray | None = None
    """Set when looked up already: the reference times (ms) the blocks' columns are, each
    cell the series' value there or a staleness marker where it has none."""


class Selection:
    """The series every selector of one query read."""

    def __init__(self, data: dict[int, Selected]) -> None:
        self._data = data

    def of(self, node: SelectorNode) -> Selected:
        """What ``node`` read."""
        return self._data[id(node)]


def prefetch(
    root: Node,
    storage: Queryable,
    at_steps: IntArray,
    times: QueryTimes,
    lookback_ms: int,
    limits: Limits,
) -> Selection:
    """Read every selector of ``root`` once, for evaluation at ``at_steps``."""
    reads: dict[tuple[tuple[Matcher, ...], int, int, bool, bytes], Selected] = {}
    data: dict[int, Selected] = {}
    for sel, lo, hi, one, sampled in _windows(root, at_steps, times, lookback_ms):
        key = (sel.matchers, lo, hi, one, b"" if sampled is None else sampled.tobytes())
        selected = reads.get(key)
        if selected is None:
            # A millisecond wider either side; the exact bounds are applied per step.
            window = (lo - 1) / 1000, (hi + 1) / 1000
            lookup = None if sampled is None else Lookup(sampled, lookback_ms)
            found = storage.select(list(sel.matchers), *window, newest=one, lookup=lookup)
            selected = reads[key] = _selected(found, lo, hi, lookup, limits)
        data[id(sel)] = selected
    for sel in _selectors(root):  # selectors evaluated at no step at all read nothing
        data.setdefault(id(sel), Selected([], np.zeros(0, dtype=np.int64)))
    return Selection(data)


def _windows(
    node: Node,
    at_steps: IntArray,
    times: QueryTimes,
    lookback_ms: int,
    parent: Node | None = None,
) -> Iterator[tuple[SelectorNode, int, int, bool, IntArray | None]]:
    """Each selector with the time window ``[lo, hi]`` (milliseconds) its evaluation reads,
    whether it looks up only the newest point at ``hi`` (an instant selector at one time),
    and the reference times it is looked up at, where they can be looked up as it is read.

    These are Prometheus' select hints, and like Prometheus' storage a read
    holds nothing outside them: an ``@`` time under ``predict_linear``, whose
    windows slide with the steps (:func:`~.timing.ref_mode`), sees only the
    points of its window at the first step. A selector under a subquery or
    ``timestamp`` is not looked up as read: the steps of the one and the
    sample times the other needs are known only as it is evaluated.
    """
    if not at_steps.size:
        return
    if isinstance(node, SelectorNode | MatrixNode):
        sel = node if isinstance(node, SelectorNode) else node.selector
        width = node.range_ms if isinstance(node, MatrixNode) else lookback_ms
        at = refs(sel, at_steps, times)
        lo, hi = int(at.min()), int(at.max())
        instant = isinstance(node, SelectorNode)
        stamped = isinstance(parent, CallNode) and parent.name == "timestamp"
        sampled = at if instant and not stamped else None
        yield sel, lo - width, hi, instant and lo == hi, sampled
    elif isinstance(node, SubqueryNode):
        inner = subquery_steps(node, at_steps, times)
        for sel, lo, hi, one, _ in _windows(node.expr, inner, times, lookback_ms, node):
            yield sel, lo, hi, one, None
    else:
        for child in children(node):
            yield from _windows(child, at_steps, times, lookback_ms, node)


def _selectors(node: Node) -> Iterator[SelectorNode]:
    if isinstance(node, SelectorNode):
        yield node
    for child in children(node):
        yield from _selectors(child)


def _selected(
    found: Iterable[Columns],
    lo: int,
    hi: int,
    lookup: Lookup | None,
    limits: Limits,
) -> Selected:
    """Storage groups within ``[lo, hi]`` as blocks, one per distinct time axis, and their
    series' label order; with ``lookup``, each group looked up (here, unless the storage
    did), all in one block. Every cell read is charged to ``limits``."""
    axes: dict[bytes, _Axis] = {}
    for columns in found:
        if columns.looked_up:
            assert lookup is not None
            values = np.asarray(columns.values, dtype=np.float64)
            limits.charge(values.size)
            axes.setdefault(b"", _Axis(lookup.at)).add(columns.labels, values)
            continue
        times = np.rint(np.asarray(columns.times, dtype=np.float64) * 1000).astype(np.int64)
        values = np.asarray(columns.values, dtype=np.float64).reshape(len(columns.labels), -1)
        inside = times.size and lo <= times[0] and times[-1] <= hi
        a, b = (0, times.size) if inside else np.searchsorted(times, [lo, hi + 1])
        if a < b:
            times, values = times[a:b], values[:, a:b]
            limits.charge(values.size)
            if lookup is not None:
                times, values = _looked_up(times, values, lookup)
            axis = axes.setdefault(b"" if lookup is not None else times.tobytes(), _Axis(times))
            axis.add(columns.labels, values)
    blocks = [axis.block(lookup is not None) for axis in axes.values()]
    order = _label_order(tuple(key for axis in axes.values() for key in axis.keys))
    return Selected(blocks, order, None if lookup is None else lookup.at)


def _looked_up(times: IntArray, values: FloatArray, lookup: Lookup) -> tuple[IntArray, FloatArray]:
    """Rows looked up: their value at each reference time, or a staleness marker for none."""
    at, lookback_ms = lookup.at, lookup.lookback_ms
    if times.size == 1:  # a node's newest points, all of one time (an instant query's read)
        inside = (times[0] <= at) & (times[0] >= at - lookback_ms)
        return at, np.where(inside[None, :] & ~absent_mask(values), values, STALE)
    found_values, found, _ = newest(times, values, ~absent_mask(values), at, lookback_ms)
    return at, np.where(found, found_values, STALE)


@functools.lru_cache(maxsize=32)
def _label_order(keys: tuple[str, ...]) -> IntArray:
    """The order that sorts ``keys``: the same selector read again (a dashboard refreshing)
    mostly finds the same series, and sorting their keys is a large part of a read."""
    order = np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)
    order.flags.writeable = False
    return order


@dataclass(slots=True)
class _Axis:
    """The series read on one time axis, gathered into one block."""

    times: IntArray
    labels: list[Labels] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    maps: list[LabelSet] | None = field(default_factory=list)
    rows: list[FloatArray] = field(default_factory=list)

    def add(self, labels: Sequence[Mapping[str, str]], values: FloatArray) -> None:
        """One storage group's series."""
        self.rows.append(values)
        if set(map(type, labels)) == {LabelSet}:  # the storage's own sorted forms
            sets: Sequence[LabelSet] = labels  # type: ignore[assignment]
            self.labels.extend([m.pairs for m in sets])
            self.keys.extend([m.key for m in sets])
            if self.maps is not None:
                self.maps.extend(sets)
            return
        pairs = [label_pairs(m) for m in labels]
        self.labels.extend(pairs)
        self.keys.extend([pairs_key(p) for p in pairs])
        self.maps = None  # a plain mapping may change under us: not kept

    def block(self, looked_up: bool) -> Block:
        """The block of every series added; ``looked_up``: each cell is a lookup's answer,
        present (a staleness marker where it found nothing)."""
        rows = self.rows
        values = np.ascontiguousarray(np.concatenate(rows) if len(rows) > 1 else rows[0])
        present: BoolArray = (
            np.broadcast_to(np.True_, values.shape) if looked_up else ~absent_mask(values)
        )
        return Block(self.times, self.labels, values, present, stale_mask(values), self.maps)
