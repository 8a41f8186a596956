"""Fixtures several test modules share: the fake Kubernetes API and clients of it; and the
query engine's loops compiled once, before the first test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api

from collector.promql import warmup
from collector.web.promjson import matrix_body
from testing.fakekube import FakeKube


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile the query engine's loops before any test: each collector a test starts waits
    for them before it is ready, and the first one in the process would otherwise spend a
    test's readiness timeout compiling (10-15 s without the compile cache that ``make test``
    keeps; about 0.5 s with it). tests/integration/test_coldstart.py measures the cold start itself,
    in a process of its own."""
    warmup.warm(matrix_body)


@pytest.fixture
async def fake() -> AsyncIterator[FakeKube]:
    """A started :class:`FakeKube`; no watch may be left open once it stops."""
    async with FakeKube() as fk:
        yield fk
    assert fk.open_watches == 0


@pytest.fixture
def kubeconfig(fake: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kubeconfig for ``fake``; the test is sealed from a real cluster it may run in."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    path = tmp_path / "kubeconfig"
    fake.write_kubeconfig(path)
    return path


@pytest.fixture
async def kube_client(kubeconfig: Path) -> AsyncIterator[ApiClient]:
    """A kubernetes_asyncio client of ``fake``, configured the way the collector is."""
    cfg = Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with ApiClient(cfg) as client:
        yield client


@pytest.fixture
def v1(kube_client: ApiClient) -> Any:
    """The core/v1 API of ``fake`` (Any: raw responses change the declared return types)."""
    return CoreV1Api(kube_client)
