"""Binary operators for one step: scalar/scalar, vector/scalar and vector/vector matching."""

from __future__ import annotations

from .plan import ARITHMETIC, COMPARISON, BinaryNode
from .values import (
    METRIC_NAME,
    Labels,
    QueryError,
    drop_name,
    go_div,
    go_mod,
    go_pow,
    labels_str,
)

StepVector = list[tuple[Labels, float]]


def arithmetic(op: str, a: float, b: float) -> float:
    """``a op b`` for an arithmetic operator."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return go_div(a, b)
    if op == "%":
        return go_mod(a, b)
    return go_pow(a, b)


def compare(op: str, a: float, b: float) -> bool:
    """``a op b`` for a comparison operator."""
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == ">":
        return a > b
    if op == "<":
        return a < b
    if op == ">=":
        return a >= b
    return a <= b


def scalar_binop(op: str, a: float, b: float) -> float:
    """Two scalars (comparisons always carry ``bool`` here; the parser insists)."""
    if op in COMPARISON:
        return 1.0 if compare(op, a, b) else 0.0
    return arithmetic(op, a, b)


def vector_scalar(node: BinaryNode, vec: StepVector, scalar: float, swap: bool) -> StepVector:
    """A vector and a scalar; ``swap`` when the scalar is on the left."""
    op = node.op
    out: StepVector = []
    if op in COMPARISON:
        for labels, v in vec:
            keep = compare(op, scalar, v) if swap else compare(op, v, scalar)
            if node.return_bool:
                out.append((drop_name(labels), 1.0 if keep else 0.0))
            elif keep:
                out.append((labels, v))
        return out
    for labels, v in vec:
        value = arithmetic(op, scalar, v) if swap else arithmetic(op, v, scalar)
        out.append((drop_name(labels), value))
    return out


class Matching:
    """Per-node caches for vector matching: signatures and result label sets."""

    def __init__(self, node: BinaryNode) -> None:
        self.node = node
        self._sigs: dict[Labels, Labels] = {}
        self._results: dict[tuple[Labels, Labels], Labels] = {}

    def signature(self, labels: Labels) -> Labels:
        """The labels two sides are matched on (``on``) or all but the ignored ones."""
        got = self._sigs.get(labels)
        if got is None:
            names = self.node.matching
            if self.node.on:
                got = tuple(p for p in labels if p[0] in names)
            else:
                got = tuple(p for p in labels if p[0] not in names and p[0] != METRIC_NAME)
            self._sigs[labels] = got
        return got

    def result_labels(self, lhs: Labels, rhs: Labels) -> Labels:
        """Prometheus' ``resultMetric``: the output labels of a matched pair (``rhs`` = one side)."""
        key = (lhs, rhs)
        got = self._results.get(key)
        if got is not None:
            return got
        node = self.node
        result = dict(lhs)
        if node.op in ARITHMETIC:
            result.pop(METRIC_NAME, None)
        if node.card == "one-to-one":
            if node.on:
                result = {k: v for k, v in result.items() if k in node.matching}
            else:
                for name in node.matching:
                    result.pop(name, None)
        if node.include:
            one = dict(rhs)
            for name in node.include:
                value = one.get(name, "")
                if value:
                    result[name] = value
                else:
                    result.pop(name, None)
        got = tuple(sorted(result.items()))
        self._results[key] = got
        return got


def vector_vector(m: Matching, lhs: StepVector, rhs: StepVector) -> StepVector:
    """Arithmetic or comparison between two vectors with one-to-one or many-to-one matching."""
    node = m.node
    if not lhs or not rhs:
        return []
    swapped = node.card == "one-to-many"
    if swapped:
        lhs, rhs = rhs, lhs
    one_side: dict[Labels, tuple[Labels, float]] = {}
    for labels, v in rhs:
        sig = m.signature(labels)
        dup = one_side.get(sig)
        if dup is not None:
            side = "left" if swapped else "right"
            raise QueryError(
                "execution",
                f"found duplicate series for the match group {labels_str(_match_labels(node, labels))} "
                f"on the {side} hand-side of the operation: [{labels_str(labels)}, {labels_str(dup[0])}]"
                ";many-to-many matching not allowed: matching labels must be unique on one side",
            )
        one_side[sig] = (labels, v)

    op = node.op
    is_comparison = op in COMPARISON
    matched: dict[Labels, set[Labels] | None] = {}
    out: StepVector = []
    for labels, v in lhs:
        sig = m.signature(labels)
        found = one_side.get(sig)
        if found is None:
            continue
        r_labels, r_value = found
        vl, vr = (r_value, v) if swapped else (v, r_value)
        if is_comparison:
            keep = compare(op, vl, vr)
            value = vl
        else:
            keep = True
            value = arithmetic(op, vl, vr)
        if node.return_bool:
            value = 1.0 if keep else 0.0
        elif not keep:
            continue
        result = m.result_labels(labels, r_labels)
        if node.return_bool:
            result = drop_name(result)
        if node.card == "one-to-one":
            if sig in matched:
                raise QueryError(
                    "execution",
                    "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)",
                )
            matched[sig] = None
        else:
            inserted = matched.get(sig)
            if inserted is None:
                inserted = set()
                matched[sig] = inserted
            elif result in inserted:
                raise QueryError(
                    "execution",
                    "multiple matches for labels: grouping labels must ensure unique matches",
                )
            inserted.add(result)
        out.append((result, value))
    return out


def _match_labels(node: BinaryNode, labels: Labels) -> Labels:
    if node.on:
        return tuple(p for p in labels if p[0] in node.matching)
    return tuple(p for p in labels if p[0] not in node.matching and p[0] != METRIC_NAME)


def set_operation(m: Matching, lhs: StepVector, rhs: StepVector) -> StepVector:
    """``and``, ``or``, ``unless``."""
    op = m.node.op
    if op == "and":
        if not lhs or not rhs:
            return []
        right = {m.signature(labels) for labels, _ in rhs}
        return [(labels, v) for labels, v in lhs if m.signature(labels) in right]
    if op == "or":
        if not lhs:
            return list(rhs)
        if not rhs:
            return list(lhs)
        left = {m.signature(labels) for labels, _ in lhs}
        return list(lhs) + [(labels, v) for labels, v in rhs if m.signature(labels) not in left]
    # unless
    if not lhs or not rhs:
        return list(lhs)
    right = {m.signature(labels) for labels, _ in rhs}
    return [(labels, v) for labels, v in lhs if m.signature(labels) not in right]
