"""Float arithmetic as Prometheus does it.

Go's float64 operations and formatting (no exceptions, IEEE results), then
what Prometheus builds on them: Kahan summation, quantiles, rounding, ordering.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from types import MappingProxyType


def _special(value: float) -> str | None:
    """How Go writes NaN and the infinities, or None for a finite value."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return None


def format_float(value: float) -> str:
    """Go's ``strconv.FormatFloat(v, 'f', -1, 64)``: shortest digits, never an exponent."""
    special = _special(value)
    if special is not None:
        return special
    text = format(Decimal(repr(value)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def go_float_str(value: float) -> str:
    """Go's ``%v`` for a float64, near enough for error messages."""
    special = _special(value)
    if special is not None:
        return special
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


def _integral(fn: Callable[[float], int], v: float) -> float:
    """``fn`` (floor or ceil) keeping infinities, NaN and the sign of zero, as Go does."""
    if not math.isfinite(v) or v == 0:
        return v
    r = float(fn(v))
    return math.copysign(r, v) if r == 0 else r


def go_floor(v: float) -> float:
    """``math.Floor`` on floats (keeps infinities, NaN and the sign of zero)."""
    return _integral(math.floor, v)


def go_ceil(v: float) -> float:
    """``math.Ceil`` on floats (keeps infinities, NaN and the sign of zero)."""
    return _integral(math.ceil, v)


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


MATH_FUNCTIONS: Mapping[str, Callable[[float], float]] = MappingProxyType(
    {
        "abs": math.fabs,
        "ceil": go_ceil,
        "floor": go_floor,
        "exp": go_exp,
        "ln": go_ln,
        "log2": go_log2,
        "log10": go_log10,
        "sqrt": go_sqrt,
    }
)
"""PromQL's one-argument math functions by name, each as Go computes it."""


# --- what Prometheus builds on them ---


def kahan_inc(inc: float, total: float, c: float) -> tuple[float, float]:
    """One step of Kahan-Neumaier summation, as Prometheus' ``kahanSumInc``."""
    t = total + inc
    if abs(total) >= abs(inc):
        c += (total - t) + inc
    else:
        c += (inc - t) + total
    return t, c


def _nan_first_key(v: float) -> tuple[bool, float]:
    return (not math.isnan(v), v if not math.isnan(v) else 0.0)


def quantile(q: float, values: list[float]) -> float:
    """Prometheus' ``quantile``: linear interpolation between the closest ranks."""
    if not values:
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if math.isnan(q):
        return math.nan
    values.sort(key=_nan_first_key)  # Go's vectorByValueHeap puts NaN first
    n = float(len(values))
    rank = q * (n - 1)
    lower = max(0.0, go_floor(rank))
    upper = min(n - 1, lower + 1)
    weight = rank - go_floor(rank)
    return values[int(lower)] * (1 - weight) + values[int(upper)] * weight


def round_to(v: float, to_nearest: float) -> float:
    """``round(v, to_nearest)``: ties go up, as Prometheus."""
    inverse = go_div(1.0, to_nearest)
    return go_div(go_floor(v * inverse + 0.5), inverse)


def nan_last(value: float, descending: bool) -> tuple[bool, float]:
    """A sort key by value, ascending or descending, that always puts NaN last."""
    if math.isnan(value):
        return (True, 0.0)
    return (False, -value if descending else value)
