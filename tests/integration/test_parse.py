"""The exposition parser: prometheus_client is the oracle on valid input; bad input fails cleanly."""

from __future__ import annotations

import contextlib
import math
from itertools import compress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from collector.exposition.parse import SAMPLE, Frame, ParseError, line_kind, parse, parse_series
from collector.exposition.render import escape_label_value, format_value

NAMES = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)
LABEL_NAMES = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,12}", fullmatch=True).filter(
    lambda n: not n.startswith("__")
)
LABEL_VALUES = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
HELP_TEXT = st.text(st.characters(codec="ascii", exclude_characters="\\\n\r"), max_size=10)
VALUES = st.floats(allow_nan=True, allow_infinity=True)


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, list[tuple[str, dict[str, str], float, float | None]]]:
    """A valid text-format body and the samples it holds."""
    lines: list[str] = []
    expected = []
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    for name in names:
        help_text = draw(HELP_TEXT)
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {draw(st.sampled_from(['gauge', 'untyped']))}")
        label_sets = draw(
            st.lists(st.dictionaries(LABEL_NAMES, LABEL_VALUES, max_size=4), min_size=1, max_size=4)
        )
        for labels in label_sets:
            value = draw(VALUES)
            timestamp = draw(st.none() | st.integers(-(10**12), 10**13))
            text = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items())
            braces: bool = draw(st.booleans())
            series = f"{name}{{{text}}}" if labels or braces else name
            line = f"{series} {format_value(value).decode()}"
            if timestamp is not None:
                line += f" {timestamp}"
            lines.append(line)
            expected.append((name, labels, value, None if timestamp is None else timestamp / 1000))
    return "\n".join(lines) + "\n", expected


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@settings(max_examples=300, deadline=None)
@given(bodies())
def test_parser_agrees_with_prometheus_client(
    case: tuple[str, list[tuple[str, dict[str, str], float, float | None]]],
) -> None:
    text, expected = case
    oracle = [s for family in text_string_to_metric_families(text) for s in family.samples]
    ours = parse(text.encode()).samples
    assert len(ours) == len(oracle) == len(expected)
    for mine, theirs in zip(ours, oracle, strict=True):
        assert mine.name == theirs.name
        assert dict(mine.labels) == theirs.labels
        assert _same(mine.value, theirs.value)
        theirs_ts = None if theirs.timestamp is None else float(theirs.timestamp)
        assert mine.timestamp == pytest.approx(theirs_ts)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_parse_error(data: bytes) -> None:
    for openmetrics in (False, True):
        with contextlib.suppress(ParseError):
            parse(data, openmetrics)
    assert Frame.of(data).cut(data) is not None, "a body has its own frame"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_series_text_raises_only_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_series(text.encode())


def test_escapes_round_trip() -> None:
    body = b'm{a="q\\"uote",b="back\\\\slash",c="new\\nline",d="{br,ace}=",e="\xc3\xbc\xe4\xb8\xad"} 1\n'
    (sample,) = parse(body).samples
    assert dict(sample.labels) == {
        "a": 'q"uote',
        "b": "back\\slash",
        "c": "new\nline",
        "d": "{br,ace}=",
        "e": "ü中",
    }


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("NaN", math.nan),
        ("+Inf", math.inf),
        ("-Inf", -math.inf),
        ("2.87244288e+08", 287244288.0),
        ("0", 0.0),
    ],
)
def test_special_values(text: str, value: float) -> None:
    (sample,) = parse(f"m {text}\n".encode()).samples
    assert _same(sample.value, value)


def test_help_type_and_comments() -> None:
    body = b"# a free comment\n# HELP m some \\\\ help\\nmore\n# TYPE m gauge\n\nm 1\n"
    parsed = parse(body)
    assert parsed.helps == {"m": "some \\ help\nmore"}
    assert parsed.types == {"m": "gauge"}
    assert [s.name for s in parsed.samples] == ["m"]


def test_openmetrics_eof_timestamps_and_exemplars() -> None:
    body = b'# TYPE c counter\nc_total{a="b"} 3 1.5 # {trace="x"} 1\n# EOF\n'
    (sample,) = parse(body, openmetrics=True).samples
    assert (sample.name, sample.value, sample.timestamp) == ("c_total", 3.0, 1.5)
    with pytest.raises(ParseError, match="without # EOF"):
        parse(b"m 1\n", openmetrics=True)
    with pytest.raises(ParseError, match="after # EOF"):
        parse(b"m 1\n# EOF\nm 2\n", openmetrics=True)


@pytest.mark.parametrize(
    ("body", "lineno", "words"),
    [
        (b"ok 1\nbroken{ 1\n", 2, "invalid label"),
        (b'ok 1\n\nx{a="b"} one\n', 3, "invalid value"),
        (b'x{a="b",a="c"} 1\n', 1, "duplicate label"),
        (b'x{a="\\q"} 1\n', 1, "invalid escape"),
        (b"<html><body>502</body></html>\n", 1, "invalid metric name"),
        (b"x 1_000\n", 1, "invalid value"),
        (b"# TYPE x nonsense\nx 1\n", 1, "unknown metric type"),
        (b"x\n", 1, "blank before the value"),
        (b"x 1 2 3\n", 1, "optional timestamp"),
    ],
)
def test_errors_name_the_line(body: bytes, lineno: int, words: str) -> None:
    with pytest.raises(ParseError, match=words) as info:
        parse(body)
    assert info.value.lineno == lineno
    assert str(info.value).startswith(f"line {lineno}:")


def _samples(body: bytes) -> tuple[tuple[bytes, ...], list[bytes]] | None:
    return Frame.of(body).cut(body)


def test_a_frame_cuts_series_and_values() -> None:
    body = b'# HELP a x\n# TYPE a gauge\na{l="has space"} 1\na 2\n\n#\n# HELP b y\nb 3\n'
    assert _samples(body) == ((b'a{l="has space"}', b"a", b"b"), [b"1", b"2", b"3"])
    assert _samples(b"") == ((), [])
    assert _samples(b"# only a comment\n") == ((), [])


_LINES = st.lists(st.text(alphabet="# a1", max_size=4).map(str.encode), min_size=1, max_size=6)


@settings(max_examples=500, deadline=None)
@given(_LINES, _LINES)
def test_a_frame_cuts_another_body_as_its_own_frame_would_or_not_at_all(
    mine: list[bytes], other: list[bytes]
) -> None:
    """Lines of every kind (comments, marks, blanks, leading blanks) in any order.

    Where the samples were, the lines are the layout's to check (a text that is
    no sample is no layout's), so only bodies with samples there are compared.
    """
    frame = Frame.of(b"\n".join(mine))
    body = b"\n".join(other)
    cut = frame.cut(body)
    if all(line_kind(line) == SAMPLE for line in compress(other, frame.samples)):
        assert cut is None or cut == Frame.of(body).cut(body)
    # new samples where the samples were, every other line as it was: cut by this frame
    resampled = [b"a 2" if frame.samples[i] else line for i, line in enumerate(mine)]
    assert frame.cut(b"\n".join(resampled)) == Frame.of(b"\n".join(resampled)).cut(
        b"\n".join(resampled)
    )
    assert frame.cut(b"\n".join(resampled)) is not None


@pytest.mark.parametrize(
    "other",
    [
        b"# HELP a x\na 1\na 2\n# HELP b y\nb 3",  # no final newline: one line fewer
        b"# HELP a x\na 1\na 2\nc 5\nb 3\n",  # a sample where a comment was
        b"# HELP a x\na 1\na 2\n#c\nb 3\n",  # a comment without a blank
    ],
)
def test_a_body_with_another_frame_is_not_cut_by_this_one(other: bytes) -> None:
    """Lines where samples were are the layout's to check (a blank one is a text no layout has)."""
    frame = Frame.of(b"# HELP a x\na 1\na 2\n# HELP b y\nb 3\n")
    assert frame.cut(other) is None
