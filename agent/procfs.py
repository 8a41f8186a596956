"""The host's ``/proc`` as the agent reads it: a process's state, start time, namespace PIDs, cgroup.

Formats are the kernel's (proc(5), ``proc_pid_stat(5)``, ``proc_pid_status(5)``):

- ``stat`` is one line, ``pid (comm) state ppid ...``. ``comm`` is the
  executable's name as the process set it, up to 16 bytes, and may itself hold
  spaces and parentheses (``(sd-pam)``, ``(my (odd) name)``), so the fields
  are read after the *last* ``)``: the state is the third field and the start
  time (clock ticks after boot) the twenty-second.
- ``status`` is ``Key:\\tvalue`` lines; ``NSpid:`` lists the process's PID in
  each PID namespace it is in, outermost first, so its last value is the PID
  the process sees for itself (a container's own numbering). Kernels before 4.1
  have no ``NSpid`` line.
- ``cgroup`` is parsed by :mod:`agent.cgroups`.

A procfs shows the PIDs of the namespace of whoever mounted it, so the host's
``/proc`` bind-mounted into the agent's pod (``--host-proc``) shows host PIDs
without ``hostPID``. Nothing here writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

MAX_BYTES: Final = 64 * 1024
"""The most of one ``/proc`` file read: a real ``cgroup`` is a few hundred bytes (one line
per v1 hierarchy), ``status`` about 1.5 KiB; the cap bounds what a broken file can cost."""

GONE_STATES: Final = frozenset("ZX")
"""``stat`` states of a process that has ended: zombie, dead (as HAMi-core's ``proc_alive``)."""

_STATE: Final = 0
_STARTTIME: Final = 22 - 3
"""Index of field 22 among the fields after the comm's ``)`` (which start at field 3)."""


_HIDING: Final = frozenset({"2", "invisible", "4", "ptraceable"})
"""``hidepid=`` values that hide other users' processes' folders: gone and hidden look alike."""
_KERNEL_THREADS: Final = "kthreadd"
"""PID 2 of the initial PID namespace, the host's; kernel threads show in no other."""


@dataclass(frozen=True, slots=True)
class Stat:
    """What the agent takes from ``/proc/<pid>/stat``."""

    comm: str
    state: str
    starttime: int
    """Clock ticks after boot at which the process started: with the PID, it names one process."""


def parse_stat(text: str) -> Stat:
    """The state and start time of a ``stat`` line; ``ValueError`` if it is not one."""
    close = text.rfind(")")
    fields = text[close + 1 :].split()
    if close < 0 or len(fields) <= _STARTTIME:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}")
    comm = text[text.find("(") + 1 : close]
    return Stat(comm=comm, state=fields[_STATE], starttime=int(fields[_STARTTIME]))


def parse_nspid(text: str) -> list[int]:
    """The ``NSpid:`` values of a ``status`` text, outermost namespace first; ``[]`` without one."""
    for line in text.splitlines():
        if line.startswith("NSpid:"):
            return [int(field) for field in line.split()[1:] if field.isdigit()]
    return []


def read_text(path: Path) -> str:
    """At most :data:`MAX_BYTES` of a file; a line cut by the cap is dropped, not half-parsed.

    Raises ``OSError`` as the read does: ``FileNotFoundError`` or
    ``ProcessLookupError`` (ESRCH) for a process that has exited, ``PermissionError``
    where procfs hides it (``hidepid``).
    """
    with path.open("rb") as file:
        data = file.read(MAX_BYTES)
    if len(data) == MAX_BYTES:
        data = data[: data.rfind(b"\n") + 1]
    return data.decode("utf-8", errors="replace")


class HostProc:
    """Reads ``<root>/<pid>/{stat,status,cgroup}``; a process that has exited raises :class:`Gone`."""

    def __init__(self, root: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> None:
        """``root``: the host's /proc as mounted in the agent; ``mountinfo``: this process's
        mount table, where ``root``'s mount options are."""
        self.root = root
        self._mountinfo = mountinfo

    def unusable(self) -> str | None:
        """Why ``root`` cannot tell a process that has exited from one it does not show; None if it can.

        Every process would look gone where nothing is mounted, where the
        procfs is a container's own (its PID namespace shows none of the
        host's processes: the initial namespace is the one whose PID 2 is the
        kernel's ``kthreadd``), or where it is mounted with a ``hidepid`` that
        hides other users' processes.
        """
        try:
            second = parse_stat(read_text(self.root / "2" / "stat"))
        except (OSError, ValueError) as exc:
            return f"no readable {self.root}/2/stat ({exc})"
        if second.comm != _KERNEL_THREADS:
            return f"not the host's PID namespace (its PID 2 is {second.comm!r}, not kthreadd)"
        hidepid = _hidepid(self.root, self._mountinfo)
        if hidepid in _HIDING:
            return f"mounted with hidepid={hidepid}, which hides other users' processes"
        return None

    def stat(self, pid: int) -> Stat:
        """The process's ``stat``; :class:`Gone` if it has exited, ``OSError``/``ValueError`` otherwise."""
        return parse_stat(self._read(pid, "stat"))

    def nspid(self, pid: int) -> list[int]:
        """The process's ``NSpid`` values (``[]`` on kernels without them); :class:`Gone` if exited."""
        return parse_nspid(self._read(pid, "status"))

    def cgroup(self, pid: int) -> str:
        """The process's ``cgroup`` text; :class:`Gone` if it has exited."""
        return self._read(pid, "cgroup")

    def pids(self) -> list[int]:
        """Every PID ``root`` lists now (``[]`` if it cannot be listed)."""
        try:
            with os.scandir(self.root) as entries:
                return [int(e.name) for e in entries if e.name.isdigit()]
        except OSError:
            return []

    def _read(self, pid: int, name: str) -> str:
        try:
            return read_text(self.root / str(pid) / name)
        except (FileNotFoundError, ProcessLookupError) as exc:
            raise Gone(pid) from exc


def _hidepid(root: Path, mountinfo: Path) -> str | None:
    """The ``hidepid`` option of the procfs mounted at ``root``, per the mount table ``mountinfo``."""
    try:
        table = read_text(mountinfo)
    except OSError:
        return None
    where = os.path.realpath(root)
    for line in table.splitlines():
        # "36 35 0:5 / /host/proc rw,nosuid - proc proc rw,hidepid=2": mount point 5th,
        # then after " - " the type, the source and the super block's options
        fields, _, tail = line.partition(" - ")
        parts, after = fields.split(), tail.split()
        mounted = parts[4].replace("\\040", " ") if len(parts) > 4 else ""
        if mounted == where and after[:1] == ["proc"]:
            for option in (after[2] if len(after) > 2 else "").split(","):
                if option.startswith("hidepid="):
                    return option.removeprefix("hidepid=")
    return None


class Gone(Exception):
    """The process has exited: its ``/proc`` entry is no longer there."""

    def __init__(self, pid: int) -> None:
        super().__init__(f"process {pid} has exited")
        self.pid = pid
