"""A small fake kube-apiserver that speaks the real HTTP wire protocol.

Why a real HTTP server rather than mocks: the discovery code talks to Kubernetes through
kubernetes_asyncio, whose watch machinery (chunked newline-delimited JSON, ERROR events,
410 handling, request timeouts, stream end on server close) is exactly what we need to
exercise. Mocking the client would test our assumptions about the library instead of
the library itself. Served: list/watch of pods, of (cluster-scoped) Nodes, of ResourceClaims
and of (cluster-scoped) ResourceSlices (resource.k8s.io/v1), TokenReviews of bound service-account tokens and of
readers' tokens, and SubjectAccessReviews decided from the rules a test grants; only on
loopback, every wait bounded.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import ipaddress
import json
import re
import secrets
import time
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


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


@dataclass(frozen=True)
class _Kind:
    """A served resource: its collection URL is ``{prefix}[/namespaces/{ns}]/{plural}``, the
    namespaced form only for a namespaced kind."""

    kind: str
    api_version: str
    plural: str
    prefix: str
    namespaced: bool = True


PODS = _Kind("Pod", "v1", "pods", "/api/v1")
NODES = _Kind("Node", "v1", "nodes", "/api/v1", namespaced=False)
CLAIMS = _Kind("ResourceClaim", "resource.k8s.io/v1", "resourceclaims", "/apis/resource.k8s.io/v1")
SLICES = _Kind(
    "ResourceSlice",
    "resource.k8s.io/v1",
    "resourceslices",
    "/apis/resource.k8s.io/v1",
    namespaced=False,
)
_KINDS = {k.plural: k for k in (PODS, NODES, CLAIMS, SLICES)}
_DISCOVERY = {  # group version -> (plural, kind, namespaced, verbs) of /apis/{group}/{version}
    CLAIMS.api_version: [
        (CLAIMS.plural, CLAIMS.kind, True, ["get", "list", "watch"]),
        (SLICES.plural, SLICES.kind, False, ["get", "list", "watch"]),
    ],
    "authentication.k8s.io/v1": [("tokenreviews", "TokenReview", False, ["create"])],
    "authorization.k8s.io/v1": [("subjectaccessreviews", "SubjectAccessReview", False, ["create"])],
}
_AUDIENCE = "hami-usage-collector"
_EXTRA = "authentication.kubernetes.io/"


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


def make_node(
    name: str,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
    uid: str | None = None,
) -> JSON:
    """Build a Node in the JSON shape the apiserver returns: cluster-scoped, with the
    kubelet's ``status.allocatable`` (quantities as strings) and a Ready condition.
    resourceVersion is stamped by FakeKube.add_node."""
    resources = {"cpu": "16", "memory": "131811412Ki", "pods": "110"} | dict(allocatable or {})
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "uid": uid or str(uuid.uuid4())}
        | {"labels": {"kubernetes.io/hostname": name} | dict(labels or {})}
        | {"annotations": dict(annotations or {}), "resourceVersion": ""}
        | {"creationTimestamp": _T0},
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def make_claim(
    name: str,
    namespace: str = "default",
    uid: str | None = None,
    reserved_for: list[JSON] | None = None,
) -> JSON:
    """Build an allocated ResourceClaim reserved for ``reserved_for`` pods, in order."""
    consumers = [
        {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
        for p in reserved_for or []
    ]
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    return {
        "kind": CLAIMS.kind,
        "apiVersion": CLAIMS.api_version,
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())}
        | {"resourceVersion": "", "creationTimestamp": _T0},
        "spec": {"devices": {"requests": [request]}},
        "status": {"reservedFor": consumers},
    }


@dataclass(frozen=True)
class _Token:
    """A bound service-account token as the apiserver would validate it."""

    pod: tuple[str, str, str]  # namespace, name, uid
    node: str
    service_account: str
    audiences: tuple[str, ...]
    with_node: bool
    expired: bool


@dataclass
class _UserToken:
    """A token of a user or service account bound to no pod: a reader's."""

    username: str
    groups: tuple[str, ...]
    expired: bool
    expires: float | None = None
    """Unix seconds after which reviews refuse it (a TokenRequest's ``exp``); None: never."""


@dataclass(frozen=True)
class _Rule:
    """What one subject (a user or a group) may do: like an RBAC rule bound to it.

    ``path`` for a non-resource URL (``/metrics``, or a prefix ending in ``*``);
    else ``verb`` on ``resource`` in ``namespace`` (``*`` for every namespace).
    """

    subject: str
    verb: str
    path: str | None = None
    resource: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class _Change:
    """One history entry; `old`/`new` let each watch decide ADDED/MODIFIED/DELETED itself."""

    rv: int
    kind: _Kind
    old: JSON | None
    new: JSON | None


@dataclass(eq=False)
class _Watch:
    kind: _Kind
    namespace: str | None
    selector: _Terms
    bookmarks: bool
    queue: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)

    def wants(self, obj: JSON | None) -> bool:
        if obj is None or (self.namespace and obj["metadata"]["namespace"] != self.namespace):
            return False
        return _labels_match(obj["metadata"].get("labels") or {}, self.selector)

    def translate(self, ch: _Change) -> JSON | None:
        """Per-watch event type, as the watch cache does: leaving the selector is DELETED."""
        if ch.kind is not self.kind:
            return None
        was, now = self.wants(ch.old), self.wants(ch.new)
        kind = {(True, True): "MODIFIED", (False, True): "ADDED", (True, False): "DELETED"}
        if (was, now) not in kind:
            return None
        return _event(kind[was, now], ch.new or ch.old or {})


class FakeKube:
    """In-process fake kube-apiserver: list/watch of pods, nodes, claims and slices, TokenReviews.

    Every kind shares one resourceVersion counter, one history and one compaction
    point, as they share etcd on a real cluster.
    """

    def __init__(self) -> None:
        self.token = secrets.token_hex(8)
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.gone_as_http_status = False
        self.watches_started = 0
        self.base_url = ""
        self.token_reviews = 0
        self.token_review_delay = 0.0  # seconds each review takes: a slow or hung apiserver
        self.access_reviews = 0
        self._user_tokens: dict[str, _UserToken] = {}
        self._rules: list[_Rule] = []
        self._objects: dict[_Kind, dict[tuple[str, str], JSON]] = {k: {} for k in _KINDS.values()}
        self._tokens: dict[str, _Token] = {}
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
        for k in _KINDS.values():
            app.router.add_get(f"{k.prefix}/{{plural:{k.plural}}}", self._collection)
            if k.namespaced:
                app.router.add_get(
                    f"{k.prefix}/namespaces/{{ns}}/{{plural:{k.plural}}}", self._collection
                )
        app.router.add_get("/apis/{group}/{version}", self._resources)
        app.router.add_get("/apis/{group}/{version}/", self._resources)  # the client's form
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._token_review)
        app.router.add_post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews", self._access_review
        )
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

    def _record(self, kind: _Kind, old: JSON | None, new: JSON | None) -> JSON:
        """Bump the global resourceVersion, stamp it, store, and tell the watches."""
        self._rv += 1
        obj = copy.deepcopy(new or old or {})
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if new is not None:
            self._objects[kind][_key(obj)] = obj
            change = _Change(self._rv, kind, old, obj)
        else:  # the DELETED object carries the deletion's resourceVersion, as in Kubernetes
            del self._objects[kind][_key(obj)]
            change = _Change(self._rv, kind, obj, None)
        self._history.append(change)
        self._broadcast("change", change)
        return copy.deepcopy(obj)

    def _add(self, kind: _Kind, obj: JSON) -> JSON:
        if _key(obj) in self._objects[kind]:
            raise ValueError(f"{kind.plural} {_key(obj)} already exists")
        return self._record(kind, None, obj)

    def add_pod(self, pod: JSON) -> JSON:
        """Create a pod; returns the stored copy with its resourceVersion."""
        return self._add(PODS, pod)

    def modify_pod(self, pod: JSON) -> JSON:
        """Replace an existing pod (by namespace/name)."""
        return self._record(PODS, self._objects[PODS][_key(pod)], pod)

    def delete_pod(self, namespace: str, name: str) -> JSON:
        """Delete a pod; returns its final state."""
        return self._record(PODS, self._objects[PODS][namespace, name], None)

    def add_node(self, node: JSON) -> JSON:
        """Create a Node; returns the stored copy with its resourceVersion."""
        return self._add(NODES, node)

    def modify_node(self, node: JSON) -> JSON:
        """Replace an existing Node (by name)."""
        return self._record(NODES, self._objects[NODES][_key(node)], node)

    def delete_node(self, name: str) -> JSON:
        """Delete a Node; returns its final state."""
        return self._record(NODES, self._objects[NODES]["", name], None)

    def add_claim(self, claim: JSON) -> JSON:
        """Create a ResourceClaim; returns the stored copy with its resourceVersion."""
        return self._add(CLAIMS, claim)

    def modify_claim(self, claim: JSON) -> JSON:
        """Replace an existing ResourceClaim (by namespace/name)."""
        return self._record(CLAIMS, self._objects[CLAIMS][_key(claim)], claim)

    def delete_claim(self, namespace: str, name: str) -> JSON:
        """Delete a ResourceClaim; returns its final state."""
        return self._record(CLAIMS, self._objects[CLAIMS][namespace, name], None)

    def add_slice(self, resource_slice: JSON) -> JSON:
        """Create a (cluster-scoped) ResourceSlice; returns the stored copy."""
        return self._add(SLICES, resource_slice)

    def issue_token(
        self,
        pod: JSON,
        service_account: str,
        audiences: tuple[str, ...] = (_AUDIENCE,),
        with_node: bool = True,
        expired: bool = False,
    ) -> str:
        """Mint a projected token bound to ``pod`` for ``service_account`` in its namespace.

        It is valid while a pod of that namespace, name and UID exists (checked at review
        time, as the apiserver does); ``with_node`` adds the node-name extra of 1.30+.
        """
        meta = pod["metadata"]
        ref = (meta["namespace"], meta["name"], meta["uid"])
        node = pod["spec"].get("nodeName") or ""
        token = "fake-sa." + secrets.token_urlsafe(24)  # opaque: nothing relies on JWT parts
        self._tokens[token] = _Token(ref, node, service_account, audiences, with_node, expired)
        return token

    def issue_user_token(
        self,
        username: str,
        groups: tuple[str, ...] = (),
        expired: bool = False,
        expires: float | None = None,
    ) -> str:
        """Mint a token of ``username`` (``system:serviceaccount:ns:name`` for a service
        account) bound to no pod, valid for any audience until revoked.

        With ``expires`` (Unix seconds) it is shaped as the TokenRequest API's are, a JWT
        (header, claims, signature, each base64url) whose claims carry ``exp``, and
        reviews refuse it from then on; without, it is opaque.
        """
        token = "fake-user." + secrets.token_urlsafe(24)
        if expires is not None:
            claims = {"sub": username, "exp": int(expires), "iat": int(time.time())}
            token = ".".join(
                base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode()
                for part in ({"alg": "RS256", "typ": "JWT"}, claims)
            )
            token += "." + secrets.token_urlsafe(32)  # the signature: nobody checks it here
        groups = (*groups, "system:authenticated")
        self._user_tokens[token] = _UserToken(username, groups, expired, expires)
        return token

    def revoke_token(self, token: str) -> None:
        """The token's account is deleted: reviews of it fail from now on."""
        self._user_tokens.pop(token, None)
        self._tokens.pop(token, None)

    def allow_paths(self, subject: str, *paths: str, verb: str = "get") -> None:
        """Let a user or group ``verb`` these non-resource URLs (a ClusterRole's nonResourceURLs)."""
        self._rules.extend(_Rule(subject, verb, path=path) for path in paths)

    def allow_namespace(
        self, subject: str, namespace: str, verb: str = "list", resource: str = "pods"
    ) -> None:
        """Let a user or group ``verb`` ``resource`` in ``namespace`` (a RoleBinding)."""
        self._rules.append(_Rule(subject, verb, resource=resource, namespace=namespace))

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
        self._broadcast("bookmark", str(self._rv))

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

    async def wait_for_watches(self, n: int, timeout: float = 5.0, *, total: bool = False) -> None:  # noqa: ASYNC109 - tests pass a plain deadline
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

    async def _resources(self, request: web.Request) -> web.StreamResponse:
        """Minimal discovery of a group version: the resources served under it."""
        gv = f"{request.match_info['group']}/{request.match_info['version']}"
        if gv not in _DISCOVERY:
            return _error(404, "NotFound", "the server could not find the requested resource")
        resources = [
            {"name": n, "singularName": "", "namespaced": ns, "kind": k, "verbs": v}
            for n, k, ns, v in _DISCOVERY[gv]
        ]
        body = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv}
        return web.json_response(body | {"resources": resources})

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        kind, q = _KINDS[request.match_info["plural"]], request.query
        try:
            selector = _parse_selector(q.get("labelSelector", ""))
        except ValueError as e:
            return _error(400, "BadRequest", str(e))
        bookmarks = q.get("allowWatchBookmarks") in _TRUE
        w = _Watch(kind, request.match_info.get("ns"), selector, bookmarks)
        if q.get("watch") in _TRUE:
            return await self._serve_watch(request, w)
        items = [o for _, o in sorted(self._objects[kind].items()) if w.wants(o)]
        meta = {"resourceVersion": str(self._rv)}
        head = {"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": meta}
        return web.json_response(head | {"items": items})

    async def _token_review(self, request: web.Request) -> web.StreamResponse:
        """Review a token like kube-apiserver: 201 with the verdict in ``status``."""
        self.token_reviews += 1
        await asyncio.sleep(self.token_review_delay)  # a slow apiserver, when a test sets one
        try:
            spec = (await request.json())["spec"]
            token, wanted = spec.get("token") or "", list(spec.get("audiences") or [])
        except (ValueError, KeyError, TypeError, AttributeError):
            return _error(400, "BadRequest", "the body is not a TokenReview")
        if not token:
            return _error(400, "BadRequest", "token is required for TokenReview in authentication")
        head = {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1"}
        answer = head | {"metadata": {"creationTimestamp": None}, "spec": spec}
        return web.json_response(answer | {"status": self._review(token, wanted)}, status=201)

    async def _access_review(self, request: web.Request) -> web.StreamResponse:
        """Decide a SubjectAccessReview from the rules given, as RBAC would."""
        self.access_reviews += 1
        try:
            spec = (await request.json())["spec"]
        except (ValueError, KeyError, TypeError):
            return _error(400, "BadRequest", "the body is not a SubjectAccessReview")
        subjects = {spec.get("user") or "", *(spec.get("groups") or [])}
        path = (spec.get("nonResourceAttributes") or {}).get("path")
        verb = (spec.get("nonResourceAttributes") or spec.get("resourceAttributes") or {}).get(
            "verb"
        )
        attrs = spec.get("resourceAttributes") or {}
        allowed = any(
            rule.subject in subjects and rule.verb in (verb, "*") and _grants(rule, path, attrs)
            for rule in self._rules
        )
        head = {"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1"}
        status = {"allowed": True} if allowed else {"allowed": False, "reason": "no rule"}
        return web.json_response(head | {"spec": spec, "status": status}, status=201)

    def _review(self, token: str, wanted: list[str]) -> JSON:
        """A TokenReviewStatus. A refusal omits ``authenticated`` (Go's omitempty on false)
        and says why in ``error``, except for a token nobody issued; an accepted token is
        good for the audiences it shares with those asked (all its own if none were)."""
        reader = self._user_tokens.get(token)
        if reader is not None:
            if reader.expired or (reader.expires is not None and time.time() >= reader.expires):
                return {"user": {}, "error": "token has expired"}
            who = {"username": reader.username, "groups": list(reader.groups)}
            return {"authenticated": True, "user": who, "audiences": wanted}
        t = self._tokens.get(token)
        if t is None:
            return {"user": {}}
        common = [a for a in t.audiences if not wanted or a in wanted]
        ns, name, uid = t.pod
        live = self._objects[PODS].get((ns, name))
        if not common:
            error = f"token audiences {_go_q(t.audiences)} is invalid for the target audiences {_go_q(wanted)}"
            return {"user": {}, "error": error}
        if t.expired:
            return {"user": {}, "error": "service account token has expired"}
        if live is None or live["metadata"]["uid"] != uid:
            return {"user": {}, "error": "service account token has been invalidated"}
        extra = {"pod-name": [name], "pod-uid": [uid]} | (
            {"node-name": [t.node]} if t.with_node else {}
        )
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]
        user = {
            "username": f"system:serviceaccount:{ns}:{t.service_account}",
            "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"sa:{ns}/{t.service_account}")),
            "groups": groups,
            "extra": {_EXTRA + k: v for k, v in extra.items()},
        }
        return {"authenticated": True, "user": user, "audiences": common}

    async def _serve_watch(self, request: web.Request, w: _Watch) -> web.StreamResponse:
        rv_param = request.query.get("resourceVersion", "")
        timeout = float(request.query.get("timeoutSeconds") or 0)
        deadline = asyncio.get_running_loop().time() + timeout if timeout else None
        backlog: list[JSON] = []
        ending = False
        if rv_param in ("", "0"):  # synthetic ADDED for the current state, then live events
            objects = sorted(self._objects[w.kind].items())
            backlog = [_event("ADDED", o) for _, o in objects if w.wants(o)]
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
                        head = {"kind": w.kind.kind, "apiVersion": w.kind.api_version}
                        backlog.append(
                            _event("BOOKMARK", head | {"metadata": {"resourceVersion": arg}})
                        )
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


def _grants(rule: _Rule, path: str | None, attrs: Mapping[str, Any]) -> bool:
    if path is not None:
        if rule.path is None:
            return False
        return path == rule.path or (rule.path.endswith("*") and path.startswith(rule.path[:-1]))
    return (
        rule.resource == attrs.get("resource")
        and rule.namespace is not None
        and rule.namespace in ("*", attrs.get("namespace"))
    )


def _go_q(values: Any) -> str:
    """A string list as Go's %q prints it: ["a" "b"]."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"
