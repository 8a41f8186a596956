"""``scale.md``: the scale bench's set-up, its figures next to the goals, each scraper and round."""

from __future__ import annotations

from typing import Any

from collector.settings import CollectorSettings

HISTORY_POINTS: int = CollectorSettings.model_fields["history_max_points"].default
"""The default ``--history-max-points``."""
HISTORY_BYTES = 33.0
"""Bytes per kept history point with its series keys (``foundation.md``, query bench: 32.7)."""
TITLES = {
    "collector": "collector",
    "before": "collector before",
    "vmagent": "vmagent 1.79",
    "prometheus": "Prometheus 2.42",
}


def _mark(ok: bool) -> str:
    return "yes" if ok else "NO"


def _goal_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    c, v, p, f = r["collector"], r["vmagent"], r["prometheus"], r["collector"]["freshness"]
    goals, nodes = r["goals"], r["nodes"]
    kept_up = c["scrapes_per_interval"] >= r["kept_up_share"] * nodes
    peers_kept_up = all(x["scrapes_per_interval"] >= r["kept_up_share"] * nodes for x in (v, p))
    return [
        ("collector CPU (median of intervals)", f"{c['cores']:.3f} cores",
         f"<= {goals['cores']:g} core, every target scraped", _mark(r["meets_cores"] and kept_up)),
        ("collector RSS (peak)", f"{c['rss_peak_mib']:,.0f} MiB",
         f"<= {goals['rss_mib']:,.0f} MiB", _mark(r["meets_rss"])),
        ("scrapes per interval: collector / vmagent / Prometheus",
         f"{c['scrapes_per_interval']:,.0f} / {v['scrapes_per_interval']:,.0f} / "
         f"{p['scrapes_per_interval']:,.0f} of {nodes:,}", f"{nodes:,} each",
         _mark(kept_up and peers_kept_up)),
        ("every node fresh (series on /metrics, source up, success within 2 intervals)",
         f"{f['fresh']:,} of {f['nodes']:,}" + ("" if r["rounds"] == 1 else
                                                 ", every round" if r["meets_fresh"] else
                                                 ", NOT every round"),
         "all", _mark(r["meets_fresh"])),
        ("CPU per scraped sample: collector / vmagent 1.79",
         f"{c['cpu_us_per_sample']:.2f} / {v['cpu_us_per_sample']:.2f} us; "
         f"{r['ratio_cpu_per_sample_vs_vmagent']:.2f}x", f"<= {goals['ratio']:g}x",
         _mark(r["meets_ratio"])),
        ("CPU per scraped sample: collector / Prometheus 2.42",
         f"{c['cpu_us_per_sample']:.2f} / {p['cpu_us_per_sample']:.2f} us; "
         f"{r['ratio_cpu_per_sample_vs_prometheus']:.2f}x", "-", "-"),
    ]  # fmt: skip


def _scraper_rows(r: dict[str, Any], names: list[str]) -> list[str]:
    def row(label: str, cell: Any) -> str:
        return f"| {label} | " + " | ".join(cell(r[n]) for n in names) + " |"

    def fresh(x: dict[str, Any]) -> str:
        if "freshness" in x:
            f = x["freshness"]
            return f"{f['fresh']:,} of {f['nodes']:,} nodes fresh; /metrics {f['page_bytes'] / 1e6:.0f} MB"
        return f"{x['targets_up_with_node']:,} targets up with `node`"

    return [
        "| per interval (median) | " + " | ".join(TITLES[n] for n in names) + " |",
        "| --- |" + " --- |" * len(names),
        row("CPU, cores", lambda x: f"{x['cores']:.3f}"),
        row("RSS, MiB (max of intervals / peak)",
            lambda x: f"{x['rss_mib']:,.0f} / {x['rss_peak_mib']:,.0f}"),
        row("scrapes served", lambda x: f"{x['scrapes_per_interval']:,.0f}"),
        row("samples served", lambda x: f"{x['samples_per_interval']:,.0f}"),
        row("CPU per scraped sample, us", lambda x: f"{x['cpu_us_per_sample']:.3f}"),
        row("same, each round, us",
            lambda x: ", ".join(f"{v:.2f}" for v in x["cpu_us_per_sample_by_round"])),
        row("monitor process, cores", lambda x: f"{x['monitors_cores']:.3f}"),
        row("freshness", fresh),
    ]  # fmt: skip


def markdown(r: dict[str, Any]) -> str:
    """The report of one run of :func:`bench.scale.run`."""
    c, v = r["collector"], r["vmagent"]
    names = [n for n in TITLES if n in r]
    order = ", ".join(TITLES[n] for n in names)
    lines = [
        "# Scale: one collector pulling every monitor, beside vmagent and Prometheus",
        "",
        f"{r['nodes']:,} simulated monitors ({r['cards_per_node']} cards, "
        f"{r['allocations_per_node']} vGPU allocations a node: median "
        f"{r['samples_per_node_median']:,.0f} samples a body, {r['samples_per_round']:,} a "
        f"round; the demo's exact upstream expositions, every flavour) served by one process "
        f"on 127.x addresses, pulled every {r['interval_s']:g} s by one collector "
        "(`--no-kubernetes --targets-file`, default history), by vmagent 1.79 "
        "(file_sd + relabelling to add `node`, remote write to an accept-all receiver) and "
        "by Prometheus 2.42 (the same scrape configuration, its own TSDB), one after the "
        f"other ({order}), in {r['rounds']} round(s), the order reversed in every other "
        f"round. Medians of {r['measured_intervals']} intervals a round after "
        f"{r['warmup_intervals']} of warm-up; each ratio is the median of the ratios taken "
        "within one round. 2 shared CPUs: load average "
        f"{', '.join(map(str, r['load_average_before']))} before, "
        f"{', '.join(map(str, v['load_average_after']))} after vmagent; {r['wall_s']:g} s in "
        "all. See `bench/scale/run.py`.",
        "",
        "| figure | measured | goal | meets goal |",
        "| --- | --- | --- | --- |",
        *(f"| {a} | {b} | {g} | {ok} |" for a, b, g, ok in _goal_rows(r)),
        "",
        *_scraper_rows(r, names),
        "",
        "| ratio of CPU per scraped sample, each round | "
        + " | ".join(f"round {i + 1}" for i in range(r["rounds"]))
        + " |",
        "| --- |" + " --- |" * r["rounds"],
        *(
            f"| {pair} | " + " | ".join(f"{x:.2f}x" for x in values) + " |"
            for pair, values in r["ratios_by_round"].items()
        ),
        "",
        f"RSS is taken {r['wall_s'] / 60:.0f} minutes into the run, before the default history "
        f"is full: its cap ({HISTORY_POINTS / 1e6:.0f}M points, at most ~{HISTORY_BYTES:.0f} B a "
        f"point with series keys, as measured by the query bench) bounds what it adds to "
        f"~{HISTORY_POINTS * HISTORY_BYTES / 2**20:,.0f} MiB, so the steady RSS here stays under "
        f"{c['rss_peak_mib'] + HISTORY_POINTS * HISTORY_BYTES / 2**20:,.0f} MiB. "
        "vmagent's CPU excludes the receiver's "
        f"({v['sink_cpu_s_while_measured']} CPU-s while measured). The monitors are charged "
        "to nobody: each scraper's samples are those the monitor process counted as served "
        f"while it was measured. Details and every interval: `{r['stem']}.json`.",
        "",
    ]
    return "\n".join(lines)
