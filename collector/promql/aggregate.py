"""Aggregation operators over a whole :class:`~.arrays.Vec`, as Prometheus 2.x's ``aggregation``.

The groups are found once a query (a dict over label sets, in order of first
appearance, which is Prometheus' output order); every reduction is then one
numpy call over all groups and steps (``reduceat`` on rows sorted by group),
and the ranking ones (``topk``, ``bottomk``, ``quantile``) one sort of all
present elements keyed by (group, step).
"""

from __future__ import annotations

import numpy as np

from collector.compiled import compiled
from collector.tsdb.series import LabelSet

from .arrays import BoolArray, FloatArray, IntArray, Vec
from .floats import format_float, go_float_str
from .plan import AggNode
from .values import LABEL_NAME, METRIC_NAME, Labels, QueryError, grouping_keys

_INT64_MAX = 9.223372036854775807e18


class Groups:
    """Which group each row belongs to, and the groups' label sets (in first-appearance order)."""

    def __init__(
        self,
        labels: list[Labels],
        grouping: frozenset[str],
        without: bool,
        rank: IntArray | None = None,
        maps: list[LabelSet] | None = None,
    ) -> None:
        if not without and not grouping:  # every row in one group: no key per row to make
            ids = np.zeros(len(labels), dtype=np.int64)
            self.labels: list[Labels] = [()] if labels else []
        elif maps is not None and not without and METRIC_NAME not in grouping:
            ids, self.labels = _by_lookups(maps, sorted(grouping))
        else:
            index: dict[Labels, int] = {}
            keys = grouping_keys(labels, grouping, keep=not without)
            ids = np.array([index.setdefault(key, len(index)) for key in keys], dtype=np.int64)
            self.labels = list(index)
        # Rows of one group lying together (a storage's rows grouped by node) need no sort.
        together = bool(ids.size) and bool((ids[1:] >= ids[:-1]).all())
        self._pick: IntArray | None = None
        if rank is not None and ids.size:  # number the groups by first appearance in rank order
            first = np.full(len(self.labels), ids.size, dtype=np.int64)
            np.minimum.at(first, ids, rank)
            appearance = np.argsort(first, kind="stable")
            renumber = np.empty_like(appearance)
            renumber[appearance] = np.arange(appearance.size, dtype=np.int64)
            ids = renumber[ids]
            self.labels = [self.labels[i] for i in appearance.tolist()]
            self._pick = appearance if together else None
        self.ids = ids
        self.order = None if together else np.argsort(ids, kind="stable")
        runs = ids if self.order is None else ids[self.order]
        self.starts = np.flatnonzero(np.r_[True, runs[1:] != runs[:-1]])
        self._cells: IntArray | None = None

    def reduce(self, ufunc: np.ufunc, rows: np.ndarray) -> np.ndarray:
        """``ufunc`` over each group's rows (``rows`` is ``(n, k)``, in row order)."""
        grouped = rows if self.order is None else rows[self.order]
        reduced: np.ndarray = ufunc.reduceat(grouped, self.starts, axis=0)
        return reduced if self._pick is None else reduced[self._pick]

    def total(self, rows: np.ndarray) -> FloatArray:
        """The sum of each group's rows at each step, as float64.

        ``reduceat`` where the groups' rows lie together, else one ``bincount``
        over (group, step) cells: both far faster than sorting the rows.
        """
        if self.order is None:
            if rows.dtype == np.bool_:  # a count: summed as integers, twice as fast as floats
                counted = np.add.reduceat(rows.view(np.uint8), self.starts, axis=0, dtype=np.int64)
                summed: FloatArray = counted.astype(np.float64)
            else:
                summed = np.add.reduceat(rows, self.starts, axis=0, dtype=np.float64)
            return summed if self._pick is None else summed[self._pick]
        steps = rows.shape[1]
        if self._cells is None:  # each element's (group, step) cell
            self._cells = (self.ids[:, None] * steps + np.arange(steps)).ravel()
        sums = np.bincount(self._cells, rows.ravel(), len(self.labels) * steps)
        return sums.astype(np.float64, copy=False).reshape(len(self.labels), steps)


def _by_lookups(maps: list[LabelSet], names: list[str]) -> tuple[IntArray, list[Labels]]:
    """``by`` grouping from the storage's label sets: each row's group, and the groups' labels.

    The rows are keyed by their values alone (strings hash once), which is
    several times faster than building each row's label pairs.
    """
    index: dict[object, int] = {}
    if len(names) == 1:
        (name,) = names
        keys: list[object] = [m.get(name, "") for m in maps]
    else:
        keys = [tuple([m.get(n, "") for n in names]) for m in maps]
    ids = np.array([index.setdefault(key, len(index)) for key in keys], dtype=np.int64)
    labels = []
    for key in index:
        values: tuple[str, ...] = (key,) if isinstance(key, str) else key  # type: ignore[assignment]
        labels.append(tuple([(n, v) for n, v in zip(names, values, strict=True) if v]))
    return ids, labels


def aggregate(node: AggNode, vec: Vec, param: FloatArray | str | None) -> Vec:
    """Apply ``node``'s aggregation to ``vec``; ``param`` is its evaluated parameter."""
    vec = vec.compact()
    steps = vec.steps
    if node.op in ("topk", "bottomk"):
        assert isinstance(param, np.ndarray)
        return _top(node, vec, _int64(param))
    if node.op == "count_values":
        assert isinstance(param, str)
        return _count_values(node, vec.ordered(), param)
    if not vec.labels:
        return Vec.empty(steps)
    groups = Groups(vec.labels, frozenset(node.grouping), node.without, vec.rank, vec.maps)
    count = groups.total(vec.present)
    if node.op == "quantile":
        assert isinstance(param, np.ndarray)
        values = _quantile(groups, vec, param)
    else:
        values = _reduce(node.op, groups, vec, count)
    return Vec(groups.labels, values, count > 0)


def _int64(param: FloatArray) -> IntArray:
    bad = ~((param >= -_INT64_MAX) & (param <= _INT64_MAX))
    if bad.any():
        value = float(param[int(np.flatnonzero(bad)[0])])
        raise QueryError("execution", f"Scalar value {go_float_str(value)} overflows int64")
    return np.trunc(param).astype(np.int64)


def _reduce(op: str, groups: Groups, vec: Vec, count: FloatArray) -> FloatArray:
    """Every aggregation but the ranking ones, given each group's element count."""
    present = vec.present
    if op == "count":
        return count
    if op == "group":
        return np.ones(count.shape)
    if op in ("stddev", "stdvar"):
        return _deviation(groups, vec, op == "stddev")
    masked = np.where(present, vec.values, 0.0)
    if op == "sum":
        return groups.total(masked)
    if op in ("max", "min"):
        pick = np.fmax if op == "max" else np.fmin
        return groups.reduce(pick, np.where(present, vec.values, np.nan))
    assert op == "avg"
    return _mean(groups, vec, masked, np.maximum(count, 1))


def _deviation(groups: Groups, vec: Vec, stddev: bool) -> FloatArray:
    """``stddev`` of each group at each step (``stddev``), or ``stdvar``."""
    out = np.empty((len(groups.labels), vec.steps))
    _welford(vec.values, vec.present, groups.ids, _in_order(vec), stddev, out)
    return out


@compiled
def _welford(
    values: FloatArray,
    present: BoolArray,
    ids: IntArray,
    order: IntArray,
    stddev: bool,
    out: FloatArray,
) -> None:
    """Welford's update over each group's elements, taken in Prometheus' order (``order``),
    as its ``aggregation`` does: a group of equal values deviates by exactly
    0, where a mean taken first and the deviations from it after gave 2e-15.

    Why compiled: the update is sequential per group and step; over a (rows, steps) matrix
    it is one pass that reads each element once.
    """
    groups, steps = out.shape
    count = np.zeros((groups, steps), dtype=np.int64)
    mean = np.zeros((groups, steps))
    aux = np.zeros((groups, steps))
    for r in order:
        g = ids[r]
        for s in range(steps):
            if not present[r, s]:
                continue
            v = values[r, s]
            n = count[g, s] + 1
            count[g, s] = n
            if n == 1:
                mean[g, s] = v
                continue
            delta = v - mean[g, s]
            mean[g, s] += delta / n
            aux[g, s] += delta * (v - mean[g, s])
    for g in range(groups):
        for s in range(steps):
            variance = aux[g, s] / count[g, s]
            out[g, s] = np.sqrt(variance) if stddev else variance


def _in_order(vec: Vec) -> IntArray:
    """The rows in the order of Prometheus' elements, which its aggregations visit."""
    if vec.rank is None:
        return np.arange(len(vec.labels), dtype=np.int64)
    order: IntArray = np.argsort(vec.rank, kind="stable")
    return order


def _mean(groups: Groups, vec: Vec, masked: FloatArray, count: FloatArray) -> FloatArray:
    """``avg``: sum over count, with Prometheus' incremental mean's infinities (it never overflows).

    Any NaN or infinities of both signs give NaN, one sign of infinity gives it.
    """
    present = vec.present
    finite = np.isfinite(vec.values)
    numbers = np.where(finite, masked, 0.0)
    mean = groups.total(numbers) / count
    if not np.isfinite(mean).all():  # finite values past float64's range: sum them wider
        wide = groups.reduce(np.add, numbers.astype(np.longdouble))
        mean = (wide / count).astype(np.float64)
    if finite[present].all():
        return mean
    nan = groups.total(present & np.isnan(vec.values)) > 0
    up = groups.total(present & (vec.values == np.inf)) > 0
    down = groups.total(present & (vec.values == -np.inf)) > 0
    mean = np.where(up, np.inf, np.where(down, -np.inf, mean))
    return np.where(nan | (up & down), np.nan, mean)


def _ranked(
    vec: Vec, ids: IntArray, descending: bool, nan_first: bool, among: IntArray | None = None
) -> tuple[IntArray, IntArray, IntArray]:
    """Present elements sorted by (group, step), then by value, NaNs first or last.

    Returns the elements' rows and steps in that order, and each one's rank in its (group,
    step) among the rows ``among`` (ascending; all if None).
    """
    if among is None:
        rows, cols = np.nonzero(vec.present)
    else:
        rows, cols = np.nonzero(vec.present[among])
        rows = among[rows]
    values = vec.values[rows, cols]
    segment = ids[rows] * vec.steps + cols
    nan = np.isnan(values)
    key = np.where(nan, 0.0, -values if descending else values)
    order = np.lexsort((key, ~nan if nan_first else nan, segment))
    segment = segment[order]
    starts = np.flatnonzero(np.r_[True, segment[1:] != segment[:-1]]) if segment.size else segment
    sizes = np.diff(np.r_[starts, segment.size])
    rank = np.arange(segment.size) - np.repeat(starts, sizes)
    return rows[order], cols[order], rank


def _top(node: AggNode, vec: Vec, k: IntArray) -> Vec:
    """``topk``/``bottomk``: the input elements ranked within their group at each step."""
    if not vec.labels:
        return Vec.empty(vec.steps)
    groups = Groups(vec.labels, frozenset(node.grouping), node.without, vec.rank, vec.maps)
    descending = node.op == "topk"
    among = _contenders(vec, k, descending) if len(groups.labels) == 1 else None
    rows, cols, rank = _ranked(vec, groups.ids, descending, nan_first=False, among=among)
    keep = rank < k[cols]
    present = np.zeros(vec.present.shape, dtype=bool)
    present[rows[keep], cols[keep]] = True
    out = vec.with_values(vec.values, present)
    if vec.steps == 1:  # an instant query shows the order: by group, then rank
        chosen = out.take(rows[keep])
        return Vec(chosen.labels, chosen.values, chosen.present)
    return out


def _contenders(vec: Vec, k: IntArray, descending: bool) -> IntArray | None:
    """The rows of one group that may be among the first ``k`` at some step, or None where
    that may be most of them.

    At a step with ``k`` numbers or more, only those at least as good as its
    ``k``-th best can (NaNs rank last); at any other step, every row present
    there. Why: ranking every element of a large vector (a sort of rows x
    steps) was most of a dashboard's ``topk``; finding each step's ``k``-th
    best is linear, and the few contenders sort at once.
    """
    most = int(k.max(initial=0))
    if 2 * most > len(vec.labels):
        return None
    if not most:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(_contending(vec.values, vec.present, most, descending))


@compiled
def _contending(values: FloatArray, present: BoolArray, most: int, descending: bool) -> BoolArray:
    """Which rows contend (:func:`_contenders`), each step's ``most`` best kept in a heap.

    Why compiled: in numpy, a partition of every step's column and a few passes
    over ``(rows, steps)`` took 11.6 ms for 18,875 series x 61 steps (200 nodes'
    ``topk``); one pass here reads each element once or twice.
    """
    rows, steps = values.shape
    best = np.full((steps, most), -np.inf)  # each step's best keys: a heap, its worst first
    numbers = np.zeros(steps, dtype=np.int64)
    for r in range(rows):
        for s in range(steps):
            if present[r, s] and not np.isnan(values[r, s]):
                numbers[s] += 1
                key = values[r, s] if descending else -values[r, s]
                if key > best[s, 0]:
                    _replace_worst(best[s], key)
    contend = np.zeros(rows, dtype=np.bool_)
    for r in range(rows):
        for s in range(steps):
            if not present[r, s]:
                continue
            key = values[r, s] if descending else -values[r, s]
            if numbers[s] < most or key >= best[s, 0]:  # a NaN key compares False
                contend[r] = True
                break
    return contend


@compiled
def _replace_worst(heap: FloatArray, key: float) -> None:
    """Put ``key`` in the place of a min-heap's root, and sift it down.

    Written here because numba's ``heapq`` takes lists only: each step's heap is a row of
    one array, which a list per step (61 of them for an hour at 60 s) would replace with
    typed-list appends."""
    at = 0
    while True:
        child = 2 * at + 1
        if child >= heap.size:
            break
        if child + 1 < heap.size and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= key:
            break
        heap[at] = heap[child]
        at = child
    heap[at] = key


def _quantile(groups: Groups, vec: Vec, q: FloatArray) -> FloatArray:
    """Prometheus' ``quantile``: NaNs sort first, then linear interpolation between ranks."""
    steps = vec.steps
    rows, cols, _ = _ranked(vec, groups.ids, descending=False, nan_first=True)
    values = vec.values[rows, cols]
    segment = groups.ids[rows] * steps + cols
    sizes = np.bincount(segment, minlength=len(groups.labels) * steps)
    starts = np.cumsum(sizes) - sizes
    step_q = np.tile(q, len(groups.labels))
    count = sizes.astype(np.float64)
    rank = step_q * (count - 1)
    lower = np.maximum(0, np.floor(rank))
    upper = np.minimum(count - 1, lower + 1)
    weight = rank - np.floor(rank)
    last = max(0, values.size - 1)
    low = (
        values[np.clip(starts + np.nan_to_num(lower).astype(np.int64), 0, last)]
        if values.size
        else count
    )
    high = (
        values[np.clip(starts + np.nan_to_num(upper).astype(np.int64), 0, last)]
        if values.size
        else count
    )
    result = low * (1 - weight) + high * weight
    result = np.where(step_q < 0, -np.inf, np.where(step_q > 1, np.inf, result))
    result = np.where(np.isnan(step_q), np.nan, result)
    return result.reshape(len(groups.labels), steps)


def _count_values(node: AggNode, vec: Vec, label: str) -> Vec:
    """``count_values``: how many elements of each group have each value (as Go writes it)."""
    if not LABEL_NAME.fullmatch(label):
        raise QueryError("execution", f'invalid label name "{label}"')
    steps = vec.steps
    rows, cols = np.nonzero(vec.present)
    if not rows.size:
        return Vec.empty(steps)
    grouping = frozenset(node.grouping)
    with_value = not node.without or (label not in grouping and label != METRIC_NAME)
    base = Groups([_without(labels, label) for labels in vec.labels], grouping, node.without)
    bits, value_index = np.unique(vec.values[rows, cols].view(np.uint64), return_inverse=True)
    texts = [format_float(v) for v in bits.view(np.float64).tolist()]
    text_ids = {text: i for i, text in enumerate(dict.fromkeys(texts))}
    value_ids = np.array([text_ids[t] for t in texts], dtype=np.int64)[value_index]
    if not with_value:
        value_ids = np.zeros_like(value_ids)
    pair = base.ids[rows] * len(text_ids) + value_ids
    keys, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    appearance = np.argsort(first, kind="stable")
    position = np.empty_like(appearance)
    position[appearance] = np.arange(appearance.size)
    counts = np.bincount(position[inverse] * steps + cols, minlength=keys.size * steps)
    names = list(text_ids)
    labels = []
    for key in keys[appearance].tolist():
        group = dict(base.labels[key // len(text_ids)])
        if with_value:
            group[label] = names[key % len(text_ids)]
        labels.append(tuple(sorted(group.items())))
    values = counts.reshape(keys.size, steps).astype(np.float64)
    present: BoolArray = values > 0
    return Vec(labels, values, present)


def _without(labels: Labels, name: str) -> Labels:
    """``labels`` without ``name`` (count_values sets it to the value)."""
    return tuple(p for p in labels if p[0] != name)
