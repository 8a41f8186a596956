"""A person's sign-in: the bearer token kept in a cookie only the server reads, and its rules.

Modelled on Kubernetes Dashboard's token login, done the server's way. The
person pastes a token (``kubectl -n NS create token SA``) into ``/login``; it is
checked exactly as a bearer token is (:mod:`collector.auth.readers`) and kept,
as it is, in the cookie :data:`COOKIE`: ``HttpOnly`` (Dashboard's is written by
its JavaScript, so any script of the page could read it; ours is set and read
by the server only), ``SameSite=Strict``, ``Path=/``, ``Secure`` under TLS, and
expiring no later than the token. No session is kept on the server: each
request's token is reviewed as a header's would be (the same cache), so a
revoked token stops opening pages within the review TTL.

What the cookie opens is narrow (:func:`opens`): the pages for people and the
REST GETs they link, never a push, never ``/prometheus/*`` or ``/metrics``
(machines send their own header), never any other method. Because a browser
sends the cookie by itself, the sign-in and sign-out refuse another site's
``Origin`` (:func:`same_origin`, no login CSRF), and sign-in attempts are
rate-limited per client address (:class:`Attempts`).

This module holds the rules; the pages (``/login``'s form, ``POST /login``,
``POST /logout``) are :mod:`collector.web.ui.login`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from email.utils import formatdate
from urllib.parse import urlencode, urlsplit

from aiohttp import hdrs, web
from yarl import URL

COOKIE = "hami_usage_token"
"""The cookie's name; its value is the bearer token itself."""
DEFAULT_LIFETIME = 3600
"""Seconds a cookie lives when its token says no expiry (not a JWT): ``kubectl create
token``'s default lifetime, so a token that outlives it costs one more sign-in at worst."""
MAX_TOKEN = 3900
"""Longest token kept: a browser keeps cookies of 4,096 bytes at least (RFC 6265 §6.1),
name and attributes included; a service account's token is about 1,000."""
PAGES = ("/nodes", "/workloads", "/namespaces", "/status")
"""The pages for people besides the overview ``/``, each with the paths below it."""
SIGNED_IN = web.RequestKey("signed_in", bool)
"""Set on a request whose reader came from the cookie (the frame then offers to sign out)."""

_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""RFC 6750's b64token: what a bearer token is made of, and nothing that needs quoting."""


def page(path: str) -> bool:
    """Whether ``path`` is one of the pages for people (the overview, the views, the status page)."""
    return path == "/" or any(path == p or path.startswith(p + "/") for p in PAGES)


def opens(request: web.BaseRequest) -> bool:
    """Whether the cookie may stand for a bearer token on ``request``: a GET (or HEAD) of a
    page, or of the REST API the pages link (``/api/v1/...``, the CSV downloads) but its push."""
    if request.method not in (hdrs.METH_GET, hdrs.METH_HEAD):
        return False
    path = request.path
    return page(path) or (path.startswith("/api/v1/") and path != "/api/v1/push")


def cookie_token(request: web.BaseRequest) -> str | None:
    """The token of the sign-in cookie, where the cookie :func:`opens` the request; else None."""
    if not opens(request):
        return None
    return request.cookies.get(COOKIE) or None


def signed_in(request: web.Request) -> bool:
    """Whether the request's reader signed in with the form (and so may sign out)."""
    found: bool = request.get(SIGNED_IN, False)
    return found


def wants_sign_in(request: web.BaseRequest) -> bool:
    """Whether a refused ``request`` is a person's browser opening a page: it is sent to the form.

    Browsers ask for HTML when they navigate; a program (curl, Grafana, a test's
    client) asks for anything and gets the API's 401 instead.
    """
    accept = request.headers.get(hdrs.ACCEPT, "")
    return request.method in (hdrs.METH_GET, hdrs.METH_HEAD) and (
        page(request.path) and "text/html" in accept
    )


def to_sign_in(request: web.BaseRequest) -> web.Response:
    """A 303 to ``/login?next=<this path and query>``; a cookie that did not do is dropped."""
    response = web.Response(
        status=303,
        headers={hdrs.LOCATION: "/login?" + urlencode({"next": request.path_qs})},
    )
    if COOKIE in request.cookies:
        clear(response, request.secure)
    return response


def safe_next(target: str | None) -> str:
    """``target`` where it is a path of this site to go on to after signing in; else ``/``.

    Only a relative path is kept: one ``/`` first, not two (``//host`` is another
    site), no backslash (browsers read ``/\\host`` as ``//host``), no control
    character or space (browsers drop tabs and newlines: ``/\\t/host``), no scheme
    or host once parsed, and not the sign-in pages themselves.
    """
    if not target or len(target) > 2048 or not target.startswith("/"):
        return "/"
    if target.startswith("//") or "\\" in target:
        return "/"
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in target):
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or parts.path in ("/login", "/logout"):
        return "/"
    return target


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """The scheme, host and port of ``url``; None for anything that is not an http(s) URL."""
    try:
        parsed = URL(url)
    except ValueError:
        return None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return None
    return parsed.scheme, parsed.host.lower(), parsed.port


def same_origin(request: web.BaseRequest) -> bool:
    """Whether the request's ``Origin`` (or, without one, its ``Referer``) is this site.

    A form another site shows could otherwise sign a person in as the attacker
    (login CSRF) or out. Browsers send ``Origin`` on every POST; a request with
    neither header comes from no page, so no page can forge it.
    """
    sent = request.headers.get(hdrs.ORIGIN) or request.headers.get(hdrs.REFERER)
    if sent is None:
        return True
    ours = _origin(f"{request.scheme}://{request.host}")
    return ours is not None and _origin(sent) == ours


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim of ``token`` when it is a JWT, in Unix seconds; else None.

    Read without checking the signature: the TokenReview has vouched for the
    token already, and nothing but the cookie's lifetime is taken from it. (Six
    lines of base64 and JSON: a JWT library would verify what is verified already.)
    """
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    return float(exp)


def lifetime(token: str, now: float, default: int = DEFAULT_LIFETIME) -> int:
    """Whole seconds the cookie of ``token`` may live from ``now``: until the token's expiry
    (never later), or ``default`` when it says none; 0 when it has expired."""
    expiry = token_expiry(token)
    if expiry is None:
        return default
    return max(0, int(expiry - now))


def well_formed(token: str) -> bool:
    """Whether ``token`` is made of a bearer token's characters and fits in a cookie."""
    return len(token) <= MAX_TOKEN and _TOKEN.fullmatch(token) is not None


def keep(response: web.StreamResponse, token: str, seconds: int, secure: bool) -> None:
    """Set the sign-in cookie of ``token`` on ``response`` for ``seconds``."""
    response.set_cookie(
        COOKIE,
        token,
        max_age=seconds,
        expires=formatdate(time.time() + seconds, usegmt=True),
        path="/",
        secure=secure or None,
        httponly=True,
        samesite="Strict",
    )


def clear(response: web.StreamResponse, secure: bool) -> None:
    """Drop the sign-in cookie (the same attributes, expired)."""
    response.del_cookie(COOKIE, path="/", secure=secure or None, httponly=True, samesite="Strict")


class Attempts:
    """Sign-in attempts per client address: a token bucket of ``burst``, one more every ``every`` s.

    The table holds at most ``clients`` addresses, the least recently seen
    dropped first (a dropped address starts again with a full bucket: forgetting
    errs towards the person, and the TokenReview cache still answers a repeated
    wrong token without the API server). The address is the peer's: headers a
    proxy would set are never read.
    """

    def __init__(
        self,
        burst: int = 5,
        every: float = 12.0,
        clients: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._burst, self._every, self._clients, self._clock = burst, every, clients, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, address: str) -> float:
        """Count one attempt of ``address``: 0 when it may go on, else the seconds until it may."""
        now = self._clock()
        tokens, then = self._buckets.pop(address, (float(self._burst), now))
        tokens = min(float(self._burst), tokens + (now - then) / self._every)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) * self._every
        self._buckets[address] = (tokens, now)
        while len(self._buckets) > self._clients:
            self._buckets.popitem(last=False)
        return wait
