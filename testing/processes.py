"""Sockets and child processes, as the tests and the benches both start them (on loopback)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence
from typing import Any


def bind_one_port(hosts: Sequence[str], tries: int) -> list[socket.socket] | None:
    """One bound socket per host, all on the port the kernel picked for the first; None when
    no try in ``tries`` found that port free on every host."""
    for _ in range(tries):
        held: list[socket.socket] = []
        port = 0
        try:
            for host in hosts:
                sock = socket.socket()
                held.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                port = sock.getsockname()[1]
            return held
        except OSError:  # the first host's port is taken on another: try a new one
            for sock in held:
                sock.close()
    return None


def stop(process: subprocess.Popen[Any]) -> None:
    """Stop a process we started: SIGTERM, then SIGKILL after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
