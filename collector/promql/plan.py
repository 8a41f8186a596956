"""The parsed query as the evaluator's own small tree, checked against the supported subset.

promql-parser does the parsing and type checking (Prometheus' grammar); this
module turns its AST into plain dataclasses, drops parentheses, and refuses
every feature outside the subset *before* any data is read, so an unsupported
query fails with an ``execution`` error naming the feature, never a wrong answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

import promql_parser as pp

from collector.tsdb.regex import Regex, RegexError, escape, matcher_regex, replace_regex
from collector.tsdb.series import Matcher, Op

from .limits import check_depth
from .values import QueryError, unsupported

ValueType = Literal["scalar", "vector", "matrix", "string"]

AGGREGATIONS = frozenset(
    {"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar"}
    | {"topk", "bottomk", "quantile", "count_values"}
)

MATH_FUNCTIONS = frozenset(
    {"abs", "ceil", "floor", "exp", "ln", "log2", "log10", "sqrt", "sgn"}
    | {"acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "sin", "sinh"}
    | {"tan", "tanh", "deg", "rad"}
)
DATE_FUNCTIONS = frozenset(
    {"day_of_month", "day_of_week", "day_of_year", "days_in_month"}
    | {"hour", "minute", "month", "year"}
)
VECTOR_FUNCTIONS = (
    MATH_FUNCTIONS
    | DATE_FUNCTIONS
    | {
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
        "histogram_quantile",
    }
)
RANGE_FUNCTIONS = frozenset(
    {"rate", "increase", "delta", "irate", "idelta", "changes", "resets"}
    | {"deriv", "predict_linear", "holt_winters"}
    | {"avg_over_time", "min_over_time", "max_over_time", "sum_over_time", "count_over_time"}
    | {"last_over_time", "quantile_over_time", "stddev_over_time", "stdvar_over_time"}
    | {"present_over_time", "absent_over_time"}
)
SCALAR_FUNCTIONS = frozenset({"time", "scalar", "pi"})
NATIVE_HISTOGRAM_FUNCTIONS = frozenset({"histogram_count", "histogram_sum", "histogram_fraction"})
"""Prometheus 2.42's functions of native histograms, which this storage never holds: refused."""

ARITHMETIC = frozenset({"+", "-", "*", "/", "%", "^", "atan2"})
DROPS_NAME = ARITHMETIC - {"atan2"}
"""The operators whose result loses the metric name (Prometheus' ``shouldDropMetricName``)."""
COMPARISON = frozenset({"==", "!=", ">", "<", ">=", "<="})
SET_OPERATORS = frozenset({"and", "or", "unless"})

DEFAULT_SUBQUERY_STEP_MS = 60_000
"""A subquery without a step uses Prometheus' default global evaluation interval, one minute."""

# Prometheus 2.x's holt_winters is promql-parser's (newer Prometheus')
# double_exponential_smoothing: same arguments, same arithmetic.
_HOLT_WINTERS = "holt_winters"
_RENAMED_HOLT_WINTERS = "double_exponential_smoothing"

Card = Literal["one-to-one", "many-to-one", "one-to-many", "many-to-many"]


@dataclass(frozen=True, slots=True)
class At:
    """An ``@`` modifier: a fixed time (milliseconds), or the query's ``start()`` / ``end()``."""

    kind: Literal["time", "start", "end"]
    ms: int = 0


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
    at: At | None = None
    value_type: ValueType = "vector"
    written: int | None = None
    """How many of ``matchers`` the query wrote, where :func:`restrict` added the tenant's
    after them (None: all)."""

    @property
    def own_matchers(self) -> tuple[Matcher, ...]:
        """The matchers the query itself wrote."""
        return self.matchers if self.written is None else self.matchers[: self.written]


@dataclass(eq=False, slots=True)
class MatrixNode:
    """A range vector selector ``sel[range]``."""

    selector: SelectorNode
    range_ms: int
    value_type: ValueType = "matrix"


@dataclass(eq=False, slots=True)
class SubqueryNode:
    """A subquery ``expr[range:step]``: ``expr`` at its own aligned steps, as a range vector."""

    expr: Node
    range_ms: int
    step_ms: int
    offset_ms: int
    at: At | None = None
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
    regex: Regex | None = None


Node = (
    NumberNode
    | StringNode
    | SelectorNode
    | MatrixNode
    | SubqueryNode
    | NegNode
    | BinaryNode
    | AggNode
    | CallNode
)

_MATCH_OPS: tuple[tuple[pp.MatchOp, Op], ...] = (
    (pp.MatchOp.Equal, "="),
    (pp.MatchOp.NotEqual, "!="),
    (pp.MatchOp.Re, "=~"),
    (pp.MatchOp.NotRe, "!~"),
)


def compile_query(text: str) -> Node:
    """Parse ``text`` and return the evaluator's tree, or raise :class:`QueryError`."""
    check_depth(text)
    try:
        expr, strings = parse_promql(text)
    except Exception as exc:  # promql-parser raises ValueError; be safe about others
        message = str(exc)
    else:
        return _Converter(text, renamed=False, strings=strings).convert(expr)
    unknown = re.fullmatch(r"unknown function with name '(\w+)'", message)
    if not unknown or unknown.group(1) != _HOLT_WINTERS or _RENAMED_HOLT_WINTERS in text:
        raise QueryError("bad_data", message)
    try:
        expr, strings = parse_promql(_rename_holt_winters(text))
    except Exception as exc:
        raise QueryError(
            "bad_data", str(exc).replace(_RENAMED_HOLT_WINTERS, _HOLT_WINTERS)
        ) from None
    return _Converter(text, renamed=True, strings=strings).convert(expr)


_STRING = r"""("(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)"""
_STRINGS = re.compile(rf"([=!]~\s*)?{_STRING}|#[^\n]*")
"""A string literal, with the operator before it if it is a matcher's regex; comments are
found whole only so that no quote inside one is read."""

_REFUSED_STRINGS = ("illegal regex for ", "unknown escape sequence")
"""promql-parser's errors for a string Prometheus may take (see :func:`parse_promql`)."""


def parse_promql(text: str) -> tuple[pp.Expr, dict[str, str]]:
    """promql-parser's tree of ``text``, and the strings it holds in place of the query's own.

    promql-parser checks each matcher's regex with Rust's ``regex`` crate, another syntax
    than Go's: it refuses ``\\Q…\\E``, octal escapes, ``\\p{^Greek}`` and ``\\pL{1000}``,
    which Prometheus takes. It also refuses a backslash in a raw string that is no string
    escape (`` `\\d+` ``), where Go's raw strings have no escapes. When it refuses either,
    the query is parsed again with every string literal but the empty ones replaced by a
    placeholder (``"_0"``, ``"_1"`` …, valid as a regex and as a label name): the dict
    maps each placeholder to its literal's value (unquoted by promql-parser, or a raw
    string's text as it is), which :func:`selector_matchers` and the plan read instead.
    Raise ValueError as promql-parser does.
    """
    try:
        return pp.parse(text), {}
    except ValueError as exc:
        if not str(exc).startswith(_REFUSED_STRINGS):
            raise
    strings: dict[str, str] = {}

    def placeholder(found: re.Match[str]) -> str:
        op, token = found.group(1) or "", found.group(2)
        if token is None:  # a comment
            return found.group()
        value = token[1:-1] if token.startswith("`") else _unquoted(token)
        if not value:
            return found.group()
        key = f"_{len(strings)}"
        if op and _takes_empty(op.startswith("!"), value):
            key += "|"
        strings[key] = value
        return f'{op}"{key}"'

    return pp.parse(_STRINGS.sub(placeholder, text)), strings


def _takes_empty(negated: bool, regex: str) -> bool:
    """Whether a matcher regex's placeholder should match the empty string.

    promql-parser refuses a selector whose matchers all match the empty string: as the
    regex does, so that it finds what Go finds (:func:`selector_matchers` checks the
    missed case again); for a regex that does not compile, so that the matcher does not
    and the regex's own error comes first, as in Go.
    """
    try:
        return matcher_regex(regex).fullmatch("")
    except RegexError:
        return negated


def _unquoted(literal: str) -> str:
    """The value of a quoted string literal, as promql-parser reads it (ValueError if bad)."""
    value = pp.parse(literal)
    assert isinstance(value, pp.StringLiteral)
    return value.val


def _rename_holt_winters(text: str) -> str:
    """``text`` with every call of holt_winters (outside string literals) renamed for the parser."""
    token = re.compile(rf"{_STRING}|\bholt_winters(?=\s*\()")
    return token.sub(lambda m: m.group(1) or _RENAMED_HOLT_WINTERS, text)


def children(node: Node) -> Iterator[Node]:
    """The direct sub-expressions of ``node``, in evaluation order."""
    if isinstance(node, MatrixNode):
        yield node.selector
    elif isinstance(node, SubqueryNode | NegNode):
        yield node.expr
    elif isinstance(node, BinaryNode):
        yield node.lhs
        yield node.rhs
    elif isinstance(node, AggNode):
        if node.param is not None:
            yield node.param
        yield node.expr
    elif isinstance(node, CallNode):
        yield from node.args


def string_literal(node: Node) -> str:
    """The value of a string argument: always a literal, PromQL has no other string expression."""
    assert isinstance(node, StringNode)
    return node.value


def selector_matchers(
    vs: pp.VectorSelector, strings: Mapping[str, str] | None = None
) -> tuple[Matcher, ...]:
    """The matchers of a selector, its metric name included; raise :class:`QueryError` if bad
    (a regex Prometheus 2.42 rejects is a parse error, ``bad_data``, as there).

    ``strings``: the placeholders of :func:`parse_promql`, each with its value.
    """
    matchers: list[Matcher] = []
    if vs.name is not None:
        matchers.append(Matcher.of("__name__", "=", vs.name))
    for m in vs.matchers.matchers:
        op = _match_op(m.op)
        value = strings.get(m.value, m.value) if strings else m.value
        try:
            matchers.append(Matcher.of(m.name, op, value))
        except RegexError as exc:
            raise QueryError("bad_data", f"parse error: {exc}") from None
    if vs.name is None and all(m.matches({}) for m in matchers):
        # promql-parser checks this too, but on placeholders where it was given some.
        raise QueryError(
            "bad_data", "parse error: vector selector must contain at least one non-empty matcher"
        )
    return tuple(matchers)


def _match_op(op: pp.MatchOp) -> Op:
    for known, ours in _MATCH_OPS:
        if op == known:
            return ours
    raise unsupported(f"label matcher {op}")


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _offset_ms(offset: object) -> int:
    return 0 if offset is None else _ms(offset.total_seconds())  # type: ignore[attr-defined]


class _Converter:
    """promql-parser's AST to the plan; ``renamed`` when holt_winters was renamed for the parser."""

    def __init__(self, text: str, renamed: bool, strings: Mapping[str, str]) -> None:
        self.text = text
        self.renamed = renamed
        self.strings = strings

    def convert(self, expr: object) -> Node:
        if isinstance(expr, pp.ParenExpr):
            return self.convert(expr.expr)
        if isinstance(expr, pp.NumberLiteral):
            return NumberNode(float(expr.val))
        if isinstance(expr, pp.StringLiteral):
            return StringNode(self.strings.get(expr.val, expr.val))
        if isinstance(expr, pp.VectorSelector):
            return self._selector(expr)
        if isinstance(expr, pp.MatrixSelector):
            selector = self._selector(expr.vector_selector)
            return MatrixNode(selector, _ms(expr.range.total_seconds()))
        if isinstance(expr, pp.SubqueryExpr):
            return self._subquery(expr)
        if isinstance(expr, pp.UnaryExpr):
            inner = self.convert(expr.expr)
            return NegNode(inner, inner.value_type)
        if isinstance(expr, pp.BinaryExpr):
            return self._binary(expr)
        if isinstance(expr, pp.AggregateExpr):
            return self._aggregate(expr)
        if isinstance(expr, pp.Call):
            return self._call(expr)
        raise unsupported(f"expression {type(expr).__name__}")

    def _subquery(self, expr: pp.SubqueryExpr) -> SubqueryNode:
        step = _ms(expr.step.total_seconds()) if expr.step is not None else 0
        assert expr.range is not None  # the grammar requires it
        return SubqueryNode(
            self.convert(expr.expr),
            _ms(expr.range.total_seconds()),
            step or DEFAULT_SUBQUERY_STEP_MS,
            _offset_ms(expr.offset),
            self._at(expr.at),
        )

    def _selector(self, vs: pp.VectorSelector) -> SelectorNode:
        if vs.matchers.or_matchers:
            raise unsupported("'or' in label matchers")
        return SelectorNode(
            selector_matchers(vs, self.strings), _offset_ms(vs.offset), self._at(vs.at)
        )

    def _at(self, modifier: pp.AtModifier | None) -> At | None:
        """The ``@`` modifier, read from its text (promql-parser renders it with milliseconds)."""
        if modifier is None:
            return None
        if modifier.type == pp.AtModifierType.Start:
            return At("start")
        if modifier.type == pp.AtModifierType.End:
            return At("end")
        ms = _ms(float(str(modifier).removeprefix("@").strip()))
        if ms == 0 and re.search(r"@\s*-", self.text):
            # promql-parser renders a time before 1970 as 0 (and fails reading it).
            raise unsupported("@ modifier before 1970")
        return At("time", ms)

    def _binary(self, expr: pp.BinaryExpr) -> BinaryNode:
        op = str(expr.op).strip()
        if op not in ARITHMETIC | COMPARISON | SET_OPERATORS:
            raise unsupported(f"operator {op}")
        lhs, rhs = self.convert(expr.lhs), self.convert(expr.rhs)
        vector = "vector" in (lhs.value_type, rhs.value_type)
        value_type: ValueType = "vector" if vector else "scalar"
        card: Card = "many-to-many" if op in SET_OPERATORS else "one-to-one"
        on, matching, include, return_bool = False, frozenset[str](), tuple[str, ...](), False
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

    def _aggregate(self, expr: pp.AggregateExpr) -> AggNode:
        op = str(expr.op).strip()
        if op not in AGGREGATIONS:
            raise unsupported(f"aggregation {op}")
        param = self.convert(expr.param) if expr.param is not None else None
        inner = self.convert(expr.expr)
        without = False
        grouping: tuple[str, ...] = ()
        if expr.modifier is not None:
            without = expr.modifier.type == pp.AggModifierType.Without
            grouping = tuple(sorted(set(expr.modifier.labels)))
        return AggNode(op, inner, param, without, grouping)

    def _call(self, expr: pp.Call) -> CallNode:
        name = expr.func.name
        if name == _RENAMED_HOLT_WINTERS:
            if not self.renamed:  # Prometheus 2.x has no such function
                raise QueryError("bad_data", f'unknown function with name "{name}"')
            name = _HOLT_WINTERS
        if name in SCALAR_FUNCTIONS:
            value_type: ValueType = "scalar"
        elif name in VECTOR_FUNCTIONS or name in RANGE_FUNCTIONS:
            value_type = "vector"
        elif name in NATIVE_HISTOGRAM_FUNCTIONS:
            raise unsupported(f"native histogram function {name}")
        else:
            raise unsupported(f"function {name}")
        args = [self.convert(a) for a in expr.args]
        regex = _label_regex(string_literal(args[4])) if name == "label_replace" else None
        return CallNode(name, args, value_type, regex)


def _label_regex(text: str) -> Regex | None:
    # One that does not compile fails the query where the call is first evaluated
    # (as Prometheus' funcLabelReplace), so errors met before it there still win.
    try:
        return replace_regex(text)
    except RegexError:
        return None


NAMESPACE = "namespace"
"""The label a tenant's reads are restricted by."""

NOTHING = r"[^\x00-\x{10FFFF}]"
"""A regex no value matches, the empty string included: an empty tenant's namespaces."""


def tenant_matcher(namespaces: frozenset[str]) -> Matcher:
    """``namespace=~"^(?:a|b)$"`` over ``namespaces``, each regex-escaped.

    An empty set (and the empty name, which would pass series without the
    label) matches nothing, so a tenant with no namespaces reads nothing and
    no tenant ever reads a series without a ``namespace`` label (a card's, a
    node's, the collector's own).
    """
    names = sorted(n for n in namespaces if n)
    return Matcher.of(NAMESPACE, "=~", "|".join(map(escape, names)) if names else NOTHING)


def restrict(node: Node, namespaces: frozenset[str]) -> Node:
    """``node`` with the tenant's :func:`tenant_matcher` added to every selector in it.

    prom-label-proxy's semantics, enforced in the plan before any data is read:
    instant selectors, the selectors of range selectors, those inside
    subqueries and every function's or operator's arguments, ``@`` and
    ``offset`` ones alike. The matcher is *added*, never replacing the query's
    own ``namespace`` matchers, so those only narrow the tenant's set
    (``namespace=~".*"`` widens nothing). ``absent`` of another namespace's
    series is so always 1, whether it has them or not, labelled from the
    query's own matchers as over the tenant's series alone (the added one is
    not the query's: ``absent(x{namespace="A"})`` keeps its ``namespace``): it
    tells a tenant nothing about other namespaces. Relabelling
    (``label_replace``) comes after the selection, so may name any namespace
    but only over the tenant's data. Changes the selectors of ``node`` in place
    (a tree :func:`compile_query` just made, shared with nobody) and returns it.
    """
    matcher = tenant_matcher(namespaces)
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, SelectorNode):
            current.written = len(current.matchers)
            current.matchers = (*current.matchers, matcher)
        else:
            stack.extend(children(current))
    return node
