"""Runs a parsed engine-test script against our engine over a real :class:`History`.

What each eval checks, as ``Test.exec`` of Prometheus 2.42's promql/test.go:
the expression, then each of its ``@`` variants (:mod:`at_variants`), is run
as an instant query and compared with the expectation; unless the eval is
``eval_fail`` (an error is all it asks, and the range query is not run), it is
also run as a range query from a minute before to a minute after at a step
of a minute, which must not fail, and whose middle step must give the same
result, except for ``eval_ordered`` (a range query has no order). The
engine of test.go looks back 5 minutes and takes a subquery's default step
as one minute, as ours does by default; its cap of 10,000 samples is not set
here, as no script depends on it and ours counts samples its own way.

Values compare as test.go's ``almostEqual``: NaN equals NaN, otherwise equal
or within a relative 1e-6 (an absolute ``1e-6 * minNormal`` near zero).
Series compare by label set, ``__name__`` included, in order only for
``eval_ordered``.

The storage is our :class:`~collector.tsdb.history.History`, fed as the
collector feeds it (:meth:`History.record`, Unix seconds): each series its own
source, so a sample a series lacks (``_``) is simply not recorded rather than
marking the series stale; a ``node`` label names the series' node, as the
collector's keys leave it to the node; ``stale`` is recorded as the staleness
marker value.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from at_variants import at_variants
from script_format import Clear, Command, Eval, Labels, Load

from collector.normalise.labelsets import series_key
from collector.promql.query import prepare_instant, prepare_range
from collector.promql.values import Element, QueryError, Scalar
from collector.tsdb.history import History

MIN_NORMAL = sys.float_info.min
"""The smallest positive normal float64 (test.go's ``minNormal``)."""
EPSILON = 1e-6
"""test.go's relative error allowed between an expected and a given value."""
LOOKBACK = 300.0
RANGE_STEP_MS = 60_000


@dataclass(frozen=True, slots=True)
class Outcome:
    """One eval of a script: where it is, what it evaluates, and what went wrong (None: nothing)."""

    line: int
    expr: str
    failure: str | None


def almost_equal(a: float, b: float) -> bool:
    """test.go's ``almostEqual``."""
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    diff = abs(a - b)
    if a == 0 or b == 0 or diff < MIN_NORMAL:
        return diff < EPSILON * MIN_NORMAL
    return diff / (abs(a) + abs(b)) < EPSILON


def run_script(commands: list[Command]) -> Iterator[Outcome]:
    """Run ``commands`` in order; yield the outcome of every eval."""
    history = History()
    for cmd in commands:
        if isinstance(cmd, Clear):
            history = History()
        elif isinstance(cmd, Load):
            load(history, cmd)
        else:
            yield Outcome(cmd.line, cmd.expr, evaluate(history, cmd))


def load(history: History, cmd: Load) -> None:
    """Record ``cmd``'s samples, one source per series."""
    for labels, values in cmd.series.items():
        rest = dict(labels)
        name = rest.pop("__name__", "")
        node = rest.pop("node", "")
        key = series_key(name, rest.items())
        for k, value in enumerate(values):
            if value is not None:
                history.record(node, {key: value}, k * cmd.interval_ms / 1000, key.decode())


def evaluate(history: History, cmd: Eval) -> str | None:
    """What is wrong with ``cmd``'s answers (None: nothing), checked as test.go checks them."""
    for expr, at_ms in [(cmd.expr, cmd.time_ms), *at_variants(cmd.expr, cmd.time_ms)]:
        failure = _check(history, cmd, expr, at_ms)
        if failure is not None:
            return f"{expr} at {at_ms} ms: {failure}"
    return None


def _check(history: History, cmd: Eval, expr: str, at_ms: int) -> str | None:
    try:
        result = prepare_instant(expr, at_ms / 1000, history, LOOKBACK).run()
    except QueryError as exc:
        return None if cmd.fail else f"error: {exc.error_type}: {exc.message}"
    if cmd.fail:
        return "expected an error, got none"
    elements = [e for e in result if isinstance(e, Element)] if isinstance(result, list) else []
    if isinstance(result, Scalar):
        failure = _compare_scalar(cmd, result.value)
    elif isinstance(result, list) and len(elements) == len(result):
        failure = _compare_vector(cmd, [(_labels(e.labels), e.value) for e in elements])
    else:
        failure = f"unexpected result {result!r}"
    if failure is not None:
        return failure
    return _check_range(history, cmd, expr, at_ms, isinstance(result, Scalar))


def _check_range(history: History, cmd: Eval, expr: str, at_ms: int, scalar: bool) -> str | None:
    start, end = (at_ms - RANGE_STEP_MS) / 1000, (at_ms + RANGE_STEP_MS) / 1000
    try:
        prepared = prepare_range(expr, start, end, RANGE_STEP_MS / 1000, history, LOOKBACK)
        series = prepared.columns().series()
    except QueryError as exc:
        return f"range mode: error: {exc.error_type}: {exc.message}"
    if cmd.ordered:
        return None
    middle = [
        (_labels(s.labels), value)
        for s in series
        for t, value in s.points
        if round(t * 1000) == at_ms
    ]
    if scalar:
        if not middle:
            return "range mode: no point at the eval time"
        failure = _compare_scalar(cmd, middle[0][1])
    else:
        failure = _compare_vector(cmd, middle)
    return None if failure is None else f"range mode: {failure}"


def _labels(labels: dict[str, str]) -> Labels:
    return tuple(sorted(labels.items()))


def _compare_scalar(cmd: Eval, value: float) -> str | None:
    if cmd.scalar is None:
        return f"expected a vector, got the scalar {value}"
    if not almost_equal(cmd.scalar, value):
        return f"expected scalar {cmd.scalar}, got {value}"
    return None


def _compare_vector(cmd: Eval, got: list[tuple[Labels, float]]) -> str | None:
    """test.go's ``compareResult`` of a vector."""
    seen = set()
    for pos, (labels, value) in enumerate(got, start=1):
        if labels not in cmd.expected:
            return f"unexpected series {dict(labels)} = {value} in the result"
        want_pos, want = cmd.expected[labels]
        if cmd.ordered and want_pos != pos:
            return f"expected {dict(labels)} at position {want_pos}, it was at {pos}"
        if not almost_equal(want, value):
            return f"expected {want} for {dict(labels)}, got {value}"
        seen.add(labels)
    if cmd.scalar is not None:
        return f"expected the scalar {cmd.scalar}, got a vector of {len(got)}"
    missing = [dict(labels) for labels in cmd.expected if labels not in seen]
    return f"expected series not found: {missing}" if missing else None
