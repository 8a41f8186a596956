"""The soak's node agents, in a process of their own so the soak can kill and restart them.

``python -m bench.soak.agents COLLECTOR TOKEN_FILE ROOT MONITORS AGENTS SEED START CARDS ALLOCATIONS INTERVAL``
rebuilds the soak's nodes (:func:`bench.soak.world.soak_nodes`, same
arguments, so the same pods as the API server holds) and runs the real agent
(region reader, fake NVML, pusher with its backlog) for each of the last
AGENTS nodes until SIGTERM or SIGKILL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from bench.soak.world import soak_nodes
from core import logs
from core.tasks import owned
from simulator.agents import run_agent

ARGUMENTS: tuple[tuple[str, type], ...] = (
    ("collector", str),
    ("token_file", Path),
    ("root", Path),
    ("monitors", int),
    ("agents", int),
    ("seed", int),
    ("start", float),
    ("cards", int),
    ("allocations", int),
    ("interval", float),
)
"""The positions the soak passes, the order :func:`bench.soak.world.soak_nodes` needs them in."""


async def run(a: argparse.Namespace, token: str) -> None:
    """Run the agents until SIGTERM."""
    collector, root, monitors, interval = a.collector, a.root, a.monitors, a.interval
    nodes = soak_nodes(monitors, a.agents, a.seed, a.start, a.cards, a.allocations)[monitors:]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        for node in nodes:
            agent = run_agent(node, root / node.name, False, collector, lambda: token, interval)
            await stack.enter_async_context(owned(agent, f"agent {node.name}"))
        print(f"agents running: {len(nodes)}", flush=True)
        await stop.wait()


def main(argv: list[str]) -> None:
    """Parse the arguments and run the agents."""
    cli = argparse.ArgumentParser(prog="python -m bench.soak.agents")
    for name, kind in ARGUMENTS:
        cli.add_argument(name, type=kind)
    a = cli.parse_args(argv)
    logs.setup("text", "warning")
    asyncio.run(run(a, a.token_file.read_text().strip()))


if __name__ == "__main__":
    main(sys.argv[1:])
