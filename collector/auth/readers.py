"""Who is reading: Kubernetes-native read authentication and authorization, as kube-rbac-proxy does.

Every read (``/metrics``, REST, the Prometheus API, the pages) passes one
middleware that turns the request into an :class:`~collector.auth.access.Access`
or refuses it. With ``--read-auth kubernetes`` a bearer token (the
``Authorization`` header's, or where it opens the request the sign-in cookie's,
:mod:`collector.auth.signin`) is checked with a TokenReview, then authorised with
SubjectAccessReviews (both :class:`~collector.auth.reviews.Reviews`, shared with pushes):

- **cluster reader**: allowed ``get`` on the non-resource URL of the surface
  asked (``/metrics``, ``/api/v1/*``, ``/prometheus/*``, ``/`` for the pages
  for people: the overview, the views and the status page): what a Prometheus
  service account gets in kube-prometheus;
- **tenant**: otherwise, the namespaces holding GPU pods in which the identity
  may ``list`` ``pods``; it reads only their series, and of the pages the
  views (:data:`TENANT_PAGES`), never the status page.

The verb is always ``get``: Grafana sends queries as POST forms, and a read is a
read. Answers are cached per token and per identity for the reviews' TTL and
bounded in number, so the API server sees at most one review per identity,
surface and namespace per TTL. Headers a proxy would set (``X-Forwarded-*``,
``Impersonate-*``) are never read: only the token says who is asking.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import ClassVar, Literal, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from collector.auth import signin
from collector.auth.access import ACCESS, CLUSTER, Access
from collector.auth.headers import basic, bearer
from collector.auth.reviews import (
    Cache,
    Rejected,
    Reviews,
    Unavailable,
    User,
    path_attributes,
    pods_attributes,
)

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/api/v1/push", "/login", "/logout"})
"""Probes (a kubelet sends no credentials), pushes (checked by the push API itself) and
the sign-in pages (they check the token they are given themselves)."""

SURFACES = (("/prometheus/", "/prometheus/*"), ("/api/v1/", "/api/v1/*"), ("/metrics", "/metrics"))
"""Path prefix -> the non-resource URL a cluster reader must be allowed to ``get``."""
STATUS_SURFACE = "/"
"""The pages for people (the overview, the views, ``/status``) and anything else."""
TENANT_PAGES = ("/nodes", "/workloads", "/namespaces")
"""Views a tenant reads (with ``/``, the overview), each filtered to its namespaces;
every other page of :data:`STATUS_SURFACE` (``/status``) is for cluster readers only."""

Mode = Literal["none", "basic", "kubernetes"]
"""How readers sign in: ``none`` (nobody needs to), ``basic`` (the browser's own prompt)
or ``kubernetes`` (a bearer token, or the sign-in form)."""


class ReadRefused(Exception):
    """A refused read: 401 (who are you?), 403 (not allowed), 429 (too many sign-ins) or 503
    (cannot check now).

    ``reason`` is the counted word; the message says no more than a guesser may know.
    """

    def __init__(self, status: int, reason: str, message: str, challenge: str = "Bearer") -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message
        self.challenge = challenge


class ReadAuth(Protocol):
    """Turns a request, or a token given to the sign-in, into the reader's :class:`Access`,
    or raises :class:`ReadRefused`."""

    mode: ClassVar[Mode]

    async def access(self, request: web.Request) -> Access:
        """Who is asking, and what they may see."""

    async def token_access(self, token: str, path: str) -> Access:
        """Who holds ``token``, and what they may see reading ``path``: the sign-in's check."""


class OpenReads:
    """``--read-auth none``: every reader sees the whole cluster."""

    mode: ClassVar[Mode] = "none"

    async def access(self, request: web.Request) -> Access:
        """A cluster reader."""
        return CLUSTER

    async def token_access(self, token: str, path: str) -> Access:
        """A cluster reader, whatever the token."""
        return CLUSTER


class Unready:
    """``--read-auth kubernetes`` before the Kubernetes client exists: nobody reads yet."""

    mode: ClassVar[Mode] = "kubernetes"

    async def access(self, request: web.Request) -> Access:
        """Refuse, for now."""
        raise ReadRefused(503, "unavailable", "read authorization is starting")

    async def token_access(self, token: str, path: str) -> Access:
        """Refuse, for now."""
        raise ReadRefused(503, "unavailable", "read authorization is starting")


class BasicReads:
    """``--read-auth basic``: the web configuration's ``basic_auth_users`` checked the
    password already; each of them reads the whole cluster under their name."""

    mode: ClassVar[Mode] = "basic"

    async def access(self, request: web.Request) -> Access:
        """The basic-auth user, as a cluster reader."""
        found = basic(request)
        if found is None:
            raise ReadRefused(401, "no_credentials", "authentication required", "Basic")
        return Access(found.user.decode(errors="replace"))

    async def token_access(self, token: str, path: str) -> Access:
        """Refuse: these readers sign in through the browser's own basic-auth prompt."""
        raise ReadRefused(401, "no_credentials", "sign in with a user and password", "Basic")


class KubernetesReads:
    """TokenReview, then SubjectAccessReviews, each answer cached by ``reviews``.

    ``namespaces`` gives the namespaces that hold GPU pods now (the pod watch's):
    a tenant's namespaces are those of them it may list pods in.
    """

    mode: ClassVar[Mode] = "kubernetes"

    def __init__(self, reviews: Reviews, namespaces: Callable[[], Iterable[str]]) -> None:
        self._reviews = reviews
        self._namespaces = namespaces
        self._tenants: Cache[frozenset[str]] = Cache(reviews.ttl)

    async def access(self, request: web.Request) -> Access:
        """The reader of the request's bearer token, or of its sign-in cookie where that opens it."""
        token = bearer(request)
        if token is None:
            token = signin.cookie_token(request)
            if token is not None:
                request[signin.SIGNED_IN] = True
        if token is None:
            raise ReadRefused(401, "no_credentials", "a bearer token is required")
        return await self.token_access(token, request.path)

    async def token_access(self, token: str, path: str) -> Access:
        """The token's identity: a cluster reader of ``path``'s surface, or a tenant of its namespaces."""
        user = await self._user(token)
        surface = surface_of(path)
        if await self._allowed(user, ("path", surface), path_attributes(surface)):
            return Access(user.name)
        if surface == STATUS_SURFACE and not tenant_page(path):
            raise ReadRefused(403, "forbidden", "not allowed")
        namespaces = await self._tenant(user)
        if not namespaces:
            raise ReadRefused(403, "forbidden", "not allowed")
        return Access(user.name, namespaces)

    async def _user(self, token: str) -> User:
        try:
            found = await self._reviews.token(token)
        except Unavailable:
            raise ReadRefused(503, "unavailable", "cannot check the credentials now") from None
        if isinstance(found, Rejected):
            raise ReadRefused(401, "bad_token", "the token is not valid")
        return found

    async def _allowed(
        self, user: User, what: tuple[str, str], attributes: dict[str, object]
    ) -> bool:
        try:
            return await self._reviews.allowed(user, what, attributes)
        except Unavailable:
            raise ReadRefused(503, "unavailable", "cannot check the credentials now") from None

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
            *(self._allowed(user, ("pods", ns), pods_attributes(ns)) for ns in candidates)
        )
        return frozenset(ns for ns, allowed in zip(candidates, verdicts, strict=True) if allowed)


def surface_of(path: str) -> str:
    """The non-resource URL a cluster reader of ``path`` must be allowed to ``get``."""
    for prefix, surface in SURFACES:
        if path.startswith(prefix):
            return surface
    return STATUS_SURFACE


def tenant_page(path: str) -> bool:
    """Whether ``path`` is a page a tenant may read: the overview or one of :data:`TENANT_PAGES`."""
    return path == "/" or any(path == p or path.startswith(p + "/") for p in TENANT_PAGES)


Refuse = Callable[[str, int, str, dict[str, str] | None], web.StreamResponse]
"""Answers a refused request to ``path`` with ``status``, ``message`` and headers, in the
envelope of the API it asked (:func:`collector.web.errors.error_response`)."""


def read_auth_middleware(
    auth: Callable[[], ReadAuth], refused: Callable[[str], None], respond: Refuse
) -> Middleware:
    """A middleware putting each read's :class:`Access` on the request, or refusing it.

    ``auth`` is asked per request (the Kubernetes client exists only once the app
    runs); ``refused`` counts each refusal by reason; ``respond`` words it. A person's
    browser opening a page without a token that does is sent to the sign-in form instead.
    """

    @web.middleware
    async def authorize(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        try:
            request[ACCESS] = await auth().access(request)
        except ReadRefused as exc:
            refused(exc.reason)
            if (
                exc.status == 401
                and exc.challenge == "Bearer"
                and bearer(request) is None
                and signin.wants_sign_in(request)
            ):
                return signin.to_sign_in(request)
            headers = None
            if exc.status == 401:
                headers = {"WWW-Authenticate": f'{exc.challenge} realm="hami-usage-collector"'}
            return respond(request.path, exc.status, exc.message, headers)
        return await handler(request)

    return authorize
