"""The values a query hands back (vectors, scalars, strings, matrices), label sets, the query error."""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from collector.tsdb.series import LabelSet, Pairs

ErrorType = Literal["bad_data", "execution", "timeout", "canceled", "unavailable"]

Labels = Pairs
"""A label set inside the evaluator: ``(name, value)`` pairs sorted by name, hashable."""

METRIC_NAME = "__name__"

LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
"""What a valid label name looks like."""


@dataclass(slots=True)
class Element:
    """One element of an instant vector; its timestamp is the evaluation time."""

    labels: dict[str, str]
    value: float


Vector = list[Element]


@dataclass(slots=True)
class Scalar:
    """A plain number."""

    value: float


@dataclass(slots=True)
class String:
    """A string literal's value."""

    value: str


@dataclass(slots=True)
class RangeSeries:
    """One series of a range vector: ``(unix seconds, value)`` points, oldest first."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


Matrix = list[RangeSeries]


@dataclass(frozen=True, slots=True)
class MatrixColumns:
    """A range query's answer as arrays: series sorted by labels, one column per step.

    Series ``i`` has a point at step ``j`` (``at_ms[j]`` milliseconds) where
    ``present[i, j]``, of value ``values[i, j]``; every series has one at least.
    """

    labels: list[Labels]
    at_ms: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    present: npt.NDArray[np.bool_]
    maps: list[LabelSet] | None = None
    """Each series' label set as the storage keeps it, where the labels are still its
    pairs, or every series' its pairs less ``__name__`` (as :attr:`~.arrays.Vec.maps`)."""

    def series(self) -> Matrix:
        """The answer as one :class:`RangeSeries` per series."""
        # one pass of numpy over every point, then slices of two lists: no numpy call per series
        rows, cols = np.nonzero(self.present)
        times = (self.at_ms / 1000)[cols].tolist()
        values = self.values[rows, cols].tolist()
        ends = np.cumsum(np.bincount(rows, minlength=len(self.labels))).tolist()
        out = []
        a = 0
        for labels, b in zip(self.labels, ends, strict=True):
            out.append(RangeSeries(dict(labels), list(zip(times[a:b], values[a:b], strict=True))))
            a = b
        return out


class QueryError(Exception):
    """A query that cannot be answered; ``error_type`` is the Prometheus API's ``errorType``."""

    def __init__(self, error_type: ErrorType, message: str) -> None:
        super().__init__(message)
        self.error_type: ErrorType = error_type
        self.message = message


def unsupported(feature: str) -> QueryError:
    """The error for a valid PromQL feature this evaluator does not implement."""
    return QueryError("execution", f"unsupported: {feature}")


def labels_str(labels: Labels) -> str:
    """Go's ``labels.Labels.String()``: ``{a="b", c="d"}``."""
    return "{" + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in labels) + "}"


def drop_name(labels: Labels) -> Labels:
    """The label set without ``__name__``."""
    if labels and labels[0][0] == METRIC_NAME:  # where it sorts unless a name is capitalised
        return labels[1:]
    for name, _ in labels:
        if name == METRIC_NAME:
            return tuple(p for p in labels if p[0] != METRIC_NAME)
    return labels


def grouping_keys(rows: list[Labels], names: Collection[str], keep: bool) -> list[Labels]:
    """:func:`grouping_labels` of every row (one comprehension: this is per series work)."""
    if keep:
        return [tuple([p for p in labels if p[0] in names]) for labels in rows]
    return [
        tuple([p for p in labels if p[0] not in names and p[0] != METRIC_NAME]) for labels in rows
    ]


def grouping_labels(labels: Labels, names: Collection[str], keep: bool) -> Labels:
    """The labels in ``names`` (``keep``: ``by``, ``on``), or all but those and ``__name__``."""
    if keep:
        return tuple([p for p in labels if p[0] in names])
    return tuple([p for p in labels if p[0] not in names and p[0] != METRIC_NAME])
