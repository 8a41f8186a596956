"""agent.kubelet against a real grpc server speaking the kubelet's PodResources v1 API."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator

import pytest

from agent.kubelet import GPU_RESOURCES, PodResourcesReader, card_id
from agent.podresources import api_pb2
from core.payload import Assignment
from simulator import kubelet
from simulator.kubelet import Kubelet, KubeletServer, container, devices

CARD_A = "GPU-" + "a" * 8 + "-aaaa-aaaa-aaaa-" + "a" * 12
CARD_B = "GPU-" + "b" * 8 + "-bbbb-bbbb-bbbb-" + "b" * 12
CARD_C = "GPU-" + "c" * 8 + "-cccc-cccc-cccc-" + "c" * 12
MIG_1 = "MIG-" + "1" * 8 + "-1111-1111-1111-" + "1" * 12
# What the NVML sampler would know on this node: UUIDs map to themselves, index 2 is card C.
KNOWN = {CARD_A: CARD_A, CARD_B: CARD_B, CARD_C: CARD_C, MIG_1: MIG_1, "2": CARD_C}


def pod(name: str, *containers: api_pb2.ContainerResources) -> api_pb2.PodResources:
    return kubelet.pod("team", name, *containers)


@pytest.fixture
def sockdir() -> Iterator[str]:
    # Short on purpose: a unix socket's path may be at most 108 bytes, and pytest's tmp_path
    # can be longer than that.
    path = tempfile.mkdtemp(prefix="podres-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server(sockdir: str) -> Iterator[KubeletServer]:
    srv = KubeletServer(os.path.join(sockdir, "kubelet.sock"), Kubelet())
    srv.start()
    yield srv
    if srv.kubelet.hold is not None:
        srv.kubelet.hold.set()  # free a servicer thread still waiting, so stop() is quick
    srv.stop()


@pytest.fixture
def reader_for() -> Iterator[Callable[..., PodResourcesReader]]:
    made: list[PodResourcesReader] = []

    def make(
        socket: str, timeout: float = 2.0, resources: tuple[str, ...] = GPU_RESOURCES
    ) -> PodResourcesReader:
        reader = PodResourcesReader(socket, KNOWN.get, timeout=timeout, resources=resources)
        made.append(reader)
        return reader

    yield make
    for reader in made:
        reader.close()


def test_card_id() -> None:
    assert card_id(CARD_A) == CARD_A
    assert card_id(CARD_A + "::3") == CARD_A
    assert card_id(CARD_A + "-1") == CARD_A  # HAMi / Volcano: the card UUID, then more
    assert card_id(CARD_A + "-0::2") == CARD_A
    assert card_id(MIG_1) == MIG_1
    assert card_id("2") == "2"
    assert card_id("GPU-short") == "GPU-short"


def test_gpu_resources_skip_nics() -> None:
    reader = PodResourcesReader("/nonexistent", KNOWN.get)
    assert all(reader._wanted(r) for r in ("nvidia.com/gpu", "nvidia.com/gpu.shared"))
    assert reader._wanted("nvidia.com/mig-1g.5gb")
    assert reader._wanted("volcano.sh/vgpu-number")
    assert not reader._wanted("nvidia.com/hostdev")
    assert reader.resources == GPU_RESOURCES


def test_list(server: KubeletServer, reader_for: Callable[..., PodResourcesReader]) -> None:
    server.kubelet.pods = [
        pod("whole", container("main", devices("nvidia.com/gpu", CARD_A, CARD_B))),
        pod("sliced", container("main", devices("nvidia.com/gpu", CARD_C + "::3"))),
        pod("mig", container("main", devices("nvidia.com/mig-1g.10gb", MIG_1))),
        pod("index", container("main", devices("example.vendor/gpu", "2"))),
        pod(
            "mixed",
            container(
                "main",
                devices("nvidia.com/gpu", CARD_A, "GPU-not-on-this-node"),
                devices("example.com/foo", "foo-1"),
            ),
            container("sidecar"),
        ),
        pod(
            "hami", container("main", devices("nvidia.com/gpu", CARD_B + "-3::1", CARD_B + "-3::2"))
        ),
        pod("volcano", container("main", devices("volcano.sh/vgpu-number", CARD_C + "-0"))),
        pod("cpu-only", container("main")),
    ]
    # A plugin that registers indices, not UUIDs; resolve turns index 2 into card C.
    reader = reader_for(server.socket, resources=(*GPU_RESOURCES, "example.vendor/gpu"))
    got = reader.read()
    assert reader.up
    assert reader.reason is None
    assert got == [
        Assignment(
            namespace="team", pod="whole", container="main", resource="nvidia.com/gpu",
            devices=[CARD_A, CARD_B],
        ),
        Assignment(
            namespace="team", pod="sliced", container="main", resource="nvidia.com/gpu",
            devices=[CARD_C],
        ),
        Assignment(
            namespace="team", pod="mig", container="main", resource="nvidia.com/mig-1g.10gb",
            devices=[MIG_1],
        ),
        Assignment(
            namespace="team", pod="index", container="main", resource="example.vendor/gpu",
            devices=[CARD_C],
        ),
        Assignment(
            namespace="team", pod="mixed", container="main", resource="nvidia.com/gpu",
            devices=[CARD_A],
        ),
        Assignment(
            namespace="team", pod="hami", container="main", resource="nvidia.com/gpu",
            devices=[CARD_B],
        ),
        Assignment(
            namespace="team", pod="volcano", container="main",
            resource="volcano.sh/vgpu-number", devices=[CARD_C],
        ),
    ]  # fmt: skip
    assert reader.unresolved == 1  # GPU-not-on-this-node; example.com/foo is never looked up


def test_dynamic_resources(
    server: KubeletServer, reader_for: Callable[..., PodResourcesReader]
) -> None:
    claim = api_pb2.ClaimResource(
        driver_name="gpu.nvidia.com",
        pool_name="node-1",
        device_name="gpu-0",  # the NVIDIA DRA driver's name; this node's resolve does not know it
        cdi_devices=[api_pb2.CDIDevice(name=f"k8s.gpu.nvidia.com/device={CARD_A}")],
    )
    nic = api_pb2.ClaimResource(driver_name="sriov.example.com", device_name="vf-0")
    dra = api_pb2.ContainerResources(
        name="main",
        dynamic_resources=[api_pb2.DynamicResource(claim_name="gpu", claim_resources=[claim, nic])],
    )
    server.kubelet.pods = [pod("dra", dra)]
    reader = reader_for(server.socket)
    assert reader.read() == [
        Assignment(
            namespace="team", pod="dra", container="main", resource="gpu.nvidia.com",
            devices=[CARD_A],
        )
    ]  # fmt: skip
    assert reader.unresolved == 0


def test_allocatable(server: KubeletServer, reader_for: Callable[..., PodResourcesReader]) -> None:
    server.kubelet.allocatable = [
        devices("nvidia.com/gpu", CARD_A + "::0", CARD_A + "::1", CARD_B + "::0"),
        devices("nvidia.com/mig-1g.10gb", MIG_1),
        devices("example.com/foo", "foo-1"),
    ]
    reader = reader_for(server.socket)
    assert reader.read() == []
    assert reader.allocatable == {"nvidia.com/gpu": 3, "nvidia.com/mig-1g.10gb": 1}
    assert reader.read() == []
    assert server.kubelet.allocatable_calls == 1  # once per channel, not per read


def test_allocatable_unimplemented(
    server: KubeletServer,
    reader_for: Callable[..., PodResourcesReader],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.kubelet.allocatable = None
    server.kubelet.pods = [pod("whole", container("main", devices("nvidia.com/gpu", CARD_A)))]
    reader = reader_for(server.socket)
    with caplog.at_level(logging.DEBUG, logger="agent.kubelet"):
        got = reader.read()
    assert got is not None
    assert [a.devices for a in got] == [[CARD_A]]
    assert reader.up
    assert reader.allocatable == {}
    assert any("UNIMPLEMENTED" in r.getMessage() for r in caplog.records)


def test_list_unimplemented(
    server: KubeletServer, reader_for: Callable[..., PodResourcesReader]
) -> None:
    server.kubelet.list_unimplemented = True
    reader = reader_for(server.socket)
    assert reader.read() is None
    assert not reader.up
    assert reader.reason is not None
    assert "UNIMPLEMENTED" in reader.reason


def test_missing_socket(
    sockdir: str,
    reader_for: Callable[..., PodResourcesReader],
    caplog: pytest.LogCaptureFixture,
) -> None:
    socket = os.path.join(sockdir, "absent.sock")
    reader = reader_for(socket)
    with caplog.at_level(logging.DEBUG, logger="agent.kubelet"):
        assert reader.read() is None
        assert reader.read() is None
    assert not reader.up
    assert reader.reason is not None
    assert socket in reader.reason
    levels = [r.levelno for r in caplog.records if socket in r.getMessage()]
    assert levels == [logging.WARNING, logging.DEBUG]  # once loudly, then quietly


def test_not_a_socket(sockdir: str, reader_for: Callable[..., PodResourcesReader]) -> None:
    path = os.path.join(sockdir, "plain-file")
    with open(path, "w"):
        pass
    reader = reader_for(path)
    assert reader.read() is None
    assert reader.reason is not None
    assert path in reader.reason


def test_server_restart(
    server: KubeletServer, reader_for: Callable[..., PodResourcesReader]
) -> None:
    server.kubelet.pods = [pod("whole", container("main", devices("nvidia.com/gpu", CARD_A)))]
    reader = reader_for(server.socket)
    assert reader.read() is not None
    assert server.kubelet.allocatable_calls == 1

    server.stop()
    assert reader.read() is None
    assert not reader.up
    assert reader.reason is not None

    server.start()  # a new server on the same path, as a restarted kubelet makes
    got = reader.read()
    assert got is not None
    assert [a.devices for a in got] == [[CARD_A]]
    assert reader.up
    assert reader.reason is None
    assert server.kubelet.allocatable_calls == 2  # asked again on the new channel


def test_slow_server(server: KubeletServer, reader_for: Callable[..., PodResourcesReader]) -> None:
    server.kubelet.hold = threading.Event()
    reader = reader_for(server.socket, timeout=0.2)
    assert reader.read() is None
    assert not reader.up
    assert reader.reason is not None
    assert "DEADLINE_EXCEEDED" in reader.reason

    server.kubelet.hold.set()
    assert reader.read() == []  # the next read, on a fresh channel, answers
    assert reader.up


def test_recovery_logs_once(
    server: KubeletServer,
    reader_for: Callable[..., PodResourcesReader],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.kubelet.allocatable = None
    reader = reader_for(server.socket)
    with caplog.at_level(logging.INFO, logger="agent.kubelet"):
        assert reader.read() == []
        assert reader.read() == []
    # Only the UNIMPLEMENTED GetAllocatableResources, once; no "answers again" on a first read.
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
