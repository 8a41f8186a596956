"""Wire the stages into one aiohttp application.

Data flows one way: discovery -> scrape (normalise) -> store -> web. Background
work is owned by ``cleanup_ctx`` entries, which aiohttp starts in order and
stops in reverse: discovery stops first (no new targets), then the scrape loops
(no new batches), then the HTTP client session they used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import aiohttp
from aiohttp import web
from kubernetes_asyncio import client, config

from collector.normalise import PassThrough
from collector.selfmetrics import SelfMetrics
from collector.settings import CollectorSettings
from collector.sources.files import FileDiscovery
from collector.sources.kubernetes import KubernetesDiscovery
from collector.sources.scrape import ScrapeConfig, ScrapeManager
from collector.sources.targets import Target
from collector.store import Store
from collector.web import health
from collector.web.metrics import MetricsPage

log = logging.getLogger(__name__)

SETTINGS = web.AppKey("settings", CollectorSettings)
STORE = web.AppKey("store", Store)
METRICS = web.AppKey("metrics", SelfMetrics)
SCRAPER = web.AppKey("scraper", ScrapeManager)

Synced = Callable[[], bool]


def build_app(settings: CollectorSettings) -> web.Application:
    """Make the collector's application; nothing runs until aiohttp starts it."""
    store = Store(settings.stale_seconds)
    metrics = SelfMetrics(store)
    page = MetricsPage(store, metrics)
    discoveries: list[Synced] = []

    def ready() -> str | None:
        if not all(synced() for synced in discoveries):
            return "discovery has not synced"
        if SCRAPER in app and not app[SCRAPER].tried_all():
            return "some targets were never scraped"
        return None

    app = web.Application()
    app[SETTINGS] = settings
    app[STORE] = store
    app[METRICS] = metrics
    app.cleanup_ctx.append(_scraping)
    app.cleanup_ctx.append(_housekeeping)
    app.cleanup_ctx.append(_discovery(discoveries))
    app.router.add_get("/metrics", page.handle)
    app.router.add_routes(health.routes(ready))
    return app


async def _scraping(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    priorities = {kind: rank for rank, kind in enumerate(settings.priority)}
    scrape_config = ScrapeConfig(
        settings.interval,
        settings.timeout,
        settings.body_limit,
        priorities,
        PassThrough(settings.passthrough_allow, settings.passthrough_deny),
    )
    connector = aiohttp.TCPConnector(limit=256, ttl_dns_cache=300)
    async with aiohttp.ClientSession(connector=connector) as session:
        manager = ScrapeManager(session, app[STORE], app[METRICS], scrape_config)
        app[SCRAPER] = manager
        yield
        await manager.close()


async def _housekeeping(app: web.Application) -> AsyncIterator[None]:
    store = app[STORE]
    period = min(1.0, store.stale_after / 4)

    async def expire() -> None:
        while True:
            await asyncio.sleep(period)
            for source in store.expire(time.monotonic()):
                log.warning(
                    "source %s (node %s) is stale: its series are gone", source.name, source.node
                )

    async with owned(expire(), "expire stale sources"):
        yield


def _discovery(synced: list[Synced]) -> Callable[[web.Application], AsyncIterator[None]]:
    async def discovery(app: web.Application) -> AsyncIterator[None]:
        settings = app[SETTINGS]
        manager = app[SCRAPER]
        async with contextlib.AsyncExitStack() as stack:
            if settings.targets_file is not None:
                files = FileDiscovery(settings.targets_file, _sink(manager, "file"))
                synced.append(lambda: files.synced)
                await stack.enter_async_context(owned(files.run(), "targets file"))
            if settings.kubernetes:
                api_client = await _kubernetes_client(settings)
                stack.push_async_callback(api_client.close)
                selectors = {
                    flavour: (
                        getattr(settings, f"{flavour}_selector"),
                        getattr(settings, f"{flavour}_port"),
                    )
                    for flavour in settings.flavours
                }
                kube = KubernetesDiscovery(
                    client.CoreV1Api(api_client),
                    selectors,
                    settings.namespaces,
                    _sink(manager, "kubernetes"),
                    settings.kube_request_timeout,
                    settings.kube_watch_timeout,
                )
                synced.append(lambda: kube.synced)
                await stack.enter_async_context(owned(kube.run(), "kubernetes discovery"))
            yield

    return discovery


def _sink(manager: ScrapeManager, provider: str) -> Callable[[list[Target]], Awaitable[None]]:
    async def sink(targets: list[Target]) -> None:
        await manager.sync(provider, targets)

    return sink


class StartupError(Exception):
    """The collector cannot start as configured; the message says what to change."""


async def _kubernetes_client(settings: CollectorSettings) -> client.ApiClient:
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        path = str(settings.kubeconfig) if settings.kubeconfig else None
        try:
            await config.load_kube_config(config_file=path, client_configuration=configuration)
        except (config.ConfigException, OSError) as exc:
            raise StartupError(
                f"no Kubernetes configuration (not in a cluster, and the kubeconfig failed: {exc}); "
                "set --kubeconfig, or run with --no-kubernetes and --targets-file"
            ) from None
    return client.ApiClient(configuration)


@contextlib.asynccontextmanager
async def owned(coro: Coroutine[Any, Any, None], name: str) -> AsyncIterator[asyncio.Task[None]]:
    """Run a task that should live as long as the block; log at once if it crashes."""
    task = asyncio.create_task(coro, name=name)
    task.add_done_callback(_ended)
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _ended(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        log.error("task %r crashed", task.get_name(), exc_info=error)
    else:
        log.warning("task %r ended, but it should run until shutdown", task.get_name())
