"""Durations as a person writes them, in messages and on the pages: ``250 ms``, ``1.5 s``,
``45 s``, ``26.7 min``, ``3.5 h``, ``2.1 d``.

The one formatter of durations: log lines, error messages and the pages for
people (:mod:`collector.web.ui.units`) all write a duration through :func:`duration`.
"""

from __future__ import annotations

_UNITS = (("d", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0))


def duration(seconds: float) -> str:
    """``seconds`` in the largest unit it makes at least one of, milliseconds below a
    second, to three significant figures (whole numbers from 100 up)."""
    # the unit is chosen on the value as it will be written, so 59.97 s reads 1 min, not 60 s
    size = abs(float(f"{seconds:.3g}"))
    for unit, length in _UNITS:
        if size >= length:
            return f"{_figures(seconds / length)} {unit}"
    return f"{_figures(seconds * 1000)} ms" if size else "0 s"


def _figures(value: float) -> str:
    """Three significant figures, no exponent, no trailing zeros: 1.5, 26.7, 250, 1,234."""
    size = abs(value)
    if size >= 99.95:
        return f"{value:,.0f}"
    text = f"{value:.{1 if size >= 9.995 else 2}f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text
