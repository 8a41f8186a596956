"""One source's points on one node: its closed segments, its open block, and its latest batch.

:class:`Axis` appends a whole batch at a time into numpy blocks
(:mod:`collector.tsdb.blocks`) and reads windows of them back as one matrix.

Why it also keeps its latest batch's values, and the newest point of each
series that left its batches lately (:mod:`collector.tsdb.ends`): an instant
query at "now" needs only each series' newest point, and Grafana asks it of
every node on every refresh. Those arrays of many nodes are read at once
(:mod:`collector.tsdb.latest`), where decoding the lookback window out of the
blocks walks every run of the window's segments.
"""

from __future__ import annotations

import itertools
import math
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from collector.normalise.batch import Series
from collector.tsdb.blocks import (
    BLOCK,
    MERGE,
    Cells,
    Ids,
    OpenBlock,
    Segment,
    absent,
    gapped,
    merge,
    renumbered,
)
from collector.tsdb.ends import KEEP, Ends, Newest, joined
from collector.tsdb.labels import Mask
from collector.tsdb.lookups import Windows, gridded
from collector.tsdb.series import ABSENT, STALE

if TYPE_CHECKING:
    from collector.tsdb.nodes import NodeSeries

AFTER = 0.001
"""Seconds after an axis' newest time where a series of a source that went gets its marker."""
_NO_IDS: Ids = np.zeros(0, np.int64)
_NO_SIDS: NDArray[np.int32] = np.zeros(0, np.int32)
_NO_ROWS: NDArray[np.intp] = np.zeros(0, np.intp)
Rows = NDArray[np.intp] | slice
"""Rows of the open block: a slice while a batch's series are its first rows, in order."""

Grid = tuple[NDArray[np.integer[Any]], NDArray[np.float64], NDArray[np.float64]]
"""Series ids (ascending), times (ascending), and their values, series x times."""
Part = Segment | OpenBlock
F64 = NDArray[np.float64]
_NO_VALUES: F64 = np.zeros(0)


def _ms(times: F64) -> Ids:
    """Times in seconds as milliseconds, rounded as the evaluator rounds them."""
    return np.rint(times * 1000).astype(np.int64)


def _arrays(series: Mapping[bytes, float]) -> tuple[tuple[bytes, ...], F64]:
    """A batch's keys and values; a normaliser's packed batch is read without a copy."""
    if isinstance(series, Series):
        keys, packed = series.packed()
        return keys, np.frombuffer(packed, np.float64)
    return tuple(series), np.fromiter(series.values(), np.float64, len(series))


@dataclass(frozen=True, slots=True)
class Closed:
    """An axis' closed segments as one: their times laid end to end (seconds, a list for
    ``bisect``, and ms), where each one ends among them and how many it holds, and which
    have a gapped run."""

    times: list[float]
    ms: Ids
    ends: list[int]
    sizes: list[int]
    gapped: list[bool]

    @staticmethod
    def of(segments: list[Segment]) -> Closed:
        """The segments' times laid end to end."""
        if not segments:
            return Closed([], _NO_IDS, [], [], [])
        times = np.concatenate([s.times for s in segments])
        sizes = [len(s.times) for s in segments]
        ends = list(itertools.accumulate(sizes))
        gaps = [len(s.gaps) > 0 for s in segments]
        return Closed(times.tolist(), _ms(times), ends, sizes, gaps)


class Axis:
    """One source's points on one node: closed segments, then the open block.

    ``live_*`` are the series its latest column recorded, in batch order, with
    their ids, open-block rows and values: a batch with the same keys is
    written by one numpy assignment. ``marked`` says the latest column holds
    only markers put there when the source went (:meth:`end`), which a late
    batch may move. ``ended`` holds the newest points of the series that left
    its batches lately. ``seen`` marks, by id, every series it ever recorded.
    """

    __slots__ = (
        "block",
        "closed",
        "closed_bytes",
        "ended",
        "last",
        "live_keys",
        "live_rows",
        "live_sids",
        "live_values",
        "marked",
        "seen",
        "segments",
    )

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.closed: Closed | None = None
        """The segments' times laid end to end, made at a read's first need (:meth:`_closed`)."""
        self.closed_bytes = 0
        self.block = OpenBlock(_NO_IDS)
        self.last = -math.inf
        self.live_keys: tuple[bytes, ...] = ()
        self.live_sids: NDArray[np.int32] = _NO_SIDS
        self.live_rows: Rows = slice(0, 0)
        self.live_values: F64 = _NO_VALUES
        self.marked = False
        self.ended = Ends()
        self.seen: Mask = np.zeros(0, bool)

    def record(
        self,
        node: NodeSeries,
        series: Mapping[bytes, float],
        t: float,
        kept: Container[bytes] | None,
    ) -> int:
        """Write a column at ``t``; return how many points the history gained."""
        moved = _NO_IDS
        if t <= self.last:
            if not (self.marked and self._previous() < t):
                return 0
            moved = self._retract()
        keys, values = _arrays(series)
        block = self._room()
        # Producers hand the same keys tuple from batch to batch (a layout's, a push node's):
        # for 250 series of ~180 bytes, `is` takes 0.05 us where `==` takes 1.2 us over shared
        # elements and 4.6 us over equal copies (measured with timeit), once per node and write.
        if (keys is self.live_keys or keys == self.live_keys) and not len(moved):
            rows, marks = self.live_rows, _NO_ROWS
        else:
            rows, marks = self._churn(node, keys, series, kept, moved, t)
        self.live_values = values
        if not keys and not len(marks):
            return -len(moved)
        block.write(t, rows, values, marks)
        self.last, self.marked = t, False
        return len(keys) + len(marks) - len(moved)

    def _churn(
        self,
        node: NodeSeries,
        keys: tuple[bytes, ...],
        series: Mapping[bytes, float],
        kept: Container[bytes] | None,
        moved: Ids,
        t: float,
    ) -> tuple[Rows, NDArray[np.intp]]:
        """Rows of a batch at ``t`` whose keys changed, and rows of the series that ended with it."""
        known = dict(zip(self.live_keys, self.live_sids.tolist(), strict=True))
        missing = [key for key in keys if key not in known]
        known.update(zip(missing, node.sids_of(missing), strict=True))
        sids = np.fromiter(map(known.__getitem__, keys), np.int64, len(keys))
        left = [i for i, key in enumerate(self.live_keys) if key not in series]
        if kept is not None:
            self._hand([i for i in left if self.live_keys[i] in kept])
            left = [i for i in left if self.live_keys[i] not in kept]
        marked = self.live_sids[left].astype(np.int64)
        if len(moved):
            marked = np.concatenate([marked, np.setdiff1d(moved, sids)])
        rows = self.block.rows_of(np.concatenate([sids, marked]), node.size)
        self.live_keys, self.live_sids = keys, sids.astype(np.int32)
        self.live_rows = rows[: len(keys)]
        self._see(node.size, sids)
        self._mark(marked, t)
        return self.live_rows, rows[len(keys) :]

    def end(self, node: NodeSeries, kept: Container[bytes], at: float) -> int:
        """The source went: mark its series ``kept`` lacks; it records none of them any more."""
        self._hand([i for i, key in enumerate(self.live_keys) if key in kept])
        sids = self.live_sids.tolist()
        gone = [sid for key, sid in zip(self.live_keys, sids, strict=True) if key not in kept]
        self.live_keys, self.live_sids, self.live_values = (), _NO_SIDS, _NO_VALUES
        self.live_rows = slice(0, 0)
        if not gone:
            return 0
        block = self._room()
        rows = block.rows_of(np.array(gone, np.int64), node.size)
        t = max(at, self.last + AFTER)
        block.write(t, rows, STALE)
        self._mark(np.array(gone, np.int64), t)
        self.last, self.marked = t, True
        return len(gone)

    def _hand(self, live: list[int]) -> None:
        """The latest batch's series at ``live`` (indexes) passed to another source unmarked:
        their newest points here are their last values."""
        if live:
            self.ended.add(self.live_sids[live], self.last, self.live_values[live], self.last)

    def _mark(self, sids: Ids, t: float) -> None:
        """Series ``sids`` got a staleness marker at ``t``."""
        self.ended.add(sids, t, STALE, self.last)

    def _see(self, size: int, sids: Ids) -> None:
        """Series ``sids`` (below ``size``) are recorded here from now on."""
        self.ended.back(sids)
        if len(self.seen) < size:
            self.seen = np.concatenate([self.seen, np.zeros(size + size // 4 + 16, bool)])
        self.seen[sids] = True

    def holds(self, want: Mask) -> bool:
        """Whether it ever recorded one of the series ``want`` marks."""
        held = min(len(self.seen), len(want))
        return bool((want[:held] & self.seen[:held]).any())

    def remembers(self, start: float) -> bool:
        """Whether :meth:`newest` knows every newest point at or after ``start``."""
        return start >= self.last - KEEP

    def newest(self, want: Mask | None, start: float, end: float, markers: bool = True) -> Newest:
        """The series ``want`` marks (all if None) whose newest point here lies in ``[start,
        end]`` (see :meth:`remembers`): their ids, and that point's time and value; those
        whose newest point is a staleness marker only if ``markers``."""
        ended = self.ended.at(want, start, end, markers)
        if not len(self.live_sids) or not start <= self.last <= end:
            return ended
        sids, values = self.live_sids.astype(np.intp), self.live_values
        if want is not None:
            picked = want[sids]
            sids, values = sids[picked], values[picked]
        live = (sids, np.full(len(sids), self.last), values)
        return joined(ended, live) if len(ended[0]) else live

    def renumber(self, alive: Ids, new: Ids) -> None:
        """Series ``alive[i]`` is now ``i``; ``new`` maps every old id (-1: forgotten)."""
        self.segments = [renumbered(s, new) for s in self.segments]
        self.closed = None
        self.block.renumber(new)
        self.live_sids = new[self.live_sids].astype(np.int32)
        self.ended.renumber(new)
        seen = np.zeros(len(alive), bool)
        held = alive < len(self.seen)
        seen[held] = self.seen[alive[held]]
        self.seen = seen

    def _previous(self) -> float:
        """The time of the column before the latest."""
        if self.block.n >= 2:
            return float(self.block.times[self.block.n - 2])
        return float(self.segments[-1].times[-1]) if self.segments else -math.inf

    def _retract(self) -> Ids:
        """Take back the latest column (markers only); return the series it marked."""
        marked = self.block.retract()
        self.ended.forget(at=self.last)  # its markers
        self.last = self._previous()
        self.marked = False
        return marked

    def _room(self) -> OpenBlock:
        """The open block, with a free column: a full one is packed and a new one opened."""
        if not self.block.full:
            return self.block
        segment = self.block.close()
        if segment is not None:
            self.segments.append(segment)
            self.closed = None
            self.closed_bytes += segment.nbytes
            self._merge()
        self.block = OpenBlock(self.live_sids)
        self.live_rows = slice(0, len(self.live_sids))
        return self.block

    def _merge(self) -> None:
        tail = self.segments[-MERGE:]
        if len(tail) < MERGE or any(len(s.times) != BLOCK for s in tail):
            return
        merged = merge(tail)
        self.segments[-MERGE:] = [] if merged is None else [merged]
        self.closed_bytes = sum(s.nbytes for s in self.segments)

    def drop(self, floor: float) -> bool:
        """Forget the segments wholly at or before ``floor``; whether there were any."""
        self.ended.forget(after=floor)
        keep = [s for s in self.segments if s.times[-1] > floor]
        if len(keep) == len(self.segments):
            return False
        self.segments = keep
        self.closed = None
        self.closed_bytes = sum(s.nbytes for s in keep)
        return True

    def visible(self, floor: float) -> int:
        """Points after ``floor``."""
        total = 0
        for segment in self.segments:
            if segment.times[0] > floor:
                total += segment.points
            else:
                lo = int(np.searchsorted(segment.times, floor, "right"))
                total += len(segment.cells(None, lo, len(segment.times)))
        block = self.block
        lo = int(np.searchsorted(block.times[: block.n], floor, "right"))
        return total + int((~absent(block.values[lo : block.n, : block.rows])).sum())

    def _parts(self, start: float, end: float) -> Iterator[tuple[Part, F64, int, int]]:
        """The blocks with times in ``[start, end]``, oldest first: each with its times and the
        index bounds ``[lo, hi)`` of the window in them."""
        parts: list[Part] = [self.block] if self.block.n else []
        for segment in reversed(self.segments):
            if segment.times[-1] < start:
                break
            parts.append(segment)
        for part in reversed(parts):
            at = part.times[: part.n] if isinstance(part, OpenBlock) else part.times
            if at[-1] < start or at[0] > end:
                continue
            lo = 0 if at[0] >= start else int(np.searchsorted(at, start))
            hi = len(at) if at[-1] <= end else int(np.searchsorted(at, end, "right"))
            yield part, at, lo, hi

    def cells(self, want: Mask | None, start: float, end: float) -> list[Cells]:
        """Points of the series ``want`` marks in ``[start, end]``, block by block, oldest first.

        Each block's cells come series by series, each series' oldest first.
        """
        found = []
        for part, at, lo, hi in self._parts(start, end):
            cells = part.cells(want, lo, hi)
            if len(cells):
                found.append(Cells(cells.sids, cells.cols, cells.values, at[cells.cols]))
        return found

    def grid(self, want: Mask | None, start: float, end: float) -> Grid | None:
        """The series ``want`` marks in ``[start, end]`` as one matrix: ids, times, series x times.

        The segments' runs are cut to the window in one pass
        (:func:`~collector.tsdb.lookups.gridded`) and the open block's window is
        copied whole, without listing cells: this is what a query reads. Rows
        without a point are left out.
        """
        parts = list(self._parts(start, end))
        if not parts:
            return None
        times = np.concatenate([at[lo:hi] for _, at, lo, hi in parts])
        segments = [(part, lo, hi) for part, _, lo, hi in parts if isinstance(part, Segment)]
        closed = sum(hi - lo for _, lo, hi in segments)
        size = (
            len(want)
            if want is not None
            else max((int(s.ids[-1]) + 1 for s, *_ in segments), default=0)
        )
        runs = gridded([Windows(segments, _ms(times[:closed]), want, size)])
        sids, matrix = runs.sids, runs.values
        part, _, lo, hi = parts[-1]
        if isinstance(part, OpenBlock):
            opened, window = part.window(want, lo, hi)
            sids = np.union1d(runs.sids, opened)
            matrix = np.full((len(sids), len(times)), ABSENT)
            matrix[np.searchsorted(sids, runs.sids), :closed] = runs.values
            matrix[np.searchsorted(sids, opened), closed:] = window
        held = ~absent(matrix).all(axis=1)
        if not held.all():
            sids, matrix = sids[held], matrix[held]
        return (sids, times, matrix) if len(sids) else None

    def windows(
        self, want: Mask | None, start: float, end: float
    ) -> tuple[list[tuple[Segment, int, int]], Ids] | None:
        """What a lookup of the series ``want`` marks in ``[start, end]`` reads
        (:mod:`collector.tsdb.lookups`): the segments with the window's bounds in their
        times, and the window's times (ms); the open block is packed for it as it would be
        once full. None if a wanted run has a gap.

        The closed segments are found among their times kept laid end to end
        (:meth:`_closed`), by ``bisect`` over Python lists: every range query reads
        every node's window, and a numpy call costs ~1 us: the window's bounds in
        the seven blocks of a 6-minute window at 2 s cost 9 us a node found block by
        block with numpy, 6 us this way.
        """
        closed = self._closed()
        lo, hi = bisect_left(closed.times, start), bisect_right(closed.times, end)
        windows: list[tuple[Segment, int, int]] = []
        times: list[Ids] = []
        if lo < hi:
            first, last = bisect_right(closed.ends, lo), bisect_right(closed.ends, hi - 1)
            for k in range(first, last + 1):
                base, size = closed.ends[k] - closed.sizes[k], closed.sizes[k]
                windows.append((self.segments[k], max(lo - base, 0), min(hi - base, size)))
            if any(closed.gapped[first : last + 1]) and gapped((w[0] for w in windows), want):
                return None
            times.append(closed.ms[lo:hi])
        block = self.block
        n = block.n
        if n and block.times[n - 1] >= start and block.times[0] <= end:
            packed = block.packed()
            if packed is not None:
                if gapped((packed,), want):
                    return None
                at = block.times[:n]
                a = 0 if at[0] >= start else int(np.searchsorted(at, start))
                b = n if at[-1] <= end else int(np.searchsorted(at, end, "right"))
                windows.append((packed, a, b))
                times.append(_ms(at[a:b]))
        if len(times) > 1:
            return windows, np.concatenate(times)
        return windows, times[0] if times else _NO_IDS

    def _closed(self) -> Closed:
        """The closed segments' times, made again after they change."""
        if self.closed is None:
            self.closed = Closed.of(self.segments)
        return self.closed

    @property
    def nbytes(self) -> int:
        """Bytes its arrays and live keys hold."""
        rows = self.live_rows.nbytes if isinstance(self.live_rows, np.ndarray) else 0
        live = self.live_sids.nbytes + rows + sys.getsizeof(self.live_keys)
        live += self.live_values.nbytes + self.seen.nbytes + self.ended.nbytes
        return self.closed_bytes + self.block.nbytes + live
