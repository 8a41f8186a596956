"""The one reader of a request's ``Authorization`` header: a bearer token, or a user and password.

Pushes, reads and the web configuration's users all take their credentials
from here, so the scheme is matched one way everywhere: case-insensitively
(RFC 9110 §11.1), the value's surrounding spaces stripped, an empty value the
same as none. ``tests/integration/test_imports.py`` checks that no module outside
:mod:`collector.auth` reads the header.
"""

from __future__ import annotations

import base64
import binascii
from typing import NamedTuple

from aiohttp import hdrs, web


class Basic(NamedTuple):
    """The user and password of ``Authorization: Basic``, as sent (bytes: no encoding is promised)."""

    user: bytes
    password: bytes


def _credentials(request: web.BaseRequest, scheme: str) -> str | None:
    """The header's value after ``scheme`` and one space, stripped; None for another scheme."""
    header = request.headers.get(hdrs.AUTHORIZATION, "")
    given, _, value = header.partition(" ")
    if given.lower() != scheme:
        return None
    return value.strip() or None


def bearer(request: web.BaseRequest) -> str | None:
    """The request's bearer token; None when it sends none (or another scheme, or an empty one)."""
    return _credentials(request, "bearer")


def basic(request: web.BaseRequest) -> Basic | None:
    """The request's basic-auth user and password; None when absent or not ``user:password`` in base64."""
    value = _credentials(request, "basic")
    if value is None:
        return None
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    return Basic(user, password) if sep else None
