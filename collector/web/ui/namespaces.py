"""``/namespaces``: chargeback per namespace, memory and core hours allocated against used over
a chosen window, and the share of allocated cores that sat idle.

The report is ``GET /api/v1/usage?by=namespace``'s own (:class:`Chargeback`, a
tenant's namespaces restricting its queries as they restrict REST's), over the
window ``?window=`` names: the last 15 minutes, hour, 6 or 24 hours, or (the
default, as REST's) all the history holds. A report is kept for one step of its window and
then recomputed in the background while the page shows the one before
(:class:`Reports`); the page's CSV and REST links name the window of the
report it shows, so they give its numbers.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from functools import partial
from urllib.parse import urlencode

from aiohttp import web

from collector.auth.access import access_of
from collector.views.cache import NodeCache
from collector.views.chargeback import MEASURES, Chargeback
from collector.views.models import ApiError, UsageReport
from collector.web.ui import layout
from collector.web.ui.listing import bad, page_of, view_query
from collector.web.ui.pages import answering, render, template
from core.tasks import Flights

WINDOWS = {"15m": 900.0, "1h": 3600.0, "6h": 6 * 3600.0, "24h": 86400.0, "all": None}
"""``?window=`` values: the seconds back from now (None: all the history holds)."""
KEPT_REPORTS = 32
"""Reports kept at most (one per window and reader's namespaces), the least recent dropped."""
WORKS = "namespaces page"
"""The engine's identity of this page's reports, which readers of the same namespaces share."""

PAGE = template("""
<p>GPU memory and cores allocated and used per namespace from {{ clock(report.start) }} to
{{ clock(report.end) }} UTC ({{ (report.end - report.start)|duration }}, a point every {{ report.step_seconds|duration }}).</p>
<nav class="filters" aria-label="window">Window:
{%- for name in windows %}
{%- set label = 'all the history holds' if name == 'all' else 'last ' ~ name %}
{% if name == window %}<strong aria-current="true">{{ label }}</strong>
{%- else %}<a href="{{ query.href('/namespaces', window=name, page=None) }}">{{ label }}</a>{% endif %}
{%- endfor %}</nav>
{%- if short %}<p class="muted">The history holds only the last {{ retention|duration }}: the report covers that.</p>{% endif %}
<p>Download this report: <a class="csv" href="{{ csv }}">CSV</a> (<a href="{{ rest }}">JSON</a>).</p>
{{ pager }}
<table class="namespaces">
<thead><tr><th scope="col">Namespace</th>
<th scope="col">Memory allocated vs used</th><th scope="col">Memory allocated</th><th scope="col">Memory used</th>
<th scope="col">Cores allocated vs used</th><th scope="col">Cores allocated</th><th scope="col">Cores used</th>
<th scope="col">Idle share</th></tr></thead>
<tbody>
{%- for g in page.rows %}
{%- set name = g.labels.get('namespace', '') %}
<tr class="namespace" data-namespace="{{ name }}" {{ known('memory-allocated-byte-hours', g.memory_allocated_byte_hours) }} {{ known('memory-used-byte-hours', g.memory_used_byte_hours) }} {{ known('cores-allocated-core-hours', g.cores_allocated_core_hours) }} {{ known('cores-used-core-hours', g.cores_used_core_hours) }} {{ known('idle-share', g.idle_share) }}>
<td><a href="/workloads?namespace={{ segment(name) }}">{{ name }}</a></td>
<td>{{ bar('memory of ' ~ name, g.memory_used_byte_hours, g.memory_allocated_byte_hours, None, units.byte_hours) or units.MISSING }}</td>
<td class="num memory-allocated">{{ g.memory_allocated_byte_hours|byte_hours }}</td>
<td class="num memory-used">{{ g.memory_used_byte_hours|byte_hours }}</td>
<td>{{ bar('cores of ' ~ name, g.cores_used_core_hours, g.cores_allocated_core_hours, None, units.core_hours) or units.MISSING }}</td>
<td class="num">{{ g.cores_allocated_core_hours|core_hours }}</td>
<td class="num">{{ g.cores_used_core_hours|core_hours }}</td>
<td class="num">{{ g.idle_share|percent }}{% if g.idle_share %} idle{% endif %}</td>
</tr>
{%- endfor %}
</tbody></table>
<p class="muted">Memory used counts every vGPU the collector attributes: HAMi-core's reading, else
the container's device memory as NVML sees it (whole cards, MIG instances). A namespace with no
allocation of memory or cores in the window reads {{ units.MISSING }} there and draws no bar.</p>
{{ pager }}
""")


class NamespaceView:
    """The chargeback view over ``chargeback``, the REST API's report builder; ``retention``
    is how far back the history reaches, ``interval`` the collector's (the page reloads
    each)."""

    def __init__(
        self, chargeback: Chargeback, nodes: NodeCache, retention: float, interval: float
    ) -> None:
        self._reports = Reports(chargeback)
        self._nodes = nodes
        self._retention = retention
        self._interval = interval

    def routes(self) -> list[web.RouteDef]:
        """``GET /namespaces``."""
        return [web.get("/namespaces", answering(self.handle, self._nodes.read))]

    async def prime(self) -> None:
        """Make the report a cluster reader's first page shows (the default window), and
        wait for it."""
        await self._reports.get(WINDOWS["all"], None)

    async def closing(self, app: web.Application) -> AsyncIterator[None]:
        """A cleanup context: reports still being computed at shutdown are cancelled and
        awaited."""
        yield
        await self._reports.stop()

    async def handle(self, request: web.Request) -> web.Response:
        """One page of namespaces, the largest allocation first (the report's order)."""
        query = view_query(request.query, (), (), ("window",))
        window = query.params.get("window", "all")
        if window not in WINDOWS:
            raise bad(
                f"query parameter 'window' must be one of {', '.join(WINDOWS)}, not {window[:40]!r}"
            )
        back = WINDOWS[window]
        report = await self._reports.get(back, access_of(request).namespaces)
        page = page_of(list(report.groups), query)
        params = {
            "by": "namespace",
            "start": repr(report.requested_start),
            "end": repr(report.requested_end),
        }
        expr = MEASURES["memory_allocated"].format(by="namespace")
        rest = f"/api/v1/usage?{urlencode(params)}"
        promql = "/prometheus/api/v1/query_range?" + urlencode(
            {
                "query": expr,
                "start": repr(report.start + report.step_seconds),
                "end": repr(report.end),
                "step": repr(report.step_seconds),
            }
        )
        body = render(
            PAGE,
            query=query,
            report=report,
            page=page,
            window=window,
            windows=list(WINDOWS),
            short=back is not None and back > self._retention,
            retention=self._retention,
            rest=rest,
            csv=f"/api/v1/usage?{urlencode({**params, 'format': 'csv'})}",
            pager=layout.pager(request, page.number, page.total),
        )
        links = [layout.rest_link(rest), layout.Link(expr, promql)]
        return layout.render(request, "Namespaces", body, links, self._interval)


Key = tuple[float | None, frozenset[str] | None]
"""A report's window (seconds back; None: all the history) and reader's namespaces."""


class Reports:
    """The latest report per :data:`Key`, kept for one step of its window.

    Past that step a request is answered with the report it has while the next
    one is computed in the background (one at a time per key, :class:`~core.tasks.Flights`):
    at thousands of nodes a report takes seconds, a page must not. Only a key's
    first requests wait for its report, and share it. A refresh that fails is
    logged (the next request tries again); its requests were answered with the
    report before.
    """

    def __init__(self, chargeback: Chargeback) -> None:
        self._chargeback = chargeback
        self._kept: OrderedDict[Key, tuple[float, UsageReport]] = OrderedDict()
        self._making: Flights[Key, UsageReport] = Flights(
            "chargeback for the namespaces page", expected=(ApiError,)
        )

    async def get(self, back: float | None, namespaces: frozenset[str] | None) -> UsageReport:
        """The report of the last ``back`` seconds (None: all) for a reader of ``namespaces``."""
        key = (back, namespaces)
        kept = self._kept.get(key)
        if kept is None:
            return await self._making.join(key, partial(self._compute, key))
        if kept[0] <= time.monotonic():
            self._making.start(key, partial(self._compute, key))
        return kept[1]

    async def stop(self) -> None:
        """Cancel the reports being computed, and wait until they are; none starts after."""
        await self._making.stop()

    async def _compute(self, key: Key) -> UsageReport:
        back, namespaces = key
        start = None if back is None else repr(time.time() - back)
        steps = self._chargeback.window(start, None)
        report = await self._chargeback.report("namespace", steps, WORKS, namespaces)
        self._kept[key] = (time.monotonic() + steps.step, report)
        self._kept.move_to_end(key)
        while len(self._kept) > KEPT_REPORTS:
            self._kept.popitem(last=False)
        return report
