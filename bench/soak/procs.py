"""The soak's child processes: the collector (``hami-collector serve``) and the agents.

Each can be killed (SIGKILL, as an OOM kill or a node loss would) and started
again with the same arguments; :meth:`Child.stop` ends it for good (SIGTERM,
then SIGKILL), and the soak calls it on every way out.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from bench.kit.cluster import ROOT
from bench.kit.processes import memory_mib
from testing.processes import stop


class Child:
    """A ``python -m MODULE ARGS`` child whose stderr goes to ``log`` (appended)."""

    def __init__(self, args: Sequence[str], log: Path) -> None:
        self.args = list(args)
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the child (again)."""
        with self.log.open("ab") as err, self.out.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", *self.args],
                stdout=out,
                stderr=err,
                cwd=ROOT,
            )
        self.starts += 1

    @property
    def out(self) -> Path:
        """Where the child's stdout goes (appended over its starts)."""
        return self.log.with_suffix(".out")

    def said(self, text: str) -> int:
        """How many lines of the child's stdout, over all its starts, hold ``text``."""
        if not self.out.exists():
            return 0
        return sum(text in line for line in self.out.read_text(errors="replace").splitlines())

    def kill(self) -> None:
        """SIGKILL: nothing is flushed, no shutdown runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.process is not None:
            stop(self.process)

    def resources(self) -> tuple[float, int]:
        """RSS in MiB and open file descriptors of the running child."""
        return memory_mib(self.pid)["VmRSS"], len(os.listdir(f"/proc/{self.pid}/fd"))


async def wait_ready(
    session: aiohttp.ClientSession, base: str, child: Child, limit: float
) -> float:
    """Wait (at most ``limit`` s) until ``/readyz`` answers 200; return the seconds it took."""
    began = time.monotonic()
    deadline = began + limit
    while time.monotonic() < deadline:
        if not child.running:
            code = child.process.returncode if child.process else None
            raise RuntimeError(f"{child.args[0]} exited with {code}; see {child.log}")
        try:
            async with session.get(base + "/readyz", timeout=aiohttp.ClientTimeout(total=2)) as r:
                if r.status == 200:
                    return time.monotonic() - began
        except (aiohttp.ClientError, TimeoutError):
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{base} not ready after {limit:g} s; see {child.log}")
