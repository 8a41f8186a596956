"""Aggregation operators over one step's vector, as Prometheus 2.x's ``aggregation``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .functions import LABEL_NAME, quantile
from .values import METRIC_NAME, Labels, QueryError, format_float, go_float_str, go_sqrt

StepVector = list[tuple[Labels, float]]

_INT64_MAX = 9.223372036854775807e18


@dataclass(slots=True)
class _Group:
    labels: Labels
    value: float
    mean: float
    count: int = 1
    members: list[tuple[Labels, float]] = field(default_factory=list)


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
        if self.without:
            return tuple(p for p in labels if p[0] not in grouping and p[0] != METRIC_NAME)
        return tuple(p for p in labels if p[0] in grouping)


def aggregate(op: str, vec: StepVector, keys: GroupKeys, param: float | str | None) -> StepVector:
    """Apply aggregation ``op`` to ``vec`` grouped by ``keys``."""
    if op in ("topk", "bottomk"):
        assert isinstance(param, float)
        if not (-_INT64_MAX <= param <= _INT64_MAX):
            raise QueryError("execution", f"Scalar value {go_float_str(param)} overflows int64")
        k = int(param)
        if k < 1:
            return []
        return _top(op, vec, keys, k)
    if op == "count_values":
        assert isinstance(param, str)
        return _count_values(vec, keys, param)

    groups: dict[Labels, _Group] = {}
    for labels, v in vec:
        key = keys.of(labels)
        g = groups.get(key)
        if g is None:
            g = _Group(key, v, v)
            groups[key] = g
            if op in ("stddev", "stdvar"):
                g.value = 0.0
            elif op == "group":
                g.value = 1.0
            elif op == "quantile":
                g.members.append((labels, v))
            continue
        if op == "sum":
            g.value += v
        elif op == "avg":
            g.count += 1
            if math.isinf(g.mean):
                if math.isinf(v) and (g.mean > 0) == (v > 0):
                    continue
                if not math.isinf(v) and not math.isnan(v):
                    continue
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
            g.members.append((labels, v))
        # "group": nothing to do

    out: StepVector = []
    for g in groups.values():
        if op == "avg":
            value = g.mean
        elif op == "count":
            value = float(g.count)
        elif op == "stdvar":
            value = g.value / g.count
        elif op == "stddev":
            value = go_sqrt(g.value / g.count)
        elif op == "quantile":
            assert isinstance(param, float)
            value = quantile(param, [v for _, v in g.members])
        else:
            value = g.value
        out.append((g.labels, value))
    return out


def _top(op: str, vec: StepVector, keys: GroupKeys, k: int) -> StepVector:
    groups: dict[Labels, list[tuple[Labels, float]]] = {}
    for labels, v in vec:
        groups.setdefault(keys.of(labels), []).append((labels, v))
    out: StepVector = []
    for members in groups.values():
        # NaN always ranks last; among equals the order is unspecified (as in Prometheus).
        if op == "topk":
            members.sort(key=lambda m: (math.isnan(m[1]), -m[1] if not math.isnan(m[1]) else 0.0))
        else:
            members.sort(key=lambda m: (math.isnan(m[1]), m[1] if not math.isnan(m[1]) else 0.0))
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
