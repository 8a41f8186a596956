"""The API server's word on a token and on what its holder may do: TokenReview and SubjectAccessReview.

One :class:`Reviews` serves pushes, reads and sign-ins: one TokenReview
client and one cache of its answers, one SubjectAccessReview client and one
cache of its verdicts. Each caller draws its own conclusions from the answer
(a pusher must be a service account bound to a node; a reader must be allowed
a path or a namespace); the answer itself is the same kind of thing
whoever asked.

Answers are kept for ``ttl`` seconds, a refusal for :data:`REFUSAL_TTL` at
most (a guesser's retries must not turn into reviews, and a token just
granted waits little); at most :data:`MAX_CACHED` of each are kept, expired
ones dropped first. An API server that cannot answer raises
:class:`Unavailable`, which is never cached, and is logged once while the
same failure repeats (anyone can send a token: every unchecked request would
repeat it).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger(__name__)

MAX_CACHED = 16384
"""Token reviews, and verdicts, kept at most, each: every agent of a large cluster has a
token of its own (one per node) beside the readers', and a review dropped while still
good costs the next push a round trip to the API server."""
REFUSAL_TTL = 10.0
"""Seconds a refused token stays refused without asking again."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class User:
    """What a TokenReview vouched for: who the token is, and for which audiences."""

    name: str
    uid: str
    groups: tuple[str, ...]
    extra: dict[str, list[str]]
    audiences: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Rejected:
    """A token the API server did not authenticate; ``error`` is its word why (maybe empty)."""

    error: str


class Unavailable(Exception):
    """The API server could not answer a review; ``reached`` says whether it was reached at all."""

    def __init__(self, reached: bool) -> None:
        super().__init__("the API server could not answer" if reached else "unreachable")
        self.reached = reached


class Cache(Generic[T]):
    """Answers kept until their expiry, at most ``size`` (expired ones go first, then the oldest)."""

    def __init__(self, ttl: float, size: int = MAX_CACHED) -> None:
        self.ttl = ttl
        self._size = size
        self._items: dict[Hashable, tuple[float, T]] = {}

    def get(self, key: Hashable, now: float) -> T | None:
        """The answer kept under ``key``, or None when there is none or it expired."""
        found = self._items.get(key)
        return found[1] if found is not None and found[0] > now else None

    def put(self, key: Hashable, value: T, now: float, ttl: float | None = None) -> None:
        """Keep ``value`` for ``ttl`` seconds (the cache's own by default)."""
        if len(self._items) >= self._size:
            self._items = {k: v for k, v in self._items.items() if v[0] > now}
            while len(self._items) >= self._size:
                del self._items[next(iter(self._items))]
        self._items[key] = (now + (self.ttl if ttl is None else ttl), value)


class Reviews:
    """TokenReviews and SubjectAccessReviews through the API server, each answer cached."""

    def __init__(
        self,
        authn: client.AuthenticationV1Api,
        authz: client.AuthorizationV1Api,
        ttl: float = 60.0,
        request_timeout: float = 10.0,
        parallel: int = 16,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._authn, self._authz = authn, authz
        self._timeout = request_timeout
        self._clock = clock
        self._tokens: Cache[User | Rejected] = Cache(ttl)
        self._verdicts: Cache[bool] = Cache(ttl)
        self._parallel = asyncio.Semaphore(parallel)
        self._failure = ""

    @property
    def ttl(self) -> float:
        """Seconds an answer is kept."""
        return self._tokens.ttl

    async def token(self, token: str, audience: str | None = None) -> User | Rejected:
        """The TokenReview of ``token`` for ``audience`` (None: the API server's own), maybe cached.

        The cache key is the token's SHA-256 *and the audience asked*: a TokenReview
        answers for the audiences in its spec (none: the API server's), so the same
        token may be good for one and not the other. An agent's projected token (the
        collector's audience) reviewed as a reader's would fail, and a reader's token
        (``kubectl create token``: the API server's audience) must not pass as a
        pusher's because it once passed as a reader's. A push token and a read token
        are otherwise the same thing, kept the same way, in the same bounded cache.
        """
        key = (hashlib.sha256(token.encode()).digest(), audience)
        now = self._clock()
        found = self._tokens.get(key, now)
        if found is None:
            found = await self._review(token, audience)
            ttl = min(REFUSAL_TTL, self.ttl) if isinstance(found, Rejected) else None
            self._tokens.put(key, found, now, ttl)
        return found

    async def _review(self, token: str, audience: str | None) -> User | Rejected:
        spec = client.V1TokenReviewSpec(token=token, audiences=[audience] if audience else None)
        answer: Any = await self._call(
            "TokenReview",
            self._authn.create_token_review(
                client.V1TokenReview(spec=spec), _request_timeout=self._timeout
            ),
        )
        status = answer.status
        if not status or not status.authenticated or not status.user:
            return Rejected(getattr(status, "error", None) or "")
        u = status.user
        return User(
            u.username or "",
            u.uid or "",
            tuple(u.groups or ()),
            dict(u.extra or {}),
            tuple(status.audiences or ()),
        )

    async def allowed(self, user: User, what: Hashable, attributes: dict[str, Any]) -> bool:
        """Whether ``user`` may do ``attributes`` (a SubjectAccessReview's ``resource_attributes``
        or ``non_resource_attributes``), cached under ``what`` per identity."""
        key = (user.name, user.groups, what)
        now = self._clock()
        found = self._verdicts.get(key, now)
        if found is None:
            async with self._parallel:
                answer: Any = await self._call(
                    "SubjectAccessReview",
                    self._authz.create_subject_access_review(
                        _access_review(user, attributes), _request_timeout=self._timeout
                    ),
                )
            found = bool(answer.status and answer.status.allowed)
            self._verdicts.put(key, found, now)
        return found

    async def _call(self, kind: str, call: Awaitable[T]) -> T:
        """One review; an API server that cannot answer is :class:`Unavailable`, said once in the log."""
        try:
            answer = await call
        except ApiException as exc:
            self._failed(f"{kind} failed: {exc.status} {exc.reason}")
            raise Unavailable(reached=True) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._failed(f"{kind} failed: {type(exc).__name__}: {exc}")
            raise Unavailable(reached=False) from None
        self._failure = ""
        return answer

    def _failed(self, failure: str) -> None:
        level = logging.DEBUG if failure == self._failure else logging.WARNING
        log.log(level, "%s", failure)
        self._failure = failure


def _access_review(user: User, attributes: dict[str, Any]) -> client.V1SubjectAccessReview:
    """A SubjectAccessReview of ``user`` (as its TokenReview named it) for ``attributes``."""
    spec = client.V1SubjectAccessReviewSpec(
        user=user.name,
        uid=user.uid or None,
        groups=list(user.groups),
        extra=user.extra or None,
        **attributes,
    )
    return client.V1SubjectAccessReview(spec=spec)


def path_attributes(path: str, verb: str = "get") -> dict[str, Any]:
    """The attributes of ``verb`` on the non-resource URL ``path`` (kube-rbac-proxy's question)."""
    return {"non_resource_attributes": client.V1NonResourceAttributes(path=path, verb=verb)}


def pods_attributes(namespace: str, verb: str = "list") -> dict[str, Any]:
    """The attributes of ``verb`` on ``pods`` in ``namespace``."""
    return {
        "resource_attributes": client.V1ResourceAttributes(
            namespace=namespace, verb=verb, resource="pods"
        )
    }
