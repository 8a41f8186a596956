"""``GET /api/v1/usage``: GPU memory and cores allocated and used per group, over a window.

Each measure is the sum, per group, of one family at every step of the window
(PromQL range queries over the history, the engine's lookback and staleness
included), times the step, in hours: a vGPU holding 2 GiB for 30 minutes is 1
GiB-hour, a 25 % vGPU for an hour 0.25 core-hours. The step is the scrape
interval (coarser where the window would need more than 11,000 steps), and
steps are aligned to multiples of it, so two requests over one window agree.
Each step stands for the step before it: the window covered is
``(first step - step, last step]``.

``rules/hami-usage.rules.yaml`` records the same per-step sums for
Prometheus; summed over a window and multiplied by the evaluation interval,
they give the same numbers (tests/integration/test_chargeback.py checks it).

Memory used counts every vGPU the collector attributes, as the read model
does (:attr:`~collector.views.usage.ContainerReading.memory_used`): HAMi-core's
reading where there is one, else the container's device memory, which is all
NVML's per-process view gives a whole card, a MIG instance or a DRA claim
without HAMi-core (:data:`MEMORY_USED`).
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

from collector.normalise import schema
from collector.promql.engine import Engine, Queries
from collector.promql.params import parse_time
from collector.promql.query import MAX_POINTS_PER_SERIES
from collector.promql.values import QueryError, RangeSeries
from collector.views.listing import bad
from collector.views.models import ApiError, UsageGroup, UsageReport

IDLE_AFTER = 300
"""Seconds without a kernel after which an allocated vGPU counts as idle."""
GROUPS: Mapping[str, tuple[str, ...]] = {
    "namespace": ("namespace",),
    "pod": ("namespace", "pod"),
    "node": ("node",),
}
MEMORY_USED = f"{schema.VGPU_MEMORY_USED} or {schema.CONTAINER_MEMORY}"
"""The memory each attributed vGPU uses: HAMi-core's ``hami_vgpu_memory_used_bytes`` where it
exists, else ``hami_container_device_memory_bytes`` (the two carry the same labels, so ``or``
takes one per vGPU)."""
MEASURES: Mapping[str, str] = {
    "memory_allocated": "sum by ({by}) (hami_vgpu_memory_allocated_bytes)",
    "memory_used": f"sum by ({{by}}) ({MEMORY_USED})",
    "cores_allocated": "sum by ({by}) (hami_vgpu_core_allocated_ratio)",
    "cores_used": "sum by ({by}) (hami_container_device_utilization_ratio) / 100",
    "cores_idle": (
        "sum by ({by}) (hami_vgpu_core_allocated_ratio"
        f" and hami_container_idle_seconds > {IDLE_AFTER})"
    ),
}
"""The per-step sum behind each measure; ``{by}`` is the group's labels, comma-joined."""
_HOURS = 3600.0


@dataclass(frozen=True, slots=True)
class Window:
    """The steps a report sums: from ``first`` to ``last`` (Unix seconds), ``step`` apart."""

    first: float
    last: float
    step: float
    requested: tuple[float, float]


class Chargeback:
    """Answers usage reports from the history, each query within the engine's limits."""

    def __init__(
        self,
        engine: Engine,
        retention: float,
        interval: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._engine = engine
        self._retention = retention
        self._interval = interval
        self._clock = clock

    def window(self, start_text: str | None, end_text: str | None) -> Window:
        """The aligned steps of a requested window, cut to what the history may hold."""
        now = self._clock()
        end = _time(end_text, "end") if end_text else now
        start = _time(start_text, "start") if start_text else end - self._retention
        if not start < end:
            raise bad("query parameter 'start' must be before 'end'")
        held_from = max(start, now - self._retention)
        step = max(self._interval, (end - held_from) / MAX_POINTS_PER_SERIES)
        last = math.floor(min(end, now) / step) * step
        first = (math.floor(held_from / step) + 1) * step
        return Window(first, max(first, last), step, (start, end))

    async def report(
        self, by: str, window: Window, identity: str, namespaces: frozenset[str] | None = None
    ) -> UsageReport:
        """Every measure per group over ``window``, all in one work of the engine for
        ``identity``; a tenant's ``namespaces`` restrict every selector, as its queries are."""
        labels = GROUPS[by]

        def measure(queries: Queries) -> list[list[RangeSeries]]:
            return [
                cast(
                    list[RangeSeries],  # range: a Matrix
                    queries.range(
                        expr.format(by=", ".join(labels)), window.first, window.last, window.step
                    ).run(),
                )
                for expr in MEASURES.values()
            ]

        try:
            results = await self._engine.run(measure, identity=identity, namespaces=namespaces)
        except QueryError as exc:
            # Prometheus' answers to the same limits: 503 past --query-timeout,
            # 422 past --query-max-samples.
            if exc.error_type in ("timeout", "canceled"):
                raise ApiError(503, "timeout", f"the report took too long: {exc}") from None
            if exc.error_type == "unavailable":
                raise ApiError(429, "unavailable", str(exc)) from None
            raise ApiError(
                422, "too_many_samples", f"the report cannot be computed: {exc}"
            ) from None
        return _report(by, labels, window, results)


def _report(
    by: str, labels: tuple[str, ...], window: Window, results: list[list[RangeSeries]]
) -> UsageReport:
    totals: dict[tuple[str, ...], list[float | None]] = {}
    seen: list[float] = []
    for slot, series_list in enumerate(results):
        for series in series_list:
            group = tuple(series.labels.get(name, "") for name in labels)
            row = totals.setdefault(group, [None] * len(MEASURES))
            points = [v for _, v in series.points if math.isfinite(v)]
            if points:
                row[slot] = (row[slot] or 0.0) + sum(points)
            if series.points:
                seen += (series.points[0][0], series.points[-1][0])
    hours = window.step / _HOURS

    def held(value: float | None) -> float | None:
        return None if value is None else value * hours

    groups = [
        UsageGroup(
            labels=dict(zip(labels, group, strict=True)),
            memory_allocated_byte_hours=held(row[0]),
            memory_used_byte_hours=held(row[1]),
            cores_allocated_core_hours=held(row[2]),
            cores_used_core_hours=held(row[3]),
            idle_share=(row[4] or 0.0) / row[2] if row[2] else None,
        )
        for group, row in totals.items()
    ]
    groups.sort(key=lambda g: (-(g.memory_allocated_byte_hours or -1.0), sorted(g.labels.items())))
    start = min(seen) - window.step if seen else window.first - window.step
    return UsageReport(
        by=by,
        start=start,
        end=max(seen) if seen else start,
        requested_start=window.requested[0],
        requested_end=window.requested[1],
        step_seconds=window.step,
        groups=groups,
    )


CSV_DECIMALS: Mapping[str, int] = {
    "memory_allocated_byte_hours": 0,
    "memory_used_byte_hours": 0,
    "cores_allocated_core_hours": 6,
    "cores_used_core_hours": 6,
    "idle_share": 4,
}
"""Decimals each measure keeps in the CSV: a byte-hour is a billionth of a GiB-hour, a
millionth of a card-hour is 3.6 ms of a whole card, a ten-thousandth of a share 0.01 %.
Nothing a bill reads is lost, and a spreadsheet shows no float noise (the JSON keeps every
digit)."""


def to_csv(report: UsageReport) -> str:
    """One row per group: its labels, the measures (rounded as :data:`CSV_DECIMALS` says),
    the idle share, and the window's start and end in RFC 3339 (UTC)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    names = list(GROUPS[report.by])
    measures = [f for f in UsageGroup.model_fields if f != "labels"]
    writer.writerow([*names, *measures, "start", "end"])
    window = [rfc3339(report.start), rfc3339(report.end)]
    for group in report.groups:
        cells = [_rounded(getattr(group, f), CSV_DECIMALS[f]) for f in measures]
        writer.writerow([*(group.labels[n] for n in names), *cells, *window])
    return out.getvalue()


def _rounded(value: float | None, decimals: int) -> str:
    """``value`` to ``decimals`` places, without trailing zeros; empty for None."""
    if value is None:
        return ""
    text = f"{value:.{decimals}f}"
    text = text.rstrip("0").rstrip(".") if "." in text else text
    return "0" if text in ("-0", "") else text


def rfc3339(seconds: float) -> str:
    """A Unix time in RFC 3339, UTC: ``2026-12-02T08:00:15Z``, with milliseconds when the
    time has a fraction of a second (a step of 0.5 s)."""
    moment = datetime.fromtimestamp(seconds, UTC)
    spec = "seconds" if moment.microsecond == 0 else "milliseconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def _time(text: str, name: str) -> float:
    try:
        value = parse_time(text, name)
    except QueryError:
        raise bad(
            f"query parameter {name!r} must be Unix seconds or RFC 3339, not {text[:40]!r}"
        ) from None
    if not math.isfinite(value):
        raise bad(f"query parameter {name!r} must be a finite time")
    return value
