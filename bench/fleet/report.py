"""Summary rows of the cluster-scale benches: push, agent, status page, shards, remote write, scale."""

from __future__ import annotations

from typing import Any

from bench.kit.table import Row, figure, mark, rate


def scale_rows(s: dict[str, Any]) -> list[Row]:
    """One collector pulling every monitor, beside vmagent and Prometheus (also in ``scale.md``)."""
    c, v = s["collector"], s["vmagent"]
    pulled = f"{s['nodes']:,} monitors pulled every {s['interval_s']:g} s"
    return [
        Row(
            f"{pulled}: collector CPU / RSS peak",
            f"{c['cores']:.2f} cores / {c['rss_peak_mib']:,.0f} MiB",
            f"<= {s['goals']['cores']:g} core, <= {s['goals']['rss_mib']:,.0f} MiB",
            f"vmagent {v['cores']:.2f} cores / {v['rss_peak_mib']:,.0f} MiB",
            "-",
            mark(s["meets_cores"] and s["meets_rss"] and s["meets_fresh"]),
        ),
        Row(
            f"{pulled}: CPU per scraped sample",
            f"{c['cpu_us_per_sample']:.2f} us",
            f"<= vmagent 1.79's ({s['goals']['ratio']:g}x)",
            f"vmagent 1.79 {v['cpu_us_per_sample']:.2f} us",
            f"{s['ratio_cpu_per_sample_vs_vmagent']:.2f}x",
            mark(s["meets_ratio"]),
        ),
        Row(
            f"{pulled}: CPU per scraped sample, beside Prometheus",
            f"{c['cpu_us_per_sample']:.2f} us",
            "-",
            f"Prometheus 2.42 {s['prometheus']['cpu_us_per_sample']:.2f} us",
            f"{s['ratio_cpu_per_sample_vs_prometheus']:.2f}x",
            "-",
        ),
    ]


def remote_rows(r: dict[str, Any]) -> list[Row]:
    """Remote write: per core into an accept-all receiver; end to end into VictoriaMetrics."""
    sent, peer = r["throughput"]["sent"], r["throughput"]["render_peer"]
    vm = r["victoria_metrics"]
    bulk, outage = vm["bulk"], vm["outage"]
    return [
        Row(
            "remote write samples per sender core-second (accept-all receiver)",
            rate(sent["samples_per_cpu_second"]),
            f">= {rate(r['goal_samples_per_cpu_second'])} per core",
            f"/metrics text of the same samples {rate(peer['samples_per_cpu_second'])}/core",
            f"{r['ratio_to_render_peer']:.2f}x",
            mark(r["meets_goal"]),
        ),
        figure(
            "remote write into VictoriaMetrics 1.79, bulk",
            f"{rate(bulk['samples_per_second'])} wall, {rate(bulk['samples_per_cpu_second'])} "
            f"per sender core; VictoriaMetrics {vm['victoria_cpu_seconds']:.1f} CPU-s in all",
        ),
        Row(
            f"VictoriaMetrics down {outage['outage_seconds']:g} s at "
            f"{outage['offered_samples_per_second']:,}/s offered",
            f"peak queue {outage['peak_pending']:,}, dropped {outage['dropped']:,}, "
            f"drained {outage['drain_seconds_after_last_round']:g} s after the last round; "
            f"VictoriaMetrics holds {vm['victoria_holds']:,.0f} of {vm['sent']:,} sent",
            "nothing lost within the queue bound",
            "-",
            "-",
            mark(vm["lost"] == 0 and outage["dropped"] == 0),
        ),
    ]


def push_rows(p: dict[str, Any]) -> list[Row]:
    """The push API under 5,000 agents."""
    pull, paced, seen = p["peer_pull"], p["paced"], p["visible"]
    goal_core = p["goal_accepted_per_core_s"]
    return [
        Row(
            f"push accepted per collector core-second ({p['nodes']:,} agents, steady)",
            rate(p["accepted_per_collector_core_s"]),
            f">= {rate(goal_core)} per core",
            f"pull path {pull['us_median']:,.0f} us/node-snapshot in process",
            f"push {p['push_http_us_per_snapshot']:,.0f} us = "
            f"{p['ratio_push_http_vs_pull']:.1f}x pull",
            mark(p["accepted_per_collector_core_s"] >= goal_core),
        ),
        Row(
            f"push first round (every node new), in {p['fill']['seconds']:.0f} s",
            f"{p['nodes_in_store']:,} of {p['nodes']:,} nodes; "
            f"{p['cold_accepted_per_collector_core_s']:,.0f}/core-s",
            f"all {p['nodes']:,}",
            "-",
            "-",
            mark(p["nodes_in_store"] == p["nodes"]),
        ),
        Row(
            f"push accept latency p50 / p99 at {p['offered_per_s']:,.0f}/s offered",
            f"{paced['latency_p50_ms']:,.1f} / {paced['latency_p99_ms']:,.1f} ms"
            + (
                f"; {paced['not_sent']:,} pushes not sent in the window (counts as missed)"
                if paced["not_sent"]
                else ""
            ),
            f"p99 <= {p['goal_accept_p99_ms']:.0f} ms",
            f"at {p['offered_per_s'] / 2:,.0f}/s: {p['light']['latency_p99_ms']:,.1f} ms p99",
            "-",
            mark(p["accept_p99_ms"] <= p["goal_accept_p99_ms"]),
        ),
        Row(
            "push-to-visible on gzip /metrics p50 / p99 (page built)",
            f"{seen['visible_p50_ms']:,.0f} / {p['visible_p99_ms']:,.0f} ms",
            f"p99 <= {p['goal_visible_p99_ms']:.0f} ms",
            f"push to found by a full gzip read: {seen['full_read_ms_median']:,.0f} ms",
            "-",
            mark(p["visible_p99_ms"] <= p["goal_visible_p99_ms"]),
        ),
    ]


def agent_rows(a: dict[str, Any]) -> list[Row]:
    """The agent's footprint on one node."""
    process, fake = a["process"], a["snapshot_with_fake_nvml"]
    return [
        Row(
            f"agent CPU, % of one core ({a['cards']} cards, {a['regions']} regions, "
            f"{a['interval_s']:g} s interval)",
            f"{a['core_percent']:.3f}%",
            f"< {a['goal_core_percent']:g}%",
            f"snapshot+gzip in process, fake NVML: {fake['snapshot_and_gzip_ms']:.1f} ms",
            "-",
            mark(a["core_percent"] < a["goal_core_percent"]),
        ),
        Row(
            "agent RSS (peak)",
            f"{a['rss_mib']:.1f} MiB ({process['rss_mib_peak']:.1f})",
            f"< {a['goal_rss_mib']:g} MiB",
            f"bare python {process['bare_python_rss_mib']:.1f} MiB",
            f"{a['rss_mib'] / process['bare_python_rss_mib']:.1f}x",
            mark(a["rss_mib"] < a["goal_rss_mib"]),
        ),
        *attributed_rows(a),
    ]


def attributed_rows(a: dict[str, Any]) -> list[Row]:
    """The agent with per-process attribution on; none for a result from before it was measured."""
    if "attributed_process" not in a:
        return []
    process, snap = a["attributed_process"], a["attributed_snapshot"]
    apart = a["attributed_kubelet_apart"]
    server = apart["peers"]["kubelet"]
    node = f"{a['cards']} cards x {a['attributed_processes'] // a['cards']} processes"
    return [
        Row(
            f"agent CPU with attribution, % of one core ({node}, {a['regions']} regions; "
            "kubelet server inside)",
            f"{a['attributed_core_percent']:.3f}%",
            f"<= {a['goal_attributed_core_percent']:g}%",
            f"server apart: agent {apart['core_percent']:.3f}% + server "
            f"{server['core_percent']:.3f}%; snapshot+gzip in process "
            f"{snap['snapshot_and_gzip_ms']:.1f} ms, {snap['cgroup_reads_per_snapshot_steady']:g} "
            "cgroup reads",
            f"{a['attributed_core_percent'] / a['core_percent']:.1f}x no NVML",
            mark(a["attributed_core_percent"] <= a["goal_attributed_core_percent"]),
        ),
        Row(
            "agent RSS with attribution (peak; kubelet server inside)",
            f"{a['attributed_rss_mib']:.1f} MiB ({process['rss_mib_peak']:.1f})",
            f"<= {a['goal_attributed_rss_mib']:g} MiB",
            f"server apart: agent {apart['rss_mib']:.1f} MiB, server {server['rss_mib']:.1f} MiB",
            f"{a['attributed_rss_mib'] / a['rss_mib']:.1f}x no NVML",
            mark(a["attributed_rss_mib"] <= a["goal_attributed_rss_mib"]),
        ),
    ]


def status_rows(s: dict[str, Any]) -> list[Row]:
    """The status page's work per request, beside the same page without pagination."""
    peer = s["peer_all_rows"]
    return [
        figure(
            f"status page GET / at {s['nodes']:,} nodes ({s['sources']:,} sources), {label}: "
            "CPU p50 (wall p50 / p99)",
            f"{p['cpu_p50_ms']:.0f} ms ({p['p50_ms']:.0f} / {p['p99_ms']:.0f} ms)",
            f"every source on one page: {peer['cpu_p50_ms']:.0f} ms CPU",
            f"{peer['cpu_p50_ms'] / p['cpu_p50_ms']:.0f}x less",
        )
        for p, label in ((s["first_page"], "first page"), (s["failing_page_3"], "failing, page 3"))
    ]


def shards_rows(s: dict[str, Any]) -> list[Row]:
    """Nodes over shards x replicas, and a replica killed mid-run (also in ``shards.md``)."""
    layout = f"{s['nodes']:,} nodes, {s['shards']} shards x {s['replicas']} replicas"
    placed = s["every_node_in_exactly_one_shard"] and s["replicas_hold_the_same_nodes"]
    kept = s["peers_hold_every_round"] and s["restarted_holds_every_round_since_the_kill"]
    down = [d["delivered_to_live_replicas_s"] for d in s["delivery"] if d["replica_down"]]
    up = [d["delivered_to_live_replicas_s"] for d in s["delivery"][:1]]
    return [
        Row(
            f"{layout}: every node in exactly one shard",
            ", ".join(f"{n:,}" for n in s["nodes_per_shard"].values()) + " nodes per shard",
            "each node once",
            "-",
            "-",
            mark(placed and s["placement_agrees_with_the_hash"]),
        ),
        Row(
            f"{layout}: replica {s['killed']} killed for {len(down)} rounds",
            f"peers hold {s['rounds']}/{s['rounds']} rounds of every node; restarted one "
            f"replayed in {s['replay_after_restart_s']} s",
            "no pushed interval lost",
            f"round to live replicas: {up[0]} s all up, {max(down)} s one down",
            "-",
            mark(kept and s["each_series_once_per_replica"]),
        ),
    ]
