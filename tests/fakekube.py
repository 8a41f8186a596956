"""A small fake kube-apiserver that speaks the real HTTP wire protocol for pods.

Why a real HTTP server rather than mocks: the discovery code talks to Kubernetes through
kubernetes_asyncio, whose watch machinery (chunked newline-delimited JSON, ERROR events,
410 handling, request timeouts, stream end on server close) is exactly what we need to
exercise. Mocking the client would test our assumptions about the library instead of
the library itself. Only pods are served, only on loopback, and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import copy
import ipaddress
import json
import re
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

JSON = dict[str, Any]
_TRUE = frozenset({"1", "t", "T", "true", "True", "TRUE"})  # Go's strconv.ParseBool
_KEY = r"[A-Za-z0-9_./-]+"
_VAL = r"[A-Za-z0-9_.-]*"
_T0 = "2024-01-01T00:00:00Z"
_Terms = list[tuple[str, str, frozenset[str]]]


def _parse_selector(text: str) -> _Terms:
    """Parse a label selector into (key, in|notin|exists|!, values) terms, like the apiserver.

    Raises ValueError on garbage, so a client building a bad selector fails here as it would
    against a real cluster. `=`, `==` are one-value `in`; `!=` is one-value `notin`.
    """
    terms: _Terms = []
    for raw in re.findall(r"(?:[^,(]|\([^)]*\))+", text):
        term = raw.strip()
        if m := re.fullmatch(rf"({_KEY})\s+(in|notin)\s*\(([^)]*)\)", term):
            terms.append((m[1], m[2], frozenset(v.strip() for v in m[3].split(","))))
        elif m := re.fullmatch(rf"({_KEY})\s*(==|!=|=)\s*({_VAL})", term):
            terms.append((m[1], "notin" if m[2] == "!=" else "in", frozenset({m[3]})))
        elif m := re.fullmatch(rf"(!?)\s*({_KEY})", term):
            terms.append((m[2], "!" if m[1] else "exists", frozenset()))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return terms


def _labels_match(labels: Mapping[str, str], terms: _Terms) -> bool:
    """Apply selector terms; as in Kubernetes, `notin` (and `!=`) match pods lacking the key."""
    return all(
        (labels.get(k) in vals if op in ("in", "notin") else k in labels)
        == (op in ("in", "exists"))
        for k, op, vals in terms
    )


def _status(code: int, reason: str, message: str) -> JSON:
    """A metav1.Status, the body the apiserver uses for every error."""
    head = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
    return {**head, "message": message, "reason": reason, "code": code}


def _error(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(_status(code, reason, message), status=code)


def _event(kind: str, obj: JSON) -> JSON:
    return {"type": kind, "object": obj}


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    return pod["metadata"]["namespace"], pod["metadata"]["name"]


def make_pod(
    name: str,
    namespace: str = "kube-system",
    node: str = "node-1",
    ip: str | None = "10.0.0.1",
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    phase: str = "Running",
    container_ports: Mapping[str, int] | None = None,
    uid: str | None = None,
    containers: list[JSON] | None = None,
) -> JSON:
    """Build a pod in the JSON shape the apiserver returns.

    Condition statuses are Go-style strings ("True"/"False") while containerStatuses[].ready
    is a JSON boolean, exactly as on a real cluster, so parsers meet both forms.
    `container_ports` maps port name -> number on a single container; `containers`
    replaces spec.containers wholesale. resourceVersion is stamped by FakeKube.add_pod.
    """
    if containers is None:
        ports = [
            {"name": n, "containerPort": p, "protocol": "TCP"}
            for n, p in (container_ports or {}).items()
        ]
        containers = [{"name": "main", "image": "registry.local/fake:1", "ports": ports}]
    flag = "True" if ready else "False"
    status: JSON = {
        "phase": phase,
        "hostIP": "192.168.0.1",
        "conditions": [
            {"type": t, "status": "True" if t in ("Initialized", "PodScheduled") else flag}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "containerStatuses": [
            {"name": c["name"], "ready": ready, "restartCount": 0, "started": phase == "Running"}
            for c in containers
        ],
    }
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())}
        | {"labels": dict(labels or {}), "resourceVersion": "", "creationTimestamp": _T0},
        "spec": {"nodeName": node, "containers": copy.deepcopy(containers)},
        "status": status,
    }


@dataclass(frozen=True)
class _Change:
    """One history entry; `old`/`new` let each watch decide ADDED/MODIFIED/DELETED itself."""

    rv: int
    old: JSON | None
    new: JSON | None


@dataclass(eq=False)
class _Watch:
    namespace: str | None
    selector: _Terms
    bookmarks: bool
    queue: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)

    def wants(self, pod: JSON | None) -> bool:
        if pod is None or (self.namespace and pod["metadata"]["namespace"] != self.namespace):
            return False
        return _labels_match(pod["metadata"].get("labels") or {}, self.selector)

    def translate(self, ch: _Change) -> JSON | None:
        """Per-watch event type, as the watch cache does: leaving the selector is DELETED."""
        was, now = self.wants(ch.old), self.wants(ch.new)
        kind = {(True, True): "MODIFIED", (False, True): "ADDED", (True, False): "DELETED"}
        if (was, now) not in kind:
            return None
        return _event(kind[was, now], ch.new or ch.old or {})


class FakeKube:
    """In-process fake kube-apiserver serving GET list/watch of pods over plain HTTP."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(8)
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.gone_as_http_status = False
        self.watches_started = 0
        self.base_url = ""
        self._pods: dict[tuple[str, str], JSON] = {}
        self._history: list[_Change] = []
        self._rv = 1
        self._compacted = 0
        self._watches: set[_Watch] = set()
        self._watch_changed = asyncio.Event()
        self._down = False
        self._stalled = False
        self._runner: web.AppRunner | None = None

    # -- lifecycle -------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1") -> str:
        """Bind an ephemeral loopback port; return the base URL."""
        if not ipaddress.ip_address(host).is_loopback:  # a literal, so one socket, one port
            raise ValueError("FakeKube only listens on a loopback address")
        app = web.Application(middlewares=[self._gate])
        app.router.add_get("/api", self._api)
        app.router.add_get("/version", self._version)
        app.router.add_get("/api/v1/pods", self._pods_handler)
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self._pods_handler)
        # handler_cancellation: a client hanging up must end its watch handler promptly.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        return self.base_url

    async def stop(self) -> None:
        """Close every watch, then the server; nothing keeps running afterwards."""
        if self._runner is not None:
            self._broadcast("close", None)
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeKube:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def write_kubeconfig(self, path: str | Path) -> None:
        """Write a kubeconfig (JSON is valid YAML) with a bearer-token user and context."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.base_url}}],
            "users": [{"name": "fake", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        Path(path).write_text(json.dumps(cfg, indent=2))

    # -- store -----------------------------------------------------------------------
    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def _record(self, old: JSON | None, new: JSON | None) -> JSON:
        """Bump the global resourceVersion, stamp it, store, and tell the watches."""
        self._rv += 1
        obj = copy.deepcopy(new or old or {})
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if new is not None:
            self._pods[_key(obj)] = obj
            change = _Change(self._rv, old, obj)
        else:  # the DELETED object carries the deletion's resourceVersion, as in Kubernetes
            del self._pods[_key(obj)]
            change = _Change(self._rv, obj, None)
        self._history.append(change)
        self._broadcast("change", change)
        return copy.deepcopy(obj)

    def add_pod(self, pod: JSON) -> JSON:
        """Create a pod; returns the stored copy with its resourceVersion."""
        if _key(pod) in self._pods:
            raise ValueError(f"pod {_key(pod)} already exists")
        return self._record(None, pod)

    def modify_pod(self, pod: JSON) -> JSON:
        """Replace an existing pod (by namespace/name)."""
        return self._record(self._pods[_key(pod)], pod)

    def delete_pod(self, namespace: str, name: str) -> JSON:
        """Delete a pod; returns its final state."""
        return self._record(self._pods[namespace, name], None)

    def compact(self) -> None:
        """Forget history up to now, like etcd compaction: older resume points get 410."""
        self._compacted = self._rv
        self._history.clear()

    # -- fault injection ---------------------------------------------------------------
    def expire_watches(self) -> None:
        """Send 410 ERROR on every open watch and close it (watch-cache reset)."""
        self._broadcast("expire", None)

    def send_bookmarks(self) -> None:
        """BOOKMARK at the current resourceVersion to watches that allowed bookmarks."""
        meta = {"resourceVersion": str(self._rv)}
        self._broadcast(
            "bookmark", _event("BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": meta})
        )

    def set_down(self, down: bool) -> None:
        """While down every request gets 503 and open watches are closed."""
        self._down = down
        if down:
            self._broadcast("close", None)

    def stall_watches(self, stall: bool) -> None:
        """While stalled, watches stay connected but send nothing, not even their end at
        timeoutSeconds, so only a client-side timeout notices. Events are held, not lost."""
        self._stalled = stall
        self._broadcast("wake", None)

    @property
    def open_watches(self) -> int:
        return len(self._watches)

    async def wait_for_watches(self, n: int, timeout: float = 5.0, *, total: bool = False) -> None:
        """Wait until exactly n watches are open (or, with total, n were ever started).

        Exactly, so a test can also wait for watches to go away; `total` catches a reconnect
        that a count of open watches would miss. `timeout` (not asyncio.timeout at the call
        site) keeps every caller bounded by default.
        """
        async with asyncio.timeout(timeout):
            while (self.watches_started < n) if total else (self.open_watches != n):
                self._watch_changed.clear()
                await self._watch_changed.wait()

    def _broadcast(self, kind: str, arg: Any) -> None:
        for w in self._watches:
            w.queue.put_nowait((kind, arg))

    # -- HTTP ------------------------------------------------------------------------
    @web.middleware
    async def _gate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Record every request, then apply outage and bearer-token auth like the apiserver."""
        self.requests.append((request.path, dict(request.query)))
        if self._down:
            msg = "the server is currently unable to handle the request"
            return _error(503, "ServiceUnavailable", msg)
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _error(401, "Unauthorized", "Unauthorized")
        return await handler(request)

    async def _api(self, request: web.Request) -> web.StreamResponse:
        cidrs = [{"clientCIDR": "0.0.0.0/0", "serverAddress": self.base_url.split("//", 1)[1]}]
        body = {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": cidrs}
        return web.json_response(body)

    async def _version(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake"})

    async def _pods_handler(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        try:
            selector = _parse_selector(q.get("labelSelector", ""))
        except ValueError as e:
            return _error(400, "BadRequest", str(e))
        w = _Watch(request.match_info.get("ns"), selector, q.get("allowWatchBookmarks") in _TRUE)
        if q.get("watch") in _TRUE:
            return await self._serve_watch(request, w)
        items = [p for _, p in sorted(self._pods.items()) if w.wants(p)]
        meta = {"resourceVersion": str(self._rv)}
        return web.json_response(
            {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items}
        )

    async def _serve_watch(self, request: web.Request, w: _Watch) -> web.StreamResponse:
        rv_param = request.query.get("resourceVersion", "")
        timeout = float(request.query.get("timeoutSeconds") or 0)
        deadline = asyncio.get_running_loop().time() + timeout if timeout else None
        backlog: list[JSON] = []
        ending = False
        if rv_param in ("", "0"):  # synthetic ADDED for the current state, then live events
            backlog = [_event("ADDED", p) for _, p in sorted(self._pods.items()) if w.wants(p)]
        elif not rv_param.isdigit():
            return _error(400, "BadRequest", f"invalid resourceVersion {rv_param!r}")
        elif int(rv_param) < self._compacted:
            msg = f"too old resource version: {rv_param} ({self._compacted})"
            if self.gone_as_http_status:
                return _error(410, "Expired", msg)
            backlog, ending = [_event("ERROR", _status(410, "Expired", msg))], True
        else:
            backlog = [e for c in self._history if c.rv > int(rv_param) and (e := w.translate(c))]
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        self._watches.add(w)  # registered before any await, so no change can slip between
        self.watches_started += 1
        self._watch_changed.set()
        try:
            await resp.prepare(request)
            async with asyncio.timeout_at(deadline) as clock:
                while True:
                    while backlog and not self._stalled:  # one chunk per event, like the server
                        ev = backlog.pop(0)
                        await resp.write(json.dumps(ev).encode() + b"\n")
                    if ending and not backlog:
                        break
                    clock.reschedule(None if self._stalled else deadline)  # a stall never ends
                    kind, arg = await w.queue.get()
                    if kind == "close":
                        break
                    if kind == "change" and (e := w.translate(arg)):
                        backlog.append(e)
                    elif kind == "bookmark" and w.bookmarks:
                        backlog.append(arg)
                    elif kind == "expire":
                        msg = f"too old resource version: {rv_param or 0} ({self._rv})"
                        backlog.append(_event("ERROR", _status(410, "Expired", msg)))
                        ending = True
        except TimeoutError:
            pass  # timeoutSeconds elapsed: end the stream cleanly, as the apiserver does
        finally:
            self._watches.discard(w)
            self._watch_changed.set()
        return resp
