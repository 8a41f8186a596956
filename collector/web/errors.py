"""One answer for every request the handlers do not answer themselves: a JSON envelope.

Unknown paths, wrong methods, bodies over the limit, and any error that
escapes a handler are answered here in the envelope of the API the path belongs to: Prometheus' (``errorType``,
``error``) under ``/prometheus/``, the REST API's (``error``, ``message``)
everywhere else. A refused request is logged at debug level in one line, never
with a traceback: anyone can send one, so a flood of them must not flood the
log. Only a handler's own crash (a bug) is logged as an error, with its traceback.

The HTTP parser refuses what it cannot frame (a method it does not know, a
header over aiohttp's 8 KiB field limit, a broken request line or chunk) in
plain text before any route is found, so before any envelope is known;
:data:`HANDLER_ARGS` gives it a logger that records those in one debug line too.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

PROMETHEUS_PREFIX = "/prometheus/"

log = logging.getLogger(__name__)

_PROMETHEUS_TYPES = {401: "unauthorized", 403: "forbidden", 404: "not_found", 503: "unavailable"}
_REST_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
    503: "unavailable",
    431: "headers_too_large",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(
    path: str, status: int, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    """The envelope of ``path``'s API for an error ``status`` saying ``message``."""
    body: dict[str, Any]
    if path.startswith(PROMETHEUS_PREFIX):
        error_type = _PROMETHEUS_TYPES.get(status, "bad_data" if status < 500 else "internal")
        body = {"status": "error", "errorType": error_type, "error": message}
    else:
        code = _REST_CODES.get(status, "bad_request" if status < 500 else "internal")
        body = {"status": "error", "error": code, "message": message}
    return web.json_response(body, status=status, headers=headers)


@web.middleware
async def envelope_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer unknown routes, refused bodies and escaped errors in the path's envelope."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k in ("Allow", "Retry-After")}
        refused = _refused(request, exc.status, _message(exc), headers)
        if exc.status == 413:  # the rest of the body is never read: the connection cannot go on
            refused.force_close()
        return refused
    except (web.RequestPayloadError, UnicodeDecodeError, LookupError) as exc:
        # What a request's body or parameters do to aiohttp's readers: not a bug of ours.
        return _refused(request, 400, f"unreadable request: {exc}")
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return error_response(request.path, 500, "internal error, see the collector's log")


def _message(exc: web.HTTPException) -> str:
    if exc.status == 404:
        return "no such path"
    if exc.status == 405:
        return f"method {exc.method} not allowed; allowed: {exc.headers.get('Allow', '')}"  # type: ignore[attr-defined]
    return exc.text or exc.reason


def _refused(
    request: web.Request, status: int, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    log.debug("refused %s %s: %d %s", request.method, request.path, status, message)
    return error_response(request.path, status, message, headers)


class _ParserLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server logger with framing errors demoted to one debug line.

    aiohttp logs a request its parser refuses with a traceback at error level;
    that is the client's mistake, and anyone can make it.
    """

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        if isinstance(exc, BaseException) and _is_client_error(exc):
            said = " ".join(str(exc).split())  # one line: the parser's message spans several
            text = msg % args if isinstance(msg, str) and args else msg
            super().log(logging.DEBUG, "%s: %s", text, said)
            return
        super().log(level, msg, *args, **kwargs)


def _is_client_error(exc: BaseException) -> bool:
    from aiohttp.http_exceptions import HttpProcessingError

    return isinstance(exc, HttpProcessingError) and (exc.code or 400) < 500


HANDLER_ARGS: dict[str, Any] = {
    "logger": _ParserLog(logging.getLogger("aiohttp.server"), {}),
    # Bodies are decoded by the handlers that accept an encoding (bounded, counted
    # after decompression); aiohttp's own decoding fails an unknown one in the parser.
    "auto_decompress": False,
}
"""``handler_args`` of the collector's application."""
