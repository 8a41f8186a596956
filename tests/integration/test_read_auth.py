"""Reads authenticated by TokenReview and authorised by SubjectAccessReviews against FakeKube.

A cluster reader (allowed ``get`` on the surfaces' non-resource URLs) reads
everything; a tenant (allowed to list pods in team-a only) reads team-a's series
on every surface and nothing of team-b; no token, a bad or revoked token, and
forged proxy headers get nothing; probes stay open; every refusal is counted.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import eventually, running_collector
from prometheus_client.parser import text_string_to_metric_families

from testing.fakekube import JSON, FakeKube, make_pod

READER = "system:serviceaccount:monitoring:prometheus"
TENANT = "alice"
GPU = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
CARD = "GPU-12345678-1234-1234-1234-123456789abc"


def gpu_pod(name: str, namespace: str, uid: str) -> JSON:
    return make_pod(name, namespace, "node-a", uid=uid, containers=[{"name": "main", **GPU}])


@dataclass
class Reads:
    fake: FakeKube
    url: str
    http: aiohttp.ClientSession
    reader: str
    tenant: str

    async def get(self, path: str, token: str | None, **headers: str) -> tuple[int, Any]:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with self.http.get(self.url + path, headers=headers) as resp:
            if resp.content_type == "application/json":
                return resp.status, await resp.json()
            return resp.status, await resp.text()

    async def namespaces(self, token: str, path: str = "/metrics") -> set[str]:
        status, text = await self.get(path, token)
        assert status == 200, text
        return {
            s.labels["namespace"]
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if "namespace" in s.labels
        }


@asynccontextmanager
async def collector(fake: FakeKube, kubeconfig: Path, **settings: Any) -> AsyncIterator[Reads]:
    for pod in (gpu_pod("train", "team-a", "uid-a"), gpu_pod("serve", "team-b", "uid-b")):
        fake.add_pod(pod)
    fake.allow_paths(READER, "/metrics", "/api/v1/*", "/prometheus/*", "/")
    fake.allow_namespace(TENANT, "team-a")
    async with (
        running_collector(
            kubernetes=True,
            kubeconfig=kubeconfig,
            flavours="hami",
            read_auth="kubernetes",
            push_auth="none",
            interval=1.0,
            timeout=0.5,
            **settings,
        ) as (url, _),
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
    ):
        reads = Reads(fake, url, http, fake.issue_user_token(READER), fake.issue_user_token(TENANT))
        await eventually(lambda: _ready(reads), 10, "collector ready")
        payload = {
            "node": "node-a",
            "agent": "a1",
            "sequence": 1,
            "time": time.time(),
            "nvml": True,
            "cards": [{"index": 0, "uuid": CARD, "name": "NVIDIA H200", "memory_used": 9 << 30}],
            "regions": [
                {"pod_uid": uid, "container": "main", "devices": [_device(used)]}
                for uid, used in (("uid-a", 1 << 30), ("uid-b", 2 << 30))
            ],
        }
        async with http.post(f"{url}/api/v1/push", json=payload) as resp:
            assert resp.status == 204, await resp.text()
        await eventually(lambda: _both(reads), 10, "both teams' series served")
        yield reads


def _device(used: int) -> JSON:
    return {"index": 0, "uuid": CARD, "memory_used": used, "memory_limit": 4 << 30}


async def _ready(reads: Reads) -> bool:
    async with reads.http.get(f"{reads.url}/readyz") as resp:
        return resp.status == 200


async def _both(reads: Reads) -> bool:
    return await reads.namespaces(reads.reader) >= {"team-a", "team-b"}


@pytest.fixture
async def reads(fake: FakeKube, kubeconfig: Path) -> AsyncIterator[Reads]:
    async with collector(fake, kubeconfig) as r:
        yield r


async def test_a_cluster_reader_reads_every_namespace_and_the_cards(reads: Reads) -> None:
    status, text = await reads.get("/metrics", reads.reader)
    assert status == 200
    assert "hami_host_gpu_memory_used_bytes{" in text  # a card: cluster readers only
    status, body = await reads.get("/api/v1/pods", reads.reader)
    assert {row["namespace"] for row in body["containers"]} == {"team-a", "team-b"}
    status, _ = await reads.get("/", reads.reader)
    assert status == 200


async def test_a_tenant_reads_only_its_namespace_on_every_surface(reads: Reads) -> None:
    assert await reads.namespaces(reads.tenant) == {"team-a"}
    _, text = await reads.get("/metrics", reads.tenant)
    assert "hami_host_gpu" not in text
    assert "hami_usage_collector" not in text  # the collector's own series
    status, body = await reads.get("/api/v1/pods", reads.tenant)
    assert status == 200
    assert {row["namespace"] for row in body["containers"]} == {"team-a"}
    _, body = await reads.get("/api/v1/pods?namespace=team-b", reads.tenant)
    assert body["containers"] == []
    status, _ = await reads.get("/api/v1/namespaces/team-b/pods/serve", reads.tenant)
    assert status == 404  # as if it did not exist
    status, _ = await reads.get("/api/v1/namespaces/team-a/pods/train", reads.tenant)
    assert status == 200
    _, body = await reads.get("/api/v1/nodes", reads.tenant)
    (node,) = body["nodes"]
    assert node["container_count"] == 1
    assert node["memory_used_bytes"] == 1 << 30  # its own, not the card's 9 GiB
    assert node["card_count"] == 0
    _, detail = await reads.get("/api/v1/nodes/node-a", reads.tenant)
    shown = [c for card in detail["cards"] for c in card["containers"]]
    assert [c["namespace"] for c in shown] == ["team-a"]
    assert all(card["memory_used_bytes"] is None for card in detail["cards"])
    for path in ("/status", "/api/v1/shards"):
        status, _ = await reads.get(path, reads.tenant)
        assert status == 403, path


async def test_no_token_a_bad_one_and_forged_headers_read_nothing(reads: Reads) -> None:
    status, body = await reads.get("/metrics", None)
    assert status == 401
    assert body == {
        "status": "error",
        "error": "unauthorized",
        "message": "a bearer token is required",
    }
    status, body = await reads.get("/prometheus/api/v1/query?query=up", "not-a-token")
    assert status == 401
    assert body["errorType"] == "unauthorized"
    assert "Traceback" not in str(body)
    forged = {"X-Forwarded-User": READER, "Impersonate-User": READER, "X-Remote-User": READER}
    for path in ("/metrics", "/api/v1/pods", "/status"):
        status, _ = await reads.get(path, None, **forged)
        assert status == 401, path
        status, _ = await reads.get(path, reads.tenant, **forged)
        assert status in (200, 403), path
    assert await reads.namespaces(reads.tenant) == {"team-a"}
    for probe in ("/healthz", "/readyz"):
        status, _ = await reads.get(probe, None)
        assert status == 200, probe
    _, text = await reads.get("/metrics", reads.reader)
    refused = {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "hami_usage_collector_read_refused_total"
    }
    assert refused["no_credentials"] >= 4
    assert refused["bad_token"] >= 1
    assert refused["forbidden"] >= 1


async def test_someone_with_no_rights_is_forbidden(reads: Reads) -> None:
    nobody = reads.fake.issue_user_token("bob")
    for path in ("/metrics", "/api/v1/pods", "/prometheus/api/v1/labels", "/"):
        status, body = await reads.get(path, nobody)
        assert status == 403, path
        assert "namespace" not in str(body)


async def test_reviews_are_cached_per_token_and_identity(reads: Reads) -> None:
    await reads.get("/api/v1/pods", reads.tenant)
    reviews, accesses = reads.fake.token_reviews, reads.fake.access_reviews
    for _ in range(20):
        for path in ("/api/v1/pods", "/metrics", "/api/v1/nodes"):
            await reads.get(path, reads.tenant)
    assert reads.fake.token_reviews == reviews
    assert reads.fake.access_reviews <= accesses + 2  # the /metrics surface, once, then cached


async def test_a_revoked_token_reads_nothing_once_its_review_expires(
    fake: FakeKube, kubeconfig: Path
) -> None:
    async with collector(fake, kubeconfig, read_auth_ttl=0.2) as reads:
        assert (await reads.get("/api/v1/pods", reads.tenant))[0] == 200
        fake.revoke_token(reads.tenant)

        async def refused() -> bool:
            return (await reads.get("/api/v1/pods", reads.tenant))[0] == 401

        await eventually(refused, 10, "the deleted account's token refused")


async def test_chargeback_and_its_csv_hold_only_the_tenant_s_namespaces(reads: Reads) -> None:
    async def groups(token: str) -> set[str]:
        status, body = await reads.get("/api/v1/usage?by=namespace", token)
        assert status == 200, body
        return {group["labels"]["namespace"] for group in body["groups"]}

    async def both() -> bool:
        return await groups(reads.reader) == {"team-a", "team-b"}

    await eventually(both, 10, "the cluster reader's report of both teams")
    assert await groups(reads.tenant) == {"team-a"}
    status, text = await reads.get("/api/v1/usage?by=pod&format=csv", reads.tenant)
    assert status == 200
    assert "team-a" in text
    assert "team-b" not in text


HOSTILE = (
    "/metrics",
    "/api/v1/pods",
    "/api/v1/pods?namespace=team-b",
    "/api/v1/pods?node=node-a",
    "/api/v1/pods?sort=namespace&limit=5",
    "/api/v1/nodes",
    "/api/v1/nodes?namespace=team-b",
    "/api/v1/nodes/node-a",
    "/api/v1/usage?by=pod",
    "/api/v1/usage?by=node&format=csv",
    "/prometheus/api/v1/query?query=hami_vgpu_memory_used_bytes",
    '/prometheus/api/v1/query?query={namespace=~".%2B"}',
    '/prometheus/api/v1/query?query=count by (namespace) ({__name__=~"hami_.%2B"})',
    '/prometheus/api/v1/query?query=hami_vgpu_memory_used_bytes{namespace="team-b"} or vector(1)',
    "/prometheus/api/v1/query_range?query=sum by (namespace) (hami_vgpu_memory_used_bytes)"
    "&start={past}&end={now}&step=15",
    '/prometheus/api/v1/series?match[]={namespace="team-b"}',
    "/prometheus/api/v1/series?match[]=hami_vgpu_memory_used_bytes",
    "/prometheus/api/v1/labels",
    "/prometheus/api/v1/label/namespace/values",
    "/prometheus/api/v1/label/pod/values",
    "/prometheus/api/v1/metadata",
)
"""Reads of a tenant of team-a that try to see team-b (its namespace, its pod ``serve``)."""
NAMELESS = {
    "/api/v1/nodes",
    "/api/v1/nodes?namespace=team-b",
    "/api/v1/usage?by=node&format=csv",
    "/prometheus/api/v1/labels",
    "/prometheus/api/v1/metadata",
}
"""Of those, the ones whose cluster-wide answer names no namespace or pod at all."""


def timed(path: str) -> str:
    now = time.time()
    return path.replace("{past}", str(now - 600)).replace("{now}", str(now + 60))


@pytest.mark.parametrize("path", HOSTILE)
async def test_a_hostile_tenant_sees_nothing_of_another_team(reads: Reads, path: str) -> None:
    status, body = await reads.get(timed(path), reads.tenant)
    assert status in (200, 403, 404), (path, body)
    text = str(body)
    assert "team-b" not in text, path
    assert '"serve"' not in text
    assert "'serve'" not in text
    assert "hami_host_gpu" not in text, path  # a card only through its own containers


async def test_the_same_reads_as_a_cluster_reader_see_the_other_team(reads: Reads) -> None:
    blind: set[str] = set()

    async def sees_team_b() -> bool:
        blind.clear()
        for path in HOSTILE:
            status, body = await reads.get(timed(path), reads.reader)
            assert status == 200, (path, body)
            if "team-b" not in str(body) and "'serve'" not in str(body):
                blind.add(path)
        return blind == NAMELESS

    await eventually(sees_team_b, 10, "team-b in the cluster reader's answers")
