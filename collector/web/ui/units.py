"""Numbers as a person reads them: GiB, %, W, °C, minutes and hours, GiB·h, times and ages.

Each function takes the raw value the collector holds (bytes, a 0-1 ratio,
seconds, a Unix time, ...) and returns short text; None, NaN and infinities
read as :data:`MISSING`, so a reading no source sent never shows as 0. These
are the pages' only formatters of times (:func:`utc`, :func:`clock`), durations
(:func:`duration`, the one of :mod:`core.durations` that messages use too) and
ages (:func:`ago`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from core import durations

MISSING = "\u2013"  # an en dash
"""What an unknown value reads as."""

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_GIB = float(1 << 30)


def _known(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _short(value: float) -> str:
    """Three significant figures at most, no exponent: 1.23, 12.3, 123, 1234."""
    size = abs(value)
    if size >= 100 or (value == int(value) and size >= 10):
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}".rstrip("0").rstrip(".") if value else "0"


def size(value: float | None) -> str:
    """Bytes in binary units: ``512 B``, ``1.5 KiB``, ``80 GiB``, ``1.2 TiB``."""
    if not _known(value):
        return MISSING
    assert value is not None
    scaled, unit = float(value), 0
    while abs(scaled) >= 1024 and unit < len(_BINARY) - 1:
        scaled, unit = scaled / 1024, unit + 1
    return f"{_short(scaled)} {_BINARY[unit]}"


def percent(ratio: float | None) -> str:
    """A 0-1 ratio as a percentage: ``0.453`` reads ``45%``, below 10 % with a decimal."""
    if not _known(ratio):
        return MISSING
    assert ratio is not None
    value = ratio * 100
    return f"{value:.1f}%" if 0 < abs(value) < 10 else f"{value:.0f}%"


def percent_100(value: float | None) -> str:
    """A 0-100 reading (the monitors' utilisation) as :func:`percent` writes it."""
    return percent(None if value is None else value / 100)


def watts(value: float | None) -> str:
    """Power: ``215 W``."""
    return MISSING if not _known(value) else f"{_short(value or 0.0)} W"


def celsius(value: float | None) -> str:
    """Temperature: ``67 °C``."""
    return MISSING if not _known(value) else f"{value:.0f} °C"


def duration(seconds: float | None) -> str:
    """Seconds in the largest unit that keeps them short: ``250 ms``, ``45 s``, ``12 min``,
    ``3.5 h``, ``2.1 d`` (:func:`core.durations.duration`)."""
    if not _known(seconds):
        return MISSING
    assert seconds is not None
    return durations.duration(seconds)


def ago(then: float | None, now: float) -> str:
    """How long before ``now`` the Unix time ``then`` was: ``4.2 s ago``, ``3.5 min ago``;
    ``never`` for None (nothing happened yet)."""
    if then is None:
        return "never"
    return f"{duration(max(0.0, now - then))} ago"


def utc(then: float | None) -> str:
    """A Unix time as a UTC date and time: ``2025-03-01 14:05:09 UTC``."""
    if not _known(then):
        return MISSING
    return _moment(then or 0.0).strftime("%Y-%m-%d %H:%M:%S UTC")


def clock(then: float) -> str:
    """A Unix time as its UTC time of day, ``14:05``: a chart's time axis, a report's span."""
    return _moment(then).strftime("%H:%M")


def _moment(then: float) -> datetime:
    return datetime.fromtimestamp(then, UTC)


def byte_hours(value: float | None) -> str:
    """Memory held over time: ``12.5 GiB·h`` (a GiB for an hour is 1 GiB·h)."""
    return MISSING if not _known(value) else f"{_short((value or 0.0) / _GIB)} GiB·h"


def core_hours(value: float | None) -> str:
    """Card shares held over time: ``0.25 card·h`` (a 25 % vGPU for an hour)."""
    return MISSING if not _known(value) else f"{_short(value or 0.0)} card·h"


def cores(value: float | None) -> str:
    """A number of cards' worth of cores (shares of a card summed): ``2.5 cards``."""
    if not _known(value):
        return MISSING
    return f"{_short(value or 0.0)} card" + ("" if value == 1 else "s")


def count(value: int | None) -> str:
    """A whole number with thousands separators: ``5,000``."""
    return MISSING if value is None else f"{value:,}"
