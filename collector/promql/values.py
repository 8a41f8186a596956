"""Result types, the query error, and float arithmetic with Go's (Prometheus') semantics."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

ErrorType = Literal["bad_data", "execution", "timeout"]

Labels = tuple[tuple[str, str], ...]
"""A label set inside the evaluator: ``(name, value)`` pairs sorted by name, hashable."""

METRIC_NAME = "__name__"


@dataclass(slots=True)
class Sample:
    """One element of an instant vector; its timestamp is the evaluation time."""

    labels: dict[str, str]
    value: float


Vector = list[Sample]


@dataclass(slots=True)
class Scalar:
    """A plain number."""

    value: float


@dataclass(slots=True)
class String:
    """A string literal's value."""

    value: str


@dataclass(slots=True)
class RangeSeries:
    """One series of a range vector: ``(unix seconds, value)`` points, oldest first."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


Matrix = list[RangeSeries]


class QueryError(Exception):
    """A query that cannot be answered; ``error_type`` is the Prometheus API's ``errorType``."""

    def __init__(self, error_type: ErrorType, message: str) -> None:
        super().__init__(message)
        self.error_type: ErrorType = error_type
        self.message = message


def unsupported(feature: str) -> QueryError:
    """The error for a valid PromQL feature this evaluator does not implement."""
    return QueryError("execution", f"unsupported: {feature}")


def labels_of(mapping: dict[str, str]) -> Labels:
    """The evaluator's form of a label set (empty values are absent labels, as in Prometheus)."""
    return tuple(sorted((k, v) for k, v in mapping.items() if v != ""))


def labels_str(labels: Labels) -> str:
    """Go's ``labels.Labels.String()``: ``{a="b", c="d"}``."""
    return "{" + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in labels) + "}"


def drop_name(labels: Labels) -> Labels:
    """The label set without ``__name__``."""
    for name, _ in labels:
        if name == METRIC_NAME:
            return tuple(p for p in labels if p[0] != METRIC_NAME)
    return labels


def format_float(value: float) -> str:
    """Go's ``strconv.FormatFloat(v, 'f', -1, 64)``: shortest digits, never an exponent."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = format(Decimal(repr(value)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def go_float_str(value: float) -> str:
    """Go's ``%v`` for a float64, near enough for error messages."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


# --- float64 arithmetic as Go does it (no exceptions; IEEE results) ---


def go_div(a: float, b: float) -> float:
    """``a / b`` with IEEE division by zero."""
    if b == 0:
        if math.isnan(a) or a == 0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def go_mod(a: float, b: float) -> float:
    """Go's ``math.Mod``: the remainder with the sign of ``a``."""
    if b == 0 or math.isinf(a) or math.isnan(a) or math.isnan(b):
        return math.nan
    if math.isinf(b):
        return a
    return math.fmod(a, b)


def _is_odd_integer(y: float) -> bool:
    return math.isfinite(y) and y == math.floor(y) and math.fmod(y, 2.0) != 0


def go_pow(a: float, b: float) -> float:
    """Go's ``math.Pow`` (C99 ``pow`` special cases, no exceptions)."""
    try:
        return math.pow(a, b)
    except OverflowError:
        if a < 0 and _is_odd_integer(b):
            return -math.inf
        return math.inf
    except ValueError:
        if a == 0:  # zero to a negative power
            if _is_odd_integer(b):
                return math.copysign(math.inf, a)
            return math.inf
        return math.nan  # negative base, non-integer exponent


def go_max(a: float, b: float) -> float:
    """Go's ``math.Max``: NaN wins, +0 beats -0."""
    if a == math.inf or b == math.inf:
        return math.inf
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == 0 and b == 0:
        return b if math.copysign(1.0, a) < 0 else a
    return a if a > b else b


def go_min(a: float, b: float) -> float:
    """Go's ``math.Min``: NaN wins, -0 beats +0."""
    if a == -math.inf or b == -math.inf:
        return -math.inf
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == 0 and b == 0:
        return a if math.copysign(1.0, a) < 0 else b
    return a if a < b else b


def go_floor(v: float) -> float:
    """``math.Floor`` on floats (keeps infinities, NaN and the sign of zero)."""
    if not math.isfinite(v) or v == 0:
        return v
    r = float(math.floor(v))
    return math.copysign(r, v) if r == 0 else r


def go_ceil(v: float) -> float:
    """``math.Ceil`` on floats (keeps infinities, NaN and the sign of zero)."""
    if not math.isfinite(v) or v == 0:
        return v
    r = float(math.ceil(v))
    return math.copysign(r, v) if r == 0 else r


def go_exp(v: float) -> float:
    """``math.Exp`` (overflow gives +Inf)."""
    try:
        return math.exp(v)
    except OverflowError:
        return math.inf


def _go_log(fn: Callable[[float], float], v: float) -> float:
    if math.isnan(v) or v < 0:
        return math.nan
    if v == 0:
        return -math.inf
    if math.isinf(v):
        return math.inf
    return fn(v)


def go_ln(v: float) -> float:
    """``math.Log``."""
    return _go_log(math.log, v)


def go_log2(v: float) -> float:
    """``math.Log2``."""
    return _go_log(math.log2, v)


def go_log10(v: float) -> float:
    """``math.Log10``."""
    return _go_log(math.log10, v)


def go_sqrt(v: float) -> float:
    """``math.Sqrt`` (negative gives NaN)."""
    if math.isnan(v) or v < 0:
        return math.nan
    return math.sqrt(v)
