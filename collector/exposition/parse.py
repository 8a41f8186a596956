"""Parse Prometheus text format 0.0.4 and OpenMetrics 1.0 bodies.

Why our own parser: prometheus_client's ``text_string_to_metric_families`` builds
a Metric and a Sample object per line and runs at about 26k samples/s here,
while one collector ingests every monitor of a cluster (1,000 nodes are ~248k
samples per scrape round). The work is split in two, like Prometheus' own
``promparse``:

* :class:`Frame` is the steady-state fast path. It cuts a whole body into
  series texts and value texts with C-level ``bytes`` operations only and
  validates nothing but where the samples are: the normaliser compares the series
  texts with those of the target's last body (or looks up the texts it has
  already parsed), so a series seen before is never parsed again.
* :func:`parse` is the strict path, taken when a body holds a series text the
  cache does not know or a value that does not convert. It checks every line
  and raises :class:`ParseError` naming the first bad line, so one bad body
  fails only its own target's batch.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from itertools import compress, repeat

_NAME = re.compile(rb"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(rb'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*')
_LABEL_ESCAPES = {b"\\\\": "\\", b'\\"': '"', b"\\n": "\n"}
_ESCAPE = re.compile(rb"\\.")
_TEXT_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})
_OPENMETRICS_TYPES = frozenset(
    {"counter", "gauge", "histogram", "gaugehistogram", "stateset", "info", "summary", "unknown"}
)

Labels = tuple[tuple[str, str], ...]


class ParseError(ValueError):
    """A body that cannot be parsed; ``lineno`` is 1-based."""

    def __init__(self, lineno: int, message: str) -> None:
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample line: ``series`` is the line's name-and-labels text exactly as sent."""

    series: bytes
    name: str
    labels: Labels
    value: float
    timestamp: float | None = None


@dataclass(slots=True)
class Body:
    """Everything a strict parse found in one body, in body order."""

    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    helps: dict[str, str] = field(default_factory=dict)


SAMPLE, COMMENT, MARK, BLANK, ODD_MARK, ODD_BLANK = range(6)
"""What a line of a body is (:func:`line_kind`)."""


def line_kind(line: bytes) -> int:
    """What one line is, cut at its last blank: a comment (its text starts with ``#``), a
    mark (no text, the value starts with ``#``), a blank line (neither), or a sample; the
    ``ODD_`` kinds are marks and blanks whose only blank leads the line."""
    text, blank, value = line.rpartition(b" ")
    if text[:1] == b"#":
        return COMMENT
    if text:
        return SAMPLE
    if value[:1] == b"#":
        return ODD_MARK if blank else MARK
    if not value:
        return ODD_BLANK if blank else BLANK
    return SAMPLE


@dataclass(frozen=True, slots=True)
class Frame:
    """Which lines of a body are samples (a 1 in ``samples``), and what the others are.

    A monitor's comments and blank lines stay where they are from scrape to
    scrape, so a later body with as many lines, whose other lines are still of
    their kind, has its samples where this one had them: :meth:`cut` takes
    them by mask, and cuts only those at their last blank.
    """

    samples: bytes
    comments: array[int]
    """Comment lines with a blank (they start with ``#`` and hold a blank)."""
    prefixes: tuple[bytes, ...]
    """Each comment line up to its first blank: the same line of a later body starts so."""
    marks: array[int]
    """Comment lines without a blank (they start with ``#`` and hold none)."""
    blanks: array[int]
    """Empty lines."""
    odd: tuple[tuple[int, int], ...]
    """(line, kind) of the other lines that are no samples (a leading blank), checked one by one."""

    @classmethod
    def of(cls, body: bytes) -> Frame:
        """The frame of ``body``."""
        lines = body.split(b"\n")
        groups: dict[int, array[int]] = {k: array("I") for k in (COMMENT, MARK, BLANK)}
        odd = []
        samples = bytearray(len(lines))
        for i, kind in enumerate(map(line_kind, lines)):
            if kind == SAMPLE:
                samples[i] = 1
            elif kind in groups:
                groups[kind].append(i)
            else:
                odd.append((i, kind))
        prefixes = tuple(lines[i][: lines[i].index(b" ") + 1] for i in groups[COMMENT])
        comments, marks, blanks = groups[COMMENT], groups[MARK], groups[BLANK]
        return cls(bytes(samples), comments, prefixes, marks, blanks, tuple(odd))

    def cut(self, body: bytes) -> tuple[tuple[bytes, ...], list[bytes]] | None:
        """The series and value texts of the sample lines; None if the body has another frame.

        C-level loops only: one split, a check per kind of line, one cut per sample line.
        """
        lines = body.split(b"\n")
        if len(lines) != len(self.samples):
            return None
        # a comment's first blank is kept (a stricter check than a blank anywhere, and cheaper)
        if not all(map(bytes.startswith, map(lines.__getitem__, self.comments), self.prefixes)):
            return None
        if self.marks:
            marks = list(map(lines.__getitem__, self.marks))
            if not all(map(bytes.startswith, marks, repeat(b"#"))) or any(
                map(bytes.__contains__, marks, repeat(b" "))
            ):
                return None
        if any(map(lines.__getitem__, self.blanks)):
            return None
        if self.odd and any(line_kind(lines[i]) != kind for i, kind in self.odd):
            return None
        cut = list(map(bytes.rpartition, compress(lines, self.samples), repeat(b" ")))
        if not cut:
            return (), []
        texts, _, values = zip(*cut, strict=True)
        return texts, list(values)


def parse_value(text: bytes) -> float:
    """Parse a sample value as Go's ParseFloat would (no ``_`` digit separators)."""
    try:
        if b"_" not in text:
            return float(text)
    except ValueError:
        pass
    raise ValueError(f"invalid value {text[:40]!r}")


def parse_series(series: bytes) -> tuple[str, Labels]:
    """Parse a series text (``name{a="b",...}``) into its name and labels."""
    name, labels, end = _scan_series(series)
    if end != len(series):
        raise ValueError(f"unexpected {series[end : end + 20]!r} after the series")
    return name, labels


def parse(body: bytes, openmetrics: bool = False) -> Body:
    """Parse and check a whole body; raise :class:`ParseError` at the first bad line."""
    out = Body()
    seen_eof = False
    for lineno, line in enumerate(body.split(b"\n"), 1):
        if seen_eof:
            if line:
                raise ParseError(lineno, "content after # EOF")
            continue
        if not line:
            continue
        try:
            if line[:1] == b"#":
                seen_eof = _comment(line, out, openmetrics)
            else:
                out.samples.append(_sample(line, openmetrics))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ParseError(lineno, str(exc)) from None
    if openmetrics and not seen_eof:
        raise ParseError(body.count(b"\n") + 1, "OpenMetrics body without # EOF")
    return out


def _scan_series(line: bytes) -> tuple[str, Labels, int]:
    match = _NAME.match(line)
    if match is None:
        raise ValueError(f"invalid metric name at {line[:40]!r}")
    name = match.group().decode()
    pos = match.end()
    if line[pos : pos + 1] != b"{":
        return name, (), pos
    pos += 1
    labels: list[tuple[str, str]] = []
    while True:
        stripped = line[pos:].lstrip(b" \t")
        if stripped[:1] == b"}":
            return name, tuple(labels), len(line) - len(stripped) + 1
        label = _LABEL.match(line, pos)
        if label is None:
            raise ValueError(f"invalid label at {line[pos : pos + 40]!r}")
        key = label.group(1).decode()
        if any(key == seen for seen, _ in labels):
            raise ValueError(f"duplicate label {key!r}")
        labels.append((key, _unescape_label(label.group(2))))
        pos = label.end()
        sep = line[pos : pos + 1]
        if sep == b"}":
            return name, tuple(labels), pos + 1
        if sep != b",":
            raise ValueError(f"expected ',' or '}}' at {line[pos : pos + 40]!r}")
        pos += 1


def _unescape_label(raw: bytes) -> str:
    if b"\\" in raw:

        def replace(match: re.Match[bytes]) -> bytes:
            escaped = _LABEL_ESCAPES.get(match.group())
            if escaped is None:
                raise ValueError(f"invalid escape {match.group()!r} in label value")
            return escaped.encode()

        raw = _ESCAPE.sub(replace, raw)
    return raw.decode()


def _sample(line: bytes, openmetrics: bool) -> Sample:
    name, labels, end = _scan_series(line)
    rest = line[end:]
    if rest[:1] not in (b" ", b"\t"):
        raise ValueError(f"expected a blank before the value at {rest[:40]!r}")
    if openmetrics and b" # " in rest:
        rest = rest.split(b" # ", 1)[0]  # an exemplar: not a sample of its own
    tokens = rest.split()
    if not 1 <= len(tokens) <= 2:
        raise ValueError(f"expected a value and an optional timestamp, got {rest[:60]!r}")
    value = parse_value(tokens[0])
    timestamp = None
    if len(tokens) == 2:
        timestamp = parse_value(tokens[1]) if openmetrics else _millis(tokens[1])
    return Sample(line[:end], name, labels, value, timestamp)


def _millis(text: bytes) -> float:
    try:
        return int(text) / 1000
    except ValueError:
        raise ValueError(f"invalid timestamp {text[:40]!r}") from None


def _comment(line: bytes, out: Body, openmetrics: bool) -> bool:
    """Record a HELP or TYPE line; return True at OpenMetrics' ``# EOF``."""
    if openmetrics and line == b"# EOF":
        return True
    parts = line.split(None, 3)
    if len(parts) < 3 or parts[1] not in (b"HELP", b"TYPE", b"UNIT"):
        if openmetrics:
            raise ValueError(f"invalid comment {line[:40]!r}")
        return False
    name = parts[2].decode()
    text = parts[3].decode() if len(parts) == 4 else ""
    if parts[1] == b"HELP":
        out.helps[name] = _unescape_help(text, openmetrics)
    elif parts[1] == b"TYPE":
        if text not in (_OPENMETRICS_TYPES if openmetrics else _TEXT_TYPES):
            raise ValueError(f"unknown metric type {text!r}")
        out.types[name] = text
    return False


def _unescape_help(text: str, openmetrics: bool) -> str:
    if "\\" not in text:
        return text
    table = {"\\\\": "\\", "\\n": "\n"}
    if openmetrics:
        table['\\"'] = '"'
    return re.sub(r"\\.", lambda m: table.get(m.group(), m.group()), text)
