"""``--web-config-file``: TLS, client certificates, rotation, basic auth and headers, over loopback.

Certificates are made with the ``openssl`` command (testing.certs).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import shutil
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import pytest
from aiohttp import web
from helpers import eventually, serving

from agent.push import Backlog, Pusher, Queued, trust
from collector import cli
from collector.app import build_app
from collector.settings import CollectorSettings
from collector.web.webconfig import WebConfig, WebConfigError, load
from testing.certs import PKI

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")

TIMEOUT = aiohttp.ClientTimeout(total=10)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return PKI(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def client_pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return PKI(tmp_path_factory.mktemp("client-pki"), "client-ca")


def web_config_file(folder: Path, pki: PKI, serial: int = 1, **tls: Any) -> Path:
    """A web config serving ``serial``'s certificate from ``folder``, ``tls`` keys added."""
    cert, key = pki.leaf(f"server-{serial}", serial)
    shutil.copy(cert, folder / "tls.crt")
    shutil.copy(key, folder / "tls.key")
    lines = ["tls_server_config:", "  cert_file: tls.crt", "  key_file: tls.key"]
    lines += [f"  {k}: {v}" for k, v in tls.items()]
    path = folder / "web.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


@asynccontextmanager
async def collector(config: WebConfig) -> AsyncIterator[str]:
    """The real collector app served with ``config`` on a loopback port; yield its base URL."""
    settings = CollectorSettings(listen="127.0.0.1:0", kubernetes=False, push_auth="none")
    async with serving(build_app(settings, web_config=config), config.ssl_context) as url:
        yield url


def client_context(pki: PKI, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


def session(ctx: ssl.SSLContext | None = None, **kw: Any) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(ssl=ctx if ctx is not None else False, **kw)
    return aiohttp.ClientSession(connector=connector, timeout=TIMEOUT)


async def get(s: aiohttp.ClientSession, url: str, **kw: Any) -> int:
    """The status of GET ``url``."""
    async with s.get(url, **kw) as resp:
        await resp.read()
        return resp.status


class Kept:
    """One kept-alive HTTPS connection, spoken to by hand: its peer certificate stays visible."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, url: str, ctx: ssl.SSLContext) -> Kept:
        host, port = url.removeprefix("https://").rsplit(":", 1)
        opened = asyncio.open_connection(host, int(port), ssl=ctx)
        return cls(*await asyncio.wait_for(opened, 10))

    @property
    def serial(self) -> str:
        """The serial number (hex) of the server's certificate."""
        return str(self.writer.get_extra_info("peercert")["serialNumber"])

    async def status(self, path: str) -> int:
        """GET ``path`` on this connection; its status (the body is read: the connection goes on)."""
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 10)
        lines = head.decode().split("\r\n")
        length = next(
            int(line.split(":", 1)[1])
            for line in lines
            if line.lower().startswith("content-length:")
        )
        await asyncio.wait_for(self.reader.readexactly(length), 10)
        return int(lines[0].split()[1])

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await asyncio.wait_for(self.writer.wait_closed(), 10)


async def test_serves_healthz_and_metrics_over_tls(pki: PKI, tmp_path: Path) -> None:
    config = load(web_config_file(tmp_path, pki))
    async with collector(config) as url, session(client_context(pki)) as s:
        assert url.startswith("https://")
        assert await get(s, url + "/healthz") == 200
        async with s.get(url + "/metrics") as resp:
            assert resp.status == 200
            assert "hami" in await resp.text()


async def test_plain_http_is_refused(pki: PKI, tmp_path: Path) -> None:
    config = load(web_config_file(tmp_path, pki))
    async with collector(config) as url, session() as s:
        with pytest.raises(aiohttp.ClientError):
            await get(s, url.replace("https://", "http://") + "/healthz")


async def test_client_certificate_required(pki: PKI, client_pki: PKI, tmp_path: Path) -> None:
    path = web_config_file(
        tmp_path,
        pki,
        client_auth_type="RequireAndVerifyClientCert",
        client_ca_file=str(client_pki.ca),
    )
    config = load(path)
    good = client_pki.leaf("client-good", 7, "DNS:good.client")
    stranger = pki.leaf("client-stranger", 8, "DNS:good.client")  # signed by the wrong CA
    async with collector(config) as url:
        async with session(client_context(pki)) as s:
            with pytest.raises(aiohttp.ClientError):
                await get(s, url + "/healthz")
        async with session(client_context(pki, stranger)) as s:
            with pytest.raises(aiohttp.ClientError):
                await get(s, url + "/healthz")
        async with session(client_context(pki, good)) as s:
            assert await get(s, url + "/healthz") == 200


async def test_an_expired_client_certificate_is_refused(
    pki: PKI, client_pki: PKI, tmp_path: Path
) -> None:
    path = web_config_file(
        tmp_path,
        pki,
        client_auth_type="RequireAndVerifyClientCert",
        client_ca_file=str(client_pki.ca),
    )
    expired = client_pki.expired_leaf("client-expired", 10, "DNS:good.client")
    good = client_pki.leaf("client-good", 7, "DNS:good.client")
    async with collector(load(path)) as url:
        async with session(client_context(pki, expired)) as s:
            with pytest.raises(aiohttp.ClientError):
                await get(s, url + "/metrics")
        async with session(client_context(pki, good)) as s:
            assert await get(s, url + "/metrics") == 200


async def test_client_allowed_sans(pki: PKI, client_pki: PKI, tmp_path: Path) -> None:
    path = web_config_file(
        tmp_path,
        pki,
        client_auth_type="VerifyClientCertIfGiven",
        client_ca_file=str(client_pki.ca),
        client_allowed_sans="[good.client]",
    )
    config = load(path)
    good = client_pki.leaf("client-good", 7, "DNS:good.client")
    other = client_pki.leaf("client-other", 9, "DNS:other.client")
    async with collector(config) as url:
        async with session(client_context(pki, good)) as s:
            assert await get(s, url + "/metrics") == 200
        async with session(client_context(pki, other)) as s:
            assert await get(s, url + "/metrics") == 403
            assert await get(s, url + "/healthz") == 200  # probes carry no certificate
        async with session(client_context(pki)) as s:
            assert await get(s, url + "/metrics") == 403


async def test_min_version_tls13_refuses_a_tls12_client(pki: PKI, tmp_path: Path) -> None:
    config = load(web_config_file(tmp_path, pki, min_version="TLS13"))
    async with collector(config) as url:
        old = client_context(pki)
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        async with session(old) as s:
            with pytest.raises(aiohttp.ClientError):
                await get(s, url + "/healthz")
        async with session(client_context(pki)) as s:
            assert await get(s, url + "/healthz") == 200


async def test_tls12_cipher_suite_is_used(pki: PKI, tmp_path: Path) -> None:
    path = web_config_file(
        tmp_path,
        pki,
        max_version="TLS12",
        cipher_suites="[TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]",
        curve_preferences="[CurveP384]",
    )
    async with collector(load(path)) as url:
        kept = await Kept.open(url, client_context(pki))
        try:
            assert await kept.status("/healthz") == 200
            sslobj = kept.writer.get_extra_info("ssl_object")
            assert sslobj.version() == "TLSv1.2"
            assert sslobj.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
        finally:
            await kept.close()


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def _users_file(folder: Path, **extra: str) -> Path:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    path = folder / "web.yml"
    lines = ["basic_auth_users:", f"  alice: {hashed}"]
    if extra:
        lines += ["http_server_config:", "  headers:"]
        lines += [f"    {k}: {v}" for k, v in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_basic_auth(tmp_path: Path) -> None:
    config = load(_users_file(tmp_path))
    assert config.ssl_context is None
    async with collector(config) as url, session() as s:
        right = _basic("alice", "s3cret")
        for _ in range(2):  # the second is answered from the cache
            async with s.get(url + "/api/v1/nodes", headers=right) as resp:
                assert resp.status == 200, await resp.text()
        for auth in (_basic("alice", "wrong"), _basic("bob", "s3cret"), {}):
            async with s.get(url + "/api/v1/nodes", headers=auth) as resp:
                assert resp.status == 401
                assert resp.headers["WWW-Authenticate"].startswith("Basic")
                body = await resp.json()
                assert body["status"] == "error"
                assert "alice" not in body["message"]
                assert "password" not in body["message"]
        async with s.get(url + "/prometheus/api/v1/query?query=up") as resp:
            assert resp.status == 401
            assert (await resp.json())["status"] == "error"
        for open_path in ("/healthz", "/readyz"):
            async with s.get(url + open_path) as resp:
                assert resp.status != 401


async def test_headers_on_every_response(tmp_path: Path) -> None:
    config = load(
        _users_file(tmp_path, **{"X-Frame-Options": "deny", "X-Content-Type-Options": "nosniff"})
    )
    auth = _basic("alice", "s3cret")
    async with collector(config) as url, session() as s:
        for path, headers in (
            ("/healthz", {}),
            ("/metrics", auth),  # streamed
            ("/no/such/path", auth),
            ("/api/v1/nodes", {}),  # refused
        ):
            async with s.get(url + path, headers=headers) as resp:
                assert resp.headers.get("X-Frame-Options") == "deny", path
                assert resp.headers.get("X-Content-Type-Options") == "nosniff", path


async def test_certificate_rotation(pki: PKI, tmp_path: Path) -> None:
    config = load(web_config_file(tmp_path, pki, serial=0x11))
    assert config.tls is not None
    ctx = client_context(pki)
    async with collector(config) as url:
        kept = await Kept.open(url, ctx)
        try:
            assert await kept.status("/healthz") == 200
            assert kept.serial == "11"

            new_cert, new_key = pki.leaf("server-rotated", 0x22)
            shutil.copy(new_key, tmp_path / "tls.key.new")
            shutil.copy(new_cert, tmp_path / "tls.crt.new")
            (tmp_path / "tls.key.new").replace(tmp_path / "tls.key")
            (tmp_path / "tls.crt.new").replace(tmp_path / "tls.crt")

            async def serial_of_a_new_connection() -> str:
                fresh = await Kept.open(url, ctx)
                try:
                    assert await fresh.status("/healthz") == 200
                    return fresh.serial
                finally:
                    await fresh.close()

            async def rotated() -> bool:
                return await serial_of_a_new_connection() == "22"

            await eventually(rotated, what="a new connection with the new certificate")
            assert await kept.status("/healthz") == 200  # opened before: goes on with the old one
            assert kept.serial == "11"
            assert config.tls.reloads == 1

            (tmp_path / "tls.crt").write_text("not a certificate\n")

            async def tried() -> bool:
                assert await serial_of_a_new_connection() == "22"  # the last good one serves
                return config.tls is not None and config.tls.reload_errors == 1

            await eventually(tried, what="the broken certificate to be tried")
            assert config.tls.reloads == 1
            assert await kept.status("/healthz") == 200
            async with session(ctx) as s, s.get(url + "/metrics") as resp:
                page = await resp.text()
            assert "hami_usage_collector_tls_reloads_total 1.0" in page
            assert "hami_usage_collector_tls_reload_errors_total 1.0" in page
        finally:
            await kept.close()


def _write(folder: Path, text: str) -> Path:
    path = folder / "web.yml"
    path.write_text(text)
    return path


BAD = {
    "malformed": ("tls_server_config: [\n", "malformed YAML"),
    "unknown top key": ("tls_config: {}\n", "tls_config: unknown key"),
    "unknown tls key": (
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  cert_fle: c\n",
        "tls_server_config.cert_fle: unknown key",
    ),
    "missing cert file": (
        "tls_server_config:\n  cert_file: nothere.crt\n  key_file: tls.key\n",
        "tls_server_config.cert_file: cannot read",
    ),
    "bad bcrypt": ("basic_auth_users:\n  alice: plain\n", "basic_auth_users.alice: not a bcrypt"),
    "unknown cipher": (
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  cipher_suites: [TLS_FOO]\n",
        "tls_server_config.cipher_suites: unknown cipher suite TLS_FOO",
    ),
    "tls13 cipher": (
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
        "TLS 1.3 suite, which cannot be chosen",
    ),
    "require any": (
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  client_auth_type: RequireAnyClientCert\n",
        "tls_server_config.client_auth_type: RequireAnyClientCert takes a client certificate without verifying",
    ),
    "request cert": (
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  client_auth_type: RequestClientCert\n",
        "tls_server_config.client_auth_type: RequestClientCert",
    ),
    "bad auth type": (
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  client_auth_type: Maybe\n",
        "tls_server_config.client_auth_type:",
    ),
    "two curves": (
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  curve_preferences: [CurveP256, X25519]\n",
        "tls_server_config.curve_preferences: Python's ssl sets one ECDH curve",
    ),
    "http2": ("http_server_config:\n  http2: true\n", "http_server_config.http2: true is refused"),
    "header": (
        "http_server_config:\n  headers:\n    Server: me\n",
        "http_server_config.headers.Server: this header cannot be configured",
    ),
    "version": (
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  min_version: TLS14\n",
        "tls_server_config.min_version:",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_load_refuses_in_one_line(pki: PKI, tmp_path: Path, case: str) -> None:
    web_config_file(tmp_path, pki)
    text, said = BAD[case]
    with pytest.raises(WebConfigError) as caught:
        load(_write(tmp_path, text))
    message = str(caught.value)
    assert said in message
    assert "\n" not in message


def test_key_that_does_not_match(pki: PKI, tmp_path: Path) -> None:
    path = web_config_file(tmp_path, pki)
    _, other_key = pki.leaf("other", 99)
    shutil.copy(other_key, tmp_path / "tls.key")
    with pytest.raises(WebConfigError, match=r"key_file: .* does not match cert_file"):
        load(path)
    (tmp_path / "tls.key").write_text("garbage\n")
    with pytest.raises(WebConfigError, match=r"key_file: .* holds no unencrypted PEM private key"):
        load(path)


def test_cli_refuses_to_start(pki: PKI, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n")
    status = cli.main(
        [
            "serve",
            "--no-kubernetes",
            "--push-auth",
            "none",
            "--listen",
            "127.0.0.1:0",
            "--web-config-file",
            str(path),
        ]
    )
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cannot start: ")
    assert "tls_server_config.cert_file: cannot read" in err
    assert err.endswith("(--web-config-file / HAMI_COLLECTOR_WEB_CONFIG_FILE)")
    assert "\n" not in err


async def _push_server(ctx: ssl.SSLContext) -> tuple[web.AppRunner, str, list[bytes]]:
    got: list[bytes] = []

    async def push(request: web.Request) -> web.Response:
        got.append(await request.read())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/api/v1/push", push)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx).start()
    host, port = runner.addresses[0][:2]
    return runner, f"https://{host}:{port}", got


async def test_agent_pushes_over_https_with_the_ca_file(pki: PKI, tmp_path: Path) -> None:
    cert, key = pki.leaf("collector", 5)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    runner, url, got = await _push_server(server)
    try:
        untrusted = Pusher(url, lambda: None, Backlog(60, 1 << 20), 5.0)
        untrusted.enqueue(Queued(gzip.compress(b"x"), time.time(), 1))
        trust(pki.ca)
        try:
            trusted = Pusher(url, lambda: None, Backlog(60, 1 << 20), 5.0)
            trusted.enqueue(Queued(gzip.compress(b"snapshot"), time.time(), 1))
            task = asyncio.create_task(trusted.run())
            try:
                await eventually(lambda: _accepted(trusted), what="the push to be accepted")
            finally:
                task.cancel()
        finally:
            trust(None)
        assert got == [b"snapshot"]
        task = asyncio.create_task(untrusted.run())  # the system's CAs do not know ours
        try:
            await eventually(lambda: _failed(untrusted), what="the push to fail")
        finally:
            task.cancel()
        assert "CERTIFICATE_VERIFY_FAILED" in (untrusted.stats.last_error or "")
    finally:
        await runner.cleanup()


async def _accepted(pusher: Pusher) -> bool:
    return pusher.stats.accepted == 1


async def _failed(pusher: Pusher) -> bool:
    return pusher.stats.failed >= 1
