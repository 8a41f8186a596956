"""The times and durations the Prometheus API takes, parsed as Prometheus parses them.

Every surface that takes a time from a person or a client (the Prometheus API,
chargeback's window) reads it here, so ``1700000000``, ``2026-12-06T10:00:00Z``
and ``1m30s`` mean the same everywhere.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

from .values import QueryError

_DURATION = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_time(text: str, name: str) -> float:
    """A Unix timestamp or an RFC 3339 time, as Prometheus accepts them."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise QueryError(
            "bad_data", f'invalid parameter "{name}": cannot parse "{text}" to a valid timestamp'
        ) from None


def parse_duration(text: str, name: str) -> float:
    """Seconds as a number, or a Prometheus duration like ``1m30s``."""
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise QueryError(
                "bad_data", f'invalid parameter "{name}": cannot parse "{text}" to a valid duration'
            ) from None
        seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if not math.isfinite(seconds):
        raise QueryError("bad_data", f'invalid parameter "{name}": {text} is not finite')
    return seconds
