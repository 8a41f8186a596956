"""Differential test: regular expressions in PromQL against a real Prometheus 2.42.

Series whose label ``v`` holds values chosen to tell regex dialects apart (upper and
lower case, ASCII and non-ASCII letters and digits, KELVIN SIGN and long s, newlines,
vertical tab, NUL, braces, parentheses) are written as OpenMetrics, imported with
``promtool tsdb create-blocks-from openmetrics`` and served by a real ``prometheus`` on
loopback; the same series sit in memory for our engine. Every pattern runs as a ``=~``
and a ``!~`` matcher, in ``label_replace`` and as a ``match[]`` of ``/api/v1/series``:
the same series (and labels) or the same error type; where Prometheus' error is a regex
parse error, ours says ``error parsing regexp`` too.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import prometheus_tool, real_prometheus
from test_promql import MemoryStorage
from test_promql_vs_prometheus import api, ask_ours, differences_from

from collector.promql.values import QueryError
from collector.web.promapi import _selectors

BASE = 1_700_000_000
AT = BASE + 30.0

VALUES = [
    *("team-a", "team-A", "TEAM-A", "Team-a", "teamx", "team-", "gpu-12", "gpu-"),
    *("a", "ab", "b", "aaaaa", "a" * 1000, "a" * 1001, "a.b", "axb", "a{,5}", "a)", "(b"),
    *("é", "É", "e", "E", "αβγ", "Ω", "😀", "٣", "3", "42", "_", "a_b", "A1"),
    *("k", "K", "\u212a", "s", "S", "\u017f", "ß", "SS"),
    *("\n", "x\ny", "foo\n", "foo", "\v", " ", "\t", "\f", "\r", "\x00z", "a\\b", 'q"'),
]
"""The label values, one series each; one more series has no ``v`` at all (the empty value).
Characters first assigned after Unicode 13 are left out: Go 1.19's tables lack them."""

PATTERNS = [
    # inline flags anywhere, flag groups, ungreedy
    *("(?i)team-a", "team-(?i)a", "(?i:team)-a", "(?i)team-(?-i:a)", "(?i)TEAM(?-i)-a"),
    *("(?is)x.y", "(?s)x.y", "x.y", "(?U)(a+)(a*)", "(a+)(a*)", "(?U)a{2,}", "(?i)"),
    *("(?)a", "(?i-s)e", "(?i-)e", "(?-)e", "(?x)a b", "(?m)foo$\n", "foo$\n", "(?m)^foo$"),
    # POSIX classes
    *("[[:alpha:]]", "[[:digit:]]+", "[[:space:]]", "[[:^alpha:]]", "[[:word:]]+"),
    *("(?i)[[:upper:]]", "[[:foo:]]", "[[:alpha:]", "[[:alpha:]-z]", "[]a]", "[^]a]"),
    # Unicode classes and scripts (2.42's are Unicode 13's)
    *(r"\pL", r"\p{Lu}", r"\PL", r"\p{Greek}+", r"\p{^Greek}", r"\P{^Greek}", r"\pN"),
    *(r"\p{Nd}", r"(?i)\p{Lu}", r"\p{Kawi}", r"\p{Cn}", r"\p{Cs}", r"[\p{Greek}\d]+"),
    *(r"\p{Any}", r"\pZ", r"\p{L", r"\pX"),
    # \Q…\E
    *(r"\Qa.b\E", r"\Qa.b", r"\Q(b\E", r"\Q\E", r"[\Q]\E]"),
    # anchors and end of text
    *(r"a\z", r"a\Z", r"\Aa", "^a$", "foo$", "foo\\n", "^", "$", r"foo\n$"),
    # Perl classes are ASCII; \s has no \v
    *(r"\d", r"\d+", r"\w", r"\s", r"\S", r"\D", r"\W", r"\bab\b", r"a\Bb", r"[\s\d]"),
    # repeats: the limit, nested products, a literal {,5}
    *("a{1000}", "a{1001}", "(a{500}){3}", "(a{10}){100}", "a{,5}", "a{2,}", "a{2,1}"),
    *("a{01}", "a**", "a*+", "a++", "(?>a)", "a{", "x{2}{3}"),
    # lookarounds, backreferences, named groups
    *("(?=a)a", "(?!b)a", "(?<=a)b", "(?<!a)b", r"(a)\1", "(?P<n>a)(?P=n)"),
    *("(?P<name>a)(b)?", "(?<name>a)", "(?P<é>a)", "(?P<a>x)|(?P<a>y)", "(?P<>a)"),
    # escapes
    *(r"\12", r"\012", r"\0z", r"\x61", r"\x{e9}", r"\x{1F600}", r"\u0041", r"\U0001F600"),
    *(r"[\b]", r"\C", r"\8", r"\_", r"\v", r"\e", r"\x{110000}", r"\a", r"\N{DIGIT ONE}"),
    # case folding: Unicode simple folds, not ß/SS
    *("(?i)k", "(?i)s", "(?i)ß", "(?i)é", "(?i)ss", "(?i)[k-l]"),
    # unbalanced: refused by a matcher, accepted by label_replace
    *("a)|(b", "x)|(y", "(a", "a)", "[a", "a\\", "*a", "a|*"),
    # one code point per dot; an empty pattern; a class that matches newline
    *(".", "..", "...", ".*", ".+", "[^a]", "", "a|", "|", "()", "[é-ê]", r"[^\x00-\x{10FFFF}]"),
    # Go's limit on nesting (its parse tree's height), a long alternation (a dashboard's "All")
    *("(" * 998 + "a" + ")" * 998, "(" * 999 + "a" + ")" * 999, "(?:" * 1001 + "a" + ")" * 1001),
    "|".join(f"value-{i}" for i in range(5000)) + "|team-a",
]

TEMPLATE = "<$0|$1|$2|${name}|${a}>"
"""label_replace's replacement for every pattern: the whole match and some groups."""

EXPANSIONS = [
    *("$1", "${1}", "$1x", "${1}x", "$idx", "${idx}", "$idxx", "${idx}x", "$$", "$$1"),
    *("\\1", "$", "x$", "${", "${1", "${}", "$-1", "$01", "$2", "$3", "$0", "$name"),
    *("${idx}${1}", "$1é", "$\u0661", "$_", "$123456789", "$1234567890", "a$$$1b", "${1}}"),
    *("$é", "${é}", "$ 1", "$\n1", "", "$1$2$1"),
]
"""Replacements for ``(.*)-(?P<idx>[0-9]+)`` over ``gpu-12``: Go's ``Expand`` rules."""


def literal(text: str) -> str:
    """``text`` as a double-quoted PromQL string (only ``\\\\``, ``\\"`` and ``\\n`` escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def openmetrics_value(text: str) -> str:
    """``text`` as an OpenMetrics label value (backslash, quote and newline escaped)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def series() -> list[dict[str, str]]:
    """The probe series' label sets."""
    out = [{"__name__": "regex_probe", "id": f"{i:02d}", "v": v} for i, v in enumerate(VALUES)]
    return [*out, {"__name__": "regex_probe", "id": "none"}]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, MemoryStorage]]:
    """A Prometheus serving the probe series, and the same series in memory."""
    work = tmp_path_factory.mktemp("regex-diff")
    storage = MemoryStorage()
    lines = ["# TYPE regex_probe gauge"]
    for labels in series():
        points = [(float(BASE + 15 * i), 1.0) for i in range(3)]
        storage.add(labels, points)
        rest = ",".join(
            f'{k}="{openmetrics_value(v)}"' for k, v in sorted(labels.items()) if k != "__name__"
        )
        lines.extend(f"regex_probe{{{rest}}} {v} {t:.3f}" for t, v in points)
    (work / "data.om").write_text("\n".join([*lines, "# EOF"]) + "\n")
    subprocess.run(
        [
            prometheus_tool("promtool"),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            work / "data.om",
            work / "db",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    with real_prometheus(work, {"global": {}}, tsdb=work / "db") as url:
        yield url, storage


def compare(url: str, storage: MemoryStorage, query: str) -> list[str]:
    """How our instant query's answer differs from Prometheus'."""
    envelope = api(url, "query", query=query, time=f"{AT:.3f}")
    mine = ask_ours(storage, query, AT)
    problems = differences_from(repr(query), envelope, mine, ordered=False)
    if not problems and "error parsing regexp" in envelope.get("error", ""):
        assert isinstance(mine, QueryError)
        if "error parsing regexp" not in str(mine):
            problems.append(f"{query!r}: our error {mine} does not say what Prometheus does")
    return problems


def test_the_probe_series_arrived_whole(prometheus: tuple[str, MemoryStorage]) -> None:
    """Guard against a vacuous comparison: every label value reached Prometheus unchanged."""
    url, _ = prometheus
    envelope = api(url, "query", query="regex_probe", time=f"{AT:.3f}")
    got = sorted(s["metric"].get("v", "") for s in envelope["data"]["result"])
    assert got == sorted([*VALUES, ""])


def test_matchers_match_prometheus(prometheus: tuple[str, MemoryStorage]) -> None:
    url, storage = prometheus
    problems: list[str] = []
    for pattern in PATTERNS:
        for op in ("=~", "!~"):
            problems += compare(url, storage, f"regex_probe{{v{op}{literal(pattern)}}}")
    assert not problems, "\n".join(problems)


def test_label_replace_matches_prometheus(prometheus: tuple[str, MemoryStorage]) -> None:
    url, storage = prometheus
    problems: list[str] = []
    for pattern in PATTERNS:
        call = f'label_replace(regex_probe, "out", "{TEMPLATE}", "v", {literal(pattern)})'
        problems += compare(url, storage, call)
    assert not problems, "\n".join(problems)


def test_replacements_expand_as_prometheus(prometheus: tuple[str, MemoryStorage]) -> None:
    url, storage = prometheus
    problems: list[str] = []
    for template in EXPANSIONS:
        for pattern in ("(.*)-(?P<idx>[0-9]+)", "(?P<a>x)|(?P<a>y)|(?P<a>gpu)-.*"):
            call = (
                f"label_replace(regex_probe{{v=~'gpu.*'}}, "
                f'"out", {literal(template)}, "v", {literal(pattern)})'
            )
            problems += compare(url, storage, call)
    assert not problems, "\n".join(problems)


def test_string_escapes_reach_the_regex_alike(prometheus: tuple[str, MemoryStorage]) -> None:
    """PromQL's own string escapes come first: ``"\\d"`` is a parse error, ``"\\\\d"`` and
    `` `\\d` `` the class, ``"\\n"`` and ``"\\x0b"`` the characters, ``"\\b"`` a backspace."""
    url, storage = prometheus
    texts = [r'"\d"', r'"\\d"', r"`\d`", r'"\n"', r'"\x0b"', r'"\b"', r"'\\pL'", r'"\u00e9"']
    texts += [r"`\Qa.b\E`", r'"x\ny"', r"`a)|(b`", "`(?i)team-a`", r'"\\\\"', r'"a\\\\b"']
    problems: list[str] = []
    for text in texts:
        problems += compare(url, storage, f"regex_probe{{v=~{text}}}")
        problems += compare(url, storage, f'label_replace(regex_probe, "o", "$0", "v", {text})')
    assert not problems, "\n".join(problems)


def test_selectors_without_a_name_match_prometheus(prometheus: tuple[str, MemoryStorage]) -> None:
    """A selector needs one matcher that does not match the empty string; whether a regex
    does is Go's answer, also where promql-parser never saw the regex."""
    url, storage = prometheus
    patterns = [r"\Q\E", r"\Qteam-a\E", ".*", "(?i)TEAM-A", r"\pL?", "a?", "", r"\x{0}?"]
    problems: list[str] = []
    for pattern in patterns:
        for matcher in (f"v=~{literal(pattern)}", f"v!~{literal(pattern)}"):
            problems += compare(url, storage, f"{{{matcher}}}")
            problems += compare(url, storage, f'{{{matcher}, id=~"0.*"}}')
    assert not problems, "\n".join(problems)


def series_api(url: str, match: str) -> dict[str, Any]:
    """Prometheus' ``/api/v1/series`` envelope for one ``match[]``."""
    query = urllib.parse.urlencode({"match[]": match, "start": str(BASE), "end": str(AT)})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/series?{query}", timeout=10) as resp:
            result: dict[str, Any] = json.load(resp)
    except urllib.error.HTTPError as exc:
        result = json.load(exc)
    return result


def test_match_parameters_match_prometheus(prometheus: tuple[str, MemoryStorage]) -> None:
    """``match[]`` goes through the same parser and regexes (``/series``, ``/labels``,
    ``/label/<name>/values`` share :func:`_selectors`)."""
    url, storage = prometheus
    problems: list[str] = []
    for pattern in PATTERNS:
        match = f"regex_probe{{v=~{literal(pattern)}}}"
        envelope = series_api(url, match)
        try:
            (matchers,) = _selectors([match])
        except QueryError as exc:
            if envelope["status"] == "success" or envelope["errorType"] != exc.error_type:
                problems.append(f"{match}: we fail ({exc}), Prometheus {envelope}")
            elif "error parsing regexp" not in str(exc) or "match[]" not in str(exc):
                problems.append(f"{match}: our error {exc} is not Prometheus' kind")
            continue
        if envelope["status"] != "success":
            problems.append(f"{match}: Prometheus fails ({envelope['error']}), we answer")
            continue
        want = sorted(s["id"] for s in envelope["data"])
        got = sorted(
            labels["id"]
            for labels, _, _ in storage.series
            if all(m.matches(labels) for m in matchers)
        )
        if got != want:
            problems.append(f"{match}: {got}, Prometheus {want}")
    assert not problems, "\n".join(problems)


def test_enough_patterns_and_both_outcomes(prometheus: tuple[str, MemoryStorage]) -> None:
    """The comparison is not vacuous: at least 60 patterns, many matching some of the
    values and not all, and many refused by Prometheus."""
    url, _ = prometheus
    selective = refused = 0
    for pattern in PATTERNS:
        envelope = api(url, "query", query=f"regex_probe{{v=~{literal(pattern)}}}", time=str(AT))
        if envelope["status"] != "success":
            refused += 1
        elif 0 < len(envelope["data"]["result"]) < len(VALUES):
            selective += 1
    assert len(PATTERNS) >= 60
    assert selective >= 60
    assert refused >= 30
