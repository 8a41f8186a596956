"""Prove FakeKube speaks the real wire protocol by driving it with kubernetes_asyncio.

Why: the discovery tests trust this fake; if it diverged from kube-apiserver, they would
pass against behaviour no cluster has. Every test goes through a kubeconfig the fake
writes and the real client library, and is bounded by asyncio timeouts.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import config, watch
from kubernetes_asyncio.client import (
    ApiClient,
    AuthenticationV1Api,
    Configuration,
    CoreV1Api,
    ResourceV1Api,
    V1TokenReview,
    V1TokenReviewSpec,
)
from kubernetes_asyncio.client.exceptions import ApiException

from testing.fakekube import JSON, FakeKube, make_claim, make_pod

SEL = "app.kubernetes.io/name=hami-monitor"
MON = {"app.kubernetes.io/name": "hami-monitor"}


async def list_body(v1: Any, namespace: str | None = None, **kw: Any) -> JSON:
    """List the way discovery does: raw body, no model deserialisation."""
    if namespace:
        resp = await v1.list_namespaced_pod(namespace, _preload_content=False, **kw)
    else:
        resp = await v1.list_pod_for_all_namespaces(_preload_content=False, **kw)
    async with resp:
        assert resp.status == 200
        body: JSON = json.loads(await resp.read())
    return body


async def watch_events(v1: Any, n: int | None, **kw: Any) -> list[JSON]:
    """Collect watch events until n arrive or the server ends the stream."""
    kw.setdefault("timeout_seconds", 10)
    if kw["timeout_seconds"] is None:  # Watch checks for the key, not its value
        del kw["timeout_seconds"]
    kw.setdefault("_request_timeout", 10)
    events: list[JSON] = []
    async with asyncio.timeout(15):
        w = watch.Watch(return_type="object")
        async with w.stream(v1.list_pod_for_all_namespaces, **kw) as s:
            async for ev in s:
                events.append(ev)
                if len(events) == n:
                    break
    return events


def summary(events: list[JSON]) -> list[tuple[str, str]]:
    return [(e["type"], e["raw_object"]["metadata"].get("name", "")) for e in events]


def rvs(events: list[JSON]) -> list[int]:
    return [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]


async def test_list_with_selector_and_namespace(fake: FakeKube, v1: Any) -> None:
    fake.add_pod(make_pod("mon-a", labels=MON))
    fake.add_pod(make_pod("mon-b", namespace="gpu", labels={**MON, "tier": "x"}))
    fake.add_pod(make_pod("other", labels={"app": "other"}))

    body = await list_body(v1, label_selector=SEL, resource_version="0", _request_timeout=5)
    assert body["kind"] == "PodList"
    assert body["metadata"]["resourceVersion"] == fake.resource_version
    assert [p["metadata"]["name"] for p in body["items"]] == ["mon-b", "mon-a"]  # key order
    pod = body["items"][1]
    assert pod["status"]["conditions"][1] == {"type": "Ready", "status": "True"}
    assert pod["status"]["containerStatuses"][0]["ready"] is True

    body = await list_body(v1, "gpu", label_selector=SEL, _request_timeout=5)
    assert [p["metadata"]["name"] for p in body["items"]] == ["mon-b"]
    assert ("/api/v1/namespaces/gpu/pods", {"labelSelector": SEL}) in fake.requests


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app==mon", ["a", "b"]),
        ("app=mon,tier!=x", ["a"]),
        ("tier in (x,y)", ["b", "c"]),
        ("tier notin (x)", ["a", "c"]),
        ("tier", ["b", "c"]),
        ("!tier", ["a"]),
        ("app=mon, tier in (x)", ["b"]),
    ],
)
async def test_selector_grammar(
    fake: FakeKube, v1: Any, selector: str, expected: list[str]
) -> None:
    fake.add_pod(make_pod("a", labels={"app": "mon"}))
    fake.add_pod(make_pod("b", labels={"app": "mon", "tier": "x"}))
    fake.add_pod(make_pod("c", labels={"app": "db", "tier": "y"}))
    body = await list_body(v1, label_selector=selector, _request_timeout=5)
    assert [p["metadata"]["name"] for p in body["items"]] == expected


async def test_watch_sees_changes_in_order(fake: FakeKube, v1: Any) -> None:
    fake.add_pod(make_pod("old", labels=MON))
    task = asyncio.create_task(watch_events(v1, 5, label_selector=SEL, resource_version="0"))
    await fake.wait_for_watches(1)
    fake.add_pod(make_pod("new", labels=MON))
    fake.add_pod(make_pod("ignored", labels={"app": "x"}))
    fake.modify_pod(make_pod("new", labels=MON, ready=False))
    fake.delete_pod("kube-system", "new")
    fake.modify_pod(make_pod("old", labels={"app": "gone"}))  # leaves the selector
    events = await task
    assert summary(events) == [
        ("ADDED", "old"),
        ("ADDED", "new"),
        ("MODIFIED", "new"),
        ("DELETED", "new"),
        ("DELETED", "old"),
    ]
    assert rvs(events[1:]) == sorted(set(rvs(events[1:])))
    assert events[2]["raw_object"]["status"]["conditions"][1]["status"] == "False"
    assert isinstance(events[0]["raw_object"], dict)


async def test_resume_from_resource_version(fake: FakeKube, v1: Any) -> None:
    fake.add_pod(make_pod("a", labels=MON))
    rv = fake.resource_version
    fake.add_pod(make_pod("b", labels=MON))
    fake.delete_pod("kube-system", "a")
    events = await watch_events(v1, 2, label_selector=SEL, resource_version=rv)
    assert summary(events) == [("ADDED", "b"), ("DELETED", "a")]
    assert all(r > int(rv) for r in rvs(events))


async def test_bookmark(fake: FakeKube, v1: Any) -> None:
    kw: dict[str, Any] = {"label_selector": SEL, "resource_version": fake.resource_version}
    task = asyncio.create_task(watch_events(v1, 1, allow_watch_bookmarks=True, **kw))
    plain = asyncio.create_task(watch_events(v1, None, timeout_seconds=1, **kw))
    await fake.wait_for_watches(2)
    fake.add_pod(make_pod("unrelated", labels={"app": "x"}))
    fake.send_bookmarks()
    (event,) = await task
    assert event["type"] == "BOOKMARK"
    assert event["raw_object"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": fake.resource_version},
    }
    assert await plain == []  # no bookmark unless asked for
    queries = [q for _, q in fake.requests]
    assert sorted(str(q.get("allowWatchBookmarks")) for q in queries) == ["None", "True"]
    assert {q["watch"] for q in queries} == {"True"}  # the client sends str(bool)


@pytest.mark.parametrize("as_http_status", [False, True])
async def test_compacted_resource_version_is_gone(
    fake: FakeKube, v1: Any, as_http_status: bool
) -> None:
    fake.add_pod(make_pod("a", labels=MON))
    old = fake.resource_version
    fake.add_pod(make_pod("b", labels=MON))
    fake.compact()
    fake.gone_as_http_status = as_http_status
    with pytest.raises(ApiException) as err:
        await watch_events(v1, None, label_selector=SEL, resource_version=old)
    assert err.value.status == 410
    assert "too old resource version" in str(err.value.reason)
    # The current version is still valid after compaction.
    rv = fake.resource_version
    assert await watch_events(v1, None, resource_version=rv, timeout_seconds=1) == []


async def test_expire_watches(fake: FakeKube, v1: Any) -> None:
    task = asyncio.create_task(watch_events(v1, None, resource_version=fake.resource_version))
    await fake.wait_for_watches(1)
    fake.expire_watches()
    with pytest.raises(ApiException) as err:
        await task
    assert err.value.status == 410
    await fake.wait_for_watches(0)


async def test_down_gives_503_and_closes_watches(fake: FakeKube, v1: Any) -> None:
    task = asyncio.create_task(watch_events(v1, None, resource_version="0"))
    await fake.wait_for_watches(1)
    fake.set_down(True)
    assert await task == []  # the open watch ends cleanly
    with pytest.raises(ApiException) as err:
        await watch_events(v1, None, resource_version="0")
    assert err.value.status == 503
    with pytest.raises(ApiException) as err:
        await v1.list_pod_for_all_namespaces(_request_timeout=5)
    assert err.value.status == 503
    # _preload_content=False does NOT raise on errors: the caller must check status.
    resp = await v1.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=5)
    async with resp:
        assert resp.status == 503
        assert json.loads(await resp.read())["code"] == 503
    fake.set_down(False)
    assert (await list_body(v1, _request_timeout=5))["items"] == []


async def test_timeout_seconds_closes_stream(fake: FakeKube, v1: Any) -> None:
    fake.add_pod(make_pod("a"))
    start = time.monotonic()
    events = await watch_events(v1, None, resource_version="0", timeout_seconds=1)
    assert summary(events) == [("ADDED", "a")]
    assert 0.9 < time.monotonic() - start < 5
    assert fake.requests[-1][1]["timeoutSeconds"] == "1"


async def test_stalled_watch_hits_client_timeout(fake: FakeKube, v1: Any) -> None:
    fake.add_pod(make_pod("a"))
    fake.stall_watches(True)
    with pytest.raises(TimeoutError):  # a stalled stream does not even end at timeoutSeconds
        await watch_events(v1, None, resource_version="0", timeout_seconds=1, _request_timeout=1.5)
    fake.stall_watches(False)
    events = await watch_events(v1, 1, resource_version="0")
    assert summary(events) == [("ADDED", "a")]


async def test_unauthenticated_is_rejected(fake: FakeKube) -> None:
    cfg = Configuration(host=fake.base_url)
    async with ApiClient(cfg) as api:
        with pytest.raises(ApiException) as err:
            await CoreV1Api(api).list_pod_for_all_namespaces(_request_timeout=5)
    assert err.value.status == 401


async def test_stop_closes_open_watch(tmp_path: Path) -> None:
    fake = FakeKube()
    await fake.start()
    path = tmp_path / "kubeconfig"
    fake.write_kubeconfig(path)
    cfg = Configuration()
    await config.load_kube_config(config_file=str(path), client_configuration=cfg)
    async with ApiClient(cfg) as api:
        task = asyncio.create_task(watch_events(CoreV1Api(api), None, resource_version="0"))
        await fake.wait_for_watches(1)
        async with asyncio.timeout(5):
            await fake.stop()
        assert await task == []
    assert fake.open_watches == 0
    assert asyncio.all_tasks() == {asyncio.current_task()}  # nothing left running


async def test_watch_wire_format(fake: FakeKube, v1: Any) -> None:
    fake.add_pod(make_pod("a", namespace="gpu"))
    fake.add_pod(make_pod("b"))
    resp = await v1.list_namespaced_pod(
        "gpu", watch=True, timeout_seconds=1, _preload_content=False, _request_timeout=5
    )
    async with resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("application/json")
        assert resp.headers["Transfer-Encoding"] == "chunked"
        lines = (await resp.read()).decode().splitlines()
    assert [json.loads(line)["object"]["metadata"]["name"] for line in lines] == ["a"]


async def test_client_hangup_closes_watch(fake: FakeKube, v1: Any) -> None:
    fake.add_pod(make_pod("a"))
    assert len(await watch_events(v1, 1, resource_version="0")) == 1  # breaks out early
    await fake.wait_for_watches(0)


async def test_watch_without_timeout_seconds_hides_one_410(fake: FakeKube, v1: Any) -> None:
    """Library behaviour worth knowing: with no timeout_seconds, Watch re-watches on 410."""
    rv = fake.resource_version
    task = asyncio.create_task(watch_events(v1, 1, resource_version=rv, timeout_seconds=None))
    await fake.wait_for_watches(1)
    fake.expire_watches()
    await fake.wait_for_watches(2, total=True)
    fake.add_pod(make_pod("a"))
    assert summary(await task) == [("ADDED", "a")]


async def test_request_timeout_number_is_total_not_idle(fake: FakeKube, v1: Any) -> None:
    """A plain number becomes aiohttp's *total* timeout: it kills a busy watch too.

    A (connect, read) tuple sets sock_read, an idle timeout, which is what detects a stall.
    """

    done = asyncio.Event()

    async def bookmarks() -> None:
        for _ in range(600):  # until both watches are over, and never for more than a minute
            if done.is_set():
                return
            await asyncio.sleep(0.1)  # the load under test: a bookmark every 0.1 s keeps it busy
            fake.send_bookmarks()

    kw: dict[str, Any] = {"allow_watch_bookmarks": True, "timeout_seconds": 2}
    ticker = asyncio.create_task(bookmarks())
    try:
        with pytest.raises(TimeoutError):
            await watch_events(v1, None, _request_timeout=0.8, **kw)
        assert len(await watch_events(v1, None, _request_timeout=(5, 0.8), **kw)) > 5
    finally:
        done.set()
        await ticker


# -- ResourceClaims and TokenReviews ----------------------------------------------------


async def test_claims_list(fake: FakeKube, kube_client: ApiClient) -> None:
    pod = fake.add_pod(make_pod("w", namespace="ml"))
    fake.add_claim(make_claim("c1", "ml", uid="claim-1", reserved_for=[pod]))
    fake.add_claim(make_claim("c2", "other"))
    res: Any = ResourceV1Api(kube_client)  # Any: _preload_content=False changes the return type
    resp = await res.list_resource_claim_for_all_namespaces(_preload_content=False)
    async with resp:
        body = json.loads(await resp.read())
    assert (body["kind"], body["apiVersion"]) == ("ResourceClaimList", "resource.k8s.io/v1")
    assert body["metadata"]["resourceVersion"] == fake.resource_version
    assert [c["metadata"]["name"] for c in body["items"]] == ["c1", "c2"]
    ref = body["items"][0]["status"]["reservedFor"]
    assert ref == [{"resource": "pods", "name": "w", "uid": pod["metadata"]["uid"]}]
    resp = await res.list_namespaced_resource_claim("ml", _preload_content=False)
    async with resp:
        assert [c["metadata"]["uid"] for c in json.loads(await resp.read())["items"]] == ["claim-1"]
    found = await res.get_api_resources(_request_timeout=5)
    assert [(r.name, r.namespaced) for r in found.resources] == [
        ("resourceclaims", True),
        ("resourceslices", False),
    ]
    typed = await res.list_resource_claim_for_all_namespaces(_request_timeout=5)
    assert typed.items[0].status.reserved_for[0].uid == pod["metadata"]["uid"]  # models accept it
    # Library behaviour worth knowing: a typed Watch of claims fails in kubernetes_asyncio 36
    # (it derives the class name V1ResourceClaim, which is ResourceV1ResourceClaim there), so
    # claims are watched raw, with Watch(return_type="object").
    with pytest.raises(AttributeError, match="V1ResourceClaim"):
        async with (
            asyncio.timeout(5),
            watch.Watch().stream(
                res.list_resource_claim_for_all_namespaces, timeout_seconds=1
            ) as stream,
        ):
            await anext(aiter(stream))


async def test_slices_are_listed_cluster_wide(fake: FakeKube, kube_client: ApiClient) -> None:
    devices = [{"name": "hami-gpu-0", "attributes": {"uuid": {"string": "GPU-1"}}}]
    fake.add_slice(
        {
            "kind": "ResourceSlice",
            "apiVersion": "resource.k8s.io/v1",
            "metadata": {"name": "node-a-gpu", "uid": "slice-1"},
            "spec": {"driver": "gpu.example", "pool": {"name": "node-a"}, "devices": devices},
        }
    )
    res: Any = ResourceV1Api(kube_client)
    resp = await res.list_resource_slice(_preload_content=False)
    async with resp:
        body = json.loads(await resp.read())
    assert body["kind"] == "ResourceSliceList"
    assert [(s["metadata"]["name"], s["spec"]["devices"]) for s in body["items"]] == [
        ("node-a-gpu", devices)
    ]


async def test_claims_watch_shares_versions_with_pods(
    fake: FakeKube, kube_client: ApiClient
) -> None:
    res, core = ResourceV1Api(kube_client), CoreV1Api(kube_client)
    rv = fake.resource_version
    kw: dict[str, Any] = {"resource_version": rv, "timeout_seconds": 5, "_request_timeout": 10}

    async def events(call: Any, n: int, **more: Any) -> list[JSON]:
        got: list[JSON] = []
        w = watch.Watch(return_type="object")
        async with asyncio.timeout(10), w.stream(call, **kw, **more) as stream:
            async for ev in stream:
                got.append(ev)
                if len(got) == n:
                    break
        return got

    claims = asyncio.create_task(
        events(res.list_resource_claim_for_all_namespaces, 4, allow_watch_bookmarks=True)
    )
    pods = asyncio.create_task(events(core.list_pod_for_all_namespaces, 1))
    await fake.wait_for_watches(2)
    c = fake.add_claim(make_claim("c", "ml"))
    p = fake.add_pod(make_pod("w", namespace="ml"))
    fake.modify_claim(make_claim("c", "ml", uid=c["metadata"]["uid"], reserved_for=[p]))
    fake.delete_claim("ml", "c")
    fake.send_bookmarks()
    got = await claims
    assert [e["type"] for e in got] == ["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    assert got[1]["raw_object"]["status"]["reservedFor"][0]["uid"] == p["metadata"]["uid"]
    assert got[3]["raw_object"]["kind"] == "ResourceClaim"
    versions = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in got[:3]]
    assert versions == [int(rv) + 1, int(rv) + 3, int(rv) + 4]  # the pod took rv + 2
    assert [e["raw_object"]["metadata"]["name"] for e in await pods] == ["w"]
    fake.compact()
    with pytest.raises(ApiException) as err:
        await events(res.list_resource_claim_for_all_namespaces, 1)
    assert err.value.status == 410


def review(token: str, *audiences: str) -> V1TokenReview:
    return V1TokenReview(spec=V1TokenReviewSpec(token=token, audiences=list(audiences) or None))


async def test_token_review(fake: FakeKube, kube_client: ApiClient) -> None:
    agent = fake.add_pod(make_pod("agent", namespace="hami-system", node="node-a", uid="p-1"))
    auth: Any = AuthenticationV1Api(kube_client)
    token = fake.issue_token(agent, "hami-usage-agent")
    answer = await auth.create_token_review(review(token, "hami-usage-collector", "other"))
    assert (answer.kind, answer.spec.token) == ("TokenReview", token)
    st = answer.status
    assert (st.authenticated, st.error) == (True, None)
    assert st.audiences == ["hami-usage-collector"]  # the intersection
    assert st.user.username == "system:serviceaccount:hami-system:hami-usage-agent"
    assert "system:serviceaccounts:hami-system" in st.user.groups
    extra = {k.removeprefix("authentication.kubernetes.io/"): v for k, v in st.user.extra.items()}
    assert extra == {"pod-name": ["agent"], "pod-uid": ["p-1"], "node-name": ["node-a"]}
    assert (await auth.create_token_review(review(token))).status.audiences == [
        "hami-usage-collector"
    ]  # no audiences asked: the token's own

    no_node = fake.issue_token(agent, "sa", with_node=False)
    st = (await auth.create_token_review(review(no_node))).status
    assert not any(k.endswith("node-name") for k in st.user.extra)

    async def refused(token: str, *audiences: str) -> str | None:
        st = (await auth.create_token_review(review(token, *audiences))).status
        assert (st.authenticated, st.audiences, st.user.username) == (None, None, None)  # omitempty
        error: str | None = st.error
        return error

    assert await refused("unknown") is None
    assert await refused(token, "aud-x", "aud-y") == (
        'token audiences ["hami-usage-collector"] is invalid for the target audiences '
        '["aud-x" "aud-y"]'
    )
    expired = fake.issue_token(agent, "sa", expired=True)
    assert await refused(expired) == "service account token has expired"
    fake.delete_pod("hami-system", "agent")
    assert await refused(token) == "service account token has been invalidated"
    fake.add_pod(make_pod("agent", namespace="hami-system", node="node-a", uid="p-2"))
    assert await refused(token) == "service account token has been invalidated"  # a new pod
    assert fake.token_reviews == 8


async def test_token_review_needs_credentials_and_a_token(
    fake: FakeKube, kube_client: ApiClient
) -> None:
    async with ApiClient(Configuration(host=fake.base_url)) as anonymous:
        with pytest.raises(ApiException) as err:
            await AuthenticationV1Api(anonymous).create_token_review(review("t"))
    assert err.value.status == 401
    with pytest.raises(ApiException) as err:
        await AuthenticationV1Api(kube_client).create_token_review(review(""))
    assert err.value.status == 400
    assert fake.token_reviews == 1  # the anonymous request never reached the review
