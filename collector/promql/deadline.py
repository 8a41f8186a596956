"""How long a query may run: checked between storage reads and at every vector node."""

from __future__ import annotations

import time

from .values import QueryError


class Deadline:
    """A query's time limit, counted from when it is made; None for no limit."""

    def __init__(self, timeout: float | None) -> None:
        self._at = None if timeout is None else time.monotonic() + timeout

    def check(self) -> None:
        """Raise ``QueryError("timeout")`` once the limit has passed."""
        if self._at is not None and time.monotonic() > self._at:
            raise QueryError("timeout", "query timed out in expression evaluation")
