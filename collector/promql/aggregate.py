"""Aggregation operators over one step's vector, as Prometheus 2.x's ``aggregation``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .floats import format_float, go_float_str, go_sqrt, nan_last, quantile
from .values import LABEL_NAME, Labels, QueryError, StepVector, grouping_labels

_INT64_MAX = 9.223372036854775807e18


@dataclass(slots=True)
class _Group:
    labels: Labels
    value: float
    mean: float
    count: int = 1
    members: list[float] = field(default_factory=list)


class GroupKeys:
    """Cached label set -> group label set for one aggregation node."""

    def __init__(self, grouping: tuple[str, ...], without: bool) -> None:
        self.grouping = frozenset(grouping)
        self.without = without
        self._cache: dict[Labels, Labels] = {}

    def of(self, labels: Labels) -> Labels:
        """The group's labels (also its key): kept ``by`` labels, or all but ``without`` ones."""
        got = self._cache.get(labels)
        if got is None:
            got = self.compute(labels, self.grouping)
            self._cache[labels] = got
        return got

    def compute(self, labels: Labels, grouping: frozenset[str]) -> Labels:
        """Uncached :meth:`of` with explicit grouping labels."""
        return grouping_labels(labels, grouping, keep=not self.without)


def aggregate(op: str, vec: StepVector, keys: GroupKeys, param: float | str | None) -> StepVector:
    """Apply aggregation ``op`` to ``vec`` grouped by ``keys``."""
    if op in ("topk", "bottomk"):
        assert isinstance(param, float)
        k = _int64(param)
        return _top(op, vec, keys, k) if k >= 1 else []
    if op == "count_values":
        assert isinstance(param, str)
        return _count_values(vec, keys, param)
    groups: dict[Labels, _Group] = {}
    for labels, v in vec:
        key = keys.of(labels)
        g = groups.get(key)
        if g is None:
            groups[key] = _start(op, key, v)
        else:
            _add(op, g, v)
    return [(g.labels, _result(op, g, param)) for g in groups.values()]


def _int64(param: float) -> int:
    if not (-_INT64_MAX <= param <= _INT64_MAX):
        raise QueryError("execution", f"Scalar value {go_float_str(param)} overflows int64")
    return int(param)


def _start(op: str, key: Labels, v: float) -> _Group:
    """A group from its first element."""
    g = _Group(key, v, v)
    if op in ("stddev", "stdvar"):
        g.value = 0.0
    elif op == "group":
        g.value = 1.0
    elif op == "quantile":
        g.members.append(v)
    return g


def _add(op: str, g: _Group, v: float) -> None:
    """Fold one more element into its group (``group`` has nothing to fold)."""
    if op == "sum":
        g.value += v
    elif op == "avg":
        g.count += 1
        if math.isinf(g.mean):
            if math.isinf(v) and (g.mean > 0) == (v > 0):
                return
            if not math.isinf(v) and not math.isnan(v):
                return
        g.mean += v / g.count - g.mean / g.count
    elif op == "max":
        if g.value < v or math.isnan(g.value):
            g.value = v
    elif op == "min":
        if g.value > v or math.isnan(g.value):
            g.value = v
    elif op == "count":
        g.count += 1
    elif op in ("stddev", "stdvar"):
        g.count += 1
        delta = v - g.mean
        g.mean += delta / g.count
        g.value += delta * (v - g.mean)
    elif op == "quantile":
        g.members.append(v)


def _result(op: str, g: _Group, param: float | str | None) -> float:
    """A group's value once all its elements are in."""
    if op == "avg":
        return g.mean
    if op == "count":
        return float(g.count)
    if op == "stdvar":
        return g.value / g.count
    if op == "stddev":
        return go_sqrt(g.value / g.count)
    if op == "quantile":
        assert isinstance(param, float)
        return quantile(param, g.members)
    return g.value


def _top(op: str, vec: StepVector, keys: GroupKeys, k: int) -> StepVector:
    groups: dict[Labels, list[tuple[Labels, float]]] = {}
    for labels, v in vec:
        groups.setdefault(keys.of(labels), []).append((labels, v))
    out: StepVector = []
    descending = op == "topk"
    for members in groups.values():
        # NaN always ranks last; among equals the order is unspecified (as in Prometheus).
        members.sort(key=lambda m: nan_last(m[1], descending))
        out.extend(members[:k])
    return out


def _count_values(vec: StepVector, keys: GroupKeys, label: str) -> StepVector:
    if not LABEL_NAME.fullmatch(label):
        raise QueryError("execution", f'invalid label name "{label}"')
    grouping = keys.grouping if keys.without else keys.grouping | {label}
    counts: dict[Labels, int] = {}
    for labels, v in vec:
        with_value = dict(labels)
        with_value[label] = format_float(v)
        key = keys.compute(tuple(sorted(with_value.items())), grouping)
        counts[key] = counts.get(key, 0) + 1
    return [(key, float(n)) for key, n in counts.items()]
