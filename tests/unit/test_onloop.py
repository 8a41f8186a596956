"""A query's worker thread reads the history on the event loop, in slices, and can be canceled."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from collector.promql import onloop
from collector.promql.onloop import LoopReader
from collector.promql.query import range_query
from collector.promql.values import QueryError
from collector.tsdb.history import History
from collector.tsdb.series import Columns, Matcher

NODES = 300
T0 = 1_700_000_000.0


def many_nodes() -> History:
    history = History(retention=3600)
    for step in range(4):
        for n in range(NODES):
            series = {f'up{{gpu="{g}"}}'.encode(): float(n * 10 + g + step) for g in range(4)}
            history.record(f"node-{n:03d}", series, T0 + 15 * step, "monitor")
    return history


def flat(groups: list[Columns]) -> dict[tuple[tuple[str, str], ...], list[float]]:
    """Each series' values by its labels, whatever the grouping."""
    out = {}
    for group in groups:
        values = np.asarray(group.values).reshape(len(group.labels), -1)
        for labels, row in zip(group.labels, values, strict=True):
            out[tuple(sorted(labels.items()))] = row.tolist()
    return out


async def test_a_thread_s_read_is_made_on_the_loop_between_other_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(onloop, "SLICE", 0.0)  # one group a slice: many slices
    history = many_nodes()
    loop = asyncio.get_running_loop()
    matchers = [Matcher("__name__", "=", "up")]
    turns = 0
    seen: list[int] = []  # the loop's turn as each group was read

    class Watched(History):
        def select(self, *args: Any, **kwargs: Any) -> Iterator[Columns]:
            for group in history.select(*args, **kwargs):
                assert asyncio.get_running_loop() is loop, "read on the loop"
                seen.append(turns)
                yield group

    async def other_work() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    reader = LoopReader(Watched(), loop)
    task = asyncio.create_task(other_work())
    try:
        read = await asyncio.to_thread(lambda: list(reader.select(matchers, T0, T0 + 60)))
    finally:
        task.cancel()
    assert flat(read) == flat(list(history.select(matchers, T0, T0 + 60)))
    assert len(read) == NODES
    assert len(set(seen)) >= NODES // 2, "other work ran between the slices"


async def test_a_range_query_through_the_reader_answers_as_a_direct_one() -> None:
    history = many_nodes()
    reader = LoopReader(history, asyncio.get_running_loop())
    query = "sum by (node) (up)"
    direct = range_query(query, T0, T0 + 45, 15, history)
    threaded = await asyncio.to_thread(range_query, query, T0, T0 + 45, 15, reader)
    assert threaded == direct
    assert len(direct) == NODES


async def test_a_canceled_reader_reads_no_more() -> None:
    reader = LoopReader(many_nodes(), asyncio.get_running_loop())
    reader.cancel()
    with pytest.raises(QueryError, match="canceled"):
        await asyncio.to_thread(
            lambda: list(reader.select([Matcher("__name__", "=", "up")], T0, T0))
        )


async def test_a_read_on_the_loop_itself_is_made_at_once() -> None:
    history = many_nodes()
    reader = LoopReader(history, asyncio.get_running_loop())
    names = reader.label_names([Matcher("__name__", "=", "up")], T0, T0 + 60)
    assert names == {"__name__", "gpu", "node"}
