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

import itertools
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from collector.tsdb.blocks import Ids, Mask, Segment, stale
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
    runs = _Runs.of(windows, want)
    if runs is None:
        return None
    pos = np.searchsorted(times_ms, at, side="right") - 1
    oldest = np.searchsorted(times_ms, at - lookback_ms, side="left")
    begin, end = runs.begin, runs.end
    # the steps whose newest time lies inside each run, and those after it, before the
    # series' next run, within the lookback of its last point
    inside = np.searchsorted(pos, begin), np.searchsorted(pos, end)
    after = np.minimum(
        np.searchsorted(pos, runs.following()), np.searchsorted(oldest, end - 1, side="right")
    )
    run, step = _expand(inside[0], inside[1] - inside[0])
    col = pos[step]
    values = np.where(col >= oldest[step], runs.cells(run, col), STALE)
    tail_run, tail_step = _expand(inside[1], np.maximum(after - inside[1], 0))
    last = runs.cells(np.arange(len(begin)), end - 1)
    sids = np.unique(runs.sids)
    rows = np.searchsorted(sids, runs.sids)
    out = np.full((len(sids), len(at)), STALE)
    out[rows[run], step] = values
    out[rows[tail_run], tail_step] = last[tail_run]
    found = ~stale(out).all(axis=1)  # a series none of the lookups finds is left out
    return (sids, out) if found.all() else (sids[found], out[found])


def _expand(first: Ids, count: Ids) -> tuple[Ids, Ids]:
    """For runs whose steps are ``first .. first + count - 1``: each cell's run and step."""
    run = np.repeat(np.arange(len(first)), count)
    return run, first[run] + np.arange(len(run)) - (np.cumsum(count) - count)[run]


class _Runs:
    """The wanted runs of consecutive segments' windows: bounds in the windows' columns laid
    end to end (``begin`` to ``end``, exclusive), and where their cells lie."""

    def __init__(
        self, segments: list[Segment], sids: Ids, part: Ids, fields: tuple[Ids, ...]
    ) -> None:
        self.segments = segments
        self.sids = sids
        self.part = part
        self.begin, self.end, self.shift, self.first, self.start, self.step = fields

    @staticmethod
    def of(windows: Sequence[tuple[Segment, int, int]], want: Mask | None) -> _Runs | None:
        """The runs ``want`` marks with points inside the windows; None if one has a gap."""
        segments = [w[0] for w in windows]
        counts = [len(seg.ids) for seg in segments]
        offsets = np.cumsum(counts) - counts
        ids = np.concatenate([seg.ids for seg in segments])
        picked = np.arange(len(ids)) if want is None else np.flatnonzero(want[ids])
        if any(len(seg.gaps) for seg in segments):
            gaps = np.concatenate(
                [seg.gaps + at for seg, at in zip(segments, offsets, strict=True)]
            )
            if np.isin(gaps, picked).any():
                return None
        part = np.repeat(np.arange(len(segments)), counts)
        stored = np.concatenate([seg.stored for seg in segments]).astype(np.int64)
        sizes = np.array([len(seg.values) for seg in segments], np.int64)
        start = (np.cumsum(stored) - stored - (np.cumsum(sizes) - sizes)[part])[picked]
        first = np.concatenate([seg.first for seg in segments]).astype(np.int64)[picked]
        width = np.concatenate([seg.width for seg in segments]).astype(np.int64)[picked]
        part = part[picked]
        lo, hi = (
            np.array(bounds, np.int64) for bounds in zip(*[w[1:] for w in windows], strict=True)
        )
        shift = (np.cumsum(hi - lo) - (hi - lo) - lo)[part]
        begin = np.maximum(first, lo[part])
        end = np.minimum(first + width, hi[part])
        kept = np.flatnonzero(end > begin)
        step = (stored[picked] > 1).astype(np.int64)
        fields = (begin + shift, end + shift, shift, first, start, step)
        sids = ids[picked].astype(np.int64)[kept]
        return _Runs(segments, sids, part[kept], tuple(f[kept] for f in fields))

    def following(self) -> Ids:
        """Where each run's series has its next run (never: the largest int64)."""
        order = np.lexsort((self.begin, self.sids))
        same = self.sids[order][1:] == self.sids[order][:-1]
        following = np.full(len(self.sids), _NEVER, np.int64)
        following[order[:-1][same]] = self.begin[order][1:][same]
        return following

    def cells(self, run: Ids, col: Ids) -> F64:
        """The values of runs ``run`` (ascending) at columns ``col``, one per pair."""
        local = col - self.shift[run]
        index = self.start[run] + (local - self.first[run]) * self.step[run]
        taken = np.cumsum(np.bincount(self.part[run], minlength=len(self.segments))).tolist()
        bounds = itertools.pairwise([0, *taken])
        return np.concatenate(
            [seg.values.take(index[a:b]) for seg, (a, b) in zip(self.segments, bounds, strict=True)]
        )
