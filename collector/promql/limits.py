"""What one query may cost: a time limit and a count of the samples it holds.

Both are checked cooperatively, between storage reads and at every node (and
inside the longer loops), so a query in a worker thread stops by itself.
"""

from __future__ import annotations

import re
import time

from .values import QueryError

TOO_MANY_SAMPLES = "query processing would load too many samples into memory in query execution"


class Limits:
    """A query's deadline (seconds from now, None for none) and sample budget (None for none).

    The budget counts every point read from the storage plus the size of every
    intermediate matrix (series x steps); unlike Prometheus' peak count it is
    never given back, which only makes it stricter.
    """

    def __init__(self, timeout: float | None = None, max_samples: int | None = None) -> None:
        self._at = None if timeout is None else time.monotonic() + timeout
        self._max_samples = max_samples
        self._canceled = False
        self.samples = 0

    def cancel(self) -> None:
        """Stop the query at its next check (its caller has gone); safe from any thread."""
        self._canceled = True

    def check(self) -> None:
        """Raise ``QueryError("timeout")`` once the time limit has passed, or once canceled."""
        if self._canceled:
            raise QueryError("canceled", "query was canceled in expression evaluation")
        if self._at is not None and time.monotonic() > self._at:
            raise QueryError("timeout", "query timed out in expression evaluation")

    def charge(self, samples: int) -> None:
        """Count ``samples`` more; past the budget raise an ``execution`` error, as Prometheus."""
        self.samples += samples
        if self._max_samples is not None and self.samples > self._max_samples:
            raise QueryError("execution", TOO_MANY_SAMPLES)
        self.check()

    def remaining(self) -> float | None:
        """Seconds left before the deadline (never negative), None without one."""
        return None if self._at is None else max(0.0, self._at - time.monotonic())


MAX_DEPTH = 250
"""Most operators plus bracket nesting a query may hold.

promql-parser recurses natively per level and segfaults the whole process past a
few thousand (``1+1+...``); the planner and evaluator recurse in Python too.
Prometheus has no such limit, but no dashboard query comes near it.
"""
_TOKENS = re.compile(
    r"""(?P<string>"(?:\\.|[^"\\])*"?|'(?:\\.|[^'\\])*'?|`[^`]*`?)"""
    r"|(?P<braces>\{[^}]*\}?)"
    r"|(?P<open>[(\[])|(?P<close>[)\]])"
    r"|(?P<op>[-+*/%^=!<>]|\b(?:and|or|unless|atan2)\b)"
)


def check_depth(text: str) -> None:
    """Raise ``bad_data`` for a query deeper than :data:`MAX_DEPTH`, before any parser sees it.

    An upper bound, found by a scan that skips string literals and label matchers:
    every operator counts once, every open bracket while it is open.
    """
    operators = nesting = deepest = 0
    for token in _TOKENS.finditer(text):
        kind = token.lastgroup
        if kind == "op":
            operators += 1
        elif kind == "open":
            nesting += 1
            deepest = max(deepest, nesting)
        elif kind == "close":
            nesting = max(nesting - 1, 0)
        if operators + deepest > MAX_DEPTH:
            raise QueryError(
                "bad_data", f"query nested or chained too deeply (more than {MAX_DEPTH} levels)"
            )
