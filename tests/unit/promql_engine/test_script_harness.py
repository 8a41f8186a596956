"""The harness itself: the script format, the ``@`` variants and the comparison, each as
Prometheus 2.42's promql/test.go and its series grammar (promql/parser/generated_parser.y)
define them, and a script whose expectations are wrong fails."""

from __future__ import annotations

import math

import pytest
from at_variants import at_variants
from script_format import Clear, Eval, Load, ScriptError, parse_script, parse_series
from script_runner import almost_equal, run_script

from collector.promql.plan import compile_query
from collector.tsdb.series import is_stale


def test_series_values_expand_as_the_grammar_does() -> None:
    labels, values = parse_series('m{a="x", b="y\\"z"} 1 _ 2x2 _x2 0+10x2 5-2x1 stale -Inf nan')
    assert labels == (("__name__", "m"), ("a", "x"), ("b", 'y"z'))
    head = [1.0, None, 2.0, 2.0, 2.0, None, None, 0.0, 10.0, 20.0, 5.0, 3.0]
    assert values[:12] == head  # vxN: N+1 values; _xN: N missing
    stale, minus_inf, nan = values[12:]
    assert stale is not None
    assert is_stale(stale)
    assert minus_inf == -math.inf
    assert nan is not None
    assert math.isnan(nan)


def test_an_increment_accumulates_in_float64() -> None:
    # the grammar adds the step to the running value each time (0.1 + 0.1 + 0.1, not 3 * 0.1)
    _, values = parse_series("m 0+0.1x3")
    assert values == [0.0, 0.1, 0.2, 0.1 + 0.1 + 0.1]
    assert values[3] != 0.3


def test_numbers_are_read_as_go_reads_them() -> None:
    assert parse_series("m 010 1e3 .5")[1] == [8.0, 1000.0, 0.5]  # ParseInt base 0: octal
    assert parse_series('{__name__="m"} 1')[0] == (("__name__", "m"),)
    assert parse_series("{} 3") == ((), [3.0])
    with pytest.raises(ScriptError):
        parse_series("m 0x1f")  # the series lexer takes no hexadecimal


def test_commands_blocks_and_expectations() -> None:
    script = parse_script(
        "# a comment\n"
        "load 5m\n"
        '  m{a="1"} 0 1\n'
        '  m{a="1"} 7\n'  # described twice: the last description wins, as test.go's map
        "\n"
        "eval instant at 10m m\n"
        '  m{a="1"} 1\n'
        "\n"
        "eval_ordered instant at 1h sort(m)\n"
        "\n"
        "eval instant at 50m 1 + 1\n"
        "  2\n"
        "eval_fail instant at 0m m{\n"
        "\n"
        "clear\n"
    )
    load, first, ordered, scalar, fail, clear = script
    assert load == Load(300_000, {(("__name__", "m"), ("a", "1")): [7.0]})
    assert isinstance(first, Eval)
    assert (first.time_ms, first.expected) == (600_000, {(("__name__", "m"), ("a", "1")): (1, 1.0)})
    assert isinstance(ordered, Eval)
    assert ordered.ordered
    assert not ordered.expected
    assert isinstance(scalar, Eval)
    assert scalar.scalar == 2.0
    assert isinstance(fail, Eval)
    assert fail.fail
    assert isinstance(clear, Clear)


def test_at_variants_follow_at_modifier_test_cases() -> None:
    (text, _), *rest = at_variants("sum(rate(x[5m] offset 1m)) + y @ 20", 100_000)
    assert [t for _, t in [(text, 0), *rest]][1:] == [0, 20_000, 100_000, 1_000_000]
    assert text == "(sum (rate(x{}[300000ms] @ 100.000 offset 60000ms))) + (y{} @ 20.000)"
    assert [t for _, t in at_variants("x", 0)] == [-1000, 0, 1000]
    # a subquery gets the time, what it holds does not
    sub = at_variants("max_over_time(rate(x[1m])[5m:] @ start())", 60_000)[0][0]
    assert sub == "max_over_time((rate(x{}[60000ms]))[300000ms:] @ 60.000)"
    # a function whose answer moves with the evaluation time: no variants
    assert at_variants("timestamp(x)", 60_000) == []
    assert at_variants("hour() + x", 60_000) == []
    assert at_variants("max_over_time(vector(time())[5m:])", 60_000) != []  # in a subquery


def test_printed_variants_parse_to_the_same_query() -> None:
    for query in (
        'label_replace(x, "a", "$1", "b", "(.*)\\\\d") - -1',
        "holt_winters(x[5m], 0.5, 0.1) * on (a) group_left (b) y",
        "topk by (z) (2, x) > bool 1e-300",
        'count_values without () ("v", x) and ignoring (c) -x',
    ):
        text, _ = at_variants(query, 1000)[0]
        compile_query(text)  # raises where the printing were not PromQL


def test_almost_equal_is_test_gos() -> None:
    assert almost_equal(math.nan, math.nan)
    assert almost_equal(1.0, 1.0 + 1e-7)
    assert not almost_equal(1.0, 1.0 + 1e-5)
    assert not almost_equal(0.0, 1e-300)  # near zero only within 1e-6 of the least normal
    assert almost_equal(math.inf, math.inf)


def test_wrong_expectations_fail() -> None:
    script = parse_script(
        "load 1m\n"
        '  m{a="1"} 1 2 3\n'
        '  m{a="2"} 3 3 3\n'
        "\n"
        "eval instant at 2m m\n"
        '  m{a="1"} 3\n'
        '  m{a="2"} 3\n'
        "\n"
        "eval instant at 2m m\n"
        '  m{a="1"} 3\n'
        "\n"
        "eval instant at 2m m\n"
        '  m{a="1"} 4\n'
        '  m{a="2"} 3\n'
        "\n"
        "eval_ordered instant at 2m sort_desc(m)\n"
        '  m{a="1"} 3\n'
        '  m{a="2"} 3\n'
        "\n"
        "eval_fail instant at 2m m\n"
        "\n"
        "eval instant at 2m time()\n"
        "  120\n"
    )
    failures = [outcome.failure for outcome in run_script(script)]
    assert failures[0] is None
    assert failures[1] is not None
    assert "unexpected series" in failures[1]
    assert failures[2] is not None
    assert "expected 4.0" in failures[2]
    # sort_desc keeps a tie in the vector's order: a="1" then a="2"
    assert failures[3] is None
    assert failures[4] == "m at 120000 ms: expected an error, got none"
    assert failures[5] is None
