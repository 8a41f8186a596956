"""The Prometheus text format (0.0.4) as Go's client_golang writes it, for the simulated monitors.

An implementation of its own, on purpose: the collector's parser and renderer
are checked against it, so it shares no code with :mod:`collector.exposition`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from simulator.families import MetricSpec


class MonitorSample(NamedTuple):
    """One sample a simulated monitor serves: name, complete label set (zone included), value."""

    name: str
    labels: dict[str, str]
    value: float


def _shortest_digits(value: float) -> tuple[str, int]:
    """Shortest round-trip decimal digits of a finite positive float.

    Returns ``(digits, point)`` with ``value == 0.<digits> * 10**point`` and no
    leading or trailing zeros in ``digits``. Python's ``repr`` and Go's strconv
    both pick the shortest string that round-trips (the closest one on ties).
    """
    if value < 1e15 and value.is_integer():  # fast path: most samples are whole numbers
        whole = str(int(value))
        return whole.rstrip("0"), len(whole)
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    return stripped.rstrip("0"), point


def go_float(value: float) -> str:
    """Format like Go's ``strconv.FormatFloat(value, 'g', -1, 64)``.

    Go's rule for the shortest 'g' form: with ``x`` the decimal exponent of the
    value written as d.ddd * 10**x, use the %e form when ``x < -4 or x >= 6`` (the
    precision is taken as 6 when it is "shortest"; the threshold of 21 belongs to
    fmt's ``%v``, not to strconv), else the %f form. The exponent has a sign and
    at least two digits: ``2.87244288e+08``, ``1e-05``, ``3664``, ``0.0001``.
    NaN is ``NaN``, infinities are ``+Inf`` / ``-Inf``, negative zero ``-0``.
    """
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, v) < 0 else ""
    if v == 0:
        return sign + "0"
    digits, point = _shortest_digits(abs(v))
    exponent = point - 1
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        exp_sign = "-" if exponent < 0 else "+"
        return f"{sign}{mantissa}e{exp_sign}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def format_sample_value(value: float) -> str:
    """A sample value as client_golang's text writer prints it (any zero is ``0``)."""
    if value == 0:
        return "0"
    return go_float(value)


def escape_label_value(value: str) -> str:
    """Escape a label value for the text format: backslash, double quote, newline."""
    if "\\" not in value and '"' not in value and "\n" not in value:
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    """Escape a HELP text for the text format: backslash and newline only."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _family_lines(
    name: str, samples: Iterable[MonitorSample], pairs_seen: dict[tuple[str, str], str]
) -> Iterable[str]:
    """The sample lines of one family, ordered by label values taken in label-name order."""
    rows: list[tuple[int, tuple[str, ...], list[str], float]] = []
    for sample in samples:
        keys = sorted(sample.labels)
        values = tuple(sample.labels[key] for key in keys)
        rows.append((len(keys), values, keys, sample.value))
    rows.sort(key=lambda row: (row[0], row[1]))
    for _, values, keys, value in rows:
        if not keys:
            yield f"{name} {format_sample_value(value)}\n"
            continue
        rendered_pairs: list[str] = []
        for pair in zip(keys, values, strict=True):
            text = pairs_seen.get(pair)
            if text is None:
                text = f'{pair[0]}="{escape_label_value(pair[1])}"'
                pairs_seen[pair] = text
            rendered_pairs.append(text)
        yield f"{name}{{{','.join(rendered_pairs)}}} {format_sample_value(value)}\n"


def render_exposition(samples: Iterable[MonitorSample], specs: Mapping[str, MetricSpec]) -> bytes:
    """Render samples as client_golang's promhttp does (text format 0.0.4).

    Families sorted by name, each with ``# HELP`` then ``# TYPE``; samples sorted
    by their label values taken in label-name order; labels sorted by name;
    label values and HELP escaped; values formatted with :func:`go_float`.
    """
    by_name: dict[str, list[MonitorSample]] = {}
    for sample in samples:
        by_name.setdefault(sample.name, []).append(sample)
    parts: list[str] = []
    pairs_seen: dict[tuple[str, str], str] = {}  # label values repeat a lot: render each once
    for name in sorted(by_name):
        spec = specs[name]
        parts.append(f"# HELP {name} {escape_help(spec.help)}\n# TYPE {name} {spec.type}\n")
        parts.extend(_family_lines(name, by_name[name], pairs_seen))
    return "".join(parts).encode("utf-8")
