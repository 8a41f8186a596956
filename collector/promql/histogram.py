"""``histogram_quantile`` over classic histograms: ``_bucket`` series told apart by ``le``.

Prometheus 2.42's ``bucketQuantile``, for every group and step at once. A
bucket's upper bound is a label, so a group's buckets sort the same way at
every step: they are ordered once a query, buckets of equal bounds summed
(``coalesceBuckets``), and at each step the present ones are packed to the
front of a ``(groups, buckets, steps)`` array where the cumulative maximum
(``ensureMonotonic``) and Go's own binary search (``sort.Search``) run on
whole arrays.
"""

from __future__ import annotations

import math
import re

import numpy as np

from .arrays import BoolArray, FloatArray, IntArray, Vec
from .values import METRIC_NAME, Labels

BUCKET_LABEL = "le"

_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_HEX = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+")
_SPECIAL = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_SPECIAL |= {"infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf}


def parse_go_float(text: str) -> float | None:
    """Go's ``strconv.ParseFloat(text, 64)``, or None where it fails (out of range included)."""
    special = _SPECIAL.get(text.lower())
    if special is not None:
        return special
    if _DECIMAL.fullmatch(text):
        value = float(text)
    elif _HEX.fullmatch(text):
        value = float.fromhex(text)
    else:
        return None
    return None if math.isinf(value) else value


def quantile(q: FloatArray, vec: Vec) -> Vec:
    """``histogram_quantile(q, vec)``: one element per group of buckets present at a step."""
    steps = vec.steps
    groups: dict[Labels, int] = {}
    group_of: list[int] = []
    bounds: list[float] = []
    rows: list[int] = []
    for row, labels in enumerate(vec.labels):
        le = dict(labels).get(BUCKET_LABEL)
        bound = None if le is None else parse_go_float(le)
        if bound is None:  # no bucket label, or not a number: skipped, as Prometheus does
            continue
        key = tuple(item for item in labels if item[0] != BUCKET_LABEL)
        group_of.append(groups.setdefault(key, len(groups)))
        bounds.append(bound)
        rows.append(row)
    out_labels = [tuple(i for i in key if i[0] != METRIC_NAME) for key in groups]
    if not rows:
        return Vec.empty(steps)
    g_of = np.array(group_of, dtype=np.int64)
    b_of = np.array(bounds)
    order = np.lexsort((b_of, g_of))
    g_sorted, b_sorted = g_of[order], b_of[order]
    # one bucket per group and bound (NaN bounds never equal each other, as in Go)
    new = np.ones(order.size, dtype=bool)
    new[1:] = (g_sorted[1:] != g_sorted[:-1]) | ~(b_sorted[1:] == b_sorted[:-1])
    bucket_of = np.cumsum(new) - 1
    buckets = int(bucket_of[-1]) + 1
    source = np.array(rows, dtype=np.int64)[order]
    present = vec.present[source]
    counts = np.zeros((buckets, steps))
    np.add.at(counts, bucket_of, np.where(present, vec.values[source], 0.0))
    has = np.zeros((buckets, steps), dtype=bool)
    np.logical_or.at(has, bucket_of, present)
    bucket_group = g_sorted[new]
    bucket_bound = b_sorted[new]
    first = np.searchsorted(bucket_group, np.arange(len(groups)))
    slot = np.arange(buckets) - first[bucket_group]
    width = int(slot.max()) + 1
    shape = (len(groups), width, steps)
    grid_counts = np.full(shape, np.nan)
    grid_has = np.zeros(shape, dtype=bool)
    grid_counts[bucket_group, slot] = counts
    grid_has[bucket_group, slot] = has
    grid_bounds = np.full((len(groups), width), np.nan)
    grid_bounds[bucket_group, slot] = bucket_bound
    values, found = _bucket_quantile(q, grid_counts, grid_has, grid_bounds)
    return Vec(out_labels, values, found)


def _bucket_quantile(
    q: FloatArray, counts: FloatArray, has: BoolArray, bounds: FloatArray
) -> tuple[FloatArray, BoolArray]:
    """Go's ``bucketQuantile`` per group and step, given each group's buckets sorted by bound."""
    groups, width, steps = counts.shape
    pack = np.argsort(~has, axis=1, kind="stable")  # the present buckets first, in order
    c = np.take_along_axis(counts, pack, axis=1)
    b = np.take_along_axis(np.broadcast_to(bounds[:, :, None], counts.shape), pack, axis=1)
    n = has.sum(axis=1)
    live = np.arange(width)[None, :, None] < n[:, None, :]
    c = np.where(live, c, np.nan)
    c = np.where(np.isnan(c), np.nan, np.fmax.accumulate(c, axis=1))  # ensureMonotonic

    def at(array: FloatArray, index: IntArray) -> FloatArray:
        picked: FloatArray = np.take_along_axis(
            array, np.clip(index, 0, width - 1)[:, None, :], axis=1
        )[:, 0, :]
        return picked

    last = n - 1
    observations = at(c, last)
    rank = q[None, :] * observations
    # sort.Search(n-1, count >= rank), step for step as Go's binary search goes
    lo = np.zeros((groups, steps), dtype=np.int64)
    hi = np.maximum(last, 0)
    while True:
        going = lo < hi
        if not going.any():
            break
        mid = (lo + hi) // 2
        hit = at(c, mid) >= rank
        lo = np.where(going & ~hit, mid + 1, lo)
        hi = np.where(going & hit, mid, hi)
    found = lo
    above = found > 0
    below_count = np.where(above, at(c, found - 1), 0.0)
    start = np.where(above, at(b, found - 1), 0.0)
    end = at(b, found)
    count = np.where(above, at(c, found) - below_count, at(c, found))
    rank_in = np.where(above, rank - below_count, rank)
    result = start + (end - start) * (rank_in / count)
    first_bound = b[:, 0, :]
    result = np.where((found == 0) & (first_bound <= 0), first_bound, result)
    result = np.where(found == last, at(b, last - 1), result)
    result = np.where(observations == 0, np.nan, result)
    result = np.where(n < 2, np.nan, result)
    result = np.where(at(b, last) == np.inf, result, np.nan)
    qs = np.broadcast_to(q[None, :], result.shape)
    result = np.where(qs > 1, np.inf, result)
    result = np.where(qs < 0, -np.inf, result)
    result = np.where(np.isnan(qs), np.nan, result)
    out: FloatArray = result
    return out, n >= 1
