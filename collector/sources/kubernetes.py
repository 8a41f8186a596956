"""Discover monitor pods through the Kubernetes API (list, then watch).

One :class:`PodWatcher` per flavour selector and namespace keeps a current set
of pods: it lists, watches from the list's resourceVersion, resumes from the
last version it saw, relists on 410 Gone (as an HTTP status or an ERROR event),
and backs off with jitter while the API is away. Meanwhile the last known
targets keep being scraped: discovery only ever sends complete target sets.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from collector.normalise.schema import Flavour
from collector.sources.targets import DiscoveryState, Target

log = logging.getLogger(__name__)

Object = Mapping[str, Any]
ListCall = Callable[..., Awaitable[Any]]
T = TypeVar("T")


def pod_target(pod: Object, flavour: Flavour, default_port: int) -> Target | None:
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


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds a list may take, and how long a watch lasts before it is renewed.

    A watch that goes silent is cut by the client ``stall`` seconds after its
    server-side timeout should have ended it.
    """

    request: float = 30.0
    watch: int = 60
    stall: float = 15.0


class Watcher(Generic[T]):
    """Keeps ``objects`` (uid -> ``keep(object)``) equal to one list call's objects in the API.

    ``keep`` slims each object down to what its user needs (None: not kept), so
    a cluster-wide watch holds little. ``changed`` is called after each change.
    """

    def __init__(
        self,
        what: str,
        list_all: ListCall,
        list_namespaced: ListCall,
        namespace: str,
        selector: str,
        keep: Callable[[Object], T | None],
        changed: Callable[[], None],
        timeouts: Timeouts,
        backoff: Backoff,
    ) -> None:
        self.objects: dict[str, T] = {}
        self.synced = asyncio.Event()
        self._call: ListCall = list_namespaced if namespace else list_all
        self._args = (namespace,) if namespace else ()
        self._selector = selector
        self._keep = keep
        self._changed = changed
        self._timeouts = timeouts
        self._backoff = backoff
        self.where = f"{what} {selector!r} in {namespace or 'all namespaces'}"
        self.last_error = ""

    async def run(self) -> None:
        """List and watch forever; every error is logged and retried, none ends the loop."""
        version: str | None = None
        while True:
            try:
                if version is None:
                    version = await self._list()
                began = time.monotonic()
                version, events = await self._watch(version)
                # A quiet watch that lived out its timeout is healthy: renew it at once.
                # Backing off after it left no watch open for up to the backoff's cap,
                # blind to every change of a cluster whose monitors rarely change.
                if events or time.monotonic() - began >= self._timeouts.watch / 2:
                    self._backoff.reset()
                else:
                    await self._backoff.wait()  # a watch that ends at once must not spin
            except ApiException as exc:
                if exc.status == 410:
                    log.info("%s: resourceVersion %s expired, relisting", self.where, version)
                    version = None
                    continue
                self._failed(f"API error {exc.status} {exc.reason}")
                await self._backoff.wait()
            except Exception as exc:
                self._failed(f"{type(exc).__name__}: {exc}")
                await self._backoff.wait()
            else:
                self.last_error = ""

    def status(self) -> DiscoveryState:
        """Whether it has listed, what it holds, its latest failure."""
        return DiscoveryState(self.where, self.synced.is_set(), len(self.objects), self.last_error)

    def _failed(self, message: str) -> None:
        """Log a failure once while it repeats (a cluster without an API fails every retry)."""
        level = logging.DEBUG if message == self.last_error else logging.WARNING
        log.log(level, "%s: %s; retrying", self.where, message)
        self.last_error = message

    async def _list(self) -> str:
        resp = await self._call(
            *self._args,
            label_selector=self._selector,
            _preload_content=False,
            _request_timeout=self._timeouts.request,
        )
        async with resp:
            if resp.status != 200:
                raise ApiException(status=resp.status, reason=resp.reason)
            body = json.loads(await resp.read())
        self.objects = {}
        for obj in body.get("items") or []:
            self._apply("ADDED", obj)
        self.synced.set()
        self.last_error = ""  # listed: whatever failed before is over
        self._changed()
        version: str = body["metadata"]["resourceVersion"]
        log.debug("%s: listed %d at version %s", self.where, len(self.objects), version)
        return version

    async def _watch(self, version: str) -> tuple[str, int]:
        """Apply watch events from ``version`` until the watch ends; return where it ended."""
        stream = watch.Watch(return_type="object").stream(
            self._call,
            *self._args,
            label_selector=self._selector,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._timeouts.watch,
            _request_timeout=self._timeouts.watch + self._timeouts.stall,
        )
        events = 0
        async with stream:
            async for event in stream:
                if not isinstance(event, dict) or "type" not in event:
                    raise ValueError(f"not a watch event: {str(event)[:80]!r}")
                event_type, obj = event["type"], event["raw_object"]
                version = obj["metadata"]["resourceVersion"]
                events += 1
                if event_type == "BOOKMARK":
                    continue
                if event_type not in ("ADDED", "MODIFIED", "DELETED"):
                    log.warning("%s: ignoring unknown watch event %r", self.where, event_type)
                    continue
                self._apply(event_type, obj)
                self._changed()
        return version, events

    def _apply(self, event_type: str, obj: Object) -> None:
        uid = obj["metadata"]["uid"]
        kept = None if event_type == "DELETED" else self._keep(obj)
        if kept is None:
            self.objects.pop(uid, None)
        else:
            self.objects[uid] = kept


class KubernetesDiscovery:
    """Runs the pod watchers and sends the full target set whenever it may have changed."""

    def __init__(
        self,
        api: client.CoreV1Api,
        selectors: Mapping[Flavour, tuple[str, int]],
        namespaces: list[str],
        sink: Callable[[list[Target]], Awaitable[None]],
        timeouts: Timeouts,
        backoff: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        self._sink = sink
        self._dirty = asyncio.Event()
        self._watchers = [
            Watcher(
                f"{flavour} pods",
                api.list_pod_for_all_namespaces,
                api.list_namespaced_pod,
                namespace,
                selector,
                functools.partial(pod_target, flavour=flavour, default_port=port),
                self._dirty.set,
                timeouts,
                Backoff(*backoff),
            )
            for flavour, (selector, port) in selectors.items()
            for namespace in (namespaces or [""])
        ]

    @property
    def synced(self) -> bool:
        """Whether every watcher has listed once."""
        return all(w.synced.is_set() for w in self._watchers)

    def status(self) -> list[DiscoveryState]:
        """Each watcher's state."""
        return [watcher.status() for watcher in self._watchers]

    def waiting(self) -> str:
        """What has not listed yet and the last error it met, for ``/readyz``."""
        for watcher in self._watchers:
            if not watcher.synced.is_set():
                error = watcher.last_error or "no answer yet"
                return f"{watcher.where} not listed ({error})"
        return ""

    def targets(self) -> list[Target]:
        """The targets of every watched pod that is ready to be scraped, once per pod."""
        by_key: dict[str, Target] = {}
        for watcher in self._watchers:
            for target in watcher.objects.values():
                by_key.setdefault(
                    target.key, target
                )  # a pod two selectors match: first flavour wins
        return list(by_key.values())

    async def run(self) -> None:
        """Run the watchers; forward each change of the pod sets as a full target set."""
        async with asyncio.TaskGroup() as group:
            for watcher in self._watchers:
                group.create_task(watcher.run(), name=f"watch {watcher.where}")
            group.create_task(self._forward(), name="forward targets")

    async def _forward(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self._sink(self.targets())
