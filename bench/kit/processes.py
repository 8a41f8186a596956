"""The processes a benchmark starts and watches: a loopback socket, CPU and memory, stopping."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from collector.sources.pods import PodDirectory

_TICK = os.sysconf("SC_CLK_TCK")


def loopback_socket() -> socket.socket:
    """A socket bound to a loopback port the kernel picks, for a server to listen on.

    Bound but not yet listening: the port is this process's from now on, unlike a
    port that was free a moment ago.
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def serve_collector(pods: PodDirectory, **settings: Any) -> None:
    """Run the real collector on a loopback port until killed, as its command runs it (the same
    memory policy), with ``pods`` as its pod directory; the port is printed first, alone on stdout."""
    from aiohttp import web

    from collector.app import build_app
    from collector.memory.malloc import set_policy
    from collector.settings import CollectorSettings
    from core import logs

    set_policy()
    sock = loopback_socket()
    print(sock.getsockname()[1], flush=True)
    logs.setup("text", "warning")
    config = CollectorSettings(listen="127.0.0.1:0", kubernetes=False, **settings)
    web.run_app(build_app(config, pods), sock=sock, print=None, access_log=None)


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


async def wait_healthy(
    session: aiohttp.ClientSession, base: str, process: subprocess.Popen[bytes], limit: float
) -> None:
    """Poll the collector's ``/healthz`` until it answers; fail after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the collector {base} exited with {process.returncode}")
        try:
            async with session.get(base + "/healthz") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the collector {base} did not answer within {limit:g}s")
