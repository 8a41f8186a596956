"""Evaluating the plan's tree at one step, over the series a :class:`~.select.Selection` read.

The tree is walked once a step (Prometheus' ``rangeEval``), so a range query
costs steps x tree size in CPU; what a node can reuse across steps (grouping
keys, vector matching, label rewrites) is kept per node for the whole query.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from . import aggregate as agg
from . import binary, instant
from .deadline import Deadline
from .plan import (
    SET_OPERATORS,
    AggNode,
    BinaryNode,
    CallNode,
    MatrixNode,
    NegNode,
    Node,
    NumberNode,
    SelectorNode,
    string_literal,
)
from .ranges import RANGE_FUNCTIONS, Window
from .select import Selection
from .values import Labels, QueryError, StepVector, drop_name

_SAME_LABELSET = "vector cannot contain metrics with the same labelset"

_T = TypeVar("_T")


class Evaluator:
    """Evaluates the nodes of one query at any step."""

    def __init__(self, selection: Selection, deadline: Deadline) -> None:
        self.selection = selection
        self.deadline = deadline
        self._group_keys: dict[int, agg.GroupKeys] = {}
        self._matchings: dict[int, binary.Matching] = {}
        self._relabels: dict[int, instant.Relabel] = {}
        self._provenance: dict[int, dict[Labels, Labels]] = {}

    def scalar(self, node: Node, ts: int) -> float:
        """A scalar expression's value at ``ts`` (milliseconds)."""
        if isinstance(node, NumberNode):
            return node.value
        if isinstance(node, NegNode):
            return -self.scalar(node.expr, ts)
        if isinstance(node, BinaryNode):
            return binary.scalar_binop(
                node.op, self.scalar(node.lhs, ts), self.scalar(node.rhs, ts)
            )
        if isinstance(node, CallNode):
            if node.name == "time":
                return ts / 1000
            if node.name == "scalar":
                vec = self.vector(node.args[0], ts)
                return vec[0][1] if len(vec) == 1 else math.nan
        raise AssertionError(f"not a scalar expression: {node!r}")

    def vector(self, node: Node, ts: int) -> StepVector:
        """An instant-vector expression's elements at ``ts`` (milliseconds)."""
        self.deadline.check()
        if isinstance(node, SelectorNode):
            return [(labels, v) for labels, _, v in self.selection.instant(node, ts)]
        if isinstance(node, AggNode):
            return self._aggregate(node, ts)
        if isinstance(node, BinaryNode):
            return self._binary(node, ts)
        if isinstance(node, CallNode):
            return self._call(node, ts)
        if isinstance(node, NegNode):
            inner = self.vector(node.expr, ts)
            out = [(drop_name(labels), -v) for labels, v in inner]
            self._record_provenance(node, out, [labels for labels, _ in inner])
            return out
        raise AssertionError(f"not a vector expression: {node!r}")

    def _aggregate(self, node: AggNode, ts: int) -> StepVector:
        keys = _per_node(self._group_keys, node, lambda: agg.GroupKeys(node.grouping, node.without))
        param: float | str | None = None
        if node.param is not None:
            param = (
                string_literal(node.param)
                if node.param.value_type == "string"
                else self.scalar(node.param, ts)
            )
        return agg.aggregate(node.op, self.vector(node.expr, ts), keys, param)

    def _binary(self, node: BinaryNode, ts: int) -> StepVector:
        if node.lhs.value_type == "scalar":
            out = binary.vector_scalar(
                node, self.vector(node.rhs, ts), self.scalar(node.lhs, ts), swap=True
            )
        elif node.rhs.value_type == "scalar":
            out = binary.vector_scalar(
                node, self.vector(node.lhs, ts), self.scalar(node.rhs, ts), swap=False
            )
        else:
            m = _per_node(self._matchings, node, lambda: binary.Matching(node))
            lhs, rhs = self.vector(node.lhs, ts), self.vector(node.rhs, ts)
            if node.op in SET_OPERATORS:
                return binary.set_operation(m, lhs, rhs)
            out = binary.vector_vector(m, lhs, rhs)
        _check_unique(out)
        return out

    def _call(self, node: CallNode, ts: int) -> StepVector:
        name = node.name
        if name in RANGE_FUNCTIONS:
            return self._range_call(node, ts)
        if name == "vector":
            return [((), self.scalar(node.args[0], ts))]
        arg = node.args[0]
        if name == "timestamp" and isinstance(arg, SelectorNode):
            # On a plain selector, the sample's own timestamp (not the evaluation time).
            out = [
                (drop_name(labels), t / 1000) for labels, t, _ in self.selection.instant(arg, ts)
            ]
        else:
            out = self._vector_function(node, self.vector(arg, ts), ts)
        _check_unique(out)
        return out

    def _vector_function(self, node: CallNode, vec: StepVector, ts: int) -> StepVector:
        if node.name in ("label_replace", "label_join"):
            rewrite = _per_node(self._relabels, node, lambda: instant.relabel(node))
            return rewrite(vec)
        if node.name == "absent":
            return instant.absent(vec, node.args[0])
        args = [self.scalar(a, ts) for a in node.args[1:]]
        return instant.apply(node.name, vec, args, ts)

    def _range_call(self, node: CallNode, ts: int) -> StepVector:
        fn = RANGE_FUNCTIONS[node.name]
        arg = 0.0
        mat_node = node.args[-1]
        if len(node.args) > 1:  # quantile_over_time(q, x[r])
            arg = self.scalar(node.args[0], ts)
        assert isinstance(mat_node, MatrixNode)
        window = Window(ts, mat_node.range_ms, mat_node.selector.offset_ms)
        keep_name = node.name == "last_over_time"
        out: StepVector = []
        sources: list[Labels] = []
        for labels, times, values in self.selection.matrix(mat_node, ts):
            value = fn(times, values, window, arg)
            if value is not None:
                out.append((labels if keep_name else drop_name(labels), value))
                sources.append(labels)
        self._record_provenance(node, out, sources)
        return out

    def _record_provenance(self, node: Node, out: StepVector, sources: Sequence[Labels]) -> None:
        """Prometheus checks these nodes' whole result matrix: two input series mapping to the
        same output labels fail the query even when they never share a step."""
        seen = _per_node(self._provenance, node, dict)
        for (labels, _), source in zip(out, sources, strict=True):
            first = seen.setdefault(labels, source)
            if first != source:
                raise QueryError("execution", _SAME_LABELSET)


def _per_node(cache: dict[int, _T], node: Node, make: Callable[[], _T]) -> _T:
    """What ``node`` keeps across steps, made on its first step."""
    got = cache.get(id(node))
    if got is None:
        got = cache[id(node)] = make()
    return got


def _check_unique(vec: StepVector) -> None:
    if len(vec) > 1 and len({labels for labels, _ in vec}) != len(vec):
        raise QueryError("execution", _SAME_LABELSET)
