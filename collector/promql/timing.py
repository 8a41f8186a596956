"""When each part of a query is evaluated: steps, subquery steps, and the times selectors look at.

Reading (:mod:`.select`) and evaluating (:mod:`.evaluate`) must agree on
these to the millisecond, so both ask this module. Times are integer
milliseconds, as in Prometheus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from .arrays import IntArray
from .plan import At, CallNode, MatrixNode, Node, SelectorNode, SubqueryNode

RefMode = Literal["plain", "drift"]
"""How an ``@`` selector's reference time is found (see :func:`ref_mode`)."""


@dataclass(frozen=True, slots=True)
class QueryTimes:
    """The query's own start and end (``@ start()``, ``@ end()``), milliseconds."""

    start_ms: int
    end_ms: int

    def at(self, at: At) -> int:
        """The time an ``@`` modifier names."""
        if at.kind == "start":
            return self.start_ms
        if at.kind == "end":
            return self.end_ms
        return at.ms


def steps(start_ms: int, end_ms: int, step_ms: int) -> IntArray:
    """The evaluation times of a query: ``start``, ``start + step``, ... up to ``end``."""
    return np.arange(start_ms, end_ms + 1, step_ms, dtype=np.int64)


def anchored(at_steps: IntArray, at: int | None, mode: RefMode) -> IntArray:
    """The evaluation times a node with an ``@`` time ``at`` sees instead of ``at_steps``.

    Usually every step is ``at``; under ``predict_linear`` (mode ``drift``) the
    steps keep their spacing from ``at`` on, as Prometheus 2.42 evaluates them.
    """
    if at is None:
        return at_steps
    if mode == "drift" and at_steps.size:
        return at_steps - (int(at_steps[0]) - at)
    return np.full(at_steps.shape, at, dtype=np.int64)


def ref_mode(parent: Node | None, child: Node) -> RefMode:
    """How ``child``'s ``@`` time becomes its reference time under ``parent`` (Prometheus 2.x).

    ``predict_linear(x[r] @ t, ...)``, the one function with a range argument
    that is not step invariant, slides with the steps from ``t - o`` at the
    first step (see :func:`anchored`).
    """
    drifts = isinstance(parent, CallNode) and parent.name == "predict_linear"
    return "drift" if drifts and isinstance(child, MatrixNode | SubqueryNode) else "plain"


def refs(
    selector: SelectorNode, at_steps: IntArray, times: QueryTimes, mode: RefMode = "plain"
) -> IntArray:
    """The time a selector looks back from at each step: the step less the offset, or ``@``'s."""
    at = None if selector.at is None else times.at(selector.at)
    return anchored(at_steps, at, mode) - selector.offset_ms


def subquery_steps(
    node: SubqueryNode, outer: IntArray, times: QueryTimes, mode: RefMode = "plain"
) -> IntArray:
    """Where a subquery's expression is evaluated for outer steps ``outer``.

    Prometheus evaluates it once for all of them: from the first multiple of
    the step at or after ``first outer step - offset - range`` to ``last outer
    step - offset`` (the outer steps as :func:`anchored` sees them).
    """
    at = None if node.at is None else times.at(node.at)
    seen = anchored(outer, at, mode)
    if not seen.size:
        return seen
    low = int(seen[0]) - node.offset_ms - node.range_ms
    aligned = -(-low // node.step_ms) * node.step_ms
    return np.arange(aligned, int(seen[-1]) - node.offset_ms + 1, node.step_ms, dtype=np.int64)


def subquery_refs(
    node: SubqueryNode, outer: IntArray, times: QueryTimes, mode: RefMode = "plain"
) -> IntArray:
    """The end of a subquery's window at each outer step."""
    at = None if node.at is None else times.at(node.at)
    return anchored(outer, at, mode) - node.offset_ms
