"""Durations in messages, as a person writes them: ``2 s``, ``1.5 s``, ``250 ms``."""

from __future__ import annotations


def duration(seconds: float) -> str:
    """``seconds`` to two decimals at most, in milliseconds below one second."""
    if 0 < abs(seconds) < 1:
        return f"{_trim(seconds * 1000)} ms"
    return f"{_trim(seconds)} s"


def _trim(value: float) -> str:
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text
