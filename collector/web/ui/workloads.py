"""``/workloads`` and ``/workloads/{namespace}/{pod}``: the container vGPUs of every pod, and
one pod's containers with their last hour.

The rows are ``GET /api/v1/pods``' (one per container vGPU, its ``namespace``
and ``node`` filters, its sort fields, a tenant's namespaces only), each with
the resource kind of its allocation. Unsorted, a page is found by counting
each node's containers per namespace from its key set, so only the page's
rows are read; sorted, by merging each node's rows sorted (:class:`Runs`). A pod's charts are range
queries over the history through the collector's PromQL engine, the queries
its PromQL link names.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, cast

from aiohttp import web
from markupsafe import Markup

from collector.auth.access import Access, access_of
from collector.normalise import schema
from collector.promql.engine import Engine, Queries
from collector.promql.values import QueryError, RangeSeries
from collector.store.latest import Store
from collector.views.cache import VIEW_REBUILDS, NodeCache
from collector.views.listing import CONTAINER_SORT_FIELDS, READING_OF
from collector.views.models import ContainerRow
from collector.views.presented import Presented, container_row, pod_detail
from collector.views.usage import ContainerReading, NodeUsage, Shape
from collector.web.ui import charts, layout, units
from collector.web.ui.charts import Series
from collector.web.ui.coverage import share
from collector.web.ui.kinds import Kinds
from collector.web.ui.layout import PAGE_ROWS
from collector.web.ui.listing import Page, ViewError, check_names, view_query
from collector.web.ui.pages import answering, matcher, render, segment, template

CHART_SECONDS = 3600.0
"""How far back a pod's charts reach (less where the history holds less)."""
CHART_POINTS = 240
"""Points a chart line has at most: the step is the scrape interval, or coarser."""
MEMORY, DEVICE_MEMORY, UTILISATION = (
    schema.VGPU_MEMORY_USED,
    schema.CONTAINER_MEMORY,
    schema.VGPU_UTILIZATION,
)
"""The families a pod's charts draw: a vGPU's memory is HAMi-core's where it has it, else the
container's device memory (NVML's view of a whole card or a MIG instance), as the read model
and chargeback count it."""

ROW = """
{%- macro row(w, listed) %}
{%- set r = w.row %}{% set use = r.utilisation_of_allocation %}
<tr class="{{ 'workload' if listed else 'container' }}" data-namespace="{{ r.namespace }}" data-pod="{{ r.pod }}" data-container="{{ r.container }}" data-node="{{ r.node }}" data-device-uuid="{{ r.device_uuid }}" {{ known('memory-allocated-bytes', r.memory_allocated_bytes) }} {{ known('memory-used-bytes', r.memory_used_bytes) }} {{ known('cores-allocated', r.cores_allocated) }} {{ known('sm-utilization-percent', r.sm_utilization_percent) }}>
{%- if listed %}
<td>{{ r.namespace }}</td>
<td class="name"><a href="/workloads/{{ segment(r.namespace) }}/{{ segment(r.pod) }}">{{ r.pod }}</a></td>
<td class="name">{{ r.container }}</td>
<td class="node"><a href="/nodes/{{ segment(r.node) }}">{{ r.node }}</a></td>
{%- else %}
<td class="name">{{ r.container }}</td><td class="num">{{ r.vdevice_index if r.vdevice_index is not none else units.MISSING }}</td>
<td class="node">{{ r.node }}</td><td class="uuid">{{ r.device_uuid }}</td>
{%- endif %}
<td>{{ w.kind }}</td>
<td class="num memory-allocated">{{ r.memory_allocated_bytes|size }}</td>
<td class="num memory-used">{{ r.memory_used_bytes|size }}{{ of_allocated(use.memory if use else None, 'over its allocation') }}</td>
<td class="num">{{ r.cores_allocated|percent }}</td>
<td class="num">{{ r.sm_utilization_percent|percent_100 }}{{ of_allocated(use.cores if use else None, 'burst past its share') }}</td>
<td class="num">{{ r.idle_seconds|duration }}{% if w.idle %} <span class="state state-idle">idle</span>{% endif %}</td>
</tr>
{%- endmacro %}
"""

LIST = template(
    ROW
    + """
<form method="get" action="/workloads" class="filters">
<label>Namespace <input name="namespace" value="{{ query.params.get('namespace', '') }}"></label>
<label>Node <input name="node" value="{{ query.params.get('node', '') }}"></label>
{%- if query.params.get('sort') %}<input type="hidden" name="sort" value="{{ query.params['sort'] }}">{% endif %}
<button>Filter</button></form>
{{ pager }}
<table class="workloads">
<thead><tr>
{{ sortable(query, '/workloads', 'namespace', 'Namespace') }}
{{ sortable(query, '/workloads', 'pod', 'Pod') }}
{{ sortable(query, '/workloads', 'container', 'Container') }}
{{ sortable(query, '/workloads', 'node', 'Node') }}
<th scope="col">Kind</th>
{{ sortable(query, '/workloads', 'memory_allocated_bytes', 'Memory allocated') }}
{{ sortable(query, '/workloads', 'memory_used_bytes', 'Memory used (of allocated)') }}
{{ sortable(query, '/workloads', 'cores_allocated', 'Cores allocated') }}
{{ sortable(query, '/workloads', 'sm_utilization_percent', 'SM utilisation (of allocated)') }}
{{ sortable(query, '/workloads', 'idle_seconds', 'Idle') }}
</tr></thead>
<tbody>
{%- for w in page.rows %}
{{ row(w, true) }}
{%- endfor %}
</tbody></table>
{{ legend }}
{{ pager }}
"""
)

DETAIL = template(
    ROW
    + """
<p class="pod-summary" data-vgpus="{{ pod.vgpu_count }}" {{ known('memory-used-bytes', pod.memory_used_bytes) }} data-memory-used-vgpus="{{ pod.memory_used_vgpus }}" {{ known('memory-allocated-bytes', pod.memory_allocated_bytes) }} data-memory-allocated-vgpus="{{ pod.memory_allocated_vgpus }}">On {% for n in pod.nodes %}<a href="/nodes/{{ segment(n) }}">{{ n }}</a>{% if not loop.last %}, {% endif %}{% endfor %}:
memory used <span class="pod-memory-used">{{ pod.memory_used_bytes|size }}</span> of
<span class="pod-memory-allocated">{{ pod.memory_allocated_bytes|size }}</span> allocated
<span class="muted">(used: {{ share(pod.memory_used_vgpus, pod.vgpu_count, 'used memory reported') }}; allocated: {{ share(pod.memory_allocated_vgpus, pod.vgpu_count, 'a memory allocation') }})</span>.</p>
<table class="containers">
<thead><tr><th scope="col">Container</th><th scope="col">vGPU</th><th scope="col">Node</th><th scope="col">Card</th>
<th scope="col">Kind</th><th scope="col">Memory allocated</th><th scope="col">Memory used (of allocated)</th>
<th scope="col">Cores allocated</th><th scope="col">SM utilisation (of allocated)</th><th scope="col">Idle</th></tr></thead>
<tbody>
{%- for w in rows %}
{{ row(w, false) }}
{%- endfor %}
</tbody></table>
{{ legend }}
{%- for c in charts %}
<section class="history" data-container="{{ c.container }}">
<h2>Container {{ c.container }}: the last {{ c.seconds|duration }}</h2>
{{ c.memory }}
{{ c.utilisation }}
</section>
{%- endfor %}
"""
)

LEGEND = Markup(
    '<p class="muted legend">(of allocated): used as a share of what the pod was given, where'
    " both are known; a container without an allocation of memory or cores reads"
    f" {units.MISSING}. Over 100 % only when true, and said why: <em>burst past its share</em>"
    " (HAMi-core lets a container use SMs beyond its share while the card has them to"
    " spare), <em>over its allocation</em> (more memory in use than allocated).</p>"
)
"""What the workload tables' percentages mean, under each table."""


def of_allocated(ratio: float | None, over: str) -> Markup:
    """`` 34%`` after a reading: its share of the allocation; past 100 %, with why (``over``)."""
    if ratio is None:
        return Markup("")
    text = Markup(' <span class="muted">{}</span>').format(units.percent(ratio))
    if ratio > 1:
        text += Markup(' <span class="over">{}</span>').format(over)
    return text


@dataclass(frozen=True, slots=True)
class Workload:
    """A REST container row, its resource kind's label, and whether it is idle."""

    row: ContainerRow
    kind: str
    idle: bool


@dataclass(frozen=True, slots=True)
class Charts:
    """One container's two charts of the last hour."""

    container: str
    seconds: float
    memory: Any
    utilisation: Any


Row = tuple[Presented, ContainerReading]
_READING_INDEX = {name: at for at, name in enumerate(ContainerReading._fields)}


class WorkloadViews:
    """The two workload views, over the REST API's node cache; a pod's charts are queries
    of the collector's one ``engine`` over the ``retention`` its history holds;
    ``idle_after`` is the seconds without a kernel that make a vGPU idle (chargeback's)."""

    def __init__(
        self,
        store_key: web.AppKey[Store],
        nodes: NodeCache,
        kinds: Kinds,
        engine: Engine,
        retention: float,
        interval: float,
        idle_after: float,
    ) -> None:
        self._store_key = store_key
        self._nodes = nodes
        self._kinds = kinds
        self._engine = engine
        self._retention = retention
        self._interval = interval
        self._idle_after = idle_after
        self._runs = Runs()
        self._counts = Counts()

    def routes(self) -> list[web.RouteDef]:
        """``GET /workloads`` and ``GET /workloads/{namespace}/{pod}``."""
        return [
            web.get("/workloads", answering(self.table, self._nodes.read)),
            web.get(
                "/workloads/{namespace:[^/]+}/{pod:[^/]+}",
                answering(self.detail, self._nodes.read),
            ),
        ]

    async def table(self, request: web.Request) -> web.Response:
        """One page of container vGPUs, sorted and filtered as ``GET /api/v1/pods``."""
        query = view_query(request.query, CONTAINER_SORT_FIELDS, ("namespace", "node"))
        store = request.app[self._store_key]
        node = query.listing.filters.get("node")
        namespace = query.listing.filters.get("namespace")
        if node is not None:
            one = self._nodes.one(store, node)
            nodes = [] if one is None else [one]
        else:
            nodes = self._nodes.all(store, VIEW_REBUILDS)
            self._kinds.prune([p.usage for p in nodes])
        access = access_of(request)
        names = _wanted(access, namespace)
        if query.listing.sort is None:
            found = self._counts.page(nodes, names, query.page)
        else:
            spec = (query.listing.sort, query.listing.descending, names)
            found = self._runs.page(nodes, spec, query.page)
            self._nodes.follow(self._runs)
        page = Page([self._workload(p, c) for p, c in found.rows], found.total, found.number)
        selector = ",".join(
            matcher(label, value)
            for label, value in (("namespace", namespace), ("node", node))
            if value is not None
        )
        links = [
            layout.rest_link(query.href("/api/v1/pods", page=None, refresh=None)),
            layout.promql_link(memory_used(selector)),
        ]
        pager = layout.pager(request, page.number, page.total)
        body = render(
            LIST, query=query, page=page, pager=pager, legend=LEGEND, of_allocated=of_allocated
        )
        return layout.render(request, "Workloads", body, links, self._interval)

    async def detail(self, request: web.Request) -> web.Response:
        """One pod: its container vGPUs as ``GET /api/v1/namespaces/{namespace}/pods/{pod}``,
        and each container's last hour of memory and utilisation."""
        check_names(request.query)
        store = request.app[self._store_key]
        namespace, pod = request.match_info["namespace"], request.match_info["pod"]
        missing = ViewError(404, f"no pod {namespace}/{pod} has vGPU data")
        if not access_of(request).sees(namespace):  # as if it did not exist: nothing to guess
            raise missing
        # the nodes that held the pod when last presented, then their current forms: a pod's
        # page rebuilds only its own nodes (new nodes are presented whatever the bound)
        held = [p.usage.node for p in self._nodes.all(store, 0) if (namespace, pod) in p.usage.pods]
        found = [
            (presented, reading)
            for node in held
            if (presented := self._nodes.one(store, node)) is not None
            for reading in presented.pod(namespace, pod)
        ]
        if not found:
            raise missing
        rows = [self._workload(p, c) for p, c in found]
        detail = pod_detail(store.generation, namespace, pod, [w.row for w in rows])
        containers = [w.row.container for w in rows]
        charts_of = await self._charts(access_of(request), namespace, pod, detail.nodes, containers)
        selector = f"{matcher('namespace', namespace)},{matcher('pod', pod)}"
        body = render(
            DETAIL,
            pod=detail,  # the REST pod detail, its sums and what they cover
            rows=rows,
            charts=charts_of,
            legend=LEGEND,
            of_allocated=of_allocated,
            share=share,
        )
        links = [
            layout.rest_link(f"/api/v1/namespaces/{segment(namespace)}/pods/{segment(pod)}"),
            layout.promql_link(memory_used(selector)),
            layout.promql_link(f"{UTILISATION}{{{selector}}}"),
        ]
        return layout.render(request, f"Pod {namespace}/{pod}", body, links, self._interval)

    def _workload(self, presented: Presented, reading: ContainerReading) -> Workload:
        usage = presented.usage
        key = (reading.namespace, reading.pod, reading.container)
        idle = reading.idle_seconds is not None and reading.idle_seconds > self._idle_after
        return Workload(container_row(usage.node, reading), self._kinds.label(usage, key), idle)

    async def _charts(
        self,
        access: Access,
        namespace: str,
        pod: str,
        nodes: Sequence[str],
        containers: Sequence[str],
    ) -> list[Charts]:
        # the last step is now, so a pod's newest readings are its charts' last points
        end = time.time()
        seconds = min(CHART_SECONDS, self._retention)
        step = max(self._interval, seconds / CHART_POINTS)
        start = end - math.floor(seconds / step - 1) * step

        def read(queries: Queries) -> list[RangeSeries]:
            found: list[RangeSeries] = []
            for node in nodes:
                # One query for both families; the node's equality matcher rules every other
                # node out first (a name regex is not an equality).
                selector = ",".join(
                    (
                        f'__name__=~"{MEMORY}|{DEVICE_MEMORY}|{UTILISATION}"',
                        matcher("node", node),
                        matcher("namespace", namespace),
                        matcher("pod", pod),
                    )
                )
                found += cast(
                    list[RangeSeries], queries.range(f"{{{selector}}}", start, end, step).run()
                )
            return found

        try:
            found = await self._engine.run(
                read, identity=access.identity, namespaces=access.namespaces
            )
        except QueryError as exc:
            status = 429 if exc.error_type == "unavailable" else 503
            raise ViewError(status, f"the pod's history cannot be read: {exc}") from None
        memory = _preferred(found)
        utilisation = [s for s in found if s.labels.get("__name__") == UTILISATION]
        out = []
        for container in dict.fromkeys(containers):
            title = f"{namespace}/{pod} container {container}"
            out.append(
                Charts(
                    container,
                    seconds,
                    charts.line_chart(
                        _series(memory, container, 1.0), f"{title}: memory used", units.size
                    ),
                    charts.line_chart(
                        _series(utilisation, container, 0.01),
                        f"{title}: SM utilisation",
                        units.percent,
                        top=1.0,
                    ),
                )
            )
        return out


def _series(found: list[RangeSeries], container: str, scale: float) -> list[Series]:
    """The lines of one container, one per vGPU, named by its card; ``scale`` to the unit."""
    return [
        Series(
            f"vGPU {s.labels.get('vdevice_index', '?')} on {s.labels.get('device_uuid', '?')[:12]}",
            [(t, v * scale) for t, v in s.points],
        )
        for s in found
        if s.labels.get("container") == container
    ]


def memory_used(selector: str) -> str:
    """The PromQL of the vGPUs' memory used that ``selector`` picks, counted as the read model
    counts it (:data:`collector.views.chargeback.MEMORY_USED`)."""
    return f"{MEMORY}{{{selector}}} or {DEVICE_MEMORY}{{{selector}}}"


def _preferred(found: list[RangeSeries]) -> list[RangeSeries]:
    """Each vGPU's memory line: HAMi-core's where it has one, else its device memory."""
    chosen: dict[tuple[tuple[str, str], ...], RangeSeries] = {}
    for s in found:
        name = s.labels.get("__name__")
        if name not in (MEMORY, DEVICE_MEMORY):
            continue
        vgpu = tuple(sorted((k, v) for k, v in s.labels.items() if k != "__name__"))
        if name == MEMORY or vgpu not in chosen:
            chosen[vgpu] = s
    return list(chosen.values())


def _wanted(access: Access, namespace: str | None) -> frozenset[str] | None:
    """The namespaces whose rows the reader asks for and may see; None: every one."""
    if namespace is not None:
        return frozenset({namespace}) if access.sees(namespace) else frozenset()
    return access.namespaces


Spec = tuple[str, bool, frozenset[str] | None]
"""A sort: the field, whether descending, the namespaces kept (None: all)."""
Keyed = tuple[Any, Presented, ContainerReading]
Run = tuple[list[Keyed], list[ContainerReading]]
"""One node's rows of a sort: those with a value, sorted (ties in the node's order), and
those without, in the node's order."""


class Runs:
    """Each node's rows sorted by the last sort asked of it, kept while its read model is.

    A page of a sort merges the nodes' sorted runs (:func:`heapq.merge`, which
    takes ties from the earlier run first): the same order as REST's one sort
    of all rows (nulls last, ties in the rows' order), for the cost of the
    page's rows and the nodes that changed, not of every row. At 5,000 nodes
    the rows are some 100,000. Once a sort is read, the runs follow the node cache
    (:meth:`NodeCache.follow`): a node's run for its last sort is redone as warming presents
    the node again, so the first request after a round finds the runs sorted (it sorted
    every node's: 0.3-0.7 s at 5,000 nodes).
    """

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[Presented, Spec, Run]] = {}

    def page(self, nodes: list[Presented], spec: Spec, number: int) -> Page[Row]:
        """Page ``number`` of the rows of ``nodes`` sorted by ``spec``."""
        _, descending, names = spec
        runs = [
            (p, self._run(p, spec))
            for p in nodes
            if names is None or not names.isdisjoint(p.usage.namespaces)
        ]
        if len(self._nodes) > 2 * len(nodes):
            self.pruned({p.usage.node for p in nodes})
        present = sum(len(run[0]) for _, run in runs)
        total = present + sum(len(run[1]) for _, run in runs)
        start = (number - 1) * PAGE_ROWS
        keyed = contenders([run[0] for _, run in runs if run[0]], start + PAGE_ROWS, descending)
        merged = heapq.merge(*keyed, key=itemgetter(0), reverse=descending)
        rows: list[Row] = [(p, r) for _, p, r in itertools.islice(merged, start, start + PAGE_ROWS)]
        if len(rows) < PAGE_ROWS:
            skip = max(start - present, 0)
            nulls = ((p, r) for p, run in runs for r in run[1])
            rows += itertools.islice(nulls, skip, skip + PAGE_ROWS - len(rows))
        return Page(rows, total, number)

    def _run(self, presented: Presented, spec: Spec) -> Run:
        usage = presented.usage
        kept = self._nodes.get(usage.node)
        if kept is not None and kept[0] is presented and kept[1] == spec:
            return kept[2]
        field, descending, names = spec
        readings = [r for r in usage.containers if names is None or r.namespace in names]
        if field == "node":
            run: Run = ([(usage.node, presented, r) for r in readings], [])
        else:
            at = _READING_INDEX[READING_OF[field]]
            keyed = [(r[at], presented, r) for r in readings if r[at] is not None]
            keyed.sort(key=itemgetter(0), reverse=descending)
            run = (keyed, [r for r in readings if r[at] is None])
        self._nodes[usage.node] = (presented, spec, run)
        return run

    def presented(self, presented: Presented) -> None:
        """Sort the node's rows of ``presented`` as its last sort asked."""
        kept = self._nodes.get(presented.usage.node)
        if kept is not None and kept[0] is not presented:
            self._run(presented, kept[1])

    def pruned(self, live: set[str]) -> None:
        """Drop the runs of the nodes not in ``live``."""
        for gone in self._nodes.keys() - live:
            del self._nodes[gone]


def contenders(runs: list[list[Keyed]], rows: int, descending: bool) -> list[list[Keyed]]:
    """The sorted runs that can hold any of the first ``rows`` rows of their merge, in order.

    Why: merging 5,000 nodes' runs for one page took 8 ms, most of it setting up
    the merge. A run whose first key comes after the ``rows``-th best first key
    cannot: that many runs each have a row before all of its rows. Runs whose
    first key ties with it stay, so ties are taken as the whole merge takes them.
    """
    if len(runs) <= rows:
        return runs
    tops = [run[0][0] for run in runs]
    if descending:
        least = heapq.nlargest(rows, tops)[-1]
        return [run for run, top in zip(runs, tops, strict=True) if top >= least]
    most = heapq.nsmallest(rows, tops)[-1]
    return [run for run, top in zip(runs, tops, strict=True) if top <= most]


class Counts:
    """How many container vGPUs of each namespace each node has, kept per node key set:
    an unsorted page counts the rows before it without reading them."""

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[Shape, Counter[str]]] = {}

    def of(self, usage: NodeUsage) -> Counter[str]:
        """The node's container vGPUs per namespace."""
        kept = self._nodes.get(usage.node)
        if kept is not None and kept[0] is usage.shape:
            return kept[1]
        counts = Counter(labels[0] for labels, _ in usage.shape.containers)
        self._nodes[usage.node] = (usage.shape, counts)
        return counts

    def page(self, nodes: list[Presented], names: frozenset[str] | None, number: int) -> Page[Row]:
        """The page of rows in REST's order, reading only the nodes the page falls on."""
        if len(self._nodes) > 2 * len(nodes):
            live = {p.usage.node for p in nodes}
            for gone in self._nodes.keys() - live:
                del self._nodes[gone]
        start, total = (number - 1) * PAGE_ROWS, 0
        rows: list[Row] = []
        for presented in nodes:
            usage = presented.usage
            if names is None:
                count = len(usage.shape.containers)
            elif names.isdisjoint(usage.namespaces):
                continue
            else:
                counts = self.of(usage)
                count = sum(counts[name] for name in names)
            if total + count > start and len(rows) < PAGE_ROWS:
                chosen = [r for r in usage.containers if names is None or r.namespace in names]
                skip = max(start - total, 0)
                rows += [(presented, r) for r in chosen[skip : skip + PAGE_ROWS - len(rows)]]
            total += count
        return Page(rows, total, number)
