"""Regexes as Prometheus 2.42 reads them (:mod:`collector.tsdb.regex`), rule by rule.

The replacement rules are Go's ``Regexp.Expand`` (golang/go ``src/regexp/regexp.go``,
``expand`` and ``extract``, Go 1.19, which 2.42 is built with); the rejections are Go 1.19's
``regexp/syntax`` (``parse.go``: ``isValidCaptureName``, ``maxHeight``, ``parsePerlFlags``,
the Unicode 13.0.0 ``unicode.Scripts``) where C++ RE2 accepts. The whole dialect is compared
with a real Prometheus in test_regex_vs_prometheus.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.promql.plan import (
    NOTHING,
    CallNode,
    SelectorNode,
    compile_query,
    parse_promql,
    selector_matchers,
)
from collector.promql.values import QueryError
from collector.tsdb.regex import (
    CACHE_SIZE,
    RegexError,
    escape,
    matcher_regex,
    replace_regex,
)
from collector.tsdb.series import Matcher

GPU = "(.*)-(?P<idx>[0-9]+)"


def expand(template: str, pattern: str = GPU, text: str = "gpu-12") -> str:
    regex = replace_regex(pattern)
    groups = regex.search(text)
    assert groups is not None
    return regex.expand(template, groups)


# --- Go's Expand, one rule at a time ---


def test_a_number_after_a_dollar_is_that_group() -> None:
    assert expand("$1/$2/$0") == "gpu/12/gpu-12"


def test_braces_end_a_name() -> None:
    assert expand("${1}x") == "gpux"


def test_a_name_is_the_longest_run_of_word_characters() -> None:
    """``$1x`` names group "1x", which does not exist: empty, not "gpu" then "x"."""
    assert expand("$1x") == ""
    assert expand("$idxx") == ""
    assert expand("$1-$idx.") == "gpu-12."


def test_a_named_group_by_name_bare_or_in_braces() -> None:
    assert expand("$idx|${idx}") == "12|12"


def test_two_dollars_are_one() -> None:
    assert expand("$$1 costs $$") == "$1 costs $"
    assert expand("a$$$1b") == "a$"  # "$$" then "$1b", a group that does not exist


def test_a_dollar_that_starts_no_name_stays() -> None:
    for template in ("$", "x$", "$-1", "$ 1", "${", "${1", "${}", "${1x"):
        assert expand(template) == template


def test_a_backslash_is_no_reference() -> None:
    assert expand(r"\1 \g<1>") == r"\1 \g<1>"


def test_a_missing_group_is_empty() -> None:
    assert expand("[$3][$name][${9}]") == "[][][]"


def test_a_group_that_took_no_part_is_empty() -> None:
    assert expand("[$1][$2]", "(x)?(.*)", "gpu") == "[][gpu]"


def test_leading_zeros_make_a_name_not_a_number() -> None:
    """``$01`` is the group *named* "01"; Go allows names of digits."""
    assert expand("$01") == ""
    assert expand("$01", "(?P<01>g)pu", "gpu") == "g"


def test_numbers_stop_past_nine_digits() -> None:
    """Go reads at most nine digits as a number (``num >= 1e8`` stops it); a longer run of
    digits is a name, which a group may have."""
    assert expand("$123456789", "(?P<123456789>g)pu", "gpu") == ""  # group 123456789
    assert expand("$1234567890", "(?P<1234567890>g)pu", "gpu") == "g"


def test_unicode_letters_and_decimal_digits_belong_to_a_name() -> None:
    """``unicode.IsLetter`` and ``unicode.IsDigit`` (category Nd) extend a name, so ``$1é``
    and ``$\u0661`` (ARABIC-INDIC DIGIT ONE, not a number to Go) name no group; ``²`` (No)
    and ``Ⅻ`` (Nl) end one."""
    assert expand("$1é") == ""
    assert expand("$\u0661") == ""
    assert expand("$1²") == "gpu²"
    assert expand("$1\u216b") == "gpu\u216b"


def test_of_groups_sharing_a_name_the_first_that_matched() -> None:
    pattern = "(?P<a>x)|(?P<a>y)|(?P<a>gpu)-.*"
    assert replace_regex(pattern).names == ("", "a", "a", "a")
    assert expand("${a}", pattern) == "gpu"


# --- compiling: what Go takes and what it refuses ---


def test_matchers_are_anchored_and_a_dot_is_one_code_point() -> None:
    assert matcher_regex("gpu.*").fullmatch("gpu-0")
    assert not matcher_regex("gpu").fullmatch("gpu-0")
    assert matcher_regex("...").fullmatch("a😀é")
    assert not matcher_regex(".").fullmatch("\n")
    assert not matcher_regex("foo$").fullmatch("foo\n")


def test_flags_anywhere_and_ascii_classes() -> None:
    assert matcher_regex("team-(?i)a").fullmatch("team-A")
    assert not matcher_regex("team-(?i)a").fullmatch("TEAM-A")
    assert not matcher_regex(r"\d").fullmatch("\u0663")
    assert not matcher_regex(r"\s").fullmatch("\v")
    assert matcher_regex("[[:space:]]").fullmatch("\v")
    assert matcher_regex("[[:digit:]]+").fullmatch("42")


@pytest.mark.parametrize(
    ("pattern", "what"),
    [
        (r"\C", "invalid escape sequence"),
        (r"a[\C]", "invalid escape sequence"),
        ("(?<n>a)", "invalid or unsupported Perl syntax"),
        ("(?P<é>a)", "invalid named capture"),
        ("(?P<a-b>a)", "invalid named capture"),
        (r"\p{Kawi}", "invalid character class range"),
        (r"[\P{^Vithkuqi}]", "invalid character class range"),
        ("(" * 999 + "a" + ")" * 999, "expression nests too deeply"),
    ],
)
def test_what_go_refuses_and_re2_takes_is_refused(pattern: str, what: str) -> None:
    with pytest.raises(RegexError, match=f"^error parsing regexp: {what}: `"):
        matcher_regex(pattern)
    with pytest.raises(RegexError, match=what):
        replace_regex(pattern)


@pytest.mark.parametrize(
    "pattern",
    [
        r"\\C",  # a backslash, then C
        r"\Q\C(?<\E",  # literal inside \Q…\E
        "[(?<]",  # a class
        r"\(?<",  # an optional "(", then "<"
        r"(?P<name_1>a)",
        r"\p{Yezidi}",  # Unicode 13
        "(" * 998 + "a" + ")" * 998,
        "(?:" * 1500 + "a" + ")" * 1500,  # non-capturing groups leave no node in Go's tree
    ],
)
def test_look_alikes_are_taken(pattern: str) -> None:
    assert matcher_regex(pattern) is not None
    assert replace_regex(pattern) is not None


@pytest.mark.parametrize(
    ("pattern", "what"),
    [
        ("(?=a)", "invalid or unsupported Perl syntax"),
        (r"(a)\1", "invalid escape sequence"),
        ("a{1001}", "invalid repeat count"),
        ("(a{500}){3}", "invalid repeat count"),
        ("a**", "invalid nested repetition operator"),
        ("(a", "missing closing )"),
        ("[a", "missing closing ]"),
        ("a\\", "missing closing )"),  # ^(?:a\)$: the wrapped pattern is compiled first
        ("*", "missing argument to repetition operator"),
        ("(?x)a", "invalid or unsupported Perl syntax"),
        (r"\Z", "invalid escape sequence"),
    ],
)
def test_re2_errors_in_go_s_words(pattern: str, what: str) -> None:
    with pytest.raises(RegexError, match=f"^error parsing regexp: {re.escape(what)}"):
        matcher_regex(pattern)


def test_a_matcher_s_value_must_parse_alone_label_replace_s_need_not() -> None:
    with pytest.raises(RegexError, match="unexpected \\)"):
        matcher_regex("a)|(b")
    regex = replace_regex("a)|(b")  # ^(?:a)|(b)$: starts with a, or ends with b
    assert regex.search("ax") == ["a", None]
    assert regex.search("xb") == ["b", "b"]
    assert regex.search("xa") is None


def test_an_unterminated_quote_fails_once_wrapped() -> None:
    """2.42 compiles ``^(?:\\Qab)$`` first: the quote swallows the closing parenthesis."""
    with pytest.raises(RegexError, match=r"missing closing \): `\^\(\?:\\Qab\)\$`"):
        matcher_regex(r"\Qab")


def test_refusals_print_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    """RE2 logs every refused pattern to stderr unless told not to."""
    for pattern in ("(?=a)", "a{1001}", r"\pL{1000}"):
        with pytest.raises(RegexError):
            matcher_regex(pattern)
    assert capfd.readouterr().err == ""


def test_a_string_that_is_no_utf_8_is_refused_or_matched_without_error() -> None:
    with pytest.raises(RegexError, match="invalid UTF-8"):
        matcher_regex("\ud800")
    assert not matcher_regex("a").fullmatch("\ud800")


PIECES = [
    *("(", ")", "(?:", "(?P<a>", "(?P<b1>", "(?i)", "(?i:", "(?s)", "(?-i)", "(?<", "(?P="),
    *("[", "]", "[^", "[:alpha:]", "\\", "\\Q", "\\E", "\\p{", "\\pL", "\\x{", "\\C"),
    *("\\(", "\\)", "\\[", "\\]", "{", "}", "{2}", "a", "é", "41", "|", "*", "?", "+"),
    *("^", "$", ":", "<", ">", "P", "-"),
]
"""Pieces whose mixes exercise the scan's reading of groups, classes, escapes and quotes."""


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12))
def test_the_scan_counts_the_groups_re2_counts(pieces: list[str]) -> None:
    """Whatever the mix, compiling either succeeds, the scan's groups agreeing in number
    with RE2's (asserted as it compiles), or raises RegexError, never anything else."""
    pattern = "".join(pieces)
    try:
        regex = replace_regex(pattern)
    except RegexError:
        return
    groups = regex.search("a" * 3)
    assert groups is None or len(groups) == len(regex.names)


# --- bounded: the cache, memory and time ---


def test_the_cache_is_bounded_and_reuses() -> None:
    first = matcher_regex("cache-probe-0")
    assert matcher_regex("cache-probe-0") is first
    for i in range(CACHE_SIZE + 10):
        matcher_regex(f"cache-probe-{i + 1}")
    assert matcher_regex.cache_info().currsize == CACHE_SIZE
    assert matcher_regex("cache-probe-0") is not first  # dropped, compiled again


def test_a_pattern_past_the_memory_budget_fails_cleanly() -> None:
    """Go compiles ``\\pL{1000}`` (one instruction per class); RE2's program would need more
    than its budget, and says so rather than growing."""
    with pytest.raises(RegexError, match="expression too large"):
        matcher_regex(r"\pL{1000}")
    assert matcher_regex(r"\pL{100}").fullmatch("é" * 100)


def test_a_long_alternation_compiles() -> None:
    names = [f"pod-{i:05d}" for i in range(20_000)]
    regex = matcher_regex("|".join(map(escape, names)))
    assert regex.fullmatch("pod-19999")
    assert not regex.fullmatch("pod-20000")


def test_backtracking_traps_are_linear() -> None:
    """Patterns that take a backtracking engine (Python's re) exponential time on these
    texts; RE2 answers at once (the test's timeout would catch a stall)."""
    assert not matcher_regex("(a+)+b").fullmatch("a" * 100_000)
    assert not matcher_regex("(a|aa)*c").fullmatch("a" * 100_000)
    assert replace_regex("(x+x+)+y").search("x" * 50_000) is None


# --- escape, and the tenant's nothing ---


def test_escape_matches_exactly_the_text() -> None:
    for text in ("a.b", "(a|b)", "\x00\n\\$^", "é😀[x]{2}", "-_ \t"):
        assert matcher_regex(escape(text)).fullmatch(text)
        assert not matcher_regex(escape(text)).fullmatch(text + "x")


def test_nothing_matches_nothing() -> None:
    for text in ("", "a", "\n", "😀"):
        assert not Matcher.of("namespace", "=~", NOTHING).matches({"namespace": text})


# --- the parser: patterns promql-parser refuses reach RE2 intact ---


def test_regexes_rust_refuses_reach_the_matchers() -> None:
    node = compile_query(r'x{a=~"\\Qa.b\\E", b!~"\\012|\\p{^Greek}", c="d"}')
    assert isinstance(node, SelectorNode)
    assert [(m.name, m.op, m.value) for m in node.matchers] == [
        ("__name__", "=", "x"),
        ("a", "=~", r"\Qa.b\E"),
        ("b", "!~", r"\012|\p{^Greek}"),
        ("c", "=", "d"),
    ]


def test_raw_strings_keep_their_backslashes() -> None:
    node = compile_query(r'label_replace(x{a=`\d`}, "n", "$1", "a", `(\d+)\.`)')
    assert isinstance(node, CallNode)
    assert node.regex is not None
    assert node.regex.search("12.") == ["12.", "12"]
    selector = node.args[0]
    assert isinstance(selector, SelectorNode)
    assert selector.matchers[1].value == r"\d"


def test_a_comment_or_a_string_holding_a_matcher_is_left_alone() -> None:
    node = compile_query('label_join(x{a=~"\\\\Qb\\\\E"}, "d", "=~\\"", "a") # =~"(" `')
    assert isinstance(node, CallNode)
    assert [a.value for a in node.args[1:3]] == ["d", '=~"']  # type: ignore[union-attr]


def test_a_selector_of_empty_matchers_is_refused_after_the_placeholders() -> None:
    with pytest.raises(QueryError, match="at least one non-empty matcher"):
        compile_query(r'{a=~"\\Q\\E"}')
    assert compile_query(r'{a=~"\\Qb\\E"}')


def test_a_refused_regex_says_so_before_the_empty_selector_rule() -> None:
    for query in (r'{a!~"(?=x)"}', r'{a=~"(?=x)"}', r'{a!~"\\Q\\E(?=x)", b=""}'):
        with pytest.raises(QueryError, match="error parsing regexp: invalid or unsupported"):
            compile_query(query)
    assert compile_query(r'{a!~"\\Q\\E"}')  # not empty: it refuses the empty string


def test_errors_elsewhere_are_still_found() -> None:
    plain = 'x{a=~"abc"} + on(a) y offset'
    quoted = 'x{a=~"\\\\Qa.b\\\\E"} + on(a) y offset'
    with pytest.raises(ValueError, match="offset") as want:
        parse_promql(plain)
    with pytest.raises(ValueError, match="offset") as got:
        parse_promql(quoted)
    assert str(got.value) == str(want.value)


def test_a_bad_regex_is_a_parse_error() -> None:
    parsed, strings = parse_promql(r'x{a=~"(?=a)"}')
    with pytest.raises(QueryError, match="parse error: error parsing regexp: invalid or unsup"):
        selector_matchers(parsed, strings)  # type: ignore[arg-type]
