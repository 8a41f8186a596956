"""Binary operators for one step: scalar/scalar, vector/scalar and vector/vector matching."""

from __future__ import annotations

from .floats import go_div, go_mod, go_pow
from .plan import ARITHMETIC, COMPARISON, BinaryNode
from .values import (
    METRIC_NAME,
    Labels,
    QueryError,
    StepVector,
    drop_name,
    grouping_labels,
    labels_str,
)


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
            got = self._sigs[labels] = grouping_labels(labels, self.node.matching, self.node.on)
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
    one_side = _one_side(m, rhs, "left" if swapped else "right")
    matched: dict[Labels, set[Labels] | None] = {}
    out: StepVector = []
    for labels, v in lhs:
        sig = m.signature(labels)
        found = one_side.get(sig)
        if found is None:
            continue
        r_labels, r_value = found
        value = _element(node, r_value, v) if swapped else _element(node, v, r_value)
        if value is None:
            continue
        result = m.result_labels(labels, r_labels)
        if node.return_bool:
            result = drop_name(result)
        _check_match(node, matched, sig, result)
        out.append((result, value))
    return out


def _one_side(m: Matching, vec: StepVector, side: str) -> dict[Labels, tuple[Labels, float]]:
    """The "one" side's elements by signature; two with the same one fail the query."""
    by_sig: dict[Labels, tuple[Labels, float]] = {}
    for labels, v in vec:
        sig = m.signature(labels)
        dup = by_sig.get(sig)
        if dup is not None:
            raise QueryError(
                "execution",
                f"found duplicate series for the match group {labels_str(sig)} "
                f"on the {side} hand-side of the operation: [{labels_str(labels)}, {labels_str(dup[0])}]"
                ";many-to-many matching not allowed: matching labels must be unique on one side",
            )
        by_sig[sig] = (labels, v)
    return by_sig


def _element(node: BinaryNode, vl: float, vr: float) -> float | None:
    """One matched pair's value, or None when a comparison without ``bool`` drops it."""
    if node.op in COMPARISON:
        keep = compare(node.op, vl, vr)
        value = vl
    else:
        keep = True
        value = arithmetic(node.op, vl, vr)
    if node.return_bool:
        return 1.0 if keep else 0.0
    return value if keep else None


def _check_match(
    node: BinaryNode, matched: dict[Labels, set[Labels] | None], sig: Labels, result: Labels
) -> None:
    """Record a match; a signature matched twice (one-to-one) or a repeated result fails."""
    if node.card == "one-to-one":
        if sig in matched:
            raise QueryError(
                "execution",
                "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)",
            )
        matched[sig] = None
        return
    inserted = matched.get(sig)
    if inserted is None:
        inserted = matched[sig] = set()
    elif result in inserted:
        raise QueryError(
            "execution",
            "multiple matches for labels: grouping labels must ensure unique matches",
        )
    inserted.add(result)


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
