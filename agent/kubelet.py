"""Which containers hold which GPUs, from the kubelet's PodResources v1 gRPC API.

The kubelet serves ``v1.PodResourcesLister`` on a unix socket (by default
``/var/lib/kubelet/pod-resources/kubelet.sock``). :class:`PodResourcesReader` calls ``List``
once per :meth:`~PodResourcesReader.read` and ``GetAllocatableResources`` once per new channel.
``Get`` is not used: ``List`` answers for every pod at once, and old kubelets lack ``Get``.

What is used from the answer:

* ``ContainerDevices`` (device plugins) whose ``resource_name`` starts with one of
  ``resources``: the device IDs, passed through :func:`card_id` and then the caller's
  ``resolve``; IDs that resolve to nothing on this node are dropped and counted.
* ``dynamic_resources`` (DRA), for drivers in :data:`DRA_GPU_DRIVERS` only: each
  ``ClaimResource``'s ``device_name`` and the device part of its CDI device names are tried,
  in that order, with ``resolve``; the first that resolves is the device. The resource is the
  driver name. A kubelet that leaves ``dynamic_resources`` empty simply yields none.

What is not used: topology (NUMA nodes), CPU IDs and memory blocks, the DRA claim's name,
namespace, pool name and ``share_id``.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from core.payload import Assignment

if TYPE_CHECKING:
    from agent.podresources import api_pb2

log = logging.getLogger(__name__)

DEFAULT_SOCKET: Final = "/var/lib/kubelet/pod-resources/kubelet.sock"

# Prefixes of device-plugin resource names that are GPUs. "nvidia.com/gpu" also covers
# "nvidia.com/gpu.shared" (time-slicing with renameByDefault) and is what HAMi registers;
# "nvidia.com/mig-" is the MIG "mixed" strategy (nvidia.com/mig-1g.5gb, ...);
# "volcano.sh/vgpu-number" is Volcano's vGPU plugin. A bare "nvidia.com/" is deliberately not
# here: NVIDIA's network operator registers NICs under it (nvidia.com/hostdev,
# nvidia.com/rdma_shared_device_a), which would only be noise in ``unresolved``.
GPU_RESOURCES: Final = ("nvidia.com/gpu", "nvidia.com/mig-", "volcano.sh/vgpu-number")

# DRA drivers whose claims are GPUs: NVIDIA's k8s-dra-driver-gpu. Its sibling
# "compute-domain.nvidia.com" hands out IMEX channels, not GPUs.
DRA_GPU_DRIVERS: Final = ("gpu.nvidia.com",)

_GPU_UUID_LEN: Final = 40  # "GPU-" + a 36-character UUID
_MAX_DEVICES: Final = 64  # Assignment.devices' bound


def card_id(device_id: str) -> str:
    """The card (or MIG) part of a device plugin's ID.

    NVIDIA's time-slicing replicas are ``GPU-<uuid>::N``; HAMi and Volcano embed the card UUID
    at the start of longer IDs. Anything else (a MIG UUID, an index) is returned as it is.
    """
    base = device_id.split("::", 1)[0]
    if base.startswith("GPU-") and len(base) > _GPU_UUID_LEN:
        return base[:_GPU_UUID_LEN]
    return base


class PodResourcesReader:
    """Reads the kubelet's PodResources API; every failure is a state, never an exception.

    Meant to be called from one worker thread; :meth:`close` may come from another.
    """

    def __init__(
        self,
        socket: str,
        resolve: Callable[[str], str | None],
        timeout: float = 2.0,
        resources: Sequence[str] = GPU_RESOURCES,
    ) -> None:
        self.socket = socket
        self.resolve = resolve
        self.timeout = timeout
        self.resources = tuple(resources)
        self.up = False
        self.reason: str | None = "not read yet"
        self.allocatable: dict[str, int] = {}
        self.unresolved = 0
        self._channel: Any = None
        self._stub: Any = None
        self._asked_allocatable = False
        # Reason kinds logged at WARNING since the API last answered: one line per outage.
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def read(self) -> list[Assignment] | None:
        """The GPU assignments the kubelet lists now, or None when it could not be asked."""
        with self._lock:
            try:
                return self._read()
            except Exception as exc:  # the sampler thread must survive any surprise
                self._fail("unexpected", f"reading {self.socket}: {type(exc).__name__}: {exc}")
                self._drop_channel()
                return None

    def close(self) -> None:
        with self._lock:
            self._drop_channel()

    def _read(self) -> list[Assignment] | None:
        if self._stub is None and not self._connect():
            return None
        # grpc is imported by _connect before any call can get here.
        import grpc

        from agent.podresources import api_pb2

        try:
            response = self._stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            self._rpc_failed("List", exc)
            return None
        if not self.up:
            if self._seen:
                log.info("kubelet PodResources API at %s answers again", self.socket)
            self._seen.clear()  # a later outage is news again
        self.up = True
        self.reason = None
        if not self._asked_allocatable:
            self._asked_allocatable = True
            self._read_allocatable()
        return self._assignments(response)

    def _connect(self) -> bool:
        try:
            mode = os.stat(self.socket).st_mode
        except FileNotFoundError:
            self._fail("missing", f"socket {self.socket} does not exist")
            return False
        except OSError as exc:
            self._fail("stat", f"socket {self.socket}: {exc.strerror or exc}")
            return False
        if not stat.S_ISSOCK(mode):
            self._fail("not-socket", f"{self.socket} is not a unix socket")
            return False
        # Imported here, not at module level: grpcio costs about 19 MiB of RSS and protobuf
        # plus the stubs another 2.5 MiB (21.4 MiB together, grpcio 1.85, CPython 3.11, upb),
        # which an agent on a node without the socket should not carry.
        import grpc

        from agent.podresources import api_pb2_grpc

        self._channel = grpc.insecure_channel("unix://" + self.socket)
        stub: Any = api_pb2_grpc.PodResourcesListerStub  # generated without type hints
        self._stub = stub(self._channel)
        self._asked_allocatable = False
        return True

    def _drop_channel(self) -> None:
        # A fresh channel per outage: grpc's own reconnect backoff (up to two minutes) would
        # keep answering UNAVAILABLE after the kubelet is back, and a restarted kubelet makes
        # a new socket file anyway.
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            channel.close()

    def _read_allocatable(self) -> None:
        import grpc

        from agent.podresources import api_pb2

        try:
            response = self._stub.GetAllocatableResources(
                api_pb2.AllocatableResourcesRequest(), timeout=self.timeout
            )
        except grpc.RpcError as exc:
            self.allocatable = {}
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            log.log(
                self._level(f"allocatable:{code}"),
                "kubelet PodResources GetAllocatableResources at %s: %s",
                self.socket,
                _describe(exc),
            )
            return
        counts: dict[str, int] = {}
        for devices in response.devices:
            if self._wanted(devices.resource_name):
                # Raw IDs: time-sliced replicas count one each, as the kubelet advertises them.
                counts[devices.resource_name] = counts.get(devices.resource_name, 0) + len(
                    devices.device_ids
                )
        self.allocatable = counts

    def _rpc_failed(self, call: str, exc: Any) -> None:
        import grpc

        code = exc.code() if callable(getattr(exc, "code", None)) else None
        self._fail(str(code), f"{call} at {self.socket}: {_describe(exc)}")
        if code != grpc.StatusCode.UNIMPLEMENTED:
            self._drop_channel()

    def _fail(self, kind: str, reason: str) -> None:
        self.up = False
        self.reason = reason
        log.log(self._level(kind), "kubelet PodResources API unreadable: %s", reason)

    def _level(self, kind: str) -> int:
        if kind in self._seen:
            return logging.DEBUG
        self._seen.add(kind)
        return logging.WARNING

    def _wanted(self, resource: str) -> bool:
        return resource.startswith(self.resources)

    def _assignments(self, response: api_pb2.ListPodResourcesResponse) -> list[Assignment]:
        out: list[Assignment] = []
        for pod in response.pod_resources:
            for container in pod.containers:
                by_resource: dict[str, list[str]] = {}
                for devices in container.devices:
                    if self._wanted(devices.resource_name):
                        found = by_resource.setdefault(devices.resource_name, [])
                        self._resolve_into(found, ([card_id(d)] for d in devices.device_ids))
                for dynamic in container.dynamic_resources:
                    for claim in dynamic.claim_resources:
                        if claim.driver_name in DRA_GPU_DRIVERS:
                            found = by_resource.setdefault(claim.driver_name, [])
                            self._resolve_into(found, [_dra_candidates(claim)])
                for resource, found in by_resource.items():
                    if not found:
                        continue
                    try:
                        out.append(
                            Assignment(
                                namespace=pod.namespace,
                                pod=pod.name,
                                container=container.name,
                                resource=resource,
                                devices=found[:_MAX_DEVICES],
                            )
                        )
                    except ValidationError as exc:
                        log.debug(
                            "skipping %s/%s/%s %s: %s",
                            pod.namespace,
                            pod.name,
                            container.name,
                            resource,
                            exc.errors()[0]["msg"],
                        )
        return out

    def _resolve_into(self, found: list[str], devices: Iterable[list[str]]) -> None:
        """Append each device's first resolving candidate to ``found``, once per card.

        Several time-sliced replicas of one card in one container are that card once.
        """
        for candidates in devices:
            uuid = next((u for c in candidates if c and (u := self.resolve(c))), None)
            if uuid is None:
                self.unresolved += 1
            elif uuid not in found:
                found.append(uuid)


def _dra_candidates(claim: api_pb2.ClaimResource) -> list[str]:
    names = [card_id(claim.device_name)]
    # A CDI name is "vendor.com/class=device"; only the device part can name a card.
    names += [card_id(cdi.name.rpartition("=")[2]) for cdi in claim.cdi_devices]
    return names


def _describe(exc: Any) -> str:
    """One line for a grpc.RpcError: its status code and details."""
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    details = exc.details() if callable(getattr(exc, "details", None)) else None
    name = getattr(code, "name", None) or type(exc).__name__
    text = " ".join(str(details or "").split())  # grpc's details may span lines
    return f"{name}: {text}" if text else name
