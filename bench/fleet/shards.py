"""20,000 nodes over 4 shards x 2 replicas, on loopback: placement, and a replica killed mid-run.

Why: past a few thousand nodes one collector's page and push load are too much,
so nodes are split over shards by a hash of their name, and each shard runs
replicas that every agent pushes to. This checks, at the target scale, that
every node lands in exactly one shard, and that killing one replica loses no
pushed interval in its peer (and that the killed one gets the gap replayed
once it is back).

Set-up: 8 real collector processes (``hami-collector serve``, no Kubernetes,
``--push-auth none``), shard ``s`` replica ``r`` listening on ``127.0.<r+1>.<s+1>``,
one port for all. The agents are the agent's own push code
(:class:`agent.destinations.Fanout`, one per node, each computing its node's
shard from the URL template and resolving it, through an injected resolver, to
both replicas' addresses), all in this process: 20,000 fan-outs, 40,000
destinations, each with its own backlog and task. Fewer series per node than
a real node, to fit this 2-core machine: each snapshot holds 1 card (6 series)
and no region. Rounds are pushed back to back (a round is every node's next
snapshot); the run is bounded by :data:`ROUND_TIMEOUT` per round.

Rounds: 0 with every replica up; then replica 1 of shard 0 is killed (SIGKILL)
and rounds 1-2 are pushed; it is started again (empty: the history is in
memory) and round 3 is pushed while its backlog replays. Checks, by PromQL
(``count_over_time``) and ``GET /api/v1/shards`` on every replica: each node in
exactly one shard, both replicas of a shard holding the same nodes; every
replica but the killed one holding every round of every node of its shard;
the killed one holding every round since it was killed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp

from agent.destinations import Fanout, PushOptions
from bench.kit.processes import cpu_seconds, memory_mib, wait_healthy
from bench.kit.table import write_result
from core.payload import Card, Payload
from core.shards import HASH_RULE, shard_of
from core.tasks import Supervisor
from testing.processes import stop

NODES = int(os.environ.get("BENCH_SHARD_NODES", "20000"))
"""Simulated nodes (``BENCH_SHARD_NODES`` lowers it for a quick look)."""
SHARDS = 4
REPLICAS = 2
ROUNDS = 4
KILLED = (0, 1)
"""(shard, replica) killed after round 0 and started again before round 3."""
DOWN_ROUNDS = (1, 2)
ROUND_TIMEOUT = 600.0
"""Seconds a round (or the final replay) may take before the bench gives up."""
STARTUP_TIMEOUT = 60.0
THREADS = 48
"""Worker threads the agents' pushes run in (each push is a blocking request in a thread)."""
FAMILY = "hami_host_gpu_memory_used_bytes"


def host(shard: int, replica: int) -> str:
    """The loopback address of one replica of one shard."""
    return f"127.0.{replica + 1}.{shard + 1}"


def node_name(index: int) -> str:
    return f"gpu-node-{index:05d}"


def reserve_port() -> tuple[int, list[socket.socket]]:
    """One port bound (not listening) on every replica's address; the collectors bind it too."""
    for _ in range(5):
        held: list[socket.socket] = []
        port = 0
        try:
            for shard in range(SHARDS):
                for replica in range(REPLICAS):
                    sock = socket.socket()
                    held.append(sock)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind((host(shard, replica), port))
                    port = sock.getsockname()[1]
            return port, held
        except OSError:
            for sock in held:
                sock.close()
    raise RuntimeError("no port free on every replica address")


def start_collector(shard: int, replica: int, port: int) -> subprocess.Popen[bytes]:
    """One collector process: shard ``shard`` of :data:`SHARDS`, on its own address."""
    args = [
        sys.executable, "-m", "collector", "serve",
        "--no-kubernetes", "--push-auth=none", f"--listen={host(shard, replica)}:{port}",
        f"--shard-count={SHARDS}", f"--shard-index={shard}",
        "--stale-after=3600", "--log-level=warning",
    ]  # fmt: skip
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def snapshot(node: str, sequence: int, taken: float) -> Payload:
    card = Card(
        index=0,
        uuid=f"GPU-{node}",
        name="NVIDIA H200",
        memory_used=(sequence + 1) << 20,
        memory_total=150 << 30,
        utilization=float(sequence % 100),
        memory_utilization=1.0,
        temperature=40.0,
        power=100.0,
    )
    return Payload(node=node, agent="bench", sequence=sequence, time=taken, nvml=True, cards=[card])


class Agents:
    """Every simulated node's push code: one :class:`Fanout` per node, one task per destination."""

    def __init__(self, port: int, tasks: Supervisor) -> None:
        template = f"http://huc-{{shard}}.bench:{port}"
        addresses = {f"huc-{s}.bench": [host(s, r) for r in range(REPLICAS)] for s in range(SHARDS)}

        async def resolver(name: str, _: int) -> list[str]:
            return addresses[name]

        options = PushOptions(lambda: None, 3600.0, 8 << 20, 30.0, (0.5, 5.0))
        self.nodes = [node_name(i) for i in range(NODES)]
        self.fanouts = [
            Fanout(
                [template.replace("{shard}", str(shard_of(node, SHARDS)))],
                options,
                tasks,
                resolver,
            )
            for node in self.nodes
        ]

    async def start(self) -> None:
        for fanout in self.fanouts:
            await fanout.update()

    def submit(self, sequence: int) -> None:
        taken = time.time()
        for node, fanout in zip(self.nodes, self.fanouts, strict=True):
            fanout.submit(snapshot(node, sequence, taken))

    def pending(self, skip: str | None = None) -> int:
        """Snapshots not yet accepted, over every destination (but those at address ``skip``)."""
        return sum(
            len(p.backlog) for f in self.fanouts for e, p in f.pushers.items() if e.address != skip
        )

    def totals(self) -> dict[str, int]:
        pushers = [p for f in self.fanouts for p in f.pushers.values()]
        return {
            "destinations": len(pushers),
            "accepted": sum(p.stats.accepted for p in pushers),
            "refused": sum(p.stats.refused for p in pushers),
            "failed_attempts": sum(p.stats.failed for p in pushers),
            "dropped": sum(p.backlog.dropped for p in pushers),
        }


async def drained(agents: Agents, skip: str | None = None) -> float:
    """Wait until every destination (but ``skip``) has nothing pending; the seconds it took."""
    started = time.monotonic()
    while agents.pending(skip):
        if time.monotonic() - started > ROUND_TIMEOUT:
            raise RuntimeError(f"{agents.pending(skip)} snapshots still pending")
        await asyncio.sleep(0.2)
    return time.monotonic() - started


async def instant(http: aiohttp.ClientSession, base: str, query: str) -> list[dict[str, Any]]:
    async with http.get(f"{base}/prometheus/api/v1/query", params={"query": query}) as resp:
        body = await resp.json()
    if body["status"] != "success":
        raise RuntimeError(f"{base}: {query}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def replica_view(http: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    """What one replica holds: its nodes, each node's rounds, its page."""
    async with http.get(f"{base}/api/v1/shards") as resp:
        shards = await resp.json()
    counted = await instant(http, base, f"count_over_time({FAMILY}[1h])")
    rounds: dict[int, int] = {}
    for sample in counted:
        points = int(float(sample["value"][1]))
        rounds[points] = rounds.get(points, 0) + 1
    async with http.get(f"{base}/metrics", headers={"Accept-Encoding": "identity"}) as resp:
        page = await resp.read()
    series = [
        line.rsplit(b" ", 1)[0] for line in page.splitlines() if line.startswith(b"hami_host_")
    ]
    return {
        "index": shards["index"],
        "nodes": shards["nodes"],
        "nodes_by_rounds_held": {str(k): v for k, v in sorted(rounds.items())},
        "page_bytes": len(page),
        "node_series": len(series),
        "node_series_unique": len(set(series)),
    }


async def measure() -> dict[str, Any]:
    """Start the collectors, push the rounds, kill and restart one replica, check placement."""
    port, held = reserve_port()
    processes: dict[tuple[int, int], subprocess.Popen[bytes]] = {}
    base = {(s, r): f"http://{host(s, r)}:{port}" for s in range(SHARDS) for r in range(REPLICAS)}
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(THREADS))
    try:
        for key in base:
            processes[key] = start_collector(*key, port)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
            for key, url in base.items():
                await wait_healthy(http, url, processes[key], STARTUP_TIMEOUT)
            async with Supervisor() as tasks:
                agents = Agents(port, tasks)
                await agents.start()
                return await rounds(agents, http, base, processes, port)
    finally:
        for process in processes.values():
            stop(process)
        for sock in held:
            sock.close()


async def rounds(
    agents: Agents,
    http: aiohttp.ClientSession,
    base: dict[tuple[int, int], str],
    processes: dict[tuple[int, int], subprocess.Popen[bytes]],
    port: int,
) -> dict[str, Any]:
    killed = host(*KILLED)
    cpu_before = {k: cpu_seconds(p.pid) for k, p in processes.items()}
    spent = dict.fromkeys(processes, 0.0)
    own_cpu = time.process_time()
    began = time.monotonic()
    delivery: list[dict[str, Any]] = []
    for sequence in range(ROUNDS):
        if sequence == DOWN_ROUNDS[0]:
            spent[KILLED] = cpu_seconds(processes[KILLED].pid) - cpu_before[KILLED]
            processes[KILLED].kill()
            processes[KILLED].wait(10)
        if sequence == DOWN_ROUNDS[-1] + 1:
            processes[KILLED] = start_collector(*KILLED, port)
            cpu_before[KILLED] = 0.0  # the new process's CPU counts from its start
            await wait_healthy(http, base[KILLED], processes[KILLED], STARTUP_TIMEOUT)
        start = time.monotonic()
        agents.submit(sequence)
        submitted = time.monotonic() - start
        down = sequence in DOWN_ROUNDS
        # from the kill on, the killed replica is left out: the live ones must not wait on it
        seconds = await drained(agents, skip=killed if sequence >= DOWN_ROUNDS[0] else None)
        delivery.append(
            {
                "round": sequence,
                "replica_down": down,
                "replaying": sequence > DOWN_ROUNDS[-1],
                "submit_s": round(submitted, 2),
                "delivered_to_live_replicas_s": round(seconds, 2),
                "pending_for_the_killed_replica": agents.pending() if down else 0,
            }
        )
    replay = await drained(agents)
    wall = time.monotonic() - began
    own_cpu = time.process_time() - own_cpu
    cpu = {
        f"{s}/{r}": spent[(s, r)] + cpu_seconds(p.pid) - cpu_before[(s, r)]
        for (s, r), p in processes.items()
    }
    views = {f"{s}/{r}": await replica_view(http, url) for (s, r), url in base.items()}
    rss = {f"{s}/{r}": memory_mib(p.pid)["VmRSS"] for (s, r), p in processes.items()}
    return summarise(agents, delivery, replay, wall, own_cpu, cpu, views, rss)


def summarise(
    agents: Agents,
    delivery: list[dict[str, Any]],
    replay: float,
    wall: float,
    own_cpu: float,
    cpu: dict[str, float],
    views: dict[str, dict[str, Any]],
    rss: dict[str, float],
) -> dict[str, Any]:
    """Placement and loss checks over every replica's view; CPU, memory and page figures."""
    killed = f"{KILLED[0]}/{KILLED[1]}"
    by_shard: dict[int, list[set[str]]] = {}
    for view in views.values():
        by_shard.setdefault(view["index"], []).append(set(view["nodes"]))
    held = [nodes for replicas in by_shard.values() for nodes in replicas[:1]]
    union = set().union(*held) if held else set()
    exactly_once = sum(len(nodes) for nodes in held) == len(union) == NODES
    replicas_equal = all(all(r == rs[0] for r in rs) for rs in by_shard.values())
    hash_agrees = all(
        shard_of(node, SHARDS) == view["index"] for view in views.values() for node in view["nodes"]
    )
    full = {k: v for k, v in views.items() if k != killed}
    peers_complete = all(
        v["nodes_by_rounds_held"] == {str(ROUNDS): len(v["nodes"])} for v in full.values()
    )
    since_kill = ROUNDS - DOWN_ROUNDS[0]
    restarted = views[killed]
    restarted_complete = restarted["nodes_by_rounds_held"] == {
        str(since_kill): len(restarted["nodes"])
    }
    series_once = all(v["node_series"] == v["node_series_unique"] for v in views.values())
    totals = agents.totals()
    pushes = totals["accepted"]
    collector_cpu = sum(cpu.values())
    return {
        "nodes": NODES,
        "shards": SHARDS,
        "replicas": REPLICAS,
        "rounds": ROUNDS,
        "series_per_node": 6,
        "hash": HASH_RULE,
        "killed": killed,
        "rounds_while_down": list(DOWN_ROUNDS),
        "nodes_per_shard": {str(s): len(rs[0]) for s, rs in sorted(by_shard.items())},
        "every_node_in_exactly_one_shard": exactly_once,
        "replicas_hold_the_same_nodes": replicas_equal,
        "placement_agrees_with_the_hash": hash_agrees,
        "peers_hold_every_round": peers_complete,
        "restarted_holds_every_round_since_the_kill": restarted_complete,
        "each_series_once_per_replica": series_once,
        "delivery": delivery,
        "replay_after_restart_s": round(replay, 2),
        "agents": totals,
        "wall_s": round(wall, 1),
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "collector_cpu_s": {k: round(v, 1) for k, v in cpu.items()},
        "collector_cpu_s_total": round(collector_cpu, 1),
        "collector_cpu_us_per_accepted_push": round(collector_cpu / pushes * 1e6, 1)
        if pushes
        else None,
        "agents_cpu_s": round(own_cpu, 1),
        "agents_cpu_us_per_push": round(own_cpu / pushes * 1e6, 1) if pushes else None,
        "collector_rss_mib": {k: round(v, 1) for k, v in rss.items()},
        "page_bytes": {k: v["page_bytes"] for k, v in views.items()},
        "views": {k: {key: v[key] for key in v if key != "nodes"} for k, v in views.items()},
    }


def markdown(r: dict[str, Any]) -> str:
    """``shards.md``: the set-up, the checks and the figures."""
    down = [d for d in r["delivery"] if d["replica_down"]]
    up = [d for d in r["delivery"] if not d["replica_down"] and not d["replaying"]]
    back = [d for d in r["delivery"] if d["replaying"]]
    pages = sorted(r["page_bytes"].values())
    rss = sorted(r["collector_rss_mib"].values())
    checks = [
        ("every node in exactly one shard", r["every_node_in_exactly_one_shard"]),
        ("both replicas of a shard hold the same nodes", r["replicas_hold_the_same_nodes"]),
        ("each node's shard is the hash's", r["placement_agrees_with_the_hash"]),
        (
            f"replica {r['killed']} killed for rounds {r['rounds_while_down']}: every other "
            f"replica holds all {r['rounds']} rounds of every node of its shard",
            r["peers_hold_every_round"],
        ),
        (
            "the killed replica, restarted, holds every round since the kill (replayed)",
            r["restarted_holds_every_round_since_the_kill"],
        ),
        ("each series once per replica (/metrics)", r["each_series_once_per_replica"]),
    ]
    lines = [
        "# Shards and replicas",
        "",
        f"{r['nodes']:,} simulated nodes over {r['shards']} shards x {r['replicas']} replicas "
        f"(8 collector processes on 127.0.<replica+1>.<shard+1>), pushed by the agent's own "
        f"push code (one fan-out per node, {r['agents']['destinations']:,} destinations), "
        f"{r['series_per_node']} series per node (1 card, no region: fewer than a real node, "
        f"to fit this 2-core machine), {r['rounds']} rounds back to back, {r['wall_s']} s in all "
        f"(load average after: {', '.join(map(str, r['load_average_after']))}: the machine is "
        "shared, so the seconds below are wall time under that load, not capacity). "
        f"Hash: `{r['hash']}`. See `bench/fleet/shards.py`.",
        "",
        "| check | result |",
        "| --- | --- |",
        *(f"| {what} | {'yes' if ok else 'NO'} |" for what, ok in checks),
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| nodes per shard | {', '.join(f'{v:,}' for v in r['nodes_per_shard'].values())} |",
        "| round delivered to every live replica, all up | "
        + ", ".join(f"{d['delivered_to_live_replicas_s']} s" for d in up)
        + " |",
        "| round delivered to every live replica, one replica down | "
        + ", ".join(f"{d['delivered_to_live_replicas_s']} s" for d in down)
        + " |",
        "| round delivered to every live replica, the restarted one replaying meanwhile | "
        + ", ".join(f"{d['delivered_to_live_replicas_s']} s" for d in back)
        + " |",
        f"| then, until the restarted replica's backlog is replayed | "
        f"{r['replay_after_restart_s']} s |",
        f"| pushes accepted / refused / dropped from a backlog | {r['agents']['accepted']:,} / "
        f"{r['agents']['refused']} / {r['agents']['dropped']} |",
        f"| collector CPU per accepted push (8 processes together) | "
        f"{r['collector_cpu_us_per_accepted_push']} us |",
        f"| agents' push code CPU per push (in one process, threads) | "
        f"{r['agents_cpu_us_per_push']} us |",
        f"| collector RSS per replica ({r['nodes'] // r['shards']:,} nodes, {r['rounds']} points "
        f"a series) | {rss[0]:.0f}-{rss[-1]:.0f} MiB |",
        f"| /metrics page per replica (plain) | {pages[0] / 1e6:.2f}-{pages[-1] / 1e6:.2f} MB |",
        "",
        "Details: `shards.json`.",
        "",
    ]
    return "\n".join(lines)


def run() -> dict[str, Any]:
    """Run the bench and write ``bench/results/shards.json`` and ``shards.md``."""
    # each of the thousands of destinations logs its replica's outage once: too many lines here
    logging.getLogger("agent.push").setLevel(logging.ERROR)
    results = asyncio.run(measure())
    write_result("shards", markdown(results), results)
    return results
