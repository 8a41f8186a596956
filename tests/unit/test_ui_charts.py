"""The UI's units and SVG charts: known data in, geometry and text out.

Each chart is parsed as XML: bar lengths and line points must be proportional
to the values, axis labels must say the right numbers and times, every chart
must carry its numbers as text, and names are escaped.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from collector.web.ui import units
from collector.web.ui.charts import (
    FILLING,
    MARGIN_BOTTOM,
    MARGIN_LEFT,
    MARGIN_RIGHT,
    MARGIN_TOP,
    Series,
    bar,
    line_chart,
    nice_top,
    sparkline,
    time_ticks,
)
from core import durations

SVG = "{http://www.w3.org/2000/svg}"
GIB = 1 << 30
HOSTILE = '<script>alert("x")</script>&amp;'
T0 = 1_780_000_200.0  # a whole 10 minutes: 2026-05-28 20:30 UTC


def parse(markup: str) -> ET.Element:
    """A chart's markup as one XML tree (a line chart is an SVG and its table)."""
    return ET.fromstring(f"<root>{markup}</root>")


def svg_of(markup: str) -> ET.Element:
    found = parse(markup).find(f"{SVG}svg")
    assert found is not None, markup
    return found


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (1536, "1.5 KiB"),
        (10 * 1024 * 1024, "10 MiB"),
        (80 * GIB, "80 GiB"),
        (1.25 * (1 << 40), "1.25 TiB"),
        (None, units.MISSING),
        (math.nan, units.MISSING),
    ],
)
def test_sizes_read_in_binary_units(value: float | None, text: str) -> None:
    assert units.size(value) == text


def test_other_units_read_as_a_person_writes_them() -> None:
    assert units.percent(0.453) == "45%"
    assert units.percent(0.05) == "5.0%"
    assert units.percent(0) == "0%"
    assert units.percent_100(72.4) == "72%"
    assert units.watts(215.3) == "215 W"
    assert units.celsius(66.6) == "67 °C"
    assert [units.duration(s) for s in (45, 720, 3.5 * 3600, 2.1 * 86400)] == [
        "45 s",
        "12 min",
        "3.5 h",
        "2.1 d",
    ]
    assert units.byte_hours(12.5 * GIB) == "12.5 GiB·h"
    assert units.core_hours(0.25) == "0.25 card·h"
    assert units.cores(1) == "1 card"
    assert units.cores(2.5) == "2.5 cards"
    assert units.count(5000) == "5,000"
    assert units.percent(None) == units.watts(math.inf) == units.duration(None) == units.MISSING


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (0.0015, "1.5 ms"),
        (0.25, "250 ms"),
        (0.9996, "1 s"),  # the unit is chosen on the value as written: never "1,000 ms"
        (1.5, "1.5 s"),
        (12.345, "12.3 s"),
        (59.97, "1 min"),
        (1600, "26.7 min"),
        (12345, "3.43 h"),
        (1e8, "1,157 d"),
        (-0.5, "-500 ms"),
    ],
)
def test_one_duration_for_messages_and_pages(seconds: float, text: str) -> None:
    """The pages' durations are the messages' (``core.durations``): one formatter."""
    assert units.duration(seconds) == durations.duration(seconds) == text


def test_times_and_ages_read_in_utc() -> None:
    assert units.utc(T0) == "2026-05-28 20:30:00 UTC"
    assert units.clock(T0) == "20:30"
    assert units.utc(None) == units.MISSING
    assert units.ago(T0 - 4.2, T0) == "4.2 s ago"
    assert units.ago(T0 - 210, T0) == "3.5 min ago"
    assert units.ago(T0 + 3, T0) == "0 s ago"  # a clock a little ahead is not the future
    assert units.ago(None, T0) == "never"


def test_bar_lengths_are_proportional_to_the_values() -> None:
    svg = svg_of(bar("gpu-0 memory", 6 * GIB, 12 * GIB, 24 * GIB, units.size, width=240))
    widths = {r.get("class"): float(r.get("width", "0")) for r in svg.iter(f"{SVG}rect")}
    assert widths == {"total": 240.0, "allocated": 120.0, "used": 60.0}
    assert svg.get("role") == "img"
    title = svg.findtext(f"{SVG}title")
    assert title == "gpu-0 memory: used 6 GiB of 12 GiB allocated, 24 GiB in all"
    assert svg.get("aria-label") == title


def test_a_bar_without_a_total_or_overcommitted_scales_to_its_largest_value() -> None:
    svg = svg_of(bar("x", 30.0, 20.0, None, units.cores, width=300))
    widths = {r.get("class"): float(r.get("width", "0")) for r in svg.iter(f"{SVG}rect")}
    assert widths == {"total": 0.0, "allocated": 200.0, "used": 300.0}
    svg = svg_of(bar("y", None, 150.0, 100.0, units.cores, width=300))
    widths = {r.get("class"): float(r.get("width", "0")) for r in svg.iter(f"{SVG}rect")}
    assert widths == {"total": 200.0, "allocated": 300.0, "used": 0.0}
    assert f"used {units.MISSING} of 150 cards allocated, 100 cards in all" in (
        svg.findtext(f"{SVG}title") or ""
    )


def test_no_bar_for_an_unknown_or_empty_reference() -> None:
    """A value no source sent, or an allocation of nothing, draws no bar (never a full one)."""
    assert bar("node total unknown", 80 * GIB, None, None, units.size) == ""
    assert bar("nothing allocated", 96 * GIB, 0, None, units.size) == ""
    assert bar("allocation unknown", 96 * GIB, None, None, units.size) == ""
    assert bar("total not finite", GIB, GIB, math.nan, units.size) == ""
    assert bar("nothing measured", None, None, 1.0, units.percent) == ""
    # against the card's whole, a used share alone is a bar
    svg = svg_of(bar("cores", 0.14, None, 1.0, units.percent, width=100))
    widths = {r.get("class"): float(r.get("width", "0")) for r in svg.iter(f"{SVG}rect")}
    assert widths == {"total": 100.0, "allocated": 0.0, "used": 14.0}


def points_of(svg: ET.Element) -> dict[str, list[tuple[float, float]]]:
    found = {}
    for group in svg.iter(f"{SVG}g"):
        line = group.find(f"{SVG}polyline")
        assert line is not None
        pairs = (p.split(",") for p in (line.get("points") or "").split())
        found[group.get("data-name", "")] = [(float(x), float(y)) for x, y in pairs]
    return found


def test_line_points_are_placed_proportionally_with_labelled_axes() -> None:
    used = [(T0 + 60 * i, float(i) * GIB) for i in range(11)]  # 0 .. 10 GiB over 10 minutes
    allocated = [(T0 + 60 * i, 20.0 * GIB) for i in range(11)]
    markup = line_chart(
        [Series("used", used), Series("allocated", allocated)],
        "memory",
        units.size,
        width=640,
        height=200,
        binary=True,
    )
    svg = svg_of(markup)
    plot_w = 640 - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = 200 - MARGIN_TOP - MARGIN_BOTTOM
    lines = points_of(svg)
    assert list(lines) == ["used", "allocated"]
    for i, (x, y) in enumerate(lines["used"]):
        assert x == pytest.approx(MARGIN_LEFT + i / 10 * plot_w, abs=0.06)
        # the axis tops at 20 GiB (a round number at the largest value)
        assert y == pytest.approx(MARGIN_TOP + plot_h - i / 20 * plot_h, abs=0.06)
    assert {y for _, y in lines["allocated"]} == {float(MARGIN_TOP)}
    y_labels = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "y-label"]
    assert y_labels == ["0 B", "5 GiB", "10 GiB", "15 GiB", "20 GiB"]
    x_labels = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "x-label"]
    assert x_labels == ["20:30", "20:35", "20:40"]  # 5-minute ticks: at most 6 labels
    legend = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "legend"]
    assert legend == ["used", "allocated"]
    desc = svg.findtext(f"{SVG}desc") or ""
    assert "used: latest 10 GiB at 20:40 UTC, lowest 0 B, highest 10 GiB, 11 points" in desc
    table = parse(markup).find("table")
    assert table is not None
    assert table.get("class") == "sr-only"
    rows = [[c.text for c in row] for row in table.iter("tr")]
    assert rows[0] == ["time", "used", "allocated"]
    assert rows[-1] == ["20:40 UTC", "10 GiB", "20 GiB"]


def test_a_byte_axis_tops_at_a_round_binary_size() -> None:
    pts = [(T0, 0.0), (T0 + 60, 1.6 * (1 << 40))]  # 1.6 TiB: the axis tops at 2 TiB
    svg = svg_of(line_chart([Series("used", pts)], "memory", units.size, binary=True))
    y_labels = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "y-label"]
    assert y_labels == ["0 B", "512 GiB", "1 TiB", "1.5 TiB", "2 TiB"]


def test_series_differ_by_dash_not_colour_alone() -> None:
    pts = [(T0, 1.0), (T0 + 60, 2.0)]
    svg = svg_of(line_chart([Series("a", pts), Series("b", pts)], "t", units.percent))
    dashes = [g.find(f"{SVG}polyline") for g in svg.iter(f"{SVG}g")]
    assert [None if d is None else d.get("stroke-dasharray") for d in dashes] == [None, "6 3"]


def test_an_empty_chart_says_the_history_is_filling() -> None:
    svg = svg_of(line_chart([Series("used", [])], "memory", units.size))
    texts = [t.text for t in svg.iter(f"{SVG}text")]
    assert texts == [FILLING]
    assert "history is filling" in FILLING
    assert svg.findtext(f"{SVG}desc") == "used: no data."


def test_names_are_escaped_everywhere() -> None:
    pts = [(T0, 1.0), (T0 + 60, 2.0)]
    for markup in (
        line_chart([Series(HOSTILE, pts)], HOSTILE, units.percent),
        bar(HOSTILE, 1, 2, 3, units.cores),
        sparkline(pts, HOSTILE, units.percent),
    ):
        assert "<script>" not in markup
        tree = parse(markup)  # well-formed: nothing broke out of its attribute or element
        assert any(HOSTILE in (e.text or "") for e in tree.iter())


def test_sparkline_spans_its_box() -> None:
    pts = [(T0 + 10 * i, v) for i, v in enumerate((0.0, 5.0, 10.0))]
    svg = svg_of(sparkline(pts, "util", units.percent_100, width=120, height=24))
    line = svg.find(f"{SVG}polyline")
    assert line is not None
    coords = [tuple(map(float, p.split(","))) for p in (line.get("points") or "").split()]
    assert coords == [(1.0, 23.0), (60.0, 12.0), (119.0, 1.0)]
    assert svg.findtext(f"{SVG}title") == "util: latest 10%, lowest 0%, highest 10%"


@pytest.mark.parametrize(
    ("value", "top"), [(0.0, 1.0), (0.7, 1.0), (1.3, 2.0), (2.2, 2.5), (37.0, 50.0), (80.0, 100.0)]
)
def test_axis_tops_are_round(value: float, top: float) -> None:
    assert nice_top(value) == top


def test_time_ticks_are_round_and_within_the_span() -> None:
    ticks = time_ticks(T0 + 5, T0 + 3600)  # an hour: quarter hours
    assert [units.clock(t) for t in ticks] == ["20:45", "21:00", "21:15", "21:30"]
    day = time_ticks(T0, T0 + 86400)  # a day: every 6 hours
    assert [units.clock(t) for t in day] == ["00:00", "06:00", "12:00", "18:00"]
