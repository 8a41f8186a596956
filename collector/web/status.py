"""GET /status: the collector's status page, like Prometheus' /targets, server-rendered HTML.

What the page knows it reads at request time from what the stages already
keep: each scrape loop's :class:`~collector.sources.scrape.Health`, the
store's held batches (agents' pushes among them), the discovery streams'
states, readiness and dead tasks. Nothing is collected for the page and no
scrape or push does any work for it. A request walks every source once as
plain tuples (5,000 nodes with a monitor and an agent each: about 15 ms),
filters and sorts them, makes full rows of one page only, at most
:data:`PAGE_ROWS`, and renders them in a worker thread: the rows are frozen
copies taken on the event loop, so the render never meets a loop's state
mid-change.

Nodes fed only by the pod watch's allocations (no monitor or agent: the REST
API's ``health: "unreported"``) are listed in a section of their own, each with
its allocated pods and the alert that fires for it.

Other parts of the collector add sections through :data:`PANELS` (providers
of a :class:`Panel`, called per request); discovery adds its streams through
:data:`DISCOVERY`.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from collector import __version__
from collector.normalise.labelsets import key_labels
from collector.normalise.schema import Flavour, SourceKind
from collector.selfmetrics import SelfMetrics
from collector.sources.scrape import ScrapeLoop, ScrapeManager
from collector.sources.targets import DiscoveryState
from collector.store.latest import Held, Store
from collector.web.status_template import PAGE
from core.tasks import Supervisor

PATH = "/status"
"""Where the page is served (the overview of usage has ``/``)."""

PAGE_ROWS = 100
"""Sources shown on one page: the page stays small however large the cluster."""

STATES = ("up", "failing", "pending", "late")
"""A source's state: a target's latest scrape succeeded (up) or failed (failing), or
it was never scraped (pending); an agent pushed within two intervals (up) or not (late)."""

KINDS = (*(str(f) for f in Flavour), str(SourceKind.AGENT))
"""What feeds a source: a monitor of one flavour, or an agent."""

UNREPORTED_ALERT = "HamiNodeWithoutUsageSource"
"""The alert of rules/hami-usage.rules.yaml that fires for a node with allocations only."""
UNREPORTED_RUNBOOK = f"docs/runbook.md#{UNREPORTED_ALERT.lower()}"
"""Its runbook link, as the rule's ``runbook_url`` writes it (anchors in lower case)."""


@dataclass(frozen=True, slots=True)
class Panel:
    """A section of the page from another part of the collector (remote write, ...).

    Cells are plain text, escaped when rendered; the cells of a column named
    ``State`` are shown as state badges (``up``, ``failing``, ...). ``empty``
    is said when there are no rows.
    """

    title: str
    columns: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    note: str = ""
    empty: str = "Nothing yet."


PanelSource = Callable[[], Panel]
PANELS = web.AppKey[list[PanelSource]]("status panels")
"""Sections shown after the sources, in order; append a provider while wiring the app."""

DiscoverySource = Callable[[], list[DiscoveryState]]
DISCOVERY = web.AppKey[list[DiscoverySource]]("status discovery")
"""Discovery streams (targets file, pod watches), shown as the first panel."""


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
    def parse(cls, params: Iterable[tuple[str, str]]) -> Query:
        """Read the query string; raise ``ValueError`` naming a bad parameter."""
        values = dict(params)
        state, kind = values.get("state", ""), values.get("kind", "")
        if state not in ("", *STATES):
            raise ValueError(f"state must be one of {', '.join(STATES)} (got {state!r})")
        if kind not in ("", *KINDS):
            raise ValueError(f"kind must be one of {', '.join(KINDS)} (got {kind!r})")
        page = values.get("page", "1")
        if not (page.isascii() and page.isdigit()) or int(page) < 1 or len(page) > 9:
            raise ValueError(f"page must be a whole number from 1 (got {page!r})")
        return cls(state, kind, values.get("node", "")[:253], int(page))

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


def target_state(loop: ScrapeLoop) -> str:
    """A target's state: of its latest scrape, or pending before the first."""
    health = loop.health
    return "pending" if health.scrapes == 0 else "failing" if health.failing else "up"


def agent_state(age: float, interval: float) -> str:
    """An agent's state: up while its latest push is at most two intervals old."""
    return "up" if age <= 2 * interval else "late"


Entry = tuple[str, str, str, str, ScrapeLoop | Held]
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
        if isinstance(source, ScrapeLoop):
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
        age = time.monotonic() - source.received
        return SourceRow(
            node,
            kind,
            name,
            "",
            state,
            time.time() - age,
            None,
            source.batch.samples,
            _data(source, self.winners.get(node)),
            (),
            "",
            None,
        )


def _data(held: Held | None, winner: str | None) -> str:
    if held is None:
        return "none"
    return "serving" if held.source.id == winner else "outranked"


def discovery_panel(states: list[DiscoveryState]) -> Panel:
    """The discovery streams as a panel."""
    rows = [
        (
            s.what,
            "error" if s.error else "synced" if s.synced else "waiting",
            str(s.objects),
            s.error,
        )
        for s in states
    ]
    return Panel(
        "Discovery",
        ("Stream", "State", "Objects", "Last error"),
        rows,
        "Targets come from these streams; while one fails, its last known targets are kept.",
        "No discovery configured.",
    )


class StatusPage:
    """The page's handler. ``interval`` judges agents late; the keys name app state set later."""

    def __init__(
        self,
        store: Store,
        metrics: SelfMetrics,
        interval: float,
        scraper: web.AppKey[ScrapeManager],
        tasks: web.AppKey[Supervisor],
        ready: Callable[[web.Application], str | None],
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._interval = interval
        self._scraper = scraper
        self._tasks = tasks
        self._ready = ready
        env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
        env.filters.update(age=age, utc=utc, seconds=_seconds)
        self._template = env.from_string(PAGE)

    def routes(self) -> list[web.RouteDef]:
        """``GET /status``."""
        return [web.get(PATH, self.handle)]

    async def handle(self, request: web.Request) -> web.Response:
        """Serve one page of sources; 400 naming a bad parameter."""
        try:
            query = Query.parse(request.query.items())
        except ValueError as exc:
            return web.Response(status=400, text=f"bad request: {exc}\n")
        context = self.context(request.app, query, f"{request.url.origin()}/prometheus")
        html = await asyncio.to_thread(self.render, context)
        return web.Response(
            text=html, content_type="text/html", headers={"Cache-Control": "no-store"}
        )

    def render(self, context: Mapping[str, object]) -> str:
        """The page's HTML from :meth:`context`'s answer (thread-safe: it reads copies only)."""
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
            if all(one.source.kind is SourceKind.ALLOCATION for one in view.sources):
                census.unreported.append((node, view.sources[0]))
            for one in view.sources:
                census.held[one.source.id] = one
                if one.source.kind is SourceKind.AGENT:
                    state = agent_state(now - one.received, self._interval)
                    entries.append((node, AGENT, one.source.name, state, one))
        scraper = app.get(self._scraper)
        for loop in scraper.loops() if scraper is not None else []:
            target = loop.target
            kind = str(target.flavour)
            entries.append((target.node, kind, target.name, target_state(loop), loop))
        entries.sort(key=_BY_NODE_KIND_NAME)
        return census

    def context(self, app: web.Application, query: Query, datasource: str) -> dict[str, object]:
        """Everything the template shows, taken now on the event loop.

        Only the page's own rows are made into :class:`SourceRow`; the others
        are counted, filtered and sorted as plain tuples.
        """
        census = self.census(app)
        counts = Counter(entry[3] for entry in census.entries)
        matched = [entry for entry in census.entries if query.matches(*entry[:4])]
        pages = max(1, -(-len(matched) // PAGE_ROWS))
        shown = [
            census.row(entry, self._interval)
            for entry in matched[(query.page - 1) * PAGE_ROWS : query.page * PAGE_ROWS]
        ]
        unreported = [(n, h) for n, h in census.unreported if not query.node or query.node in n]
        unreported_rows = [
            UnreportedRow(node, allocated_pods(held)) for node, held in unreported[:PAGE_ROWS]
        ]
        discovery = [state for provider in app.get(DISCOVERY, []) for state in provider()]
        panels = [discovery_panel(discovery), *(provider() for provider in app.get(PANELS, []))]
        return {
            "version": __version__,
            "links": _LINKS,
            "datasource": datasource,
            "unready": self._ready(app),
            "dead": app[self._tasks].dead(),
            "nodes": len(census.winners),
            "series": census.series,
            "counts": [(state, counts[state]) for state in STATES],
            "state_links": {state: Query(state=state).href() for state in STATES},
            "state_filters": _filters(query, "state", STATES),
            "kind_filters": _filters(query, "kind", KINDS),
            "hidden": [(k, v) for k, v in (("state", query.state), ("kind", query.kind)) if v],
            "node": query.node,
            "rows": shown,
            "shown": len(shown),
            "matched": len(matched),
            "total": len(census.entries),
            "page": query.page,
            "pages": pages,
            "page_rows": PAGE_ROWS,
            "prev_href": query.href(page=query.page - 1) if query.page > 1 else "",
            "next_href": query.href(page=query.page + 1) if query.page < pages else "",
            "unreported": unreported_rows,
            "unreported_matched": len(unreported),
            "unreported_total": len(census.unreported),
            "unreported_alert": UNREPORTED_ALERT,
            "unreported_runbook": UNREPORTED_RUNBOOK,
            "refused": _refused(self._metrics),
            "panels": panels,
            "now": time.time(),
            "rendered_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        }


_LINKS = (
    ("Overview", "/"),
    ("/metrics", "/metrics"),
    ("REST: nodes", "/api/v1/nodes"),
    ("REST: pods", "/api/v1/pods"),
    ("OpenAPI", "/api/v1/openapi.json"),
    ("Prometheus API", "/prometheus/api/v1/status/buildinfo"),
    ("/healthz", "/healthz"),
    ("/readyz", "/readyz"),
)


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


def age(then: float | None, now: float) -> str:
    """How long ago ``then`` was, for people (``never`` for None)."""
    if then is None:
        return "never"
    seconds = max(0.0, now - then)
    if seconds < 60:
        return f"{seconds:.1f}s ago"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs}s ago"
    return f"{minutes // 60}h {minutes % 60}m ago"


def utc(then: float | None) -> str:
    """``then`` as a UTC date and time (empty for None)."""
    if then is None:
        return ""
    return datetime.fromtimestamp(then, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"
