"""The read model's sums and what they cover, a card's allocation past its size, a MIG grant's
memory, the CSV's times and rounding, and the words a page puts to a coverage."""

from __future__ import annotations

import csv
import io
import math
from datetime import datetime

import pytest

from collector.normalise import labelsets, schema
from collector.normalise.allocation import Grant
from collector.sources.allocation_series import node_batch
from collector.sources.pods import Holding, PodRef
from collector.views.chargeback import CSV_DECIMALS, rfc3339, to_csv
from collector.views.models import ContainerRow, UsageGroup, UsageReport
from collector.views.presented import over_allocated, pod_detail
from collector.web.ui.coverage import Memory, coverage, share

GIB = 1 << 30
MIG = "MIG-3f753eaf-cc52-4b0c-8c47-1fb1301e0351"


@pytest.mark.parametrize(
    ("memory", "total", "cores", "why"),
    [
        (None, None, [], []),
        (40 * GIB, 80 * GIB, [0.25, 0.5], []),
        (80 * GIB, 80 * GIB, [1.0], []),  # full, not past
        (90 * GIB, 80 * GIB, [0.5], ["memory_oversubscribed"]),
        (90 * GIB, None, [0.5], []),  # an unknown total is no evidence
        (None, 80 * GIB, [1.0, 1.0], ["cores_time_shared"]),
        (None, 80 * GIB, [0.6, 0.6], ["cores_oversubscribed"]),
        (90 * GIB, 80 * GIB, [1.0, 0.5, 1.0], ["memory_oversubscribed", "cores_time_shared"]),
        (None, None, [0.1] * 10, []),  # ten tenths: the whole card (floats summed)
    ],
)
def test_why_a_card_is_allocated_past_its_size(
    memory: int | None, total: int | None, cores: list[float], why: list[str]
) -> None:
    assert over_allocated(memory, total, cores) == why


def row(used: int | None, allocated: int | None, node: str = "n") -> ContainerRow:
    return ContainerRow(
        node=node,
        namespace="ns",
        pod="p",
        container="c",
        vdevice_index=0,
        device_uuid="GPU-A",
        memory_used_bytes=used,
        memory_limit_bytes=None,
        sm_utilization_percent=None,
        last_kernel_seconds=None,
        memory_context_bytes=None,
        memory_module_bytes=None,
        memory_buffer_bytes=None,
        memory_allocated_bytes=allocated,
        cores_allocated=None,
        idle_seconds=None,
        utilisation_of_allocation=None,
    )


def test_a_pods_sums_cover_the_vgpus_that_report_them() -> None:
    detail = pod_detail(1, "ns", "p", [row(GIB, None, "b"), row(None, 4 * GIB, "a")])
    assert detail.vgpu_count == 2
    assert (detail.memory_used_bytes, detail.memory_used_vgpus) == (GIB, 1)
    assert (detail.memory_allocated_bytes, detail.memory_allocated_vgpus) == (4 * GIB, 1)
    assert detail.memory_limit_bytes is None  # none reported: unknown, not 0
    assert detail.nodes == ["a", "b"]
    nothing = pod_detail(1, "ns", "p", [row(None, None)])
    assert (nothing.memory_used_bytes, nothing.memory_allocated_bytes) == (None, None)


def test_a_mig_grant_is_given_its_instances_memory_as_the_agent_reads_it() -> None:
    ref = PodRef("uid-1", "team-embed", "embed", "plugin-node", bound=True)
    grant = Grant("worker", 0, MIG, None, None, "mig")
    held = Holding(ref, (grant,), ())
    allocated = labelsets.key(
        schema.MEMORY_ALLOCATED, labelsets.vgpu("team-embed", "embed", "worker", 0, MIG)
    )
    assert allocated not in node_batch([held], {}, 0).series  # no agent: unknown
    instance = labelsets.mig("GPU-parent", MIG, 1, 0, "3g.71gb")
    other = labelsets.mig("GPU-parent", "MIG-other", 2, 0, "3g.71gb")
    real = {
        labelsets.key(schema.MIG_MEMORY_TOTAL, instance): 71.0 * GIB,
        labelsets.key(schema.MIG_MEMORY_TOTAL, other): 35.0 * GIB,
        labelsets.key(schema.MIG_MEMORY_USED, instance): 40.0 * GIB,
    }
    assert node_batch([held], real, 0).series[allocated] == 71.0 * GIB
    whole = Holding(ref, (Grant("worker", 0, "GPU-parent", None, 1.0, "whole"),), ())
    assert not any(
        key.startswith(schema.MEMORY_ALLOCATED.encode())
        for key in node_batch([whole], real, 0).series
    )


def test_the_csv_gives_rfc3339_times_and_values_rounded_to_their_unit() -> None:
    third = 1 / 3
    report = UsageReport(
        by="namespace",
        start=1796198400.0,
        end=1796198415.5,
        requested_start=0.0,
        requested_end=0.0,
        step_seconds=15.0,
        groups=[
            UsageGroup(
                labels={"namespace": "team-a"},
                memory_allocated_byte_hours=87960930222080.4,
                memory_used_byte_hours=third * GIB,
                cores_allocated_core_hours=0.25,
                cores_used_core_hours=third,
                idle_share=third,
            ),
            UsageGroup(
                labels={"namespace": "team-train"},
                memory_allocated_byte_hours=None,
                memory_used_byte_hours=2.0 * GIB,
                cores_allocated_core_hours=1.0,
                cores_used_core_hours=0.0,
                idle_share=None,
            ),
        ],
    )
    rows = list(csv.DictReader(io.StringIO(to_csv(report))))
    assert rows[0] == {
        "namespace": "team-a",
        "memory_allocated_byte_hours": "87960930222080",
        "memory_used_byte_hours": "357913941",
        "cores_allocated_core_hours": "0.25",
        "cores_used_core_hours": "0.333333",
        "idle_share": "0.3333",
        "start": "2026-12-02T08:00:00Z",
        "end": "2026-12-02T08:00:15.500Z",
    }
    assert rows[1]["memory_allocated_byte_hours"] == ""  # unknown, never 0
    assert rows[1]["cores_used_core_hours"] == "0"
    for cell in (rows[0]["start"], rows[0]["end"]):
        assert datetime.fromisoformat(cell).timestamp() in (report.start, report.end)
    assert set(CSV_DECIMALS) == set(UsageGroup.model_fields) - {"labels"}
    assert report.groups[0].cores_used_core_hours == third  # the JSON keeps every digit
    assert rfc3339(0.25) == "1970-01-01T00:00:00.250Z"
    assert not math.isnan(float(rows[0]["idle_share"]))


@pytest.mark.parametrize(
    ("memory", "words"),
    [
        (Memory(), "no card reported yet"),
        (Memory(cards=4), "no card reports its used memory"),
        (
            Memory(4, 10 * GIB, 4),
            "used 10 GiB on all 4 cards; no card reports its memory total",
        ),
        (
            Memory(68, 1046 * GIB, 68, 5427 * GIB, 64, 64, 1024 * GIB, 5427 * GIB),
            "used 1 TiB of 5.3 TiB on 64 of 68 cards; 4 cards report no total (they use 22 GiB)",
        ),
        (
            Memory(8, 20 * GIB, 8, 640 * GIB, 8, 8, 20 * GIB, 640 * GIB),
            "used 20 GiB of 640 GiB on all 8 cards",
        ),
        (
            Memory(8, 20 * GIB, 7, 640 * GIB, 8, 7, 20 * GIB, 560 * GIB),
            "used 20 GiB of 560 GiB on 7 of 8 cards; 1 card reports no used memory",
        ),
    ],
)
def test_coverage_in_words(memory: Memory, words: str) -> None:
    assert coverage(memory) == words


def test_which_vgpus_a_sum_covers_in_words() -> None:
    assert share(0, 0, "a memory allocation") == "no vGPU yet"
    assert share(3, 3, "a core share") == "all 3 vGPUs with a core share"
    assert share(1, 2, "a memory allocation") == "1 of 2 vGPUs with a memory allocation"
