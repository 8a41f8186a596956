"""The ``@`` variants of an instant eval, as ``atModifierTestCases`` of Prometheus 2.42's test.go.

What test.go does (v2.42.0, read there, written here anew): every vector
selector, range selector and subquery that is not inside a subquery, and has
no ``@ <time>`` of its own, gets ``@ <eval time>`` (``@ start()`` / ``@ end()``
are replaced, as its printer prints the time over them); what lies inside a
subquery is left alone, and so are its calls. If a call outside every subquery
is to one of ``AtModifierUnsafeFunctions`` (a result that changes with the
evaluation time, or uses its argument's timestamps), there are no variants.
Otherwise the rewritten expression is evaluated at ``-10t, 0, t/5, t, 10t``
(``-1s, 0, 1s`` where ``t`` is 0) and must give the same expected result.

test.go re-parses Go's printing of the rewritten tree; this module prints
promql-parser's tree itself, because promql-parser's own printing loses what
it must keep (``x[5m:]`` comes out as the range selector ``x[5m]``, string
escapes come out unescaped): parentheses around every operand, durations in
milliseconds, strings JSON-quoted (Go's escapes are a superset of JSON's).
"""

from __future__ import annotations

import json
import math
import re
from datetime import timedelta

import promql_parser as pp

AT_UNSAFE_FUNCTIONS = frozenset(
    {"days_in_month", "day_of_month", "day_of_week", "day_of_year", "hour", "minute"}
    | {"month", "year", "predict_linear", "time", "timestamp"}
)
"""Prometheus 2.42's ``AtModifierUnsafeFunctions`` (promql/functions.go)."""

# promql-parser knows Prometheus 2.x's holt_winters by its later name (as collector.promql.plan)
_HOLT_WINTERS = re.compile(r"\bholt_winters(?=\s*\()")
_RENAMED = "double_exponential_smoothing"

_MATCH_OPS = (
    (pp.MatchOp.Equal, "="),
    (pp.MatchOp.NotEqual, "!="),
    (pp.MatchOp.Re, "=~"),
    (pp.MatchOp.NotRe, "!~"),
)


def at_variants(expr: str, time_ms: int) -> list[tuple[str, int]]:
    """The ``(expression, evaluation time in ms)`` pairs test.go adds to an eval at ``time_ms``."""
    printer = _Printer(time_ms)
    text = printer.expr(pp.parse(_HOLT_WINTERS.sub(_RENAMED, expr)), inside_subquery=False)
    if printer.unsafe:
        return []
    times = (
        [-1000, 0, 1000]
        if time_ms == 0
        else [-10 * time_ms, 0, time_ms // 5, time_ms, 10 * time_ms]
    )
    return [(text, t) for t in times]


def _match_op(op: pp.MatchOp) -> str:
    return next(text for known, text in _MATCH_OPS if op == known)


def _duration(delta: timedelta) -> str:
    return f"{round(delta.total_seconds() * 1000)}ms"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return repr(value)


def _string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


class _Printer:
    """Prints a tree back to PromQL, ``@ at_ms`` set where test.go sets it."""

    def __init__(self, at_ms: int) -> None:
        self.at_ms = at_ms
        self.unsafe = False

    def expr(self, node: object, inside_subquery: bool) -> str:
        """``node`` as PromQL text; ``inside_subquery``: below a subquery, left as it is."""
        inner = inside_subquery
        if isinstance(node, pp.NumberLiteral):
            return _number(node.val)
        if isinstance(node, pp.StringLiteral):
            return _string(node.val)
        if isinstance(node, pp.ParenExpr):
            return f"({self.expr(node.expr, inner)})"
        if isinstance(node, pp.UnaryExpr):
            return f"-({self.expr(node.expr, inner)})"
        if isinstance(node, pp.VectorSelector):
            return self._selector(node, "", inner)
        if isinstance(node, pp.MatrixSelector):
            return self._selector(node.vector_selector, f"[{_duration(node.range)}]", inner)
        if isinstance(node, pp.SubqueryExpr):
            step = "" if node.step is None else _duration(node.step)
            assert node.range is not None
            body = f"({self.expr(node.expr, True)})[{_duration(node.range)}:{step}]"
            return body + self._modifiers(node.at, node.offset, inner)
        if isinstance(node, pp.BinaryExpr):
            return self._binary(node, inner)
        if isinstance(node, pp.AggregateExpr):
            return self._aggregate(node, inner)
        if isinstance(node, pp.Call):
            name = node.func.name
            if not inner and name in AT_UNSAFE_FUNCTIONS:
                self.unsafe = True
            args = ", ".join(self.expr(arg, inner) for arg in node.args)
            return f"{'holt_winters' if name == _RENAMED else name}({args})"
        raise TypeError(f"cannot print {type(node).__name__}")

    def _selector(self, vs: pp.VectorSelector, suffix: str, inside_subquery: bool) -> str:
        matchers = [
            f"{m.name}{_match_op(m.op)}{_string(m.value)}"
            for m in vs.matchers.matchers
            if not (m.name == "__name__" and m.op == pp.MatchOp.Equal and m.value == vs.name)
        ]
        text = f"{vs.name or ''}{{{','.join(matchers)}}}{suffix}"
        return text + self._modifiers(vs.at, vs.offset, inside_subquery)

    def _modifiers(
        self, at: pp.AtModifier | None, offset: timedelta | None, inside_subquery: bool
    ) -> str:
        """`` @ ...`` and `` offset ...``: ``@`` the eval time unless there is a time already."""
        text = ""
        if at is not None and at.type == pp.AtModifierType.At:
            assert at.at is not None
            text = f" @ {at.at.timestamp():.3f}"
        elif not inside_subquery:
            text = f" @ {self.at_ms / 1000:.3f}"
        elif at is not None:
            text = " @ start()" if at.type == pp.AtModifierType.Start else " @ end()"
        if offset:
            text += f" offset {_duration(offset)}"
        return text

    def _binary(self, node: pp.BinaryExpr, inner: bool) -> str:
        op = str(node.op).strip()
        lhs, rhs = self.expr(node.lhs, inner), self.expr(node.rhs, inner)
        mod = node.modifier
        words = []
        if mod is not None:
            if mod.return_bool:
                words.append("bool")
            if mod.matching is not None:
                on = mod.matching.type == pp.LabelModifierType.Include
                words.append(f"{'on' if on else 'ignoring'}({', '.join(mod.matching.labels)})")
            group = ", ".join(mod.group_labels or ())
            if mod.card == pp.VectorMatchCardinality.ManyToOne:
                words.append(f"group_left({group})")
            elif mod.card == pp.VectorMatchCardinality.OneToMany:
                words.append(f"group_right({group})")
        return f"({lhs}) {' '.join([op, *words])} ({rhs})"

    def _aggregate(self, node: pp.AggregateExpr, inner: bool) -> str:
        op = str(node.op).strip()
        grouping = ""
        if node.modifier is not None:
            word = "without" if node.modifier.type == pp.AggModifierType.Without else "by"
            grouping = f" {word} ({', '.join(node.modifier.labels)})"
        args = [self.expr(node.expr, inner)]
        if node.param is not None:
            args.insert(0, self.expr(node.param, inner))
        return f"{op}{grouping} ({', '.join(args)})"
