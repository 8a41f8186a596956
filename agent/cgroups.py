"""Which pod's container a host process belongs to, from ``<host-proc>/<pid>/cgroup``.

NVML names processes by host PID only; the kubelet puts every container in a
cgroup whose path carries the pod UID and the container ID, so that path is the
one link from a PID to a pod that needs no API call. The forms read here:

- systemd driver: ``kubepods[-<qos>]-pod<UID, _ for ->.slice`` followed by
  ``cri-containerd-<id>.scope``, ``crio-<id>.scope`` or ``docker-<id>.scope``;
- cgroupfs driver: ``kubepods[/<qos>]/pod<UID>/<id>``;

where ``<qos>`` is ``burstable`` or ``besteffort`` and ``<id>`` is 64 hex
characters. The pair is looked for anywhere in the path, because nested
kubelets (kind, a kubelet in a container) prefix it with their own cgroups, and
because a reader in a private cgroup namespace (the containerd default on
cgroup v2) sees other pods' paths relative to its own, as ``/../../<pod>/<id>``.
When a path holds more than one pair, the innermost wins: it is the kubelet
nearest the process. A process without the pair belongs to no pod (a system
service, a user's shell), and so does crio's ``crio-conmon-<id>.scope``, which
is the runtime's monitor, not the container.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Final, NamedTuple

from agent.procfs import read_text

_QOS: Final = frozenset({"burstable", "besteffort"})
# Anchored at the start or after "-" so "kubelet-kubepods-..." (kind) matches
# and "notkubepods-..." does not; underscores stand for the UID's dashes.
_SYSTEMD_POD: Final = re.compile(
    r"(?:^|-)kubepods(?:-burstable|-besteffort)?-pod([0-9a-f][0-9a-f_]{0,63})\.slice\Z"
)
# "crio-conmon-<id>.scope" fails here: "conmon-" is not 64 hex characters.
_SYSTEMD_CONTAINER: Final = re.compile(r"(?:cri-containerd|crio|docker)-([0-9a-f]{64})\.scope")
_CGROUPFS_POD: Final = re.compile(r"pod([0-9a-f][0-9a-f-]{0,63})")
_CONTAINER_ID: Final = re.compile(r"[0-9a-f]{64}")


class Owner(NamedTuple):
    """The pod (UID with dashes, as the API server spells it) and container a process runs in."""

    pod_uid: str
    container_id: str


def owner(cgroup_text: str) -> Owner | None:
    """The owner named by a ``/proc/<pid>/cgroup`` text, or None for a process of no pod.

    Every line is tried (cgroup v1 has one per hierarchy, some of them for
    controllers the kubelet does not place, v2 has ``0::``); the first line
    naming a pod's container decides.
    """
    for line in cgroup_text.splitlines():
        fields = line.split(":", 2)
        if len(fields) == 3 and "pod" in fields[2]:
            found = _in_path(fields[2].split("/"))
            if found is not None:
                return found
    return None


def _in_path(parts: list[str]) -> Owner | None:
    """The innermost (pod, container) pair of adjacent path components, either driver's."""
    for i in range(len(parts) - 2, -1, -1):
        found = _systemd(parts[i], parts[i + 1]) or _cgroupfs(parts, i)
        if found is not None:
            return found
    return None


def _systemd(pod: str, container: str) -> Owner | None:
    if not pod.endswith(".slice") or not container.endswith(".scope"):
        return None
    pod_match = _SYSTEMD_POD.search(pod)
    container_match = _SYSTEMD_CONTAINER.fullmatch(container)
    if pod_match is None or container_match is None:
        return None
    return Owner(pod_match.group(1).replace("_", "-"), container_match.group(1))


def _cgroupfs(parts: list[str], i: int) -> Owner | None:
    pod_match = _CGROUPFS_POD.fullmatch(parts[i])
    if pod_match is None or _CONTAINER_ID.fullmatch(parts[i + 1]) is None:
        return None
    parent = i - 1
    if parent >= 0 and parts[parent] in _QOS:
        parent -= 1
    # ".." stands for a kubepods level hidden by the reader's cgroup namespace.
    if parent < 0 or parts[parent] not in ("kubepods", ".."):
        return None
    return Owner(pod_match.group(1), parts[i + 1])


class ProcOwners:
    """:func:`owner` for host PIDs, reading ``<host_proc>/<pid>/cgroup`` once per PID's life.

    A PID keeps its cgroup for its life, so a known owner is kept while the PID
    is in every asked set; a PID missing from one call is forgotten, so a PID
    the kernel reuses after its process exited is read afresh. A read that fails
    (any ``OSError``: the process is gone, it lives in a PID namespace the
    agent cannot see, the file is not a file) is counted in :attr:`unreadable`,
    left out of the answer and tried again at the next call, since it may have
    raced a process start or exit; an owner is never guessed.
    """

    def __init__(self, host_proc: Path) -> None:
        """``host_proc``: the host's /proc as mounted in the agent (``/proc`` with hostPID)."""
        self._host_proc = host_proc
        self._known: dict[int, Owner | None] = {}
        self.unreadable = 0
        """Reads that failed, cumulative."""
        self.reads = 0
        """Cgroup files opened, cumulative, failed ones included."""

    def owners(self, pids: Iterable[int]) -> dict[int, Owner | None]:
        """The owner of each readable PID of ``pids`` (None: no pod's); unreadable PIDs are not keys."""
        found: dict[int, Owner | None] = {}
        for pid in pids:
            if pid in found:
                continue
            if pid in self._known:
                found[pid] = self._known[pid]
                continue
            text = self._cgroup(pid)
            if text is not None:
                found[pid] = owner(text)
        self._known = found
        return dict(found)

    def _cgroup(self, pid: int) -> str | None:
        self.reads += 1
        try:
            return read_text(self._host_proc / str(pid) / "cgroup")
        except OSError:
            self.unreadable += 1
            return None
