"""``/login`` and ``/logout``: a person signs in to the pages with a bearer token, and out.

``GET /login`` shows the form (in the pages' frame); ``POST /login`` checks the
token exactly as a bearer token is checked (the same reviews, the same cache,
the same tenant scoping, as a read of ``/``) and keeps it in the sign-in cookie
(:mod:`collector.auth.signin`), then goes on to ``next``; ``POST /logout``
drops the cookie and goes back to ``/login``. Every refusal is counted with the
reads' (``hami_usage_collector_read_refused_total``): another site's
``Origin`` (403 ``cross_site``), too many attempts from one address (429
``rate_limited``), no token, a wrong one (401), an identity that may read no
page (403), an API server that cannot answer (503); each gets the form again,
and none a cookie.

``--read-auth none``: nobody signs in, ``/login`` goes to ``/``. ``--read-auth
basic``: the browser's own prompt is the sign-in, and ``/login`` says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from math import ceil

from aiohttp import hdrs, web

from collector.auth import signin
from collector.auth.readers import ReadAuth, ReadRefused
from collector.web.ui import layout, units
from collector.web.ui.login_template import BASIC, FORM

FORM_LIMIT = 16 << 10
"""Largest sign-in form body, in bytes: a token and a path."""

_FORM = layout.template(FORM)
_SAID = {
    "no_credentials": "Paste a token to sign in.",
    "bad_token": "That token was not accepted: it may have expired, been revoked, or never been one.",
    "forbidden": "That token's identity may read none of these pages.",
    "unavailable": "The API server cannot check tokens just now; try again in a moment.",
    "rate_limited": "Too many sign-in attempts from your address; wait a little and try again.",
    "cross_site": "This sign-in came from another site's page; open /login on this site instead.",
    "too_large": "That form is too large for a token.",
}
"""What the form says of each refusal (by the counted reason)."""


class SignInPages:
    """The sign-in and sign-out of the pages for people.

    ``auth`` is the collector's read authorization (asked per request: it exists
    once the app runs); ``refused`` counts a refusal by reason; ``attempts``
    limits sign-in attempts per client address.
    """

    def __init__(
        self,
        auth: Callable[[], ReadAuth],
        refused: Callable[[str], None],
        attempts: signin.Attempts | None = None,
    ) -> None:
        self._auth = auth
        self._refused = refused
        self._attempts = attempts or signin.Attempts()

    def routes(self) -> list[web.RouteDef]:
        """``GET /login``, ``POST /login``, ``POST /logout``."""
        return [
            web.get("/login", self.form),
            web.post("/login", self.sign_in),
            web.post("/logout", self.sign_out),
        ]

    async def form(self, request: web.Request) -> web.StreamResponse:
        """The sign-in form (or, without one to fill, where to go instead)."""
        mode = self._auth().mode
        if mode == "none":
            raise web.HTTPSeeOther("/")
        if mode == "basic":
            return _page(request, BASIC, 200)
        return _form(request, signin.safe_next(request.query.get("next")), 200)

    async def sign_in(self, request: web.Request) -> web.StreamResponse:
        """Check the posted token; on success keep it in the cookie and go on to ``next``.

        Another site's post is refused before anything is read, then an address over
        its attempts, then a body too large for a token.
        """
        reads = self._auth()
        if reads.mode != "kubernetes":
            raise web.HTTPSeeOther("/login")
        if not signin.same_origin(request):
            return self._refuse(request, 403, "cross_site")
        wait = self._attempts.take(request.remote or "")
        if wait:
            response = self._refuse(request, 429, "rate_limited")
            response.headers[hdrs.RETRY_AFTER] = str(ceil(wait))
            return response
        if request.content_length is None or request.content_length > FORM_LIMIT:
            return self._refuse(request, 413, "too_large")
        posted = await request.post()
        target = signin.safe_next(str(posted.get("next") or ""))
        token = str(posted.get("token") or "").strip()
        try:
            seconds = await _checked(reads, token)
        except ReadRefused as refused:
            return self._refuse(request, refused.status, refused.reason, target)
        response = web.Response(status=303, headers={hdrs.LOCATION: target})
        signin.keep(response, token, seconds, request.secure)
        return response

    def _refuse(
        self, request: web.Request, status: int, reason: str, target: str = "/"
    ) -> web.Response:
        """Count the refusal; the form again, saying why, with ``status`` and no cookie."""
        self._refused(reason)
        return _form(request, target, status, _SAID[reason])

    async def sign_out(self, request: web.Request) -> web.StreamResponse:
        """Drop the cookie and go back to the form (another site's page may not sign one out)."""
        if not signin.same_origin(request):
            return self._refuse(request, 403, "cross_site")
        response = web.Response(status=303, headers={hdrs.LOCATION: "/login"})
        signin.clear(response, request.secure)
        return response


async def _checked(reads: ReadAuth, token: str) -> int:
    """Check ``token`` as a bearer token reading ``/`` is checked; the seconds its cookie may live."""
    if not token:
        raise ReadRefused(401, "no_credentials", "no token")
    if not signin.well_formed(token):
        raise ReadRefused(401, "bad_token", "not a bearer token")
    await reads.token_access(token, "/")
    seconds = signin.lifetime(token, time.time())
    if seconds <= 0:
        raise ReadRefused(401, "bad_token", "the token has expired")
    return seconds


def _form(request: web.Request, target: str, status: int, message: str = "") -> web.Response:
    body = _FORM.render(
        next=target,
        message=message,
        default_lifetime=units.duration(signin.DEFAULT_LIFETIME),
    )
    return _page(request, body, status)


def _page(request: web.Request, body: str, status: int) -> web.Response:
    response = layout.render(request, "Sign in", body, status=status, reload=False)
    response.headers["X-Frame-Options"] = "deny"  # no other site may frame the form
    return response
