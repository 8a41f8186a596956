"""The newest point of each series that left an axis' batches lately: a marker, or a last value.

Why apart: an instant lookup at "now" reads an axis' latest batch, and needs
besides only the series that left it within the lookback. Their newest point
is the staleness marker they got (which hides an older point of the series on
another axis of the node), or, for a series that passed to another source
unmarked, its last value. Only :data:`KEEP` seconds of them are kept: a pod
that ended an hour ago costs nothing here.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from collector.tsdb.blocks import Ids, Mask, stale

KEEP = 900.0
"""Seconds the newest point of a series that left is kept apart (three lookbacks)."""

F64 = NDArray[np.float64]
Newest = tuple[NDArray[np.intp], F64, F64]
"""Series ids, and the time and value of each one's newest point."""
_NO_IDS: NDArray[np.int32] = np.zeros(0, np.int32)
_NO_VALUES: F64 = np.zeros(0)


def joined(a: Newest, b: Newest) -> Newest:
    """The points of ``a``, then those of ``b``."""
    sids, times, values = (np.concatenate(pair) for pair in zip(a, b, strict=True))
    return sids, times, values


class Ends:
    """Series ids (32 bits, as a segment's), and the time and value of each one's newest point,
    since it left."""

    __slots__ = ("sids", "times", "values")

    def __init__(self) -> None:
        self.sids = _NO_IDS
        self.times = _NO_VALUES
        self.values = _NO_VALUES

    def add(self, sids: NDArray[np.integer], t: float, values: F64 | float, latest: float) -> None:
        """Series ``sids`` left at ``t`` with newest ``values``; those that left more than
        :data:`KEEP` seconds before ``latest`` (the axis' newest time) are forgotten."""
        if not len(sids):
            return
        self._keep(self.times >= max(latest, t) - KEEP)
        self.sids = np.concatenate([self.sids, sids.astype(np.int32)])
        self.times = np.concatenate([self.times, np.full(len(sids), t)])
        self.values = np.concatenate([self.values, np.broadcast_to(values, (len(sids),))])

    def back(self, sids: Ids) -> None:
        """Series ``sids`` are in the axis' batches again: they have not left."""
        if len(self.sids):
            self._keep(~np.isin(self.sids, sids))

    def at(self, want: Mask | None, start: float, end: float, markers: bool) -> Newest:
        """The series ``want`` marks (all if None) that left with their newest point in
        ``[start, end]``; those whose newest point is a staleness marker only if ``markers``."""
        inside = (self.times >= start) & (self.times <= end)
        if not markers:
            inside &= ~stale(self.values)
        if want is not None:
            inside &= want[self.sids]
        return self.sids[inside].astype(np.intp), self.times[inside], self.values[inside]

    def forget(self, after: float | None = None, at: float | None = None) -> None:
        """Forget the ends at or before ``after``, or at exactly ``at``."""
        if after is not None:
            self._keep(self.times > after)
        if at is not None:
            self._keep(self.times != at)

    def renumber(self, new: Ids) -> None:
        """Series ``i`` is now ``new[i]`` (-1: forgotten)."""
        sids = new[self.sids]
        self.sids = sids.astype(np.int32)
        self._keep(sids >= 0)

    def _keep(self, kept: Mask) -> None:
        if not kept.all():
            self.sids, self.times, self.values = (
                self.sids[kept],
                self.times[kept],
                self.values[kept],
            )

    @property
    def nbytes(self) -> int:
        """Bytes its arrays hold."""
        return self.sids.nbytes + self.times.nbytes + self.values.nbytes
