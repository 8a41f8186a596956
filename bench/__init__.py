"""Benchmarks of the collector's hot paths against peers measured in the same run.

Run with ``make bench`` (``python -m bench``); never collected by pytest. Each
benchmark module has a ``run() -> dict`` returning its figures; ``__main__``
runs them all, prints a table of measured value, goal and peer ratio, and
writes ``bench/results/foundation.json`` and ``.md``. Everything runs on
loopback, bounded in count and time.
"""
