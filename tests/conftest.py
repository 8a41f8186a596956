"""Fixtures several test modules share: the fake Kubernetes API and clients of it, a
simulated cluster held still, the root logger as each test found it; and the query engine's
loops compiled once, before the first test."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api

from collector.promql import warmup
from collector.web.promjson import matrix_body
from simulator.attributed import AttributedNode
from simulator.monitors import MonitorFarm
from simulator.node import SimulatedNode
from testing.fakekube import FakeKube


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile the query engine's loops before any test: each collector a test starts waits
    for them before it is ready, and the first one in the process would otherwise spend a
    test's readiness timeout compiling (10-15 s without the compile cache that ``make test``
    keeps; about 0.5 s with it). tests/integration/test_coldstart.py measures the cold start itself,
    in a process of its own."""
    warmup.warm(matrix_body)


@pytest.fixture(autouse=True)
def root_logger() -> Iterator[None]:
    """The root logger's handlers and level as the test found them: a test that runs a
    program's ``main`` in process sets them to that test's captured stderr, which pytest
    closes, and a task logging later would write to a closed file."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


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


@pytest.fixture
def still(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulated cluster holds its first readings: each node steps once, no pod ends,
    no monitor fails."""
    monkeypatch.setattr(SimulatedNode, "CHURN_PROBABILITY", 0.0)
    node_step, plugin_step = SimulatedNode.step, AttributedNode.step

    def node_once(self: SimulatedNode, now: float) -> None:
        if self._tick is None:
            node_step(self, now)

    def plugin_once(self: AttributedNode, now: float) -> None:
        if self._stepped is None:
            plugin_step(self, now)

    monkeypatch.setattr(SimulatedNode, "step", node_once)
    monkeypatch.setattr(AttributedNode, "step", plugin_once)
    monkeypatch.setattr(MonitorFarm, "set_fault", lambda self, node, fault: None)
