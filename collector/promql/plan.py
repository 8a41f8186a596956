"""The parsed query as the evaluator's own small tree, checked against the supported subset.

promql-parser does the parsing and type checking (Prometheus' grammar); this
module turns its AST into plain dataclasses, drops parentheses, and refuses
every feature outside the subset *before* any data is read, so an unsupported
query fails with an ``execution`` error naming the feature, never a wrong answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import promql_parser as pp

from collector.tsdb.series import Matcher, Op

from .floats import MATH_FUNCTIONS
from .ranges import RANGE_FUNCTIONS
from .values import QueryError, unsupported

ValueType = Literal["scalar", "vector", "matrix", "string"]

AGGREGATIONS = frozenset(
    {
        "sum",
        "avg",
        "min",
        "max",
        "count",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
    }
)

VECTOR_FUNCTIONS = frozenset(MATH_FUNCTIONS) | {
    "round",
    "clamp",
    "clamp_min",
    "clamp_max",
    "label_replace",
    "label_join",
    "timestamp",
    "vector",
    "sort",
    "sort_desc",
    "absent",
}
SCALAR_FUNCTIONS = frozenset({"time", "scalar"})

ARITHMETIC = frozenset({"+", "-", "*", "/", "%", "^"})
COMPARISON = frozenset({"==", "!=", ">", "<", ">=", "<="})
SET_OPERATORS = frozenset({"and", "or", "unless"})

# Functions Prometheus 2.x knows that promql-parser (which follows newer
# Prometheus) no longer parses: refuse them as unsupported, not as bad syntax.
_PROMETHEUS2_ONLY_FUNCTIONS = frozenset({"holt_winters"})

Card = Literal["one-to-one", "many-to-one", "one-to-many", "many-to-many"]


@dataclass(eq=False, slots=True)
class NumberNode:
    """A number literal."""

    value: float
    value_type: ValueType = "scalar"


@dataclass(eq=False, slots=True)
class StringNode:
    """A string literal."""

    value: str
    value_type: ValueType = "string"


@dataclass(eq=False, slots=True)
class SelectorNode:
    """An instant vector selector (also the inside of a range selector)."""

    matchers: tuple[Matcher, ...]
    offset_ms: int
    value_type: ValueType = "vector"


@dataclass(eq=False, slots=True)
class MatrixNode:
    """A range vector selector ``sel[range]``."""

    selector: SelectorNode
    range_ms: int
    value_type: ValueType = "matrix"


@dataclass(eq=False, slots=True)
class NegNode:
    """Unary minus."""

    expr: Node
    value_type: ValueType


@dataclass(eq=False, slots=True)
class BinaryNode:
    """A binary operator with its vector matching."""

    op: str
    lhs: Node
    rhs: Node
    return_bool: bool
    card: Card
    on: bool
    matching: frozenset[str]
    include: tuple[str, ...]
    value_type: ValueType


@dataclass(eq=False, slots=True)
class AggNode:
    """An aggregation with ``by`` (``without=False``) or ``without`` grouping."""

    op: str
    expr: Node
    param: Node | None
    without: bool
    grouping: tuple[str, ...]
    value_type: ValueType = "vector"


@dataclass(eq=False, slots=True)
class CallNode:
    """A function call.

    ``regex`` is ``label_replace``'s, compiled once here; None for other
    functions and for a regex that does not compile (the evaluator says so).
    """

    name: str
    args: list[Node]
    value_type: ValueType
    regex: re.Pattern[str] | None = None


Node = (
    NumberNode | StringNode | SelectorNode | MatrixNode | NegNode | BinaryNode | AggNode | CallNode
)

_MATCH_OPS: tuple[tuple[pp.MatchOp, Op], ...] = (
    (pp.MatchOp.Equal, "="),
    (pp.MatchOp.NotEqual, "!="),
    (pp.MatchOp.Re, "=~"),
    (pp.MatchOp.NotRe, "!~"),
)


def _match_op(op: pp.MatchOp) -> Op:
    for known, ours in _MATCH_OPS:
        if op == known:
            return ours
    raise unsupported(f"label matcher {op}")


def compile_query(text: str) -> Node:
    """Parse ``text`` and return the evaluator's tree, or raise :class:`QueryError`."""
    try:
        expr = pp.parse(text)
    except Exception as exc:  # promql-parser raises ValueError; be safe about others
        message = str(exc)
        unknown = re.fullmatch(r"unknown function with name '(\w+)'", message)
        if unknown and unknown.group(1) in _PROMETHEUS2_ONLY_FUNCTIONS:
            raise unsupported(f"function {unknown.group(1)}") from None
        raise QueryError("bad_data", message) from None
    return _convert(expr)


def selectors(node: Node) -> list[tuple[SelectorNode, int]]:
    """Every selector in the tree with the range it is read over (0 for an instant selector)."""
    found: list[tuple[SelectorNode, int]] = []

    def walk(n: Node) -> None:
        if isinstance(n, SelectorNode):
            found.append((n, 0))
        elif isinstance(n, MatrixNode):
            found.append((n.selector, n.range_ms))
        elif isinstance(n, NegNode):
            walk(n.expr)
        elif isinstance(n, BinaryNode):
            walk(n.lhs)
            walk(n.rhs)
        elif isinstance(n, AggNode):
            if n.param is not None:
                walk(n.param)
            walk(n.expr)
        elif isinstance(n, CallNode):
            for arg in n.args:
                walk(arg)

    walk(node)
    return found


def string_literal(node: Node) -> str:
    """The value of a string argument: always a literal, PromQL has no other string expression."""
    assert isinstance(node, StringNode)
    return node.value


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _convert(expr: object) -> Node:
    if isinstance(expr, pp.ParenExpr):
        return _convert(expr.expr)
    if isinstance(expr, pp.NumberLiteral):
        return NumberNode(float(expr.val))
    if isinstance(expr, pp.StringLiteral):
        return StringNode(expr.val)
    if isinstance(expr, pp.VectorSelector):
        return _selector(expr)
    if isinstance(expr, pp.MatrixSelector):
        return MatrixNode(_selector(expr.vector_selector), _ms(expr.range.total_seconds()))
    if isinstance(expr, pp.SubqueryExpr):
        raise unsupported("subquery")
    if isinstance(expr, pp.UnaryExpr):
        inner = _convert(expr.expr)
        return NegNode(inner, inner.value_type)
    if isinstance(expr, pp.BinaryExpr):
        return _binary(expr)
    if isinstance(expr, pp.AggregateExpr):
        return _aggregate(expr)
    if isinstance(expr, pp.Call):
        return _call(expr)
    raise unsupported(f"expression {type(expr).__name__}")


def _selector(vs: pp.VectorSelector) -> SelectorNode:
    if vs.at is not None:
        raise unsupported("@ modifier")
    if vs.matchers.or_matchers:
        raise unsupported("'or' in label matchers")
    offset_ms = _ms(vs.offset.total_seconds()) if vs.offset is not None else 0
    return SelectorNode(selector_matchers(vs), offset_ms)


def selector_matchers(vs: pp.VectorSelector) -> tuple[Matcher, ...]:
    """The matchers of a selector, its metric name included; raise :class:`QueryError` if bad."""
    matchers: list[Matcher] = []
    if vs.name is not None:
        matchers.append(Matcher.of("__name__", "=", vs.name))
    for m in vs.matchers.matchers:
        op = _match_op(m.op)
        try:
            matchers.append(Matcher.of(m.name, op, m.value))
        except re.error as exc:
            raise QueryError("bad_data", f"invalid regular expression {m.value!r}: {exc}") from None
    return tuple(matchers)


def _binary(expr: pp.BinaryExpr) -> BinaryNode:
    op = str(expr.op).strip()
    if op not in ARITHMETIC | COMPARISON | SET_OPERATORS:
        raise unsupported(f"operator {op}")
    lhs, rhs = _convert(expr.lhs), _convert(expr.rhs)
    value_type: ValueType = "vector" if "vector" in (lhs.value_type, rhs.value_type) else "scalar"
    card: Card = "many-to-many" if op in SET_OPERATORS else "one-to-one"
    on = False
    matching: frozenset[str] = frozenset()
    include: tuple[str, ...] = ()
    return_bool = False
    mod = expr.modifier
    if mod is not None:
        fill = mod.fill_values
        if fill is not None and (fill.lhs is not None or fill.rhs is not None):
            raise unsupported("fill modifiers")
        return_bool = bool(mod.return_bool)
        if mod.card == pp.VectorMatchCardinality.ManyToOne:
            card = "many-to-one"
        elif mod.card == pp.VectorMatchCardinality.OneToMany:
            card = "one-to-many"
        if mod.matching is not None:
            on = mod.matching.type == pp.LabelModifierType.Include
            matching = frozenset(mod.matching.labels)
        include = tuple(mod.group_labels or ())
    return BinaryNode(op, lhs, rhs, return_bool, card, on, matching, include, value_type)


def _aggregate(expr: pp.AggregateExpr) -> AggNode:
    op = str(expr.op).strip()
    if op not in AGGREGATIONS:
        raise unsupported(f"aggregation {op}")
    param = _convert(expr.param) if expr.param is not None else None
    inner = _convert(expr.expr)
    without = False
    grouping: tuple[str, ...] = ()
    if expr.modifier is not None:
        without = expr.modifier.type == pp.AggModifierType.Without
        grouping = tuple(sorted(set(expr.modifier.labels)))
    return AggNode(op, inner, param, without, grouping)


def _call(expr: pp.Call) -> CallNode:
    name = expr.func.name
    if name in SCALAR_FUNCTIONS:
        value_type: ValueType = "scalar"
    elif name in VECTOR_FUNCTIONS or name in RANGE_FUNCTIONS:
        value_type = "vector"
    else:
        raise unsupported(f"function {name}")
    args = [_convert(a) for a in expr.args]
    regex = _label_regex(string_literal(args[4])) if name == "label_replace" else None
    return CallNode(name, args, value_type, regex)


def _label_regex(text: str) -> re.Pattern[str] | None:
    # One that does not compile fails the query where the call is first evaluated
    # (as Prometheus' funcLabelReplace), so errors met before it there still win.
    try:
        return re.compile(f"(?:{text})")
    except Exception:  # re.error, and OverflowError or RecursionError on extreme patterns
        return None
