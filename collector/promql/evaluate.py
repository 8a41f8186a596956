"""Evaluating the plan's tree over whole arrays, from what a :class:`~.select.Selection` read.

Each node is evaluated once a query for all its steps: an instant vector is a
:class:`~.arrays.Vec` (series x steps), a scalar one value per step. Children
are evaluated before their parent, and each node raises the errors Prometheus
raises for it in step order, so the first error of a query is Prometheus'
first. Nothing here reads the storage: a prefetched query can be evaluated
in any thread.
"""

from __future__ import annotations

import numpy as np

from collector.tsdb.series import LabelSet, share_name

from . import aggregate as agg
from . import binary, histogram, instant, lookup
from .arrays import Block, FloatArray, IntArray, Vec, unique_overall, unique_per_step
from .limits import Limits
from .plan import (
    DATE_FUNCTIONS,
    SET_OPERATORS,
    AggNode,
    BinaryNode,
    CallNode,
    MatrixNode,
    NegNode,
    Node,
    NumberNode,
    SelectorNode,
    SubqueryNode,
    string_literal,
)
from .ranges import RANGE_FUNCTIONS, TIMED, check_smoothing
from .relabel import relabel
from .select import Selection
from .timing import QueryTimes, ref_mode, refs, subquery_refs, subquery_steps
from .values import Labels, drop_name

RangeSource = tuple[list[Block], IntArray, IntArray, int]
"""A range vector argument: its blocks, their rows' output order, window ends per step, range."""


class Evaluator:
    """Evaluates the nodes of one query over arrays of steps (milliseconds)."""

    def __init__(
        self, selection: Selection, times: QueryTimes, lookback_ms: int, limits: Limits
    ) -> None:
        self.selection = selection
        self.times = times
        self.lookback_ms = lookback_ms
        self.limits = limits

    def scalar(self, node: Node, at: IntArray) -> FloatArray:
        """A scalar expression's value at each step."""
        if isinstance(node, NumberNode):
            return np.full(at.shape, node.value)
        if isinstance(node, NegNode):
            return -self.scalar(node.expr, at)
        if isinstance(node, BinaryNode):
            return binary.scalar_binop(
                node.op, self.scalar(node.lhs, at), self.scalar(node.rhs, at)
            )
        if isinstance(node, CallNode):
            if node.name == "time":
                return at / 1000
            if node.name == "pi":
                return np.full(at.shape, np.pi)
            if node.name == "scalar":
                vec = self.vector(node.args[0], at)
                if not vec.labels:
                    return np.full(at.shape, np.nan)
                single = vec.present.sum(axis=0) == 1
                picked = vec.values[np.argmax(vec.present, axis=0), np.arange(at.size)]
                return np.where(single, picked, np.nan)
        raise AssertionError(f"not a scalar expression: {node!r}")

    def vector(self, node: Node, at: IntArray) -> Vec:
        """An instant-vector expression at each step."""
        self.limits.check()
        vec = self._vector(node, at)
        self.limits.charge(vec.values.size)
        return vec

    def _vector(self, node: Node, at: IntArray) -> Vec:
        if isinstance(node, SelectorNode):
            found, _ = lookup.instant(
                self.selection.of(node), refs(node, at, self.times), self.lookback_ms
            )
            return found.compact()
        if isinstance(node, AggNode):
            return self._aggregate(node, at)
        if isinstance(node, BinaryNode):
            return self._binary(node, at)
        if isinstance(node, CallNode):
            return self._call(node, at)
        if isinstance(node, NegNode):
            inner = self.vector(node.expr, at)
            return unique_overall(inner.unnamed(-inner.values))
        raise AssertionError(f"not a vector expression: {node!r}")

    def _aggregate(self, node: AggNode, at: IntArray) -> Vec:
        param: FloatArray | str | None = None
        if node.param is not None:
            if node.param.value_type == "string":
                param = string_literal(node.param)
            else:
                param = self.scalar(node.param, at)
        return agg.aggregate(node, self.vector(node.expr, at), param)

    def _binary(self, node: BinaryNode, at: IntArray) -> Vec:
        if node.lhs.value_type == "scalar":
            scalar = self.scalar(node.lhs, at)
            return binary.vector_scalar(node, self.vector(node.rhs, at), scalar, swap=True)
        if node.rhs.value_type == "scalar":
            vec = self.vector(node.lhs, at)
            return binary.vector_scalar(node, vec, self.scalar(node.rhs, at), swap=False)
        lhs, rhs = self.vector(node.lhs, at), self.vector(node.rhs, at)
        if node.op in SET_OPERATORS:
            return binary.set_operation(node, lhs, rhs)
        return binary.vector_vector(node, lhs, rhs)

    def _call(self, node: CallNode, at: IntArray) -> Vec:
        name = node.name
        if name in RANGE_FUNCTIONS or name == "absent_over_time":
            return self._range_call(node, at)
        if name == "vector":
            return Vec([()], self.scalar(node.args[0], at)[None, :], np.ones((1, at.size), bool))
        if name in DATE_FUNCTIONS and not node.args:
            values = instant.date_function(name, at / 1000)
            return Vec([()], values[None, :], np.ones((1, at.size), dtype=bool))
        if name == "histogram_quantile":
            quantile = self.scalar(node.args[0], at)
            return unique_per_step(histogram.quantile(quantile, self.vector(node.args[1], at)))
        arg = node.args[0]
        if name == "timestamp" and isinstance(arg, SelectorNode):
            # On a plain selector, the sample's own time (not the evaluation time).
            where = refs(arg, at, self.times, ref_mode(node, arg))
            found, sample_times = lookup.instant(
                self.selection.of(arg), where, self.lookback_ms, with_times=True
            )
            assert sample_times is not None
            return unique_per_step(found.unnamed(sample_times / 1000))
        if name in ("label_replace", "label_join"):
            rewrite = relabel(node)
            vec = self.vector(arg, at)
            return unique_per_step(vec.relabelled(rewrite(vec.labels)))
        vec = self.vector(arg, at)
        if name == "absent":
            return instant.absent(vec, arg)
        args = [self.scalar(a, at) for a in node.args[1:]]
        return unique_per_step(instant.apply(name, vec, args, at))

    def _range_call(self, node: CallNode, at: IntArray) -> Vec:
        index = next(i for i, a in enumerate(node.args) if a.value_type == "matrix")
        args = [self.scalar(a, at) for i, a in enumerate(node.args) if i != index]
        blocks, order, ends, range_ms = self._range_source(node, node.args[index], at)
        windows, stacked = lookup.windows(blocks, ends, range_ms, at, node.name in TIMED)
        if node.name == "absent_over_time":
            found = np.zeros(at.size, dtype=bool)
            for win in windows:
                found |= (win.count >= 1).any(axis=0)
            labels = [instant.absent_labels(node.args[index])]
            return Vec(labels, np.ones((1, at.size)), ~found[None, :])
        if not windows:
            return Vec.empty(at.size)
        if node.name == "holt_winters":
            counts = _unstacked(np.concatenate([win.count for win in windows]), stacked)
            check_smoothing(counts[order], args[0], args[1])
        fn = RANGE_FUNCTIONS[node.name]
        parts = [fn(win, args) for win in windows]
        values = _unstacked(np.concatenate([v for v, _ in parts]), stacked)
        present = _unstacked(np.concatenate([p for _, p in parts]), stacked)
        maps = lookup.maps_of(blocks)
        every, distinct = _range_labels(blocks, maps, order, node.name == "last_over_time")
        vec = Vec(every, values, present, lookup.rank_of(order), maps)
        return vec.compact() if distinct else unique_overall(vec)

    def _range_source(self, parent: CallNode, arg: Node, at: IntArray) -> RangeSource:
        """A range vector argument's blocks, output order, window ends and range."""
        mode = ref_mode(parent, arg)
        if isinstance(arg, MatrixNode):
            selected = self.selection.of(arg.selector)
            ends = refs(arg.selector, at, self.times, mode)
            return selected.blocks, selected.order, ends, arg.range_ms
        assert isinstance(arg, SubqueryNode)
        block, order = self.subquery_block(arg, subquery_steps(arg, at, self.times, mode))
        return [block], order, subquery_refs(arg, at, self.times, mode), arg.range_ms

    def subquery_block(self, node: SubqueryNode, inner: IntArray) -> tuple[Block, IntArray]:
        """A subquery's expression at its own steps, as a block of points (no staleness
        markers), and its rows' Prometheus order."""
        if node.expr.value_type == "scalar":
            values = self.scalar(node.expr, inner)[None, :]
            vec = Vec([()], values, np.ones(values.shape, dtype=bool))
        else:
            vec = self.vector(node.expr, inner)
        stale = np.zeros(vec.present.shape, dtype=bool)
        order = np.argsort(vec.ranks(), kind="stable")
        return Block(inner, vec.labels, vec.values, vec.present, stale), order

    def matrix(self, node: Node, at: int) -> list[tuple[Labels, IntArray, FloatArray]]:
        """A top-level range vector (instant queries only): each series' points in its window."""
        step = np.array([at], dtype=np.int64)
        if isinstance(node, SubqueryNode):
            block, order = self.subquery_block(node, subquery_steps(node, step, self.times))
            blocks = [block]
            end = int(subquery_refs(node, step, self.times)[0])
        else:
            assert isinstance(node, MatrixNode)
            selected = self.selection.of(node.selector)
            blocks, order = selected.blocks, selected.order
            end = int(refs(node.selector, step, self.times)[0])
        assert isinstance(node, SubqueryNode | MatrixNode)
        rows: list[tuple[Labels, IntArray, FloatArray]] = []
        for block in blocks:
            inside = (block.times >= end - node.range_ms) & (block.times <= end)
            points = block.points & inside[None, :]
            for row, labels in enumerate(block.labels):
                keep = points[row]
                rows.append((labels, block.times[keep], block.values[row, keep]))
        ordered = [rows[i] for i in order.tolist()]
        return [row for row in ordered if row[1].size]


def _unstacked(rows: np.ndarray, stacked: IntArray | None) -> np.ndarray:
    """Rows of stacked windows back in their blocks' order (:func:`~.lookup.windows`)."""
    return rows if stacked is None else rows[stacked]


def _range_labels(
    blocks: list[Block], maps: list[LabelSet] | None, order: IntArray, named: bool
) -> tuple[list[Labels], bool]:
    """A range function's labels of the blocks' rows, ``__name__`` dropped unless ``named``,
    and whether they are known to be distinct without comparing them.

    The storage's label sets (``maps``, in label order by ``order``) are distinct,
    and stay so without a name they all share: then the per-series check of
    :func:`unique_overall` is spared.
    """
    if named:
        return [labels for b in blocks for labels in b.labels], maps is not None
    if maps is None:
        return [drop_name(labels) for b in blocks for labels in b.labels], False
    shared = bool(maps) and share_name(maps[order[0]], maps[order[-1]])
    return [m.unnamed for m in maps], shared
