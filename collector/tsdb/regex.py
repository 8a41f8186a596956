"""Regular expressions as Prometheus 2.42 reads them: Go's RE2 syntax, run by Google's RE2.

Prometheus compiles every label matcher (``=~``, ``!~``), every ``match[]`` selector and
``label_replace``'s pattern with Go's ``regexp`` (RE2 syntax: ``(?i)`` anywhere, ``\\pL``,
``[[:alpha:]]``, ``\\Q…\\E``, ``\\z``, ASCII ``\\d\\w\\s\\b``; no lookarounds or
backreferences), anchored at both ends. Python's ``re`` is another language, so these go
through the ``google-re2`` binding of the C++ RE2, from which Go's package was written. The
two differ where this module steps in:

- C++ RE2 takes ``\\C`` (one byte), ``(?<name>…)``, capture names of any Unicode word
  characters, and the scripts of Unicode 14 and 15; Go 1.19's parser (2.42's) takes none of
  them, so :func:`_scan` rejects them as Go does.
- C++ RE2 refuses a pattern whose compiled program outgrows its memory budget
  (:data:`MAX_MEM`): ``\\pL{1000}`` fails with "expression too large" where Go compiles it.
- Left as it is: characters first assigned in Unicode 14 or 15 belong to RE2's classes
  (``\\pL``, ``(?i)`` folding) and not to Go 1.19's Unicode 13 tables.

Why a query cannot stall on a pattern: RE2 matches in time linear in the text (an automaton,
no backtracking: ``(a+)+b`` over 100,000 ``a`` answers at once), and compiling a pattern
stays within its memory budget, which also bounds the time (``\\pL{1000}`` is refused in
about 10 ms; an alternation of 300,000 names, 2 MB, compiles in about 2 s). What needs more
than the budget is an error, not a slower query.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import re2  # type: ignore[import-untyped, unused-ignore]

# The binding's compiled class, used directly: re2.compile() keeps its own cache of 128
# patterns beside ours (up to 128 budgets of memory), and its str matching cost 2.4 µs a
# label value against 0.55 µs here (measured on short values), most of a selector's regex work.
from re2 import _re2  # type: ignore[import-untyped, unused-ignore]

MAX_MEM = 8 << 20
"""RE2's memory budget for one compiled pattern (its default): compiling ``\\pL{300}``
takes about 0.1 s within it, and a pattern that needs more fails instead of growing."""

CACHE_SIZE = 64
"""Compiled patterns kept by each of the two caches, matchers' and ``label_replace``'s (least
recently used dropped): a dashboard's regexes are compiled once, and each pattern kept
holds at most one budget of :data:`MAX_MEM`."""

_ANCHOR_BOTH = _re2.RE2.Anchor.ANCHOR_BOTH
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED

_NEWER_SCRIPTS = frozenset(
    {"Cypro_Minoan", "Old_Uyghur", "Tangsa", "Toto", "Vithkuqi"}  # Unicode 14.0
    | {"Kawi", "Nag_Mundari"}  # Unicode 15.0
)
"""Script names RE2 knows and Go 1.19 (Unicode 13.0.0 tables) does not."""

_MAX_HEIGHT = 1000
"""Go's ``maxHeight``: the deepest parse tree ``regexp/syntax`` takes; C++ RE2 has no such limit."""

_CAPTURE_NAME = re.compile(r"[A-Za-z0-9_]+")
"""Go 1.19's ``isValidCaptureName``: ASCII letters, digits and underscores."""

_GO_WORDING = {
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "pattern too large - compile failed": "expression too large",
}
"""RE2's error codes in the words of Go's ``regexp/syntax`` (``ErrorCode`` strings)."""


class RegexError(ValueError):
    """A pattern Go's ``regexp`` rejects (or RE2's memory budget does); the message is Go's
    ``error parsing regexp: <what>: `<where>```."""

    def __init__(self, what: str, where: str) -> None:
        shown = where if len(where) <= 200 else where[:200] + "…"
        super().__init__(f"error parsing regexp: {what}: `{shown}`")


@dataclass(frozen=True, slots=True, eq=False)
class Regex:
    """One compiled pattern; ``names`` are its capture groups' names in order ("" unnamed),
    with the whole match first."""

    pattern: str
    names: tuple[str, ...]
    _compiled: Any

    def fullmatch(self, text: str) -> bool:
        """Whether the whole of ``text`` matches."""
        data = text.encode("utf-8", "surrogatepass")
        spans = self._compiled.Match(_ANCHOR_BOTH, data, 0, len(data))
        return bool(spans[0][0] >= 0)

    def search(self, text: str) -> list[str | None] | None:
        """The leftmost-first match in ``text``: every group's text (None where a group took
        no part), the whole match first; None without a match."""
        data = text.encode("utf-8", "surrogatepass")
        spans = self._compiled.Match(_UNANCHORED, data, 0, len(data))
        if spans[0][0] < 0:
            return None
        # Spans fall between whole characters: without \C, RE2 matches UTF-8 by code point.
        return [None if a < 0 else data[a:b].decode("utf-8", "surrogatepass") for a, b in spans]

    def expand(self, template: str, groups: Sequence[str | None]) -> str:
        """Go's ``Regexp.ExpandString``: ``template`` with ``$1``, ``${1}``, ``$name``,
        ``${name}`` replaced by those groups of a :meth:`search` and ``$$`` by ``$``.

        The name after ``$`` is the longest run of letters, digits and underscores
        (``$1x`` is group "1x"); a name of digits is a group number; a group that does not
        exist or took no part is empty; a ``$`` that starts no name stays as it is.
        """
        out: list[str] = []
        while True:
            before, dollar, template = template.partition("$")
            out.append(before)
            if not dollar:
                return "".join(out)
            if template.startswith("$"):
                out.append("$")
                template = template[1:]
                continue
            found = _template_name(template)
            if found is None:
                out.append("$")
                continue
            name, template = found
            out.append(self._group(name, groups))

    def _group(self, name: str, groups: Sequence[str | None]) -> str:
        """The text of group ``name`` (a number or a name) in ``groups``, "" if none."""
        number = _group_number(name)
        if number >= 0:
            found = groups[number] if number < len(groups) else None
            return found or ""
        for index, known in enumerate(self.names):
            if index and known == name and groups[index] is not None:
                return groups[index] or ""  # Go takes the first group so named that matched
        return ""


def _template_name(template: str) -> tuple[str, str] | None:
    """Go's ``extract``: the name after a ``$`` (bare or in braces) and the rest, or None."""
    brace = template.startswith("{")
    body = template[1:] if brace else template
    end = 0
    while end < len(body) and (body[end].isalpha() or body[end].isdecimal() or body[end] == "_"):
        end += 1  # unicode.IsLetter, unicode.IsDigit (Nd) or '_'
    if end == 0:
        return None
    if brace:
        if not body.startswith("}", end):
            return None
        return body[:end], body[end + 1 :]
    return body[:end], body[end:]


def _group_number(name: str) -> int:
    """The group a name of ASCII digits numbers (Go stops past 1e8 and refuses a leading
    zero), or -1 for a name that is not a number."""
    number = 0
    for char in name:
        if not "0" <= char <= "9" or number >= 100_000_000:
            return -1
        number = number * 10 + ord(char) - ord("0")
    if name[0] == "0" and len(name) > 1:
        return -1
    return number


def escape(text: str) -> str:
    """A pattern that matches exactly ``text`` (RE2's ``QuoteMeta``, which Go reads alike)."""
    return str(re2.escape(text))


@functools.lru_cache(maxsize=CACHE_SIZE)
def matcher_regex(value: str) -> Regex:
    """The regex of a label matcher ``=~ value`` or ``!~ value``, as 2.42's
    ``NewFastRegexMatcher``: ``^(?:value)$`` must compile, and ``value`` must also parse
    on its own (so ``a)|(b`` is refused, not read as two anchored halves).

    Raise :class:`RegexError` for either failure, the wrapped pattern's first.
    """
    wrapped = _compile(f"^(?:{value})$", capture=False)
    _compile(value, capture=False)
    return wrapped


@functools.lru_cache(maxsize=CACHE_SIZE)
def replace_regex(value: str) -> Regex:
    """The regex of ``label_replace(…, value)``: 2.42 compiles ``^(?:value)$`` alone, without
    the matchers' parse of ``value``, so ``a)|(b`` means "starts with a or ends with b"
    there. Use :meth:`Regex.search` with it. Raise :class:`RegexError` if it does not compile."""
    return _compile(f"^(?:{value})$", capture=True)


def _compile(pattern: str, capture: bool) -> Regex:
    options = re2.Options()
    options.max_mem = MAX_MEM
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.never_capture = not capture
    try:
        data = pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise RegexError("invalid UTF-8", pattern) from None
    compiled = _re2.RE2(data, options)
    if not compiled.ok():
        raise _from_re2(compiled.error(), pattern)
    names, depth = _scan(pattern)
    if depth + 2 > _MAX_HEIGHT:
        # Go's tree under ^(?:…)$: a concatenation, the captures, a leaf (a lower bound).
        raise RegexError("expression nests too deeply", pattern)
    if capture:
        assert len(names) == compiled.NumberOfCapturingGroups(), pattern
    return Regex(pattern, ("", *names) if capture else ("",), compiled)


def _from_re2(error: bytes | str, pattern: str) -> RegexError:
    text = error.decode("utf-8", "replace") if isinstance(error, bytes) else error
    code, _, where = text.partition(": ")
    return RegexError(_GO_WORDING.get(code, code), where or pattern)


def _scan(pattern: str) -> tuple[list[str], int]:
    """The capture groups' names of a pattern RE2 compiled, in order ("" for unnamed), and
    how deep captures nest in it; raise :class:`RegexError` for what RE2 took and Go 1.19's
    ``regexp/syntax`` refuses.

    It walks the pattern as Go's parser does: ``\\Q…\\E`` is literal to its end, an escape
    is one character or a braced ``\\x{…}``, ``\\p{…}``, and a class runs to its first
    ``]`` that is not its first character, with ``[:name:]`` inside it whole.
    """
    names: list[str] = []
    groups: list[bool] = []  # the open groups: whether each captures
    depth = deepest = 0
    at, end = 0, len(pattern)
    while at < end:
        char = pattern[at]
        if char == "\\":
            at = _escape(pattern, at, in_class=False)
        elif char == "[":
            at = _class(pattern, at)
        elif char == "(":
            at, captures = _group(pattern, at, names)
            if captures is not None:
                groups.append(captures)
                depth += captures
                deepest = max(deepest, depth)
        else:
            if char == ")" and groups:
                depth -= groups.pop()
            at += 1
    return names, deepest


def _escape(pattern: str, at: int, in_class: bool) -> int:
    """Where the escape at ``at`` ends; ``\\C`` and the newer scripts are refused."""
    kind = pattern[at + 1 : at + 2]
    if kind == "C":
        raise RegexError("invalid escape sequence", "\\C")
    if kind == "Q" and not in_class:
        close = pattern.find("\\E", at + 2)
        return len(pattern) if close < 0 else close + 2
    if kind in ("p", "P", "x") and pattern.startswith("{", at + 2):
        close = pattern.find("}", at + 3)
        if close < 0:
            return len(pattern)
        if kind != "x" and pattern[at + 3 : close].removeprefix("^") in _NEWER_SCRIPTS:
            raise RegexError("invalid character class range", pattern[at : close + 1])
        return close + 1
    return at + 2


def _class(pattern: str, at: int) -> int:
    """Where the character class opening at ``at`` ends (past its ``]``)."""
    at += 2 if pattern.startswith("[^", at) else 1
    first = True
    while at < len(pattern):
        char = pattern[at]
        if char == "]" and not first:
            return at + 1
        first = False
        if char == "\\":
            at = _escape(pattern, at, in_class=True)
        elif pattern.startswith("[:", at) and (close := pattern.find(":]", at + 2)) >= 0:
            at = close + 2
        else:
            at += 1
    return at


def _group(pattern: str, at: int, names: list[str]) -> tuple[int, bool | None]:
    """Past the opening of the group at ``at``, and whether it captures (None for flags
    alone, ``(?i)``); a named group's name is kept, ``(?<`` is refused."""
    if pattern.startswith("(?P<", at):
        close = pattern.find(">", at + 4)
        name = pattern[at + 4 : close]
        if not _CAPTURE_NAME.fullmatch(name):
            raise RegexError("invalid named capture", pattern[at : close + 1])
        names.append(name)
        return close + 1, True
    if pattern.startswith("(?<", at):
        raise RegexError("invalid or unsupported Perl syntax", "(?<")
    if pattern.startswith("(?", at):
        close = min(i for i in (pattern.find(":", at + 2), pattern.find(")", at + 2)) if i >= 0)
        return close + 1, False if pattern[close] == ":" else None
    names.append("")
    return at + 1, True
