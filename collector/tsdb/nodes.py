"""One node's series in the history: its time axes, one per source, and its label index.

:class:`NodeSeries` numbers a node's series and keeps their keys, labels and
hashes; each :class:`Axis` holds one source's points in numpy blocks
(:mod:`collector.tsdb.blocks`). :class:`~collector.tsdb.history.History` owns one
NodeSeries per node and is what readers see.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Container, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from collector.exposition.render import key_labels
from collector.tsdb.blocks import (
    BLOCK,
    MERGE,
    Cells,
    Ids,
    OpenBlock,
    Segment,
    absent,
    merge,
    renumbered,
    stale,
)
from collector.tsdb.labels import LabelIndex, Mask, Verdicts, decide
from collector.tsdb.series import ABSENT, STALE, LabelSet, Matcher

AFTER = 0.001
"""Seconds after an axis' newest time where a series of a source that went gets its marker."""
_NO_IDS: Ids = np.zeros(0, np.int64)
_NO_SIDS: NDArray[np.int32] = np.zeros(0, np.int32)
_NO_ROWS: NDArray[np.intp] = np.zeros(0, np.intp)
Rows = NDArray[np.intp] | slice
"""Rows of the open block: a slice while a batch's series are its first rows, in order."""

Found = tuple[Ids, NDArray[np.float64], NDArray[np.float64]]
Grid = tuple[NDArray[np.integer[Any]], NDArray[np.float64], NDArray[np.float64]]
"""Series ids (ascending), times (ascending), and their values, series x times."""
Part = Segment | OpenBlock
F64 = NDArray[np.float64]


def _among(held: NDArray[np.int32], wanted: NDArray[np.int32]) -> NDArray[np.intp]:
    """Where ``held`` has one of the ``wanted`` values."""
    if not len(held) or not len(wanted):
        return _NO_ROWS
    ordered = np.sort(wanted)
    at = np.minimum(np.searchsorted(ordered, held), len(ordered) - 1)
    return np.flatnonzero(ordered[at] == held)


def _hash(key: bytes) -> int:
    """32 bits of the key's hash: ids are found by hash, then checked against the key."""
    return hash(key) % (1 << 31)


class Axis:
    """One source's points on one node: closed segments, then the open block.

    ``live_*`` are the series its latest column recorded, in batch order, with
    their ids and open-block rows: a batch with the same keys is written by
    one numpy assignment. ``marked`` says the latest column holds only markers
    put there when the source went (:meth:`end`), which a late batch may move.
    """

    __slots__ = (
        "block",
        "closed_bytes",
        "last",
        "live_keys",
        "live_rows",
        "live_sids",
        "marked",
        "segments",
    )

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.closed_bytes = 0
        self.block = OpenBlock(_NO_IDS)
        self.last = -math.inf
        self.live_keys: tuple[bytes, ...] = ()
        self.live_sids: NDArray[np.int32] = _NO_SIDS
        self.live_rows: Rows = slice(0, 0)
        self.marked = False

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
        keys = tuple(series)
        block = self._room()
        if keys == self.live_keys and not len(moved):
            rows, marks = self.live_rows, _NO_ROWS
        else:
            rows, marks = self._churn(node, keys, series, kept, moved)
        if not keys and not len(marks):
            return -len(moved)
        col = block.n
        block.times[col] = t
        block.values[col, rows] = np.fromiter(series.values(), np.float64, len(keys))
        if len(marks):
            block.values[col, marks] = STALE
        block.n += 1
        self.last, self.marked = t, False
        return len(keys) + len(marks) - len(moved)

    def _churn(
        self,
        node: NodeSeries,
        keys: tuple[bytes, ...],
        series: Mapping[bytes, float],
        kept: Container[bytes] | None,
        moved: Ids,
    ) -> tuple[Rows, NDArray[np.intp]]:
        """Rows of a batch whose keys changed, and rows of the series that ended with it."""
        known = dict(zip(self.live_keys, self.live_sids.tolist(), strict=True))
        missing = [key for key in keys if key not in known]
        known.update(zip(missing, node.sids_of(missing), strict=True))
        sids = np.fromiter(map(known.__getitem__, keys), np.int64, len(keys))
        gone = [key for key in self.live_keys if key not in series]
        if kept is not None:
            gone = [key for key in gone if key not in kept]
        marked = np.array([known[key] for key in gone], np.int64)
        if len(moved):
            marked = np.concatenate([marked, np.setdiff1d(moved, sids)])
        rows = self.block.rows_of(np.concatenate([sids, marked]), node.size)
        self.live_keys, self.live_sids = keys, sids.astype(np.int32)
        self.live_rows = rows[: len(keys)]
        return self.live_rows, rows[len(keys) :]

    def end(self, node: NodeSeries, kept: Container[bytes], at: float) -> int:
        """The source went: mark its series ``kept`` lacks; it records none of them any more."""
        gone = [
            sid
            for key, sid in zip(self.live_keys, self.live_sids.tolist(), strict=True)
            if key not in kept
        ]
        self.live_keys, self.live_sids = (), _NO_SIDS
        self.live_rows = slice(0, 0)
        if not gone:
            return 0
        block = self._room()
        rows = block.rows_of(np.array(gone, np.int64), node.size)
        t = max(at, self.last + AFTER)
        block.times[block.n] = t
        block.values[block.n, rows] = STALE
        block.n += 1
        self.last, self.marked = t, True
        return len(gone)

    def _previous(self) -> float:
        """The time of the column before the latest."""
        if self.block.n >= 2:
            return float(self.block.times[self.block.n - 2])
        return float(self.segments[-1].times[-1]) if self.segments else -math.inf

    def _retract(self) -> Ids:
        """Take back the latest column (markers only); return the series it marked."""
        block = self.block
        col = block.n - 1
        column = block.values[col, : block.rows]
        marked = block.ids[np.flatnonzero(stale(column))]
        self.last = self._previous()
        column[:] = ABSENT
        block.n = col
        self.marked = False
        return marked

    def _room(self) -> OpenBlock:
        """The open block, with a free column: a full one is packed and a new one opened."""
        if not self.block.full:
            return self.block
        segment = self.block.close()
        if segment is not None:
            self.segments.append(segment)
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
        keep = [s for s in self.segments if s.times[-1] > floor]
        if len(keep) == len(self.segments):
            return False
        self.segments = keep
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

        Each block's window is copied into place whole, without listing its
        cells: this is what a query reads. Rows without a point are left out.
        """
        windows = [
            (at[lo:hi], *part.window(want, lo, hi)) for part, at, lo, hi in self._parts(start, end)
        ]
        if not windows:
            return None
        if len(windows) == 1:
            times, sids, matrix = windows[0]
            order = np.argsort(sids)
            sids, matrix = sids[order], matrix[order]
        else:
            sids = np.unique(np.concatenate([w[1] for w in windows]))
            times = np.concatenate([w[0] for w in windows])
            matrix = np.full((len(sids), len(times)), ABSENT)
            at = 0
            for part_times, ids, values in windows:
                matrix[np.searchsorted(sids, ids), at : at + len(part_times)] = values
                at += len(part_times)
        held = ~absent(matrix).all(axis=1)
        if not held.all():
            sids, matrix = sids[held], matrix[held]
        return (sids, times, matrix) if len(sids) else None

    @property
    def nbytes(self) -> int:
        """Bytes its arrays and live keys hold."""
        rows = self.live_rows.nbytes if isinstance(self.live_rows, np.ndarray) else 0
        live = self.live_sids.nbytes + rows + sys.getsizeof(self.live_keys)
        return self.closed_bytes + self.block.nbytes + live


class NodeSeries:
    """One node: its axes, its series' keys and hashes by id, and its label index."""

    __slots__ = ("axes", "hashes", "index", "key_bytes", "keys", "labels", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.axes: dict[str, Axis] = {}
        self.keys: list[bytes] = []
        self.key_bytes = 0
        self.hashes: NDArray[np.int32] = np.zeros(16, np.int32)
        self.index = LabelIndex()
        self.labels: dict[int, LabelSet] = {}
        """Label sets of the series a query returned, built on first need."""

    @property
    def size(self) -> int:
        """Series ids given out: ``0..size-1``."""
        return len(self.keys)

    def sids_of(self, keys: Sequence[bytes]) -> list[int]:
        """The ids of ``keys`` (distinct), numbering the ones never seen."""
        hashes = np.fromiter(map(_hash, keys), np.int32, len(keys))
        out = [-1] * len(keys)
        held = self.hashes[: self.size]
        hits = _among(held, hashes)
        if len(hits):
            by_hash: dict[int, list[int]] = {}
            for sid, h in zip(hits.tolist(), held[hits].tolist(), strict=True):
                by_hash.setdefault(h, []).append(sid)
            for i, (key, h) in enumerate(zip(keys, hashes.tolist(), strict=True)):
                out[i] = next((sid for sid in by_hash.get(h, ()) if self.keys[sid] == key), -1)
        new = [i for i, sid in enumerate(out) if sid < 0]
        if new:
            for i, sid in zip(new, self._new([keys[i] for i in new], hashes[new]), strict=True):
                out[i] = sid
        return out

    def _new(self, keys: list[bytes], hashes: NDArray[np.int32]) -> range:
        first, end = self.size, self.size + len(keys)
        if end > len(self.hashes):
            grown = np.zeros(end + end // 4 + 16, np.int32)
            grown[:first] = self.hashes[:first]
            self.hashes = grown
        self.hashes[first:end] = hashes
        self.keys.extend(keys)
        self.key_bytes += sum(map(sys.getsizeof, keys))
        decoded = map(key_labels, keys)
        self.index.add(first, [[("__name__", name), *labels] for name, labels in decoded])
        return range(first, end)

    def label_set(self, sid: int) -> LabelSet:
        """The labels of series ``sid``, ``node`` included."""
        labels = self.labels.get(sid)
        if labels is None:
            name, pairs = key_labels(self.keys[sid])
            node = {"node": self.name} if self.name else {}  # "": the collector's own, no node
            labels = self.labels[sid] = LabelSet({"__name__": name, **dict(pairs), **node})
        return labels

    def label_sets(self, sids: NDArray[np.integer[Any]]) -> list[LabelSet]:
        """The labels of series ``sids``, ``node`` included."""
        labels = self.labels
        return [labels.get(sid) or self.label_set(sid) for sid in sids.tolist()]

    def want(self, matchers: Sequence[Matcher], verdicts: Verdicts) -> Mask | bool:
        """Which series pass every matcher: a mask, or one answer for all."""
        want: Mask | None = None
        for m in matchers:
            if m.name == "node":
                got: Mask | bool = decide(m, self.name, verdicts)
            else:
                got = self.index.mask(m, self.size, verdicts)
            if isinstance(got, bool):
                if not got:
                    return False
            else:
                want = got if want is None else want & got
        if want is None:
            return True
        return want if want.any() else False

    def grid(self, want: Mask | None, start: float, end: float) -> Grid | None:
        """The series ``want`` marks with points in ``[start, end]``: ids, times, values grid.

        A node of one axis copies its blocks' windows in place; with several
        axes, a time two of them share is kept once (the first axis').
        """
        if len(self.axes) == 1:
            (axis,) = self.axes.values()
            return axis.grid(want, start, end)
        found = self.found(want, start, end)
        if found is None:
            return None
        sids, times, values = found
        axis_times, cols = np.unique(times, return_inverse=True)
        ids, rows = np.unique(sids, return_inverse=True)
        grid = np.full((len(ids), len(axis_times)), ABSENT)
        grid[rows, cols] = values
        return ids, axis_times, grid

    def found(self, want: Mask | None, start: float, end: float) -> Found | None:
        """Points of the series ``want`` marks in ``[start, end]``, all axes.

        Sorted by series, then time; a time two axes share is kept once.
        """
        found = [cells for axis in self.axes.values() for cells in axis.cells(want, start, end)]
        if len(found) == 1:
            cells = found[0]
            assert cells.times is not None  # cells() looks every time up
            return cells.sids, cells.times, cells.values
        if not found:
            return None
        s = np.concatenate([c.sids for c in found])
        t = np.concatenate([c.times for c in found])
        v = np.concatenate([c.values for c in found])
        if len(self.axes) == 1:
            order = np.argsort(s, kind="stable")  # one axis' blocks come oldest first
            return s[order], t[order], v[order]
        order = np.lexsort((t, s))
        s, t, v = s[order], t[order], v[order]
        once = np.concatenate([[True], (s[1:] != s[:-1]) | (t[1:] != t[:-1])])
        return s[once], t[once], v[once]

    def trim(self, floor: float) -> None:
        """Forget axes and segments wholly at or before ``floor``, then unused series ids."""
        dropped = False
        for source, axis in list(self.axes.items()):
            if axis.last <= floor:
                del self.axes[source]
                dropped = True
            else:
                dropped = axis.drop(floor) or dropped
        if dropped and self.axes:
            self._compact()

    def _compact(self) -> None:
        held: list[NDArray[np.integer[Any]]] = [
            s.ids for a in self.axes.values() for s in a.segments
        ]
        held += [a.block.ids[: a.block.rows] for a in self.axes.values()]
        alive = np.unique(np.concatenate(held)).astype(np.int64)
        if len(alive) == self.size:
            return
        new = np.full(self.size, -1, np.int64)
        new[alive] = np.arange(len(alive))
        for axis in self.axes.values():
            axis.segments = [renumbered(s, new) for s in axis.segments]
            axis.block.ids[: axis.block.rows] = new[axis.block.ids[: axis.block.rows]]
            axis.live_sids = new[axis.live_sids].astype(np.int32)
        self.index.compact(alive, self.size)
        self.keys = [self.keys[sid] for sid in alive.tolist()]
        self.key_bytes = sum(map(sys.getsizeof, self.keys))
        self.hashes = self.hashes[alive]
        self.labels = {int(new[s]): labels for s, labels in self.labels.items() if new[s] >= 0}

    @property
    def nbytes(self) -> int:
        """Bytes held: arrays, keys and label values, and the lists and dicts around them."""
        held = sum(axis.nbytes for axis in self.axes.values()) + self.hashes.nbytes
        return held + self.key_bytes + sys.getsizeof(self.keys) + self.index.value_bytes
