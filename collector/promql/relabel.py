"""``label_replace`` and ``label_join``: rewrites of label sets, done once per distinct label set.

Their arguments are checked when the call is made, in Prometheus' order, so
the same query fails with the same message.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from .plan import CallNode, string_literal
from .values import LABEL_NAME, Labels, QueryError


class Relabel(ABC):
    """One ``label_replace`` or ``label_join`` call of a query."""

    def __call__(self, labels: list[Labels]) -> list[Labels]:
        """The rewritten label set of each row."""
        cache: dict[Labels, Labels] = {}
        out = []
        for row in labels:
            result = cache.get(row)
            if result is None:
                result = cache[row] = self.rewrite(row)
            out.append(result)
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
        self.dst, self.repl, self.src, regex = (string_literal(a) for a in node.args[1:5])
        if node.regex is None:
            raise QueryError("execution", f"invalid regular expression in label_replace(): {regex}")
        if not LABEL_NAME.fullmatch(self.dst):
            raise QueryError(
                "execution", f"invalid destination label name in label_replace(): {self.dst}"
            )
        self.pattern = node.regex

    def rewrite(self, labels: Labels) -> Labels:
        current = dict(labels)
        groups = self.pattern.search(current.get(self.src, ""))
        if groups is None:
            return labels
        return _with_label(current, self.dst, self.pattern.expand(self.repl, groups))


class _LabelJoin(Relabel):
    def __init__(self, node: CallNode) -> None:
        self.dst, self.sep = string_literal(node.args[1]), string_literal(node.args[2])
        self.sources = [string_literal(a) for a in node.args[3:]]
        for src in self.sources:
            if not LABEL_NAME.fullmatch(src):
                raise QueryError("execution", f"invalid source label name in label_join(): {src}")
        if not LABEL_NAME.fullmatch(self.dst):
            raise QueryError(
                "execution", f"invalid destination label name in label_join(): {self.dst}"
            )

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
