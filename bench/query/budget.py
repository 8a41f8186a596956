"""Timing in process: how many timed runs a query surface gets, and their summary."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.kit.timing import percentile
from bench.query.setup import (
    BUDGET_S,
    MIN_REPEATS,
    REPEATS,
)


@dataclass(frozen=True)
class Budget:
    """How many timed runs a surface gets: ``repeats``, or fewer once ``seconds`` are spent."""

    repeats: int = REPEATS
    seconds: float = BUDGET_S
    least: int = MIN_REPEATS

    def more(self, done: int, spent: float) -> bool:
        """Whether to run once more after ``done`` runs that took ``spent`` seconds."""
        return done < self.repeats and (done < self.least or spent < self.seconds)


QUICK = Budget(10, 5.0, 1)
"""What ``python -m bench --quick`` allows each surface."""


def timed(call: Callable[[], Any], budget: Budget) -> tuple[dict[str, Any], Any]:
    """A first run (reported apart), then timed runs as ``budget`` allows (ms); the last answer."""
    t0 = time.perf_counter()
    answer = call()
    first = time.perf_counter() - t0
    times: list[float] = []
    while budget.more(len(times), sum(times)):
        t0 = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - t0)
    return summary(times, first), answer


def summary(seconds: Sequence[float], first: float) -> dict[str, Any]:
    """p50 / p99 / max in ms of ``seconds``, and the first run's ms."""
    return {
        "repeats": len(seconds),
        "first_ms": first * 1e3,
        "p50_ms": percentile(seconds, 50) * 1e3,
        "p99_ms": percentile(seconds, 99) * 1e3,
        "max_ms": max(seconds, default=0.0) * 1e3,
        "ms": [s * 1e3 for s in seconds],
    }
