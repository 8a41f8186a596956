"""Finding a selector's points at every step: the instant lookback and the range windows.

An instant selector takes each series' newest point within the lookback
(:mod:`.newest`); a range selection at ``r`` takes the points in ``[r - range,
r]`` without staleness markers (Prometheus 2.x: both ends included). For a
block of series on one time axis, one ``searchsorted`` of the reference times
gives each step's index bounds, shared by all series; what differs per series
(where its points are) comes from forward- and backward-filled "last point"
indices and prefix counts along time, gathered for all steps at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

import numpy as np

from collector.tsdb.series import LabelSet

from .arrays import Block, BoolArray, FloatArray, IntArray, Vec
from .newest import last_point, newest
from .select import Selected

TENSOR_CELLS = 1 << 22
"""Most values one window tensor holds (series x steps x points), 32 MiB of float64."""


def instant(
    selected: Selected, at: IntArray, lookback_ms: int, with_times: bool = False
) -> tuple[Vec, IntArray | None]:
    """The selector at reference times ``at``: the vector, and (``with_times``) each element's
    sample time (ms)."""
    parts = [_instant_block(b, at, lookback_ms, with_times, selected) for b in selected.blocks]
    if not parts:
        return Vec.empty(at.size), np.zeros((0, at.size), dtype=np.int64) if with_times else None
    values = _joined([v for v, _, _ in parts])
    present = _joined([p for _, p, _ in parts])
    times = _joined([t for _, _, t in parts]) if with_times else None  # type: ignore[misc]
    every = [labels for b in selected.blocks for labels in b.labels]
    maps = maps_of(selected.blocks)
    return Vec(every, values, present, rank_of(selected.order), maps), times


def maps_of(blocks: list[Block]) -> list[LabelSet] | None:
    """The storage's label sets of the blocks' rows, if every block has them."""
    if any(b.maps is None for b in blocks):
        return None
    return [m for b in blocks if b.maps is not None for m in b.maps]


def rank_of(order: IntArray) -> IntArray:
    """Each row's place in ``order`` (the inverse permutation)."""
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size, dtype=np.int64)
    return rank


def _instant_block(
    block: Block, at: IntArray, lookback_ms: int, with_times: bool, selected: Selected
) -> tuple[FloatArray, BoolArray, IntArray | None]:
    """One block at each reference time: values, where found, and sample times if asked."""
    if selected.at is None:
        return newest(block.times, block.values, block.present, at, lookback_ms, with_times)
    # looked up already, at these very times (select.py)
    assert np.array_equal(at, selected.at)
    assert not with_times
    return block.values, ~block.stale, None


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The blocks' rows laid end to end."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _next_point(points: BoolArray) -> IntArray:
    """For each position, the index of the oldest point at or after it (width if none)."""
    width = points.shape[1]
    ramp = np.arange(width, dtype=np.int64)
    marked = np.where(points, ramp, width)[:, ::-1]
    filled: IntArray = np.minimum.accumulate(marked, axis=1)[:, ::-1]
    return filled


def _total(term: FloatArray, lo: IntArray, hi: IntArray) -> FloatArray:
    """Sums of ``term[:, lo:hi]`` per row and step, as IEEE addition in any order would give them;
    ``lo`` and ``hi`` are one per step (every row's) or ``(n, k)``.

    Prefix sums in extended precision keep a difference of two long prefixes
    exact enough; infinities and NaNs are counted apart, so one of them only
    spoils the windows that hold it: any NaN or both infinities give NaN, one
    kind of infinity gives it.
    """
    finite = np.isfinite(term)
    if finite.all():
        return _span(term, lo, hi)
    total = _span(np.where(finite, term, 0.0), lo, hi)
    nan = _span(np.isnan(term).astype(np.float64), lo, hi) > 0
    up = _span((term == np.inf).astype(np.float64), lo, hi) > 0
    down = _span((term == -np.inf).astype(np.float64), lo, hi) > 0
    total = np.where(up, np.inf, np.where(down, -np.inf, total))
    return np.where(nan | (up & down), np.nan, total)


def _span(term: FloatArray, starts: IntArray, ends: IntArray) -> FloatArray:
    rows, width = term.shape[0], term.shape[1] + 1
    prefix = np.zeros((rows, width), dtype=np.longdouble)
    np.cumsum(term, axis=1, dtype=np.longdouble, out=prefix[:, 1:])
    flat = (np.arange(rows, dtype=np.int64) * width)[:, None]

    def at(index: IntArray) -> FloatArray:
        # columns shared by every row index at once; a row's own, a flat take (see Window.value)
        return prefix[:, index] if index.ndim == 1 else prefix.take(index + flat)

    total = at(np.maximum(ends, starts)) - at(starts)
    sums: FloatArray = total.astype(np.float64)
    return sums


CACHED_CELLS = 32768
"""Cells of one ``(n, k)`` array of a window: its rows are cut so that a range function's
dozens of passes over such arrays (and ``w`` times larger window tensors) stay in the CPU's
cache (256 KiB of float64: half a core's L2 on the bench machine). Measured over 19,000
series x 61 steps (a query's whole evaluation, best of 6, ms), at 8,192 / 32,768 / 65,536
cells and in one window: ``avg_over_time`` 125 / 100-107 / 99 / 121, ``rate`` (a compiled
loop, :mod:`.kernels`, but its stacking and labels) 90 / 71-77 / 68 / 86."""


def bounds(times: IntArray, refs: IntArray, range_ms: int) -> tuple[IntArray, IntArray]:
    """Each window ``[ref - range, ref]``'s index bounds ``[lo, hi)`` on an axis of ``times``."""
    lo = np.searchsorted(times, refs - range_ms, side="left")
    return lo, np.searchsorted(times, refs, side="right")


def windows(
    blocks: list[Block], refs: IntArray, range_ms: int, at_steps: IntArray, timed: bool
) -> tuple[list[Window], IntArray | None]:
    """The blocks' windows, blocks whose windows have the same bounds stacked into one
    :class:`Window`; and for each row of the blocks laid end to end, its row among the
    windows' (None: the same). ``timed``: the function reads the points' times, so only
    blocks whose times are one another's shifted by a constant stack (each row keeps its
    block's first time).

    Why stacked: a node's series are a block of their own (each node is scraped
    at its own times), and a range function costs a few dozen numpy calls a
    block: 200 nodes took 200 times those. Nodes scraped at one interval share
    their windows' bounds and the times between their points. A stack is cut
    into windows of :data:`CACHED_CELLS`, as is a large block.
    """
    groups: dict[bytes, list[int]] = {}
    spans = []
    for i, block in enumerate(blocks):
        lo, hi = bounds(block.times, refs, range_ms)
        spans.append((lo, hi))
        axis = _axis(block).tobytes() if timed else block.times.size.to_bytes(8, "little")
        groups.setdefault(axis + lo.tobytes() + hi.tobytes(), []).append(i)
    made = []
    for members in groups.values():
        made += _stacked([blocks[i] for i in members], spans[members[0]], refs, range_ms, at_steps)
    if len(groups) == len(blocks):  # stacked nothing: each block's rows in order
        return made, None
    sizes = np.array([len(b.labels) for b in blocks], dtype=np.int64)
    starts = np.cumsum(sizes) - sizes
    stacked = np.concatenate(
        [np.arange(starts[i], starts[i] + sizes[i]) for members in groups.values() for i in members]
    )
    return made, rank_of(stacked)


def _axis(block: Block) -> IntArray:
    """The block's times from its first."""
    axis: IntArray = block.times - block.times[:1]
    return axis


def _stacked(
    part: list[Block],
    span: tuple[IntArray, IntArray],
    refs: IntArray,
    range_ms: int,
    at_steps: IntArray,
) -> list[Window]:
    """The windows of blocks with bounds ``span``, stacked and cut at :data:`CACHED_CELLS`."""
    first = part[0]
    if len(part) == 1:
        values, points = first.values, first.points
    else:
        values = np.concatenate([b.values for b in part])
        points = np.concatenate([b.points for b in part])
    starts = np.array([b.times[0] if b.times.size else 0 for b in part], dtype=np.int64)
    origin = np.repeat(starts, [len(b.labels) for b in part])[:, None]
    axis = _axis(first)
    rows = max(1, CACHED_CELLS // max(axis.size, refs.size, 1))
    return [
        Window(
            axis,
            origin[a : a + rows],
            values[a : a + rows],
            points[a : a + rows],
            span,
            refs,
            range_ms,
            at_steps,
        )
        for a in range(0, values.shape[0], rows)
    ]


class Window:
    """Range windows ``[ref - range, ref]`` at every step over a block's series (or several
    blocks' with the same bounds), and what they contain.

    ``count``, ``first``, ``last`` and ``previous`` (the point before the last)
    are ``(n, k)``; an index is only meaningful where ``count`` says the window
    has that point.
    """

    def __init__(
        self,
        axis: IntArray,
        origin: IntArray,
        values: FloatArray,
        points: BoolArray,
        bounds: tuple[IntArray, IntArray],
        refs: IntArray,
        range_ms: int,
        at_steps: IntArray,
    ) -> None:
        self.axis = axis
        """The axis' times (ms) from its first: a row's times are these plus its ``origin``
        (of the first block's axis where axes of other spacings stacked, for a function that
        reads no times, :func:`windows`)."""
        self.origin = origin
        """Each row's first time (ms), ``(n, 1)``, or ``(1, 1)`` shared by all."""
        self.values = values
        self.points = points
        self.lo, self.hi = bounds
        self.refs = refs
        self.range_ms = range_ms
        self.at_steps = at_steps
        rows, width = values.shape
        self._flat = (np.arange(rows, dtype=np.int64) * width)[:, None]

    @cached_property
    def _prefix_counts(self) -> IntArray:
        counts = np.cumsum(self.points, axis=1, dtype=np.int64)
        return np.concatenate([np.zeros((counts.shape[0], 1), dtype=np.int64), counts], axis=1)

    @cached_property
    def count(self) -> IntArray:
        """How many points each series has in each step's window."""
        prefix = self._prefix_counts
        counted: IntArray = prefix[:, self.hi] - prefix[:, self.lo]
        return counted

    @cached_property
    def _last_points(self) -> IntArray:
        return last_point(self.points)

    @cached_property
    def last(self) -> IntArray:
        """Index of each window's newest point."""
        before = np.maximum(self.hi - 1, 0)
        index: IntArray = self._last_points[:, before]
        return np.maximum(index, 0)

    @cached_property
    def first(self) -> IntArray:
        """Index of each window's oldest point."""
        width = self.points.shape[1]
        index: IntArray = np.minimum(
            _next_point(self.points)[:, np.minimum(self.lo, width - 1)], width - 1
        )
        return index

    @cached_property
    def _previous_points(self) -> IntArray:
        """For each position, the index of the newest point strictly before it (-1 if none)."""
        last = self._last_points
        return np.concatenate(
            [np.full((last.shape[0], 1), -1, dtype=np.int64), last[:, :-1]], axis=1
        )

    @cached_property
    def previous(self) -> IntArray:
        """Index of the point before each window's newest one."""
        index: IntArray = self._previous_points.take(self.last + self._flat)
        return np.maximum(index, 0)

    def value(self, index: IntArray) -> FloatArray:
        """The values at ``index`` (``(n, k)`` positions on the axis)."""
        # a flat take: take_along_axis builds a broadcast index of every row, a cost per call
        picked: FloatArray = self.values.take(index + self._flat)
        return picked

    def time(self, index: IntArray) -> IntArray:
        """The times (ms) at ``index``."""
        picked: IntArray = self.axis[index] + self.origin
        return picked

    def pairs(self, term: FloatArray) -> FloatArray:
        """Per window, the sum of ``term`` over its points but the oldest.

        ``term[i, p]`` belongs to the pair (previous point, point ``p``): it
        counts where both lie in the window.
        """
        return _total(np.where(self.points, term, 0.0), self.first + 1, self.hi)

    def previous_values(self) -> tuple[FloatArray, BoolArray]:
        """Each point's previous point's value, and where a previous point exists."""
        previous = self._previous_points
        return self.value(np.maximum(previous, 0)), previous >= 0

    def tensors(self) -> Iterator[tuple[slice, FloatArray, BoolArray]]:
        """Chunks of steps with each window's values laid out: ``(steps, values, mask)``.

        ``values`` and ``mask`` are ``(n, steps, w)``, ``w`` the widest window's
        span on the axis; ``mask`` is where a window has a point. Chunks keep
        within :data:`TENSOR_CELLS`.
        """
        for steps, index, inside in self.spans():
            yield steps, self.values[:, index], self.points[:, index] & inside[None]

    @cached_property
    def widest(self) -> int:
        """The most positions on the axis one step's window spans."""
        return int((self.hi - self.lo).max(initial=0))

    def spans(self) -> Iterator[tuple[slice, IntArray, BoolArray]]:
        """Chunks of steps with each window's positions on the axis: ``(steps, index, inside)``,
        both ``(steps, w)`` (``inside``: the position is within the window), as :meth:`tensors`."""
        rows, width = self.points.shape
        spans = self.hi - self.lo
        w = max(1, self.widest)
        chunk = max(1, TENSOR_CELLS // max(1, rows * w))
        offsets = np.arange(w, dtype=np.int64)
        for s in range(0, self.lo.size, chunk):
            steps = slice(s, s + chunk)
            index = self.lo[steps, None] + offsets[None, :]
            inside = offsets[None, :] < spans[steps, None]
            yield steps, np.minimum(index, max(width - 1, 0)), inside
