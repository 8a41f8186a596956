"""The web configuration's ``basic_auth_users``: user -> bcrypt hash, checked per request.

A bcrypt check costs about 250 ms at cost 12 (bcrypt's default; ~60 ms at cost
10, measured on this project's build machine), by design, so a successful check
is remembered for :data:`AUTH_CACHE_SECONDS`, keyed by a keyed hash of the user
and password, and checks run in a worker thread, never on the event loop. An
unknown user costs the same bcrypt check as a known one: the time taken says
nothing about who exists. Refusing (401 with ``WWW-Authenticate: Basic``, never
saying which part was wrong) is the caller's part:
:func:`collector.web.webconfig.web_middleware`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping

import bcrypt
from aiohttp import web

from collector.auth.headers import basic

AUTH_CACHE_SECONDS = 60.0
"""How long a successful basic-auth check is remembered."""
AUTH_CACHE_SIZE = 1024
"""Most remembered checks; the oldest go first."""


class BasicUsers:
    """``basic_auth_users``: checks a request's ``Authorization: Basic``, remembering successes a while."""

    def __init__(self, users: Mapping[str, str], ttl: float = AUTH_CACHE_SECONDS) -> None:
        self._users = {user: hashed.encode() for user, hashed in users.items()}
        self._ttl = ttl
        self._key = secrets.token_bytes(32)
        self._good: OrderedDict[bytes, float] = OrderedDict()
        cost = int(next(iter(self._users.values()))[4:6])
        self._decoy = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(cost))

    async def check(self, request: web.BaseRequest) -> bool:
        """Whether ``request`` names a user and their password."""
        found = basic(request)
        if found is None:
            return False
        user, password = found
        key = hmac.new(self._key, user + b"\0" + password, hashlib.sha256).digest()
        now = time.monotonic()
        until = self._good.get(key)
        if until is not None and until > now:
            return True
        hashed = self._users.get(user.decode(errors="replace"))
        ok = await asyncio.to_thread(bcrypt.checkpw, password, hashed or self._decoy)
        if not ok or hashed is None:
            return False
        self._good[key] = now + self._ttl
        self._good.move_to_end(key)
        while len(self._good) > AUTH_CACHE_SIZE:
            self._good.popitem(last=False)
        return True
