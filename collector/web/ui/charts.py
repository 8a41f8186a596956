"""Charts as inline SVG, drawn on the server: a line chart, a bar, a sparkline.

Each is a pure function of its data returning :class:`markupsafe.Markup`, so a
page reads without JavaScript and a test can parse the SVG. Every chart carries
its numbers as text (``role="img"``, an ``aria-label``, a ``<title>`` and a
``<desc>``; the line chart also a visually hidden table of its points), and its
series differ by dash pattern and a named legend, not by colour alone. Every
name and label is escaped.

Geometry: values map linearly from 0 to the top of the axis, times linearly
from the first to the last point; coordinates have one decimal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from markupsafe import Markup, escape

from collector.web.ui.units import clock

Format = Callable[[float | None], str]
"""A unit's formatter, from :mod:`collector.web.ui.units`."""

COLOURS = ("#1a5fb4", "#c64600", "#26a269", "#813d9c")
DASHES = ("", "6 3", "2 2", "8 2 2 2")
"""Each series' stroke: colour and dash pattern (the dash tells series apart without colour)."""

MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 70, 12, 10, 34
FILLING = "the history is filling: no point yet"
"""What a line chart with no point says (right after start, the history holds none)."""
_TIME_STEPS = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


class Series(NamedTuple):
    """One line of a chart: its name and its (Unix seconds, value) points, oldest first."""

    name: str
    points: Sequence[tuple[float, float]]


def nice_top(value: float) -> float:
    """The axis top for a largest value: the next of 1, 2, 2.5, 5 x 10^k at or above it."""
    if not value > 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for factor in (1, 2, 2.5, 5, 10):
        if value <= factor * power * (1 + 1e-12):
            return float(factor * power)
    return float(10 * power)


def time_ticks(first: float, last: float, most: int = 6) -> list[float]:
    """Round times (whole minutes, 5 minutes, ... days) within [first, last], at most ``most``."""
    span = max(last - first, 1.0)
    step = next((s for s in _TIME_STEPS if span / s <= most - 1), _TIME_STEPS[-1])
    tick = math.ceil(first / step) * step
    found: list[float] = []
    while tick <= last and len(found) < most:
        found.append(float(tick))
        tick += step
    return found


def _f(value: float) -> str:
    return f"{value:.1f}"


def line_chart(
    series: Sequence[Series],
    title: str,
    unit: Format,
    width: int = 640,
    height: int = 200,
    top: float | None = None,
    binary: bool = False,
) -> Markup:
    """A time chart of ``series`` with labelled axes (times in UTC, values in ``unit``).

    The value axis runs from 0 to ``top`` (default: a round number at or above
    the largest value; ``binary``: round in powers of 1024, for bytes, so the
    axis tops at 20 GiB or 2 TiB rather than 25 GB). Finite points only; with
    none, the frame says the history is filling (:data:`FILLING`).
    """
    lines = [Series(s.name, [(t, v) for t, v in s.points if math.isfinite(v)]) for s in series]
    every = [p for s in lines for p in s.points]
    plot_w = width - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = height - MARGIN_TOP - MARGIN_BOTTOM
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart line-chart" role="img"'
        f' width="{width}" height="{height}" viewBox="0 0 {width} {height}"'
        f' aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f"<desc>{escape(_describe(lines, unit))}</desc>",
        f'<rect class="frame" x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{plot_w}"'
        f' height="{plot_h}" fill="none" stroke="#d8dbe0"/>',
    ]
    if not every:
        out.append(
            f'<text class="empty" x="{_f(MARGIN_LEFT + plot_w / 2)}" y="{_f(MARGIN_TOP + plot_h / 2)}"'
            f' text-anchor="middle" fill="#6b7280">{FILLING}</text></svg>'
        )
        return Markup("".join(out))
    first = min(t for t, _ in every)
    last = max(t for t, _ in every)
    largest = max(v for _, v in every)
    scale = 1024.0 ** math.floor(math.log(largest, 1024)) if binary and largest >= 1 else 1.0
    y_top = top if top is not None and top > 0 else nice_top(largest / scale) * scale
    span = max(last - first, 1e-9)

    def x(t: float) -> float:
        return MARGIN_LEFT + (t - first) / span * plot_w

    def y(v: float) -> float:
        return MARGIN_TOP + plot_h - min(max(v, 0.0), y_top) / y_top * plot_h

    for fraction in (0.0, 0.25, 0.5, 0.75, 1.0):
        at = y(fraction * y_top)
        out.append(
            f'<line class="grid" x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT + plot_w}" y1="{_f(at)}"'
            f' y2="{_f(at)}" stroke="#eceef1"/>'
            f'<text class="y-label" x="{MARGIN_LEFT - 6}" y="{_f(at + 4)}" text-anchor="end"'
            f' font-size="11" fill="#4b5563">{escape(unit(fraction * y_top))}</text>'
        )
    for tick in time_ticks(first, last):
        out.append(
            f'<text class="x-label" x="{_f(x(tick))}" y="{height - MARGIN_BOTTOM + 15}"'
            f' text-anchor="middle" font-size="11" fill="#4b5563">{clock(tick)}</text>'
        )
    out.append(
        f'<text class="x-unit" x="{width - MARGIN_RIGHT}" y="{height - 4}" text-anchor="end"'
        ' font-size="10" fill="#6b7280">UTC</text>'
    )
    legend_x = MARGIN_LEFT
    for i, s in enumerate(lines):
        colour, dash = COLOURS[i % len(COLOURS)], DASHES[i % len(DASHES)]
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        coords = " ".join(f"{_f(x(t))},{_f(y(v))}" for t, v in s.points)
        out.append(
            f'<g class="series" data-name="{escape(s.name)}">'
            f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"{dashed}/>'
            f'<line x1="{legend_x}" x2="{legend_x + 18}" y1="{height - 8}" y2="{height - 8}"'
            f' stroke="{colour}" stroke-width="2"{dashed}/>'
            f'<text class="legend" x="{legend_x + 22}" y="{height - 4}" font-size="11">'
            f"{escape(s.name)}</text></g>"
        )
        legend_x += 30 + 7 * len(s.name)
    out.append("</svg>")
    return Markup("".join(out)) + _points_table(lines, title, unit)


def _describe(lines: Sequence[Series], unit: Format) -> str:
    parts = []
    for s in lines:
        if not s.points:
            parts.append(f"{s.name}: no data")
            continue
        values = [v for _, v in s.points]
        parts.append(
            f"{s.name}: latest {unit(values[-1])} at {clock(s.points[-1][0])} UTC,"
            f" lowest {unit(min(values))}, highest {unit(max(values))},"
            f" {len(values)} points from {clock(s.points[0][0])} UTC"
        )
    return "; ".join(parts) + "."


def _points_table(lines: Sequence[Series], title: str, unit: Format) -> Markup:
    """Every point as a table for screen readers (the page hides it from the eye)."""
    times = sorted({t for s in lines for t, _ in s.points})
    by_series = [dict(s.points) for s in lines]
    head = "".join(f"<th>{escape(s.name)}</th>" for s in lines)
    rows = "".join(
        f"<tr><th>{clock(t)} UTC</th>"
        + "".join(f"<td>{escape(unit(values.get(t)))}</td>" for values in by_series)
        + "</tr>"
        for t in times
    )
    return Markup(
        f'<table class="sr-only"><caption>{escape(title)}</caption>'
        f"<thead><tr><th>time</th>{head}</tr></thead><tbody>{rows}</tbody></table>"
    )


def bar(
    label: str,
    used: float | None,
    allocated: float | None,
    total: float | None,
    unit: Format,
    width: int = 240,
    height: int = 16,
) -> Markup:
    """Used against allocated against the total, as nested bars; nothing (empty markup)
    where there is nothing to measure against.

    A bar is measured against the total, or, where the caller has no total to give
    (``total`` None), against the allocation. When that is unknown or none (0),
    or neither used nor allocated is known, no bar is drawn: a value no source
    sent, or an allocation of nothing, is no full bar. The scale's end is the larger of that reference and the other
    values (an overcommitted card's allocation reaches past its total): each
    bar's length is its value's share of that end. The title says all three in
    ``unit``.
    """
    reference = total if total is not None else allocated
    if reference is None or not math.isfinite(reference) or reference <= 0:
        return Markup("")
    if not any(v is not None and math.isfinite(v) for v in (used, allocated)):
        return Markup("")  # nothing to draw against the reference
    values = [v for v in (total, allocated, used) if v is not None and math.isfinite(v) and v > 0]
    end = max(values)

    def length(value: float | None) -> float:
        if value is None or not math.isfinite(value) or value <= 0:
            return 0.0
        return value / end * width

    text = f"{label}: used {unit(used)} of {unit(allocated)} allocated, {unit(total)} in all"
    inner = max(height - 6, 2)
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart bar" role="img" width="{width}"'
        f' height="{height}" viewBox="0 0 {width} {height}" aria-label="{escape(text)}">'
        f"<title>{escape(text)}</title>"
        f'<rect class="total" x="0" y="0" width="{_f(length(total))}" height="{height}"'
        ' fill="#eceef1"/>'
        f'<rect class="allocated" x="0" y="0" width="{_f(length(allocated))}" height="{height}"'
        ' fill="#b5cdf0" stroke="#1a5fb4" stroke-width="0.5"/>'
        f'<rect class="used" x="0" y="3" width="{_f(length(used))}" height="{inner}"'
        ' fill="#1a5fb4"/></svg>'
    )


def sparkline(
    points: Sequence[tuple[float, float]],
    label: str,
    unit: Format,
    width: int = 120,
    height: int = 24,
) -> Markup:
    """A small line of ``points`` (from 0 to a round top), its range and latest value as text."""
    kept = [(t, v) for t, v in points if math.isfinite(v)]
    if not kept:
        text = f"{label}: no data"
        coords = ""
    else:
        values = [v for _, v in kept]
        text = (
            f"{label}: latest {unit(values[-1])}, lowest {unit(min(values))},"
            f" highest {unit(max(values))}"
        )
        first, last = kept[0][0], kept[-1][0]
        span, top = max(last - first, 1e-9), nice_top(max(values))
        coords = " ".join(
            f"{_f((t - first) / span * (width - 2) + 1)},"
            f"{_f(height - 1 - min(max(v, 0.0), top) / top * (height - 2))}"
            for t, v in kept
        )
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart sparkline" role="img"'
        f' width="{width}" height="{height}" viewBox="0 0 {width} {height}"'
        f' aria-label="{escape(text)}"><title>{escape(text)}</title>'
        f'<polyline points="{coords}" fill="none" stroke="#1a5fb4" stroke-width="1.5"/></svg>'
    )
