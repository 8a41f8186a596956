"""A node that no isolator reports on: whole cards, time-sharing, MIG and a host process.

Its pods got their GPUs from NVIDIA's device plugin, not from a vGPU scheduler,
so HAMi-core writes no region for them and only NVML's per-process view and
the kubelet's PodResources API tell who uses what. The demo runs the real agent
on it: a simulated NVML with processes on every card, a ``/proc`` tree whose
cgroup files name each process's pod and container in a different form of the
kubelet's, and a real PodResources gRPC server (:mod:`simulator.kubelet`).

- card 0: ``team-train/llm-train`` holds the whole card (``nvidia.com/gpu: 1``);
- card 1: ``team-serve/chat-a`` and ``chat-b`` time-share it (the plugin's
  replicas ``GPU-…::0`` and ``::1`` of one card);
- card 2: MIG on, two ``3g.71gb`` instances; ``team-embed/embed`` holds the first
  (``nvidia.com/mig-3g.71gb: 1``);
- card 3: a process of no pod (someone's job started on the host).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from simulator import kubelet
from simulator.nvml import (
    H200_MEMORY,
    H200_POWER_LIMIT_MW,
    IDLE_POWER_MW,
    MIB,
    SimulatedCard,
    SimulatedMig,
    SimulatedNvml,
    SimulatedProcess,
    fake_uuid,
)

JSON = dict[str, Any]
MIG_PROFILE = "nvidia.com/mig-3g.71gb"
MIG_MEMORY = 71 * 1024 * MIB
HOST_PID = 7001
XID_PERIOD_S = 600
"""A simulated XID 31 (a page fault of an application) every ten minutes on card 1."""


@dataclass(frozen=True, slots=True)
class Workload:
    """One container's process on one device of the node."""

    namespace: str
    pod: str
    container: str
    resource: str
    card: int
    pid: int
    memory: int
    busy: float
    cgroup: str
    """The cgroup file's text, in one of the kubelet's forms ({uid} and {id} filled in)."""
    mig_slot: int | None = None
    replica: int | None = None

    @property
    def uid(self) -> str:
        """The pod's UID: a function of its name."""
        return str(_uuid(f"pod|{self.namespace}/{self.pod}"))

    @property
    def container_id(self) -> str:
        """The runtime's container ID: 64 hex characters."""
        return hashlib.sha256(
            f"ctr|{self.namespace}/{self.pod}/{self.container}".encode()
        ).hexdigest()


WORKLOADS: Sequence[Workload] = (
    Workload(
        "team-train",
        "llm-train",
        "trainer",
        "nvidia.com/gpu",
        0,
        4101,
        96 << 30,
        0.85,
        "0::/kubepods.slice/kubepods-pod{uid_}.slice/cri-containerd-{id}.scope\n",
    ),
    Workload(
        "team-serve",
        "chat-a",
        "server",
        "nvidia.com/gpu",
        1,
        4201,
        30 << 30,
        0.35,
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/crio-{id}.scope\n",
        replica=0,
    ),
    Workload(
        "team-serve",
        "chat-b",
        "server",
        "nvidia.com/gpu",
        1,
        4301,
        22 << 30,
        0.25,
        "12:memory:/kubepods/burstable/pod{uid}/{id}\n11:cpu,cpuacct:/kubepods/burstable/pod{uid}/{id}\n",
        replica=1,
    ),
    Workload(
        "team-embed",
        "embed",
        "worker",
        MIG_PROFILE,
        2,
        4401,
        40 << 30,
        0.0,
        "0::/kubepods/besteffort/pod{uid}/{id}\n",
        mig_slot=0,
    ),
)


def _uuid(text: str) -> str:
    h = hashlib.sha256(text.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"


class AttributedNode:
    """The node: its simulated NVML, its ``/proc`` and its kubelet's answer, moved by :meth:`step`."""

    def __init__(self, name: str, proc: Path, seed: int = 0) -> None:
        self.name = name
        self.proc = proc
        rng = random.Random(f"attributed|{seed}|{name}")
        self.nvml = SimulatedNvml(
            [SimulatedCard(uuid=fake_uuid(rng), name="NVIDIA H200") for _ in range(4)]
        )
        mig_card = self.nvml.cards[2]
        mig_card.mig = [
            SimulatedMig(
                uuid="MIG-" + _uuid(f"mig|{name}|{slot}"),
                gpu_instance_id=slot + 1,
                slices=3,
                memory_total=MIG_MEMORY,
            )
            for slot in range(2)
        ]
        self._stepped: float | None = None
        self._xids = 0
        self.kubelet = kubelet.Kubelet()
        self.kubelet.pods = [self._listed(w) for w in WORKLOADS]
        self._write_proc()

    def pods(self, started: float) -> list[JSON]:
        """The node's pods as the API serves them, with their container IDs."""
        return [_pod_object(self.name, w, started) for w in WORKLOADS]

    def step(self, now: float) -> None:
        """Move every process's utilisation and memory to ``now``, and the cards with them."""
        dt = 0.0 if self._stepped is None else max(0.0, now - self._stepped)
        self._stepped = now
        stamp = int(now * 1e6)
        busy = [0.0] * len(self.nvml.cards)
        for card in self.nvml.cards:
            card.processes = []
        for mig in self.nvml.cards[2].mig:
            if mig is not None:
                mig.processes, mig.memory_used = [], 0
        for w in WORKLOADS:
            load = min(1.0, w.busy * (0.8 + 0.2 * math.sin(now / 97.0 + w.pid)))
            process = SimulatedProcess(w.pid, w.memory, "compute", [(stamp, round(100 * load))])
            if w.mig_slot is not None:
                mig = self.nvml.cards[w.card].mig[w.mig_slot]
                assert mig is not None
                mig.processes = [process]
                mig.memory_used = w.memory
            else:
                self.nvml.cards[w.card].processes.append(process)
            busy[w.card] += load
        host = 0.5 + 0.4 * math.sin(now / 300.0)
        self.nvml.cards[3].processes = [
            SimulatedProcess(HOST_PID, 12 << 30, "compute", [(stamp, round(100 * host))])
        ]
        busy[3] = host
        for index, card in enumerate(self.nvml.cards):
            load = min(1.0, busy[index])
            used = sum(p.used_memory or 0 for p in card.processes)
            used += sum(m.memory_used for m in card.mig if m is not None)
            card.memory_used = min(H200_MEMORY, used + 600 * MIB)
            card.utilization = round(100 * load)
            card.memory_utilization = round(60 * load)
            card.temperature = round(32 + 50 * load)
            card.power_mw = round(IDLE_POWER_MW + (H200_POWER_LIMIT_MW - IDLE_POWER_MW) * load)
            card.energy_mj += round(card.power_mw * dt)
            card.clock_events = 0x4 if load > 0.8 else (0x1 if load < 0.05 else 0)
        if self.nvml.cards[0].temperature > 72:
            self.nvml.cards[0].clock_events |= 0x20
        due = int(now // XID_PERIOD_S)
        if self._xids < due:
            self._xids = due
            self.nvml.post_xid(1, 31)

    def _listed(self, w: Workload) -> kubelet.PodResources:
        card = self.nvml.cards[w.card]
        if w.mig_slot is not None:
            mig = card.mig[w.mig_slot]
            assert mig is not None
            device = mig.uuid
        elif w.replica is not None:
            device = f"{card.uuid}::{w.replica}"
        else:
            device = card.uuid
        listed = kubelet.container(w.container, kubelet.devices(w.resource, device))
        return kubelet.pod(w.namespace, w.pod, listed)

    def _write_proc(self) -> None:
        for w in WORKLOADS:
            text = w.cgroup.format(uid=w.uid, uid_=w.uid.replace("-", "_"), id=w.container_id)
            _write(self.proc / str(w.pid) / "cgroup", text)
        _write(
            self.proc / str(HOST_PID) / "cgroup", "0::/user.slice/user-1000.slice/session-4.scope\n"
        )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _pod_object(node: str, w: Workload, started: float) -> JSON:
    stamp = datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resource = "nvidia.com/gpu" if w.resource == "nvidia.com/gpu" else w.resource
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": w.pod,
            "namespace": w.namespace,
            "uid": w.uid,
            "labels": {},
            "annotations": {},
            "creationTimestamp": stamp,
            "resourceVersion": "",
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": w.container, "image": "cuda", "resources": {"limits": {resource: "1"}}}
            ],
        },
        "status": {
            "phase": "Running",
            "startTime": stamp,
            "containerStatuses": [
                {"name": w.container, "containerID": f"containerd://{w.container_id}"}
            ],
        },
    }
