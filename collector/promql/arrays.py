"""The evaluator's arrays: stored series on one time axis, and an instant vector over all steps.

Why whole arrays: a range query evaluates every node at ``k`` steps; holding a
node's result as one ``(n, k)`` matrix (with a mask of where each series has
a value) lets numpy do per-step work for all series at once, so Python only
ever loops over series (label work, once a query) or over steps, never both.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collector.tsdb.series import LabelSet

from .values import Labels, QueryError, drop_name

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

SAME_LABELSET = "vector cannot contain metrics with the same labelset"


@dataclass(frozen=True, slots=True)
class Block:
    """Series read together from the storage, on one time axis (milliseconds).

    ``present`` marks the points (staleness markers included: an instant
    selector stops at one); ``stale`` marks the staleness markers, which range
    selections skip. ``maps`` are the storage's own label sets of the rows
    when it hands out immutable ones (:class:`~collector.tsdb.series.LabelSet`).
    """

    times: IntArray
    labels: list[Labels]
    values: FloatArray
    present: BoolArray
    stale: BoolArray
    maps: list[LabelSet] | None = None

    @property
    def points(self) -> BoolArray:
        """The points a range selection sees: present and not staleness markers."""
        return self.present & ~self.stale


@dataclass(slots=True)
class Vec:
    """An instant vector at every step: ``values`` and ``present`` are ``(n, k)``.

    Row ``i`` is the series labelled ``labels[i]``; it has an element at step
    ``j`` where ``present[i, j]``. Prometheus' element order (which an
    instant query's answer shows) is the rows' order, or, where ``rank`` is
    set, the order of ``rank``: rows read from the storage stay in its order,
    where their labels lie together in memory, which makes per-series label
    work several times faster than in label order.
    """

    labels: list[Labels]
    values: FloatArray
    present: BoolArray
    rank: IntArray | None = None
    maps: list[LabelSet] | None = None
    """The rows' label sets as the storage keeps them (dict lookups are fast), and None once
    labels change otherwise: while set, every row is labelled with its set's pairs, or every
    row with them less ``__name__`` (:func:`~.values.drop_name`)."""

    @staticmethod
    def empty(steps: int) -> Vec:
        """The vector with no series."""
        return Vec([], np.zeros((0, steps)), np.zeros((0, steps), dtype=bool))

    @property
    def steps(self) -> int:
        """How many steps the vector spans."""
        return int(self.values.shape[1])

    def take(self, rows: Sequence[int] | IntArray) -> Vec:
        """The vector of the given rows (their ranks kept)."""
        index = np.asarray(rows, dtype=np.int64)
        rows_ = index.tolist()
        labels = [self.labels[i] for i in rows_]
        rank = None if self.rank is None else self.rank[index]
        maps = None if self.maps is None else [self.maps[i] for i in rows_]
        return Vec(labels, self.values[index], self.present[index], rank, maps)

    def ordered(self) -> Vec:
        """The same vector with its rows in Prometheus' order (no ``rank``)."""
        if self.rank is None:
            return self
        ordered = self.take(np.argsort(self.rank, kind="stable"))
        return Vec(ordered.labels, ordered.values, ordered.present, None, ordered.maps)

    def ranks(self) -> IntArray:
        """Each row's place in Prometheus' order."""
        if self.rank is not None:
            return self.rank
        return np.arange(len(self.labels), dtype=np.int64)

    def relabelled(self, labels: list[Labels]) -> Vec:
        """The same elements under new label sets (one per row)."""
        return Vec(labels, self.values, self.present, self.rank)

    def with_values(self, values: FloatArray, present: BoolArray | None = None) -> Vec:
        """The same series (labels, order) with new values and, if given, presence."""
        present = self.present if present is None else present
        return Vec(self.labels, values, present, self.rank, self.maps)

    def unnamed(self, values: FloatArray, present: BoolArray | None = None) -> Vec:
        """The series without their metric names, with new values (and presence)."""
        present = self.present if present is None else present
        named = [drop_name(labels) for labels in self.labels]
        return Vec(named, values, present, self.rank, self.maps)

    def compact(self) -> Vec:
        """Without the rows that have no element at any step."""
        alive = self.present.any(axis=1)
        if alive.all():
            return self
        return self.take(np.flatnonzero(alive))


def duplicate_rows(labels: Sequence[Hashable]) -> list[list[int]]:
    """Groups of row indexes that share a label set, or any key (only groups of two or more)."""
    first: dict[Hashable, int] = {}
    groups: dict[int, list[int]] = {}
    for i, key in enumerate(labels):
        j = first.setdefault(key, i)
        if j != i:
            groups.setdefault(j, [j]).append(i)
    return list(groups.values())


def first_overlap(vec: Vec, groups: list[list[int]]) -> int | None:
    """The first step at which two rows of one group both have an element, if any."""
    worst: int | None = None
    for rows in groups:
        clash = np.flatnonzero(vec.present[rows].sum(axis=0) > 1)
        if clash.size and (worst is None or int(clash[0]) < worst):
            worst = int(clash[0])
    return worst


def merge_rows(vec: Vec, groups: list[list[int]]) -> Vec:
    """Rows sharing labels (never at the same step) merged into the first of them."""
    if not groups:
        return vec
    values, present = vec.values.copy(), vec.present.copy()
    keep = np.ones(len(vec.labels), dtype=bool)
    for head, *rest in groups:
        for row in rest:
            take = vec.present[row]
            values[head] = np.where(take, vec.values[row], values[head])
            present[head] |= take
            keep[row] = False
    index = np.flatnonzero(keep)
    return Vec(vec.labels, values, present, vec.rank).take(index)


def unique_per_step(vec: Vec) -> Vec:
    """Prometheus' check after every step of most nodes: one label set once per step.

    Rows that share a label set at different steps are one series (a range
    query's answer merges them), so they are merged.
    """
    vec = vec.compact()
    groups = duplicate_rows(vec.labels)
    if first_overlap(vec, groups) is not None:
        raise QueryError("execution", SAME_LABELSET)
    return merge_rows(vec, groups)


def unique_overall(vec: Vec) -> Vec:
    """Prometheus' check of a whole result matrix (range functions, unary minus).

    Two series that map to the same labels fail the query even if they never
    share a step.
    """
    vec = vec.compact()
    if duplicate_rows(vec.labels):
        raise QueryError("execution", SAME_LABELSET)
    return vec
