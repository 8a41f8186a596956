"""The load bench's pulled monitors, in a process of their own (their CPU is not the collector's).

``python -m bench.load.monitors NODES TARGETS_FILE`` serves NODES simulated
monitors (mixed flavours, each on its own loopback address), writes them as
a file_sd targets file for the collector, prints ``ready``, and serves until
SIGTERM; it then prints, as JSON, how many requests the monitors answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path

from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm
from simulator.run import write_targets


async def serve(nodes: int, targets: Path) -> dict[str, int]:
    """Serve the monitors until SIGTERM; the requests they answered."""
    cluster = build_cluster(nodes, seed=3)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with MonitorFarm(cluster) as farm:
        write_targets(targets, farm)
        print("ready", flush=True)
        await stop.wait()
        requests = sum(farm.request_count(n.name) for n in cluster)
    return {"monitors": nodes, "requests": requests}


def main(argv: list[str]) -> None:
    """Parse ``NODES TARGETS_FILE`` and serve."""
    cli = argparse.ArgumentParser(prog="python -m bench.load.monitors")
    cli.add_argument("nodes", type=int)
    cli.add_argument("targets", type=Path)
    a = cli.parse_args(argv)
    print(json.dumps(asyncio.run(serve(a.nodes, a.targets))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
