"""A node whose pods HAMi's own monitor would get wrong: whole cards, time-sharing, MIG, a host
process on a shared card, and a vGPU pod whose HAMi-core region misleads.

Most of its pods got their GPUs from NVIDIA's device plugin, not from a vGPU
scheduler, so HAMi-core writes no region for them and only NVML's per-process
view and the kubelet's PodResources API tell who uses what. The demo runs the
real agent on it: a simulated NVML with processes on every card, a ``/proc``
tree (:class:`ProcTree`, the kernel's formats) whose cgroup files name each
process's pod and container in a different form of the kubelet's, a real
PodResources gRPC server (:mod:`simulator.kubelet`) and a HAMi-core region
folder (:attr:`AttributedNode.regions`).

- card 0: ``team-train/llm-train`` holds the whole card (``nvidia.com/gpu: 1``);
- card 1: ``team-serve/chat-a`` and ``chat-b`` time-share it (the plugin's
  replicas ``GPU-…::0`` and ``::1`` of one card), beside a process of no pod
  (someone's job started on the host): its share of the card's energy is the
  card's unattributed energy;
- card 2: MIG on, two ``3g.71gb`` instances; ``team-embed/embed`` holds the first
  (``nvidia.com/mig-3g.71gb: 1``);
- card 3: ``team-infer/vllm``, a HAMi vGPU (half the cores, 40 GiB) whose
  region has three slots: a live process HAMi-core found the host PID of, a
  live forked worker it did not (``hostpid`` 0), and a SIGKILLed process whose
  slot still says running and holds 6 GiB while the process is gone from
  ``/proc`` and NVML (HAMi#2310). Its utilisation watcher never started
  (HAMi#1864), so the region's SM utilisation is 0 while NVML has samples.
"""

from __future__ import annotations

import hashlib
import math
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

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
from simulator.regions import ProcSlot, RegionSpec, write_region

JSON = dict[str, Any]
MIG_PROFILE = "nvidia.com/mig-3g.71gb"
MIG_MEMORY = 71 * 1024 * MIB
HOST_PID = 7001
HOST_CARD = 1
"""The card the host process shares with ``chat-a`` and ``chat-b``."""
HOST_MEMORY = 12 << 30
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


VGPU = Workload(
    "team-infer",
    "vllm",
    "engine",
    "nvidia.com/gpu",
    3,
    4501,
    18 << 30,
    0.45,
    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{id}.scope\n",
)
"""The HAMi vGPU pod on card 3; its main process, whose host PID HAMi-core found."""
VGPU_LIMIT: Final = 40 << 30
VGPU_CORES: Final = 50


@dataclass(frozen=True, slots=True)
class VgpuProcess:
    """One process of the vGPU container: its host PID and the PID it has in the container."""

    pid: int
    ns_pid: int
    memory: int
    busy: float
    hostpid_found: bool
    """Whether HAMi-core found its host PID (the slot's ``hostpid``; else 0)."""


VGPU_PROCESSES: Sequence[VgpuProcess] = (
    VgpuProcess(VGPU.pid, 7, VGPU.memory, VGPU.busy, hostpid_found=True),
    VgpuProcess(4502, 31, 4 << 30, 0.1, hostpid_found=False),  # a forked worker
)
VGPU_KILLED = VgpuProcess(4503, 23, 6 << 30, 0.0, hostpid_found=True)
"""SIGKILLed: gone from /proc and NVML, its slot still ``status = 1`` with its memory."""
CLK_TCK: Final = 100
"""Clock ticks per second of ``stat``'s start time (the kernel's USER_HZ)."""


def _uuid(text: str) -> str:
    h = hashlib.sha256(text.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"


class AttributedNode:
    """The node: its simulated NVML, its ``/proc`` and its kubelet's answer, moved by :meth:`step`."""

    def __init__(self, name: str, proc: Path, seed: int = 0, regions: Path | None = None) -> None:
        """``proc``: where its ``/proc`` is written; ``regions``: its HAMi-core region root
        (``containers/`` under it), by default ``vgpu`` beside ``proc``."""
        self.name = name
        self.proc = proc
        self.regions = proc.parent / "vgpu" if regions is None else regions
        self.procs = ProcTree(proc)
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
        self._killed: set[int] = {VGPU_KILLED.pid}
        self._xids = 0
        self.kubelet = kubelet.Kubelet()
        self.kubelet.pods = [self._listed(w) for w in WORKLOADS]
        self._write_proc()
        self._write_region(0)

    @property
    def region_file(self) -> Path:
        """The vGPU container's HAMi-core region file."""
        return self.regions / "containers" / f"{VGPU.uid}_{VGPU.container}" / "0c9f.cache"

    def pods(self, started: float) -> list[JSON]:
        """The node's pods as the API serves them, with their container IDs."""
        card = self.nvml.cards[VGPU.card].uuid
        vgpu = {
            "hami.io/vgpu-node": self.name,
            "hami.io/vgpu-devices-allocated": f"{card},NVIDIA,{VGPU_LIMIT >> 20},{VGPU_CORES}:;",
        }
        return [_pod_object(self.name, w, started) for w in WORKLOADS] + [
            _pod_object(self.name, VGPU, started, vgpu)
        ]

    def kill(self, pid: int) -> None:
        """SIGKILL one of the node's processes: it leaves ``/proc`` and NVML, its slot stays."""
        self.procs.remove(pid)
        self._killed.add(pid)
        for card in self.nvml.cards:
            card.processes = [p for p in card.processes if p.pid != pid]
            for mig in card.mig:
                if mig is not None:
                    mig.processes = [p for p in mig.processes if p.pid != pid]

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
            if w.pid in self._killed:
                continue
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
        host = 0.2 + 0.1 * math.sin(now / 300.0)
        if HOST_PID not in self._killed:
            self.nvml.cards[HOST_CARD].processes.append(
                SimulatedProcess(HOST_PID, HOST_MEMORY, "compute", [(stamp, round(100 * host))])
            )
            busy[HOST_CARD] += host
        for p in VGPU_PROCESSES:
            if p.pid not in self._killed:
                load = p.busy * (0.8 + 0.2 * math.sin(now / 61.0 + p.pid))
                self.nvml.cards[VGPU.card].processes.append(
                    SimulatedProcess(p.pid, p.memory, "compute", [(stamp, round(100 * load))])
                )
                busy[VGPU.card] += load
        self._write_region(int(now))
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
            self.procs.add(w.pid, "python3", _cgroup(w), nspid=(w.pid, 1))
        for p in VGPU_PROCESSES:
            self.procs.add(p.pid, "python3", _cgroup(VGPU), nspid=(p.pid, p.ns_pid))
        self.procs.add(HOST_PID, "train.py", "0::/user.slice/user-1000.slice/session-4.scope\n")

    def _write_region(self, last_kernel: int) -> None:
        """HAMi-core's region of the vGPU container: its watcher never ran, so no utilisation."""
        slots = [
            ProcSlot(
                pid=p.ns_pid,
                hostpid=p.pid if p.hostpid_found else 0,
                used=[(300 << 20, 100 << 20, p.memory - (400 << 20), 0, p.memory)],
                device_util=[(0, 0, 0)],
            )
            for p in (VGPU_PROCESSES[0], VGPU_KILLED, *VGPU_PROCESSES[1:])
        ]
        write_region(
            self.region_file,
            RegionSpec(
                uuids=[self.nvml.cards[VGPU.card].uuid],
                limits=[VGPU_LIMIT],
                sm_limits=[VGPU_CORES],
                procs=slots,
                last_kernel_time=last_kernel,
            ),
        )


def _cgroup(w: Workload) -> str:
    return w.cgroup.format(uid=w.uid, uid_=w.uid.replace("-", "_"), id=w.container_id)


class ProcTree:
    """A host's ``/proc`` as files: ``<root>/<pid>/{stat,status,cgroup}`` in the kernel's formats.

    ``stat`` is written as ``fs/proc/array.c`` (``do_task_stat``) writes it: 52
    fields, the comm in parentheses as the process named itself (spaces and
    parentheses included); ``status`` has the lines of ``proc_pid_status(5)``
    up to ``NSsid``, the namespace PIDs outermost first. PID 1 (``systemd``) and
    PID 2 (``kthreadd``, found only in the host's PID namespace) are there from
    the start, as on a host.
    """

    def __init__(self, root: Path) -> None:
        """Start the tree at ``root`` with the host's PIDs 1 and 2."""
        self.root = root
        self._ticks = 1000
        self.add(1, "systemd", "0::/init.scope\n", ppid=0)
        self.add(2, "kthreadd", "0::/\n", ppid=0)

    def add(
        self,
        pid: int,
        comm: str,
        cgroup: str,
        *,
        nspid: Sequence[int] = (),
        state: str = "S",
        starttime: int | None = None,
        ppid: int = 1,
    ) -> int:
        """Write one process (``nspid`` defaults to ``(pid,)``); return its start time, in ticks
        after boot (by default each process starts one tick after the previous one)."""
        if starttime is None:
            self._ticks += 1
            starttime = self._ticks
        folder = self.root / str(pid)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "stat").write_text(_stat_line(pid, comm, state, ppid, starttime))
        (folder / "status").write_text(_status_text(pid, comm, state, ppid, nspid or (pid,)))
        (folder / "cgroup").write_text(cgroup)
        return starttime

    def remove(self, pid: int) -> None:
        """The process has exited and been reaped: its folder goes."""
        shutil.rmtree(self.root / str(pid), ignore_errors=True)


_STATE_NAMES: Final = {
    "R": "running",
    "S": "sleeping",
    "D": "disk sleep",
    "T": "stopped",
    "t": "tracing stop",
    "Z": "zombie",
    "X": "dead",
}


def _stat_line(pid: int, comm: str, state: str, ppid: int, starttime: int) -> str:
    # pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority nice num_threads itrealvalue starttime vsize rss
    # rsslim startcode endcode startstack kstkesp kstkeip signal blocked sigignore sigcatch
    # wchan nswap cnswap exit_signal processor rt_priority policy delayacct_blkio_ticks
    # guest_time cguest_time start_data end_data start_brk arg_start arg_end env_start
    # env_end exit_code
    fields = [
        *(ppid, pid, pid, 0, -1, 4194560, 1523, 0, 0, 0, 12, 3, 0, 0, 20, 0, 1, 0),
        *(starttime, 8429568, 412, 18446744073709551615, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
        *(0, 0, 17, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    ]
    return f"{pid} ({comm}) {state} {' '.join(map(str, fields))}\n"


def _status_text(pid: int, comm: str, state: str, ppid: int, nspid: Sequence[int]) -> str:
    inner = "\t".join(map(str, nspid))
    return (
        f"Name:\t{comm}\nUmask:\t0022\nState:\t{state} ({_STATE_NAMES.get(state, state)})\n"
        f"Tgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t{ppid}\nTracerPid:\t0\n"
        "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t\n"
        f"NStgid:\t{inner}\nNSpid:\t{inner}\nNSpgid:\t{inner}\nNSsid:\t{inner}\n"
        "VmPeak:\t   12345 kB\nThreads:\t1\n"
    )


def _pod_object(
    node: str, w: Workload, started: float, annotations: dict[str, str] | None = None
) -> JSON:
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
            "annotations": dict(annotations or {}),
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
