"""Pushes against the real collector, authenticated by TokenReview against FakeKube.

Why end to end: what matters is the chain token -> TokenReview -> service account ->
node binding -> payload check -> attribution through the pod and claim watches ->
/metrics, and that a refused push leaves nothing behind. Everything runs on loopback,
every wait is bounded, and every server is stopped by its context manager.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import eventually, running_collector
from prometheus_client.parser import text_string_to_metric_families

from testing.fakekube import JSON, FakeKube, make_claim, make_pod

NS, SA = "hami-system", "hami-usage-agent"
ALLOWED = f"{NS}/{SA}"
UUID = "GPU-12345678-1234-1234-1234-123456789abc-MIG-7"  # exported as its first 40 characters
CLAIM_UID = "claim-uid-1"
Labels = frozenset[tuple[str, str]]


def pods() -> dict[str, JSON]:
    """Agents on node-a and node-b, workloads on node-a (one through a claim), one on node-b."""
    return {
        "agent-a": make_pod("agent-a", NS, "node-a", uid="agent-a-uid"),
        "agent-b": make_pod("agent-b", NS, "node-b", uid="agent-b-uid"),
        "train": make_pod("train-0", "ml", "node-a", uid="train-uid"),
        "infer": make_pod("infer-0", "ml", "node-a", uid="infer-uid"),
        "remote": make_pod("remote-0", "ml", "node-b", uid="remote-uid"),
    }


def device(used: int, uuid: str = UUID, index: int = 0) -> JSON:
    return {"index": index, "uuid": uuid, "memory_used": used, "memory_limit": 8 << 30}


def region(pod_uid: str, used: int, container: str = "main") -> JSON:
    return {"pod_uid": pod_uid, "container": container, "devices": [device(used)]}


def claim_region(claim_uid: str, used: int) -> JSON:
    return {"claim_uid": claim_uid, "devices": [device(used, uuid="GPU-claimed")]}


def vgpu(pod: str, used_by: str = "main", node: str = "node-a", uuid: str = UUID) -> Labels:
    """The labels of a HAMi v2.10 container series."""
    labels = {"container": used_by, "device_uuid": uuid[:40], "namespace": "ml", "node": node}
    return frozenset((labels | {"pod": pod, "vdevice_index": "0", "zone": "vGPU"}).items())


@dataclass
class Cluster:
    """A FakeKube, the collector watching it, and a client for both."""

    fake: FakeKube
    url: str
    http: aiohttp.ClientSession
    pods: dict[str, JSON]
    seq: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def token(self, pod: str = "agent-a", sa: str = SA, **kw: Any) -> str:
        return self.fake.issue_token(self.pods[pod], sa, **kw)

    def snapshot(self, node: str = "node-a", regions: list[JSON] | None = None, **kw: Any) -> JSON:
        """A valid payload; by default one card and the train pod's region at 100 bytes."""
        card = {"index": 0, "uuid": UUID, "name": "A100", "memory_used": 5 << 30}
        body: JSON = {"node": node, "agent": "agent-1", "sequence": next(self.seq)}
        body |= {"time": time.time(), "nvml": True, "cards": [card | {"utilization": 42.0}]}
        return body | {"regions": [region("train-uid", 100)] if regions is None else regions} | kw

    async def push(
        self,
        payload: JSON | bytes,
        token: str | None = None,
        *,
        zipped: bool = False,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, JSON]:
        """POST a payload (JSON, or raw bytes as given); return the status and JSON body."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        hdrs = {"Content-Type": "application/json"} | (headers or {})
        if token is not None:
            hdrs["Authorization"] = f"Bearer {token}"
        if zipped:
            data, hdrs["Content-Encoding"] = gzip.compress(data), "gzip"
        async with self.http.post(f"{self.url}/api/v1/push", data=data, headers=hdrs) as resp:
            json_body = resp.content_type == "application/json"
            return resp.status, await resp.json() if json_body else {"text": await resp.text()}

    async def samples(self) -> dict[tuple[str, Labels], float]:
        async with self.http.get(f"{self.url}/metrics") as resp:
            assert resp.status == 200
            text = await resp.text()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    async def value(self, name: str, labels: Labels = frozenset()) -> float | None:
        return (await self.samples()).get((name, labels))

    async def nodes(self) -> set[str]:
        """Every node label value on /metrics, the collector's own series included."""
        return {
            v for (_, labels), _ in (await self.samples()).items() for k, v in labels if k == "node"
        }


@asynccontextmanager
async def cluster(fake: FakeKube, kubeconfig: Path, **settings: Any) -> AsyncIterator[Cluster]:
    """The standard objects in ``fake`` and a collector watching it, synced."""
    objects = pods()
    for pod in objects.values():
        fake.add_pod(pod)
    fake.add_claim(make_claim("gpu-claim", "ml", CLAIM_UID, reserved_for=[objects["infer"]]))
    settings = {"push_service_accounts": ALLOWED} | settings
    watching = bool(settings["push_service_accounts"])  # else no pod directory runs
    async with (
        running_collector(
            kubernetes=True,
            kubeconfig=kubeconfig,
            flavours="hami",
            interval=10.0,
            timeout=5.0,
            **settings,
        ) as (url, _),
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
    ):
        c = Cluster(fake, url, http, objects)
        await eventually(lambda: _synced(c, watching), 10, "collector ready, claims listed")
        yield c


async def _synced(c: Cluster, directory: bool) -> bool:
    async with c.http.get(f"{c.url}/readyz") as resp:
        ready = resp.status == 200
    claims = any(  # the claims are listed before their watch starts
        path.endswith("/resourceclaims") and q.get("watch") == "True" for path, q in c.fake.requests
    )
    return ready and (claims or not directory)


@pytest.fixture
async def c(fake: FakeKube, kubeconfig: Path) -> AsyncIterator[Cluster]:
    async with cluster(fake, kubeconfig) as running:
        yield running


# -- accepted pushes -------------------------------------------------------------------


async def test_valid_push_becomes_canonical_series(c: Cluster) -> None:
    regions = [
        region("train-uid", 1234),
        claim_region(CLAIM_UID, 777),  # attributed to the pod the claim is reserved for
        region("remote-uid", 5),  # a live pod, but on node-b: not node-a's to report
        region("no-such-uid", 5),
    ]
    status, _ = await c.push(c.snapshot("node-a", regions), c.token(), zipped=True)
    assert status == 204
    got = await c.samples()
    assert got["hami_vgpu_memory_used_bytes", vgpu("train-0")] == 1234
    assert got["hami_container_device_memory_bytes", vgpu("train-0")] == 1234
    assert got["hami_vgpu_memory_limit_bytes", vgpu("train-0")] == 8 << 30
    assert got["hami_vgpu_memory_used_bytes", vgpu("infer-0", "", uuid="GPU-claimed")] == 777
    card = {"device_index": "0", "device_type": "NVIDIA-A100", "device_uuid": UUID[:40]}
    card_labels = frozenset((card | {"zone": "vGPU", "node": "node-a"}).items())
    assert got["hami_host_gpu_memory_used_bytes", card_labels] == 5 << 30
    assert got["hami_host_gpu_utilization_ratio", card_labels] == 42.0
    assert got["hami_usage_collector_push_unowned_regions_total", frozenset()] == 2
    assert not any(dict(labels).get("pod") == "remote-0" for _, labels in got)
    assert await c.nodes() == {"node-a"}


async def test_wildcard_namespace(fake: FakeKube, kubeconfig: Path) -> None:
    async with cluster(fake, kubeconfig, push_service_accounts=f"*/{SA}, other/x") as c:
        c.pods["elsewhere"] = c.fake.add_pod(make_pod("agent-x", "ops", "node-a"))
        assert (await c.push(c.snapshot(), c.token("elsewhere")))[0] == 204
        other = c.token("elsewhere", sa="default")
        assert (await c.push(c.snapshot(), other))[0] == 403


async def test_node_bound_through_the_pod_directory(c: Cluster) -> None:
    token = c.token(with_node=False)  # clusters before 1.30: the node is found from the pod
    reviews = c.fake.token_reviews
    assert (await c.push(c.snapshot("node-a"), token))[0] == 204
    status, body = await c.push(c.snapshot("node-b", regions=[]), token)
    assert (status, body["error"]) == (403, "wrong_node")
    assert "node-a" in body["message"]
    assert "node-b" not in await c.nodes()
    assert c.fake.token_reviews == reviews + 1  # the second push used the cached answer


async def test_token_review_is_cached(c: Cluster) -> None:
    token, before = c.token(), c.fake.token_reviews
    for _ in range(3):
        assert (await c.push(c.snapshot(), token))[0] == 204
    assert c.fake.token_reviews == before + 1
    assert (await c.push(c.snapshot(), c.token()))[0] == 204  # another token, another review
    bad = c.token(expired=True)
    for _ in range(2):  # refusals are cached too: a flood of bad tokens costs one review each
        assert (await c.push(c.snapshot(), bad))[0] == 401
    assert c.fake.token_reviews == before + 3


async def test_sequence_repeated_or_older_is_ignored(c: Cluster) -> None:
    token, labels = c.token(), vgpu("train-0")

    async def push(seq: int, used: int, agent: str = "agent-1") -> float | None:
        payload = c.snapshot(regions=[region("train-uid", used)], sequence=seq, agent=agent)
        assert (await c.push(payload, token))[0] == 204
        return await c.value("hami_vgpu_memory_used_bytes", labels)

    assert await push(5, 100) == 100
    assert await push(5, 200) == 100, "a repeated sequence is ignored"
    assert await push(3, 300) == 100, "an older sequence is ignored"
    assert await push(6, 400) == 400
    assert await push(0, 500, agent="agent-2") == 500, "a restarted agent starts again at 0"


async def test_region_of_a_deleted_pod_is_dropped_and_counted(c: Cluster) -> None:
    token, unowned = c.token(), "hami_usage_collector_push_unowned_regions_total"
    both = [region("train-uid", 100), region("infer-uid", 200, container="srv")]
    assert (await c.push(c.snapshot(regions=both), token))[0] == 204
    assert await c.value("hami_vgpu_memory_used_bytes", vgpu("infer-0", "srv")) == 200
    before = await c.value(unowned)
    c.fake.delete_pod("ml", "infer-0")

    async def dropped() -> bool:  # pushes until the collector's pod watch has seen the delete
        assert (await c.push(c.snapshot(regions=both), token))[0] == 204
        got = await c.samples()
        return ("hami_vgpu_memory_used_bytes", vgpu("infer-0", "srv")) not in got

    await eventually(dropped, 5, "the deleted pod's region dropped")
    assert await c.value("hami_vgpu_memory_used_bytes", vgpu("train-0")) == 100
    assert (await c.value(unowned) or 0) > (before or 0)


# -- refused pushes leave nothing behind -----------------------------------------------


def _deleted_pod_token(c: Cluster) -> str:
    c.pods["old"] = c.fake.add_pod(make_pod("agent-old", NS, "node-a"))
    token = c.token("old")
    c.fake.delete_pod(NS, "agent-old")
    return token


def _other_namespace_token(c: Cluster) -> str:
    c.pods["stray"] = c.fake.add_pod(make_pod("stray", "default", "node-a"))
    return c.token("stray")


Case = tuple[Callable[[Cluster], str | None], int, str, str]
CASES: dict[str, Case] = {
    "no token": (lambda c: None, 401, "unauthorized", "no bearer token"),
    "unknown token": (lambda c: "made-up", 401, "unauthorized", "not authenticated"),
    "wrong audience": (
        lambda c: c.token(audiences=("vault",)),
        401,
        "unauthorized",
        "invalid for the target audiences",
    ),
    "expired": (lambda c: c.token(expired=True), 401, "unauthorized", "has expired"),
    "pod deleted": (_deleted_pod_token, 401, "unauthorized", "invalidated"),
    "service account not allowed": (
        lambda c: c.token(sa="default"),
        403,
        "forbidden",
        "hami-system/default may not push",
    ),
    "namespace not allowed": (_other_namespace_token, 403, "forbidden", "may not push"),
    "agent of another node": (lambda c: c.token("agent-b"), 403, "wrong_node", "runs on node-b"),
    "other node via directory": (
        lambda c: c.token("agent-b", with_node=False),
        403,
        "wrong_node",
        "runs on node-b",
    ),
}


@pytest.mark.parametrize("case", CASES)
async def test_refused_push_stores_nothing(c: Cluster, case: str) -> None:
    make_token, status, reason, message = CASES[case]
    got_status, body = await c.push(c.snapshot("node-a"), make_token(c), zipped=True)
    assert (got_status, body["status"], body["error"]) == (status, "error", reason)
    assert message in body["message"]
    assert await c.nodes() == set()
    refused = frozenset({("reason", reason)})
    assert await c.value("hami_usage_collector_push_refused_total", refused) == 1
    assert (await c.push(c.snapshot("node-a"), c.token()))[0] == 204  # the real agent still can
    assert await c.value("hami_vgpu_memory_used_bytes", vgpu("train-0")) == 100


async def test_basic_auth_header_is_no_token(c: Cluster) -> None:
    status, body = await c.push(c.snapshot(), headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert (status, body["message"]) == (401, "no bearer token")
    assert c.fake.token_reviews == 0


async def test_token_review_outage_is_503_and_not_cached(c: Cluster) -> None:
    token = c.token()
    c.fake.set_down(True)
    status, body = await c.push(c.snapshot(), token)
    assert status == 503
    assert "cannot check the token" in body["message"]
    c.fake.set_down(False)
    assert (await c.push(c.snapshot(), token))[0] == 204


async def test_token_review_outage_reason(c: Cluster) -> None:
    c.fake.set_down(True)
    status, body = await c.push(c.snapshot(), c.token())
    c.fake.set_down(False)
    assert (status, body["error"]) == (503, "unavailable")


async def test_pod_directory_lag_is_not_cached(c: Cluster) -> None:
    c.fake.stall_watches(True)  # the collector's pod watch falls behind
    c.pods["late"] = c.fake.add_pod(make_pod("agent-late", NS, "node-a"))
    token = c.token("late", with_node=False)
    status, body = await c.push(c.snapshot(), token)
    assert (status, body["error"]) == (503, "unavailable"), "its pod is unknown as yet: retry"
    c.fake.stall_watches(False)
    c.fake.add_pod(make_pod("marker", "ml", "node-a", uid="marker-uid"))
    agent = c.token()

    async def caught_up() -> bool:  # events arrive in order: the marker's means the agent's
        await c.push(c.snapshot(regions=[region("marker-uid", 1)]), agent)
        return await c.value("hami_vgpu_memory_used_bytes", vgpu("marker")) == 1

    await eventually(caught_up, 5, "the pod watch caught up")
    assert (await c.push(c.snapshot(), token))[0] == 204


async def test_api_server_unreachable_is_503(c: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    token = c.token()
    await c.fake.stop()  # connections are refused now
    for sequence in range(5):
        status, _ = await c.push(c.snapshot(sequence=sequence + 1), token)
        assert status == 503
    warned = [r for r in caplog.records if "TokenReview failed" in r.getMessage()]
    assert [r.levelno for r in warned if r.levelno >= logging.WARNING] == [logging.WARNING], (
        "one warning while the same failure repeats: anyone can send a push"
    )


async def test_hung_token_review_is_503(fake: FakeKube, kubeconfig: Path) -> None:
    async with cluster(fake, kubeconfig, kube_request_timeout=0.5) as c:
        c.fake.token_review_delay = 2.0
        async with asyncio.timeout(1.5):
            status, _ = await c.push(c.snapshot(), c.token())
        assert status == 503


# -- payload checks ----------------------------------------------------------------------


def _bad_device(c: Cluster) -> JSON:
    bad = region("train-uid", 1)
    bad["devices"][0]["memory_used"] = -1
    return c.snapshot(regions=[bad])


PAYLOADS: dict[str, tuple[Callable[[Cluster], JSON | bytes], str]] = {
    "negative memory": (_bad_device, "regions.0.devices.0.memory_used"),
    "missing node": (lambda c: {k: v for k, v in c.snapshot().items() if k != "node"}, "node"),
    "unknown field": (
        lambda c: c.snapshot(cards=[{"index": 0, "uuid": "u", "fan": 1}]),
        "cards.0.fan",
    ),
    "region keyed twice": (
        lambda c: c.snapshot(regions=[region("train-uid", 1) | {"claim_uid": CLAIM_UID}]),
        "regions.0",
    ),
    "future version": (lambda c: c.snapshot(version=2), "version"),
    "not JSON": (lambda c: b"{not json", ""),
}


async def test_corrupt_gzip_is_400(c: Cluster) -> None:
    status, _ = await c.push(b"not gzip at all", c.token(), headers={"Content-Encoding": "gzip"})
    assert status == 400


@pytest.mark.parametrize("case", PAYLOADS)
async def test_invalid_payload_is_400_naming_the_field(c: Cluster, case: str) -> None:
    make_payload, where = PAYLOADS[case]
    status, body = await c.push(make_payload(c), c.token())
    assert (status, body["error"]) == (400, "invalid")
    assert where in [d["field"] for d in body["details"]], body["details"]
    assert await c.nodes() == set()


async def test_too_large(fake: FakeKube, kubeconfig: Path) -> None:
    async with cluster(fake, kubeconfig, push_body_limit=4096) as c:
        big = c.snapshot(regions=[region(f"uid-{i}", i) for i in range(100)])
        status, body = await c.push(big)  # the size is checked before the credentials
        assert (status, body["error"], c.fake.token_reviews) == (413, "too_large", 0)
        token = c.token()
        status, body = await c.push(big, token, zipped=True)  # small on the wire, not unzipped
        assert len(gzip.compress(json.dumps(big).encode())) < 4096
        assert (status, body["error"]) == (413, "too_large")
        assert "once decompressed" in body["message"]

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length to refuse it early
            data = json.dumps(big).encode()
            for i in range(0, len(data), 1024):
                yield data[i : i + 1024]

        hdrs = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        async with c.http.post(f"{c.url}/api/v1/push", data=chunks(), headers=hdrs) as resp:
            assert resp.status == 413
        assert c.fake.token_reviews == 1
        assert await c.nodes() == set()
        assert (await c.push(c.snapshot(), token))[0] == 204


async def test_no_service_accounts_refuses_every_push(fake: FakeKube, kubeconfig: Path) -> None:
    async with cluster(fake, kubeconfig, push_service_accounts="") as c:
        for token in (c.token(), None):
            status, body = await c.push(c.snapshot(), token)
            assert status in (401, 403)
            assert "--push-service-accounts" in body["message"]
        assert c.fake.token_reviews == 0
        assert await c.nodes() == set()


# -- without Kubernetes --------------------------------------------------------------------


@asynccontextmanager
async def plain(**settings: Any) -> AsyncIterator[Cluster]:
    async with (
        running_collector(kubernetes=False, interval=10.0, timeout=5.0, **settings) as (url, _),
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
    ):
        yield Cluster(FakeKube(), url, http, {})  # the FakeKube is never started


async def test_shared_token_file(tmp_path: Path) -> None:
    path = tmp_path / "push-token"
    path.write_text("first-token-0001\n")
    async with plain(push_auth="token", push_token_file=path) as c:
        cards = frozenset({("device_index", "0"), ("node", "node-a")})
        assert (await c.push(c.snapshot(), "first-token-0001"))[0] == 204
        assert any(
            n == "hami_host_gpu_memory_used_bytes" and cards <= ls for n, ls in await c.samples()
        )
        assert (await c.push(c.snapshot(), "wrong-token-0001"))[0] == 401
        assert (await c.push(c.snapshot()))[0] == 401
        path.write_text("second-token-002\n")  # same length: only the mtime tells them apart
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert (await c.push(c.snapshot(), "first-token-0001"))[0] == 401
        assert (await c.push(c.snapshot(), "second-token-002"))[0] == 204
        path.write_text("")
        status, body = await c.push(c.snapshot(), "second-token-002")
        assert status == 401
        assert "empty" in body["message"]


async def test_shared_token_file_missing(tmp_path: Path) -> None:
    path = tmp_path / "push-token"
    path.write_text("token\n")
    async with plain(push_auth="token", push_token_file=path) as c:
        path.unlink()  # mid-rotation, or the secret not mounted yet
        assert (await c.push(c.snapshot(), "token"))[0] in (401, 503)


async def test_no_auth_on_loopback() -> None:
    async with plain(push_auth="none") as c:
        assert (await c.push(c.snapshot(regions=[])))[0] == 204
        assert await c.nodes() == {"node-a"}
