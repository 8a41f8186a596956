"""Who is pushing: projected service-account tokens checked by TokenReview, or a shared token.

Every authenticator answers with a :class:`Caller`; ``node`` is the node the
caller may push for (None only where nothing binds it: a shared token, or no
authentication on a loopback-only collector).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from collector.sources.pods import PodDirectory

log = logging.getLogger(__name__)

_EXTRA = "authentication.kubernetes.io/"
_SA_PREFIX = "system:serviceaccount:"


class AuthError(Exception):
    """A refused caller: ``status`` is 401 (who are you?) or 403 (not allowed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated pusher and the node it is bound to."""

    name: str
    node: str | None


class Authenticator(Protocol):
    """Turns a bearer token (or its absence) into a :class:`Caller`, or raises :class:`AuthError`."""

    async def authenticate(self, token: str | None) -> Caller:
        """Check ``token``."""


class NoAuth:
    """Accept everyone: allowed only when the collector listens on loopback alone."""

    async def authenticate(self, token: str | None) -> Caller:
        """Accept the caller, bound to no node."""
        return Caller("anonymous", None)


class Refuse:
    """Refuse every push, saying which setting would enable them."""

    def __init__(self, why: str) -> None:
        self._why = why

    async def authenticate(self, token: str | None) -> Caller:
        """Refuse."""
        raise AuthError(401, self._why)


class SharedToken:
    """One bearer token for every agent, read from a file (re-read when the file changes)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stamp: tuple[int, int] | None = None
        self._token = b""

    async def authenticate(self, token: str | None) -> Caller:
        """Accept the holder of the file's token."""
        if token is None:
            raise AuthError(401, "no bearer token")
        if not hmac.compare_digest(token.encode(), self._current()):
            raise AuthError(401, "wrong bearer token")
        return Caller("shared-token", None)

    def _current(self) -> bytes:
        try:
            stat = self._path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != self._stamp:
                self._token = self._path.read_bytes().strip()
                self._stamp = stamp
        except OSError as exc:
            raise AuthError(503, f"cannot read the push token file: {exc.strerror}") from None
        if not self._token:
            raise AuthError(401, f"the push token file {self._path} is empty")
        return self._token


@dataclass(frozen=True, slots=True)
class _Reviewed:
    """What a TokenReview said of a token: who, and its node or the pod that gives it."""

    name: str
    node: str | None
    pod_uid: str | None


class TokenReviewAuth:
    """Check projected service-account tokens with the API server and bind them to a node.

    The token must carry ``audience`` and belong to one of ``service_accounts``
    (``namespace/name``, ``*`` for any namespace). Its node is the TokenReview's
    ``node-name`` extra where the cluster provides it, else the node of the pod
    it names, looked up at every push (the pod watch may not have seen a new
    agent pod yet, so that answer is not cached). Reviews are cached for at most
    ``cache_seconds`` (60 at most); an API server that cannot answer gives 503.
    """

    def __init__(
        self,
        api: client.AuthenticationV1Api,
        audience: str,
        service_accounts: list[str],
        pods: PodDirectory,
        request_timeout: float = 10.0,
        cache_seconds: float = 60.0,
    ) -> None:
        self._api = api
        self._audience = audience
        self._allowed = service_accounts
        self._pods = pods
        self._timeout = request_timeout
        self._ttl = min(cache_seconds, 60.0)
        self._cache: dict[bytes, tuple[float, _Reviewed | AuthError]] = {}
        self._failure = ""

    async def authenticate(self, token: str | None) -> Caller:
        """Accept a token the API server vouches for, from an allowed service account."""
        if not token:
            raise AuthError(401, "no bearer token")
        digest = hashlib.sha256(token.encode()).digest()
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is None or cached[0] <= now:
            if len(self._cache) > 10_000:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            cached = (now + self._ttl, await self._review(token))
            self._cache[digest] = cached
        reviewed = cached[1]
        if isinstance(reviewed, AuthError):
            raise reviewed
        if reviewed.node is not None:
            return Caller(reviewed.name, reviewed.node)
        pod = self._pods.pod(reviewed.pod_uid or "")
        if pod is None:
            raise AuthError(
                503, "the token's pod is not known (yet), so neither is its node; retry"
            )
        return Caller(reviewed.name, pod.node)

    def _failed(self, failure: str) -> None:
        """Warn once while the same failure repeats: every unchecked push would repeat it."""
        level = logging.DEBUG if failure == self._failure else logging.WARNING
        log.log(level, "TokenReview failed: %s", failure)
        self._failure = failure

    async def _review(self, token: str) -> _Reviewed | AuthError:
        review = client.V1TokenReview(
            spec=client.V1TokenReviewSpec(token=token, audiences=[self._audience])
        )
        try:
            answer: Any = await self._api.create_token_review(
                review, _request_timeout=self._timeout
            )
        except ApiException as exc:
            self._failed(f"{exc.status} {exc.reason}")
            raise AuthError(503, "cannot check the token now") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._failed(f"{type(exc).__name__}: {exc}")
            raise AuthError(503, "cannot reach the API server to check the token") from None
        self._failure = ""
        status = answer.status
        if not status or not status.authenticated:
            return AuthError(
                401, f"token not accepted: {getattr(status, 'error', None) or 'not authenticated'}"
            )
        if self._audience not in (status.audiences or []):
            return AuthError(401, f"token is not for audience {self._audience!r}")
        user = status.user
        username = user.username or ""
        if not username.startswith(_SA_PREFIX):
            return AuthError(403, f"{username} is not a service account")
        namespace, _, name = username.removeprefix(_SA_PREFIX).partition(":")
        if not any(_matches(allowed, namespace, name) for allowed in self._allowed):
            return AuthError(403, f"service account {namespace}/{name} may not push")
        extra = user.extra or {}
        node, uid = _first(extra, "node-name"), _first(extra, "pod-uid")
        if node is None and uid is None:
            return AuthError(403, "the token names neither a node nor a pod: not a bound pod token")
        return _Reviewed(f"{namespace}/{name}", node, uid)


def _matches(allowed: str, namespace: str, name: str) -> bool:
    want_ns, _, want_name = allowed.partition("/")
    return want_name == name and want_ns in ("*", namespace)


def _first(extra: dict[str, list[str]], key: str) -> str | None:
    values = extra.get(_EXTRA + key) or []
    return values[0] if values else None
