"""A kubelet's PodResources v1 gRPC service on a unix socket: the demo's and the tests' peer.

A real grpc server speaking the proto the agent's stubs were generated from
(:mod:`agent.podresources`), so the agent's reader talks to it exactly as to a
node's kubelet. It answers what its owner sets: :attr:`Kubelet.pods` (and
:attr:`Kubelet.allocatable`; None answers UNIMPLEMENTED, as kubelets before
1.23 do).
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any

import grpc

from agent.podresources import api_pb2, api_pb2_grpc

PodResources = api_pb2.PodResources
"""One pod's entry of a List answer."""

BOUND = 10.0
"""Seconds any wait of the server may take: a held List, a stop."""


def devices(resource: str, *ids: str) -> api_pb2.ContainerDevices:
    """One resource's devices of a container."""
    return api_pb2.ContainerDevices(resource_name=resource, device_ids=list(ids))


def container(name: str, *devs: api_pb2.ContainerDevices) -> api_pb2.ContainerResources:
    """A container and its devices."""
    return api_pb2.ContainerResources(name=name, devices=list(devs))


def pod(namespace: str, name: str, *containers: api_pb2.ContainerResources) -> api_pb2.PodResources:
    """A pod and its containers."""
    return api_pb2.PodResources(name=name, namespace=namespace, containers=list(containers))


class Kubelet(api_pb2_grpc.PodResourcesListerServicer):
    """Answers what its owner sets; ``hold``, when set, makes List wait on it (bounded)."""

    def __init__(self) -> None:
        self.pods: list[api_pb2.PodResources] = []
        self.allocatable: list[api_pb2.ContainerDevices] | None = []
        self.list_unimplemented = False
        self.hold: threading.Event | None = None
        self.allocatable_calls = 0
        self.list_calls = 0

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: Any
    ) -> api_pb2.ListPodResourcesResponse:
        """Every pod's containers and their devices."""
        self.list_calls += 1
        if self.list_unimplemented:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method List")
        if self.hold is not None:
            self.hold.wait(BOUND)
        return api_pb2.ListPodResourcesResponse(pod_resources=list(self.pods))

    def GetAllocatableResources(
        self, request: api_pb2.AllocatableResourcesRequest, context: Any
    ) -> api_pb2.AllocatableResourcesResponse:
        """The devices the node can allocate."""
        self.allocatable_calls += 1
        if self.allocatable is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method GetAllocatableResources")
        return api_pb2.AllocatableResourcesResponse(devices=self.allocatable)


class KubeletServer:
    """A grpc server for one :class:`Kubelet` on a unix socket; it may be stopped and restarted."""

    def __init__(self, socket: str, kubelet: Kubelet) -> None:
        self.socket = socket
        self.kubelet = kubelet
        self._server: Any = None

    def start(self) -> None:
        """Listen on the socket (two threads: the agent asks once per snapshot)."""
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        add: Any = api_pb2_grpc.add_PodResourcesListerServicer_to_server  # generated, untyped
        add(self.kubelet, server)
        if server.add_insecure_port("unix://" + self.socket) <= 0:
            raise OSError(f"cannot listen on unix://{self.socket}")
        server.start()
        self._server = server

    def stop(self) -> None:
        """Stop at once, failing calls in flight; bounded."""
        if self._server is not None:
            self._server.stop(grace=None).wait(BOUND)
            self._server = None
