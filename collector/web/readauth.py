"""Who is reading: Kubernetes-native read authentication and authorization, as kube-rbac-proxy does.

Every read (``/metrics``, REST, the Prometheus API, the status page) passes one
middleware that turns the request into an :class:`~collector.web.access.Access`
or refuses it. With ``--read-auth kubernetes`` a bearer token is checked with a
TokenReview, then authorised with SubjectAccessReviews:

- **cluster reader**: allowed ``get`` on the non-resource URL of the surface
  asked (``/metrics``, ``/api/v1/*``, ``/prometheus/*``, ``/`` for the pages
  for people: the overview, the views and the status page): what a Prometheus
  service account gets in kube-prometheus;
- **tenant**: otherwise, the namespaces holding GPU pods in which the identity
  may ``list`` ``pods``; it reads only their series, and of the pages the
  views (:data:`TENANT_PAGES`), never the status page.

The verb is always ``get``: Grafana sends queries as POST forms, and a read is a
read. Answers are cached per token and per identity for ``ttl`` seconds and
bounded in number, so the API server sees at most one review per identity,
surface and namespace per TTL. Headers a proxy would set (``X-Forwarded-*``,
``Impersonate-*``) are never read: only the token says who is asking.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from collector.web.access import ACCESS, CLUSTER, Access
from collector.web.errors import error_response

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/api/v1/push"})
"""Probes (a kubelet sends no credentials) and pushes (checked by the push API itself)."""

SURFACES = (("/prometheus/", "/prometheus/*"), ("/api/v1/", "/api/v1/*"), ("/metrics", "/metrics"))
"""Path prefix -> the non-resource URL a cluster reader must be allowed to ``get``."""
STATUS_SURFACE = "/"
"""The pages for people (the overview, the views, ``/status``) and anything else."""
TENANT_PAGES = ("/nodes", "/workloads", "/namespaces")
"""Views a tenant reads (with ``/``, the overview), each filtered to its namespaces;
every other page of :data:`STATUS_SURFACE` (``/status``) is for cluster readers only."""

MAX_CACHED = 4096
"""Tokens, identities and (identity, namespace) verdicts kept at most, each."""

T = TypeVar("T")


class ReadRefused(Exception):
    """A refused read: 401 (who are you?), 403 (not allowed) or 503 (cannot check now).

    ``reason`` is the counted word; the message says no more than a guesser may know.
    """

    def __init__(self, status: int, reason: str, message: str, challenge: str = "Bearer") -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message
        self.challenge = challenge


class ReadAuth(Protocol):
    """Turns a request into the reader's :class:`Access`, or raises :class:`ReadRefused`."""

    async def access(self, request: web.Request) -> Access:
        """Who is asking, and what they may see."""


class OpenReads:
    """``--read-auth none``: every reader sees the whole cluster."""

    async def access(self, request: web.Request) -> Access:
        """A cluster reader."""
        return CLUSTER


class Unready:
    """``--read-auth kubernetes`` before the Kubernetes client exists: nobody reads yet."""

    async def access(self, request: web.Request) -> Access:
        """Refuse, for now."""
        raise ReadRefused(503, "unavailable", "read authorization is starting")


class BasicReads:
    """``--read-auth basic``: the web configuration's ``basic_auth_users`` checked the
    password already; each of them reads the whole cluster under their name."""

    async def access(self, request: web.Request) -> Access:
        """The basic-auth user, as a cluster reader."""
        header = request.headers.get("Authorization", "")
        if header[:6].lower() != "basic ":
            raise ReadRefused(401, "no_credentials", "authentication required", "Basic")
        try:
            user = base64.b64decode(header[6:].strip(), validate=True).partition(b":")[0]
        except ValueError:
            raise ReadRefused(401, "bad_credentials", "authentication required", "Basic") from None
        return Access(user.decode(errors="replace"))


@dataclass(frozen=True, slots=True)
class User:
    """What a TokenReview says of a token: the fields a SubjectAccessReview asks for."""

    name: str
    uid: str
    groups: tuple[str, ...]
    extra: dict[str, list[str]]


class _Cache(Generic[T]):
    """Answers kept until their expiry, at most :data:`MAX_CACHED` (expired ones go first)."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._items: dict[object, tuple[float, T]] = {}

    def get(self, key: object, now: float) -> T | None:
        found = self._items.get(key)
        return found[1] if found is not None and found[0] > now else None

    def put(self, key: object, value: T, now: float, ttl: float | None = None) -> None:
        if len(self._items) >= MAX_CACHED:
            self._items = {k: v for k, v in self._items.items() if v[0] > now}
            while len(self._items) >= MAX_CACHED:
                del self._items[next(iter(self._items))]
        self._items[key] = (now + (self.ttl if ttl is None else ttl), value)


class KubernetesReads:
    """TokenReview, then SubjectAccessReviews, each answer cached for ``ttl`` seconds.

    ``namespaces`` gives the namespaces that hold GPU pods now (the pod watch's):
    a tenant's namespaces are those of them it may list pods in.
    """

    REFUSAL_TTL = 10.0
    """Seconds a refused token stays refused without asking again: a guesser's retries
    must not turn into TokenReviews, and a token just granted waits little."""

    def __init__(
        self,
        authn: client.AuthenticationV1Api,
        authz: client.AuthorizationV1Api,
        namespaces: Callable[[], Iterable[str]],
        ttl: float = 60.0,
        request_timeout: float = 10.0,
        parallel: int = 16,
    ) -> None:
        self._authn, self._authz = authn, authz
        self._namespaces = namespaces
        self._timeout = request_timeout
        self._users: _Cache[User | ReadRefused] = _Cache(ttl)
        self._verdicts: _Cache[bool] = _Cache(ttl)
        self._tenants: _Cache[frozenset[str]] = _Cache(ttl)
        self._parallel = asyncio.Semaphore(parallel)
        self._failure = ""

    async def access(self, request: web.Request) -> Access:
        """The token's identity: a cluster reader of this surface, or a tenant of its namespaces."""
        header = request.headers.get("Authorization", "")
        if header[:7].lower() != "bearer " or not header[7:].strip():
            raise ReadRefused(401, "no_credentials", "a bearer token is required")
        user = await self._user(header[7:].strip())
        surface = surface_of(request.path)
        if await self._verdict(user, ("path", surface), _path_review(user, surface)):
            return Access(user.name)
        if surface == STATUS_SURFACE and not tenant_page(request.path):
            raise ReadRefused(403, "forbidden", "not allowed")
        namespaces = await self._tenant(user)
        if not namespaces:
            raise ReadRefused(403, "forbidden", "not allowed")
        return Access(user.name, namespaces)

    async def _user(self, token: str) -> User:
        digest = hashlib.sha256(token.encode()).digest()
        now = time.monotonic()
        found = self._users.get(digest, now)
        if found is None:
            found = await self._review(token)
            ttl = self.REFUSAL_TTL if isinstance(found, ReadRefused) else None
            self._users.put(digest, found, now, ttl)
        if isinstance(found, ReadRefused):
            raise found
        return found

    async def _review(self, token: str) -> User | ReadRefused:
        review = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
        answer: Any = await self._call(
            self._authn.create_token_review(review, _request_timeout=self._timeout)
        )
        status = answer.status
        if not status or not status.authenticated or not status.user:
            return ReadRefused(401, "bad_token", "the token is not valid")
        u = status.user
        return User(u.username or "", u.uid or "", tuple(u.groups or ()), dict(u.extra or {}))

    async def _tenant(self, user: User) -> frozenset[str]:
        """The GPU namespaces ``user`` may list pods in, asked at most once per TTL each; the
        answer is kept as long (finding the GPU namespaces walks every pod: 0.6 ms at 40 pods)."""
        key = (user.name, user.groups)
        now = time.monotonic()
        found = self._tenants.get(key, now)
        if found is None:
            found = await self._allowed_namespaces(user)
            self._tenants.put(key, found, now)
        return found

    async def _allowed_namespaces(self, user: User) -> frozenset[str]:
        candidates = sorted(set(self._namespaces()))
        verdicts = await asyncio.gather(
            *(self._verdict(user, ("pods", ns), _pods_review(user, ns)) for ns in candidates)
        )
        return frozenset(ns for ns, allowed in zip(candidates, verdicts, strict=True) if allowed)

    async def _verdict(
        self, user: User, what: tuple[str, str], review: client.V1SubjectAccessReview
    ) -> bool:
        key = (user.name, user.groups, what)
        now = time.monotonic()
        found = self._verdicts.get(key, now)
        if found is None:
            async with self._parallel:
                answer: Any = await self._call(
                    self._authz.create_subject_access_review(review, _request_timeout=self._timeout)
                )
            found = bool(answer.status and answer.status.allowed)
            self._verdicts.put(key, found, now)
        return found

    async def _call(self, call: Awaitable[T]) -> T:
        """One review; an API server that cannot answer is a 503, said once in the log."""
        try:
            answer = await call
        except ApiException as exc:
            self._failed(f"{exc.status} {exc.reason}")
            raise ReadRefused(503, "unavailable", "cannot check the credentials now") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._failed(f"{type(exc).__name__}: {exc}")
            raise ReadRefused(503, "unavailable", "cannot check the credentials now") from None
        self._failure = ""
        return answer

    def _failed(self, failure: str) -> None:
        level = logging.DEBUG if failure == self._failure else logging.WARNING
        log.log(level, "read authorization could not ask the API server: %s", failure)
        self._failure = failure


def surface_of(path: str) -> str:
    """The non-resource URL a cluster reader of ``path`` must be allowed to ``get``."""
    for prefix, surface in SURFACES:
        if path.startswith(prefix):
            return surface
    return STATUS_SURFACE


def tenant_page(path: str) -> bool:
    """Whether ``path`` is a page a tenant may read: the overview or one of :data:`TENANT_PAGES`."""
    return path == "/" or any(path == p or path.startswith(p + "/") for p in TENANT_PAGES)


def _path_review(user: User, path: str) -> client.V1SubjectAccessReview:
    return _review_of(
        user, non_resource_attributes=client.V1NonResourceAttributes(path=path, verb="get")
    )


def _pods_review(user: User, namespace: str) -> client.V1SubjectAccessReview:
    attributes = client.V1ResourceAttributes(namespace=namespace, verb="list", resource="pods")
    return _review_of(user, resource_attributes=attributes)


def _review_of(user: User, **attributes: Any) -> client.V1SubjectAccessReview:
    """A SubjectAccessReview of ``user`` (as its TokenReview named it) for ``attributes``."""
    spec = client.V1SubjectAccessReviewSpec(
        user=user.name,
        uid=user.uid or None,
        groups=list(user.groups),
        extra=user.extra or None,
        **attributes,
    )
    return client.V1SubjectAccessReview(spec=spec)


def read_auth_middleware(
    auth: Callable[[], ReadAuth], refused: Callable[[str], None]
) -> Middleware:
    """A middleware putting each read's :class:`Access` on the request, or refusing it.

    ``auth`` is asked per request (the Kubernetes client exists only once the app
    runs); ``refused`` counts each refusal by reason.
    """

    @web.middleware
    async def authorize(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        try:
            request[ACCESS] = await auth().access(request)
        except ReadRefused as exc:
            refused(exc.reason)
            headers = None
            if exc.status == 401:
                headers = {"WWW-Authenticate": f'{exc.challenge} realm="hami-usage-collector"'}
            return error_response(request.path, exc.status, exc.message, headers)
        return await handler(request)

    return authorize
