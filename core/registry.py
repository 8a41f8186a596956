"""A prometheus_client registry seen without its ``*_created`` series.

prometheus_client's ``disable_created_metrics()`` switches those series off for
the whole process, every registry and every library in it; rendering through
:class:`WithoutCreated` drops them from one registry's page only.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

_WITH_CREATED = frozenset({"counter", "histogram", "summary"})


class WithoutCreated:
    """Collects ``registry`` without the ``_created`` samples of its counters, histograms, summaries.

    Why: a scrape target of our size has no use for them, and they double the
    counters' lines.
    """

    def __init__(self, registry: Collector) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        """The registry's metrics, each a copy without its ``_created`` samples."""
        for metric in self._registry.collect():
            if metric.type not in _WITH_CREATED:
                yield metric
                continue
            created = metric.name + "_created"
            trimmed = copy.copy(metric)
            trimmed.samples = [s for s in metric.samples if s.name != created]
            yield trimmed
