"""One time axis's points in numpy blocks: an open matrix, then packed closed segments.

A cell holds one of three states in 8 bytes: a reading, Prometheus' staleness
marker (:data:`~collector.tsdb.series.STALE`), or :data:`ABSENT`, a NaN of its
own bit pattern meaning "this series has no point at this time of the axis".

Why this layout: an axis is appended one whole batch at a time, so the open
block is a matrix of :data:`BLOCK` times x series, a batch written into one
contiguous row by one numpy assignment (time-major, so the reductions that pack
it run across series, not along 8-cell rows). Once full it is packed into a
:class:`Segment`: each series keeps only the run of times from its first to its
last point there (a pod that ended or started inside the block costs nothing
outside its run), and a run of one repeated value (limits, sizes, build info:
about half of all runs) keeps that value once. Keeping whole rows would not be
enough: the simulator's pods live ~20 minutes, so most series start or end
inside a block, and whole rows measured 1.2 to 3 cells per point. :data:`MERGE`
closed blocks are merged into one segment, so runs get longer and a read
touches fewer of them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from collector.compiled import array_at, inlined
from collector.tsdb.series import ABSENT, STALE

F64 = NDArray[np.float64]
Ids = NDArray[np.int64]
Mask = NDArray[np.bool_]

ABSENT_BITS: int = struct.unpack("<Q", struct.pack("<d", ABSENT))[0]
"""The bits of :data:`collector.tsdb.series.ABSENT`, which a cell holds where a series has no point."""
_STALE_BITS = struct.unpack("<Q", struct.pack("<d", STALE))[0]

NO_GAPS: NDArray[np.intp] = np.zeros(0, np.intp)
"""The gaps of a segment without any, shared."""
_NO_MARKS: NDArray[np.intp] = np.zeros(0, np.intp)

BLOCK = 8
"""Times of an open block: a series that starts or ends in it costs up to a block of cells."""
MERGE = 4
"""Closed blocks merged into one segment (:data:`BLOCK` x :data:`MERGE` must stay under 256)."""
_HEAD = 3
"""The int64s a segment's layout begins with: its runs, its values, their offset."""


def absent(values: F64) -> Mask:
    """Which cells are :data:`ABSENT`."""
    bits: NDArray[Any] = values.view(np.uint64)
    found: Mask = bits == ABSENT_BITS
    return found


def stale(values: F64) -> Mask:
    """Which cells are staleness markers."""
    bits: NDArray[Any] = values.view(np.uint64)
    found: Mask = bits == _STALE_BITS
    return found


@dataclass(frozen=True, slots=True)
class Cells:
    """Points as parallel arrays: series id, time index in the block, value; no absent cells.

    ``times`` holds their times once a reader has looked them up.
    """

    sids: NDArray[Any]
    cols: Ids
    values: F64
    times: F64 | None = None

    def __len__(self) -> int:
        return len(self.sids)


def _cells(matrix: F64, ids: NDArray[Any], want: Mask | None, lo: int, hi: int) -> Cells:
    """The cells of times ``[lo, hi)`` of a times x series ``matrix``, series ``want`` marks.

    They come series by series (in the order of ``ids``), each oldest first.
    """
    part = matrix[lo:hi]
    if want is not None:
        picked = want[ids]
        part, ids = part[:, picked], ids[picked]
    bits: NDArray[Any] = part.view(np.uint64)
    rows, cols = np.nonzero((bits != ABSENT_BITS).T)
    return Cells(ids[rows], cols + lo, part[cols, rows])


class OpenBlock:
    """The block being appended: a matrix of :data:`BLOCK` times x series."""

    __slots__ = ("_packed", "ids", "n", "rows", "times", "values")

    def __init__(self, sids: NDArray[np.integer[Any]]) -> None:
        count = len(sids)
        capacity = count + _slack(count)
        self.ids: Ids = np.zeros(capacity, np.int64)
        self.ids[:count] = sids
        self.values: F64 = np.full((BLOCK, capacity), ABSENT)
        self.times: F64 = np.zeros(BLOCK)
        self.rows = count
        """Series rows in use (the first ``rows`` entries of ``ids``, columns of ``values``)."""
        self.n = 0
        """Times in use."""
        self._packed: tuple[Segment | None] | None = None
        """:meth:`packed`'s answer until the block changes."""

    @property
    def full(self) -> bool:
        """Whether every time is used."""
        return self.n == BLOCK

    @property
    def nbytes(self) -> int:
        """Bytes its arrays hold."""
        return self.ids.nbytes + self.values.nbytes + self.times.nbytes

    def rows_of(self, sids: Ids, size: int) -> NDArray[np.intp]:
        """The rows of ``sids`` (distinct series ids below ``size``), adding the missing ones."""
        where = np.full(size, -1, np.intp)
        where[self.ids[: self.rows]] = np.arange(self.rows)
        rows = where[sids]
        missing = rows < 0
        if missing.any():
            rows[missing] = self._add(sids[missing])
        return rows

    def _add(self, sids: Ids) -> NDArray[np.intp]:
        end = self.rows + len(sids)
        if end > len(self.ids):
            capacity = end + _slack(end)
            ids = np.zeros(capacity, np.int64)
            ids[: self.rows] = self.ids[: self.rows]
            grown = np.full((BLOCK, capacity), ABSENT)
            grown[:, : self.rows] = self.values[:, : self.rows]
            self.ids, self.values = ids, grown
        self.ids[self.rows : end] = sids
        added = np.arange(self.rows, end)
        self.rows = end
        return added

    def write(
        self, t: float, rows: NDArray[np.intp] | slice, values: F64 | float, marks: Ids = _NO_MARKS
    ) -> None:
        """Append a column at ``t``: ``values`` at ``rows``, staleness markers at ``marks``."""
        col = self.n
        self.times[col] = t
        self.values[col, rows] = values
        if len(marks):
            self.values[col, marks] = STALE
        self.n += 1
        self._packed = None

    def retract(self) -> Ids:
        """Take back the latest column; return the series it marked stale."""
        col = self.n - 1
        column = self.values[col, : self.rows]
        marked = self.ids[np.flatnonzero(stale(column))]
        column[:] = ABSENT
        self.n = col
        self._packed = None
        return marked

    def renumber(self, new: Ids) -> None:
        """Series ``i`` is now ``new[i]``."""
        self.ids[: self.rows] = new[self.ids[: self.rows]]
        self._packed = None

    def packed(self) -> Segment | None:
        """The block packed as it would be once full (None if it holds nothing).

        Kept until the block changes: each range query reads every node's open
        block, and the several queries of one dashboard refresh read the same.
        """
        if self._packed is None:
            times = self.times[: self.n].copy()
            self._packed = (pack(times, self.ids[: self.rows], self.values[: self.n, : self.rows]),)
        return self._packed[0]

    def cells(self, want: Mask | None, lo: int, hi: int) -> Cells:
        """The cells of times ``[lo, hi)`` of the series ``want`` marks (all if None)."""
        return _cells(self.values[:, : self.rows], self.ids[: self.rows], want, lo, hi)

    def window(self, want: Mask | None, lo: int, hi: int) -> tuple[Ids, F64]:
        """The series ``want`` marks (all if None) over times ``[lo, hi)``: their ids and a
        series x times matrix."""
        ids = self.ids[: self.rows]
        if want is None:
            return ids, self.values[lo:hi, : self.rows].T
        picked = np.flatnonzero(want[ids])
        return ids[picked], self.values[lo:hi, picked].T

    def close(self) -> Segment | None:
        """Pack the block into a segment (None if it holds nothing)."""
        order = np.argsort(self.ids[: self.rows])
        matrix = self.values[: self.n, order]
        return pack(self.times[: self.n].copy(), self.ids[order], matrix)


@dataclass(frozen=True, slots=True)
class Segment:
    """A closed stretch of an axis: each series' run of cells, packed.

    Series ``ids[r]`` (ascending) has its run from time ``first[r]`` for
    ``width[r]`` times; ``values`` holds the runs' first ``stored[r]`` cells
    series by series (all of them, or the first alone for one repeated value),
    so the runs of the few series a query selects are read without unpacking
    the rest. ``ids``, ``first``, ``width``, ``stored`` and ``values`` lie in one
    ``buffer`` at ``address`` (:meth:`laid`), which compiled reads take through
    :class:`~collector.compiled.Pinned` (:func:`runs_at`).
    """

    times: F64
    ids: NDArray[np.int32]
    first: NDArray[np.uint8]
    width: NDArray[np.uint8]
    stored: NDArray[np.uint8]
    values: F64
    points: int
    gaps: NDArray[np.intp]
    """Indexes of the runs with a time inside that holds no point (rare: nearly always empty)."""
    buffer: NDArray[np.uint8]
    address: int
    """The buffer's address, taken once: taken for each pass it would cost ~1 us a segment."""

    @staticmethod
    def laid(
        times: F64,
        ids: NDArray[Any],
        first: NDArray[Any],
        width: NDArray[Any],
        stored: NDArray[Any],
        values: F64,
        points: int,
        gaps: NDArray[np.intp],
    ) -> Segment:
        """A segment of these runs, laid out for :func:`runs_at`: a head (how many runs and
        values, and the values' offset), then ids, first times, widths and stored counts,
        then the values from the next multiple of 8 bytes."""
        n = len(ids)
        at = 8 * (_HEAD + (7 * n + 7) // 8)
        buffer = np.empty(at + 8 * len(values), np.uint8)
        buffer[: 8 * _HEAD].view(np.int64)[:] = (n, len(values), at)
        laid_ids = buffer[8 * _HEAD : 8 * _HEAD + 4 * n].view(np.int32)
        laid_ids[:] = ids
        rest = buffer[8 * _HEAD + 4 * n : 8 * _HEAD + 7 * n].reshape(3, n)
        rest[:] = (first, width, stored)
        laid_values = buffer[at:].view(np.float64)
        laid_values[:] = values
        address = buffer.ctypes.data
        laid = (laid_ids, rest[0], rest[1], rest[2], laid_values)
        return Segment(times, *laid, points, gaps, buffer, address)

    @property
    def nbytes(self) -> int:
        """Bytes its arrays hold."""
        return self.times.nbytes + self.buffer.nbytes + self.gaps.nbytes

    def cells(self, want: Mask | None, lo: int, hi: int) -> Cells:
        """The cells of times ``[lo, hi)`` of the series ``want`` marks (all if None)."""
        return _cells(self.dense(), self.ids, want, lo, hi)

    def dense(self) -> F64:
        """The segment as a times x series matrix again, :data:`ABSENT` outside the runs."""
        return self.rows(np.arange(len(self.ids)), 0, len(self.times)).T

    def rows(self, picked: NDArray[Any], lo: int, hi: int) -> F64:
        """Series at indexes ``picked`` over times ``[lo, hi)``, series x times."""
        starts = np.cumsum(self.stored, dtype=np.int64) - self.stored
        first = self.first[picked].astype(np.int64)
        at = np.arange(lo, hi, dtype=np.int64)[None, :] - first[:, None]
        run = (at >= 0) & (at < self.width[picked, None])
        step = np.where(self.stored[picked] > 1, 1, 0)
        index = starts[picked, None] + np.maximum(at, 0) * step[:, None]
        taken = self.values.take(np.minimum(index, max(len(self.values) - 1, 0)))
        window: F64 = np.where(run, taken, ABSENT)
        return window


@inlined
def runs_at(table: Any, row: int) -> tuple[Any, Any, Any, Any, F64]:
    """In a compiled loop, the segment laid (:meth:`Segment.laid`) at ``table``'s ``row``
    (:class:`~collector.compiled.Pinned`): its runs' ids, first times, widths and stored
    counts, and its values."""
    head = array_at(table, row, 0, _HEAD, np.int64)
    n, at = head[0], 8 * _HEAD
    ids = array_at(table, row, at, n, np.int32)
    first = array_at(table, row, at + 4 * n, n, np.uint8)
    width = array_at(table, row, at + 5 * n, n, np.uint8)
    stored = array_at(table, row, at + 6 * n, n, np.uint8)
    return ids, first, width, stored, array_at(table, row, head[2], head[1], np.float64)


def gapped(segments: Iterable[Segment], want: Mask | None) -> bool:
    """Whether a run of a series ``want`` marks (all if None) has a time inside without a point."""
    return any(
        len(seg.gaps) and (want is None or bool(want[seg.ids[seg.gaps]].any())) for seg in segments
    )


def _offsets(times: int, first: NDArray[Any]) -> NDArray[np.uint64]:
    """Each cell's time less its series' first, as unsigned: a cell before it is huge."""
    offsets: NDArray[np.uint64] = (np.arange(times)[:, None] - first).view(np.uint64)
    return offsets


def pack(times: F64, ids: Ids, matrix: F64) -> Segment | None:
    """A segment of a ``times`` x series ``ids`` (ascending) ``matrix``; None if it is empty.

    Each series keeps its cells from its first point to its last, or that first
    value alone when every cell of the run has its bit pattern.
    """
    bits: NDArray[Any] = matrix.view(np.uint64)
    present = bits != ABSENT_BITS
    held = present.any(axis=0)
    if not held.all():
        ids, matrix, bits, present = ids[held], matrix[:, held], bits[:, held], present[:, held]
    if not len(ids):
        return None
    first = present.argmax(axis=0)
    width = len(times) - present[::-1].argmax(axis=0) - first
    once = (bits == bits[first, np.arange(len(ids))]).sum(axis=0) == width
    stored = np.where(once, 1, width)
    counts = present.sum(axis=0)
    gaps = np.flatnonzero(counts != width)
    return Segment.laid(
        times,
        ids,
        first,
        width,
        stored,
        matrix.T[(_offsets(len(times), first) < stored).T],
        int(counts.sum()),
        gaps if len(gaps) else NO_GAPS,
    )


def merge(segments: list[Segment]) -> Segment | None:
    """One segment holding every cell of ``segments`` (consecutive, oldest first)."""
    ids = np.unique(np.concatenate([s.ids for s in segments])).astype(np.int64)
    times = np.concatenate([s.times for s in segments])
    matrix = np.full((len(times), len(ids)), ABSENT)
    at = 0
    for segment in segments:
        width = len(segment.times)
        matrix[at : at + width, np.searchsorted(ids, segment.ids)] = segment.dense()
        at += width
    return pack(times, ids, matrix)


def renumbered(segment: Segment, new: Ids) -> Segment:
    """``segment`` with every series id ``i`` replaced by ``new[i]`` (order kept)."""
    return Segment.laid(
        segment.times,
        new[segment.ids],
        segment.first,
        segment.width,
        segment.stored,
        segment.values,
        segment.points,
        segment.gaps,
    )


def _slack(rows: int) -> int:
    """Spare rows for series that start inside a block (the open block's row growth)."""
    return max(8, rows // 16)
