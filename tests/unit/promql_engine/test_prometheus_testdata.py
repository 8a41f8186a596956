"""Prometheus 2.42's own PromQL engine tests (testdata/, see NOTICE) against our engine.

One test per eval of the 566, named ``<file>:<line>``; each runs the eval and
its range and ``@`` variants as test.go does (:mod:`script_runner`). The
scripts run once each, in order, over our real History.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from script_format import Eval, parse_script
from script_runner import Outcome, run_script

from collector.tsdb.series import Matcher

TESTDATA = Path(__file__).parent / "testdata"
FILES = sorted(path.name for path in TESTDATA.glob("*.test"))


def _go_regexes() -> bool:
    """Whether matchers take Go's RE2 syntax: an inline flag group mid-pattern, which Go
    allows and Python's ``re`` refuses."""
    try:
        Matcher.of("group", "=~", "((?i)PRO).*")
    except Exception:  # re.error where matchers are Python's
        return False
    return True


REGEX_WORK = "regex: owned by the regex work (Go's RE2 syntax: an inline flag group mid-pattern)"
EXPECTED_TO_FAIL: dict[tuple[str, int], str] = (
    {}
    if _go_regexes()
    else {
        ("selectors.test", 89): REGEX_WORK,
        ("selectors.test", 93): REGEX_WORK,
        ("selectors.test", 97): REGEX_WORK,
    }
)
"""Evals known to fail, with why; strict: one that passes must leave this list. The three
regex cases leave it by themselves once matchers take Go's syntax."""


@functools.cache
def outcomes(name: str) -> dict[int, Outcome]:
    """Every eval of one script, by line, run once for all its tests."""
    commands = parse_script((TESTDATA / name).read_text())
    return {outcome.line: outcome for outcome in run_script(commands)}


def _cases() -> list[pytest.ParameterSet]:
    cases = []
    for name in FILES:
        for cmd in parse_script((TESTDATA / name).read_text()):
            if isinstance(cmd, Eval):
                reason = EXPECTED_TO_FAIL.get((name, cmd.line))
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                cases.append(pytest.param(name, cmd.line, id=f"{name}:{cmd.line}", marks=marks))
    return cases


CASES = _cases()


def test_every_eval_of_the_tag_is_here() -> None:
    # 566 evals in promql/testdata of v2.42.0 (grep -c '^\s*eval' over its files)
    assert len(CASES) == 566
    assert set(EXPECTED_TO_FAIL) <= {(p.values[0], p.values[1]) for p in CASES}
    assert len(EXPECTED_TO_FAIL) <= 3


@pytest.mark.parametrize(("name", "line"), CASES)
def test_eval(name: str, line: int) -> None:
    outcome = outcomes(name)[line]
    assert outcome.failure is None, f"{name}:{line}: {outcome.expr}: {outcome.failure}"
