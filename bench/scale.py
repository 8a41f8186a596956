"""Thousands of monitors pulled by one collector, beside vmagent 1.79 on the same targets.

Why: the issue's goal is 5,000 nodes pulled every 15 s by one collector within
1 core and 3 GiB RSS (default history), every node fresh, and a CPU cost per
scraped sample no higher than vmagent's, the scraper an operator would run
instead (with relabelling to add ``node``).

Set-up, all on loopback:

* monitors: one process (:mod:`bench.farm`) serves every simulated node's
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
  timeout, remote-writing to an accept-all receiver (``bench.remote``'s sink).

The two scrapers run one after the other against the same monitor process.
Each gets :data:`WARMUP_INTERVALS` intervals to settle, then
:data:`MEASURED_INTERVALS` intervals are measured one by one (CPU from
``/proc/PID/stat``, RSS, samples the monitors served); medians are reported.
Then freshness: for ours, every node has series on ``/metrics`` and its
source is up with a success within two intervals; for vmagent, every target is
up with a ``node`` label (``/api/v1/targets``).
"""

from __future__ import annotations

import itertools
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.farm import Monitors, start_monitors
from bench.processes import cpu_seconds, memory_mib, stop
from collector.demo.run import collector_flavour
from collector.settings import CollectorSettings

NODES = int(os.environ.get("BENCH_SCALE_NODES", "5000"))
"""Simulated monitors (``BENCH_SCALE_NODES`` lowers it when the machine cannot serve them)."""
CARDS = int(os.environ.get("BENCH_SCALE_CARDS", "2"))
ALLOCATIONS = int(os.environ.get("BENCH_SCALE_ALLOCATIONS", "8"))
"""Cards and vGPU allocations per node (~44 series; the demo's full node, 8 and 28, has ~190)."""
INTERVAL = float(os.environ.get("BENCH_SCALE_INTERVAL", "15"))
WARMUP_INTERVALS = 2
MEASURED_INTERVALS = int(os.environ.get("BENCH_SCALE_INTERVALS", "4"))
STARTUP_TIMEOUT = 120.0
GOAL_CORES = 1.0
GOAL_RSS_MIB = 3 * 1024.0
GOAL_RATIO = 1.0
"""Our CPU per scraped sample over vmagent's, at most."""
HISTORY_POINTS: int = CollectorSettings.model_fields["history_max_points"].default
"""The default ``--history-max-points``."""
HISTORY_BYTES = 33.0
"""Bytes per kept history point with its series keys (``foundation.md``, query bench: 32.7)."""
KEPT_UP = 0.98
"""Share of the targets a scraper must scrape in each interval (jitter aside) to keep up."""
VMAGENT = Path(__file__).resolve().parent.parent / ".tools/victoria-metrics/usr/bin/vmagent"
RESULTS = Path(__file__).resolve().parent / "results"
STEM = os.environ.get("BENCH_SCALE_RESULT", "scale")
"""Results go to ``bench/results/<STEM>.json`` and ``.md`` (another stem keeps a second shape)."""
SELF = b"hami_usage_collector_"


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


def ours(work: Path, targets: Path, monitors: Monitors) -> dict[str, Any]:
    """The collector pulling every monitor: figures and freshness."""
    port, held = reserve()
    args = [sys.executable, "-m", "collector", "serve", "--no-kubernetes",
            f"--targets-file={targets}", f"--listen=127.0.0.1:{port}", "--log-level=warning",
            f"--interval={INTERVAL:g}"]  # fmt: skip
    with (work / "collector.log").open("wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log)
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
            "global": {"scrape_interval": f"{INTERVAL:g}s", "scrape_timeout": "10s"},
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
    sink = subprocess.Popen([sys.executable, "-m", "bench.remote", "sink"], stdout=subprocess.PIPE)
    processes = [sink]
    try:
        assert sink.stdout is not None
        ready, _, _ = select.select([sink.stdout], [], [], STARTUP_TIMEOUT)
        if not ready:
            raise RuntimeError("the remote-write sink did not start")
        sink_port = int(sink.stdout.readline())
        port, held = reserve()
        held.close()  # vmagent does not bind with SO_REUSEADDR; a port just freed is taken at once
        args = [str(VMAGENT), f"-promscrape.config={config}",
                f"-remoteWrite.url=http://127.0.0.1:{sink_port}/api/v1/write",
                f"-remoteWrite.tmpDataPath={work / 'vmagent-data'}",
                f"-httpListenAddr=127.0.0.1:{port}", "-loggerLevel=ERROR",
                "-promscrape.suppressScrapeErrors"]  # fmt: skip
        with (work / "vmagent.log").open("wb") as log:
            vm = subprocess.Popen(args, stdout=log, stderr=log)
        processes.append(vm)
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base + "/health", vm)
        sink_cpu = cpu_seconds(sink.pid)
        figures = measure(vm, monitors)
        targets_up = json.loads(get(base + "/api/v1/targets"))["data"]["activeTargets"]
        labelled = {t["labels"].get("node") for t in targets_up if t["health"] == "up"}
        sink_cpu = cpu_seconds(sink.pid) - sink_cpu
    finally:
        for process in reversed(processes):
            stop(process)
    expected = {n["node"] for n in monitors.nodes}
    return {
        **figures,
        "targets_up_with_node": len(expected & labelled),
        "every_target_up_with_node": expected <= labelled,
        "sink_cpu_s_while_measured": round(sink_cpu, 1),
    }


def phase(
    name: str, fn: Callable[[Path, Path, Monitors], dict[str, Any]], *args: Any
) -> dict[str, Any]:
    print(f"scale: {name} ...", file=sys.stderr, flush=True)
    result = fn(*args)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(f"scale: {name}: {json.dumps(result)}", file=sys.stderr, flush=True)
    return result


def run() -> dict[str, Any]:
    """Both scrapers over the same monitors; write ``<STEM>.json`` and ``<STEM>.md``."""
    began = time.monotonic()
    load_before = [round(x, 2) for x in os.getloadavg()]
    monitors = start_monitors(NODES, CARDS, ALLOCATIONS, INTERVAL)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
            work = Path(tmp)
            targets, peer_targets = write_targets(work, monitors)
            collector = phase("collector", ours, work, targets, monitors)
            vmagent = phase("vmagent", peer, work, peer_targets, monitors)
        monitors_cpu = cpu_seconds(monitors.process.pid)
        monitors_rss = memory_mib(monitors.process.pid)["VmRSS"]
    finally:
        stop(monitors.process)
    results = judge(collector, vmagent, monitors.nodes)
    results.update(
        load_average_before=load_before,
        wall_s=round(time.monotonic() - began, 1),
        monitors_process={"cpu_s": round(monitors_cpu, 1), "rss_mib": round(monitors_rss, 1)},
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{STEM}.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / f"{STEM}.md").write_text(markdown(results))
    return results


def judge(
    collector: dict[str, Any], vmagent: dict[str, Any], nodes: list[dict[str, Any]]
) -> dict[str, Any]:
    """The figures against the goals, and the ratio to vmagent."""
    ratio = collector["cpu_us_per_sample"] / vmagent["cpu_us_per_sample"]
    samples = [n["samples"] for n in nodes]
    return {
        "nodes": NODES,
        "cards_per_node": CARDS,
        "allocations_per_node": ALLOCATIONS,
        "samples_per_node_median": statistics.median(samples),
        "samples_per_round": sum(samples),
        "interval_s": INTERVAL,
        "measured_intervals": MEASURED_INTERVALS,
        "collector": collector,
        "vmagent": vmagent,
        "ratio_cpu_per_sample_vs_vmagent": round(ratio, 2),
        "goals": {"cores": GOAL_CORES, "rss_mib": GOAL_RSS_MIB, "ratio": GOAL_RATIO},
        "collector_kept_up": collector["scrapes_per_interval"] >= KEPT_UP * NODES,
        "meets_cores": collector["cores"] <= GOAL_CORES,
        "meets_rss": collector["rss_peak_mib"] <= GOAL_RSS_MIB,
        "meets_fresh": collector["freshness"]["every_node_fresh"],
        "meets_ratio": ratio <= GOAL_RATIO,
    }


def markdown(r: dict[str, Any]) -> str:
    """``scale.md``: the set-up, the figures next to the goals, and each interval."""
    c, v, f = r["collector"], r["vmagent"], r["collector"]["freshness"]
    kept_up = c["scrapes_per_interval"] >= KEPT_UP * r["nodes"]

    def mark(ok: bool) -> str:
        return "yes" if ok else "NO"

    rows = [
        ("collector CPU (median of intervals)", f"{c['cores']:.3f} cores",
         f"<= {GOAL_CORES:g} core, every target scraped", mark(r["meets_cores"] and kept_up)),
        ("collector RSS (peak)", f"{c['rss_peak_mib']:,.0f} MiB",
         f"<= {GOAL_RSS_MIB:,.0f} MiB", mark(r["meets_rss"])),
        ("scrapes per interval: collector / vmagent",
         f"{c['scrapes_per_interval']:,.0f} / {v['scrapes_per_interval']:,.0f} of "
         f"{r['nodes']:,}", f"{r['nodes']:,} each",
         mark(kept_up and v["scrapes_per_interval"] >= KEPT_UP * r["nodes"])),
        ("every node fresh (series on /metrics, source up, success within 2 intervals)",
         f"{f['fresh']:,} of {f['nodes']:,}", "all", mark(r["meets_fresh"])),
        ("CPU per scraped sample: collector / vmagent 1.79",
         f"{c['cpu_us_per_sample']:.2f} / {v['cpu_us_per_sample']:.2f} us = "
         f"{r['ratio_cpu_per_sample_vs_vmagent']:.2f}x",
         f"<= {GOAL_RATIO:g}x", mark(r["meets_ratio"])),
    ]  # fmt: skip
    lines = [
        "# Scale: one collector pulling every monitor, beside vmagent",
        "",
        f"{r['nodes']:,} simulated monitors ({r['cards_per_node']} cards, "
        f"{r['allocations_per_node']} vGPU allocations a node: median "
        f"{r['samples_per_node_median']:,.0f} samples a body, {r['samples_per_round']:,} a "
        f"round; the demo's exact upstream expositions, every flavour) served by one process "
        f"on 127.x addresses, pulled every {r['interval_s']:g} s by one collector "
        "(`--no-kubernetes --targets-file`, default history), then by vmagent 1.79 "
        "(file_sd + relabelling to add `node`, remote write to an accept-all receiver). "
        f"Medians of {r['measured_intervals']} intervals after "
        f"{WARMUP_INTERVALS} of warm-up. 2 shared CPUs: load average "
        f"{', '.join(map(str, r['load_average_before']))} before, "
        f"{', '.join(map(str, v['load_average_after']))} after; {r['wall_s']:g} s in all. "
        "See `bench/scale.py`.",
        "",
        "| figure | measured | goal | meets goal |",
        "| --- | --- | --- | --- |",
        *(f"| {a} | {b} | {g} | {ok} |" for a, b, g, ok in rows),
        "",
        "| per interval (median) | collector | vmagent 1.79 |",
        "| --- | --- | --- |",
        f"| CPU, cores | {c['cores']:.3f} | {v['cores']:.3f} |",
        f"| RSS, MiB (max of intervals / peak) | {c['rss_mib']:,.0f} / {c['rss_peak_mib']:,.0f} "
        f"| {v['rss_mib']:,.0f} / {v['rss_peak_mib']:,.0f} |",
        f"| scrapes served | {c['scrapes_per_interval']:,.0f} | {v['scrapes_per_interval']:,.0f} |",
        f"| samples served | {c['samples_per_interval']:,.0f} | {v['samples_per_interval']:,.0f} |",
        f"| CPU per scraped sample, us | {c['cpu_us_per_sample']:.3f} | "
        f"{v['cpu_us_per_sample']:.3f} |",
        f"| monitor process, cores | {c['monitors_cores']:.3f} | {v['monitors_cores']:.3f} |",
        f"| freshness | {f['fresh']:,} of {f['nodes']:,} nodes fresh; /metrics "
        f"{f['page_bytes'] / 1e6:.0f} MB | {v['targets_up_with_node']:,} targets up with "
        "`node` |",
        "",
        f"RSS is taken {r['wall_s'] / 60:.0f} minutes into the run, before the default history "
        f"is full: its cap ({HISTORY_POINTS / 1e6:.0f}M points, at most ~{HISTORY_BYTES:.0f} B a "
        f"point with series keys, as measured by the query bench) bounds what it adds to "
        f"~{HISTORY_POINTS * HISTORY_BYTES / 2**20:,.0f} MiB, so the steady RSS here stays under "
        f"{c['rss_peak_mib'] + HISTORY_POINTS * HISTORY_BYTES / 2**20:,.0f} MiB. "
        "vmagent's CPU excludes the receiver's "
        f"({v['sink_cpu_s_while_measured']} CPU-s while measured). The monitors are charged "
        "to nobody: each scraper's samples are those the monitor process counted as served "
        f"while it was measured. Details and every interval: `{STEM}.json`.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
