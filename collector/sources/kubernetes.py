"""Discover monitor pods through the Kubernetes API (list, then watch).

One :class:`PodWatcher` per flavour selector and namespace keeps a current set
of pods: it lists, watches from the list's resourceVersion, resumes from the
last version it saw, relists on 410 Gone (as an HTTP status or an ERROR event),
and backs off with jitter while the API is away. Meanwhile the last known
targets keep being scraped: discovery only ever sends complete target sets.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from collector.sources.targets import Target

log = logging.getLogger(__name__)

Pod = Mapping[str, Any]


def pod_target(pod: Pod, flavour: str, default_port: int) -> Target | None:
    """Return the scrape target of a Running and Ready pod with an IP and a node."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    ip, node = status.get("podIP"), spec.get("nodeName")
    if status.get("phase") != "Running" or not ip or not node or not _ready(status):
        return None
    port = next(
        (
            p["containerPort"]
            for c in spec.get("containers", [])
            for p in c.get("ports") or []
            if p.get("name") == "metrics"
        ),
        default_port,
    )
    host = f"[{ip}]" if ":" in ip else ip
    name = f"{meta.get('namespace')}/{meta.get('name')}"
    return Target(f"pod/{meta['uid']}", f"http://{host}:{port}/metrics", node, flavour, name)


def _ready(status: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and str(c.get("status")).lower() == "true"
        for c in status.get("conditions") or []
    )


class Backoff:
    """Exponential backoff with full jitter."""

    def __init__(self, base: float, cap: float) -> None:
        self.base, self.cap, self.attempt = base, cap, 0

    async def wait(self) -> None:
        """Sleep a random time up to the current ceiling, then raise the ceiling."""
        await asyncio.sleep(random.uniform(0, min(self.cap, self.base * 2**self.attempt)))
        self.attempt += 1

    def reset(self) -> None:
        """Start again from the shortest wait."""
        self.attempt = 0


class PodWatcher:
    """Keeps ``pods`` (uid -> pod) equal to the API's pods for one selector and namespace."""

    def __init__(
        self,
        api: client.CoreV1Api,
        selector: str,
        namespace: str,
        changed: Callable[[], None],
        request_timeout: float,
        watch_timeout: int,
        backoff: Backoff,
    ) -> None:
        self.pods: dict[str, Pod] = {}
        self.synced = asyncio.Event()
        self._api = api
        self._selector = selector
        self._namespace = namespace
        self._changed = changed
        self._request_timeout = request_timeout
        self._watch_timeout = watch_timeout
        self._backoff = backoff
        self._where = f"pods {selector!r} in {namespace or 'all namespaces'}"

    async def run(self) -> None:
        """List and watch forever; errors are logged and retried, never raised."""
        version: str | None = None
        while True:
            try:
                if version is None:
                    version = await self._list()
                version = await self._watch(version)
                self._backoff.reset()
            except ApiException as exc:
                if exc.status == 410:
                    log.info("%s: resourceVersion %s expired, relisting", self._where, version)
                    version = None
                    continue
                log.warning("%s: API error %s %s; retrying", self._where, exc.status, exc.reason)
                await self._backoff.wait()
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                log.warning("%s: %s: %s; retrying", self._where, type(exc).__name__, exc)
                await self._backoff.wait()

    def _call_args(self) -> tuple[Callable[..., Awaitable[Any]], tuple[str, ...]]:
        if self._namespace:
            return self._api.list_namespaced_pod, (self._namespace,)
        return self._api.list_pod_for_all_namespaces, ()

    async def _list(self) -> str:
        func, args = self._call_args()
        resp = await func(
            *args,
            label_selector=self._selector,
            _preload_content=False,
            _request_timeout=self._request_timeout,
        )
        async with resp:
            if resp.status != 200:
                raise ApiException(status=resp.status, reason=resp.reason)
            body = json.loads(await resp.read())
        self.pods = {p["metadata"]["uid"]: p for p in body.get("items") or []}
        self.synced.set()
        self._changed()
        version: str = body["metadata"]["resourceVersion"]
        log.debug("%s: listed %d pods at version %s", self._where, len(self.pods), version)
        return version

    async def _watch(self, version: str) -> str:
        """Apply watch events from ``version`` until the server ends the watch."""
        func, args = self._call_args()
        stream = watch.Watch(return_type="object").stream(
            func,
            *args,
            label_selector=self._selector,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
            _request_timeout=self._watch_timeout + 15,
        )
        async with stream:
            async for event in stream:
                kind, obj = event["type"], event["raw_object"]
                version = obj["metadata"]["resourceVersion"]
                if kind in ("ADDED", "MODIFIED"):
                    self.pods[obj["metadata"]["uid"]] = obj
                elif kind == "DELETED":
                    self.pods.pop(obj["metadata"]["uid"], None)
                elif kind != "BOOKMARK":
                    log.warning("%s: ignoring unknown watch event %r", self._where, kind)
                    continue
                if kind != "BOOKMARK":
                    self._changed()
        return version


class KubernetesDiscovery:
    """Runs the pod watchers and sends the full target set whenever it may have changed."""

    def __init__(
        self,
        api: client.CoreV1Api,
        selectors: Mapping[str, tuple[str, int]],
        namespaces: list[str],
        sink: Callable[[list[Target]], Awaitable[None]],
        request_timeout: float = 30.0,
        watch_timeout: int = 60,
        backoff: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        self._sink = sink
        self._dirty = asyncio.Event()
        self._watchers = [
            (
                flavour,
                port,
                PodWatcher(
                    api,
                    selector,
                    namespace,
                    self._dirty.set,
                    request_timeout,
                    watch_timeout,
                    Backoff(*backoff),
                ),
            )
            for flavour, (selector, port) in selectors.items()
            for namespace in (namespaces or [""])
        ]

    @property
    def synced(self) -> bool:
        """Whether every watcher has listed once."""
        return all(w.synced.is_set() for _, _, w in self._watchers)

    def targets(self) -> list[Target]:
        """The targets of every watched pod that is ready to be scraped."""
        found = (
            pod_target(pod, flavour, port)
            for flavour, port, w in self._watchers
            for pod in w.pods.values()
        )
        return [t for t in found if t is not None]

    async def run(self) -> None:
        """Run the watchers; forward each change of the pod sets as a full target set."""
        async with asyncio.TaskGroup() as group:
            for flavour, _, watcher in self._watchers:
                group.create_task(watcher.run(), name=f"watch {flavour} pods")
            group.create_task(self._forward(), name="forward targets")

    async def _forward(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self._sink(self.targets())
