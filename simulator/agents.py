"""Simulated node agents: the simulator's workload written as HAMi-core region files, its cards as a simulated NVML.

The demo runs the real agent code (region reader, NVML sampler, pusher) on
these, so the agent path is exercised end to end without a GPU.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from collector.sources.pods import (
    Holding,
    PodRef,
    StaticDirectory,
    claim_of,
    pod_ref,
    slice_devices,
)
from simulator.agentloop import (
    ProcSlot,
    RegionSpec,
    SimulatedCard,
    SimulatedNvml,
    run_simulated,
    write_region,
)
from simulator.attributed import AttributedNode
from simulator.devices import Allocation
from simulator.node import SimulatedNode
from simulator.pods import Objects, cluster_objects

REGION_FILE = "region.cache"


def region_specs(node: SimulatedNode) -> dict[tuple[str, str], RegionSpec]:
    """One region per container, as HAMi-core would keep it: vGPU i at position i."""
    by_container: dict[tuple[str, str], list[Allocation]] = {}
    for allocation in node.allocations:
        by_container.setdefault((allocation.pod_uid, allocation.container), []).append(allocation)
    specs = {}
    for key, allocations in by_container.items():
        allocations.sort(key=lambda a: a.vdevice_index)
        slots = max(a.vdevice_index for a in allocations) + 1
        uuids = [""] * slots
        limits = [0] * slots
        used = [(0, 0, 0, 0, 0)] * slots
        util = [(0, 0, 0)] * slots
        for a in allocations:
            i = a.vdevice_index
            uuids[i] = node.cards[a.card].uuid
            limits[i] = a.limit
            used[i] = (a.context, a.module, a.buffer, a.offset, a.used)
            util[i] = (0, 0, a.sm_util)
        kernel = max((a.last_kernel_time or 0) for a in allocations)
        specs[key] = RegionSpec(
            uuids=uuids,
            limits=limits,
            procs=[ProcSlot(pid=1, hostpid=1, used=used, device_util=util)],
            last_kernel_time=kernel,
        )
    return specs


def claim_uid(pod_uid: str, container: str) -> str:
    """That claim's UID (stable per container)."""
    return str(uuid.uuid5(uuid.NAMESPACE_OID, f"{pod_uid}/{container}"))


def write_regions(root: Path, node: SimulatedNode, dra: bool = False) -> None:
    """Write ``node``'s regions under ``root`` and remove those of containers that ended.

    With ``dra`` the regions live under ``claims/<claimUID>/`` as HAMi-DRA keeps them.
    """
    wanted = set()
    for (pod_uid, container), spec in region_specs(node).items():
        if dra:
            folder = root / "claims" / claim_uid(pod_uid, container)
        else:
            folder = root / "containers" / f"{pod_uid}_{container}"
        wanted.add(folder)
        write_region(folder / REGION_FILE, spec)
    for kind in ("containers", "claims"):
        base = root / kind
        for folder in base.iterdir() if base.is_dir() else ():
            if folder not in wanted:
                shutil.rmtree(folder, ignore_errors=True)


def nvml_cards(node: SimulatedNode) -> list[SimulatedCard]:
    """The node's cards as a simulated NVML reports them."""
    return [
        SimulatedCard(
            uuid=c.uuid,
            name=c.name,
            memory_total=c.memory_total,
            memory_used=c.memory_used,
            utilization=c.utilization,
            memory_utilization=c.memory_controller_utilization,
        )
        for c in node.cards
    ]


def fake_nvml(node: SimulatedNode) -> SimulatedNvml:
    """A simulated NVML module showing ``node``'s cards; refresh it with :func:`sync_nvml`."""
    return SimulatedNvml(nvml_cards(node))


def sync_nvml(nvml: SimulatedNvml, node: SimulatedNode, elapsed: float = 0.0) -> None:
    """Copy the node's current card readings into the simulated NVML; each card's energy
    counter goes on from its previous value by its power over ``elapsed`` seconds."""
    before = {card.uuid: card.energy_mj for card in nvml.cards}
    nvml.cards = nvml_cards(node)
    for card in nvml.cards:
        card.energy_mj = before.get(card.uuid, 0) + round(card.power_mw * elapsed)


class SimulatedDirectory:
    """What the collector's pod watch would know of the simulated pods, current as pods churn.

    It reads the pods' Kubernetes objects (:mod:`simulator.pods`) through
    the collector's own parsers. Pods of the nodes named in ``dra`` use one
    ResourceClaim per container; ``attributed`` nodes add their device plugin's pods. A
    pod's start is when this directory first saw it.
    """

    def __init__(
        self,
        nodes: Sequence[SimulatedNode],
        dra: Collection[str] = (),
        clock: Callable[[], float] = time.time,
        attributed: Sequence[AttributedNode] = (),
    ) -> None:
        self._nodes = nodes
        self._attributed = attributed
        self._dra = dra
        self._clock = clock
        self._born: dict[str, float] = {}
        self._stamp: tuple[int, ...] | None = None
        self._known = StaticDirectory({}, {})

    def pod(self, uid: str) -> PodRef | None:
        """The simulated pod with this UID."""
        return self._current().pod(uid)

    def claim_owner(self, uid: str) -> tuple[PodRef, str] | None:
        """The simulated pod and container of a claim."""
        return self._current().claim_owner(uid)

    def holdings(self) -> list[Holding]:
        """What every simulated pod holds."""
        return self._current().holdings()

    def objects(self) -> Objects:
        """The simulated cluster's pods, claims and slices, as the API would serve them."""
        objects = cluster_objects(self._nodes, self._dra, self._started, claim_uid)
        for node in self._attributed:
            objects.pods.extend(node.pods(self._started(node.name)))
        return objects

    def _started(self, uid: str) -> float:
        return self._born.setdefault(uid, self._clock())

    def _current(self) -> StaticDirectory:
        stamp = tuple(node.revision for node in self._nodes)
        if stamp != self._stamp:
            self._known = self._build()
            self._stamp = stamp
        return self._known

    def _build(self) -> StaticDirectory:
        directory = directory_of(self.objects())
        self._born = {uid: t for uid, t in self._born.items() if uid in directory.pods}
        return directory


def directory_of(objects: Objects) -> StaticDirectory:
    """What the pod watch makes of ``objects``, read through the collector's own parsers."""
    pods = {ref.uid: ref for ref in map(pod_ref, objects.pods)}
    claims = {c["metadata"]["uid"]: claim_of(c) for c in objects.claims}
    slices = {key: uuid for s in objects.slices for key, uuid in slice_devices(s)}
    return StaticDirectory(pods, claims, slices)


async def run_agent(
    node: SimulatedNode,
    root: Path,
    dra: bool,
    collector: str,
    token: Callable[[], str | None],
    interval: float,
) -> None:
    """The real agent's sampler and pusher on a simulated node, until cancelled."""
    nvml = fake_nvml(node)
    last = time.time()

    def step() -> None:
        nonlocal last
        now = time.time()
        node.step(now)
        write_regions(root, node, dra)
        sync_nvml(nvml, node, now - last)
        last = now

    await run_simulated(node.name, root, nvml, collector, token, interval, step)
