"""Binary operators over whole arrays: scalar/scalar, vector/scalar and vector/vector matching.

Vector matching is worked out once a query on label sets (which row of one
side pairs with which of the other), then applied to whole matrices with
masks. Prometheus' matching errors are raised exactly where it raises them:
only at a step where the conflicting series are present together, and the
earliest such step wins (its checks run step by step).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .arrays import (
    SAME_LABELSET,
    BoolArray,
    FloatArray,
    Vec,
    duplicate_rows,
    first_overlap,
    merge_rows,
)
from .plan import COMPARISON, DROPS_NAME, BinaryNode
from .values import METRIC_NAME, Labels, QueryError, drop_name, grouping_labels, labels_str


def arithmetic(op: str, a: FloatArray, b: FloatArray) -> FloatArray:
    """``a op b`` for an arithmetic operator, element-wise (IEEE, as Go)."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b
    if op == "%":
        return np.fmod(a, b)
    if op == "atan2":
        return np.arctan2(a, b)
    return np.power(a, b)


def compare(op: str, a: FloatArray, b: FloatArray) -> BoolArray:
    """``a op b`` for a comparison operator, element-wise."""
    if op == "==":
        result: BoolArray = a == b
    elif op == "!=":
        result = a != b
    elif op == ">":
        result = a > b
    elif op == "<":
        result = a < b
    elif op == ">=":
        result = a >= b
    else:
        result = a <= b
    return result


def scalar_binop(op: str, a: FloatArray, b: FloatArray) -> FloatArray:
    """Two scalars (comparisons always carry ``bool`` here; the parser insists)."""
    if op in COMPARISON:
        return compare(op, a, b).astype(np.float64)
    return arithmetic(op, a, b)


def vector_scalar(node: BinaryNode, vec: Vec, scalar: FloatArray, swap: bool) -> Vec:
    """A vector and a scalar; ``swap`` when the scalar is on the left."""
    op = node.op
    s = scalar[None, :]
    a, b = (s, vec.values) if swap else (vec.values, s)
    if op in COMPARISON:
        keep = compare(op, a, b)
        if node.return_bool:
            return _unique(vec.unnamed(keep.astype(np.float64)), None)
        return vec.with_values(vec.values, vec.present & keep)
    if op not in DROPS_NAME:  # atan2 keeps the name
        return vec.with_values(arithmetic(op, a, b))
    return _unique(vec.unnamed(arithmetic(op, a, b)), None)


def signature(node: BinaryNode, labels: Labels) -> Labels:
    """The labels two sides are matched on (``on``) or all but the ignored ones and the name."""
    return grouping_labels(labels, node.matching, node.on)


def result_labels(node: BinaryNode, many: Labels, one: Labels) -> Labels:
    """Prometheus' ``resultMetric``: the output labels of a matched pair (``one`` = "one" side)."""
    result = dict(many)
    if node.op in DROPS_NAME:
        result.pop(METRIC_NAME, None)
    if node.card == "one-to-one":
        if node.on:
            result = {k: v for k, v in result.items() if k in node.matching}
        else:
            for name in node.matching:
                result.pop(name, None)
    if node.include:
        other = dict(one)
        for name in node.include:
            value = other.get(name, "")
            if value:
                result[name] = value
            else:
                result.pop(name, None)
    labels = tuple(sorted(result.items()))
    return drop_name(labels) if node.return_bool else labels


def vector_vector(node: BinaryNode, lhs: Vec, rhs: Vec) -> Vec:
    """Arithmetic or comparison between two vectors with one-to-one or many-to-one matching."""
    lhs, rhs = lhs.compact(), rhs.compact()
    active: BoolArray = np.logical_or.reduce(lhs.present, axis=0)
    active &= np.logical_or.reduce(rhs.present, axis=0)
    swapped = node.card == "one-to-many"
    many, one = (rhs, lhs) if swapped else (lhs, rhs)
    by_sig: dict[Labels, list[int]] = {}
    for row, labels in enumerate(one.labels):
        by_sig.setdefault(signature(node, labels), []).append(row)
    failure = _one_side_clash(node, one, by_sig, active, "left" if swapped else "right")
    pairs = [
        (i, r)
        for i, labels in enumerate(many.labels)
        for r in by_sig.get(signature(node, labels), ())
    ]
    mi = np.array([i for i, _ in pairs], dtype=np.int64)
    oi = np.array([r for _, r in pairs], dtype=np.int64)
    vl, vr = many.values[mi], one.values[oi]
    if swapped:
        vl, vr = vr, vl
    both = many.present[mi] & one.present[oi] & active[None, :]
    if node.op in COMPARISON:
        keep = compare(node.op, vl, vr)
        value = keep.astype(np.float64) if node.return_bool else vl
    else:
        keep = np.ones(both.shape, dtype=bool)
        value = arithmetic(node.op, vl, vr)
    present = both if node.return_bool else both & keep
    results = [result_labels(node, many.labels[i], one.labels[r]) for i, r in pairs]
    out = Vec(results, value, present, None if many.rank is None else many.rank[mi])
    failure = _earliest(
        failure, _match_clash(node, out, [signature(node, many.labels[i]) for i, _ in pairs])
    )
    return _unique(out, failure)


class Failure(NamedTuple):
    """A query error and the step it happens at: Prometheus reports the earliest."""

    step: int
    error: QueryError


def _one_side_clash(
    node: BinaryNode, one: Vec, by_sig: dict[Labels, list[int]], active: BoolArray, side: str
) -> Failure | None:
    """The first step where two series of the "one" side share a signature, with Prometheus' error."""
    step: int | None = None
    for rows in by_sig.values():
        if len(rows) > 1:
            clash = np.flatnonzero(active & (one.present[rows].sum(axis=0) > 1))
            if clash.size and (step is None or int(clash[0]) < step):
                step = int(clash[0])
    if step is None:
        return None
    one = one.ordered()  # Prometheus names the pair it meets first, in its order
    seen: dict[Labels, Labels] = {}
    for row in np.flatnonzero(one.present[:, step]).tolist():
        labels = one.labels[row]
        sig = signature(node, labels)
        if sig in seen:
            error = QueryError(
                "execution",
                f"found duplicate series for the match group {labels_str(sig)} "
                f"on the {side} hand-side of the operation: "
                f"[{labels_str(labels)}, {labels_str(seen[sig])}]"
                ";many-to-many matching not allowed: matching labels must be unique on one side",
            )
            return Failure(step, error)
        seen[sig] = labels
    raise AssertionError("a clash was found but not located")


def _match_clash(node: BinaryNode, out: Vec, sigs: list[Labels]) -> Failure | None:
    """The first step where one signature matched twice (one-to-one) or gave one result twice."""
    if node.card == "one-to-one":
        keys: list[object] = list(sigs)
        message = "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)"
    else:
        keys = list(zip(sigs, out.labels, strict=True))
        message = "multiple matches for labels: grouping labels must ensure unique matches"
    step = first_overlap(out, duplicate_rows(keys))
    return None if step is None else Failure(step, QueryError("execution", message))


def _earliest(a: Failure | None, b: Failure | None) -> Failure | None:
    """The failure at the earlier step; at the same step the first one (checked first)."""
    if a is None:
        return b
    if b is None:
        return a
    return b if b.step < a.step else a


def _unique(vec: Vec, failure: Failure | None) -> Vec:
    """Prometheus' per-step check of the result after the operator's own, in step order."""
    vec = vec.compact()
    groups = duplicate_rows(vec.labels)
    clash = first_overlap(vec, groups)
    if clash is not None:
        failure = _earliest(failure, Failure(clash, QueryError("execution", SAME_LABELSET)))
    if failure is not None:
        raise failure.error
    return merge_rows(vec, groups)


def set_operation(node: BinaryNode, lhs: Vec, rhs: Vec) -> Vec:
    """``and``, ``or``, ``unless``: which elements of each side survive at each step."""
    lhs, rhs = lhs.compact(), rhs.compact()
    if node.op == "or":
        left_any = _any_by_signature(node, lhs, rhs.labels)
        joined = Vec(
            lhs.labels + rhs.labels,
            np.concatenate([lhs.values, rhs.values]),
            np.concatenate([lhs.present, rhs.present & ~left_any]),
            np.concatenate([lhs.ranks(), rhs.ranks() + len(lhs.labels)]),
        )
        return _unique(joined, None)
    right_any = _any_by_signature(node, rhs, lhs.labels)
    present = lhs.present & right_any if node.op == "and" else lhs.present & ~right_any
    return lhs.with_values(lhs.values, present)


def _any_by_signature(node: BinaryNode, side: Vec, rows: list[Labels]) -> BoolArray:
    """For each label set in ``rows``: whether ``side`` has an element with its signature, per step."""
    index: dict[Labels, int] = {}
    for labels in side.labels:
        index.setdefault(signature(node, labels), len(index))
    present = np.zeros((len(index) + 1, side.steps), dtype=bool)  # the last row: no such signature
    if side.labels:
        ids = np.array([index[signature(node, labels)] for labels in side.labels])
        np.logical_or.at(present, ids, side.present)
    lookup = np.array(
        [index.get(signature(node, labels), len(index)) for labels in rows], dtype=np.int64
    )
    picked: BoolArray = present[lookup] if rows else np.zeros((0, side.steps), dtype=bool)
    return picked
