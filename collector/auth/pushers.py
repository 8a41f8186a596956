"""Who is pushing: projected service-account tokens checked by TokenReview, or a shared token.

Every authenticator answers with a :class:`Caller`; ``node`` is the node the
caller may push for (None only where nothing binds it: a shared token, or no
authentication on a loopback-only collector).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from collector.auth.reviews import Rejected, Reviews, Unavailable

_EXTRA = "authentication.kubernetes.io/"
_SA_PREFIX = "system:serviceaccount:"


class AuthError(Exception):
    """A refused caller: ``status`` is 401 (who are you?), 403 (not allowed) or 503 (cannot check now)."""

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


NodeOfPod = Callable[[str], str | None]
"""The node of the pod with this UID, as the collector's pod watch knows it now (None: unknown)."""


class TokenReviewAuth:
    """Check projected service-account tokens with the API server and bind them to a node.

    The token must carry ``audience`` and belong to one of ``service_accounts``
    (``namespace/name``, ``*`` for any namespace). Its node is the TokenReview's
    ``node-name`` extra where the cluster provides it, else the node of the pod
    it names, looked up at every push (the pod watch may not have seen a new
    agent pod yet, so that answer is not cached). The review is the shared
    :class:`~collector.auth.reviews.Reviews`' (cached there); an API server that
    cannot answer gives 503.
    """

    def __init__(
        self,
        reviews: Reviews,
        audience: str,
        service_accounts: list[str],
        node_of_pod: NodeOfPod,
    ) -> None:
        self._reviews = reviews
        self._audience = audience
        self._allowed = service_accounts
        self._node_of_pod = node_of_pod

    async def authenticate(self, token: str | None) -> Caller:
        """Accept a token the API server vouches for, from an allowed service account."""
        if not token:
            raise AuthError(401, "no bearer token")
        try:
            user = await self._reviews.token(token, self._audience)
        except Unavailable as exc:
            if exc.reached:
                raise AuthError(503, "cannot check the token now") from None
            raise AuthError(503, "cannot reach the API server to check the token") from None
        if isinstance(user, Rejected):
            raise AuthError(401, f"token not accepted: {user.error or 'not authenticated'}")
        if self._audience not in user.audiences:
            raise AuthError(401, f"token is not for audience {self._audience!r}")
        if not user.name.startswith(_SA_PREFIX):
            raise AuthError(403, f"{user.name} is not a service account")
        namespace, _, name = user.name.removeprefix(_SA_PREFIX).partition(":")
        if not any(_matches(allowed, namespace, name) for allowed in self._allowed):
            raise AuthError(403, f"service account {namespace}/{name} may not push")
        node, uid = _first(user.extra, "node-name"), _first(user.extra, "pod-uid")
        if node is None and uid is None:
            raise AuthError(403, "the token names neither a node nor a pod: not a bound pod token")
        caller = f"{namespace}/{name}"
        if node is not None:
            return Caller(caller, node)
        node = self._node_of_pod(uid or "")
        if node is None:
            raise AuthError(
                503, "the token's pod is not known (yet), so neither is its node; retry"
            )
        return Caller(caller, node)


def _matches(allowed: str, namespace: str, name: str) -> bool:
    want_ns, _, want_name = allowed.partition("/")
    return want_name == name and want_ns in ("*", namespace)


def _first(extra: dict[str, list[str]], key: str) -> str | None:
    values = extra.get(_EXTRA + key) or []
    return values[0] if values else None
