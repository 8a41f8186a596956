"""Differential test: our PromQL evaluator against a real Prometheus 2.42 on the same data.

A deterministic dataset (about 35 series over 40 minutes at 15 s) is written as
OpenMetrics, imported with ``promtool tsdb create-blocks-from openmetrics``,
and served by a real ``prometheus`` on loopback. Every query runs as instant
queries at several times and as one range query, through Prometheus' HTTP API
and through :mod:`collector.promql.query` over an in-memory copy of the
same samples; label sets must match exactly, values within 1e-9 relative.
(promtool cannot write staleness markers: staleness is covered in test_promql.)
"""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import prometheus_tool, real_prometheus
from test_promql import MemoryStorage

from collector.promql.query import instant_query, prepare_instant, prepare_range, range_query
from collector.promql.values import Element, QueryError, RangeSeries, Scalar, String
from collector.remote.encode import (
    HEADERS,
    compress,
    encode_labels,
    samples,
    series_head,
    timestamp_tail,
)
from collector.web.promjson import instant_body, matrix_body

BASE = 1_700_000_000  # 2023-11-14T22:13:20Z
SPAN = 40 * 60
INTERVAL = 15

# Instant evaluation times: the first sample, unaligned, exactly lookback after
# the early series ends (still there in 2.x), a millisecond later (gone), the
# last sample, inside the lookback after the end, and past it (empty).
INSTANT_TIMES = [
    BASE,
    BASE + 607.5,
    BASE + 1200 + 300,
    BASE + 1500.001,
    BASE + SPAN,
    BASE + SPAN + 240,
    BASE + SPAN + 360,
]
RANGE = (BASE - 60, BASE + SPAN + 360, 37)

USED = "hami_vgpu_memory_used_bytes"
LIMIT = "hami_vgpu_memory_limit_bytes"
UTIL = "hami_container_device_utilization_ratio"
HOST_USED = "hami_host_gpu_memory_used_bytes"
HOST_LIMIT = "hami_gpu_memory_limit_bytes"
LAUNCHES = "hami_vgpu_kernel_launches_total"
HIST = "hami_kernel_duration_seconds_bucket"

# (query, ordered): ordered results are compared in order (sort, topk, ...).
QUERIES: list[tuple[str, bool]] = [
    (USED, False),
    (f'{USED}{{namespace=~"ml|web"}}', False),
    (f'{USED}{{namespace!="ml", node=~"node-.*"}}', False),
    (f'{UTIL}{{pod!~"pod-[01]"}}', False),
    (f"100 * {USED} / {LIMIT}", False),
    (f"topk(3, {USED})", True),
    (f"bottomk(2, {UTIL})", True),
    (f"topk by (node) (2, {USED})", True),
    (f'{HOST_USED} and on (device_uuid) {HOST_LIMIT}{{node=~"node-a|node-b"}}', False),
    (f"sum by (node) ({USED})", False),
    (f"sum without (pod, device_uuid) ({USED})", False),
    (f"count({USED})", False),
    (f"avg by (namespace) ({UTIL})", False),
    (f"min by (node) ({UTIL}) + max({UTIL})", False),
    (f"quantile(0.9, {UTIL})", False),
    (f"quantile by (node) (0.25, {USED})", False),
    (f"stddev by (node) ({UTIL}) - stdvar by (node) ({UTIL})", False),
    (f"group by (namespace) ({USED})", False),
    (f'count_values("util", round({UTIL}, 0.1))', False),
    (f'count_values without (pod) ("v", ceil({UTIL} * 4))', False),
    (f"avg_over_time({UTIL}[5m])", False),
    (f"max_over_time({UTIL}[10m]) - min_over_time({UTIL}[2m])", False),
    (f"sum_over_time({USED}[3m]) / count_over_time({USED}[3m])", False),
    (f"last_over_time({UTIL}[5m])", False),
    (f"quantile_over_time(0.75, {UTIL}[5m])", False),
    (f"stddev_over_time({USED}[5m]) + stdvar_over_time({UTIL}[5m])", False),
    (f"present_over_time({UTIL}[1m])", False),
    (f"rate({LAUNCHES}[5m])", False),
    (f"irate({LAUNCHES}[1m]) + increase({LAUNCHES}[10m])", False),
    (f"delta({USED}[5m])", False),
    (f"deriv({USED}[5m])", False),
    (f"sum by (node) (rate({LAUNCHES}[5m] offset 2m))", False),
    (f'label_replace({USED}, "short", "x-$1-${{1}}y", "device_uuid", "GPU-(.*)")', False),
    (f'label_join({HOST_USED}, "id", "/", "node", "device_uuid")', False),
    (f"{UTIL} > 0.5", False),
    (f"{UTIL} > bool 0.5", False),
    (f"0.5 <= {UTIL}", False),
    (f"{USED} >= on (node, namespace, pod, device_uuid) {LIMIT} * 0.5", False),
    (f"{USED} / on (node, device_uuid) group_left {HOST_USED}", False),
    (f"{HOST_LIMIT} - on (node, device_uuid) group_right {USED}", False),
    (f"{USED} != bool ignoring (pod) group_left (device_uuid) {HOST_USED}", False),
    (f"{USED} or {HOST_USED}", False),
    (f"{HOST_USED} unless on (device_uuid) {HOST_LIMIT}", False),
    ("absent(nope)", False),
    ('absent(nope{job="x", instance=~"y"})', False),
    (f"absent({USED})", False),
    (f"abs(-{USED}) - sqrt({USED})", False),
    (f"floor({UTIL} * 10) + exp({UTIL}) - ln({UTIL}) * log2({UTIL}) / log10({UTIL})", False),
    (f"clamp({UTIL}, 0.2, 0.8) + clamp_min({UTIL}, 0.3) - clamp_max({UTIL}, 0.6)", False),
    ("time()", False),
    ("1 + 1", False),
    ("2 ^ 3 ^ 2 - 7 % 3", False),
    ("vector(time()) - 5", False),
    (f"scalar(sum({USED})) / 1e9", False),
    (f"timestamp({UTIL})", False),
    (f"sort({USED})", True),
    (f"sort_desc({UTIL})", True),
    (f"{USED} offset 5m", False),
    (f"{UTIL} offset -3m", False),
    (f"-{USED} % 7", False),
    # errors both sides: many-to-many, one-to-one with many, grouping not unique
    (f"{USED} * on (node) {HOST_USED}", False),
    (f"{HOST_USED} * on (node) group_right {USED}", False),
    (f"{USED} + on (node, device_uuid) {HOST_USED}", False),
    (f'{{__name__=~"{USED}|{LIMIT}"}} / on (node, device_uuid) group_left {HOST_USED}', False),
    (f"{USED}[2m]", False),
    (f'count_values("bytes", {LIMIT})', False),
    (f'absent({USED}{{node="node-z"}})', False),
    (f"bottomk(1, sum by (node) ({USED})) + round({UTIL}) * 0", False),
    (f"round({USED} / 1e9, 0.25) % 3 ^ 0.5", False),
    (f"{USED} > bool on (node, namespace, pod, device_uuid) {LIMIT} / 2", False),
    (f"scalar({USED}) + -time()", False),
    (f"time() - timestamp({UTIL} offset 1m)", False),
    (f"delta({USED}[5m] offset 10m) / stddev({USED})", False),
    (f'last_over_time({{__name__=~"{USED}|{LIMIT}"}}[5m])', False),
    # the same labels from two names: "vector cannot contain metrics with the same labelset"
    (f'rate({{__name__=~"{USED}|{LIMIT}"}}[5m])', False),
    (f'-{{__name__=~"{USED}|{LIMIT}"}}', False),
    (f'{{__name__=~"{USED}|{LIMIT}"}} * 2', False),
    ('"hello"', False),
    # subqueries: the inner expression at its own aligned steps, then a range function
    (f"max_over_time(rate({LAUNCHES}[5m])[20m:1m])", False),
    (f"avg_over_time({UTIL}[10m:])", False),
    (f"sum_over_time(sum by (node) ({USED})[5m:30s] offset 2m)", False),
    (f"min_over_time(deriv({USED}[5m])[15m:1m])", False),
    (f"max_over_time(max_over_time({UTIL}[2m:30s])[10m:1m])", False),
    ("count_over_time(vector(time())[5m:45s])", False),
    (f"{USED}[10m:2m]", False),
    (f"max_over_time(ln({UTIL} - 0.5)[5m:1m])", False),
    (f"sum_over_time((1 / ({UTIL} - 0.5))[3m:20s]) + stddev_over_time(-{UTIL}[3m:20s])", False),
    # @: a fixed time, start(), end(), with offsets, in subqueries, and the quirks of 2.x
    (f"{USED} @ {BASE + 600}", False),
    (f"rate({LAUNCHES}[5m] @ {BASE + 1200}) - rate({LAUNCHES}[5m])", False),
    (f"{UTIL} @ start() + {UTIL} @ end()", False),
    (f"sum_over_time({USED}[5m] @ end() offset 1m)", False),
    (f"max_over_time(rate({LAUNCHES}[5m])[10m:1m] @ {BASE + 1800})", False),
    (f"timestamp({UTIL} @ {BASE + 900.5})", False),
    (f"timestamp({UTIL} @ {BASE + 900} offset 1m)", False),
    (f"predict_linear({USED}[10m] @ {BASE + 1500}, 600)", False),
    (f"minute({UTIL} @ {BASE + 1500} * 1000)", False),
    # range functions new to the engine
    (f"changes({UTIL}[5m]) + changes({LIMIT}[10m])", False),
    (f"resets({LAUNCHES}[10m])", False),
    (f"idelta({USED}[2m])", False),
    (f"predict_linear({USED}[10m], 3600)", False),
    (f"deriv({LIMIT}[5m]) + stddev_over_time({LIMIT}[5m])", False),
    (f"holt_winters({USED}[10m], 0.3, 0.6)", False),
    (f"holt_winters({UTIL}[5m], 1.5, 0.5)", False),
    (f"holt_winters({UTIL}[5m], 0.5, 0)", False),
    (f'absent_over_time({USED}{{node="node-c"}}[5m] offset 16m)', False),
    ('absent_over_time(nope{job="x"}[5m])', False),
    (f'absent_over_time({USED}{{pod="pod-3"}}[1m] offset 6m)', False),
    (f"quantile_over_time(0.3, {LAUNCHES}[10m]) - min_over_time({LAUNCHES}[1m])", False),
    # instant functions new to the engine
    (f"sgn({USED} - {LIMIT} / 2)", False),
    ("day_of_month() + day_of_week() * 100 + day_of_year() * 1000", False),
    ("days_in_month() + hour() * 100 + minute() * 10000 + month() + year()", False),
    (f"month({LIMIT} / 10) + year({LIMIT} / 10) + days_in_month({LIMIT} / 10)", False),
    (
        f"day_of_year({USED} / 5) + day_of_week({USED} / 5) + hour({USED} / 3) + minute({USED})",
        False,
    ),
    (f"day_of_month(timestamp({UTIL}))", False),
    (f"timestamp(sum({USED}))", False),
    # --- every function, aggregation and operator of 2.42: the ones added last ---
    # trigonometry, deg, rad, pi (out of the domain: NaN and infinities, as Go)
    (f"sin({UTIL}) + cos({UTIL}) * tan({UTIL})", False),
    (f"asin({UTIL}) - acos({UTIL}) + atan({UTIL} * 10)", False),
    (f"sinh({UTIL} * 3) + cosh({UTIL}) - tanh({UTIL} - 0.5)", False),
    (f"asinh({UTIL} - 0.5) + acosh({UTIL} + 1) + atanh({UTIL} - 0.5)", False),
    (f"acos({UTIL} * 2) + asin({UTIL} - 2) + acosh({UTIL})", False),
    (f"atanh({UTIL} * 0 + 1) + atanh(-{UTIL} * 0 - 1)", False),
    (f"cos({USED}) + sin({LIMIT}) + tan({USED} / 1e6)", False),
    (f"deg({UTIL}) + rad({UTIL} * 100)", False),
    ("deg(vector(pi())) + rad(vector(180))", False),
    ("pi()", False),
    ("pi() * 2 - time() / 1e9", False),
    ("sin(vector(pi()))", False),
    # atan2: a binary operator that keeps the metric name
    (f"{UTIL} atan2 0.5", False),
    (f"0.5 atan2 {UTIL}", False),
    (f"{USED} atan2 {LIMIT}", False),
    (f"{USED} atan2 on (node, namespace, pod, device_uuid) {LIMIT}", False),
    (f"{USED} atan2 on (node, device_uuid) group_left {HOST_USED}", False),
    ("1 atan2 2", False),
    (f"sum({UTIL}) atan2 count({UTIL})", False),
    # histogram_quantile over classic buckets: coalesced bounds, non-monotonic
    # counts, a bad le, no +Inf bucket, bounds at or below 0, a bucket that ends
    (f"histogram_quantile(0.9, {HIST})", False),
    (f"histogram_quantile(0.5, {HIST})", False),
    (f"histogram_quantile(0.01, {HIST}) + histogram_quantile(0.99, {HIST})", False),
    (f"histogram_quantile(0, {HIST}) - histogram_quantile(1, {HIST})", False),
    (f"histogram_quantile(-0.5, {HIST})", False),
    (f"histogram_quantile(1.5, {HIST})", False),
    (f"histogram_quantile(NaN, {HIST})", False),
    (f"histogram_quantile(0.75, rate({HIST}[5m]))", False),
    (f"histogram_quantile(0.9, sum by (le) (rate({HIST}[5m])))", False),
    (f"histogram_quantile(0.5, sum without (job) (increase({HIST}[10m] offset 5m)))", False),
    (f'histogram_quantile(0.95, rate({HIST}{{job=~"api|db"}}[5m] @ end()))', False),
    (f"histogram_quantile(scalar(min({UTIL})), {HIST})", False),
    (f"max_over_time(histogram_quantile(0.9, rate({HIST}[2m]))[10m:1m])", False),
    (f"histogram_quantile(0.5, {UTIL})", False),
    # counts Go's binary search meets as NaN, infinities, negatives, falling
    (f"histogram_quantile(0.5, {HIST} / 0)", False),
    (f"histogram_quantile(0.5, ln({HIST} - 200))", False),
    (f"histogram_quantile(0.3, -{HIST})", False),
    (f"histogram_quantile(0.8, {HIST} % 97)", False),
    (f"histogram_quantile(0.5, sqrt({HIST} - 100) * 0 + {HIST})", False),
    # two names' buckets of one job: "vector cannot contain metrics with the same labelset"
    (
        f'histogram_quantile(0.5, label_replace({HIST}, "__name__", "x", "le", "0.1|\\\\+Inf"))',
        False,
    ),
    # one job's buckets relabelled onto another's: label_replace's own same-labelset error
    (f'histogram_quantile(0.5, label_replace({HIST}, "job", "api", "job", "db"))', False),
    # set operators with on / ignoring, and group_left / group_right with labels
    (f"{USED} and ignoring (namespace, pod) {HOST_USED}", False),
    (f"{USED} unless ignoring (namespace, pod) {HOST_LIMIT}", False),
    (f"{HOST_USED} or on (node) {USED}", False),
    (f"{LIMIT} or ignoring (pod) {USED}", False),
    (f"{USED} and on () vector(1)", False),
    (f"{UTIL} > 0.3 and {UTIL} < 0.7 or {UTIL} > 0.95", False),
    (f"{LIMIT} / ignoring (namespace, pod) group_left {HOST_LIMIT}", False),
    (f"{HOST_LIMIT} - ignoring (namespace, pod) group_right (node) {USED}", False),
    (f"{USED} * on (node, device_uuid) group_left (nothing) {HOST_USED}", False),
    (f"{HOST_USED} + on (node, device_uuid) group_right (node) {USED}", False),
    (f"{USED} < bool ignoring (namespace, pod) group_left {HOST_USED}", False),
    # @ and offset inside functions and aggregations
    (f"rate({LAUNCHES}[5m] @ end())", False),
    (f"avg_over_time({UTIL}[5m] @ start() offset -5m)", False),
    (f'label_replace({USED} @ start(), "n", "$1", "node", "node-(.)")', False),
    (f"abs({USED} offset 1m) - {USED}", False),
    (f"sum by (node) ({USED} @ {BASE + 1200} offset 2m)", False),
    (f"topk(2, {UTIL} @ end())", True),
    (f"clamp_max({UTIL} offset 30s, 0.5)", False),
    (f"deriv({USED}[5m] @ start())", False),
    # scalar and vector
    ("scalar(vector(3))", False),
    (f"scalar({UTIL})", False),
    (f"vector(scalar(sum({USED})))", False),
    ("vector(1) + vector(2)", False),
    (f'scalar(count({USED}{{node="node-c"}})) * 10', False),
    # date functions with and without arguments
    ("hour(vector(1700000000)) + minute(vector(1700000123))", False),
    ("day_of_week(vector(time())) + month(vector(time())) + year(vector(time() * 10))", False),
    (f"minute(timestamp({UTIL})) + hour(timestamp({UTIL}))", False),
    ("days_in_month(vector(951782400))", False),
    ("month() * 100 + day_of_month()", False),
    # quantile_over_time past 0 and 1, and over a subquery
    (f"quantile_over_time(1.5, {UTIL}[5m])", False),
    (f"quantile_over_time(-1, {UTIL}[5m])", False),
    (f"quantile_over_time(0, {USED}[5m]) - quantile_over_time(1, {USED}[5m])", False),
    (f"quantile_over_time(0.5, rate({LAUNCHES}[2m])[10m:1m])", False),
    # aggregations: every one, with by / without
    (f"max without (pod) ({UTIL})", False),
    (f"min without (device_uuid, pod) ({USED})", False),
    (f"avg({LIMIT}) + stdvar({LIMIT}) + stddev({LIMIT})", False),
    (f"quantile(2, {UTIL}) + quantile(-1, {UTIL})", False),
    (f"quantile by (namespace) (0, {UTIL})", False),
    (f"group by (node) ({UTIL}) + group without (pod, namespace, device_uuid) ({UTIL})", False),
    (f"count by (node) ({UTIL} > 0.5)", False),
    (f'count_values by (node) ("limit", {LIMIT})', False),
    (f'count_values("node", {LIMIT})', False),
    (f"topk(0, {UTIL})", False),
    (f"bottomk by (namespace) (1, {USED})", True),
    (f"topk(scalar(count({USED})) / 3, {USED})", True),
    (f"sum(sum by (node) ({USED}))", False),
    # ties: which tied series topk/bottomk keep is their heap's doing, and the order sort,
    # sort_desc and an instant topk give them is Go's sort.Sort's (insertion sort up to 12
    # elements, pdqsort beyond); the limits of 10 pods take three values, the hosts' one
    (f"topk(3, {LIMIT})", True),
    (f"bottomk(4, {LIMIT})", True),
    (f"topk(2, {HOST_LIMIT})", True),
    (f"bottomk by (node) (1, {HOST_LIMIT})", True),
    (f"topk without (pod, namespace) (1, {LIMIT})", True),
    # Welford's update, with Kahan sums over time (exactly 0 for equal values: see below)
    (f"stddev({LIMIT}) + stdvar({HOST_LIMIT})", False),
    (f"stddev by (node) ({LIMIT}) + stdvar by (node) ({HOST_LIMIT})", False),
    (f"stddev_over_time({LIMIT}[10m]) or stdvar_over_time({HOST_LIMIT}[5m])", False),
    (f"stddev_over_time({HIST}[2m]) or stdvar_over_time({UTIL}[7m])", False),
    # label_join edge cases: onto an existing label, no sources, onto the name
    (f'label_join({USED}, "node", "-", "node", "pod")', False),
    (f'label_join({USED}, "extra")', False),
    (f'label_join({USED}, "pod", "", "missing")', False),
    (f'label_join({HOST_USED}, "__name__", "_", "node")', False),
    # sort, sort_desc, absent
    (f"sort(-{UTIL})", True),
    (f"sort_desc(sum by (node) ({USED}))", True),
    (f"sort(ln({UTIL} - 0.5))", True),
    ('absent(sum(nope{job="x"}))', False),
    (f'absent({USED}{{node="node-a", node="node-b"}})', False),
    (f"absent(rate({LAUNCHES}[5m]))", False),
    # literals, unary operators, bool between scalars
    (f"+{USED} - -{USED}", False),
    ("1 > bool 2", False),
    ("2 >= bool 2 + 0x10 - 1e1", False),
    ("Inf - -Inf + NaN", False),
    (f"{UTIL} == bool {UTIL}", False),
    (f"{USED} == {USED} offset 1m", False),
    (f"{UTIL} != 0.5 unless {UTIL} <= 0.2", False),
    # invalid queries: the same errorType as Prometheus
    ("sin()", False),
    (f"histogram_quantile({HIST})", False),
    (f"histogram_quantile(0.5, {HIST}[5m])", False),
    (f"{USED} atan2 bool 2", False),
    (f"rate({USED})", False),
    ("sum(", False),
    ('topk("a", hami_x)', False),
    (f'label_join({USED}, "x", 1, "y")', False),
    (f'label_join({USED}, "1bad", ",", "pod")', False),
    (f'label_replace({USED}, "a", "$1", "node", "(")', False),
    ("{}", False),
    ("pi(1)", False),
    (f"deg({USED}[1m])", False),
    (f"{USED} and 1", False),
    (f"count_values(1, {USED})", False),
    (f'count_values("a-b", {USED})', False),
    (f"quantile_over_time({UTIL}[5m])", False),
]


EVERY = 'label_replace({__name__=~"hami_.+"}, "name", "$1", "__name__", "(.+)")'
"""Every series, its name kept in a label (arithmetic drops ``__name__``, and two series would
share their other labels)."""

# Ties over a computed vector: 17 bucket series of a few values, NaNs and infinities. Asked
# at the instant times only: Prometheus 2.42 gathers a range query's computed series in a Go
# map, so the order it visits them in, and so which tied series topk keeps, changes from one
# run to the next (8 different answers in 8 runs of topk(5, <buckets> % 3)); an instant query
# keeps the order.
INSTANT_ONLY: list[tuple[str, bool]] = [
    (f"topk(5, {HIST} % 3)", True),
    (f"bottomk(7, {HIST} % 3)", True),
    (f"topk(15, {HIST} % 3)", True),
    (f"bottomk(14, -({HIST} % 3))", True),
    (f"topk by (job) (2, {HIST} % 3)", True),
    (f"bottomk without (le) (3, {HIST} % 2)", True),
    (f"topk(1, {HIST} % 3 == 0)", True),
    (f"sort_desc({HIST} % 3)", True),
    (f"sort({HIST} % 3)", True),
    (f"sort(ln({HIST} % 3 - 1))", True),
    (f"sort_desc(ln({HIST} % 4 - 1))", True),
    (f"topk(16, ln({HIST} % 3 - 1))", True),
    (f"bottomk(13, ln({HIST} % 3 - 1))", True),
    # every series of the dataset, 60 (pdqsort's ninther pivots, its runs of equal elements)
    (f"sort_desc({EVERY} % 3)", True),
    (f"sort(ln({EVERY} % 3 - 1))", True),
    (f"sort({EVERY} % 2)", True),
    (f"topk(40, {EVERY} % 3)", True),
    (f"bottomk(55, ln({EVERY} % 4 - 1))", True),
    (f"topk by (node) (9, {EVERY} % 2)", True),
]


# --- the dataset ---


def dataset() -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    """Deterministic series: label sets and ``(seconds, value)`` points."""
    rng = random.Random(20240607)
    times = [float(BASE + i * INTERVAL) for i in range(SPAN // INTERVAL + 1)]
    devices = {
        "node-a": ["GPU-a0", "GPU-a1"],
        "node-b": ["GPU-b0", "GPU-b1"],
        "node-c": ["GPU-c0"],
    }
    namespaces = ["ml", "web", "batch"]
    out: list[tuple[dict[str, str], list[tuple[float, float]]]] = []
    pod = 0
    for node, uuids in devices.items():
        host_total = 0.0
        for uuid in uuids:
            for _ in range(2 if node != "node-c" else 1):
                labels = {
                    "node": node,
                    "namespace": namespaces[pod % 3],
                    "pod": f"pod-{pod}",
                    "device_uuid": uuid,
                }
                limit = float(rng.choice([4, 8, 16]) * 2**30)
                level = rng.uniform(0.1, 0.9) * limit
                used = []
                for t in times:
                    level = min(limit, max(0.0, level + rng.uniform(-0.05, 0.05) * limit))
                    used.append((t, float(round(level))))
                if pod == 3:  # starts ten minutes late
                    used = [(t, v) for t, v in used if t >= BASE + 600]
                out.append(({"__name__": USED, **labels}, used))
                out.append(({"__name__": LIMIT, **labels}, [(t, limit) for t in times]))
                util = [(t, round(rng.uniform(0.01, 0.99), 6)) for t in times]
                if pod == 1:  # ends early: gone from instant queries 5 minutes later
                    util = [(t, v) for t, v in util if t <= BASE + 1200]
                out.append(({"__name__": UTIL, **labels}, util))
                count, launches = 0.0, []
                for t in times:
                    count += rng.randint(0, 50)
                    if pod == 2 and t == BASE + 1500:  # a counter reset
                        count = float(rng.randint(0, 5))
                    launches.append((t, count))
                if pod < 4:
                    out.append(({"__name__": LAUNCHES, **labels}, launches))
                host_total += used[-1][1]
                pod += 1
            host = {"node": node, "device_uuid": uuid}
            out.append(
                (
                    {"__name__": HOST_USED, **host},
                    [(t, float(round(rng.uniform(1, 40) * 2**30))) for t in times],
                )
            )
            if uuid != "GPU-b1":
                out.append(({"__name__": HOST_LIMIT, **host}, [(t, 48.0 * 2**30) for t in times]))
    out.extend(histograms(rng, times))
    return out


def histograms(
    rng: random.Random, times: list[float]
) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    """Classic histogram buckets (cumulative counters by ``le``) in every shape
    ``histogram_quantile`` treats apart: a plain one whose 0.5 bucket ends early,
    one with two spellings of one bound (summed), a bad ``le`` (skipped) and
    counts that fall with the bound (made monotonic), one without a +Inf bucket
    (NaN), and one with bounds at and below zero that is empty at first."""
    shapes = {
        "api": ["0.1", "0.5", "1", "2.5", "+Inf"],
        "db": ["0.1", "0.5", "1", "1.0", "abc", "+Inf"],
        "batch": ["0.5", "1"],
        "edge": ["-1", "0", "0.25", "+Inf"],
    }
    out: list[tuple[dict[str, str], list[tuple[float, float]]]] = []
    for job, bounds in shapes.items():
        totals = [0.0] * len(bounds)
        points: list[list[tuple[float, float]]] = [[] for _ in bounds]
        for i, t in enumerate(times):
            step = [0 if job == "edge" and i < 20 else rng.randint(0, 6) for _ in bounds]
            running = 0.0
            for b, more in enumerate(step):
                running += more
                totals[b] += running if job != "db" or bounds[b] != "1.0" else more
                points[b].append((t, totals[b]))
        for b, le in enumerate(bounds):
            series = points[b]
            if job == "api" and le == "0.5":
                series = [(t, v) for t, v in series if t <= BASE + 1200]
            out.append(({"__name__": HIST, "job": job, "le": le}, series))
    return out


def openmetrics(series: list[tuple[dict[str, str], list[tuple[float, float]]]]) -> str:
    """The series as OpenMetrics text with timestamps, one family at a time."""
    families: dict[str, list[str]] = {}
    for labels, points in series:
        name = labels["__name__"]
        rest = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        lines = families.setdefault(name, [])
        for t, v in points:
            lines.append(f"{name}{{{rest}}} {v!r} {t:.3f}")
    text = []
    for name, lines in families.items():
        kind = "counter" if name.endswith("_total") else "gauge"
        family = name.removesuffix("_total") if kind == "counter" else name
        text.append(f"# TYPE {family} {kind}")
        text.extend(lines)
    text.append("# EOF")
    return "\n".join(text) + "\n"


# --- the real Prometheus ---


@pytest.fixture(scope="module")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, list[MemoryStorage]]]:
    """A Prometheus serving the dataset, and the same data in memory in both storage shapes
    (series grouped by their times, and every series on one axis with absent points)."""
    work = tmp_path_factory.mktemp("promql-diff")
    series = dataset()
    storages = [MemoryStorage(), MemoryStorage(spread=True)]
    for labels, points in series:
        for storage in storages:
            storage.add(labels, points)
    (work / "data.om").write_text(openmetrics(series))
    subprocess.run(
        [
            prometheus_tool("promtool"),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            work / "data.om",
            work / "db",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    with real_prometheus(work, {"global": {}}, tsdb=work / "db") as url:
        yield url, storages


def api(url: str, path: str, **params: str) -> dict[str, Any]:
    """POST a form to Prometheus' API; the decoded envelope (errors included)."""
    body = urllib.parse.urlencode(params).encode()
    request = urllib.request.Request(f"{url}/api/v1/{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            result: dict[str, Any] = json.load(resp)
    except urllib.error.HTTPError as exc:
        result = json.load(exc)
    return result


# --- comparing ---

Series = tuple[tuple[tuple[str, str], ...], list[tuple[float, float]]]


def key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def theirs(data: dict[str, Any]) -> tuple[str, list[Series]]:
    kind = data["resultType"]
    result = data["result"]
    if kind == "vector":
        return kind, [
            (key(s["metric"]), [(float(s["value"][0]), float(s["value"][1]))]) for s in result
        ]
    if kind == "matrix":
        return kind, [
            (key(s["metric"]), [(float(t), float(v)) for t, v in s["values"]]) for s in result
        ]
    if kind == "scalar":
        return kind, [((), [(float(result[0]), float(result[1]))])]
    return kind, [((("string", result[1]),), [(float(result[0]), 0.0)])]


def ours(result: Any, at: float) -> tuple[str, list[Series]]:
    if isinstance(result, Scalar):
        return "scalar", [((), [(at, result.value)])]
    if isinstance(result, String):
        return "string", [((("string", result.value),), [(at, 0.0)])]
    assert isinstance(result, list)
    if all(isinstance(s, Element) for s in result):
        return "vector", [(key(s.labels), [(at, s.value)]) for s in result]
    assert all(isinstance(s, RangeSeries) for s in result)
    return "matrix", [(key(s.labels), list(s.points)) for s in result]


def same_value(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def compare(
    label: str, want: tuple[str, list[Series]], got: tuple[str, list[Series]], ordered: bool
) -> list[str]:
    problems: list[str] = []
    want_kind, want_series = want
    got_kind, got_series = got
    if not want_series and not got_series and {want_kind, got_kind} <= {"vector", "matrix"}:
        return problems
    if want_kind != got_kind:
        return [f"{label}: result type {got_kind}, Prometheus {want_kind}"]
    want_keys = [k for k, _ in want_series]
    got_keys = [k for k, _ in got_series]
    if ordered and want_keys != got_keys:
        return [f"{label}: order {got_keys}, Prometheus {want_keys}"]
    if sorted(want_keys) != sorted(got_keys):
        missing = set(want_keys) - set(got_keys)
        extra = set(got_keys) - set(want_keys)
        return [f"{label}: missing {sorted(missing)}, extra {sorted(extra)}"]
    got_by_key = dict(got_series)
    for k, want_points in want_series:
        got_points = got_by_key[k]
        if [t for t, _ in want_points] != [t for t, _ in got_points]:
            problems.append(f"{label} {k}: timestamps {got_points} vs Prometheus {want_points}")
            continue
        for (t, w), (_, g) in zip(want_points, got_points, strict=True):
            if not same_value(w, g):
                problems.append(f"{label} {k} @{t}: {g!r}, Prometheus {w!r}")
                break
    return problems


def ask_prometheus(url: str, query: str, at: float | None) -> dict[str, Any]:
    """Prometheus' envelope for an instant query at ``at``, or the range query (None)."""
    if at is not None:
        return api(url, "query", query=query, time=f"{at:.3f}")
    start, end, step = RANGE
    return api(url, "query_range", query=query, start=str(start), end=str(end), step=str(step))


def ask_ours(storage: MemoryStorage, query: str, at: float | None) -> Any:
    """Our answer in :func:`ours`' form, or the QueryError."""
    try:
        if at is not None:
            return ours(instant_query(query, at, storage), at)
        start, end, step = RANGE
        return ("matrix", ours(range_query(query, start, end, step, storage), 0)[1])
    except QueryError as exc:
        return exc


def differences_from(label: str, envelope: dict[str, Any], mine: Any, ordered: bool) -> list[str]:
    """How our answer (or error) differs from Prometheus' envelope."""
    if envelope["status"] != "success":
        if not isinstance(mine, QueryError):
            return [f"{label}: Prometheus fails ({envelope['error']}), we answer"]
        if mine.error_type != envelope["errorType"] or (
            mine.error_type == "execution" and mine.message != envelope["error"]
        ):
            return [
                f"{label}: error {mine.error_type} ({mine}), "
                f"Prometheus {envelope['errorType']} ({envelope['error']})"
            ]
        return []
    if isinstance(mine, QueryError):
        return [f"{label}: we fail ({mine.error_type}: {mine}), Prometheus answers"]
    return compare(label, theirs(envelope["data"]), mine, ordered)


def test_queries_match_prometheus(prometheus: tuple[str, list[MemoryStorage]]) -> None:
    url, storages = prometheus
    problems: list[str] = []
    asked: list[tuple[str, bool, list[float | None]]] = [
        (q, o, [*INSTANT_TIMES, None]) for q, o in QUERIES
    ]
    asked += [(q, o, [*INSTANT_TIMES]) for q, o in INSTANT_ONLY]
    for query, ordered, times in asked:
        for at in times:
            envelope = ask_prometheus(url, query, at)
            for storage in storages:
                shape = "spread" if storage.spread else "grouped"
                label = f"{query!r} " + (f"at {at}" if at is not None else "range") + f" ({shape})"
                mine = ask_ours(storage, query, at)
                problems.extend(differences_from(label, envelope, mine, ordered))
    firsts = list({p.split("' ")[0]: p for p in reversed(problems)}.values())
    assert not problems, "\n".join(firsts[:40]) + f"\n({len(problems)} problems)"


def test_the_dataset_is_meaningful(prometheus: tuple[str, list[MemoryStorage]]) -> None:
    """Guard against a vacuous comparison: most queries return data at most times."""
    url, _ = prometheus
    empty = 0
    for query, _ in QUERIES:
        envelope = api(url, "query", query=query, time=str(BASE + 900))
        if envelope["status"] == "success" and not envelope["data"]["result"]:
            empty += 1
    assert empty <= 9  # the absent() queries that should be empty, topk(0, ...), and errors


EXACTLY_ZERO = [
    f"stddev({LIMIT} * 0 + 0.9)",
    f"stdvar({USED} * 0 + 0.9)",
    f"stddev by (namespace) ({UTIL} * 0 + 0.9)",
    f"stddev_over_time(({LIMIT} / 7)[10m:1m])",
    f"stdvar_over_time(({HOST_LIMIT} * 0.1)[5m:30s])",
]
"""Equal values whose mean, taken as a sum over a count, is not exactly them (0.9 ten times,
a pod's limit / 7 eleven times): the deviations from it gave 1e-16 and 2e-7."""


def test_equal_values_deviate_by_exactly_zero(prometheus: tuple[str, list[MemoryStorage]]) -> None:
    """Equal values deviate by exactly 0 in Prometheus (Welford's update), not within a
    tolerance: a ``stddev(x) > 0`` alert must not fire on flat data."""
    url, storages = prometheus
    for query in EXACTLY_ZERO:
        for at in INSTANT_TIMES[1:5]:
            _, want = theirs(ask_prometheus(url, query, at)["data"])
            assert want, query
            assert all(v == 0.0 for _, points in want for _, v in points), query
            for storage in storages:
                _, got = ours(instant_query(query, at, storage), at)
                assert sorted(got) == sorted(want), f"{query} at {at}"


WRITTEN = [
    UTIL,  # ratios: orjson's shortest digits
    f"rate({LAUNCHES}[5m])",
    f"{USED} / 1e20",  # under 1e-4: no exponent, every zero written
    f"{UTIL} * 1e-3",  # either side of 1e-4
    f"{USED} * 1e7",  # whole and past 2**53
    f"{USED} * 1e13",  # from 1e21: an exponent again
    f"-{UTIL} * 3",
    f"{UTIL} * -0",  # -0
    f"{USED} / 0",  # +Inf
    f"({UTIL} - {UTIL}) / 0",  # NaN
    f"avg by (namespace) ({UTIL})",  # folded in Prometheus' order
    f"sum by (node) (rate({LAUNCHES}[5m]))",
]
"""Range answers whose values take every way a value's text is written
(:func:`collector.web.promjson._texts`)."""


def test_range_answers_are_written_as_prometheus_writes_them(
    prometheus: tuple[str, list[MemoryStorage]],
) -> None:
    """Each point's time and value text in a range answer's body is the text Prometheus
    2.42 writes for it (``MarshalTimestamp``, ``MarshalValue``), not only the same number."""
    url, storages = prometheus
    start, end, step = RANGE
    for query in WRITTEN:
        params = {"start": str(start), "end": str(end), "step": str(step)}
        want = by_series(as_written(raw_api(url, "query_range", query=query, **params)))
        assert want, query
        columns = prepare_range(query, start, end, step, storages[0]).columns()
        got = by_series(as_written(matrix_body(columns)))
        assert got == want, query


WRITTEN_INSTANT = [
    UTIL,  # a vector: each sample at the query's time
    f"{USED} / 1e20",
    f"{UTIL}[1m]",  # a matrix: each point at its own time
    f"scalar(sum({UTIL}))",  # a scalar: Go's encoding/json writes its time
    "time()",
    '"text"',  # a string, likewise
]
"""Instant answers of every result type (:func:`collector.web.promjson.instant_body`)."""


def test_instant_answers_are_written_as_prometheus_writes_them(
    prometheus: tuple[str, list[MemoryStorage]],
) -> None:
    """An instant answer's times and values are Prometheus 2.42's text: a sample's time is
    ``MarshalTimestamp``'s (``1700000607.500``), a scalar's Go's ``encoding/json``'s
    (``1700000607.5``), on a second and off it."""
    url, storages = prometheus
    for query, at in itertools.product(WRITTEN_INSTANT, (BASE + SPAN, *INSTANT_TIMES[1:4])):
        want = as_written(raw_api(url, "query", query=query, time=f"{at:.3f}"))
        prepared = prepare_instant(query, at, storages[0])
        got = as_written(instant_body(prepared.result_type, prepared.run(), at))
        assert got["resultType"] == want["resultType"], query
        if want["resultType"] in ("scalar", "string"):
            assert got["result"] == want["result"], f"{query} at {at}"
        else:
            assert by_series(got) == by_series(want), f"{query} at {at}"
            assert want["result"], f"{query} at {at}: compares nothing"


ESCAPED = r'label_replace(vector(1), "x", "é<&>\u2028\u2029\t\n\b\f\x01\"\\b", "", "")'
"""One series whose label value holds every character Go's JSON writer treats apart."""


def test_label_sets_are_written_as_prometheus_writes_them(
    prometheus: tuple[str, list[MemoryStorage]],
) -> None:
    """A label value's text is Go's ``encoding/json``'s (UTF-8 as it is; ``<``, ``>``, ``&``,
    the line separators and control characters escaped, ``\b`` as ``\u0008``): the whole
    body of an instant and of a range answer is byte for byte Prometheus'."""
    url, storages = prometheus
    at = BASE + 607.5
    want = raw_api(url, "query", query=ESCAPED, time=f"{at:.3f}")
    prepared = prepare_instant(ESCAPED, at, storages[0])
    assert instant_body(prepared.result_type, prepared.run(), at) == want
    want = raw_api(url, "query_range", query=ESCAPED, start=str(at), end=str(at + 2), step="1")
    assert matrix_body(prepare_range(ESCAPED, at, at + 2, 1, storages[0]).columns()) == want


def raw_api(url: str, path: str, **params: str) -> bytes:
    """The body Prometheus' API answers a form with."""
    body = urllib.parse.urlencode(params).encode()
    request = urllib.request.Request(f"{url}/api/v1/{path}", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        return bytes(resp.read())


def as_written(body: bytes) -> dict[str, Any]:
    """A successful answer's ``data`` with every number kept as the text it was written as."""
    envelope: dict[str, Any] = json.loads(body, parse_float=str, parse_int=str)
    assert envelope["status"] == "success", envelope
    return dict(envelope["data"])


def by_series(data: dict[str, Any]) -> dict[tuple[tuple[str, str], ...], Any]:
    return {key(s["metric"]): s.get("value", s.get("values")) for s in data["result"]}


def test_prometheus_visits_series_in_label_order_whatever_order_they_came_in(
    tmp_path: Path,
) -> None:
    """The order our aggregations visit a selector's series in (label order: ``sum``'s
    additions, ``topk``'s ties) is the real Prometheus' for series it took in the other
    order too, from its in-memory head rather than the promtool blocks above: three
    ratios added in label order give 0.6, in the order they came 0.6000000000000001."""
    at = float(int(time.time()))
    tail = timestamp_tail(round(at * 1000))
    assert tail is not None
    came = [("m", "c", 0.1), ("m", "b", 0.2), ("m", "a", 0.3)]
    came += [("t", i, 1.0) for _, i, _ in came[:3]]
    storage = MemoryStorage()
    with real_prometheus(tmp_path, {}, args=["--web.enable-remote-write-receiver"]) as url:
        for name, i, value in came:  # one request each, so each series is made in turn
            labels = {"__name__": name, "i": i}
            body = b"".join(samples([series_head(encode_labels(labels.items()))], [value], tail))
            request = urllib.request.Request(
                f"{url}/api/v1/write", data=compress(body), headers=HEADERS, method="POST"
            )
            with urllib.request.urlopen(request, timeout=10) as resp:
                assert resp.status == 204
            storage.add(labels, [(at, value)])
        for query in ("sum(m)", "topk(1, t)", "m"):
            want = raw_api(url, "query", query=query, time=str(at))
            prepared = prepare_instant(query, at, storage)
            assert instant_body(prepared.result_type, prepared.run(), at) == want, query
        assert b'"0.6"' in raw_api(url, "query", query="sum(m)", time=str(at))
