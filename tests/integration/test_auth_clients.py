"""Real clients with credentials read the real collector over TLS with ``--read-auth kubernetes``.

A real Prometheus 2.42 scrapes ``/metrics`` with a bearer token file and the CA (a
cluster reader's job stores both teams, a tenant's job only its own); vmalert
evaluates a rule through ``/prometheus`` with a bearer token file and the CA (as
reader both teams fire, as tenant only its own, a bad token is refused); the real
agent pushes over TLS trusting the CA (and fails without it); a rotated certificate
keeps Prometheus scraping while a fresh connection sees the new one. FakeKube
answers the TokenReviews and SubjectAccessReviews.

promtool 2.42's query commands take no ``--http.config.file`` (no bearer token, no
CA flag): its TLS trust comes from ``SSL_CERT_FILE``, its credentials from the URL's
user and password (Basic, so ``--read-auth basic``); without credentials it is refused
by ``--read-auth kubernetes``. The http-config test runs once promtool has the flag.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import socket
import ssl
import time
from asyncio.subprocess import PIPE, STDOUT
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import pytest
import yaml
from aiohttp import web
from helpers import (
    VICTORIA_TOOLS,
    eventually,
    program,
    prometheus_tool,
    real_prometheus,
    real_vmalert,
    serving,
)
from prometheus_client.parser import text_string_to_metric_families

from collector.app import build_app
from collector.settings import CollectorSettings
from collector.web.webconfig import load
from testing.certs import PKI
from testing.fakekube import JSON, FakeKube, make_pod

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")

READER = "system:serviceaccount:monitoring:prometheus"
TENANT = "alice"
CARD = "GPU-12345678-1234-1234-1234-123456789abc"
GPU = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
TIMEOUT = aiohttp.ClientTimeout(total=10)
PROMTOOL_TIMEOUT = 60.0


@dataclass
class Secured:
    """The collector over TLS with read auth, fed both teams' series; its clients' files."""

    url: str
    """``https://127.0.0.1:PORT``."""
    pki: PKI
    folder: Path
    """Holds tls.crt and tls.key (replaced to rotate) and the token files."""
    reader: Path
    """A file holding the cluster reader's token."""
    tenant: Path
    """A file holding the tenant's (alice: pods in team-a) token."""
    http: aiohttp.ClientSession
    """Trusts the CA."""
    reader_token: str
    tenant_token: str

    @property
    def address(self) -> str:
        return self.url.removeprefix("https://")

    async def namespaces(self, token: str) -> set[str]:
        headers = {"Authorization": f"Bearer {token}"}
        async with self.http.get(f"{self.url}/metrics", headers=headers) as resp:
            text = await resp.text()
            assert resp.status == 200, text
        return {
            s.labels["namespace"]
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if "namespace" in s.labels
        }


def gpu_pod(name: str, namespace: str, uid: str) -> JSON:
    return make_pod(name, namespace, "node-a", uid=uid, containers=[{"name": "main", **GPU}])


def tls_web_config(folder: Path, pki: PKI, serial: int, extra: str = "") -> Path:
    """A web config serving a fresh certificate (``serial``) from ``folder``'s tls.crt/tls.key."""
    cert, key = pki.leaf(f"server-{serial}", serial)
    shutil.copy(cert, folder / "tls.crt")
    shutil.copy(key, folder / "tls.key")
    path = folder / "web.yml"
    path.write_text(
        "tls_server_config:\n"
        f"  cert_file: {folder / 'tls.crt'}\n"
        f"  key_file: {folder / 'tls.key'}\n" + extra
    )
    return path


@asynccontextmanager
async def tls_collector(web_config: Path, **overrides: Any) -> AsyncIterator[str]:
    """The real collector app served over TLS with ``web_config``; yield its https URL."""
    config = load(web_config)
    assert config.ssl_context is not None
    settings = CollectorSettings(listen="127.0.0.1:0", **overrides)
    async with serving(build_app(settings, web_config=config), config.ssl_context) as url:
        yield url


def push_payload(sequence: int = 1) -> JSON:
    return {
        "node": "node-a",
        "agent": "a1",
        "sequence": sequence,
        "time": time.time(),
        "nvml": True,
        "cards": [{"index": 0, "uuid": CARD, "name": "NVIDIA H200", "memory_used": 9 << 30}],
        "regions": [
            {
                "pod_uid": uid,
                "container": "main",
                "devices": [
                    {"index": 0, "uuid": CARD, "memory_used": used, "memory_limit": 4 << 30}
                ],
            }
            for uid, used in (("uid-a", 1 << 30), ("uid-b", 2 << 30))
        ],
    }


async def keep_pushing(http: aiohttp.ClientSession, url: str) -> None:
    """Push both teams' regions every half second, as an agent does, until cancelled."""
    sequence = 1
    while True:
        sequence += 1
        async with http.post(f"{url}/api/v1/push", json=push_payload(sequence)) as resp:
            assert resp.status == 204, await resp.text()
        await asyncio.sleep(0.5)


@asynccontextmanager
async def secured_collector(
    fake: FakeKube, kubeconfig: Path, folder: Path, pki: PKI, push: bool = True, **settings: Any
) -> AsyncIterator[Secured]:
    """Pods of team-a and team-b, a reader and a tenant; the collector over TLS with
    ``--read-auth kubernetes``; with ``push``, both teams' regions pushed every half
    second for the block (push auth none, unless ``settings`` say otherwise)."""
    for pod in (gpu_pod("train", "team-a", "uid-a"), gpu_pod("serve", "team-b", "uid-b")):
        fake.add_pod(pod)
    fake.allow_paths(READER, "/metrics", "/api/v1/*", "/prometheus/*", "/")
    fake.allow_namespace(TENANT, "team-a")
    reader, tenant = folder / "reader.token", folder / "tenant.token"
    reader_token, tenant_token = fake.issue_user_token(READER), fake.issue_user_token(TENANT)
    reader.write_text(reader_token + "\n")
    tenant.write_text(tenant_token + "\n")
    settings = {"push_auth": "none", "stale_after": 60.0, **settings}
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    async with (
        tls_collector(
            tls_web_config(folder, pki, 0x11),
            kubernetes=True,
            kubeconfig=kubeconfig,
            flavours="hami",
            read_auth="kubernetes",
            interval=1.0,
            timeout=0.5,
            **settings,
        ) as url,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx), timeout=TIMEOUT) as http,
    ):
        secured = Secured(url, pki, folder, reader, tenant, http, reader_token, tenant_token)

        async def ready() -> bool:
            async with http.get(f"{url}/readyz") as resp:
                return resp.status == 200

        await eventually(ready, 10, "collector ready")
        if push:
            async with http.post(f"{url}/api/v1/push", json=push_payload()) as resp:
                assert resp.status == 204, await resp.text()

            async def both() -> bool:
                return await secured.namespaces(reader_token) >= {"team-a", "team-b"}

            await eventually(both, 10, "both teams' series served")
            pushing = asyncio.create_task(keep_pushing(http, url))
            try:
                yield secured
            finally:
                pushing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pushing
                assert pushing.cancelled(), "a push failed"
        else:
            yield secured


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return PKI(tmp_path_factory.mktemp("pki"))


@pytest.fixture
async def secured(
    fake: FakeKube, kubeconfig: Path, tmp_path: Path, pki: PKI
) -> AsyncIterator[Secured]:
    folder = tmp_path / "collector"
    folder.mkdir()
    async with secured_collector(fake, kubeconfig, folder, pki) as s:
        yield s


def scrape_job(name: str, secured: Secured, token: Path) -> JSON:
    return {
        "job_name": name,
        "scheme": "https",
        "tls_config": {"ca_file": str(secured.pki.ca)},
        "authorization": {"type": "Bearer", "credentials_file": str(token)},
        "static_configs": [{"targets": [secured.address]}],
    }


def prometheus_config(*jobs: JSON) -> JSON:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": list(jobs),
    }


class PromQuery:
    """Prometheus' own HTTP API, over plain loopback HTTP."""

    def __init__(self, url: str, http: aiohttp.ClientSession) -> None:
        self.url, self.http = url, http

    async def __call__(self, promql: str) -> list[dict[str, Any]]:
        params = {"query": promql}
        async with self.http.get(f"{self.url}/api/v1/query", params=params) as resp:
            answer = await resp.json()
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    async def up(self, job: str) -> bool:
        return [r["value"][1] for r in await self(f'up{{job="{job}"}}')] == ["1"]

    async def namespaces(self, job: str) -> set[str]:
        rows = await self(
            f'count by (namespace) ({{job="{job}", __name__=~"hami_.+", namespace!=""}})'
        )
        return {r["metric"]["namespace"] for r in rows}

    async def targets(self, job: str) -> list[dict[str, Any]]:
        async with self.http.get(f"{self.url}/api/v1/targets") as resp:
            answer = await resp.json()
        return [t for t in answer["data"]["activeTargets"] if t["labels"]["job"] == job]


@pytest.mark.timeout(120)
async def test_prometheus_scrapes_over_tls_with_a_bearer_token(
    secured: Secured, tmp_path: Path
) -> None:
    config = prometheus_config(
        scrape_job("reader", secured, secured.reader),
        scrape_job("tenant", secured, secured.tenant),
    )
    with real_prometheus(tmp_path, config) as prometheus:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
            query = PromQuery(prometheus, http)

            async def stored() -> bool:
                return (
                    await query.up("reader")
                    and await query.up("tenant")
                    and await query.namespaces("reader") == {"team-a", "team-b"}
                    and await query.namespaces("tenant") == {"team-a"}
                )

            await eventually(stored, 60, "both jobs up and their series stored in Prometheus")
            assert await query('hami_vgpu_memory_used_bytes{job="reader", namespace="team-a"}')
            assert await query('{job="tenant", namespace="team-b"}') == []
            assert await query('{job="tenant", __name__=~"hami_host_gpu.+"}') == []
            # Some rounds later the tenant's job has still stored nothing of team-b.
            (target,) = await query.targets("tenant")
            seen = target["lastScrape"]

            async def scraped_again() -> bool:
                (now,) = await query.targets("tenant")
                return bool(now["lastScrape"] != seen and now["health"] == "up")

            await eventually(scraped_again, 20, "another scrape of the tenant's job")
            assert await query('{job="tenant", namespace="team-b"}') == []


async def promtool(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run promtool; its exit status and output (stdout and stderr)."""
    process = await asyncio.create_subprocess_exec(
        prometheus_tool("promtool"), *args, stdout=PIPE, stderr=STDOUT, env=env
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), PROMTOOL_TIMEOUT)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


QUERY = "sum by (namespace) (hami_vgpu_memory_used_bytes)"


def trusting(ca: Path) -> dict[str, str]:
    """promtool's environment with ``ca`` as Go's CA bundle (2.42 has no TLS flags)."""
    return {**os.environ, "SSL_CERT_FILE": str(ca), "SSL_CERT_DIR": str(ca.parent / "no-such")}


async def test_promtool_over_tls_without_credentials_is_refused(secured: Secured) -> None:
    status, output = await promtool(
        "query", "instant", f"{secured.url}/prometheus", QUERY, env=trusting(secured.pki.ca)
    )
    assert status != 0, output
    assert "401" in output or "unauthorized" in output.lower(), output
    assert "certificate" not in output.lower(), output  # refused by read auth, not by TLS


async def test_promtool_reads_over_tls_with_basic_credentials(tmp_path: Path, pki: PKI) -> None:
    """``--read-auth basic``: promtool 2.42 sends the URL's user and password as Basic auth."""
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    web_config = tls_web_config(tmp_path, pki, 0x33, f"basic_auth_users:\n  grafana: {hashed}\n")
    async with tls_collector(
        web_config, kubernetes=False, read_auth="basic", push_auth="none"
    ) as url:
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx), timeout=TIMEOUT) as http,
            http.post(  # the web config's users guard every path, the push too
                f"{url}/api/v1/push",
                json=push_payload(),
                headers={"Authorization": "Basic " + base64.b64encode(b"grafana:s3cret").decode()},
            ) as resp,
        ):
            assert resp.status == 204, await resp.text()
        env = trusting(pki.ca)
        server = url.replace("https://", "https://grafana:s3cret@") + "/prometheus"
        query = 'count({__name__=~"hami_.+"})'

        async def answered() -> bool:
            status, output = await promtool("query", "instant", server, query, env=env)
            assert status == 0, output
            return "=>" in output

        await eventually(answered, 20, "promtool's answer with Basic credentials")
        wrong = url.replace("https://", "https://grafana:wrong@") + "/prometheus"
        status, output = await promtool("query", "instant", wrong, query, env=env)
        assert status != 0, output
        assert "401" in output or "unauthorized" in output.lower(), output
        system = {k: v for k, v in os.environ.items() if not k.startswith("SSL_CERT")}
        status, output = await promtool("query", "instant", server, query, env=system)
        assert status != 0, output  # the system's CAs do not know ours
        assert "certificate" in output.lower(), output


@asynccontextmanager
async def notifier() -> AsyncIterator[str]:
    """An Alertmanager stand-in that takes vmalert's notifications (vmalert needs one)."""

    async def accept(_: web.Request) -> web.Response:
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/api/v2/alerts", accept)
    app.router.add_post("/api/v1/alerts", accept)
    async with serving(app) as url:
        yield url


def alerting_rules(path: Path) -> Path:
    rule = {
        "alert": "TeamUsesGPUMemory",
        "expr": "sum by (namespace) (hami_vgpu_memory_used_bytes) > 0",
    }
    path.write_text(
        yaml.safe_dump({"groups": [{"name": "tls", "interval": "1s", "rules": [rule]}]})
    )
    return path


async def vmalert_rule(http: aiohttp.ClientSession, vmalert: str) -> dict[str, Any]:
    """The one rule's state in vmalert's ``/api/v1/rules``."""
    async with http.get(f"{vmalert}/api/v1/rules") as resp:
        answer = await resp.json()
    (rule,) = [r for g in answer["data"]["groups"] for r in g["rules"]]
    return dict(rule)


async def vmalert_evaluates(
    secured: Secured, rules: Path, work: Path, token: Path, namespaces: set[str] | None
) -> dict[str, Any]:
    """vmalert reading ``/prometheus`` with ``token`` and the CA: wait until its rule fires
    for exactly ``namespaces``, or (None) until its evaluation is refused with 401."""
    await asyncio.to_thread(work.mkdir)
    args = (f"-datasource.bearerTokenFile={token}", f"-datasource.tlsCAFile={secured.pki.ca}")
    datasource = f"{secured.url}/prometheus"
    seen: dict[str, Any] = {}
    async with notifier() as alerts, aiohttp.ClientSession(timeout=TIMEOUT) as http:
        with real_vmalert(work, rules, datasource, alerts, args=args) as vmalert:

            async def evaluated() -> bool:
                seen.clear()
                seen.update(await vmalert_rule(http, vmalert))
                if namespaces is None:
                    return "401" in (seen.get("lastError") or "")
                firing = {a["labels"]["namespace"] for a in seen.get("alerts") or []}
                return bool(
                    seen.get("lastEvaluation", "").startswith("20")
                    and not seen.get("lastError")
                    and firing == namespaces
                )

            await eventually(evaluated, 30, f"{token.stem}: the rule's evaluation ({seen})")
    return seen


@pytest.mark.timeout(120)
async def test_vmalert_evaluates_through_tls_with_a_bearer_token(
    secured: Secured, tmp_path: Path
) -> None:
    if not (VICTORIA_TOOLS / "vmalert").exists():
        pytest.skip(f"{VICTORIA_TOOLS / 'vmalert'} is absent (make tools fetches it)")
    rules = alerting_rules(tmp_path / "rules.yml")
    both = {"team-a", "team-b"}
    await vmalert_evaluates(secured, rules, tmp_path / "reader", secured.reader, both)
    # The tenant's rule sees its own namespace only.
    await vmalert_evaluates(secured, rules, tmp_path / "tenant", secured.tenant, {"team-a"})
    bad = tmp_path / "bad.token"
    bad.write_text("not-a-token\n")
    refused = await vmalert_evaluates(secured, rules, tmp_path / "bad", bad, None)
    assert "the token is not valid" in refused["lastError"]
    assert not refused.get("alerts")


def agent_args(url: str, roots: Path, token: Path, ca: Path | None) -> tuple[str, ...]:
    return (
        "agent",
        "run",
        "--collector",
        url,
        *(("--collector-ca-file", str(ca)) if ca is not None else ()),
        "--node",
        "node-a",
        "--no-nvml",
        "--no-processes",
        "--roots",
        str(roots),
        "--token-file",
        str(token),
        "--interval",
        "0.5",
        "--listen",
        "127.0.0.1:0",
    )


def gauge(text: str, name: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


@pytest.mark.timeout(120)
async def test_the_agent_pushes_over_tls_only_trusting_the_ca(
    fake: FakeKube, kubeconfig: Path, tmp_path: Path, pki: PKI
) -> None:
    folder = tmp_path / "collector"
    folder.mkdir()
    push_token = tmp_path / "push.token"
    push_token.write_text("shared-push-token\n")
    roots = tmp_path / "vgpu"
    roots.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAMI_", "SSL_CERT"))}
    async with (
        secured_collector(
            fake,
            kubeconfig,
            folder,
            pki,
            push=False,
            push_auth="token",
            push_token_file=push_token,
        ) as secured,
        aiohttp.ClientSession(timeout=TIMEOUT) as plain,
    ):
        reader = {"Authorization": f"Bearer {secured.reader_token}"}

        async def agent_seen() -> bool:
            async with secured.http.get(f"{secured.url}/metrics", headers=reader) as resp:
                text = await resp.text()
            return any(
                s.value == 1 and s.labels.get("node") == "node-a"
                for family in text_string_to_metric_families(text)
                for s in family.samples
                if s.name == "hami_usage_collector_source_up"
            )

        async def agent_metrics(url: str) -> str:
            async with plain.get(f"{url}/metrics") as resp:
                return await resp.text()

        with program(*agent_args(secured.url, roots, push_token, None), env=env) as untrusting:
            url = await untrusting.url()

            async def failing() -> bool:
                return gauge(await agent_metrics(url), "hami_agent_push_failures") >= 1

            await eventually(failing, 30, "the pushes of the agent without the CA to fail")
            text = await agent_metrics(url)
            assert gauge(text, "hami_agent_pushes_accepted") == 0
            assert "CERTIFICATE_VERIFY_FAILED" in untrusting.stderr
            assert not await agent_seen()

        with program(*agent_args(secured.url, roots, push_token, pki.ca), env=env) as trusting:
            url = await trusting.url()

            async def accepted() -> bool:
                return gauge(await agent_metrics(url), "hami_agent_pushes_accepted") >= 1

            await eventually(accepted, 30, "the agent's pushes over TLS accepted")
            await eventually(agent_seen, 30, "the collector to show the agent's source")
            assert gauge(await agent_metrics(url), "hami_agent_push_failures") == 0


def serial_of_a_new_connection(url: str, ca: Path) -> str:
    """The serial (hex) of the certificate a fresh TLS connection to ``url`` is shown."""
    host, port = url.removeprefix("https://").rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection((host, int(port)), 5) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        peer = tls.getpeercert()
    assert peer is not None
    return str(peer["serialNumber"])


@pytest.mark.timeout(120)
async def test_a_rotated_certificate_keeps_prometheus_scraping(
    secured: Secured, tmp_path: Path
) -> None:
    ca = secured.pki.ca
    assert await asyncio.to_thread(serial_of_a_new_connection, secured.url, ca) == "11"
    config = prometheus_config(scrape_job("reader", secured, secured.reader))
    with real_prometheus(tmp_path, config) as prometheus:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
            query = PromQuery(prometheus, http)
            await eventually(lambda: query.up("reader"), 60, "Prometheus scraping over TLS")

            cert, key = secured.pki.leaf("server-rotated", 0x22)
            folder = secured.folder
            shutil.copy(key, folder / "tls.key.new")
            shutil.copy(cert, folder / "tls.crt.new")
            (folder / "tls.key.new").replace(folder / "tls.key")
            (folder / "tls.crt.new").replace(folder / "tls.crt")
            rotated_at = time.time()

            async def rotated() -> bool:
                serial = await asyncio.to_thread(serial_of_a_new_connection, secured.url, ca)
                return serial == "22"

            await eventually(rotated, 20, "a new connection with the new certificate")

            async def scraped_after(since: float) -> bool:
                rows = await query('timestamp(up{job="reader"} == 1)')
                return bool(rows) and float(rows[0]["value"][1]) > since

            await eventually(
                lambda: scraped_after(rotated_at + 2), 30, "good scrapes after the rotation"
            )
            assert await query.up("reader")
            rows = await query('min_over_time(up{job="reader"}[1h])')
            assert [r["value"][1] for r in rows] == ["1"]  # never a failed scrape
            assert await query.namespaces("reader") == {"team-a", "team-b"}
