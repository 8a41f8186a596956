"""Ranking as Prometheus 2.42 ranks: which elements ``topk``/``bottomk`` keep, and the order
``topk``, ``bottomk``, ``sort`` and ``sort_desc`` give them.

Where values tie, which series Prometheus answers with is what its Go code
happens to do, so this module does the same steps (written anew from
promql/engine.go and functions.go of Prometheus v2.42.0 and Go 1.19's
container/heap and sort, the Go it is built with):

- ``topk``/``bottomk`` keep each group's elements in a binary heap, visiting
  the elements in the vector's order: a group's first element starts its heap;
  a later one enters while the heap holds fewer than ``k``, or when it beats
  the heap's root or the root is NaN (then, at ``k`` elements, the root is
  popped first, or simply replaced when ``k`` is 1). An element that only ties
  the root stays out: the first ones seen win ties. The heap orders by value
  (its root the smallest for ``topk``, the largest for ``bottomk``), a NaN
  counting as smaller than anything, itself included.
- The kept elements, and ``sort``'s and ``sort_desc``'s, are then ordered by
  Go's ``sort.Sort`` over the reverse of that comparison: insertion sort up to
  12 elements, pattern-defeating quicksort (pdqsort) beyond, which is not
  stable, so tied elements come out in the order its swaps leave them.

Why by hand: the order of ties is the algorithm's, not the values', and no
library sorts or heaps with Go's exact sequence of comparisons and swaps.
Compiled (numba): a range query's ``topk`` visits every element at every step.
"""

from __future__ import annotations

import numpy as np

from collector.compiled import compiled

from .arrays import BoolArray, FloatArray, IntArray

_INSERTION = 12
"""The most elements Go's pdqsort sorts by insertion sort alone."""
_NINTHER = 50
"""From this many elements, pdqsort takes its pivot as Tukey's ninther."""
_MAX_SWAPS = 12
"""The swaps choosing a pivot makes on descending data (pdqsort's decreasing hint)."""
_SHIFT_STEPS = 5
_SHORTEST_SHIFTING = 50
_UNKNOWN, _INCREASING, _DECREASING = 0, 1, 2


@compiled
def _before(a: float, b: float, descending: bool) -> bool:
    """Whether an element of value ``a`` sorts before one of ``b``: the reverse of the heap's
    order (``sort.Reverse``), so NaNs sort last and, by a NaN's comparison, after one another."""
    if np.isnan(b):
        return True
    return b < a if descending else b > a


@compiled
def _less(values: FloatArray, idx: IntArray, i: int, j: int, descending: bool) -> bool:
    return _before(values[idx[i]], values[idx[j]], descending)


@compiled
def _swap(idx: IntArray, i: int, j: int) -> None:
    idx[i], idx[j] = idx[j], idx[i]


@compiled
def go_sort(
    values: FloatArray, idx: IntArray, starts: IntArray, stops: IntArray, descending: bool
) -> None:
    """Order each ``idx[starts[i]:stops[i]]`` (indexes into ``values``) as Go 1.19's
    ``sort.Sort`` orders a vector by ``sort.Reverse`` of Prometheus' value heap: descending
    (``sort_desc``, ``topk``) or ascending (``sort``, ``bottomk``), NaNs last, ties where its
    swaps leave them. One entry point for every caller: numba compiles it once, in ~2 s."""
    for i in range(starts.size):
        part = idx[starts[i] : stops[i]]
        if part.size > 1:
            limit = 0
            while (1 << limit) <= part.size:  # Go's bits.Len
                limit += 1
            _pdqsort(values, part, part.size, limit, descending)


@compiled
def _insertion_sort(values: FloatArray, idx: IntArray, a: int, b: int, descending: bool) -> None:
    for i in range(a + 1, b):
        j = i
        while j > a and _less(values, idx, j, j - 1, descending):
            _swap(idx, j, j - 1)
            j -= 1


@compiled
def _sift_down(
    values: FloatArray, idx: IntArray, lo: int, hi: int, first: int, descending: bool
) -> None:
    root = lo
    while True:
        child = 2 * root + 1
        if child >= hi:
            return
        if child + 1 < hi and _less(values, idx, first + child, first + child + 1, descending):
            child += 1
        if not _less(values, idx, first + root, first + child, descending):
            return
        _swap(idx, first + root, first + child)
        root = child


@compiled
def _heap_sort(values: FloatArray, idx: IntArray, a: int, b: int, descending: bool) -> None:
    hi = b - a
    for i in range((hi - 1) // 2, -1, -1):
        _sift_down(values, idx, i, hi, a, descending)
    for i in range(hi - 1, -1, -1):
        _swap(idx, a, a + i)
        _sift_down(values, idx, 0, i, a, descending)


@compiled
def _pdqsort(values: FloatArray, idx: IntArray, n: int, limit: int, descending: bool) -> None:
    """Go's ``pdqsort`` of ``idx[0:n]``, its recursion turned into a stack.

    Go sorts the smaller side of each partition by a call that starts afresh (balanced and
    partitioned) and goes on with the larger side, its flags kept. Here the larger side
    waits on the stack with its flags while the smaller is sorted: the ranges are disjoint,
    and the one element outside its range a range reads (the one before it) is a pivot or
    one equal to it, already in place, so the order they are sorted in changes nothing; the
    stack never holds more than log2(n) ranges. Why not recursion: numba took twice as long
    to compile it (4 s).
    """
    stack = np.empty((64, 5), dtype=np.int64)  # a, b, limit, balanced, partitioned
    stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3], stack[0, 4] = 0, n, limit, 1, 1
    depth = 1
    while depth:
        depth -= 1
        a, b, limit = stack[depth, 0], stack[depth, 1], stack[depth, 2]
        balanced, partitioned = stack[depth, 3] != 0, stack[depth, 4] != 0
        while True:
            length = b - a
            if length <= _INSERTION:
                _insertion_sort(values, idx, a, b, descending)
                break
            if limit == 0:
                _heap_sort(values, idx, a, b, descending)
                break
            if not balanced:
                _break_patterns(idx, a, b)
                limit -= 1
            pivot, hint = _choose_pivot(values, idx, a, b, descending)
            if hint == _DECREASING:
                _reverse(idx, a, b)
                pivot = (b - 1) - (pivot - a)
                hint = _INCREASING
            if (
                balanced
                and partitioned
                and hint == _INCREASING
                and _partial_insertion_sort(values, idx, a, b, descending)
            ):
                break
            if a > 0 and not _less(values, idx, a - 1, pivot, descending):
                a = _partition_equal(values, idx, a, b, pivot, descending)
                continue
            mid, done = _partition(values, idx, a, b, pivot, descending)
            threshold = length // 8
            rest = stack[depth]
            if mid - a < b - mid:  # the left is sorted afresh, the right goes on
                rest[0], rest[1], rest[3] = mid + 1, b, mid - a >= threshold
                b = mid
            else:
                rest[0], rest[1], rest[3] = a, mid, b - mid >= threshold
                a = mid + 1
            rest[2], rest[4] = limit, done
            depth += 1
            balanced, partitioned = True, True


@compiled
def _partition(
    values: FloatArray, idx: IntArray, a: int, b: int, pivot: int, descending: bool
) -> tuple[int, bool]:
    _swap(idx, a, pivot)
    i, j = a + 1, b - 1
    while i <= j and _less(values, idx, i, a, descending):
        i += 1
    while i <= j and not _less(values, idx, j, a, descending):
        j -= 1
    if i > j:
        _swap(idx, j, a)
        return j, True
    _swap(idx, i, j)
    i += 1
    j -= 1
    while True:
        while i <= j and _less(values, idx, i, a, descending):
            i += 1
        while i <= j and not _less(values, idx, j, a, descending):
            j -= 1
        if i > j:
            break
        _swap(idx, i, j)
        i += 1
        j -= 1
    _swap(idx, j, a)
    return j, False


@compiled
def _partition_equal(
    values: FloatArray, idx: IntArray, a: int, b: int, pivot: int, descending: bool
) -> int:
    _swap(idx, a, pivot)
    i, j = a + 1, b - 1
    while True:
        while i <= j and not _less(values, idx, a, i, descending):
            i += 1
        while i <= j and _less(values, idx, a, j, descending):
            j -= 1
        if i > j:
            return i
        _swap(idx, i, j)
        i += 1
        j -= 1


@compiled
def _partial_insertion_sort(
    values: FloatArray, idx: IntArray, a: int, b: int, descending: bool
) -> bool:
    i = a + 1
    for _ in range(_SHIFT_STEPS):
        while i < b and not _less(values, idx, i, i - 1, descending):
            i += 1
        if i == b:
            return True
        if b - a < _SHORTEST_SHIFTING:
            return False
        _swap(idx, i, i - 1)
        if i - a >= 2:  # the smaller one shifts left (down to index 1, as Go's does)
            j = i - 1
            while j >= 1 and _less(values, idx, j, j - 1, descending):
                _swap(idx, j, j - 1)
                j -= 1
        if b - i >= 2:  # the greater one shifts right
            j = i + 1
            while j < b and _less(values, idx, j, j - 1, descending):
                _swap(idx, j, j - 1)
                j += 1
    return False


@compiled
def _break_patterns(idx: IntArray, a: int, b: int) -> None:
    """Three swaps at places drawn from Go's xorshift, seeded with the length."""
    length = b - a
    if length < 8:
        return
    state = np.uint64(length)
    bits = 0
    while (1 << bits) <= length:
        bits += 1
    mask = np.uint64((1 << bits) - 1)
    for at in range(a + (length // 4) * 2 - 1, a + (length // 4) * 2 + 2):
        state ^= state << np.uint64(13)
        state ^= state >> np.uint64(17)
        state ^= state << np.uint64(5)
        other = int(np.int64(state & mask))
        if other >= length:
            other -= length
        _swap(idx, at, a + other)


@compiled
def _order2(
    values: FloatArray, idx: IntArray, a: int, b: int, swaps: IntArray, descending: bool
) -> tuple[int, int]:
    if _less(values, idx, b, a, descending):
        swaps[0] += 1
        return b, a
    return a, b


@compiled
def _median(
    values: FloatArray, idx: IntArray, a: int, b: int, c: int, swaps: IntArray, descending: bool
) -> int:
    a, b = _order2(values, idx, a, b, swaps, descending)
    b, c = _order2(values, idx, b, c, swaps, descending)
    a, b = _order2(values, idx, a, b, swaps, descending)
    return b


@compiled
def _choose_pivot(
    values: FloatArray, idx: IntArray, a: int, b: int, descending: bool
) -> tuple[int, int]:
    length = b - a
    swaps = np.zeros(1, dtype=np.int64)
    i, j, k = a + length // 4, a + length // 4 * 2, a + length // 4 * 3
    if length >= 8:
        if length >= _NINTHER:
            i = _median(values, idx, i - 1, i, i + 1, swaps, descending)
            j = _median(values, idx, j - 1, j, j + 1, swaps, descending)
            k = _median(values, idx, k - 1, k, k + 1, swaps, descending)
        j = _median(values, idx, i, j, k, swaps, descending)
    if swaps[0] == 0:
        return j, _INCREASING
    if swaps[0] == _MAX_SWAPS:
        return j, _DECREASING
    return j, _UNKNOWN


@compiled
def _reverse(idx: IntArray, a: int, b: int) -> None:
    i, j = a, b - 1
    while i < j:
        _swap(idx, i, j)
        i += 1
        j -= 1


@compiled
def _heap_less(values: FloatArray, heap: IntArray, i: int, j: int, bottom: bool) -> bool:
    """Prometheus' heap order: ``vectorByValueHeap`` (``topk``: the smallest at the root) or
    ``vectorByReverseValueHeap`` (``bottomk``); a NaN is less than anything."""
    a = values[heap[i]]
    if np.isnan(a):
        return True
    b = values[heap[j]]
    return bool(a > b) if bottom else bool(a < b)


@compiled
def _up(values: FloatArray, heap: IntArray, j: int, bottom: bool) -> None:
    while j > 0:
        i = (j - 1) // 2
        if not _heap_less(values, heap, j, i, bottom):
            return
        _swap(heap, i, j)
        j = i


@compiled
def _down(values: FloatArray, heap: IntArray, n: int, bottom: bool) -> None:
    i = 0
    while True:
        j = 2 * i + 1
        if j >= n:
            return
        if j + 1 < n and _heap_less(values, heap, j + 1, j, bottom):
            j += 1
        if not _heap_less(values, heap, j, i, bottom):
            return
        _swap(heap, i, j)
        i = j


@compiled
def select_top(
    values: FloatArray,
    present: BoolArray,
    ids: IntArray,
    order: IntArray,
    k: IntArray,
    bottom: bool,
    offsets: IntArray,
    heaps: IntArray,
    sizes: IntArray,
    kept: BoolArray,
) -> None:
    """Mark in ``kept`` the elements ``topk`` (``bottomk``: ``bottom``) keeps at each step.

    ``values``, ``present`` and ``kept`` are ``(steps, rows)``: a step's elements lie
    together, and are visited step by step. ``ids``: each row's group; ``order``: the rows in
    the vector's order; ``k``: one per step; ``heaps[offsets[g]:]``: room for group ``g``'s
    heap, ``min(k, its rows)``. After the last step, ``heaps`` and ``sizes`` hold that step's
    heaps (rows, in heap order).
    """
    for s in range(values.shape[0]):
        sizes[:] = 0
        most = k[s]
        if most < 1:
            continue
        column, here = values[s], present[s]
        for r in order:
            if not here[r]:
                continue
            g = ids[r]
            base, n = offsets[g], sizes[g]
            if n == 0:
                heaps[base] = r
                sizes[g] = 1
                continue
            root, v = column[heaps[base]], column[r]
            if n < most or (root > v if bottom else root < v) or np.isnan(root):
                if n == most and n == 1:
                    heaps[base] = r
                    continue
                heap = heaps[base : base + n + 1]
                if n == most:
                    n -= 1
                    _swap(heap, 0, n)
                    _down(column, heap, n, bottom)
                heap[n] = r
                _up(column, heap, n, bottom)
                sizes[g] = n + 1
        for g in range(sizes.size):
            for j in range(sizes[g]):
                kept[s, heaps[offsets[g] + j]] = True
