"""Aggregation operators over a whole :class:`~.arrays.Vec`, as Prometheus 2.x's ``aggregation``.

The groups are found once a query (a dict over label sets, in order of first
appearance, which is Prometheus' output order); ``count``, ``max`` and ``min``
are then one numpy call over all groups and steps (``reduceat`` on rows sorted
by group), ``quantile`` one sort of all present elements keyed by (group,
step). Where Prometheus' answer depends on the order it visits the elements in
(the additions of ``sum``, the running updates of ``avg``, ``stddev`` and
``stdvar``, the heaps of ``topk`` and ``bottomk``) a compiled loop visits them
in that order, so that the bits are Prometheus'.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from collector.compiled import compiled
from collector.tsdb.series import LabelSet

from . import ranking
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

    def reduce(self, ufunc: np.ufunc, rows: np.ndarray) -> np.ndarray:
        """``ufunc`` over each group's rows (``rows`` is ``(n, k)``, in row order)."""
        grouped = rows if self.order is None else rows[self.order]
        reduced: np.ndarray = ufunc.reduceat(grouped, self.starts, axis=0)
        return reduced if self._pick is None else reduced[self._pick]

    def count(self, present: BoolArray) -> FloatArray:
        """How many of each group's rows are present at each step, as float64.

        ``reduceat`` where the groups' rows lie together, else a compiled loop adding
        each row into its group's (:func:`_counted`): both far faster than sorting the rows.
        """
        if self.order is None:  # summed as integers, twice as fast as floats
            counted = np.add.reduceat(present.view(np.uint8), self.starts, axis=0, dtype=np.int64)
            summed: FloatArray = counted.astype(np.float64)
            return summed if self._pick is None else summed[self._pick]
        return _counted(_loopable(present), self.ids, len(self.labels))


def _loopable(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` as the compiled loops take it: contiguous and writeable, so that a
    read-only view (a broadcast mask) meets the signature compiled before ready."""
    array = np.ascontiguousarray(array)
    return array if array.flags.writeable else array.copy()


@compiled
def _counted(present: BoolArray, ids: IntArray, groups: int) -> FloatArray:
    """How many of each group's rows are present at each step.

    Why compiled: ``bincount`` over each element's (group, step) cell took 6.9 ms over
    2,400 rows x 721 steps into 8 groups (24 ms a call inside the fine-step bench's
    ``sum by (namespace) (rate(...))``, with the cells' 14 MB of indexes to make); this
    loop 0.3 ms.
    """
    out = np.zeros((groups, present.shape[1]))
    for r in range(present.shape[0]):
        g = ids[r]
        for s in range(present.shape[1]):
            out[g, s] += present[r, s]
    return out


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
    count = groups.count(vec.present)
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
    if op in ("max", "min"):
        pick = np.fmax if op == "max" else np.fmin
        return groups.reduce(pick, np.where(present, vec.values, np.nan))
    return _fold(op, groups, vec)


_SUM, _AVG, _STDVAR, _STDDEV = range(4)
_FOLDS = {"sum": _SUM, "avg": _AVG, "stdvar": _STDVAR, "stddev": _STDDEV}
"""The aggregations :func:`_folded` makes, by the number it takes."""


def _fold(op: str, groups: Groups, vec: Vec) -> FloatArray:
    """``op`` (one of :data:`_FOLDS`) of each group at each step."""
    out = np.zeros((len(groups.labels), vec.steps))
    values, present = _loopable(vec.values), _loopable(vec.present)
    _folded(values, present, groups.ids, _in_order(vec), _FOLDS[op], out)
    return out


@compiled
def _folded(
    values: FloatArray,
    present: BoolArray,
    ids: IntArray,
    order: IntArray,
    op: int,
    out: FloatArray,
) -> None:
    """Each group's ``sum``, ``avg``, ``stdvar`` or ``stddev`` (``op``, numbered as in
    :data:`_FOLDS`) at each step into ``out``, made as Prometheus 2.42's ``aggregation``
    makes it, element by element in its order (``order``): the group's first value
    taken as it is, then each next one added (``sum``); folded into the mean by
    ``mean += v/n - mean/n``, an infinite mean kept against finite values and
    infinities of its sign (``avg``); or taken into Welford's update (the deviations).

    The same operations in the same order give the same bits. Summed in storage order
    or by pairs (``reduceat``), or as a sum over a count, a third of the points of
    ``avg by`` and ``sum by`` over fractions differed from Prometheus' in their last
    bits; a mean taken first and the deviations from it after gave 2e-15 for a group
    of equal values, where Prometheus' deviation is exactly 0.

    Why compiled: the fold is sequential per group and step; over a (rows, steps)
    matrix it is one pass that reads each element once.
    """
    groups, steps = out.shape
    count = np.zeros((groups, steps), dtype=np.int64)
    mean = np.zeros((groups, steps))  # the deviations' running mean; out holds the rest
    for r in order:
        g = ids[r]
        for s in range(steps):
            if not present[r, s]:
                continue
            v = values[r, s]
            n = count[g, s] + 1
            count[g, s] = n
            if n == 1:
                out[g, s] = v if op < _STDVAR else 0.0
                mean[g, s] = v
            elif op == _SUM:
                out[g, s] += v
            elif op == _AVG:
                m = out[g, s]
                if np.isinf(m) and ((np.isinf(v) and (m > 0) == (v > 0)) or np.isfinite(v)):
                    continue
                out[g, s] = m + (v / n - m / n)
            else:
                delta = v - mean[g, s]
                mean[g, s] += delta / n
                out[g, s] += delta * (v - mean[g, s])
    if op < _STDVAR:
        return
    for g in range(groups):
        for s in range(steps):
            variance = out[g, s] / count[g, s]
            out[g, s] = np.sqrt(variance) if op == _STDDEV else variance


def _ranked(vec: Vec, ids: IntArray) -> tuple[IntArray, IntArray]:
    """Present elements sorted by (group, step), then by value ascending, NaNs first.

    Returns the elements' rows and steps in that order.
    """
    rows, cols = np.nonzero(vec.present)
    values = vec.values[rows, cols]
    segment = ids[rows] * vec.steps + cols
    nan = np.isnan(values)
    order = np.lexsort((np.where(nan, 0.0, values), ~nan, segment))
    return rows[order], cols[order]


def _top(node: AggNode, vec: Vec, k: IntArray) -> Vec:
    """``topk``/``bottomk``: each group's elements kept at each step as Prometheus' heap keeps
    them (:mod:`.ranking`), ties included; an instant query's in its order."""
    if not vec.labels:
        return Vec.empty(vec.steps)
    groups = Groups(vec.labels, frozenset(node.grouping), node.without, vec.rank, vec.maps)
    count = len(groups.labels)
    room = np.minimum(np.bincount(groups.ids, minlength=count), max(int(k.max(initial=0)), 0))
    offsets = np.cumsum(room) - room
    heaps = np.empty(int(room.sum()), dtype=np.int64)
    sizes = np.zeros(count, dtype=np.int64)
    steps = np.ascontiguousarray(vec.values.T), np.ascontiguousarray(vec.present.T)
    kept = np.zeros(steps[1].shape, dtype=bool)
    bottom = node.op == "bottomk"
    order = _in_order(vec)
    ranking.select_top(*steps, groups.ids, order, k, bottom, offsets, heaps, sizes, kept)
    out = vec.with_values(vec.values, kept.T)
    if vec.steps > 1:
        return out
    # an instant query shows the order: group by group, each heap sorted as Prometheus sorts it
    column = np.ascontiguousarray(vec.values[:, 0])
    ranking.go_sort(column, heaps, offsets, offsets + sizes, not bottom)
    first = np.repeat(offsets - (np.cumsum(sizes) - sizes), sizes)
    chosen = out.take(heaps[first + np.arange(first.size)])
    return Vec(chosen.labels, chosen.values, chosen.present)


def _in_order(vec: Vec) -> IntArray:
    """The rows in the order of Prometheus' elements, which its aggregations visit."""
    if vec.rank is None:
        return np.arange(len(vec.labels), dtype=np.int64)
    order: IntArray = np.argsort(vec.rank, kind="stable")
    return order


def _quantile(groups: Groups, vec: Vec, q: FloatArray) -> FloatArray:
    """Prometheus' ``quantile``: NaNs sort first, then linear interpolation between ranks."""
    steps = vec.steps
    rows, cols = _ranked(vec, groups.ids)
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
