"""``python -m bench coldstart``: a collector's first queries after a start, against its warm ones.

Each run starts ``hami-collector demo`` as a new pod would (no numba cache: every
compiled loop compiles in this process) and times, from the process' start, how
long it takes until ``/readyz`` answers ready; then, once the demo has a few
seconds of history, the first query of each kind over HTTP — the Prometheus
API's ``rate``, ``topk``, a window function, an instant ``quantile_over_time``
and a range query, chargeback's JSON and CSV, and every page — one after another.
Goal: each first query within 2x its warm median.

Warm is the same sequence asked again :data:`ROUNDS` times: each later query
then follows what the first followed (the kind before it), so the first differs
from them only in being first. Each of these is sent once the demo is quiet
(:func:`bench.query.http.settle`): otherwise whatever it does in the background
(its simulated cluster's scrapes and pushes, a report of the namespaces page
refreshed after the page was read) lands in whichever request comes next. The
same query asked :data:`WARM` times back to back is beside it: faster for a
page of a few milliseconds (the nodes it presents have not changed since the
last repeat, its code and data are in the CPU's caches), and no measure of
what a first query pays once.
The same start with a filled cache (a container restarted in its pod, when
``NUMBA_CACHE_DIR`` is set) gives the time to ready from the cache.

The result goes to ``bench/results/coldstart.md`` and ``.json``.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench.kit.table import Row, mark, table, write_result
from bench.kit.timing import median
from bench.query.http import settle
from testing.processes import stop

RUNS = 5
"""Cold starts measured. A first query is one sample a run: its figure is the median of the
runs' (the demo's simulated agents write their region files in the collector's process, a
tenth of each second, which one run's first query may meet), the worst run's beside it."""
ROUNDS = 10
"""Times the whole sequence is asked again after the first queries."""
WARM = 20
"""Repeats of each query back to back, after the rounds."""
HISTORY = 10.0
"""Seconds of the demo's history before the first query (scraped every second)."""
GOAL = 2.0
"""A first query within this many times its warm median."""

_RANGE = "start={start}&end={end}&step=1"
QUERIES: dict[str, str] = {
    "rate": "/prometheus/api/v1/query?query="
    + quote("rate(hami_container_device_utilization_ratio[1m])"),
    "topk": "/prometheus/api/v1/query?query=" + quote("topk(5, hami_host_gpu_utilization_ratio)"),
    "avg_over_time": "/prometheus/api/v1/query?query="
    + quote("avg_over_time(hami_host_gpu_utilization_ratio[30s])"),
    "quantile_over_time (instant)": "/prometheus/api/v1/query?query="
    + quote("quantile_over_time(0.9, hami_host_gpu_utilization_ratio[1m])"),
    "query_range rate": "/prometheus/api/v1/query_range?query="
    + quote("rate(hami_container_device_utilization_ratio[1m])")
    + "&"
    + _RANGE,
    "chargeback JSON": "/api/v1/usage",
    "chargeback CSV": "/api/v1/usage?format=csv",
    "page /": "/",
    "page /nodes": "/nodes",
    "page /nodes/{node}": "/nodes/{node}",
    "page /workloads": "/workloads",
    "page /workloads/{pod}": "/workloads/{pod}",
    "page /namespaces": "/namespaces",
    "page /status": "/status",
}
"""What a user asks first, by kind; ``{node}``, ``{pod}`` and the range's times are filled in."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(port: int, path: str) -> tuple[int, bytes, float]:
    """Status, body and wall seconds of one GET on a new connection (as a browser's first)."""
    began = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    return resp.status, body, time.perf_counter() - began


def _start(port: int, cache: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = cache
    command = [sys.executable, "-m", "collector", "demo", f"--listen=127.0.0.1:{port}"]
    return subprocess.Popen(
        [*command, "--interval=1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _ready_after(process: subprocess.Popen[bytes], port: int, began: float) -> float:
    """Seconds from ``began`` until ``/readyz`` answers 200 (at most two minutes)."""
    while time.perf_counter() - began < 120:
        if process.poll() is not None:
            raise RuntimeError(f"the demo exited with {process.returncode}")
        try:
            if _get(port, "/readyz")[0] == 200:
                return time.perf_counter() - began
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("the demo was not ready within two minutes")


def _targets(port: int) -> dict[str, str]:
    """The pages' node and pod, from the REST API."""
    nodes = json.loads(_get(port, "/api/v1/nodes")[1])
    pods = json.loads(_get(port, "/api/v1/pods")[1])
    node = nodes["nodes"][0]["name"]
    # the demo's pod that never ends: another may end at a churn point, and its page be a 404
    pod = next(c for c in pods["containers"] if c["pod"] == f"fill-{c['node']}")
    return {"node": quote(node), "pod": f"{quote(pod['namespace'])}/{quote(pod['pod'])}"}


def one_run(cache: str | None) -> dict[str, Any]:
    """One start: seconds to ready, then each query kind's first, warm (the sequence again)
    and back-to-back seconds."""
    port = _free_port()
    began = time.perf_counter()
    process = _start(port, cache)
    try:
        ready = _ready_after(process, port, began)
        time.sleep(HISTORY)  # the demo's history to query: its scrapes run meanwhile
        fill = _targets(port)
        now = time.time()
        paths = {kind: t.format(**fill, start=now - 60, end=now) for kind, t in QUERIES.items()}
        first = {}
        for kind, path in paths.items():
            settle([process.pid])
            status, body, first[kind] = _get(port, path)
            if status != 200:
                raise RuntimeError(f"{kind}: {status} {body[:200]!r}")
        rounds: dict[str, list[float]] = {kind: [] for kind in paths}
        for _ in range(ROUNDS):
            for kind, path in paths.items():
                settle([process.pid])
                rounds[kind].append(_get(port, path)[2])
        queries = {
            kind: {
                "first_s": first[kind],
                "warm_median_s": median(rounds[kind]),
                "back_to_back_median_s": median([_get(port, path)[2] for _ in range(WARM)]),
            }
            for kind, path in paths.items()
        }
        return {"ready_s": ready, "queries": queries}
    finally:
        stop(process)


def run(runs: int = RUNS) -> dict[str, Any]:
    """``runs`` cold starts, then one start from a filled cache."""
    cold = [one_run(None) for _ in range(runs)]
    with tempfile.TemporaryDirectory() as cache:
        one_run(cache)  # fills it
        cached = one_run(cache)
    return {"cold": cold, "cached": cached}


def rows(result: dict[str, Any]) -> list[Row]:
    """Time to ready, and each kind's worst first query against its warm median."""
    cold = result["cold"]
    out = [
        Row(
            "time to ready, cold (compiling), slowest run",
            f"{max(r['ready_s'] for r in cold):.1f} s",
            "-",
            "-",
            "-",
            "-",
        ),
        Row(
            "time to ready, from the cache",
            f"{result['cached']['ready_s']:.1f} s",
            "-",
            "-",
            "-",
            "-",
        ),
    ]
    for kind in QUERIES:
        runs = sorted(
            (r["queries"][kind]["first_s"] / r["queries"][kind]["warm_median_s"], r) for r in cold
        )
        ratio, middle = runs[len(runs) // 2]
        q = middle["queries"][kind]
        out.append(
            Row(
                f"first {kind}",
                f"{q['first_s'] * 1e3:.1f} ms (worst run {runs[-1][0]:.2f}x)",
                f"<= {GOAL:g}x warm",
                f"warm median {q['warm_median_s'] * 1e3:.1f} ms "
                f"(back to back {q['back_to_back_median_s'] * 1e3:.1f} ms, "
                f"{q['first_s'] / q['back_to_back_median_s']:.2f}x)",
                f"{ratio:.2f}x",
                mark(ratio <= GOAL),
            )
        )
    return out


def main(runs: int) -> None:
    """Run, print the table, and write ``bench/results/coldstart.*``."""
    result = run(runs)
    markdown = table(rows(result))
    print(markdown)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = (
        f"# Cold start\n\n{stamp}, {os.cpu_count()} CPUs, {runs} cold starts of "
        f"`hami-collector demo`; each first query is the median run's, the worst beside it. "
        f"Warm: the same sequence asked {ROUNDS} times more, each query's median; each of these "
        f"sent once the demo is quiet. Back to back: each query {WARM} times in a row."
        f"\n\n{markdown}\n"
    )
    path: Path = write_result("coldstart", text, result)
    print(f"written to {path}")
