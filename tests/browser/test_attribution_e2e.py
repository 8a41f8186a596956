"""The real agent on a node no isolator reports: every pod on a GPU gets its usage.

The agent's own sampler reads a simulated NVML with processes on every card, a
fake ``/proc`` whose cgroup files use four of the kubelet's forms, a HAMi-core
region written by the simulator's writer, and a real PodResources gRPC server
on a unix socket; the collector's push path turns the snapshot into series. A
whole-card pod, two pods time-sharing a card with a host process, a MIG pod
and a vGPU pod each show the right series, labelled as their allocation is,
and the energy parts of every card sum to its rise.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.app import Sampler
from agent.cgroups import ProcOwners
from agent.kubelet import PodResourcesReader
from agent.nvml import NvmlSampler
from agent.slots import SlotChecker
from agent.xid import XidWatcher
from collector.exposition.parse import parse_series
from collector.normalise import labelsets, schema
from collector.sources.kubelet_devices import Assignments
from collector.sources.pods import StaticDirectory, pod_ref
from collector.sources.push import SeriesKeys, to_batch
from core.payload import Payload
from simulator.attributed import (
    HOST_CARD,
    HOST_MEMORY,
    HOST_PID,
    VGPU,
    VGPU_KILLED,
    VGPU_PROCESSES,
    WORKLOADS,
    AttributedNode,
)
from simulator.kubelet import KubeletServer

T0 = 1_800_000_000.0
SeriesMap = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[AttributedNode, Sampler]]:
    short = tempfile.mkdtemp(dir="/tmp")  # a unix socket's path may be at most 108 bytes
    simulated = AttributedNode("gpu-attr-01", tmp_path / "proc")
    server = KubeletServer(os.path.join(short, "kubelet.sock"), simulated.kubelet)
    server.start()
    nvml = NvmlSampler(simulated.nvml)
    assert nvml.start()
    reader = PodResourcesReader(server.socket, nvml.device_uuid)
    sampler = sampler_of(simulated, nvml, reader)
    try:
        yield simulated, sampler
    finally:
        sampler.close()
        server.stop()
        shutil.rmtree(short, ignore_errors=True)


def sampler_of(simulated: AttributedNode, nvml: NvmlSampler, reader: PodResourcesReader) -> Sampler:
    """The agent's sampler as ``sampler_of`` makes it, on the simulated node's files."""
    owners = ProcOwners(simulated.proc)
    slots = SlotChecker(simulated.proc)
    roots = [str(simulated.regions)]
    return Sampler(simulated.name, roots, None, nvml, owners, reader, slots=slots)


def snapshots(simulated: AttributedNode, sampler: Sampler, count: int) -> list[Payload]:
    out = []
    for i in range(count):
        simulated.step(T0 + 5 * i)
        out.append(sampler.snapshot())
    return out


def directory(simulated: AttributedNode) -> StaticDirectory:
    return StaticDirectory({p["metadata"]["uid"]: pod_ref(p) for p in simulated.pods(T0)}, {})


def series_of(payload: Payload, pods: StaticDirectory) -> SeriesMap:
    batch, _ = to_batch(payload, pods, SeriesKeys())
    return {
        (name, frozenset(labels)): value
        for key, value in batch.series.items()
        for name, labels in [parse_series(key)]
    }


def test_each_kind_of_pod_and_the_host_process_gets_its_own_series(
    node: tuple[AttributedNode, Sampler],
) -> None:
    simulated, sampler = node
    payload = snapshots(simulated, sampler, 3)[-1]
    assert payload.assignments is not None, sampler
    series = series_of(payload, directory(simulated))
    cards = simulated.nvml.cards
    for w in WORKLOADS:
        device = cards[w.card].uuid if w.mig_slot is None else cards[w.card].mig[w.mig_slot].uuid  # type: ignore[union-attr]
        labels = frozenset(labelsets.vgpu(w.namespace, w.pod, w.container, 0, device))
        assert series[(schema.CONTAINER_MEMORY, labels)] == w.memory, w.pod
        if w.mig_slot is None:  # NVML has no per-process utilisation on MIG
            assert (schema.VGPU_UTILIZATION, labels) in series, w.pod
            assert series[(schema.CONTAINER_ENERGY, labels)] > 0, w.pod
        else:
            assert (schema.VGPU_UTILIZATION, labels) not in series
    # the two time-sharing pods: each its own memory, not the card's copied to both
    shared = {w.pod: w.memory for w in WORKLOADS if w.card == 1}
    assert len(set(shared.values())) == 2
    host = frozenset(labelsets.device(cards[HOST_CARD].uuid))
    assert series[(schema.UNATTRIBUTED_MEMORY, host)] == HOST_MEMORY
    mig = cards[2].mig[0]
    assert mig is not None
    mig_labels = frozenset(labelsets.mig(cards[2].uuid, mig.uuid, 1, 0, "3g.71gb"))
    assert series[(schema.MIG_MEMORY_USED, mig_labels)] == 40 << 30


def test_whole_card_and_mig_allocations_get_the_kubelet_s_cards(
    node: tuple[AttributedNode, Sampler],
) -> None:
    simulated, sampler = node
    payload = snapshots(simulated, sampler, 1)[0]
    assignments = Assignments()
    assignments.put(payload.node, payload.assignments or [])
    cards = simulated.nvml.cards
    plugin = {w.pod: w for w in WORKLOADS}
    for holding in directory(simulated).holdings():
        pod = holding.pod
        (grant,) = assignments.fill(pod.namespace, pod.name, holding.grants)
        w = plugin.get(pod.name)
        if w is None:  # the vGPU pod: its card is in its annotation, not the kubelet's answer
            assert grant.kind == "vgpu"
            continue
        expected = cards[w.card].uuid if w.mig_slot is None else cards[w.card].mig[0].uuid  # type: ignore[union-attr]
        assert grant.device_uuid == labelsets.device_uuid(expected), pod.name
        assert grant.kind == ("mig" if w.mig_slot is not None else "whole")


def test_energy_parts_sum_to_the_card_s_energy(node: tuple[AttributedNode, Sampler]) -> None:
    simulated, sampler = node
    payloads = snapshots(simulated, sampler, 8)
    first, last = payloads[0], payloads[-1]
    for card_first, card in zip(first.cards, last.cards, strict=True):
        assert card.energy is not None
        assert card_first.energy is not None
        parts = sum(u.energy or 0 for u in last.processes if _on(u.device, card.uuid, simulated))
        total = card.energy - card_first.energy
        assert card.idle_energy is not None
        assert math.isclose(parts + card.idle_energy, total, rel_tol=1e-9), card.uuid
        assert total > 0


def _on(device: str, card: str, simulated: AttributedNode) -> bool:
    for c in simulated.nvml.cards:
        if c.uuid == card:
            return device == card or any(m is not None and m.uuid == device for m in c.mig)
    return False


def test_a_process_whose_cgroup_cannot_be_read_is_counted_and_skipped(
    node: tuple[AttributedNode, Sampler],
) -> None:
    simulated, sampler = node
    (simulated.proc / str(HOST_PID) / "cgroup").unlink()
    payload = snapshots(simulated, sampler, 1)[0]
    assert all(u.pod_uid is not None for u in payload.processes)  # never guessed as a host's
    assert sampler.registry.get_sample_value("hami_agent_processes_unreadable_total") == 1


def test_without_the_kubelet_the_rest_of_the_snapshot_is_as_before(
    node: tuple[AttributedNode, Sampler], tmp_path: Path
) -> None:
    simulated, _ = node
    nvml = NvmlSampler(simulated.nvml)
    assert nvml.start()
    missing = PodResourcesReader(str(tmp_path / "none.sock"), nvml.device_uuid)
    alone = sampler_of(simulated, nvml, missing)
    simulated.step(T0)
    payload = alone.snapshot()
    assert payload.assignments is None
    assert alone.registry.get_sample_value("hami_agent_pod_resources_up") == 0
    assert len(payload.processes) == len(WORKLOADS) + 2  # the host's, the vGPU container's
    assert len(payload.regions) == 1


def test_an_xid_event_is_counted_once_on_its_card(node: tuple[AttributedNode, Sampler]) -> None:
    simulated, _sampler = node
    watcher = XidWatcher(simulated.nvml)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop, 50))
    thread.start()
    try:
        assert watcher.ready.wait(10)
        simulated.step(T0)  # a step past the XID period posts one XID 31 on card 1
        assert watcher.wait_counted(1, 10)
        simulated.step(T0 + 1)  # the same period: nothing more
    finally:
        stop.set()
        thread.join(10)
    assert watcher.counts() == {simulated.nvml.cards[1].uuid: {31: 1}}


def test_the_kubelet_is_asked_again_only_when_the_processes_change(
    node: tuple[AttributedNode, Sampler],
) -> None:
    simulated, sampler = node
    snapshots(simulated, sampler, 3)
    assert simulated.kubelet.list_calls == 1
    simulated.kill(HOST_PID)
    assert sampler.snapshot().assignments is not None
    assert simulated.kubelet.list_calls == 2
    assert sampler.snapshot().assignments is not None
    assert simulated.kubelet.list_calls == 2


def _vgpu_labels(simulated: AttributedNode) -> frozenset[tuple[str, str]]:
    card = simulated.nvml.cards[VGPU.card].uuid
    return frozenset(labelsets.vgpu(VGPU.namespace, VGPU.pod, VGPU.container, 0, card))


def test_a_killed_process_s_slot_stops_counting(node: tuple[AttributedNode, Sampler]) -> None:
    simulated, sampler = node
    payload = snapshots(simulated, sampler, 2)[-1]
    (region,) = payload.regions
    (device,) = region.devices
    live = sum(p.memory for p in VGPU_PROCESSES)
    assert (device.memory_used, device.stale_memory) == (live, VGPU_KILLED.memory)
    assert sampler.registry.get_sample_value("hami_agent_stale_region_slots") == 1
    assert sampler.registry.get_sample_value("hami_agent_unchecked_region_slots") == 0
    series = series_of(payload, directory(simulated))
    labels = _vgpu_labels(simulated)
    assert series[(schema.VGPU_MEMORY_USED, labels)] == live  # HAMi's monitor: live + 6 GiB
    assert series[(schema.STALE_MEMORY, labels)] == VGPU_KILLED.memory
    # the main process is killed too: its slot stays, and stops counting at the next snapshot
    simulated.kill(VGPU.pid)
    (device,) = sampler.snapshot().regions[0].devices
    main = VGPU_PROCESSES[0].memory
    assert (device.memory_used, device.stale_memory) == (live - main, VGPU_KILLED.memory + main)
    assert sampler.registry.get_sample_value("hami_agent_stale_region_slots") == 2


def test_a_region_without_utilisation_gets_nvml_s_and_says_so(
    node: tuple[AttributedNode, Sampler],
) -> None:
    simulated, sampler = node
    payload = snapshots(simulated, sampler, 2)[-1]
    (device,) = payload.regions[0].devices
    card = simulated.nvml.cards[VGPU.card].uuid
    (nvml,) = [u for u in payload.processes if u.device == card and u.pod_uid == VGPU.uid]
    assert nvml.processes == len(VGPU_PROCESSES)  # the forked worker (hostpid 0) is the same
    assert nvml.utilization is not None
    assert nvml.utilization > 0
    assert (device.sm_utilization, device.utilization_source) == (nvml.utilization, "nvml")
    series = series_of(payload, directory(simulated))
    labels = _vgpu_labels(simulated)
    assert series[(schema.VGPU_UTILIZATION, labels)] == nvml.utilization
    assert series[(schema.UTILIZATION_SOURCE, labels | {("source", "nvml")})] == 1
    # a container of the device plugin: its utilisation is NVML's, and says so too
    train = WORKLOADS[0]
    whole = simulated.nvml.cards[train.card].uuid
    plugin = labelsets.vgpu(train.namespace, train.pod, train.container, 0, whole)
    assert series[(schema.UTILIZATION_SOURCE, frozenset((*plugin, ("source", "nvml"))))] == 1


def test_every_card_s_energy_parts_sum_to_its_rise(node: tuple[AttributedNode, Sampler]) -> None:
    """Containers + idle + unattributed, as the collector serves them, = the card's rise.

    Card 1 is shared by two pods and a host process: without the host's share
    (the card's unattributed energy) its parts fall short of its rise.
    """
    simulated, sampler = node
    payloads = snapshots(simulated, sampler, 8)
    first = {card.uuid: card.energy for card in payloads[0].cards}
    series = series_of(payloads[-1], directory(simulated))
    for card in simulated.nvml.cards:
        uuids = {labelsets.device_uuid(card.uuid)} | {
            labelsets.device_uuid(m.uuid) for m in card.mig if m is not None
        }
        containers = sum(
            value
            for (name, labels), value in series.items()
            if name == schema.CONTAINER_ENERGY and dict(labels)["device_uuid"] in uuids
        )
        host = _card_series(series, schema.UNATTRIBUTED_ENERGY, card.uuid)
        idle = _card_series(series, schema.IDLE_ENERGY, card.uuid)
        rise = _card_series(series, schema.ENERGY, card.uuid) - (first[card.uuid] or 0.0)
        assert rise > 0
        assert math.isclose(containers + idle + host, rise, rel_tol=1e-9), card.uuid
        if card is simulated.nvml.cards[HOST_CARD]:
            assert host > 0
            assert containers + idle < rise * (1 - 1e-6)  # what the collector served before
        else:
            assert host == 0


def _card_series(series: SeriesMap, family: str, uuid: str) -> float:
    (value,) = [
        v
        for (name, labels), v in series.items()
        if name == family and dict(labels)["device_uuid"] == labelsets.device_uuid(uuid)
    ]
    return value
