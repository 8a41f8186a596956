"""One node's series in the history: its time axes, one per source, and its label index.

:class:`NodeSeries` numbers a node's series and keeps their keys, labels and
hashes; each :class:`Axis` holds one source's points in numpy blocks
(:mod:`collector.tsdb.blocks`). :class:`~collector.tsdb.history.History` owns one
NodeSeries per node and is what readers see.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from collector.normalise.labelsets import key_labels
from collector.tsdb.axis import Axis, Grid
from collector.tsdb.blocks import Ids, stale
from collector.tsdb.labels import LabelIndex, Mask, Verdicts, decide
from collector.tsdb.latest import Latest
from collector.tsdb.lookups import Windows
from collector.tsdb.series import ABSENT, LabelSet, Matcher

Found = tuple[Ids, NDArray[np.float64], NDArray[np.float64]]
_NO_ROWS: NDArray[np.intp] = np.zeros(0, np.intp)
_NO_IDS: Ids = np.zeros(0, np.int64)


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
        return self._grid(self._holding(want), want, start, end)

    def _grid(self, axes: list[Axis], want: Mask | None, start: float, end: float) -> Grid | None:
        if len(axes) == 1:
            return axes[0].grid(want, start, end)
        found = self._found(axes, want, start, end)
        if found is None:
            return None
        sids, times, values = found
        axis_times, cols = np.unique(times, return_inverse=True)
        ids, rows = np.unique(sids, return_inverse=True)
        grid = np.full((len(ids), len(axis_times)), ABSENT)
        grid[rows, cols] = values
        return ids, axis_times, grid

    def newest(self, want: Mask | None, start: float, end: float) -> Grid | None:
        """What an instant lookup a millisecond before ``end`` needs of the series ``want``
        marks: their newest points in ``[start, end]``, or every point of the window
        (:meth:`grid`) while an axis holds a point after the lookup's millisecond, or
        the window reaches back further than an axis keeps the points of series that left.

        The newest points are read from each axis' latest batch and recent ends, not
        the blocks; series whose newest point is a staleness marker are left out (a
        lookup finds nothing for them either).
        """
        axes = self._holding(want)
        lookup = round(end * 1000) - 1  # milliseconds, rounded as the evaluator rounds times
        if any(round(axis.last * 1000) > lookup or not axis.remembers(start) for axis in axes):
            return self._grid(axes, want, start, end)
        # a marker matters only where it may hide another axis' older point of its series
        found = [axis.newest(want, start, end, markers=len(axes) > 1) for axis in axes]
        if not found:
            return None
        if len(found) == 1:
            sids, times, values = found[0]
        else:
            sids, times, values = (np.concatenate(part) for part in zip(*found, strict=True))
            order = np.lexsort((-times, sids))  # each series' newest first; a tie: first axis'
            sids, times, values = sids[order], times[order], values[order]
            first = np.ones(sids.size, bool)
            first[1:] = sids[1:] != sids[:-1]
            sids, times, values = sids[first], times[first], values[first]
        live = ~stale(values)
        if not live.any():
            return None
        sids, times, values = sids[live], times[live], values[live]
        if times.min() == times.max():  # the usual case: every series in the latest batch
            return sids, times[:1], values[:, None]
        axis_times, cols = np.unique(times, return_inverse=True)
        grid = np.full((len(sids), len(axis_times)), ABSENT)
        grid[np.arange(len(sids)), cols] = values
        return sids, axis_times, grid

    def latest(self, want: Mask | None, start: float, at_ms: int) -> Latest | None:
        """What a lookup at ``at_ms`` of the series ``want`` marks reads from their newest
        points (:mod:`collector.tsdb.latest`); None where they cannot tell (not one axis,
        a point after ``at_ms``, or ends forgotten since ``start``): see :meth:`newest`."""
        axes = self._holding(want)
        if len(axes) != 1:
            return None
        axis = axes[0]
        if round(axis.last * 1000) > at_ms or not axis.remembers(start):
            return None
        return Latest(axis, want, self.size)

    def windows(self, want: Mask | None, start: float, end: float) -> Windows | None:
        """What a lookup of the series ``want`` marks in ``[start, end]`` reads from their
        runs (:mod:`collector.tsdb.lookups`); None where only the window's points can tell
        (several axes, or a run with a gap)."""
        axes = self._holding(want)
        if len(axes) != 1:
            return None if axes else Windows([], _NO_IDS, want, self.size)
        found = axes[0].windows(want, start, end)
        return None if found is None else Windows(*found, want, self.size)

    def found(self, want: Mask | None, start: float, end: float) -> Found | None:
        """Points of the series ``want`` marks in ``[start, end]``, all axes.

        Sorted by series, then time; a time two axes share is kept once.
        """
        return self._found(self._holding(want), want, start, end)

    def _found(self, axes: list[Axis], want: Mask | None, start: float, end: float) -> Found | None:
        found = [cells for axis in axes for cells in axis.cells(want, start, end)]
        if len(found) == 1:
            cells = found[0]
            assert cells.times is not None  # cells() looks every time up
            return cells.sids, cells.times, cells.values
        if not found:
            return None
        s = np.concatenate([c.sids for c in found])
        t = np.concatenate([c.times for c in found])
        v = np.concatenate([c.values for c in found])
        if len(axes) == 1:
            order = np.argsort(s, kind="stable")  # one axis' blocks come oldest first
            return s[order], t[order], v[order]
        order = np.lexsort((t, s))
        s, t, v = s[order], t[order], v[order]
        once = np.concatenate([[True], (s[1:] != s[:-1]) | (t[1:] != t[:-1])])
        return s[once], t[once], v[once]

    def _holding(self, want: Mask | None) -> list[Axis]:
        """The axes that recorded any of the series ``want`` marks (all if None).

        Why: every node has a second axis, the collector's own series about it
        (source up, scrape duration), which a selector of GPU series never
        wants; with it left out, such a read takes the one-axis path.
        """
        axes = list(self.axes.values())
        if want is None or len(axes) == 1:
            return axes
        return [axis for axis in axes if axis.holds(want)]

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
            axis.renumber(alive, new)
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
