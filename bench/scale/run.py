"""Thousands of monitors pulled by one collector, beside vmagent 1.79 and Prometheus on the same targets.

Why: the goal is 5,000 nodes pulled every 15 s by one collector within
1 core and 3 GiB RSS (default history), every node fresh, and a CPU cost per
scraped sample no higher than vmagent's, the scraper an operator would run
instead (with relabelling to add ``node``).

Set-up, all on loopback:

* monitors: one process (:mod:`bench.kit.farm`) serves every simulated node's
  exposition (the demo's exact upstream text, every flavour) on its own
  127.x address, one port for all, each body rendered and gzipped before
  serving so that serving costs no rendering. It counts the requests and
  samples it served, which is what both scrapers are charged for.
* ours: ``hami-collector serve --no-kubernetes --targets-file`` (file_sd, the
  ``node`` and ``flavour`` labels), default interval (15 s) and history.
* peer: ``vmagent`` from Debian's ``victoria-metrics`` 1.79 with
  ``file_sd_configs`` over the same targets and a ``relabel_configs`` rule that
  sets ``node`` from the target's ``__meta_kubernetes_pod_node_name`` label
  (as an operator's ``kubernetes_sd_configs`` would), same interval and
  timeout, remote-writing to an accept-all receiver (``bench.fleet.remote``'s sink).
* second peer: Debian's Prometheus 2.42 with the same scrape configuration,
  keeping what it scrapes in its own TSDB (as ours keeps its history).

The scrapers run one after the other against the same monitor process, in
:data:`ROUNDS` rounds, the order reversed in every other round (the load of a
shared machine drifts). ``BENCH_SCALE_BEFORE`` names another source tree of
the collector (``git archive`` of an older commit) run as one more scraper
with the same Python, so a change is measured against its base in one run.
Each gets :data:`WARMUP_INTERVALS` intervals to settle, then
:data:`MEASURED_INTERVALS` intervals are measured one by one (CPU from
``/proc/PID/stat``, RSS, samples the monitors served); medians are reported,
and each ratio is the median of the ratios taken within one round.
Then freshness: for ours, every node has series on ``/metrics`` and its
source is up with a success within two intervals; for the peers, every target
is up with a ``node`` label (``/api/v1/targets``).
"""

from __future__ import annotations

import itertools
import json
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench.kit.cluster import ROOT
from bench.kit.farm import Monitors, start_monitors
from bench.kit.processes import cpu_seconds, memory_mib
from bench.kit.table import write_result
from bench.scale.report import markdown
from simulator.run import collector_flavour
from testing.processes import stop

NODES = int(os.environ.get("BENCH_SCALE_NODES", "5000"))
"""Simulated monitors (``BENCH_SCALE_NODES`` lowers it when the machine cannot serve them)."""
CARDS = int(os.environ.get("BENCH_SCALE_CARDS", "2"))
ALLOCATIONS = int(os.environ.get("BENCH_SCALE_ALLOCATIONS", "8"))
"""Cards and vGPU allocations per node (~44 series; the demo's full node, 8 and 28, has ~190)."""
INTERVAL = float(os.environ.get("BENCH_SCALE_INTERVAL", "15"))
WARMUP_INTERVALS = 2
MEASURED_INTERVALS = int(os.environ.get("BENCH_SCALE_INTERVALS", "4"))
ROUNDS = int(os.environ.get("BENCH_SCALE_ROUNDS", "1"))
"""Rounds of every scraper; the order is reversed in every other round."""
BEFORE = os.environ.get("BENCH_SCALE_BEFORE", "")
"""Another source tree of the collector to run as the scraper ``before`` (empty: none)."""
STARTUP_TIMEOUT = 120.0
GOAL_CORES = 1.0
GOAL_RSS_MIB = 3 * 1024.0
GOAL_RATIO = 1.0
"""Our CPU per scraped sample over vmagent's, at most."""
KEPT_UP = 0.98
"""Share of the targets a scraper must scrape in each interval (jitter aside) to keep up."""
VMAGENT = ROOT / ".tools/victoria-metrics/usr/bin/vmagent"
PROMETHEUS = ROOT / ".tools/prometheus/usr/bin/prometheus"
STEM = os.environ.get("BENCH_SCALE_RESULT", "scale")
"""Results go to ``bench/results/<STEM>.json`` and ``.md`` (another stem keeps a second shape)."""
SELF = b"hami_usage_collector_"
Scraper = Callable[[Path, Path, Monitors], dict[str, Any]]
"""A scraper's phase: (work folder, its targets file, the monitors) to its figures."""


def write_targets(work: Path, monitors: Monitors) -> tuple[Path, Path]:
    """The collector's file_sd targets file and vmagent's (the node as a meta label)."""
    ours = [
        {
            "targets": [monitors.address(i)],
            "labels": {"node": n["node"], "flavour": collector_flavour(n["flavour"])},
        }
        for i, n in enumerate(monitors.nodes)
    ]
    peer = [
        {"targets": [monitors.address(i)], "labels": {"__meta_kubernetes_pod_node_name": n["node"]}}
        for i, n in enumerate(monitors.nodes)
    ]
    (work / "targets.json").write_text(json.dumps(ours))
    (work / "vmagent-targets.json").write_text(json.dumps(peer))
    return work / "targets.json", work / "vmagent-targets.json"


def reserve(host: str = "127.0.0.1") -> tuple[int, socket.socket]:
    """A port bound (not listening) with SO_REUSEADDR, for a child to bind as well."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock.getsockname()[1], sock


def get(url: str, timeout: float = 120) -> bytes:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "identity"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body: bytes = response.read()
    return body


def wait_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            get(url, timeout=5)
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer within {STARTUP_TIMEOUT:g} s")


def measure(process: subprocess.Popen[bytes], monitors: Monitors) -> dict[str, Any]:
    """Warm up, then CPU, RSS and what the monitors served over each measured interval."""
    time.sleep(WARMUP_INTERVALS * INTERVAL)
    marks = []
    for i in range(MEASURED_INTERVALS + 1):
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        stats = monitors.stats()
        marks.append((time.monotonic(), cpu_seconds(process.pid), memory_mib(process.pid), stats))
        if i < MEASURED_INTERVALS:
            time.sleep(INTERVAL)
    intervals = []
    for (t0, c0, _, s0), (t1, c1, m1, s1) in itertools.pairwise(marks):
        samples = s1["samples"] - s0["samples"]
        intervals.append(
            {
                "seconds": round(t1 - t0, 2),
                "cores": round((c1 - c0) / (t1 - t0), 3),
                "rss_mib": round(m1["VmRSS"], 1),
                "scrapes": s1["requests"] - s0["requests"],
                "samples": samples,
                "cpu_us_per_sample": round((c1 - c0) / samples * 1e6, 3) if samples else None,
                "monitors_cores": round((s1["cpu_s"] - s0["cpu_s"]) / (t1 - t0), 3),
            }
        )
    peak = memory_mib(process.pid)["VmHWM"]
    return summarise(intervals, peak)


def summarise(intervals: list[dict[str, Any]], peak_mib: float) -> dict[str, Any]:
    """Medians over the measured intervals."""

    def mid(key: str) -> float:
        return round(statistics.median(float(i[key] or 0) for i in intervals), 3)

    return {
        "intervals": intervals,
        "cores": mid("cores"),
        "rss_mib": max(i["rss_mib"] for i in intervals),
        "rss_peak_mib": round(peak_mib, 1),
        "scrapes_per_interval": mid("scrapes"),
        "samples_per_interval": mid("samples"),
        "cpu_us_per_sample": mid("cpu_us_per_sample"),
        "monitors_cores": mid("monitors_cores"),
    }


def freshness(page: bytes, nodes: list[str], now: float) -> dict[str, Any]:
    """From our ``/metrics``: nodes with series, sources up, and successes within 2 intervals."""
    with_series: set[str] = set()
    up: set[str] = set()
    recent: set[str] = set()
    for line in page.splitlines():
        if not line or line[:1] == b"#":
            continue
        start = line.find(b'node="')
        if start < 0:
            continue
        node = line[start + 6 : line.index(b'"', start + 6)].decode()
        if not line.startswith(SELF):
            with_series.add(node)
        elif line.startswith(SELF + b"source_up{") and line.endswith(b" 1"):
            up.add(node)
        elif (
            line.startswith(SELF + b"source_last_success_timestamp_seconds{")
            and now - float(line.rsplit(b" ", 1)[1]) <= 2 * INTERVAL
        ):
            recent.add(node)
    expected = set(nodes)
    fresh = expected & with_series & up & recent
    return {
        "nodes": len(expected),
        "with_series": len(expected & with_series),
        "source_up": len(expected & up),
        "success_within_2_intervals": len(expected & recent),
        "fresh": len(fresh),
        "every_node_fresh": fresh == expected,
        "page_bytes": len(page),
    }


def ours(work: Path, targets: Path, monitors: Monitors, tree: Path = ROOT) -> dict[str, Any]:
    """The collector (of source tree ``tree``) pulling every monitor: figures and freshness."""
    port, held = reserve()
    args = [sys.executable, "-m", "collector", "serve", "--no-kubernetes",
            f"--targets-file={targets}", f"--listen=127.0.0.1:{port}", "--log-level=warning",
            f"--interval={INTERVAL:g}"]  # fmt: skip
    with (work / "collector.log").open("wb") as log:
        # run from the tree: ``-m`` finds its ``collector`` before the installed one
        process = subprocess.Popen(args, stdout=log, stderr=log, cwd=tree)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base + "/healthz", process)
        figures = measure(process, monitors)
        page = get(base + "/metrics")
        fresh = freshness(page, [n["node"] for n in monitors.nodes], time.time())
    finally:
        stop(process)
        held.close()
    return {**figures, "freshness": fresh}


def vmagent_config(targets: Path) -> str:
    """What an operator would write: file_sd (or kubernetes_sd) plus a rule that sets node."""
    return json.dumps(
        {
            "global": {
                "scrape_interval": f"{INTERVAL:g}s",
                "scrape_timeout": f"{min(10.0, INTERVAL):g}s",
            },
            "scrape_configs": [
                {
                    "job_name": "gpu-monitors",
                    "file_sd_configs": [{"files": [str(targets)]}],
                    "relabel_configs": [
                        {
                            "source_labels": ["__meta_kubernetes_pod_node_name"],
                            "target_label": "node",
                        }
                    ],
                }
            ],
        }
    )  # JSON is YAML: vmagent reads it as its -promscrape.config


def peer(work: Path, targets: Path, monitors: Monitors) -> dict[str, Any]:
    """vmagent scraping the same targets, remote-writing to an accept-all sink."""
    config = work / "vmagent.yml"
    config.write_text(vmagent_config(targets))
    sink = subprocess.Popen(
        [sys.executable, "-m", "bench.fleet.remote", "sink"], stdout=subprocess.PIPE
    )
    try:
        assert sink.stdout is not None
        ready, _, _ = select.select([sink.stdout], [], [], STARTUP_TIMEOUT)
        if not ready:
            raise RuntimeError("the remote-write sink did not start")
        sink_port = int(sink.stdout.readline())
        port, held = reserve()
        held.close()  # vmagent does not bind with SO_REUSEADDR; a port just freed is taken at once
        shutil.rmtree(work / "vmagent-data", ignore_errors=True)
        args = [str(VMAGENT), f"-promscrape.config={config}",
                f"-remoteWrite.url=http://127.0.0.1:{sink_port}/api/v1/write",
                f"-remoteWrite.tmpDataPath={work / 'vmagent-data'}",
                f"-httpListenAddr=127.0.0.1:{port}", "-loggerLevel=ERROR",
                "-promscrape.suppressScrapeErrors"]  # fmt: skip
        sink_cpu = cpu_seconds(sink.pid)
        figures = scraping_peer(work / "vmagent.log", args, f"http://127.0.0.1:{port}", "/health",
                                monitors)  # fmt: skip
        sink_cpu = cpu_seconds(sink.pid) - sink_cpu
    finally:
        stop(sink)
    return {**figures, "sink_cpu_s_while_measured": round(sink_cpu, 1)}


def prometheus(work: Path, targets: Path, monitors: Monitors) -> dict[str, Any]:
    """Prometheus scraping the same targets with the same configuration, into its TSDB."""
    config = work / "prometheus.yml"
    config.write_text(vmagent_config(targets))
    port, held = reserve()
    held.close()
    shutil.rmtree(work / "prometheus-data", ignore_errors=True)
    args = [str(PROMETHEUS), f"--config.file={config}",
            f"--storage.tsdb.path={work / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--log.level=error"]  # fmt: skip
    return scraping_peer(work / "prometheus.log", args, f"http://127.0.0.1:{port}", "/-/healthy",
                         monitors)  # fmt: skip


def scraping_peer(
    log_path: Path, args: list[str], base: str, health: str, monitors: Monitors
) -> dict[str, Any]:
    """Start a peer scraper, measure it, check its targets are up with ``node``; stop it."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log)
    try:
        wait_healthy(base + health, process)
        figures = measure(process, monitors)
        targets_up = json.loads(get(base + "/api/v1/targets"))["data"]["activeTargets"]
        labelled = {t["labels"].get("node") for t in targets_up if t["health"] == "up"}
    finally:
        stop(process)
    expected = {n["node"] for n in monitors.nodes}
    return {
        **figures,
        "targets_up_with_node": len(expected & labelled),
        "every_target_up_with_node": expected <= labelled,
    }


def phase(name: str, fn: Scraper, *args: Any) -> dict[str, Any]:
    print(f"scale: {name} ...", file=sys.stderr, flush=True)
    result = fn(*args)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(f"scale: {name}: {json.dumps(result)}", file=sys.stderr, flush=True)
    return result


def scrapers() -> dict[str, tuple[Scraper, bool]]:
    """Each scraper by name, and whether it reads our targets file (else the peers')."""
    table: dict[str, tuple[Scraper, bool]] = {
        "collector": (ours, True),
        "vmagent": (peer, False),
        "prometheus": (prometheus, False),
    }
    if BEFORE:
        return {"before": (partial(ours, tree=Path(BEFORE).resolve()), True), **table}
    return table


def run() -> dict[str, Any]:
    """Every scraper over the same monitors, in rounds; write ``<STEM>.json`` and ``<STEM>.md``."""
    began = time.monotonic()
    load_before = [round(x, 2) for x in os.getloadavg()]
    monitors = start_monitors(NODES, CARDS, ALLOCATIONS, INTERVAL)
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
            work = Path(tmp)
            files = write_targets(work, monitors)
            table = scrapers()
            for number in range(ROUNDS):
                names = list(table) if number % 2 == 0 else list(reversed(table))
                done = {}
                for name in names:
                    fn, own = table[name]
                    done[name] = phase(name, fn, work, files[0] if own else files[1], monitors)
                rounds.append(done)
        monitors_cpu = cpu_seconds(monitors.process.pid)
        monitors_rss = memory_mib(monitors.process.pid)["VmRSS"]
    finally:
        stop(monitors.process)
    results = judge(rounds, monitors.nodes)
    results.update(
        load_average_before=load_before,
        wall_s=round(time.monotonic() - began, 1),
        stem=STEM,
        monitors_process={"cpu_s": round(monitors_cpu, 1), "rss_mib": round(monitors_rss, 1)},
    )
    write_result(STEM, markdown(results), results)
    return results


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One scraper's rounds as one: medians over every measured interval, the last checks."""
    intervals = [i for run in runs for i in run["intervals"]]
    out = summarise(intervals, max(run["rss_peak_mib"] for run in runs))
    out["cpu_us_per_sample_by_round"] = [run["cpu_us_per_sample"] for run in runs]
    for key in ("freshness", "targets_up_with_node", "sink_cpu_s_while_measured",
                "load_average_after"):  # fmt: skip
        if key in runs[-1]:
            out[key] = runs[-1][key]
    if "freshness" in runs[0]:
        out["every_round_fresh"] = all(run["freshness"]["every_node_fresh"] for run in runs)
    if "every_target_up_with_node" in runs[0]:
        out["every_target_up_with_node"] = all(run["every_target_up_with_node"] for run in runs)
    return out


def ratios(rounds: list[dict[str, dict[str, Any]]], ours_: str, peer_: str) -> list[float]:
    """``ours_``'s CPU per sample over ``peer_``'s, within each round."""
    return [round(r[ours_]["cpu_us_per_sample"] / r[peer_]["cpu_us_per_sample"], 3) for r in rounds]


def judge(rounds: list[dict[str, dict[str, Any]]], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures against the goals, and the ratios to the peers (medians of in-round ratios)."""
    by_name = {name: pooled([r[name] for r in rounds]) for name in rounds[0]}
    collector = by_name["collector"]
    pairs = [("collector", "vmagent"), ("collector", "prometheus"), ("before", "vmagent"),
             ("before", "prometheus"), ("collector", "before")]  # fmt: skip
    by_round = {f"{a}/{b}": ratios(rounds, a, b) for a, b in pairs if a in by_name and b in by_name}
    ratio = statistics.median(by_round["collector/vmagent"])
    samples = [n["samples"] for n in nodes]
    return {
        "nodes": NODES,
        "cards_per_node": CARDS,
        "allocations_per_node": ALLOCATIONS,
        "samples_per_node_median": statistics.median(samples),
        "samples_per_round": sum(samples),
        "interval_s": INTERVAL,
        "warmup_intervals": WARMUP_INTERVALS,
        "measured_intervals": MEASURED_INTERVALS,
        "rounds": len(rounds),
        "kept_up_share": KEPT_UP,
        **by_name,
        "ratio_cpu_per_sample_vs_vmagent": round(ratio, 2),
        "ratio_cpu_per_sample_vs_prometheus": round(
            statistics.median(by_round["collector/prometheus"]), 2
        ),
        "ratios_by_round": by_round,
        "goals": {"cores": GOAL_CORES, "rss_mib": GOAL_RSS_MIB, "ratio": GOAL_RATIO},
        "collector_kept_up": collector["scrapes_per_interval"] >= KEPT_UP * NODES,
        "meets_cores": collector["cores"] <= GOAL_CORES,
        "meets_rss": collector["rss_peak_mib"] <= GOAL_RSS_MIB,
        "meets_fresh": collector["every_round_fresh"],
        "meets_ratio": ratio <= GOAL_RATIO,
    }
