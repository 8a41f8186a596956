"""The processes a benchmark starts and watches: a free port, CPU and memory, stopping."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used (``/proc/<pid>/stat``)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime: fields 14 and 15


def memory_mib(pid: int) -> dict[str, float]:
    """``VmRSS`` and ``VmHWM`` (peak RSS) of process ``pid``, in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a process this benchmark started: SIGTERM, then SIGKILL after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
