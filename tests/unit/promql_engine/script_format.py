"""The script format of Prometheus 2.42's PromQL engine tests (``promql/testdata/*.test``).

Written from the description in promql/test.go and the series grammar in
promql/parser/generated_parser.y and lex.go of the v2.42.0 tag (no code copied):

- Lines are trimmed; a line starting with ``#`` is blank. Commands are
  ``clear``, ``load <interval>`` and ``eval[_fail|_ordered] instant at <time> <expr>``.
- ``load`` is followed by series descriptions up to a blank line:
  ``metric{labels} item item ...``, the items ``_`` (no sample), ``_xN``
  (N missing), ``v`` (a number or ``stale``), ``vxN`` (N+1 copies) and
  ``v+dxN`` / ``v-dxN`` (N+1 samples, ``d`` added after each, in float64). The
  k-th value is at ``k * interval`` from time 0.
- ``eval`` is followed by its expected result up to a blank line: one
  ``labels value`` line per series, or one line that is a number (a scalar);
  no line at all expects an empty vector.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from collector.promql.histogram import parse_go_float
from collector.tsdb.series import STALE

Labels = tuple[tuple[str, str], ...]
"""A label set as sorted ``(name, value)`` pairs, ``__name__`` included."""


class ScriptError(ValueError):
    """A line the format does not allow."""


@dataclass(frozen=True, slots=True)
class Load:
    """``load``: series of samples ``interval_ms`` apart from time 0 (None: no sample there).

    A series described twice keeps its last description, as test.go's map of them does.
    """

    interval_ms: int
    series: dict[Labels, list[float | None]]


@dataclass(frozen=True, slots=True)
class Clear:
    """``clear``: the storage starts empty again."""


@dataclass(slots=True)
class Eval:
    """``eval``: ``expr`` at ``time_ms`` and what it must give.

    ``expected`` maps each expected label set to its 1-based line position
    and value; ``scalar`` is the expected number where the result is one.
    """

    expr: str
    time_ms: int
    line: int
    ordered: bool = False
    fail: bool = False
    expected: dict[Labels, tuple[int, float]] = field(default_factory=dict)
    scalar: float | None = None


Command = Load | Clear | Eval

_EVAL = re.compile(r"^eval(?:_(fail|ordered))?\s+instant\s+(?:at\s+(.+?))?\s+(.+)$")
_LOAD = re.compile(r"^load\s+(.+?)$")
_SPACE = re.compile(r"[\t ]+")


def parse_script(text: str) -> list[Command]:
    """The commands of one ``.test`` file; raise :class:`ScriptError` on a malformed line."""
    lines = [_clean(line) for line in text.split("\n")]
    commands: list[Command] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line:
            i += 1
            continue
        word = _SPACE.split(line, maxsplit=1)[0].lower()
        if word == "clear":
            commands.append(Clear())
            i += 1
        elif word == "load":
            i = _parse_load(lines, i, commands)
        elif word.startswith("eval"):
            i = _parse_eval(lines, i, commands)
        else:
            raise ScriptError(f"line {i + 1}: invalid command {line!r}")
    return commands


def _clean(line: str) -> str:
    line = line.strip()
    return "" if line.startswith("#") else line


def _block(lines: list[str], first: int) -> list[str]:
    """The lines from ``first`` up to the next blank one."""
    end = first
    while end < len(lines) and lines[end]:
        end += 1
    return lines[first:end]


def _parse_load(lines: list[str], i: int, commands: list[Command]) -> int:
    found = _LOAD.match(lines[i])
    if not found:
        raise ScriptError(f"line {i + 1}: invalid load command")
    interval_ms = parse_duration_ms(found.group(1))
    body = _block(lines, i + 1)
    commands.append(Load(interval_ms, dict(parse_series(line) for line in body)))
    return i + 1 + len(body)


def _parse_eval(lines: list[str], i: int, commands: list[Command]) -> int:
    found = _EVAL.match(lines[i])
    if not found:
        raise ScriptError(f"line {i + 1}: invalid eval command")
    mod, at, expr = found.groups()
    cmd = Eval(expr, parse_duration_ms(at or ""), i + 1, mod == "ordered", mod == "fail")
    commands.append(cmd)
    i += 1
    for pos, line in enumerate(_block(lines, i), start=1):
        i += 1
        number = parse_number(line)
        if number is not None:
            # test.go stops reading expectations at a number: what follows is a command
            cmd.scalar = number
            break
        labels, values = parse_series(line)
        if len(values) != 1 or values[0] is None:
            raise ScriptError(f"line {i}: an expected series has one value")
        cmd.expected[labels] = (pos, values[0])
    return i


_DURATION = re.compile(
    r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?"
)
_UNIT_MS = (365 * 86_400_000, 7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1000, 1)


def parse_duration_ms(text: str) -> int:
    """Prometheus' duration (``model.ParseDuration``: units y w d h m s ms, in that order)."""
    if text == "0":
        return 0
    found = _DURATION.fullmatch(text)
    if not text or not found:
        raise ScriptError(f"not a valid duration string: {text!r}")
    return sum(int(n) * unit for n, unit in zip(found.groups(), _UNIT_MS, strict=True) if n)


_GO_INT = re.compile(r"([+-]?)(?:0[xX]([0-9a-fA-F]+)|0[bB]([01]+)|0[oO]?([0-7]+)|([1-9][0-9]*|0))")


def parse_number(text: str) -> float | None:
    """Go's ``strconv.ParseInt(text, 0, 64)``, else ``strconv.ParseFloat(text, 64)``; None if neither.

    What test.go's ``parseNumber`` and the parser's ``number`` do: base 0 reads
    ``0x1f`` as hex and ``010`` as octal, as Go does (digit separators, which
    no script uses, are not read).
    """
    found = _GO_INT.fullmatch(text)
    if found:
        sign, hexa, binary, octal, decimal = found.groups()
        digits, base = next(
            (d, b) for d, b in ((hexa, 16), (binary, 2), (octal, 8), (decimal, 10)) if d
        )
        value = int(digits, base) * (-1 if sign == "-" else 1)
        if -(2**63) <= value < 2**63:
            return float(value)
    return parse_go_float(text)


_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(
    r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|`[^`]*`)\s*"
)
_NUMBER = r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d*)?|(?i:inf|nan))"
_ITEM = re.compile(
    rf"(?:(?P<blank>_)|(?P<value>[+-]?{_NUMBER}|stale))(?:(?P<delta>[+-]{_NUMBER})?x(?P<times>\d+))?"
)
_LABEL_SET_END = re.compile(r"\s*\}")


def parse_series(line: str) -> tuple[Labels, list[float | None]]:
    """A series description: its labels (``__name__`` included) and values (None: omitted)."""
    labels: dict[str, str] = {}
    pos = 0
    name = _METRIC.match(line)
    if name:
        labels["__name__"] = name.group()
        pos = name.end()
    if line.startswith("{", pos):
        pos = _parse_label_set(line, pos + 1, labels)
    elif not name:
        raise ScriptError(f"no metric in series description {line!r}")
    rest = line[pos:]
    if rest and not rest[0].isspace():
        raise ScriptError(f"unexpected {rest!r} in series description")
    values: list[float | None] = []
    for item in rest.split():
        values.extend(_expand(item))
    return tuple(sorted(labels.items())), values


def _parse_label_set(line: str, pos: int, labels: dict[str, str]) -> int:
    """Read ``name="value", ...}`` from ``pos`` into ``labels``; return where it ends."""
    while True:
        end = _LABEL_SET_END.match(line, pos)
        if end:
            return end.end()
        found = _LABEL.match(line, pos)
        if not found:
            raise ScriptError(f"bad label set in {line!r}")
        labels[found.group(1)] = go_unquote(found.group(2))
        pos = found.end()
        if line.startswith(",", pos):
            pos += 1
        elif not line.startswith("}", pos):
            raise ScriptError(f"bad label set in {line!r}")


def _expand(item: str) -> list[float | None]:
    """One item of a value sequence, expanded (the grammar's ``series_item``)."""
    found = _ITEM.fullmatch(item)
    if not found:
        raise ScriptError(f"bad series value {item!r}")
    times = None if found["times"] is None else int(found["times"])
    if found["blank"]:
        return [None] * (1 if times is None else times)
    value = _value(found["value"])
    if times is None:
        return [value]
    delta = 0.0 if found["delta"] is None else _number(found["delta"])
    out: list[float | None] = []
    for _ in range(times + 1):
        out.append(value)
        value += delta
    return out


def _value(text: str) -> float:
    return STALE if text == "stale" else _number(text)


def _number(text: str) -> float:
    """A NUMBER token with its sign: the parser's ``number`` (Inf and NaN are keywords)."""
    sign = -1.0 if text.startswith("-") else 1.0
    number = parse_number(text.lstrip("+-"))
    if number is None:
        raise ScriptError(f"bad number {text!r}")
    return sign * number


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_ESCAPE = re.compile(
    r"\\(?:([abfnrtv\\'\"])|x([0-9a-fA-F]{2})|([0-7]{3})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8}))"
)


def go_unquote(text: str) -> str:
    """Go's ``strconv.Unquote`` of a label value: ``"..."``, ``'...'`` or a raw ```...```."""
    quote, body = text[0], text[1:-1]
    if quote == "`":
        return body
    if "\\" in _ESCAPE.sub("", body):
        raise ScriptError(f"invalid escape in {text}")

    def one(m: re.Match[str]) -> str:
        simple, hex2, octal, u4, u8 = m.groups()
        if simple:
            return _ESCAPES.get(simple, simple)
        return chr(int(octal, 8)) if octal else chr(int(hex2 or u4 or u8, 16))

    return _ESCAPE.sub(one, body)
