"""No cold start: once ``/readyz`` says ready, no first query compiles anything.

A real ``hami-collector demo`` process, started without numba's cache (as a new
pod starts), is asked every kind of query a user sends first — the Prometheus
API's range functions, aggregations and range queries, every panel of the
shipped dashboards, chargeback's JSON and CSV, and every page — and its own
``hami_usage_collector_compiled_loops`` must not grow: each first query found
its loops compiled by the warm-up. (How long each first query takes against
its warm median is the cold-start bench's measure, ``python -m bench coldstart``.)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import aiohttp
from helpers import eventually, reserved_port

ROOT = Path(__file__).resolve().parents[2]
BUILT_INS = {"$__rate_interval": "1m", "$__interval": "2s", "$__range_s": "60", "$__range": "1m"}
FIRST = (
    "rate(hami_container_device_utilization_ratio[1m])",
    "topk(3, hami_host_gpu_utilization_ratio)",
    "bottomk(5, hami_host_gpu_utilization_ratio)",
    "avg_over_time(hami_host_gpu_utilization_ratio[30s])",
    "quantile_over_time(0.9, hami_host_gpu_utilization_ratio[1m])",
    "stddev(hami_host_gpu_utilization_ratio)",
    "sum by (namespace) (hami_vgpu_memory_used_bytes)",
)
"""What a user asks first: the cold-start bench's kinds and a few more."""
PAGES = ("/", "/nodes", "/workloads", "/namespaces", "/status", "/api/v1/nodes", "/api/v1/pods")


def dashboard_queries() -> Iterator[str]:
    """Every panel target of the shipped dashboards, variables as "All" (``.*``)."""
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        for expr in re.findall(r'"expr":\s*("(?:[^"\\]|\\.)*")', path.read_text()):
            query = json.loads(expr)
            for name, value in BUILT_INS.items():
                query = query.replace(name, value)
            yield re.sub(r"\$\{?\w+\}?", ".*", query)


async def compiled_loops(http: aiohttp.ClientSession) -> tuple[float, float]:
    """The process' compiled loops and its warm-up seconds, from its own /metrics."""
    async with http.get("/metrics") as resp:
        text = await resp.text()
    found = dict(
        re.findall(r"^hami_usage_collector_(compiled_loops|warmup_seconds) (\S+)$", text, re.M)
    )
    return float(found["compiled_loops"]), float(found["warmup_seconds"])


async def stopped(process: asyncio.subprocess.Process) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if process.returncode is None:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


async def test_no_first_query_compiles_after_ready() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}  # a new pod's start
    with reserved_port() as port:
        command = (sys.executable, "-m", "collector", "demo", f"--listen=127.0.0.1:{port}")
        process = await asyncio.create_subprocess_exec(
            *command, "--interval=1", env=env, stdout=asyncio.subprocess.DEVNULL
        )
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:

                async def ready() -> bool:
                    try:
                        async with http.get("/readyz") as resp:
                            return resp.status == 200
                    except aiohttp.ClientConnectionError:
                        assert process.returncode is None, "the demo ended"
                        return False

                await eventually(ready, 180, "the demo to be ready")
                before, warmup = await compiled_loops(http)
                assert warmup > 0
                assert before > 0
                now = time.time()
                for query in (*FIRST, *dashboard_queries()):
                    for path in (
                        f"/prometheus/api/v1/query?query={quote(query)}",
                        f"/prometheus/api/v1/query_range?query={quote(query)}"
                        f"&start={now - 60}&end={now}&step=1",
                    ):
                        async with http.get(path) as resp:
                            assert resp.status == 200, (query, await resp.text())
                for path in (*PAGES, "/api/v1/usage", "/api/v1/usage?format=csv&by=pod"):
                    async with http.get(path) as resp:
                        assert resp.status == 200, (path, await resp.text())
                after, _ = await compiled_loops(http)
        finally:
            await stopped(process)
    assert after == before, "a first query compiled a loop the warm-up did not"
