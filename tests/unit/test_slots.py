"""agent.slots: whether each HAMi-core slot's process is gone, on real files.

Each case is a region written by the simulator's writer (HAMi-core's layout,
checked against the reference's byte offsets in test_hamicore.py) and a
``/proc`` tree in the kernel's formats (checked against this machine's kernel
in test_procfs.py); the agent's own scan reads them through the checker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from pathlib import Path

import pytest

from agent.cgroups import Owner
from agent.hamicore import RegionUsage
from agent.region_scan import RegionKey, Scan, scan
from agent.slots import SlotChecker
from simulator.attributed import ProcTree
from simulator.regions import ProcSlot, RegionSpec, write_region

GIB = 1 << 30
POD = "5d2c7a1e-0b3f-4c6d-9e8f-1a2b3c4d5e6f"
OTHER_POD = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
CTR = "c" * 64
NEW_CTR = "d" * 64
SIDECAR = "e" * 64
KEY: RegionKey = ("pod", POD, "main")


def cgroup(pod: str = POD, container: str = CTR) -> str:
    """A burstable pod's container under the systemd driver, as a v2 kubelet writes it."""
    slice_ = f"kubepods-burstable-pod{pod.replace('-', '_')}.slice"
    return (
        f"0::/kubepods.slice/kubepods-burstable.slice/{slice_}/cri-containerd-{container}.scope\n"
    )


def slot(pid: int, hostpid: int, memory: int, sm: int = 0, status: int = 1) -> ProcSlot:
    return ProcSlot(
        pid=pid,
        hostpid=hostpid,
        used=[(0, 0, memory, 0, memory)],
        device_util=[(0, 0, sm)],
        status=status,
    )


class Node:
    """A region folder and a /proc tree side by side, read as the agent reads them."""

    def __init__(self, root: Path) -> None:
        self.proc = ProcTree(root / "proc")
        self.regions = root / "vgpu"
        self.checker = SlotChecker(self.proc.root)

    def region(self, *slots: ProcSlot, key: RegionKey = KEY) -> Path:
        folder = f"{key[1]}_{key[2]}" if key[0] == "pod" else key[1]
        kind = "containers" if key[0] == "pod" else "claims"
        path = self.regions / kind / folder / "r.cache"
        write_region(path, RegionSpec(uuids=["GPU-a"], limits=[40 * GIB], procs=slots))
        return path

    def read(self, running: Collection[int] = ()) -> tuple[Scan, dict[RegionKey, frozenset[Owner]]]:
        tick = self.checker.tick(running)
        found = scan([self.regions], judges=tick.judge)
        tick.finish()
        return found, {key: tick.owners(key) for key in found.regions}

    def usage(self, running: Collection[int] = (), key: RegionKey = KEY) -> RegionUsage:
        return self.read(running)[0].regions[key]


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def memory(region: RegionUsage) -> tuple[int, int | None]:
    (device,) = region.devices
    return device.memory_used, device.stale_memory


def test_a_sigkilled_process_s_slot_is_gone_and_its_memory_left_out(node: Node) -> None:
    node.proc.add(4501, "python3", cgroup(), nspid=(4501, 7))
    node.region(slot(7, 4501, 18 * GIB, sm=40), slot(23, 4503, 6 * GIB, sm=55))
    region = node.usage()
    assert memory(region) == (18 * GIB, 6 * GIB)
    assert region.devices[0].sm_utilization == 40.0  # the gone slot's frozen utilisation too
    assert (region.processes, region.stale, region.unchecked) == (1, 1, 0)


def test_killing_the_last_process_leaves_nothing_counted(node: Node) -> None:
    node.proc.add(4501, "python3", cgroup(), nspid=(4501, 7))
    node.region(slot(7, 4501, 18 * GIB, sm=40))
    assert memory(node.usage()) == (18 * GIB, 0)
    node.proc.remove(4501)  # SIGKILL: HAMi-core's exit handler never runs, the slot stays
    region = node.usage()
    assert memory(region) == (0, 18 * GIB)
    assert region.devices[0].sm_utilization == 0.0


def test_a_zombie_is_gone(node: Node) -> None:
    node.proc.add(4501, "python3", cgroup(), nspid=(4501, 7), state="Z")
    node.region(slot(7, 4501, GIB))
    assert memory(node.usage()) == (0, GIB)


@pytest.mark.parametrize(
    ("what", "cgroup_text", "nspid"),
    [
        ("another pod's process", cgroup(OTHER_POD), (4501, 7)),
        ("a host process", "0::/user.slice/user-1000.slice/session-4.scope\n", (4501,)),
        ("another PID in the container", cgroup(), (4501, 9)),
    ],
)
def test_a_reused_host_pid_is_gone(
    node: Node, what: str, cgroup_text: str, nspid: tuple[int, ...]
) -> None:
    node.proc.add(4501, "bash", cgroup_text, nspid=nspid)
    node.region(slot(7, 4501, GIB))
    assert memory(node.usage()) == (0, GIB), what


def test_a_new_start_time_after_first_sight_is_gone(node: Node) -> None:
    node.proc.add(4501, "python3", cgroup(), nspid=(4501, 7), starttime=5000)
    node.region(slot(7, 4501, GIB))
    assert memory(node.usage()) == (GIB, 0)
    # the process died and the kernel gave its PID to a new one with the same namespace PID
    node.proc.add(4501, "python3", cgroup(), nspid=(4501, 7), starttime=9000)
    assert memory(node.usage()) == (0, GIB)


def test_start_times_are_kept_only_for_the_slots_of_the_latest_snapshot(node: Node) -> None:
    node.proc.add(4501, "python3", cgroup(), nspid=(4501, 7), starttime=5000)
    path = node.region(slot(7, 4501, GIB))
    node.usage()
    assert list(node.checker.starts) == [(path, 7, 4501)]
    node.region(slot(8, 4501, GIB))
    node.usage()
    assert list(node.checker.starts) == []  # NSpid 7 is not 8: gone, and nothing remembered


def test_a_slot_without_host_pid_is_found_among_its_pod_s_processes(node: Node) -> None:
    node.proc.add(4501, "python3", cgroup(), nspid=(4501, 7))
    node.proc.add(4502, "python3", cgroup(), nspid=(4502, 31))  # a forked worker
    node.proc.add(4600, "python3", cgroup(OTHER_POD), nspid=(4600, 40))
    node.region(slot(7, 4501, 4 * GIB), slot(31, 0, 2 * GIB), slot(40, 0, GIB))
    region = node.usage()
    assert memory(region) == (6 * GIB, GIB)  # PID 40 runs, but in another pod
    found, owners = node.read()
    assert owners[KEY] == {Owner(POD, CTR)}
    assert found.regions[KEY].stale == 1


def test_a_sibling_container_s_process_does_not_keep_a_slot(node: Node) -> None:
    node.proc.add(4501, "python3", cgroup(), nspid=(4501, 7))
    node.proc.add(4700, "envoy", cgroup(container=SIDECAR), nspid=(4700, 31))
    node.region(slot(7, 4501, 4 * GIB), slot(31, 0, 2 * GIB))
    # the region's other slot names its container: the sidecar's PID 31 is not its
    assert memory(node.usage()) == (4 * GIB, 2 * GIB)


def test_a_restarted_container_s_old_slots_are_gone(node: Node) -> None:
    node.proc.add(4501, "python3", cgroup(), nspid=(4501, 1), starttime=5000)
    node.region(slot(1, 0, 3 * GIB))
    assert memory(node.usage()) == (3 * GIB, 0)
    # the container restarts: same folder and file, a new container ID, PIDs from 1 again
    node.proc.remove(4501)
    node.proc.add(4800, "python3", cgroup(container=NEW_CTR), nspid=(4800, 1), starttime=7000)
    assert memory(node.usage()) == (0, 3 * GIB)


def test_a_pod_without_processes_on_the_host_has_only_gone_slots(node: Node) -> None:
    node.region(slot(7, 0, GIB))
    assert memory(node.usage()) == (0, GIB)


def test_a_process_nvml_lists_is_not_gone_whatever_proc_shows(node: Node) -> None:
    node.region(slot(7, 4501, GIB))
    region = node.usage(running={4501})
    assert memory(region) == (GIB, 0)
    assert (region.stale, region.unchecked) == (0, 1)


def test_a_claim_region_is_checked_by_host_pid_only(node: Node) -> None:
    claim: RegionKey = ("claim", "0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6")
    node.proc.add(4501, "python3", cgroup(OTHER_POD), nspid=(4501, 7))  # its pod is unknown here
    node.region(slot(7, 4501, GIB), slot(9, 0, GIB), slot(11, 4999, GIB), key=claim)
    region = node.usage(key=claim)
    assert memory(region) == (2 * GIB, GIB)
    assert (region.processes, region.stale, region.unchecked) == (2, 1, 1)


def test_slots_upstream_skips_are_not_judged_and_pid_zero_is_gone(node: Node) -> None:
    node.proc.add(4501, "python3", cgroup(), nspid=(4501, 7))
    node.region(slot(7, 4501, GIB), slot(8, 4502, 5 * GIB, status=0), slot(0, 0, 2 * GIB))
    region = node.usage()
    assert memory(region) == (GIB, 2 * GIB)  # the exited slot is nobody's: neither used nor stale
    assert (region.processes, region.stale, region.unchecked) == (1, 1, 0)


@pytest.mark.parametrize("kind", ["missing", "container's own"])
def test_without_the_host_s_proc_every_slot_counts_as_upstream_counts_it(
    node: Node, tmp_path: Path, kind: str
) -> None:
    proc = tmp_path / "not-mounted"
    if kind == "container's own":
        ProcTree(proc).add(2, "sh", cgroup())  # PID 2 of a container, not kthreadd
    node.checker = SlotChecker(proc)
    node.region(slot(7, 4501, GIB), slot(9, 0, 2 * GIB))
    region = node.usage()
    assert memory(region) == (3 * GIB, None)  # not 0: nothing was checked
    assert (region.processes, region.stale, region.unchecked) == (2, 0, 2)


def test_reading_and_judging_never_write_the_region(node: Node) -> None:
    node.proc.add(4501, "python3", cgroup(), nspid=(4501, 7))
    path = node.region(slot(7, 4501, GIB), slot(23, 4503, GIB), slot(31, 0, GIB))
    before = (hashlib.sha256(path.read_bytes()).digest(), path.stat().st_mtime_ns)
    for _ in range(3):
        node.read()
    assert (hashlib.sha256(path.read_bytes()).digest(), path.stat().st_mtime_ns) == before
