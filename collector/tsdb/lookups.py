"""Looking series up at reference times straight from their packed runs, many nodes at once.

An instant selector of a range query needs, per series and step, only the
newest point at or before the step within the lookback. Expanding every point
of the window into a matrix and searching it costs all the window's cells (at
15 s resolution, four per step of a minute). A run of a segment (a series'
unbroken points from one time of the segment to another) already says where
its points are: the steps it covers take their cell at the step's time, and
the few steps after it ends and before the series' next run (within the
lookback) take its last cell. So one ``searchsorted`` of the runs' bounds among
the steps finds every cell a lookup needs, and only those cells are read.

Why many nodes at once: done node by node, the five dozen numpy calls a lookup
takes cost ~150 µs a node whatever its size. Laid end to end, the nodes' times
become one ascending axis (node ``i``'s times shifted by ``i`` spans), their
steps too, and one lookup serves them all; a pair of a run and a step of
different nodes is dropped.

A run with a time inside that holds no point (rare, see
:attr:`~collector.tsdb.blocks.Segment.gaps`) breaks that reasoning: such a
node is read as a window instead (:func:`~collector.tsdb.blocks.gapped`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from collector.tsdb.blocks import Ids, Mask, Runs, Segment, expand, stale
from collector.tsdb.series import ABSENT, STALE

F64 = NDArray[np.float64]
_NEVER = np.iinfo(np.int64).max


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
    its node's window times (:data:`ABSENT` past them, to the widest node's). No node may
    hold a gapped run it wants.

    What :meth:`~collector.tsdb.axis.Axis.grid` gives node by node, for many nodes in
    one pass over their runs: a range selector's read, a few dozen numpy calls a node
    otherwise (200 nodes: 48 ms where the cells themselves took a fraction).
    """
    sizes = np.array([node.size for node in nodes], np.int64)
    bases = np.cumsum(sizes) - sizes
    counts = [len(node.segments) for node in nodes]
    runs = Runs.of(
        [w for node in nodes for w in node.segments], _wants(nodes), np.repeat(bases, counts)
    )
    widths = np.array([len(node.times_ms) for node in nodes], np.int64)
    node_of_run = np.repeat(np.arange(len(nodes)), counts)[runs.part]
    run, col = expand(runs.begin, runs.end - runs.begin)  # columns of every node end to end
    sids, rows = np.unique(runs.sids, return_inverse=True)
    out = np.full((len(sids), int(widths.max(initial=0))), ABSENT)
    out[rows[run], col - (np.cumsum(widths) - widths)[node_of_run[run]]] = runs.cells(run, col)
    node = np.searchsorted(bases, sids, side="right") - 1
    return LookedUp(node, sids - bases[node], out)


def _wants(nodes: Sequence[Windows]) -> Mask | None:
    """The nodes' wanted series over their ids laid end to end (None: all of every node)."""
    if all(node.want is None for node in nodes):
        return None
    return np.concatenate([np.ones(n.size, bool) if n.want is None else n.want for n in nodes])


def looked_up(nodes: Sequence[Windows], at: Ids, lookback_ms: int) -> LookedUp:
    """The wanted series of ``nodes`` looked up at ``at`` (ms, ascending); series no lookup
    finds are left out. No node may hold a gapped run it wants."""
    steps = len(at)
    sizes = np.array([node.size for node in nodes], np.int64)
    bases = np.cumsum(sizes) - sizes
    origin = min(int(at[0]) - lookback_ms, *(int(n.times_ms[0]) for n in nodes))
    span = max(int(at[-1]), *(int(n.times_ms[-1]) for n in nodes)) - origin + 1
    shifts = np.arange(len(nodes), dtype=np.int64) * span - origin
    times = np.concatenate(
        [node.times_ms + shift for node, shift in zip(nodes, shifts.tolist(), strict=True)]
    )
    counts = [len(node.segments) for node in nodes]
    runs = Runs.of(
        [w for node in nodes for w in node.segments], _wants(nodes), np.repeat(bases, counts)
    )
    node_of_run = np.repeat(np.arange(len(nodes)), counts)[runs.part]
    refs = (shifts[:, None] + at[None, :]).ravel()  # every node's steps, node after node
    pos = np.searchsorted(times, refs, side="right") - 1
    oldest = np.searchsorted(times, refs - lookback_ms, side="left")
    begin, end = runs.begin, runs.end
    # the steps whose newest time lies inside each run, and those after it, before the
    # series' next run, within the lookback of its last point
    inside = np.searchsorted(pos, begin), np.searchsorted(pos, end)
    after = np.minimum(
        np.searchsorted(pos, _following(runs)), np.searchsorted(oldest, end - 1, side="right")
    )
    # a node's step with no point at or before it lands on the node before it: not its own
    run, step = _own(node_of_run, steps, *expand(inside[0], inside[1] - inside[0]))
    col = pos[step]
    values = np.where(col >= oldest[step], runs.cells(run, col), STALE)
    tail_run, tail_step = _own(
        node_of_run, steps, *expand(inside[1], np.maximum(after - inside[1], 0))
    )
    last = runs.cells(np.arange(len(begin)), end - 1)
    sids = np.unique(runs.sids)
    rows = np.searchsorted(sids, runs.sids)
    out = np.full((len(sids), steps), STALE)
    out[rows[run], step % steps] = values
    out[rows[tail_run], tail_step % steps] = last[tail_run]
    found = ~stale(out).all(axis=1)  # a series none of the lookups finds is left out
    if not found.all():
        sids, out = sids[found], out[found]
    node = np.searchsorted(bases, sids, side="right") - 1
    return LookedUp(node, sids - bases[node], out)


def _own(node_of_run: Ids, steps: int, run: Ids, step: Ids) -> tuple[Ids, Ids]:
    """The (run, step) pairs whose step is one of the run's node's."""
    own = node_of_run[run] == step // steps
    return (run, step) if own.all() else (run[own], step[own])


def _following(runs: Runs) -> Ids:
    """Where each run's series has its next run (never: the largest int64)."""
    order = np.lexsort((runs.begin, runs.sids))
    same = runs.sids[order][1:] == runs.sids[order][:-1]
    following = np.full(len(runs.sids), _NEVER, np.int64)
    following[order[:-1][same]] = runs.begin[order][1:][same]
    return following
