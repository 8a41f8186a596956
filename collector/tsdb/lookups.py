"""Looking a node's series up at reference times straight from its packed runs.

An instant selector of a range query needs, per series and step, only the
newest point at or before the step within the lookback. Expanding every point
of the window into a matrix and searching it costs all the window's cells (at
15 s resolution, four per step of a minute). A run of a segment (a series'
unbroken points from one time of the segment to another) already says where
its points are: the steps it covers take their cell at the step's time, and
the few steps after it ends and before the series' next run (within the
lookback) take its last cell. So one ``searchsorted`` of the runs' bounds among
the steps finds every cell a lookup needs, and only those cells are read.

A run with a time inside that holds no point (rare, see
:attr:`~collector.tsdb.blocks.Segment.gaps`) breaks that reasoning: the caller
then reads the window instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from collector.tsdb.blocks import Ids, Mask, Runs, Segment, expand, stale
from collector.tsdb.series import STALE

F64 = NDArray[np.float64]
_NEVER = np.iinfo(np.int64).max


def looked_up(
    windows: Sequence[tuple[Segment, int, int]],
    want: Mask | None,
    times_ms: Ids,
    at: Ids,
    lookback_ms: int,
) -> tuple[Ids, F64] | None:
    """The series ``want`` marks (all if None) in consecutive segments' windows ``[lo, hi)``,
    looked up at ``at`` (ms): their ids, and a series x steps matrix of each lookup's value,
    :data:`~collector.tsdb.series.STALE` where it finds none. ``times_ms`` are the windows'
    times laid end to end. Series no lookup finds are left out. None if a wanted run has
    a gap.
    """
    runs = Runs.of(windows, want)
    if runs.gapped:
        return None
    pos = np.searchsorted(times_ms, at, side="right") - 1
    oldest = np.searchsorted(times_ms, at - lookback_ms, side="left")
    begin, end = runs.begin, runs.end
    # the steps whose newest time lies inside each run, and those after it, before the
    # series' next run, within the lookback of its last point
    inside = np.searchsorted(pos, begin), np.searchsorted(pos, end)
    after = np.minimum(
        np.searchsorted(pos, _following(runs)), np.searchsorted(oldest, end - 1, side="right")
    )
    run, step = expand(inside[0], inside[1] - inside[0])
    col = pos[step]
    values = np.where(col >= oldest[step], runs.cells(run, col), STALE)
    tail_run, tail_step = expand(inside[1], np.maximum(after - inside[1], 0))
    last = runs.cells(np.arange(len(begin)), end - 1)
    sids = np.unique(runs.sids)
    rows = np.searchsorted(sids, runs.sids)
    out = np.full((len(sids), len(at)), STALE)
    out[rows[run], step] = values
    out[rows[tail_run], tail_step] = last[tail_run]
    found = ~stale(out).all(axis=1)  # a series none of the lookups finds is left out
    return (sids, out) if found.all() else (sids[found], out[found])


def _following(runs: Runs) -> Ids:
    """Where each run's series has its next run (never: the largest int64)."""
    order = np.lexsort((runs.begin, runs.sids))
    same = runs.sids[order][1:] == runs.sids[order][:-1]
    following = np.full(len(runs.sids), _NEVER, np.int64)
    following[order[:-1][same]] = runs.begin[order][1:][same]
    return following
