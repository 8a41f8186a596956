"""A busy GPU node for the real agent with per-process attribution on: 8 cards x 64 processes.

``python -m bench.fleet.agentnode --root DIR --collector URL --interval S --listen ADDR``
runs the real agent (:func:`agent.app.serve`, with :class:`~agent.settings.AgentSettings`
for processes on, ``host_proc`` = ``DIR/proc``, ``roots`` = ``DIR/regions`` and
``pod_resources_socket`` in a short ``/tmp`` folder) until SIGTERM or SIGINT, with:

- ``nvml_module`` = :class:`BusyNvml`, a :class:`simulator.nvml.SimulatedNvml` of
  :data:`CARDS` cards, each with :data:`PER_CARD` processes (512 unique PIDs; the
  :data:`CONTAINERS` containers have :data:`PROCESSES_PER_CONTAINER` processes each,
  one on each card, as ranks of a training job are placed; :data:`MEMORY` bytes each),
  whose ``nvmlDeviceGetProcessUtilization`` gives one fresh sample per process at every
  call (timestamp = now in µs), so every read has new samples to parse, as a busy
  node's NVML does, and whose energy counter moves with the wall clock;
- a :class:`simulator.kubelet.KubeletServer` in the same process, listing the 64 pods'
  containers and the cards each holds (a real PodResources gRPC server on a unix socket);
- the fake ``/proc`` tree, one ``cgroup`` file a PID in the systemd driver's form
  (``0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/
  cri-containerd-<64 hex>.scope``), written before the agent starts; ``DIR/regions``
  holds HAMi-core's 64 regions (written here with :func:`bench.fleet.agent.write_node`
  when absent).

Limits of what this measures, named in the results:

- the simulated NVML is Python; a real driver's calls are ioctls through ctypes.
  Which costs more per call is not known here;
- the kubelet server runs inside the agent's process, so its CPU and memory are
  counted against the agent: an over-estimate. ``--kubelet-socket PATH`` makes the
  agent read a server elsewhere instead, and ``--serve-kubelet PATH`` runs only that
  server (same pods, same cards), so the bench measures the two apart as well.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agent.app import serve
from agent.settings import AgentSettings
from core import logs
from simulator import kubelet
from simulator.nvml import (
    MIB,
    FakeHandle,
    FakeProcessUtilization,
    SimulatedCard,
    SimulatedNvml,
    SimulatedProcess,
    fake_uuid,
)

CARDS: Final = 8
PER_CARD: Final = 64
"""Processes on each card."""
CONTAINERS: Final = 64
PROCESSES_PER_CONTAINER: Final = CARDS
"""One process of each container on each card: 64 x 8 = 512 processes, 64 a card."""
MEMORY: Final = 2 << 30
"""Bytes of card memory each process holds (fixed)."""
BASE_PID: Final = 100_000
POWER_MW: Final = 450_000
SEED: Final = 7
RESOURCE: Final = "nvidia.com/gpu"
NODE: Final = "bench-node"
BOUND: Final = 10.0
"""Seconds any wait here may take."""


@dataclass(frozen=True, slots=True)
class Member:
    """One container of the node: its pod and runtime IDs and its processes' PIDs (one a card)."""

    index: int

    @property
    def namespace(self) -> str:
        return f"team-{self.index % 8}"

    @property
    def pod(self) -> str:
        return f"train-{self.index:02d}"

    @property
    def container(self) -> str:
        return "worker"

    @property
    def uid(self) -> str:
        h = hashlib.sha256(f"pod|{self.namespace}/{self.pod}".encode()).hexdigest()
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"

    @property
    def container_id(self) -> str:
        return hashlib.sha256(f"ctr|{self.namespace}/{self.pod}/worker".encode()).hexdigest()

    def pid(self, card: int) -> int:
        """The PID of this container's process on ``card``."""
        return BASE_PID + self.index * CARDS + card

    @property
    def cgroup(self) -> str:
        """The ``/proc/<pid>/cgroup`` text of each of its processes (systemd driver, cgroup v2)."""
        uid_ = self.uid.replace("-", "_")
        return (
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{uid_}.slice/cri-containerd-{self.container_id}.scope\n"
        )


MEMBERS: Final = tuple(Member(i) for i in range(CONTAINERS))


def sm_of(pid: int) -> int:
    """A process's fixed SM utilisation, 0-15 % (64 on a card sum to about 480: capped at 100)."""
    return pid * 37 % 16


class BusyNvml(SimulatedNvml):
    """:class:`SimulatedNvml` whose processes each have one sample newer than any read.

    ``nvmlDeviceGetProcessUtilization`` stamps every process of the card with now
    (µs) before answering, so each snapshot parses 64 fresh samples a card; the
    energy counter is power x wall time since the node was built.
    """

    def __init__(self) -> None:
        rng = random.Random(f"agentnode|{SEED}")
        cards = []
        for card in range(CARDS):
            processes = [
                SimulatedProcess(m.pid(card), MEMORY, "compute", [(0, sm_of(m.pid(card)))])
                for m in MEMBERS
            ]
            cards.append(
                SimulatedCard(
                    uuid=fake_uuid(rng),
                    memory_used=PER_CARD * MEMORY + 600 * MIB,
                    utilization=70,
                    memory_utilization=40,
                    temperature=64,
                    power_mw=POWER_MW,
                    processes=processes,
                )
            )
        super().__init__(cards, seed=SEED)
        self._born = time.monotonic()

    def nvmlDeviceGetProcessUtilization(
        self, handle: FakeHandle, last_seen: int
    ) -> list[FakeProcessUtilization]:
        """One sample per process, timestamped now, then the simulator's own answer."""
        if 0 <= handle.index < len(self.cards):
            now = time.time_ns() // 1000
            for p in self.cards[handle.index].processes:
                if isinstance(p, SimulatedProcess):
                    p.samples = [(now, sm_of(p.pid))]
        return super().nvmlDeviceGetProcessUtilization(handle, last_seen)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        """Millijoules: the card's power for the seconds since the node was built."""
        if 0 <= handle.index < len(self.cards):
            card = self.cards[handle.index]
            card.energy_mj = round(card.power_mw * (time.monotonic() - self._born))
        return super().nvmlDeviceGetTotalEnergyConsumption(handle)


def card_uuids() -> list[str]:
    """The cards' UUIDs, the same in every process (from :data:`SEED`)."""
    return [card.uuid for card in BusyNvml().cards]


def node_kubelet(uuids: Sequence[str]) -> kubelet.Kubelet:
    """The kubelet's answer: every container holds every card (one rank on each)."""
    answer = kubelet.Kubelet()
    answer.pods = [
        kubelet.pod(
            m.namespace, m.pod, kubelet.container(m.container, kubelet.devices(RESOURCE, *uuids))
        )
        for m in MEMBERS
    ]
    answer.allocatable = [kubelet.devices(RESOURCE, *uuids)]
    return answer


def write_proc(proc: Path) -> int:
    """One ``<proc>/<pid>/cgroup`` file for every process; returns how many were written."""
    written = 0
    for m in MEMBERS:
        for card in range(CARDS):
            folder = proc / str(m.pid(card))
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "cgroup").write_text(m.cgroup)
            written += 1
    return written


def prepare(root: Path) -> None:
    """The ``/proc`` tree, and the 64 regions when ``root/regions`` has none yet."""
    write_proc(root / "proc")
    if not (root / "regions").exists():
        from bench.fleet.agent import write_node  # here: that module imports this one

        write_node(root / "regions")


def settings_of(
    root: Path, collector: str, interval: float, listen: str, socket: str
) -> AgentSettings:
    """The agent's settings: NVML and processes on, the node's /proc, regions and kubelet socket."""
    return AgentSettings(
        collector=[collector],
        node=NODE,
        interval=interval,
        roots=[str(root / "regions")],
        nvml=True,
        processes=True,
        host_proc=root / "proc",
        pod_resources_socket=Path(socket),
        listen=listen,
        log_level="warning",
    )


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)


async def run_agent(
    root: Path, collector: str, interval: float, listen: str, socket: str | None
) -> None:
    """The real agent on the busy node until a signal; the kubelet in this process unless ``socket``."""
    stop = asyncio.Event()
    _stop_on_signals(stop)
    nvml = BusyNvml()
    with tempfile.TemporaryDirectory(prefix="agentnode-", dir="/tmp") as short:
        server = None
        if socket is None:  # a socket path has 108 bytes at most: a short folder
            socket = os.path.join(short, "kubelet.sock")
            server = kubelet.KubeletServer(socket, node_kubelet([c.uuid for c in nvml.cards]))
            server.start()
        try:
            await serve(settings_of(root, collector, interval, listen, socket), stop, nvml)
        finally:
            if server is not None:
                server.stop()


async def run_kubelet(socket: str) -> None:
    """Only the node's kubelet server on ``socket``, until a signal."""
    stop = asyncio.Event()
    _stop_on_signals(stop)
    server = kubelet.KubeletServer(socket, node_kubelet(card_uuids()))
    server.start()
    try:
        await stop.wait()
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the flags; serve the kubelet alone, or prepare the node and run the agent."""
    parser = argparse.ArgumentParser(prog="python -m bench.fleet.agentnode", description=__doc__)
    parser.add_argument("--root", type=Path, help="folder of proc/ and regions/")
    parser.add_argument("--collector", default="http://127.0.0.1:9396")
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument(
        "--kubelet-socket", help="read the kubelet server on this socket instead of one inside"
    )
    parser.add_argument("--serve-kubelet", metavar="SOCKET", help="run only the kubelet server")
    args = parser.parse_args(argv)
    logs.setup("text", "warning")
    if args.serve_kubelet:
        asyncio.run(run_kubelet(args.serve_kubelet))
        return
    if args.root is None:
        parser.error("--root is required to run the agent")
    prepare(args.root)
    asyncio.run(
        run_agent(args.root, args.collector, args.interval, args.listen, args.kubelet_socket)
    )


if __name__ == "__main__":
    main()
