"""Whether a HAMi-core slot's process is gone, from the host's ``/proc``.

HAMi-core clears a slot only when its process exits normally. A SIGKILLed,
OOM-killed or crashed process leaves ``status = 1`` and all its memory in the
region until another CUDA process of the same container compacts it, which may
never happen (HAMi#2310); HAMi's monitor never checks. Each slot's process is
checked here instead, reading only, in this order (the first failed check
decides):

1. ``pid == 0``: gone (HAMi-core writes it at a normal exit).
2. ``hostpid != 0`` (HAMi-core found the process's host PID at start):
   ``<host-proc>/<hostpid>/stat`` exists and its state is not ``Z``/``X``; its
   ``cgroup`` names no other pod than the region folder's; its ``NSpid``'s
   last value is the slot's ``pid`` (the process's own PID in its container);
   its start time (``stat`` field 22) is the one first seen for this file, PID
   and host PID. A PID the kernel reused for another process fails the last
   three, and so does a slot left by an earlier run of a restarted container
   (same folder, new container ID and PID namespace, PIDs from 1 again).
3. ``hostpid == 0`` (detection failed): the processes whose cgroup names the
   folder's pod (and its container, when other slots of the region named it),
   found by one pass over ``<host-proc>/*/cgroup`` per snapshot, are searched
   for one whose ``NSpid``'s last value is the slot's ``pid``; none, or none
   with the start time first seen, is gone.

A check that cannot be made (the file unreadable for another reason than the
process's exit, a kernel without ``NSpid`` for step 3, a claim's region, whose
folder names no pod, for step 3) leaves the slot ``unchecked``: it counts, as
HAMi's monitor counts it. So does a host PID missing from ``/proc`` that NVML
lists as running: it holds a context, so it is not gone, and this ``/proc`` is
not showing it (``hidepid``, or not the host's). Without a usable ``/proc``
(nothing mounted at ``--host-proc``, a container's own procfs rather than the
host's, ``hidepid``: :meth:`agent.procfs.HostProc.unusable`) every slot is
``unchecked``, and the reason is logged once.

What a process's start time was when it was first seen is kept from one
snapshot to the next, for the slots seen in the latest snapshot only.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.cgroups import Owner, owner
from agent.hamicore import Slot, SlotJudge, Verdict
from agent.procfs import GONE_STATES, Gone, HostProc, Stat
from agent.region_scan import RegionKey

log = logging.getLogger(__name__)

_Seen = tuple[Path, int, int]
"""(region file, slot pid, slot hostpid): whose start time is remembered."""


class SlotChecker:
    """Judges HAMi-core slots against ``host_proc``; one :meth:`tick` per snapshot."""

    def __init__(self, host_proc: Path) -> None:
        """``host_proc``: the host's /proc as mounted in the agent (``--host-proc``)."""
        self.proc = HostProc(host_proc)
        self.starts: dict[_Seen, frozenset[int]] = {}
        """Start times first seen, for the slots of the latest snapshot."""
        self._unusable: str | None = ""

    def tick(self, running: Collection[int] = ()) -> SlotTick:
        """The judges of one snapshot; ``running``: the host PIDs NVML lists now.

        Call :meth:`SlotTick.finish` when the snapshot's regions are read.
        """
        unusable = self.proc.unusable()
        if unusable != self._unusable:
            self._unusable = unusable
            if unusable is None:
                log.info("checking HAMi-core slots' processes in %s", self.proc.root)
            else:
                log.warning(
                    "host /proc %s: %s; HAMi-core slots are not checked, a slot counts while its"
                    " status says running, as HAMi's monitor counts it",
                    self.proc.root,
                    unusable,
                )
        return SlotTick(self, unusable is None, frozenset(running))


@dataclass(frozen=True, slots=True)
class _Member:
    """A process of a pod, found by the per-snapshot pass over every cgroup file."""

    hostpid: int
    owner: Owner


class SlotTick:
    """One snapshot's judging: its caches and the owners of its live slots."""

    def __init__(self, checker: SlotChecker, usable: bool, running: frozenset[int]) -> None:
        """``usable``: whether the host's /proc can be read; ``running``: NVML's host PIDs now."""
        self._checker = checker
        self._proc = checker.proc
        self.usable = usable
        self._running = running
        self._owners: dict[RegionKey, set[Owner]] = {}
        self._starts: dict[_Seen, frozenset[int]] = {}
        self._members: dict[str, list[_Member]] | None = None
        self._stats: dict[int, Stat | None] = {}
        self._nspids: dict[int, list[int] | None] = {}

    def judge(self, key: RegionKey, path: Path) -> SlotJudge | None:
        """The judge of the region ``key`` read from ``path``; None without a usable /proc
        (the region is then read as upstream reads it, every slot unchecked)."""
        if not self.usable:
            return None

        def judged(slots: Sequence[Slot]) -> list[Verdict]:
            return self._region(key, path, slots)

        return judged

    def owners(self, key: RegionKey) -> frozenset[Owner]:
        """The pods' containers (pod UID, container ID) of the region's live slots' processes."""
        return frozenset(self._owners.get(key, ()))

    def finish(self) -> None:
        """Keep the start times of the slots seen in this snapshot, forgetting the others."""
        if self.usable:
            self._checker.starts = self._starts

    # -- one region ----------------------------------------------------------------------

    def _region(self, key: RegionKey, path: Path, slots: Sequence[Slot]) -> list[Verdict]:
        pod = key[1] if key[0] == "pod" else None
        found = self._owners.setdefault(key, set())
        verdicts: list[Verdict | None] = [None] * len(slots)
        for i, slot in enumerate(slots):
            if slot.pid <= 0:
                verdicts[i] = "gone"
            elif slot.hostpid > 0:
                verdicts[i] = self._by_hostpid(path, pod, slot, found)
        containers = {who.container_id for who in found}
        container = next(iter(containers)) if len(containers) == 1 else None
        for i, slot in enumerate(slots):
            if verdicts[i] is None:
                verdicts[i] = self._by_scan(path, pod, container, slot, found)
        return [v or "unchecked" for v in verdicts]

    def _by_hostpid(self, path: Path, pod: str | None, slot: Slot, found: set[Owner]) -> Verdict:
        try:
            stat = self._proc.stat(slot.hostpid)
            if stat.state in GONE_STATES:
                return "gone"
            who = owner(self._proc.cgroup(slot.hostpid))
            nspid = self._proc.nspid(slot.hostpid)
        except Gone:
            return "unchecked" if slot.hostpid in self._running else "gone"
        except (OSError, ValueError):
            return "unchecked"
        if pod is not None and who is not None and who.pod_uid != pod:
            return "gone"
        if nspid and nspid[-1] != slot.pid:
            return "gone"
        if not self._same_start((path, slot.pid, slot.hostpid), frozenset({stat.starttime})):
            return "gone"
        if who is not None:
            found.add(who)
        return "live"

    def _by_scan(
        self, path: Path, pod: str | None, container: str | None, slot: Slot, found: set[Owner]
    ) -> Verdict:
        if pod is None:
            return "unchecked"
        members = [
            m
            for m in self._pod_members(pod)
            if container is None or m.owner.container_id == container
        ]
        starts: set[int] = set()
        owners: set[Owner] = set()
        compared = not members
        for member in members:
            nspid = self._nspid(member.hostpid)
            stat = self._stat(member.hostpid)
            if not nspid or stat is None:
                continue
            compared = True
            if nspid[-1] == slot.pid and stat.state not in GONE_STATES:
                starts.add(stat.starttime)
                owners.add(member.owner)
        if not starts:
            return "gone" if compared else "unchecked"
        if not self._same_start((path, slot.pid, slot.hostpid), frozenset(starts)):
            return "gone"
        found.update(owners)
        return "live"

    def _same_start(self, seen: _Seen, starts: frozenset[int]) -> bool:
        """Whether one of ``starts`` is the start time first seen for ``seen`` (remembered now if new)."""
        first = self._starts.get(seen) or self._checker.starts.get(seen)
        if first is None:
            self._starts[seen] = starts
            return True
        self._starts[seen] = first
        return bool(first & starts)

    # -- per-snapshot caches -----------------------------------------------------------------

    def _pod_members(self, pod: str) -> list[_Member]:
        """The processes whose cgroup names ``pod``, from one pass over every cgroup file."""
        if self._members is None:
            members: dict[str, list[_Member]] = {}
            for hostpid in self._proc.pids():
                try:
                    who = owner(self._proc.cgroup(hostpid))
                except (Gone, OSError):
                    continue
                if who is not None:
                    members.setdefault(who.pod_uid, []).append(_Member(hostpid, who))
            self._members = members
        return self._members.get(pod, [])

    def _stat(self, hostpid: int) -> Stat | None:
        if hostpid not in self._stats:
            try:
                self._stats[hostpid] = self._proc.stat(hostpid)
            except (Gone, OSError, ValueError):
                self._stats[hostpid] = None
        return self._stats[hostpid]

    def _nspid(self, hostpid: int) -> list[int] | None:
        if hostpid not in self._nspids:
            try:
                self._nspids[hostpid] = self._proc.nspid(hostpid)
            except (Gone, OSError):
                self._nspids[hostpid] = None
        return self._nspids[hostpid]
