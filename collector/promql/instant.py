"""Instant-vector functions over one step's vector, the label rewrites included.

Math, ``round``, ``clamp``, ``sort``, ``absent``, ``label_replace`` and
``label_join``. Their arguments come evaluated (the scalars) or as the plan's
literals (the strings); ``vector``, ``scalar``, ``time`` and ``timestamp`` of a
plain selector need more of the query and stay with the evaluator.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from .floats import MATH_FUNCTIONS, go_max, go_min, nan_last, round_to
from .plan import CallNode, MatrixNode, Node, SelectorNode, string_literal
from .values import LABEL_NAME, METRIC_NAME, Labels, QueryError, StepVector, drop_name


def apply(name: str, vec: StepVector, args: Sequence[float], ts: int) -> StepVector:
    """The function ``name`` over ``vec`` at ``ts``, given its scalar arguments after the vector."""
    if name in ("sort", "sort_desc"):
        descending = name == "sort_desc"
        return sorted(vec, key=lambda s: nan_last(s[1], descending))
    if name == "clamp" and args[1] < args[0]:
        return []
    fn = _value_function(name, args, ts)
    return [(drop_name(labels), fn(v)) for labels, v in vec]


def _value_function(name: str, args: Sequence[float], ts: int) -> Callable[[float], float]:
    math_fn = MATH_FUNCTIONS.get(name)
    if math_fn is not None:
        return math_fn
    if name == "timestamp":
        at = ts / 1000
        return lambda _: at
    if name == "round":
        nearest = args[0] if args else 1.0
        return lambda v: round_to(v, nearest)
    if name == "clamp":
        lo, hi = args
        return lambda v: go_max(lo, go_min(hi, v))
    if name == "clamp_min":
        (lo,) = args
        return lambda v: go_max(lo, v)
    if name == "clamp_max":
        (hi,) = args
        return lambda v: go_min(hi, v)
    raise AssertionError(f"function {name} not dispatched")


def absent(vec: StepVector, arg: Node) -> StepVector:
    """``absent(arg)``: nothing if ``vec`` has elements, else one of value 1."""
    return [] if vec else [(_absent_labels(arg), 1.0)]


def _absent_labels(arg: Node) -> Labels:
    """Prometheus' ``createLabelsForAbsentFunction``: the selector's equality matchers."""
    sel = arg.selector if isinstance(arg, MatrixNode) else arg
    if not isinstance(sel, SelectorNode):
        return ()
    result: dict[str, str] = {}
    seen: set[str] = set()
    for m in sel.matchers:
        if m.name == METRIC_NAME:
            continue
        if m.op == "=" and m.name not in seen:
            result[m.name] = m.value
            seen.add(m.name)
        else:
            result.pop(m.name, None)
    return tuple(sorted((k, v) for k, v in result.items() if v != ""))


class Relabel(ABC):
    """One ``label_replace`` or ``label_join`` call of a query, rewriting each label set once."""

    def __init__(self) -> None:
        self._cache: dict[Labels, Labels] = {}

    def __call__(self, vec: StepVector) -> StepVector:
        """``vec`` with each element's labels rewritten."""
        out: StepVector = []
        for labels, v in vec:
            result = self._cache.get(labels)
            if result is None:
                result = self._cache[labels] = self.rewrite(labels)
            out.append((result, v))
        return out

    @abstractmethod
    def rewrite(self, labels: Labels) -> Labels:
        """The new label set for ``labels``."""


def relabel(node: CallNode) -> Relabel:
    """The rewrite for a ``label_replace`` or ``label_join`` call; its arguments are checked here."""
    if node.name == "label_replace":
        return _LabelReplace(node)
    return _LabelJoin(node)


class _LabelReplace(Relabel):
    def __init__(self, node: CallNode) -> None:
        super().__init__()
        self.dst, self.repl, self.src, regex = (string_literal(a) for a in node.args[1:5])
        if not LABEL_NAME.fullmatch(self.dst):
            raise QueryError(
                "execution", f"invalid destination label name in label_replace(): {self.dst}"
            )
        if node.regex is None:
            raise QueryError("execution", f"invalid regular expression in label_replace(): {regex}")
        self.pattern = node.regex

    def rewrite(self, labels: Labels) -> Labels:
        current = dict(labels)
        match = self.pattern.fullmatch(current.get(self.src, ""))
        if match is None:
            return labels
        return _with_label(current, self.dst, expand_template(self.repl, match))


class _LabelJoin(Relabel):
    def __init__(self, node: CallNode) -> None:
        super().__init__()
        self.dst, self.sep = string_literal(node.args[1]), string_literal(node.args[2])
        self.sources = [string_literal(a) for a in node.args[3:]]
        if not LABEL_NAME.fullmatch(self.dst):
            raise QueryError(
                "execution", f"invalid destination label name in label_join(): {self.dst}"
            )
        for src in self.sources:
            if not LABEL_NAME.fullmatch(src):
                raise QueryError("execution", f"invalid source label name in label_join(): {src}")

    def rewrite(self, labels: Labels) -> Labels:
        current = dict(labels)
        joined = self.sep.join(current.get(src, "") for src in self.sources)
        return _with_label(current, self.dst, joined)


def _with_label(current: dict[str, str], name: str, value: str) -> Labels:
    """``current`` with label ``name`` set to ``value`` (removed if empty), as a label set."""
    current.pop(name, None)
    if value:
        current[name] = value
    return tuple(sorted(current.items()))


def _extract(template: str) -> tuple[str, int, str] | None:
    """Go's ``regexp.extract``: the name after a ``$``, its group number (or -1), the rest."""
    if not template:
        return None
    brace = template[0] == "{"
    body = template[1:] if brace else template
    i = 0
    while i < len(body) and (body[i].isalnum() or body[i] == "_"):
        i += 1
    if i == 0:
        return None
    name = body[:i]
    if brace:
        if i >= len(body) or body[i] != "}":
            return None
        i += 1
    num = -1
    if name.isascii() and name.isdigit() and not (name[0] == "0" and len(name) > 1):
        num = int(name) if len(name) < 9 else -1
    return name, num, body[i:]


def expand_template(template: str, match: re.Match[str]) -> str:
    """Go's ``Regexp.ExpandString``: ``$1``, ``${1}``, ``$name``, ``${name}``, ``$$``."""
    out: list[str] = []
    groups = match.re.groupindex
    while template:
        before, sep, after = template.partition("$")
        if not sep:
            break
        out.append(before)
        template = after
        if template.startswith("$"):
            out.append("$")
            template = template[1:]
            continue
        found = _extract(template)
        if found is None:
            out.append("$")
            continue
        name, num, template = found
        index = num if num >= 0 else groups.get(name, -1)
        if 0 <= index <= match.re.groups:
            out.append(match.group(index) or "")
    out.append(template)
    return "".join(out)
