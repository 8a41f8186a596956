"""Careless and hostile requests: every endpoint answers each with a 4xx in its API's envelope.

Never a 500, never plain text from a route, at most one log line per refused
request, and nothing at warning level or above for requests anyone can send.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import get_args

import aiohttp
import pytest
from helpers import running_collector, until_ready

from collector.views.models import Error
from collector.web.errors import error_response

TOKEN = "s3cret"
PATHS = [
    "/metrics",
    "/api/v1/nodes",
    "/api/v1/nodes/gpu-1",
    "/api/v1/pods",
    "/api/v1/namespaces/a/pods/b",
    "/api/v1/openapi.json",
    "/api/v1/push",
    "/api/v1/nope",
    "/prometheus/api/v1/query",
    "/prometheus/api/v1/query_range",
    "/prometheus/api/v1/series",
    "/prometheus/api/v1/labels",
    "/prometheus/api/v1/label/node/values",
    "/prometheus/api/v1/metadata",
    "/prometheus/api/v1/nope",
    "/healthz",
    "/readyz",
    "/nope",
    "/%ff%fe",
]
FORM = "application/x-www-form-urlencoded"
BODIES: dict[str, tuple[bytes, dict[str, str]]] = {
    "bad gzip": (b"\x1f\x8b\x08\x00garbage", {"Content-Encoding": "gzip"}),
    "truncated gzip": (gzip.compress(b'{"node": "x"}' * 99)[:30], {"Content-Encoding": "gzip"}),
    "bad deflate": (b"not deflate", {"Content-Encoding": "deflate"}),
    "brotli": (b"\x0b\x02\x80hi\x03", {"Content-Encoding": "br"}),
    "zstd": (b"(\xb5/\xfd", {"Content-Encoding": "zstd"}),
    "unknown encoding": (b"x", {"Content-Encoding": "rot13"}),
    "multipart": (
        b'--b\r\nContent-Disposition: form-data; name="query"\r\n\r\nup\r\n--b',
        {"Content-Type": "multipart/form-data; boundary=b"},
    ),
    "multipart without boundary": (b"--b\r\n", {"Content-Type": "multipart/form-data"}),
    "form in utf-16": (b"query=%ff%fe", {"Content-Type": f"{FORM}; charset=utf-16"}),
    "unknown charset": (b"query=up", {"Content-Type": f"{FORM}; charset=klingon"}),
    "binary form": (b"query=\xff\xfe\x00", {"Content-Type": FORM}),
    "deep JSON": (b"[" * 100_000 + b"]" * 100_000, {"Content-Type": "application/json"}),
    "deep object": (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, {"Content-Type": "application/json"}),
    "latin-1 JSON": ('{"node": "é"}'.encode("latin-1"), {"Content-Type": "application/json"}),
    "plain text": (b"hello", {"Content-Type": "text/plain"}),
    "NUL bytes": (b"\x00" * 1000, {"Content-Type": "application/octet-stream"}),
    "over the limit": (b"query=" + b"a" * (5 << 20), {"Content-Type": FORM}),
}
HEADERS = {
    "a huge header": {"X-Big": "a" * 8000},
    "many headers": {f"X-H{i}": "v" for i in range(90)},
    "bad Accept": {"Accept": "é;;;q=x, */*;q=nan", "Accept-Encoding": "gzip;q=nan"},
}
METHODS = ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


@pytest.fixture
async def collector(tmp_path: Path) -> AsyncIterator[str]:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    async with running_collector(kubernetes=False, push_auth="token", push_token_file=token) as (
        url,
        _,
    ):
        await until_ready(url)  # then /readyz answers 200 too, whatever the headers
        yield url


def check_envelope(path: str, status: int, content_type: str, body: bytes) -> str | None:
    """What is wrong with an error answer for ``path``, or None."""
    if not 400 <= status < 500:
        return f"status {status}"
    if not content_type.startswith("application/json"):
        return f"content type {content_type}: {body[:80]!r}"
    doc = json.loads(body)
    if path.startswith("/prometheus/"):
        keys = {"status", "errorType", "error"}
    else:
        keys = {"status", "error", "message"}
    if doc.get("status") != "error" or not keys <= doc.keys():
        return f"envelope {doc}"
    return None


async def answer(
    session: aiohttp.ClientSession, method: str, url: str, **kwargs: object
) -> tuple[int, str, bytes]:
    async with session.request(method, url, **kwargs) as resp:  # type: ignore[arg-type]
        return resp.status, resp.headers.get("Content-Type", ""), await resp.read()


async def test_malformed_bodies_get_a_4xx_envelope_on_every_path(
    collector: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = []
    sent = 0
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        for path in PATHS:
            for method in METHODS:
                for name, (body, headers) in BODIES.items():
                    auth = {"Authorization": f"Bearer {TOKEN}"}
                    status, kind, got = await answer(
                        session, method, collector + path, data=body, headers={**headers, **auth}
                    )
                    sent += 1
                    problem = check_envelope(path, status, kind, got)
                    if problem and not (path in ("/healthz", "/readyz") and status < 400):
                        wrong.append(f"{method} {path} {name}: {problem}")
    assert not wrong, "\n".join(wrong[:20])
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(caplog.records) <= sent, "at most one line per refused request"


async def test_unknown_paths_and_methods_answer_json(collector: str) -> None:
    async with aiohttp.ClientSession() as session:
        status, _, body = await answer(session, "GET", collector + "/nope")
        assert (status, json.loads(body)["error"]) == (404, "not_found")
        status, _, body = await answer(session, "DELETE", collector + "/metrics")
        assert status == 405
        assert "GET" in json.loads(body)["message"]
        status, _, body = await answer(session, "GET", collector + "/prometheus/api/v1/nope")
        assert (status, json.loads(body)["errorType"]) == (404, "not_found")
        status, _, body = await answer(session, "PUT", collector + "/prometheus/api/v1/query")
        assert (status, json.loads(body)["errorType"]) == (405, "bad_data")


@pytest.mark.parametrize("headers", HEADERS.values(), ids=HEADERS.keys())
async def test_odd_headers_are_never_a_server_error(
    collector: str, headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    async with aiohttp.ClientSession() as session:
        for path in PATHS:
            for method in ("GET", "POST"):
                status, kind, body = await answer(
                    session, method, collector + path, headers=headers
                )
                assert status < 500, (method, path, status)
                if status >= 400:
                    assert check_envelope(path, status, kind, body) is None, (path, body[:100])
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_an_unauthenticated_broken_push_logs_nothing_above_debug(
    collector: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with aiohttp.ClientSession() as session:
        for body, headers in BODIES.values():
            status, _, got = await answer(
                session, "POST", collector + "/api/v1/push", data=body, headers=headers
            )
            assert status in (401, 413, 415), got
    assert not [r for r in caplog.records if r.levelno > logging.DEBUG]


@pytest.mark.parametrize(
    ("body", "encoding", "status", "reason"),
    [
        (gzip.compress(b"{}")[:-4], "gzip", 400, "invalid"),
        (b"\x1f\x8b junk", "gzip", 400, "invalid"),
        (gzip.compress(b" " * (5 << 20)), "gzip", 413, "too_large"),
        (b"{}", "br", 415, "unsupported_encoding"),
    ],
    ids=["truncated", "not gzip", "bomb", "brotli"],
)
async def test_push_encodings_are_refused_by_name(
    collector: str, body: bytes, encoding: str, status: int, reason: str
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Encoding": encoding}
    async with aiohttp.ClientSession() as session:
        got, _, text = await answer(
            session, "POST", collector + "/api/v1/push", data=body, headers=headers
        )
    assert (got, json.loads(text)["error"]) == (status, reason)


def test_error_envelopes_follow_the_path() -> None:
    prometheus = json.loads(error_response("/prometheus/api/v1/x", 400, "bad").text or "")
    assert prometheus == {"status": "error", "errorType": "bad_data", "error": "bad"}
    rest = json.loads(error_response("/api/v1/x", 413, "big").text or "")
    assert rest == {"status": "error", "error": "too_large", "message": "big"}


@pytest.mark.parametrize(
    "query",
    ["1" + "+1" * 20_000, "-" * 20_000 + "1", "(" * 30_000 + "1" + ")" * 30_000],
    ids=["chain", "unary", "parens"],
)
async def test_a_query_that_crashed_the_parser_is_refused(collector: str, query: str) -> None:
    """promql-parser segfaulted the process on these (found by fuzzing the front end)."""
    async with aiohttp.ClientSession() as session:
        for path in ("/query", "/series"):
            key = "match[]" if path == "/series" else "query"
            status, _, body = await answer(
                session, "POST", f"{collector}/prometheus/api/v1{path}", data={key: query}
            )
            assert (status, json.loads(body)["errorType"]) == (400, "bad_data"), body[:200]
        status, _, _ = await answer(session, "GET", collector + "/prometheus/api/v1/query?query=1")
        assert status == 200


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"FOO /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-H: v\r\n" * 300 + b"\r\n",
        b"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,
    ],
    ids=["unknown method", "huge header", "too many headers", "broken chunk", "TLS hello"],
)
async def test_framing_errors_are_4xx_and_quiet(
    collector: str, request_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """What the HTTP parser refuses before any route: a 4xx, one debug line, no traceback."""
    caplog.set_level(logging.DEBUG)
    host, port = collector.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request_bytes)
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    assert re.match(rb"HTTP/1\.[01] 4\d\d ", status_line), status_line
    assert not [r for r in caplog.records if r.levelno > logging.DEBUG or r.exc_info]


async def test_head_metrics_sends_no_body(collector: str) -> None:
    """HEAD /metrics used to send the page after the headers, which broke the connection."""
    async with aiohttp.ClientSession() as session:
        for _ in range(3):  # one kept-alive connection: a stray body would be read as a status line
            async with session.head(collector + "/metrics") as resp:
                assert resp.status == 200
                assert await resp.read() == b""


def test_every_rest_error_code_is_in_the_openapi_schema() -> None:
    codes = {json.loads(error_response("/x", s, "m").text or "")["error"] for s in range(400, 600)}
    assert codes <= set(get_args(Error.model_fields["error"].annotation))
