"""``GET /status``: the collector's status page, like Prometheus' /targets, in the views' frame.

What the page knows it reads at request time from what the stages already
keep: each scrape loop's health (through :mod:`collector.views.sourcestate`,
so the web never imports the sources), the store's held batches (agents'
pushes among them), the discovery streams' states, readiness and dead tasks.
Nothing is collected for the page and no scrape or push does any work for it.
A request walks every source once as plain tuples (5,000 nodes with a monitor
and an agent each: about 15 ms), filters and sorts them, makes full rows of
one page only, at most :data:`~collector.web.ui.layout.PAGE_ROWS`, and renders
them in a worker thread: the rows are frozen copies taken on the event loop,
so the render never meets a loop's state mid-change.

Nodes fed only by the pod watch's allocations (no monitor or agent: the REST
API's ``health: "unreported"``) are listed in a section of their own, each with
its allocated pods and the alert that fires for it.

Other parts of the collector add sections through :data:`PANELS` (providers
of a :class:`~collector.web.ui.panels.Panel`, called per request); discovery
adds its streams through :data:`DISCOVERY`.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from urllib.parse import urlencode

from aiohttp import web
from multidict import MultiMapping

from collector import __version__
from collector.normalise.labelsets import key_labels
from collector.normalise.schema import WATCH_KINDS, Flavour, SourceKind
from collector.selfmetrics import SelfMetrics
from collector.store.latest import Held, Store
from collector.views.models import ApiError
from collector.views.sourcestate import DiscoveryStream, Scraped, target_state
from collector.web.ui import layout
from collector.web.ui.layout import PAGE_ROWS, Link, promql_link
from collector.web.ui.listing import ViewError, bad, check_names
from collector.web.ui.panels import Panel, discovery_panel
from collector.web.ui.status_template import BODY
from core.tasks import Supervisor

PATH = "/status"
"""Where the page is served (the overview of usage has ``/``)."""

STATES = ("up", "failing", "pending", "late")
"""A source's state: a target's latest scrape succeeded (up) or failed (failing), or
it was never scraped (pending); an agent pushed within two intervals (up) or not (late)."""

KINDS = (*(str(f) for f in Flavour), str(SourceKind.AGENT))
"""What feeds a source: a monitor of one flavour, or an agent."""

PARAMETERS = ("state", "kind", "node", "page")
"""What the page's query string may hold, besides the frame's ``refresh`` (which changes
nothing here: the page does not reload itself)."""

UNREPORTED_ALERT = "HamiNodeWithoutUsageSource"
"""The alert of rules/hami-usage.rules.yaml that fires for a node with allocations only."""
UNREPORTED_RUNBOOK = f"docs/runbook.md#{UNREPORTED_ALERT.lower()}"
"""Its runbook link, as the rule's ``runbook_url`` writes it (anchors in lower case)."""

PanelSource = Callable[[], Panel]
PANELS = web.AppKey[list[PanelSource]]("status panels")
"""Sections shown after the sources, in order; append a provider while wiring the app."""

DiscoverySource = Callable[[], Sequence[DiscoveryStream]]
DISCOVERY = web.AppKey[list[DiscoverySource]]("status discovery")
"""Discovery streams (targets file, pod watches), shown as the first panel."""

ScrapedNow = Callable[[web.Application], Sequence[Scraped]]
"""The scrape loops running in an app now (none before scraping starts)."""


@dataclass(frozen=True, slots=True)
class SourceRow:
    """One source as the page shows it: a monitor target or an agent. Wall-clock times."""

    node: str
    kind: str
    name: str
    url: str
    state: str
    last_success: float | None
    duration: float | None
    samples: int | None
    data: str
    recent: tuple[bool, ...]
    error: str
    error_at: float | None


@dataclass(frozen=True, slots=True)
class UnreportedRow:
    """A node with GPU allocations and no usage source: only the pod watch feeds it."""

    node: str
    pods: tuple[tuple[str, str], ...]
    """Its allocated pods, (namespace, pod), sorted."""


def allocated_pods(held: Held) -> tuple[tuple[str, str], ...]:
    """The (namespace, pod) pairs the allocation batch ``held`` names, sorted."""
    pods = set()
    for key in held.batch.series:
        labels = dict(key_labels(key)[1])
        if "namespace" in labels and "pod" in labels:
            pods.add((labels["namespace"], labels["pod"]))
    return tuple(sorted(pods))


@dataclass(frozen=True, slots=True)
class Query:
    """The page's parameters: filters and the page number (from 1)."""

    state: str = ""
    kind: str = ""
    node: str = ""
    page: int = 1

    @classmethod
    def parse(cls, query: MultiMapping[str]) -> Query:
        """Read the query string; raise a 400 :class:`ViewError` (or the
        :class:`ApiError` of an unknown or repeated parameter) naming a bad parameter."""
        check_names(query, PARAMETERS)
        state, kind = query.get("state", ""), query.get("kind", "")
        if state not in ("", *STATES):
            raise bad(f"state must be one of {', '.join(STATES)} (got {state[:40]!r})")
        if kind not in ("", *KINDS):
            raise bad(f"kind must be one of {', '.join(KINDS)} (got {kind[:40]!r})")
        try:
            page = layout.page_number(query)
        except ValueError as exc:
            raise bad(str(exc)) from None
        return cls(state, kind, query.get("node", "")[:253], page)

    def href(self, **changes: str | int) -> str:
        """This page's URL with some parameters changed (empty ones left out)."""
        current: dict[str, str | int] = {
            "state": self.state,
            "kind": self.kind,
            "node": self.node,
            "page": self.page,
        }
        current.update(changes)
        kept = {k: v for k, v in current.items() if v != "" and not (k == "page" and v == 1)}
        return f"{PATH}?{urlencode(kept)}" if kept else PATH

    def matches(self, node: str, kind: str, name: str, state: str) -> bool:
        """Whether a source passes the filters."""
        return (
            (not self.state or state == self.state)
            and (not self.kind or kind == self.kind)
            and (not self.node or self.node in node)
        )


def agent_state(age: float, interval: float) -> str:
    """An agent's state: up while its latest push is at most two intervals old."""
    return "up" if age <= 2 * interval else "late"


Entry = tuple[str, str, str, str, Scraped | Held]
"""A source as the page filters and sorts it: node, kind, name, state, and the source."""

AGENT = str(SourceKind.AGENT)
_BY_NODE_KIND_NAME = itemgetter(0, 1, 2)


@dataclass(slots=True)
class Census:
    """Every source once (sorted), what the store holds per source, and who wins each node."""

    entries: list[Entry]
    held: dict[str, Held]
    winners: dict[str, str]
    series: int
    unreported: list[tuple[str, Held]]
    """Nodes (sorted) that only the pod watch feeds, with its batch for each."""

    def row(self, entry: Entry, interval: float) -> SourceRow:
        """The full row of one entry (a page's worth are made per request)."""
        node, kind, name, state, source = entry
        if isinstance(source, Held):
            age = time.monotonic() - source.received
            data = _data(source, self.winners.get(node))
            samples = source.batch.samples
            return SourceRow(
                node, kind, name, "", state, time.time() - age, None, samples, data, (), "", None
            )
        health = source.health
        return SourceRow(
            node,
            kind,
            name,
            source.target.url,
            state,
            health.last_success,
            health.duration,
            health.samples,
            _data(self.held.get(source.source.id), self.winners.get(node)),
            tuple(health.recent),
            health.error,
            health.error_at,
        )


def _data(held: Held | None, winner: str | None) -> str:
    if held is None:
        return "none"
    return "serving" if held.source.id == winner else "outranked"


class StatusPage:
    """The page's handler. ``interval`` judges agents late; ``scraped`` gives the scrape
    loops running now; ``tasks`` names app state set later."""

    def __init__(
        self,
        store: Store,
        metrics: SelfMetrics,
        interval: float,
        scraped: ScrapedNow,
        tasks: web.AppKey[Supervisor],
        ready: Callable[[web.Application], str | None],
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._interval = interval
        self._scraped = scraped
        self._tasks = tasks
        self._ready = ready
        self._template = layout.template(BODY)

    def routes(self) -> list[web.RouteDef]:
        """``GET /status``."""
        return [web.get(PATH, self.handle)]

    async def handle(self, request: web.Request) -> web.Response:
        """Serve one page of sources; the frame's 400 page naming a bad parameter."""
        try:
            query = Query.parse(request.query)
        except (ViewError, ApiError) as error:
            return layout.error(request, error.status, error.message)
        context = self.context(request, query)
        body = await asyncio.to_thread(self.render, context)
        # no reload: it would lose a node filter being typed, as the sign-in form's would
        return layout.render(request, "Status", body, LINKS, reload=False)

    def render(self, context: Mapping[str, object]) -> str:
        """The page's body from :meth:`context`'s answer (thread-safe: it reads copies only)."""
        return self._template.render(context)

    def census(self, app: web.Application) -> Census:
        """One walk over the store and the scrape loops: every source's entry, sorted."""
        now = time.monotonic()
        census = Census([], {}, {}, 0, [])
        entries = census.entries
        for node in self._store.nodes():
            view = self._store.view(node)
            if view is None:
                continue
            census.series += len(view.series)
            census.winners[node] = view.sources[0].source.id
            allocated = [one for one in view.sources if one.source.kind is SourceKind.ALLOCATION]
            if allocated and all(one.source.kind in WATCH_KINDS for one in view.sources):
                census.unreported.append((node, allocated[0]))
            for one in view.sources:
                census.held[one.source.id] = one
                if one.source.kind is SourceKind.AGENT:
                    state = agent_state(now - one.received, self._interval)
                    entries.append((node, AGENT, one.source.name, state, one))
        for loop in self._scraped(app):
            target = loop.target
            kind = str(target.flavour)
            entries.append((target.node, kind, target.name, target_state(loop), loop))
        entries.sort(key=_BY_NODE_KIND_NAME)
        return census

    def context(self, request: web.Request, query: Query) -> dict[str, object]:
        """Everything the template shows, taken now on the event loop.

        Only the page's own rows are made into :class:`SourceRow`; the others
        are counted, filtered and sorted as plain tuples.
        """
        app = request.app
        census = self.census(app)
        counts = Counter(entry[3] for entry in census.entries)
        matched = [entry for entry in census.entries if query.matches(*entry[:4])]
        shown = [
            census.row(entry, self._interval)
            for entry in matched[(query.page - 1) * PAGE_ROWS : query.page * PAGE_ROWS]
        ]
        unreported = [(n, h) for n, h in census.unreported if not query.node or query.node in n]
        discovery = [state for provider in app.get(DISCOVERY, []) for state in provider()]
        return {
            "version": __version__,
            "endpoints": ENDPOINTS,
            "datasource": f"{request.url.origin()}/prometheus",
            "unready": self._ready(app),
            "dead": app[self._tasks].dead(),
            "nodes": len(census.winners),
            "series": census.series,
            "counts": [(state, counts[state]) for state in STATES],
            "state_links": {state: Query(state=state).href() for state in STATES},
            "state_filters": _filters(query, "state", STATES),
            "kind_filters": _filters(query, "kind", KINDS),
            "path": PATH,
            "hidden": [(k, v) for k, v in (("state", query.state), ("kind", query.kind)) if v],
            "node": query.node,
            "rows": shown,
            "matched": len(matched),
            "total": len(census.entries),
            "pager": layout.pager(request, query.page, len(matched)),
            "unreported": [UnreportedRow(n, allocated_pods(h)) for n, h in unreported[:PAGE_ROWS]],
            "unreported_matched": len(unreported),
            "unreported_total": len(census.unreported),
            "unreported_alert": UNREPORTED_ALERT,
            "unreported_runbook": UNREPORTED_RUNBOOK,
            "refused": _refused(self._metrics),
            "panels": [discovery_panel(discovery), *(p() for p in app.get(PANELS, []))],
            "now": time.time(),
        }


ENDPOINTS = (
    ("/metrics", "/metrics"),
    ("REST: nodes", "/api/v1/nodes"),
    ("REST: pods", "/api/v1/pods"),
    ("OpenAPI", "/api/v1/openapi.json"),
    ("Prometheus API", "/prometheus/api/v1/status/buildinfo"),
    ("/healthz", "/healthz"),
    ("/readyz", "/readyz"),
)
"""What else the collector serves, linked from the page's first section."""

LINKS = (
    Link("GET /metrics", "/metrics"),
    Link("GET /readyz", "/readyz"),
    promql_link("hami_usage_collector_targets"),
    promql_link("sum by (kind, reason) (hami_usage_collector_scrape_errors_total)"),
    promql_link("hami_usage_collector_push_refused_total"),
)
"""The footer's links: the collector's own series say what the page shows."""


def _filters(query: Query, name: str, values: Sequence[str]) -> list[tuple[str, str, bool]]:
    current = getattr(query, name)
    found = []
    for value in ("", *values):
        changes: dict[str, str | int] = {name: value, "page": 1}
        found.append((value or "all", query.href(**changes), current == value))
    return found


def _refused(metrics: SelfMetrics) -> list[tuple[str, int]]:
    found = []
    for family in metrics.refused.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.value:
                found.append((sample.labels["reason"], int(sample.value)))
    return sorted(found)
