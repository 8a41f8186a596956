"""Read authorization's cost: what a cached identity's request pays, and the API server's load.

Why: with ``--read-auth kubernetes`` every read passes the middleware; for an
identity already reviewed it must add at most 1 ms at p99, and the API server
must see at most one review per identity, surface and namespace per TTL.

The real collector (``build_app``, read auth on) runs on 127.0.0.1 against
:class:`testing.fakekube.FakeKube`, which answers TokenReviews and
SubjectAccessReviews over HTTP; 40 GPU namespaces exist, and one agent push
fills the store. Measured, in one run:

* peer: ``GET /api/v1/pods?limit=1`` on the same collector build with
  ``--read-auth none``;
* a cluster reader's and a tenant's (one namespace of the 40) same request,
  after one warming request each;
* p50 / p99 of :data:`REQUESTS` sequential requests each, over one kept
  connection; the difference to the peer is the authorization path;
* the reviews the API server got during the timed requests (0 expected), and
  for the first request of a new identity (1 TokenReview + 1 path review,
  + one per namespace for a tenant).

``python -m bench readauth`` prints the table.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import aiohttp
from aiohttp import web

from collector.app import build_app
from collector.settings import CollectorSettings
from testing.fakekube import FakeKube, make_pod

REQUESTS = 2000
NAMESPACES = 40
GOAL_ADDED_P99_MS = 1.0
PATH = "/api/v1/pods?limit=1"
READER = "system:serviceaccount:monitoring:prometheus"
CARD = "GPU-12345678-1234-1234-1234-123456789abc"


async def _timed(http: aiohttp.ClientSession, url: str, token: str | None) -> list[float]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    took = []
    for _ in range(REQUESTS):
        t0 = time.perf_counter()
        async with http.get(url, headers=headers) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{url}: HTTP {resp.status}")
        took.append((time.perf_counter() - t0) * 1e3)
    return took


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


async def _serve(settings: CollectorSettings) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(build_app(settings), handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


async def _fill(http: aiohttp.ClientSession, url: str) -> None:
    regions = [
        {
            "pod_uid": f"uid-{i}",
            "container": "main",
            "devices": [
                {"index": 0, "uuid": CARD, "memory_used": 1 << 30, "memory_limit": 4 << 30}
            ],
        }
        for i in range(NAMESPACES)
    ]
    payload = {"node": "node-a", "agent": "a", "sequence": 1, "time": time.time()}
    payload |= {"nvml": True, "regions": regions}
    async with http.post(f"{url}/api/v1/push", json=payload) as resp:
        if resp.status != 204:
            raise RuntimeError(f"push: HTTP {resp.status}: {await resp.text()}")


async def measure() -> dict[str, Any]:
    """p50/p99 of the same read without auth, as a cluster reader and as a tenant; reviews."""
    async with FakeKube() as fake:
        for i in range(NAMESPACES):
            containers = [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
            fake.add_pod(
                make_pod(f"p{i}", f"team-{i}", "node-a", uid=f"uid-{i}", containers=containers)
            )
        fake.allow_paths(READER, "/metrics", "/api/v1/*", "/prometheus/*", "/")
        fake.allow_namespace("alice", "team-7")
        with TemporaryDirectory() as folder:
            kubeconfig = Path(folder) / "kubeconfig"
            fake.write_kubeconfig(kubeconfig)
            plain = CollectorSettings(listen="127.0.0.1:0", push_auth="none", kubernetes=False)
            guarded = CollectorSettings(
                listen="127.0.0.1:0",
                push_auth="none",
                flavours=["hami"],
                kubernetes=True,
                kubeconfig=kubeconfig,
                read_auth="kubernetes",
            )
            out: dict[str, Any] = {"requests": REQUESTS, "namespaces": NAMESPACES}
            async with aiohttp.ClientSession() as http:
                runner, url = await _serve(plain)
                try:
                    await _fill(http, url)
                    peer = await _timed(http, url + PATH, None)
                finally:
                    await runner.cleanup()
                runner, url = await _serve(guarded)
                try:
                    await _ready(http, url)
                    await _fill(http, url)
                    for who, token in (
                        ("cluster_reader", fake.issue_user_token(READER)),
                        ("tenant", fake.issue_user_token("alice")),
                    ):
                        before = fake.token_reviews + fake.access_reviews
                        await _timed_once(http, url + PATH, token)
                        first = fake.token_reviews + fake.access_reviews - before
                        before = fake.token_reviews + fake.access_reviews
                        took = await _timed(http, url + PATH, token)
                        out[who] = {
                            "p50_ms": _p(took, 50),
                            "p99_ms": _p(took, 99),
                            "added_p99_ms": _p(took, 99) - _p(peer, 99),
                            "reviews_first_request": first,
                            "reviews_while_cached": fake.token_reviews
                            + fake.access_reviews
                            - before,
                        }
                finally:
                    await runner.cleanup()
    out["peer"] = {"p50_ms": _p(peer, 50), "p99_ms": _p(peer, 99)}
    out["goal_added_p99_ms"] = GOAL_ADDED_P99_MS
    out["meets_goal"] = all(
        out[w]["added_p99_ms"] <= GOAL_ADDED_P99_MS and out[w]["reviews_while_cached"] == 0
        for w in ("cluster_reader", "tenant")
    )
    return out


async def _timed_once(http: aiohttp.ClientSession, url: str, token: str) -> None:
    async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}")


async def _ready(http: aiohttp.ClientSession, url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        async with http.get(url + "/readyz") as resp:
            if resp.status == 200:
                return
        await asyncio.sleep(0.1)
    raise RuntimeError("the collector did not become ready in 30 s")


def run() -> dict[str, Any]:
    """The figures (:func:`measure`)."""
    return asyncio.run(measure())


def table(r: dict[str, Any]) -> str:
    """The figures beside the peer."""
    lines = [
        f"GET {PATH}, {r['requests']} sequential requests each, {r['namespaces']} GPU namespaces",
        f"  no read auth (peer): p50 {r['peer']['p50_ms']:.2f} ms, p99 {r['peer']['p99_ms']:.2f} ms",
    ]
    for who in ("cluster_reader", "tenant"):
        w = r[who]
        lines.append(
            f"  {who}: p50 {w['p50_ms']:.2f} ms, p99 {w['p99_ms']:.2f} ms "
            f"(+{w['added_p99_ms']:.2f} ms p99); reviews: first request {w['reviews_first_request']},"
            f" while cached {w['reviews_while_cached']}"
        )
    lines.append(
        f"meets goal (<= {r['goal_added_p99_ms']:g} ms added at p99, 0 reviews cached): {r['meets_goal']}"
    )
    return "\n".join(lines)
