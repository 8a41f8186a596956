"""Float arithmetic and formatting as Prometheus (Go) does them, over numpy arrays.

numpy's float64 operations are IEEE, as Go's are (division by zero gives an
infinity or NaN, ``fmod`` and ``pow`` follow C99 as ``math.Mod`` and
``math.Pow`` do); what differs is named here: Go's ``math.Max``/``math.Min``
special cases, rounding, and how Go writes a float.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from types import MappingProxyType

import numpy as np

from .arrays import FloatArray


def _special(value: float) -> str | None:
    """How Go writes NaN and the infinities, or None for a finite value."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return None


def format_float(value: float) -> str:
    """Go's ``strconv.FormatFloat(v, 'f', -1, 64)``: shortest digits, never an exponent."""
    text = repr(float(value))
    if "e" not in text and "n" not in text:  # the common case: repr is already Go's digits
        return text[:-2] if text.endswith(".0") else text
    special = _special(value)
    if special is not None:
        return special
    text = format(Decimal(text), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def format_value(value: float) -> str:
    """A sample's value as Prometheus 2.42's API writes it in a vector or matrix
    (``util/jsonutil.MarshalValue``): Go's shortest digits, with an exponent (Go's ``'e'``,
    which is ``repr``'s text there) below 1e-6 and from 1e21 in magnitude, else as
    :func:`format_float`. A scalar and ``count_values`` write :func:`format_float`."""
    magnitude = abs(value)
    if math.isfinite(value) and magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        return repr(float(value))
    return format_float(value)


def go_float_str(value: float) -> str:
    """Go's ``%v`` for a float64, near enough for error messages."""
    special = _special(value)
    if special is not None:
        return special
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


def go_float_verb_f(value: float) -> str:
    """Go's ``%f`` for a float64: six decimals, ``NaN``, ``+Inf``, ``-Inf``."""
    special = _special(float(value))
    return special if special is not None else f"{value:.6f}"


def go_max(a: FloatArray | float, b: FloatArray) -> FloatArray:
    """Go's ``math.Max`` element-wise: +Inf wins over NaN, NaN over numbers, +0 over -0."""
    both_zero = (a == 0) & (b == 0)
    larger = np.where(both_zero, np.where(np.signbit(a), b, a), np.maximum(a, b))
    return np.where((a == np.inf) | (b == np.inf), np.inf, larger)


def go_min(a: FloatArray | float, b: FloatArray) -> FloatArray:
    """Go's ``math.Min`` element-wise: -Inf wins over NaN, NaN over numbers, -0 over +0."""
    both_zero = (a == 0) & (b == 0)
    smaller = np.where(both_zero, np.where(np.signbit(a), a, b), np.minimum(a, b))
    return np.where((a == -np.inf) | (b == -np.inf), -np.inf, smaller)


def round_to(values: FloatArray, to_nearest: FloatArray) -> FloatArray:
    """``round(v, to_nearest)``: ties go up, through the inverse as Prometheus computes it."""
    inverse = 1.0 / to_nearest
    rounded: FloatArray = np.floor(values * inverse + 0.5) / inverse
    return rounded


def _sgn(values: FloatArray) -> FloatArray:
    signs: FloatArray = np.where(values < 0, -1.0, np.where(values > 0, 1.0, values))
    return signs


def _deg(values: FloatArray) -> FloatArray:
    degrees: FloatArray = values * 180 / math.pi  # Go's order of operations
    return degrees


def _rad(values: FloatArray) -> FloatArray:
    radians: FloatArray = values * math.pi / 180
    return radians


MATH_FUNCTIONS: Mapping[str, Callable[[FloatArray], FloatArray]] = MappingProxyType(
    {
        "abs": np.abs,
        "ceil": np.ceil,
        "floor": np.floor,
        "exp": np.exp,
        "ln": np.log,
        "log2": np.log2,
        "log10": np.log10,
        "sqrt": np.sqrt,
        "sgn": _sgn,
        "acos": np.arccos,
        "acosh": np.arccosh,
        "asin": np.arcsin,
        "asinh": np.arcsinh,
        "atan": np.arctan,
        "atanh": np.arctanh,
        "cos": np.cos,
        "cosh": np.cosh,
        "sin": np.sin,
        "sinh": np.sinh,
        "tan": np.tan,
        "tanh": np.tanh,
        "deg": _deg,
        "rad": _rad,
    }
)
"""PromQL's one-argument math functions by name; numpy's agree with Go's on every special value."""
