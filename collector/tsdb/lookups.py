"""Looking series up at reference times straight from their packed runs, many nodes at once.

An instant selector of a range query needs, per series and step, only the
newest point at or before the step within the lookback. Expanding every point
of the window into a matrix and searching it costs all the window's cells (at
15 s resolution, four per step of a minute). A run of a segment (a series'
unbroken points from one time of the segment to another) already says where
its points are: the steps whose newest time lies inside it take the cell at
that time, and the few steps after it ends and before the series' next run
(within the lookback) take its last cell. So only the cells a lookup needs are
read.

Why compiled loops over many nodes at once: a node's hour is several segments,
and reading their runs with numpy took a score of calls per segment (200 nodes,
~1,000 segments: 37-40 ms for a query's lookups, 23 ms for a range selector's
read). One pass of a compiled loop over a group of nodes' runs takes 8-10 and
8 ms, the loop itself about 5. It takes the segments by their addresses
(:meth:`~collector.tsdb.blocks.Segment.laid`), pinned for the pass
(:class:`~collector.compiled.Pinned`), and a table of windows a group.

A run with a time inside that holds no point (rare, see
:attr:`~collector.tsdb.blocks.Segment.gaps`) breaks that reasoning: such a
node is read as a window instead (:func:`~collector.tsdb.blocks.gapped`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from collector.compiled import Pinned, compiled
from collector.tsdb.blocks import Ids, Mask, Segment, runs_at, stale
from collector.tsdb.series import ABSENT, STALE

F64 = NDArray[np.float64]
_ALL: Mask = np.zeros(0, bool)
"""What :func:`_wants` gives where every node wants all its series."""
_NODE = 2
"""The column of a window's node in a pass's table (:func:`_pinned`)."""


@dataclass(frozen=True, slots=True)
class Windows:
    """One node's part of a lookup: consecutive segments, each with the bounds ``[lo, hi)``
    of the read's window in its times; those times (ms) laid end to end; which series are
    wanted (all if None) among the node's ``size`` ids."""

    segments: list[tuple[Segment, int, int]]
    times_ms: Ids
    want: Mask | None
    size: int


@dataclass(frozen=True, slots=True)
class LookedUp:
    """What the lookups found: per series (a node's mostly side by side), its node (an index
    into the nodes looked up), its id there, and its value at each reference time (:data:`STALE`
    for none), or (:func:`gridded`) at each of its node's window times."""

    nodes: Ids
    sids: Ids
    values: F64


def gridded(nodes: Sequence[Windows]) -> LookedUp:
    """Every point of the wanted series of ``nodes`` in their windows: per series, a row of
    its node's window times (:data:`ABSENT` past them, to the widest node's, and at a gapped
    run's times without a point). A range selector's read, many nodes in one pass, and the
    closed part of :meth:`~collector.tsdb.axis.Axis.grid`'s, one node."""
    bases, total = _bases(nodes)
    width = max((len(node.times_ms) for node in nodes), default=0)
    values, row_of = _pinned(nodes).call(_grid, _wants(nodes), bases, total, width)
    return _found(values, np.flatnonzero(row_of >= 0), bases)


def looked_up(nodes: Sequence[Windows], at: Ids, lookback_ms: int) -> LookedUp:
    """The wanted series of ``nodes`` looked up at ``at`` (ms, ascending); series no lookup
    finds are left out. No node may hold a gapped run it wants."""
    bases, total = _bases(nodes)
    starts = np.cumsum([0, *(len(node.times_ms) for node in nodes)])
    times = np.concatenate([node.times_ms for node in nodes])
    values, row_of = _pinned(nodes).call(
        _lookup, _wants(nodes), bases, total, times, starts, at, lookback_ms
    )
    ids = np.flatnonzero(row_of >= 0)
    found = ~stale(values).all(axis=1)  # a series none of the lookups finds is left out
    if not found.all():
        ids, values = ids[found], values[found]
    return _found(values, ids, bases)


def _bases(nodes: Sequence[Windows]) -> tuple[Ids, int]:
    """Where each node's ids begin among the nodes' ids laid end to end, and how many."""
    sizes = np.array([node.size for node in nodes], np.int64)
    return np.cumsum(sizes) - sizes, int(sizes.sum())


def _wants(nodes: Sequence[Windows]) -> Mask:
    """The nodes' wanted series over their ids laid end to end (empty: all of every node)."""
    if all(node.want is None for node in nodes):
        return _ALL
    return np.concatenate([np.ones(n.size, bool) if n.want is None else n.want for n in nodes])


def _pinned(nodes: Sequence[Windows]) -> Pinned:
    """The segments of ``nodes`` pinned for one pass: a row per window, node after node,
    of its segment's address and size, the node's index, and the window's bounds ``[lo,
    hi)`` in the segment's times (:func:`_rows`)."""
    rows = [
        (seg.address, seg.buffer.nbytes, i, lo, hi)
        for i, n in enumerate(nodes)
        for seg, lo, hi in n.segments
    ]
    # fromiter over the flattened rows: np.array of the row tuples took 1.3-1.6x as long
    table = np.fromiter(itertools.chain.from_iterable(rows), np.int64, 5 * len(rows))
    return Pinned([seg.buffer for n in nodes for seg, _, _ in n.segments], table.reshape(-1, 5))


def _found(values: F64, ids: Ids, bases: Ids) -> LookedUp:
    """The rows ``values`` holds, of ``ids`` among the nodes' ids laid end to end."""
    node = np.searchsorted(bases, ids, side="right") - 1
    return LookedUp(node, ids - bases[node], values)


@compiled
def _rows(table: Ids, want: Mask, bases: Ids, total: int) -> tuple[Ids, int]:
    """Each id's row (-1: none, rows in id order): the ids laid end to end with a wanted
    run inside a window of ``table`` (:func:`_pinned`); and how many rows."""
    seen = np.zeros(total, np.bool_)
    for w in range(table.shape[0]):
        _, _, node, lo, hi = table[w]
        ids, first, width, _, _ = runs_at(table, w)
        for r in range(ids.size):
            k = bases[node] + ids[r]
            f = np.int64(first[r])
            if (want.size == 0 or want[k]) and min(f + width[r], hi) > max(f, lo):
                seen[k] = True
    row_of = np.full(total, -1, np.int64)
    rows = 0
    for k in range(total):
        if seen[k]:
            row_of[k] = rows
            rows += 1
    return row_of, rows


@compiled
def _grid(table: Ids, want: Mask, bases: Ids, total: int, width: int) -> tuple[F64, Ids]:
    """Every cell of the wanted runs of ``table``'s windows, a row per series (see
    :func:`gridded`), and each id's row."""
    row_of, rows = _rows(table, want, bases, total)
    out = np.full((rows, width), ABSENT)
    col = 0
    for w in range(table.shape[0]):
        _, _, node, lo, hi = table[w]
        if w == 0 or node != table[w - 1, _NODE]:
            col = 0
        ids, first, runs, stored, values = runs_at(table, w)
        at = 0
        for r in range(ids.size):
            cell, at = at, at + stored[r]
            k = bases[node] + ids[r]
            if want.size and not want[k]:
                continue
            f = np.int64(first[r])
            step = 1 if stored[r] > 1 else 0
            for t in range(max(f, lo), min(f + runs[r], hi)):
                out[row_of[k], col + t - lo] = values[cell + (t - f) * step]
        col += hi - lo
    return out, row_of


@compiled
def _lookup(
    table: Ids,
    want: Mask,
    bases: Ids,
    total: int,
    times: Ids,
    starts: Ids,
    at: Ids,
    lookback: int,
) -> tuple[F64, Ids]:
    """The wanted runs of ``table``'s windows looked up at ``at`` (see :func:`looked_up`):
    a row per series, :data:`STALE` for none, and each id's row. ``times``: each node's
    window times (ms) end to end, node ``i``'s from ``starts[i]`` to ``starts[i + 1]``."""
    row_of, rows = _rows(table, want, bases, total)
    steps = at.size
    out = np.full((rows, steps), STALE)
    ended = np.full(rows, -1, np.int64)  # each series' last run so far: where it ended,
    step_after = np.zeros(rows, np.int64)  # the first step after it,
    last = np.zeros(rows)  # its last cell
    pos = np.empty(steps, np.int64)  # a node's newest column at or before each step,
    oldest = np.empty(steps, np.int64)  # and its oldest within the lookback
    col = 0
    for w in range(table.shape[0] + 1):
        changed = w == table.shape[0] or w == 0 or table[w, _NODE] != table[w - 1, _NODE]
        if changed and w:
            _tails(out, row_of, bases, table[w - 1, _NODE], ended, step_after, last, oldest)
        if w == table.shape[0]:
            break
        _, _, node, lo, hi = table[w]
        if changed:
            col = 0
            _steps(times[starts[node] : starts[node + 1]], at, lookback, pos, oldest)
        ids, first, runs, stored, values = runs_at(table, w)
        shift, cell = col - lo, 0
        for r in range(ids.size):
            here, cell = cell, cell + stored[r]
            k = bases[node] + ids[r]
            f = np.int64(first[r])
            begin, end = max(f, lo) + shift, min(f + runs[r], hi) + shift
            if (want.size and not want[k]) or end <= begin:
                continue
            row, step = row_of[k], 1 if stored[r] > 1 else 0
            s = step_after[row]
            while s < steps and pos[s] < begin:  # after the series' previous run
                if ended[row] >= 0 and oldest[s] < ended[row]:
                    out[row, s] = last[row]
                s += 1
            while s < steps and pos[s] < end:  # inside this one
                if pos[s] >= oldest[s]:
                    out[row, s] = values[here + (pos[s] - shift - f) * step]
                s += 1
            ended[row], step_after[row] = end, s
            last[row] = values[here + (end - 1 - shift - f) * step]
        col += hi - lo
    return out, row_of


@compiled
def _steps(times: Ids, at: Ids, lookback: int, pos: Ids, oldest: Ids) -> None:
    """Per step of ``at``: the index of the newest of ``times`` at or before it (-1: none),
    and of the oldest within ``lookback`` of it, into ``pos`` and ``oldest``."""
    newest = older = 0
    for s in range(at.size):
        while newest < times.size and times[newest] <= at[s]:
            newest += 1
        while older < times.size and times[older] < at[s] - lookback:
            older += 1
        pos[s], oldest[s] = newest - 1, older


@compiled
def _tails(
    out: F64,
    row_of: Ids,
    bases: Ids,
    node: int,
    ended: Ids,
    step_after: Ids,
    last: F64,
    oldest: Ids,
) -> None:
    """The steps after the last run of each series of ``node``, within the lookback of its
    last cell, take that cell."""
    end = bases[node + 1] if node + 1 < bases.size else row_of.size
    for k in range(bases[node], end):
        row = row_of[k]
        if row < 0 or ended[row] < 0:
            continue
        s = step_after[row]
        while s < oldest.size and oldest[s] < ended[row]:
            out[row, s] = last[row]
            s += 1
