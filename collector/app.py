"""Wire the stages into one aiohttp application.

Data flows one way: discovery -> scrape (normalise) -> store -> web. Background
work is owned by ``cleanup_ctx`` entries, which aiohttp starts in order and
stops in reverse: discovery stops first (no new targets), then the scrape loops
(no new batches), then the HTTP client session they used, and last remote
write, which flushes what is queued (bounded by ``--remote-write-flush-timeout``). Every long-lived
task runs under the app's :class:`~core.tasks.Supervisor` (``app[TASKS]``),
which restarts it when it crashes, counts the restart, and tells ``/healthz``
which tasks are dead. What requests share while it is computed (the gzip
``/metrics`` page, the namespaces page's reports, the overview's chart) runs as
:class:`~core.tasks.Flights`, each cancelled and awaited by a cleanup context of
its own: no task outlives the app. Once ready, one task makes what those pages'
first readers would wait for (:func:`_first_readers`). Everything the handlers and
contexts share is app state under an :class:`aiohttp.web.AppKey`, so two apps in one
process share nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path

import aiohttp
from aiohttp import web
from kubernetes_asyncio import client, config

from collector.auth.pushers import Authenticator, NoAuth, Refuse, SharedToken, TokenReviewAuth
from collector.auth.readers import (
    BasicReads,
    KubernetesReads,
    OpenReads,
    ReadAuth,
    Unready,
    read_auth_middleware,
)
from collector.auth.reviews import Reviews
from collector.memory import heap, malloc
from collector.normalise.bodies import PassThrough
from collector.normalise.schema import SourceKind
from collector.promql.engine import Engine
from collector.remote.queue import QueueConfig
from collector.remote.writer import RemoteConfig, RemoteWriter, remote_writing
from collector.selfmetrics import SelfHistory, SelfMetrics
from collector.settings import CollectorSettings
from collector.sources.allocation_series import AllocationConfig, AllocationSource
from collector.sources.capacity_series import CapacityConfig, CapacitySource
from collector.sources.files import FileDiscovery, load_targets
from collector.sources.kubelet_devices import Assignments
from collector.sources.kubernetes import KubernetesDiscovery, Timeouts
from collector.sources.nodes import KubernetesNodes, NodeDirectory
from collector.sources.pods import KubernetesDirectory, PodDirectory, StaticDirectory
from collector.sources.push import PushConfig, PushReceiver
from collector.sources.scrape import ScrapeConfig, ScrapeLoop, ScrapeManager
from collector.sources.targets import Target
from collector.store.latest import Store
from collector.tsdb.history import History
from collector.views.cache import NodeCache
from collector.views.chargeback import IDLE_AFTER, Chargeback
from collector.views.models import ApiError
from collector.web import health
from collector.web.errors import HANDLER_ARGS, envelope_errors, error_response
from collector.web.metrics import MetricsPage
from collector.web.promapi import PrometheusAPI
from collector.web.promjson import matrix_body
from collector.web.rest.handlers import RestApi
from collector.web.ui.kinds import Kinds
from collector.web.ui.login import SignInPages
from collector.web.ui.namespaces import NamespaceView
from collector.web.ui.nodes import NodeViews
from collector.web.ui.overview import Overview
from collector.web.ui.panels import remote_panel
from collector.web.ui.status import DISCOVERY, PANELS, StatusPage
from collector.web.ui.trend import Trend
from collector.web.ui.workloads import WorkloadViews
from collector.web.webconfig import TLSReloads, WebConfig, web_middleware
from core.shards import Shard
from core.tasks import Supervisor

log = logging.getLogger(__name__)

SETTINGS = web.AppKey("settings", CollectorSettings)
STORE = web.AppKey("store", Store)
METRICS = web.AppKey("metrics", SelfMetrics)
SCRAPER = web.AppKey("scraper", ScrapeManager)

PUSH = web.AppKey("push", PushReceiver)
READ_AUTH = web.AppKey("read_auth", ReadAuth)
TASKS = web.AppKey("tasks", Supervisor)
REMOTE = web.AppKey("remote", RemoteWriter)
KUBE = web.AppKey("kubernetes discovery", KubernetesDiscovery)
ENGINE = web.AppKey("query engine", Engine)

Synced = Callable[[], bool]
SYNCED = web.AppKey[list[tuple[str, Synced]]]("synced")
"""What must have synced before the app is ready: (what, whether it has)."""
PRIMED = web.AppKey("first readers' pages made", asyncio.Event)
"""Set once, after ready, the first readers' pages are made in the background, or failed to be."""


def build_app(
    settings: CollectorSettings,
    pods: PodDirectory | None = None,
    web_config: WebConfig | None = None,
    registrations: NodeDirectory | None = None,
) -> web.Application:
    """Make the collector's application; nothing runs until aiohttp starts it.

    ``pods`` attributes pushed regions and ``registrations`` names cards without
    Kubernetes (the demo's simulated cluster); with Kubernetes the collector
    watches pods and nodes itself. ``web_config`` (``--web-config-file``) adds
    basic auth, client SAN checks and response headers.
    """
    store = Store(
        settings.stale_seconds, History(settings.history_retention, settings.history_max_points)
    )
    metrics = SelfMetrics(store)
    external = settings.external_labels() if settings.external_labels_on_metrics else []
    page = MetricsPage(store, metrics, external)
    reads: ReadAuth = (
        OpenReads()
        if settings.read_auth == "none"
        else BasicReads()
        if settings.read_auth == "basic"
        else Unready()
    )
    app = web.Application(
        client_max_size=settings.push_body_limit + 1,
        middlewares=[
            envelope_errors,
            *([web_middleware(web_config)] if web_config else []),
            read_auth_middleware(lambda: app[READ_AUTH], metrics.read_refused, error_response),
        ],
        handler_args=HANDLER_ARGS,
    )
    if web_config is not None:  # streamed answers (/metrics) are prepared inside the handler
        app.on_response_prepare.append(web_config.add_headers)
        if web_config.tls is not None:
            metrics.registry.register(TLSReloads(web_config.tls))
    app[READ_AUTH] = reads
    app[SETTINGS] = settings
    app[STORE] = store
    app[METRICS] = metrics
    app[TASKS] = Supervisor(metrics.restarted)
    app[SYNCED] = []
    metrics.shard.labels(str(settings.shard_index), str(settings.shard_count)).set(1)
    app.cleanup_ctx.append(_fewer_full_collections)
    app.cleanup_ctx.append(_remote_write)  # first in, last out: flushes after sources stop
    app.cleanup_ctx.append(_scraping)
    app.cleanup_ctx.append(_sources(pods, registrations))
    app.cleanup_ctx.append(_housekeeping)
    app.cleanup_ctx.append(_warming)
    app.router.add_get("/metrics", page.handle)
    app.cleanup_ctx.append(page.closing)  # its gzip builds in flight
    engine = app[ENGINE] = Engine(store.history, settings.engine_limits())
    app.router.add_routes(PrometheusAPI(store, engine).routes())
    app.router.add_post("/api/v1/push", _push)
    app.router.add_routes(health.routes(_ready, TASKS))
    chargeback = Chargeback(engine, settings.history_retention, settings.interval)
    nodes = NodeCache()  # the REST API's and the views': one presented form per node
    rest_api = RestApi(STORE, settings.interval, chargeback, settings.shard, TASKS, nodes)
    app.router.add_routes(rest_api.routes())
    app.cleanup_ctx.append(rest_api.warming)
    kinds, interval = Kinds(), settings.interval
    app.router.add_routes(NodeViews(STORE, nodes, interval, kinds).routes())
    app.router.add_routes(
        WorkloadViews(
            STORE, nodes, kinds, engine, settings.history_retention, interval, IDLE_AFTER
        ).routes()
    )
    namespaces = NamespaceView(chargeback, nodes, settings.history_retention, interval)
    app.router.add_routes(namespaces.routes())
    app.cleanup_ctx.append(namespaces.closing)
    trend = Trend(engine, interval)
    overview = Overview(store, nodes, interval, trend, _scraped)
    app.router.add_routes(overview.routes())
    app.cleanup_ctx.append(trend.running)
    app[DISCOVERY] = []
    app[PANELS] = []
    status = StatusPage(store, metrics, settings.interval, _scraped, TASKS, _ready)
    app.router.add_routes(status.routes())
    app.router.add_routes(SignInPages(lambda: app[READ_AUTH], metrics.read_refused).routes())
    app.cleanup_ctx.append(_first_readers(nodes, overview, namespaces))  # stops before theirs
    return app


def _scraped(app: web.Application) -> list[ScrapeLoop]:
    """The scrape loops running now, none before scraping starts: what the overview and the
    status page read of the sources (as :class:`~collector.views.sourcestate.Scraped`)."""
    manager = app.get(SCRAPER)
    return [] if manager is None else manager.loops()


async def _fewer_full_collections(app: web.Application) -> AsyncIterator[None]:
    with heap.fewer_collections():
        yield


async def _scraping(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    scrape_config = ScrapeConfig(
        settings.interval,
        settings.timeout,
        settings.body_limit,
        _priorities(settings),
        PassThrough(settings.passthrough_allow, settings.passthrough_deny),
    )
    # keep a target's connection from one scrape to the next (aiohttp's default of 15 s
    # closes it just before the next 15 s scrape): a new connection per scrape was a
    # tenth of the scrape path's CPU at 5,000 targets (bench/scale/run.py)
    # (no connection limit here: the scrape manager bounds the scrapes in flight itself)
    keepalive = 2 * settings.interval + settings.timeout
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=keepalive)
    async with aiohttp.ClientSession(connector=connector) as session:
        manager = ScrapeManager(session, app[STORE], app[METRICS], scrape_config, app[TASKS])
        app[SCRAPER] = manager
        yield
        await manager.close()


async def _remote_write(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    if not settings.remote_write_url:
        yield
        return
    try:
        config = remote_config(settings)
        ssl_context = (
            ssl.create_default_context(cafile=str(settings.remote_write_ca_file))
            if settings.remote_write_ca_file is not None
            else True
        )
    except (OSError, ssl.SSLError) as exc:
        raise StartupError(f"remote write: {exc}") from None
    connector = aiohttp.TCPConnector(ssl=ssl_context, limit=0)
    async with remote_writing(config, app[STORE], app[METRICS], app[TASKS], connector) as writer:
        app[REMOTE] = writer
        app[PANELS].append(partial(remote_panel, writer))
        yield


def remote_config(settings: CollectorSettings) -> RemoteConfig:
    """The remote-write configuration of ``settings``; credentials files are read here."""
    headers = {}
    if settings.remote_write_bearer_token_file is not None:
        token = settings.remote_write_bearer_token_file.read_text().strip()
        headers["Authorization"] = f"Bearer {token}"
    if settings.remote_write_username is not None and settings.remote_write_password_file:
        password = settings.remote_write_password_file.read_text().strip()
        basic = aiohttp.BasicAuth(settings.remote_write_username, password)
        headers["Authorization"] = basic.encode()
    queue = QueueConfig(
        settings.remote_write_max_samples,
        settings.remote_write_batch,
        settings.remote_write_shards,
        settings.remote_write_timeout,
    )
    return RemoteConfig(
        settings.remote_write_url,
        settings.external_labels(),
        queue,
        headers,
        own_interval=settings.interval,
        metadata_interval=settings.remote_write_metadata_interval,
        flush_timeout=settings.remote_write_flush_timeout,
    )


async def _warming(app: web.Application) -> AsyncIterator[None]:
    """Compile the query engine's loops in the background while the rest starts: ``/readyz``
    answers ready only once they are, so no first query after a start waits for them."""
    engine, metrics = app[ENGINE], app[METRICS]

    async def warm() -> None:
        seconds = await engine.warm(matrix_body)
        metrics.warmed(seconds)
        log.info("compiled the query engine's loops in %.1f s", seconds)

    task = app[TASKS].start("warm-up", warm, once=True)
    yield
    await app[TASKS].stop([task])


READY_CHECK = 0.1
"""Seconds between two looks at readiness while the first readers' pages wait for it."""


def _first_readers(
    nodes: NodeCache, overview: Overview, namespaces: NamespaceView
) -> Callable[[web.Application], AsyncIterator[None]]:
    """Once ready, make in the background what each page's first reader would wait for.

    Ready is when a Service sends readers (Grafana's panels, a person after a rollout), and
    the first reader of a page would build what later ones find kept: every node's
    presented form, the overview's hour, the namespaces page's report (232 ms against
    1.7 ms kept, ``python -m bench coldstart``). A cluster reader's only: a tenant's are
    made at its first read. A failure is logged; each page tries again when read.
    """

    async def first_readers(app: web.Application) -> AsyncIterator[None]:
        app[PRIMED] = asyncio.Event()

        async def prime() -> None:
            # readiness is a condition over every source, with no event of its own: looked
            # at as the probe looks at it, until ready or the app stops
            while _ready(app) is not None:  # noqa: ASYNC110
                await asyncio.sleep(READY_CHECK)
            nodes.read()
            began = time.perf_counter()
            try:
                made = await asyncio.gather(
                    overview.prime(), namespaces.prime(), return_exceptions=True
                )
            finally:
                app[PRIMED].set()
            failed = [exc for exc in made if isinstance(exc, BaseException)]
            for exc in failed:
                if not isinstance(exc, ApiError):
                    raise exc
                log.warning("the pages' first reports are made at their first read: %s", exc)
            if not failed:
                log.info("made the first readers' pages in %.2f s", time.perf_counter() - began)

        task = app[TASKS].start("first readers", prime, once=True)
        yield
        await app[TASKS].stop([task])

    return first_readers


def _ready(app: web.Application) -> str | None:
    """What the app still waits for before it is ready, or None."""
    for what, done in app[SYNCED]:
        if not done():
            discovery = app.get(KUBE)
            why = f": {discovery.waiting()}" if what == "discovery" and discovery else ""
            return f"{what} has not synced{why}"
    scraper = app.get(SCRAPER)
    if scraper is not None and not scraper.tried_all():
        return "some targets were never scraped"
    if not app[ENGINE].warmed.is_set():
        return "the query engine is compiling its loops"
    return None


async def _push(request: web.Request) -> web.Response:
    return await request.app[PUSH].handle(request)


def _priorities(settings: CollectorSettings) -> dict[SourceKind, int]:
    ranks = {SourceKind(kind): rank for rank, kind in enumerate(settings.priority)}
    # the pod watch's stand-ins lose to all, the node watch's registered totals to them too
    return ranks | {SourceKind.ALLOCATION: len(ranks), SourceKind.REGISTRATION: len(ranks) + 1}


async def _housekeeping(app: web.Application) -> AsyncIterator[None]:
    store, metrics, push = app[STORE], app[METRICS], app[PUSH]
    period = min(1.0, store.stale_after / 4)

    async def expire() -> None:
        trimmed = time.monotonic()
        while True:
            await asyncio.sleep(period)
            if time.monotonic() - trimmed > 30:
                store.history.trim()
                trimmed = time.monotonic()
            for source in store.expire(time.monotonic()):
                log.warning(
                    "source %s (node %s) is stale: its series are gone", source.name, source.node
                )
                if source.kind is SourceKind.AGENT:
                    metrics.forget(source)
                    push.forget(source.node)

    own = SelfHistory(metrics, store.history)
    interval = app[SETTINGS].interval

    async def record_own() -> None:
        while True:
            await own.record(time.time())
            await asyncio.sleep(interval)

    async with (
        app[TASKS].running("store expiry", expire),
        app[TASKS].running("own series", record_own),
        # a collection inside a query would add its pause to the answer
        app[TASKS].running("heap freezing", lambda: heap.keep_frozen(idle=app[ENGINE].idle)),
        # what queries freed on the heap serves the next ones; it goes back once they are quiet
        app[TASKS].running(
            "query memory", lambda: malloc.follow_queries(app[ENGINE].busy, app[ENGINE].idle)
        ),
    ):
        yield


def _sources(
    static_pods: PodDirectory | None, static_nodes: NodeDirectory | None
) -> Callable[[web.Application], AsyncIterator[None]]:
    """Discovery (file, Kubernetes), the pod and node directories and the push receiver."""

    async def sources(app: web.Application) -> AsyncIterator[None]:
        settings, manager, tasks, synced = app[SETTINGS], app[SCRAPER], app[TASKS], app[SYNCED]
        pods: PodDirectory = static_pods or StaticDirectory({}, {})
        nodes = static_nodes
        async with contextlib.AsyncExitStack() as stack:
            if settings.targets_file is not None:
                _check_targets_file(settings.targets_file)
                files = FileDiscovery(
                    settings.targets_file, _sink(manager, "file", settings.shard, app[METRICS])
                )
                synced.append(("the targets file", lambda: files.synced))
                app[DISCOVERY].append(lambda: [files.status()])
                await stack.enter_async_context(tasks.running("targets file", files.run))
            api_client = None
            if settings.kubernetes:
                api_client = await _kubernetes_client(settings)
                stack.push_async_callback(api_client.close)
                timeouts = Timeouts(settings.kube_request_timeout, settings.kube_watch_timeout)
                kube = KubernetesDiscovery(
                    client.CoreV1Api(api_client),
                    settings.monitors(),
                    settings.namespaces,
                    _sink(manager, "kubernetes", settings.shard, app[METRICS]),
                    timeouts,
                )
                synced.append(("discovery", lambda: kube.synced))
                app[DISCOVERY].append(kube.status)
                app[KUBE] = kube
                await stack.enter_async_context(tasks.running("kubernetes discovery", kube.run))
                directory = KubernetesDirectory(
                    client.CoreV1Api(api_client), client.ResourceV1Api(api_client), timeouts
                )
                pods = directory
                if settings.capacity:  # not a condition of readiness: capacity is optional
                    watched = KubernetesNodes(client.CoreV1Api(api_client), timeouts)
                    app[DISCOVERY].append(lambda: [watched.status()])
                    await stack.enter_async_context(tasks.running("node watch", watched.run))
                    nodes = watched
            reviews = None
            if api_client is not None:  # one cache of reviews: pushes', reads' and sign-ins'
                reviews = Reviews(
                    client.AuthenticationV1Api(api_client),
                    client.AuthorizationV1Api(api_client),
                    settings.read_auth_ttl,
                    settings.kube_request_timeout,
                )
            if settings.read_auth == "kubernetes" and reviews is not None:
                app[READ_AUTH] = KubernetesReads(reviews, partial(_gpu_namespaces, pods))
            auth = _authenticator(settings, reviews, pods)
            pushes = not isinstance(auth, Refuse)
            assignments = Assignments()  # pushed by agents, read by the allocation source
            if isinstance(pods, KubernetesDirectory) and (pushes or settings.allocations):
                running = pods  # the cluster-wide pod watch: push attribution and allocations
                synced.append(("the pod directory", lambda: running.synced))
                app[DISCOVERY].append(running.status)
                await stack.enter_async_context(tasks.running("pod directory", running.run))
            if settings.allocations:
                allocations = AllocationSource(
                    pods,
                    app[STORE],
                    AllocationConfig(
                        settings.interval, _priorities(settings)[SourceKind.ALLOCATION]
                    ),
                    app[METRICS].allocation_malformed,
                    assignments=assignments,
                )
                await stack.enter_async_context(tasks.running("allocations", allocations.run))
            if settings.capacity and nodes is not None:
                capacity = CapacitySource(
                    nodes,
                    app[STORE],
                    CapacityConfig(
                        settings.interval, _priorities(settings)[SourceKind.REGISTRATION]
                    ),
                    app[METRICS].registration_malformed,
                    settings.shard.holds,
                )
                await stack.enter_async_context(tasks.running("capacity", capacity.run))
            config = PushConfig(
                settings.push_body_limit,
                settings.push_max_inflight,
                _priorities(settings)[SourceKind.AGENT],
                settings.shard,
            )
            app[PUSH] = PushReceiver(app[STORE], app[METRICS], auth, pods, config, assignments)
            yield

    return sources


def _gpu_namespaces(pods: PodDirectory) -> set[str]:
    """The namespaces of pods that hold GPUs now: the candidates of a tenant's access."""
    return {holding.pod.namespace for holding in pods.holdings()}


def _node_of_pod(pods: PodDirectory, uid: str) -> str | None:
    """The node of the pod ``uid`` as the pod watch knows it now: a pusher's binding."""
    pod = pods.pod(uid)
    return None if pod is None else pod.node


def _authenticator(
    settings: CollectorSettings, reviews: Reviews | None, pods: PodDirectory
) -> Authenticator:
    mode: str = settings.push_auth
    if mode == "auto":
        mode = (
            "tokenreview" if reviews is not None else "token" if settings.push_token_file else "off"
        )
    if mode == "tokenreview" and reviews is not None:
        if not settings.push_service_accounts:
            return Refuse("no service account may push: set --push-service-accounts")
        return TokenReviewAuth(
            reviews,
            settings.push_audience,
            settings.push_service_accounts,
            partial(_node_of_pod, pods),
        )
    if mode == "token" and settings.push_token_file is not None:
        return SharedToken(settings.push_token_file)
    if mode == "none":
        return NoAuth()
    return Refuse("pushes are off: run with Kubernetes, or set --push-token-file")


def _sink(
    manager: ScrapeManager, provider: str, shard: Shard, metrics: SelfMetrics
) -> Callable[[list[Target]], Awaitable[None]]:
    """Hand ``provider``'s targets to the scrape manager, those of this shard's nodes only."""
    skipped: dict[str, int] = {}

    async def sink(targets: list[Target]) -> None:
        kept = [t for t in targets if shard.holds(t.node)]
        if shard.count > 1:
            skipped[provider] = len(targets) - len(kept)
            metrics.skipped(sum(skipped.values()))
        await manager.sync(provider, kept)

    return sink


class StartupError(Exception):
    """The collector cannot start as configured; the message says what to change."""


def _check_targets_file(path: Path) -> None:
    """A targets file must load at start: a typo in its path must not look like an empty cluster.

    Later a file that goes missing or turns bad keeps the last good targets.
    """
    try:
        load_targets(path)
    except OSError as exc:
        raise StartupError(
            f"--targets-file / HAMI_COLLECTOR_TARGETS_FILE: cannot read {path}: {exc.strerror}"
        ) from None
    except ValueError as exc:
        said = " ".join(str(exc).split())  # one line: YAML and pydantic errors span several
        raise StartupError(f"--targets-file / HAMI_COLLECTOR_TARGETS_FILE: {said}") from None


async def _kubernetes_client(settings: CollectorSettings) -> client.ApiClient:
    """An API client: from ``--kubeconfig`` when given, else in-cluster, else the default kubeconfig."""
    configuration = client.Configuration()
    try:
        if settings.kubeconfig is None:
            try:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
                return client.ApiClient(configuration)
            except config.ConfigException:
                pass
        path = str(settings.kubeconfig) if settings.kubeconfig else None
        default = os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]
        # the client would log "not found" and then call the missing file invalid
        if path is None and not await asyncio.to_thread(
            lambda: os.path.isfile(os.path.expanduser(default))
        ):
            raise StartupError(
                "no Kubernetes configuration: no in-cluster service account and no kubeconfig "
                f"found ({default}); set --kubeconfig / HAMI_COLLECTOR_KUBECONFIG, "
                "or run with --no-kubernetes and --targets-file"
            )
        await config.load_kube_config(config_file=path, client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        raise StartupError(
            f"no Kubernetes configuration: the kubeconfig failed: {' '.join(str(exc).split())}; "
            "fix --kubeconfig / HAMI_COLLECTOR_KUBECONFIG, or run with --no-kubernetes"
        ) from None
    return client.ApiClient(configuration)
