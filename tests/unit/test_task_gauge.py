"""``hami_usage_collector_asyncio_tasks``: the event loop's live tasks, so a leak is visible."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from collector.selfmetrics import SelfMetrics
from collector.store.latest import Store
from collector.web.metrics import MetricsPage

NAME = "hami_usage_collector_asyncio_tasks"


def _tasks(page: bytes) -> float | None:
    for family in text_string_to_metric_families(page.decode()):
        if family.name == NAME:
            return family.samples[0].value
    return None


async def test_the_gauge_counts_the_tasks_alive_when_the_page_is_built() -> None:
    store = Store(stale_after=60)
    metrics = SelfMetrics(store)
    page = MetricsPage(store, metrics)
    before = _tasks(b"".join(await page.body(openmetrics=False, compressed=False)))
    assert before is not None
    assert before >= 1  # this test's own task
    stop = asyncio.Event()
    extra = [asyncio.create_task(stop.wait()) for _ in range(5)]
    metrics.changed()  # something changed: the page is built again
    during = _tasks(b"".join(await page.body(openmetrics=False, compressed=False)))
    stop.set()
    await asyncio.gather(*extra)
    assert during == before + 5


def test_outside_an_event_loop_the_gauge_is_absent_not_an_error() -> None:
    store = Store(stale_after=60)
    parts = SelfMetrics(store).render(openmetrics=False)
    assert _tasks(b"".join(parts)) is None
