"""Tests of the monitor simulator (simulator: cluster, node, expositions), its HTTP farm and the oracle."""

from __future__ import annotations

import asyncio
import gzip
import re
import struct
import zlib
from collections.abc import AsyncIterator
from decimal import Decimal

import aiohttp
import pytest
from helpers import eventually, holds, reserved_port
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from core.content import TEXT_CONTENT_TYPE
from simulator.cluster import build_cluster
from simulator.devices import Allocation, Card, MigSlice
from simulator.families import BUILD_INFO, MONITOR_METRICS, MONITORS
from simulator.faults import FAULTS, MAX_STALL_S
from simulator.gzipbomb import build_gzip_bomb, crc32_combine
from simulator.monitors import MonitorFarm, loopback_address
from simulator.node import WEIRD_SUFFIX, SimulatedNode
from simulator.textformat import go_float
from testing.oracle import SeriesKey, expected_canonical

NOW = 1_800_000_000.0
MIB = 1 << 20
GIB = 1 << 30
UUID0 = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"


# --------------------------------------------------------------------------
# go_float
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        # The examples of the upstream document and of Volcano's README.
        (0.0, "0"),
        (3664.0, "3664"),
        (287244288.0, "2.87244288e+08"),
        (20971520000.0, "2.097152e+10"),
        (683935744.0, "6.83935744e+08"),
        (2109867008.0, "2.109867008e+09"),
        (56366661632.0, "5.6366661632e+10"),
        (3145728000.0, "3.145728e+09"),
        (99.0, "99"),
        (100.0, "100"),
        (1.0, "1"),
        # Go's rule for the shortest 'g' form: %e iff exponent < -4 or >= 6.
        (999999.0, "999999"),
        (100000.0, "100000"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00012, "0.00012"),
        (0.00001, "1e-05"),
        (1.5, "1.5"),
        (123456.789, "123456.789"),
        (-2.5e-7, "-2.5e-07"),
        (1e21, "1e+21"),
        (1e100, "1e+100"),
        (0.1, "0.1"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (-0.0, "-0"),
        (float("nan"), "NaN"),
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
    ],
)
def test_go_float_matches_go(value: float, text: str) -> None:
    assert go_float(value) == text


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_go_float_round_trips_and_follows_the_exponent_rule(value: float) -> None:
    text = go_float(value)
    assert float(text) == value
    if value == 0:
        return
    exponent = Decimal(repr(abs(value))).adjusted()  # of the shortest round-trip digits
    if exponent < -4 or exponent >= 6:
        assert re.fullmatch(r"-?\d(\.\d+)?e[+-]\d{2,3}", text)
        assert int(text.split("e")[1]) == exponent
    else:
        assert re.fullmatch(r"-?\d+(\.\d+)?", text)


# --------------------------------------------------------------------------
# Exact expositions of a tiny hand-made node
# --------------------------------------------------------------------------


def tiny_node(flavour: str, *, annotated: bool = True) -> SimulatedNode:
    card = Card(
        index=0,
        uuid=UUID0,
        name="NVIDIA H200",
        memory_total=143771 * MIB,
        memory_used=287244288,
        utilization=7,
        memory_controller_utilization=2,
    )
    allocation = Allocation(
        namespace="default",
        pod="vgpu-share",
        pod_uid="6f1c2e0a-7d1b-4c55-9a8e-1b2c3d4e5f60",
        container="cuda",
        card=0,
        vdevice_index=0,
        limit=20971520000,
        used=331350016 + 683935744,
        context=331350016,
        module=0,
        buffer=683935744,
        sm_util=0,
        last_kernel_time=int(NOW) - 3664,
        kai_annotation="gpu-fraction" if annotated else None,
    )
    return SimulatedNode("gpu-node-1", flavour, [card], [allocation], seed=1)


CTR = (
    f'container="cuda",device_uuid="{UUID0}",namespace="default",pod="vgpu-share",'
    'vdevice_index="0",zone="vGPU"'
)
LEGACY_CTR = (
    f'ctrname="cuda",deviceuuid="{UUID0}",podname="vgpu-share",podnamespace="default",'
    'vdeviceid="0",zone="vGPU"'
)
H200 = 'device_type="NVIDIA-NVIDIA H200"'

GOLDEN: dict[str, str] = {
    "hami": f"""\
# HELP hami_build_info hami build metadata exposed as labels with a constant value of 1.
# TYPE hami_build_info gauge
hami_build_info{{build_date="2026-03-18T09:12:44Z",compiler="gc",go_version="go1.24.6",\
platform="linux/amd64",revision="9c41d7be",version="v2.10.0"}} 1
# HELP hami_container_device_memory_bytes Container device memory usage in bytes
# TYPE hami_container_device_memory_bytes gauge
hami_container_device_memory_bytes{{{CTR}}} 1.01528576e+09
# HELP hami_container_device_utilization_ratio Container device SM utilization ratio
# TYPE hami_container_device_utilization_ratio gauge
hami_container_device_utilization_ratio{{{CTR}}} 0
# HELP hami_container_last_kernel_elapsed_seconds Seconds since last kernel execution in container
# TYPE hami_container_last_kernel_elapsed_seconds gauge
hami_container_last_kernel_elapsed_seconds{{{CTR}}} 3664
# HELP hami_host_gpu_memory_controller_utilization_ratio GPU memory controller utilization ratio (0-100)
# TYPE hami_host_gpu_memory_controller_utilization_ratio gauge
hami_host_gpu_memory_controller_utilization_ratio{{device_index="0",{H200},device_uuid="{UUID0}",\
zone="vGPU"}} 2
# HELP hami_host_gpu_memory_used_bytes GPU device memory usage in bytes
# TYPE hami_host_gpu_memory_used_bytes gauge
hami_host_gpu_memory_used_bytes{{device_index="0",{H200},device_uuid="{UUID0}",node="gpu-node-1",\
zone="vGPU"}} 2.87244288e+08
# HELP hami_host_gpu_utilization_ratio GPU core utilization ratio (0-100)
# TYPE hami_host_gpu_utilization_ratio gauge
hami_host_gpu_utilization_ratio{{device_index="0",{H200},device_uuid="{UUID0}",node="gpu-node-1",\
zone="vGPU"}} 7
# HELP hami_vgpu_memory_buffer_bytes Container device memory buffer size in bytes
# TYPE hami_vgpu_memory_buffer_bytes gauge
hami_vgpu_memory_buffer_bytes{{{CTR}}} 6.83935744e+08
# HELP hami_vgpu_memory_context_bytes Container device memory context size in bytes
# TYPE hami_vgpu_memory_context_bytes gauge
hami_vgpu_memory_context_bytes{{{CTR}}} 3.31350016e+08
# HELP hami_vgpu_memory_limit_bytes vGPU device memory limit in bytes
# TYPE hami_vgpu_memory_limit_bytes gauge
hami_vgpu_memory_limit_bytes{{{CTR}}} 2.097152e+10
# HELP hami_vgpu_memory_module_bytes Container device memory module size in bytes
# TYPE hami_vgpu_memory_module_bytes gauge
hami_vgpu_memory_module_bytes{{{CTR}}} 0
# HELP hami_vgpu_memory_used_bytes vGPU device memory usage in bytes
# TYPE hami_vgpu_memory_used_bytes gauge
hami_vgpu_memory_used_bytes{{{CTR}}} 1.01528576e+09
""",
    "kai": f"""\
# HELP hami_container_device_memory_bytes Container device memory usage breakdown in bytes \
(The label "context_size", "module_size", "buffer_size" and "offset" will be deprecated in v2.10.0, \
use hami_vgpu_memory_context_bytes, hami_vgpu_memory_module_bytes and hami_vgpu_memory_buffer_bytes \
instead)
# TYPE hami_container_device_memory_bytes gauge
hami_container_device_memory_bytes{{buffer_size="683935744",container="cuda",\
context_size="331350016",device_uuid="{UUID0}",module_size="0",namespace="default",offset="0",\
pod="vgpu-share",vdevice_index="0",zone="vGPU"}} 1.01528576e+09
# HELP hami_container_device_utilization_ratio Container device SM utilization ratio
# TYPE hami_container_device_utilization_ratio gauge
hami_container_device_utilization_ratio{{{CTR}}} 0
# HELP hami_container_last_kernel_elapsed_seconds Seconds since last kernel execution in container
# TYPE hami_container_last_kernel_elapsed_seconds gauge
hami_container_last_kernel_elapsed_seconds{{{CTR}}} 3664
# HELP hami_host_gpu_memory_used_bytes GPU device memory usage in bytes
# TYPE hami_host_gpu_memory_used_bytes gauge
hami_host_gpu_memory_used_bytes{{device_index="0",{H200},device_uuid="{UUID0}",zone="vGPU"}} \
2.87244288e+08
# HELP hami_host_gpu_utilization_ratio GPU core utilization ratio (0-100)
# TYPE hami_host_gpu_utilization_ratio gauge
hami_host_gpu_utilization_ratio{{device_index="0",{H200},device_uuid="{UUID0}",zone="vGPU"}} 7
# HELP hami_vgpu_memory_buffer_bytes Container device memory buffer size in bytes
# TYPE hami_vgpu_memory_buffer_bytes gauge
hami_vgpu_memory_buffer_bytes{{{CTR}}} 6.83935744e+08
# HELP hami_vgpu_memory_context_bytes Container device memory context size in bytes
# TYPE hami_vgpu_memory_context_bytes gauge
hami_vgpu_memory_context_bytes{{{CTR}}} 3.31350016e+08
# HELP hami_vgpu_memory_limit_bytes vGPU device memory limit in bytes
# TYPE hami_vgpu_memory_limit_bytes gauge
hami_vgpu_memory_limit_bytes{{{CTR}}} 2.097152e+10
# HELP hami_vgpu_memory_module_bytes Container device memory module size in bytes
# TYPE hami_vgpu_memory_module_bytes gauge
hami_vgpu_memory_module_bytes{{{CTR}}} 0
# HELP hami_vgpu_memory_used_bytes vGPU device memory usage in bytes
# TYPE hami_vgpu_memory_used_bytes gauge
hami_vgpu_memory_used_bytes{{{CTR}}} 1.01528576e+09
""",
    "volcano": f"""\
# HELP Device_last_kernel_of_container Container device last kernel description
# TYPE Device_last_kernel_of_container gauge
Device_last_kernel_of_container{{{LEGACY_CTR}}} 3664
# HELP Device_memory_desc_of_container Container device meory description
# TYPE Device_memory_desc_of_container counter
Device_memory_desc_of_container{{context="331350016",ctrname="cuda",data="683935744",\
deviceuuid="{UUID0}",module="0",offset="0",podname="vgpu-share",podnamespace="default",\
vdeviceid="0",zone="vGPU"}} 1.01528576e+09
# HELP Device_utilization_desc_of_container Container device utilization description
# TYPE Device_utilization_desc_of_container gauge
Device_utilization_desc_of_container{{{LEGACY_CTR}}} 0
# HELP HostCoreUtilization GPU core utilization
# TYPE HostCoreUtilization gauge
HostCoreUtilization{{deviceidx="0",deviceuuid="{UUID0}",zone="vGPU"}} 7
# HELP HostGPUMemoryUsage GPU device memory usage
# TYPE HostGPUMemoryUsage gauge
HostGPUMemoryUsage{{deviceidx="0",deviceuuid="{UUID0}",zone="vGPU"}} 2.87244288e+08
# HELP vGPU_device_memory_limit_in_bytes vGPU device limit
# TYPE vGPU_device_memory_limit_in_bytes gauge
vGPU_device_memory_limit_in_bytes{{{LEGACY_CTR}}} 2.097152e+10
# HELP vGPU_device_memory_usage_in_bytes vGPU device usage
# TYPE vGPU_device_memory_usage_in_bytes gauge
vGPU_device_memory_usage_in_bytes{{{LEGACY_CTR}}} 1.01528576e+09
""",
}
GOLDEN["hami-legacy"] = (
    GOLDEN["volcano"]
    .replace(
        f'HostCoreUtilization{{deviceidx="0",deviceuuid="{UUID0}",zone="vGPU"}}',
        f'HostCoreUtilization{{deviceidx="0",devicetype="NVIDIA-NVIDIA H200",deviceuuid="{UUID0}",'
        'nodeid="gpu-node-1",zone="vGPU"}',
    )
    .replace(
        f'HostGPUMemoryUsage{{deviceidx="0",deviceuuid="{UUID0}",zone="vGPU"}}',
        f'HostGPUMemoryUsage{{deviceidx="0",devicetype="NVIDIA-NVIDIA H200",deviceuuid="{UUID0}",'
        'nodeid="gpu-node-1",zone="vGPU"}',
    )
)


@pytest.mark.parametrize("flavour", MONITORS)
def test_exposition_is_byte_exact(flavour: str) -> None:
    assert tiny_node(flavour).exposition(NOW).decode() == GOLDEN[flavour]


def test_golden_legacy_host_lines_carry_nodeid_and_devicetype() -> None:
    text = GOLDEN["hami-legacy"]
    assert 'HostCoreUtilization{deviceidx="0",devicetype="NVIDIA-NVIDIA H200"' in text
    assert "nodeid" not in GOLDEN["volcano"]
    assert "devicetype" not in GOLDEN["volcano"]


# Independent statement of what each monitor exposes: name -> (type, label names incl. zone).
V210_CTR = {"namespace", "pod", "container", "vdevice_index", "device_uuid", "zone"}
LEGACY_CTR_LABELS = {"podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid", "zone"}
EXPECTED_FAMILIES: dict[str, dict[str, tuple[str, set[str]]]] = {
    "hami": {
        "hami_host_gpu_memory_used_bytes": (
            "gauge",
            {"node", "device_index", "device_uuid", "device_type", "zone"},
        ),
        "hami_host_gpu_utilization_ratio": (
            "gauge",
            {"node", "device_index", "device_uuid", "device_type", "zone"},
        ),
        "hami_host_gpu_memory_controller_utilization_ratio": (
            "gauge",
            {"device_index", "device_uuid", "device_type", "zone"},
        ),
        "hami_vgpu_memory_used_bytes": ("gauge", V210_CTR),
        "hami_vgpu_memory_limit_bytes": ("gauge", V210_CTR),
        "hami_container_device_memory_bytes": ("gauge", V210_CTR),
        "hami_container_device_utilization_ratio": ("gauge", V210_CTR),
        "hami_container_last_kernel_elapsed_seconds": ("gauge", V210_CTR),
        "hami_vgpu_memory_context_bytes": ("gauge", V210_CTR),
        "hami_vgpu_memory_module_bytes": ("gauge", V210_CTR),
        "hami_vgpu_memory_buffer_bytes": ("gauge", V210_CTR),
        "hami_build_info": (
            "gauge",
            {"version", "revision", "build_date", "go_version", "compiler", "platform"},
        ),
    },
    "kai": {
        "hami_host_gpu_memory_used_bytes": (
            "gauge",
            {"device_index", "device_uuid", "device_type", "zone"},
        ),
        "hami_host_gpu_utilization_ratio": (
            "gauge",
            {"device_index", "device_uuid", "device_type", "zone"},
        ),
        "hami_vgpu_memory_used_bytes": ("gauge", V210_CTR),
        "hami_vgpu_memory_limit_bytes": ("gauge", V210_CTR),
        "hami_container_device_memory_bytes": (
            "gauge",
            V210_CTR | {"context_size", "module_size", "buffer_size", "offset"},
        ),
        "hami_container_device_utilization_ratio": ("gauge", V210_CTR),
        "hami_container_last_kernel_elapsed_seconds": ("gauge", V210_CTR),
        "hami_vgpu_memory_context_bytes": ("gauge", V210_CTR),
        "hami_vgpu_memory_module_bytes": ("gauge", V210_CTR),
        "hami_vgpu_memory_buffer_bytes": ("gauge", V210_CTR),
    },
    "hami-legacy": {
        "HostGPUMemoryUsage": (
            "gauge",
            {"nodeid", "deviceidx", "deviceuuid", "devicetype", "zone"},
        ),
        "HostCoreUtilization": (
            "gauge",
            {"nodeid", "deviceidx", "deviceuuid", "devicetype", "zone"},
        ),
        "vGPU_device_memory_usage_in_bytes": ("gauge", LEGACY_CTR_LABELS),
        "vGPU_device_memory_limit_in_bytes": ("gauge", LEGACY_CTR_LABELS),
        "Device_memory_desc_of_container": (
            "counter",
            LEGACY_CTR_LABELS | {"context", "module", "data", "offset"},
        ),
        "Device_utilization_desc_of_container": ("gauge", LEGACY_CTR_LABELS),
        "Device_last_kernel_of_container": ("gauge", LEGACY_CTR_LABELS),
    },
    "volcano": {
        "HostGPUMemoryUsage": ("gauge", {"deviceidx", "deviceuuid", "zone"}),
        "HostCoreUtilization": ("gauge", {"deviceidx", "deviceuuid", "zone"}),
        "vGPU_device_memory_usage_in_bytes": ("gauge", LEGACY_CTR_LABELS),
        "vGPU_device_memory_limit_in_bytes": ("gauge", LEGACY_CTR_LABELS),
        "Device_memory_desc_of_container": (
            "counter",
            LEGACY_CTR_LABELS | {"context", "module", "data", "offset"},
        ),
        "Device_utilization_desc_of_container": ("gauge", LEGACY_CTR_LABELS),
        "Device_last_kernel_of_container": ("gauge", LEGACY_CTR_LABELS),
    },
}


@pytest.fixture(scope="module")
def cluster() -> list[SimulatedNode]:
    nodes = build_cluster(8, seed=3, start_time=NOW - 900)
    for offset in (-600.0, -300.5, -299.9, 0.0):
        for node in nodes:
            node.step(NOW + offset)
    return nodes


@pytest.mark.parametrize("flavour", MONITORS)
def test_default_exposition_parses_with_the_reference_names_and_labels(
    cluster: list[SimulatedNode], flavour: str
) -> None:
    node = next(n for n in cluster if n.flavour == flavour)
    text = node.exposition(NOW).decode()
    seen: dict[str, tuple[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            seen.setdefault(family.name, (family.type, set(sample.labels)))
            assert set(sample.labels) == seen[family.name][1]
    assert seen == EXPECTED_FAMILIES[flavour]
    # The table the simulator renders from says the same.
    for name, (kind, labels) in EXPECTED_FAMILIES[flavour].items():
        spec = MONITOR_METRICS[flavour][name]
        assert spec.type == kind
        assert set(spec.labels) | ({"zone"} if spec.zone else set()) == labels
    # Families come sorted by name, each with HELP then TYPE.
    help_names = re.findall(r"^# HELP (\S+) ", text, flags=re.MULTILINE)
    type_names = re.findall(r"^# TYPE (\S+) ", text, flags=re.MULTILINE)
    assert help_names == type_names == sorted(help_names)


def test_concrete_lines(cluster: list[SimulatedNode]) -> None:
    by_flavour: dict[str, str] = {}
    for node in cluster:
        by_flavour.setdefault(node.flavour, node.exposition(NOW).decode())
    hami = by_flavour["hami"]
    controller = re.findall(r"^hami_host_gpu_memory_controller_utilization_ratio\{.*$", hami, re.M)
    assert controller
    assert all("node=" not in line for line in controller)
    assert re.search(
        r'^hami_host_gpu_memory_used_bytes\{device_index="0",device_type="NVIDIA-NVIDIA ',
        hami,
        re.M,
    )
    assert all(
        f'node="{cluster[0].name}"' in line
        for line in hami.splitlines()
        if line.startswith("hami_host_gpu_utilization")
    )
    kai = by_flavour["kai"]
    kai_memory = [
        line for line in kai.splitlines() if line.startswith("hami_container_device_memory_bytes{")
    ]
    assert kai_memory
    assert all(
        line.startswith("hami_container_device_memory_bytes{buffer_size=") for line in kai_memory
    )
    assert all(',context_size="' in line and ',offset="' in line for line in kai_memory)
    assert "node=" not in kai
    assert "hami_build_info" not in kai
    assert "hami_host_gpu_memory_controller" not in kai
    assert "# TYPE Device_memory_desc_of_container counter" in by_flavour["volcano"]
    assert "device_type" not in by_flavour["volcano"]
    assert "devicetype" not in by_flavour["volcano"]
    assert "nodeid=" in by_flavour["hami-legacy"]


def test_device_uuid_is_cut_at_forty_characters_and_device_type_is_prefixed() -> None:
    node = tiny_node("hami")
    node.cards[0].uuid = UUID0 + "\x00\x00-padding"
    text = node.exposition(NOW).decode()
    assert "padding" not in text
    assert f'device_uuid="{UUID0}"' in text
    assert len(UUID0) == 40


def test_last_kernel_series_only_once_a_kernel_ran() -> None:
    node = tiny_node("hami")
    node.allocations[0].last_kernel_time = None
    assert b"last_kernel" not in node.exposition(NOW)
    assert not any(
        name.endswith("last_kernel_elapsed_seconds") for name, _ in expected_canonical(node, NOW)
    )
    node.allocations[0].last_kernel_time = int(NOW) - 5
    assert b"} 5\n" in node.exposition(NOW + 0.9)
    assert b"} 0\n" in node.exposition(NOW - 100)  # a clock behind the kernel gives 0


def test_kai_reports_only_annotated_pods() -> None:
    node = tiny_node("kai", annotated=False)
    assert b"hami_vgpu_memory_used_bytes" not in node.exposition(NOW)
    assert all(name.startswith("hami_host_") for name, _ in expected_canonical(node, NOW))
    for flavour in ("hami", "volcano", "hami-legacy"):
        assert b"vgpu-share" in tiny_node(flavour, annotated=False).exposition(NOW)


def test_mig_info_only_in_hami() -> None:
    mig = MigSlice("MIG-4a1e3c2b-7f9d-5e6a-8b0c-1d2e3f4a5b6c", "1g.18gb", 9, 0)
    for flavour in MONITORS:
        node = tiny_node(flavour)
        node.allocations[0].mig = mig
        text = node.exposition(NOW).decode()
        canonical = expected_canonical(node, NOW)
        if flavour == "hami":
            assert (
                'hami_mig_device_info{compute_instance_id="0",container="cuda",'
                f'device_uuid="{UUID0}",gpu_instance_id="9",mig_uuid="{mig.mig_uuid}",'
                'namespace="default",pod="vgpu-share",profile="1g.18gb",vdevice_index="0",'
                'zone="vGPU"} 1\n'
            ) in text
            assert sum(name == "hami_mig_device_info" for name, _ in canonical) == 1
        else:
            assert "mig" not in text.lower()
            assert all(name != "hami_mig_device_info" for name, _ in canonical)


# --------------------------------------------------------------------------
# The oracle
# --------------------------------------------------------------------------

LEGACY_NAMES = {
    "HostGPUMemoryUsage": "hami_host_gpu_memory_used_bytes",
    "HostCoreUtilization": "hami_host_gpu_utilization_ratio",
    "vGPU_device_memory_usage_in_bytes": "hami_vgpu_memory_used_bytes",
    "vGPU_device_memory_limit_in_bytes": "hami_vgpu_memory_limit_bytes",
    "Device_memory_desc_of_container": "hami_container_device_memory_bytes",
    "Device_utilization_desc_of_container": "hami_container_device_utilization_ratio",
    "Device_last_kernel_of_container": "hami_container_last_kernel_elapsed_seconds",
}
LABEL_RENAMES = {
    "nodeid": "node",
    "deviceidx": "device_index",
    "deviceuuid": "device_uuid",
    "devicetype": "device_type",
    "podnamespace": "namespace",
    "podname": "pod",
    "ctrname": "container",
    "vdeviceid": "vdevice_index",
}
BREAKDOWN = {
    "context": "hami_vgpu_memory_context_bytes",
    "module": "hami_vgpu_memory_module_bytes",
    "data": "hami_vgpu_memory_buffer_bytes",
    "context_size": "hami_vgpu_memory_context_bytes",
    "module_size": "hami_vgpu_memory_module_bytes",
    "buffer_size": "hami_vgpu_memory_buffer_bytes",
}


def reference_normalise(text: str, node: str) -> dict[SeriesKey, float]:
    """A second, naive normaliser written from the reference tables (test-only)."""
    out: dict[SeriesKey, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            raw = family.name if family.type == "counter" else sample.name
            name = LEGACY_NAMES.get(raw, raw)
            labels = {LABEL_RENAMES.get(k, k): v for k, v in sample.labels.items()}
            labels.pop("offset", None)
            breakdown = {BREAKDOWN[k]: float(labels.pop(k)) for k in list(labels) if k in BREAKDOWN}
            labels["node"] = node
            for target, value in breakdown.items():
                out[(target, frozenset(labels.items()))] = value
            out[(name, frozenset(labels.items()))] = sample.value
    return out


@pytest.mark.parametrize("weird", [False, True])
def test_oracle_agrees_with_an_independent_normalisation(
    cluster: list[SimulatedNode], weird: bool
) -> None:
    for node in cluster:
        node.weird_labels = weird
        try:
            expected = expected_canonical(node, NOW)
            got = reference_normalise(node.exposition(NOW).decode(), node.name)
        finally:
            node.weird_labels = False
        assert got == expected, node


def test_oracle_shape(cluster: list[SimulatedNode]) -> None:
    for node in cluster:
        canonical = expected_canonical(node, NOW)
        assert canonical
        for name, labels in canonical:
            label_map = dict(labels)
            assert name.startswith("hami_")
            assert label_map["node"] == node.name
            assert "offset" not in label_map
            assert not set(label_map) & set(LABEL_RENAMES)
            assert ("zone" in label_map) == (name != "hami_build_info")
            if name.startswith("hami_host_"):
                assert ("device_type" in label_map) == (node.flavour != "volcano")
        assert ("hami_build_info" in {name for name, _ in canonical}) == (node.flavour == "hami")


def test_default_hami_node_has_248_series_plus_build_info() -> None:
    node = build_cluster(1, start_time=NOW)[0]
    assert node.flavour == "hami"
    canonical = expected_canonical(node, NOW)
    names = [name for name, _ in canonical]
    assert len(canonical) == 249
    assert names.count("hami_build_info") == 1
    assert len([n for n in names if n != "hami_build_info"]) == 248 == 8 * 3 + 28 * 8
    build = next(dict(labels) for name, labels in canonical if name == "hami_build_info")
    assert build == {**BUILD_INFO, "node": "gpu-node-001"}
    for now in (NOW + 61, NOW + 3600, NOW + 7200):
        node.step(now)
        assert len(expected_canonical(node, now)) == 249


def test_per_flavour_counts() -> None:
    nodes = build_cluster(4, seed=11, start_time=NOW)
    counts = {node.flavour: len(expected_canonical(node, NOW)) for node in nodes}
    assert counts["hami"] == 249
    assert counts["hami-legacy"] == counts["volcano"] == 8 * 2 + 28 * 8
    kai = next(node for node in nodes if node.flavour == "kai")
    assert counts["kai"] == 8 * 2 + 8 * len(kai.visible_allocations())
    lines = {node.flavour: len(node.samples(NOW)) for node in nodes}
    assert lines["hami"] == 249
    assert lines["volcano"] == lines["hami-legacy"] == 8 * 2 + 28 * 5


# --------------------------------------------------------------------------
# Clusters and time
# --------------------------------------------------------------------------


def test_build_cluster_names_and_shapes() -> None:
    nodes = build_cluster(6, seed=5, start_time=NOW, flavours=("kai", "volcano"))
    assert [n.name for n in nodes] == [f"gpu-node-00{i}" for i in range(1, 7)]
    assert [n.flavour for n in nodes] == ["kai", "volcano"] * 3
    for node in nodes:
        assert len(node.cards) == 8
        assert len(node.allocations) == 28
        for card in node.cards:
            assert re.fullmatch(
                r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", card.uuid
            )
            assert card.memory_used <= card.memory_total
        for a in node.allocations:
            assert re.fullmatch(r"[a-z]+-[b-z2-9]{9,10}-[b-z2-9]{5}", a.pod)
            assert a.namespace
            assert a.container in {"cuda", "main", "trainer", "pytorch", "worker"}
            assert 0 <= a.used <= a.limit
            assert a.context + a.module + a.buffer + a.offset == a.used
            assert a.last_kernel_time is not None
        identities = {(a.namespace, a.pod, a.container, a.vdevice_index) for a in node.allocations}
        assert len(identities) == 28
    assert (
        build_cluster(1000, cards=0, allocations_per_node=0, start_time=NOW)[-1].name
        == "gpu-node-1000"
    )
    with pytest.raises(ValueError, match="flavour"):
        build_cluster(1, flavours=("slurm",))
    with pytest.raises(ValueError, match="card"):
        build_cluster(1, cards=0)


def test_cluster_is_deterministic() -> None:
    first = build_cluster(4, seed=9, start_time=NOW)
    second = build_cluster(4, seed=9, start_time=NOW)
    other = build_cluster(4, seed=10, start_time=NOW)
    times = (NOW, NOW + 0.5, NOW + 61, NOW + 3000.25)
    for a, b in zip(first, second, strict=True):
        for t in times:
            a.step(t)
            b.step(t)
        assert a.exposition(times[-1]) == b.exposition(times[-1])
    assert [n.exposition(NOW) for n in other] != [n.exposition(NOW) for n in first]


def test_step_drifts_churns_and_stays_bounded() -> None:
    node = build_cluster(1, seed=4, start_time=NOW)[0]
    node.step(NOW)
    before = node.exposition(NOW)
    revision = node.revision
    node.step(NOW + 0.7)  # same second: nothing changes
    assert node.revision == revision
    pods_at_start = {a.pod_uid for a in node.allocations}
    seen_values: set[int] = set()
    for minute in range(1, 241):
        node.step(NOW + 60 * minute)
        assert len(node.allocations) == 28
        assert (
            len({(a.namespace, a.pod, a.container, a.vdevice_index) for a in node.allocations})
            == 28
        )
        assert all(0 <= a.used <= a.limit and 0 <= a.sm_util <= 100 for a in node.allocations)
        seen_values.add(node.allocations[0].used)
    assert node.exposition(NOW + 60 * 240) != before
    assert {a.pod_uid for a in node.allocations} != pods_at_start  # some pods ended, others began
    assert len(expected_canonical(node, NOW + 60 * 240)) == 249


# --------------------------------------------------------------------------
# The farm
# --------------------------------------------------------------------------


def parse(text: str) -> list[object]:
    return list(text_string_to_metric_families(text))


@pytest.fixture
async def farm() -> AsyncIterator[MonitorFarm]:
    nodes = build_cluster(4, seed=2, start_time=NOW - 60)
    async with MonitorFarm(
        nodes,
        stall_s=5.0,
        drip_interval_s=0.2,
        clock=lambda: NOW,
    ) as running:
        yield running


def test_loopback_addresses() -> None:
    assert [loopback_address(i) for i in (0, 1, 253, 254, 254 * 256)] == [
        "127.1.0.1",
        "127.1.0.2",
        "127.1.0.254",
        "127.1.1.1",
        "127.2.0.1",
    ]


async def test_farm_serves_each_node_plain_and_gzip(farm: MonitorFarm) -> None:
    targets = farm.targets()
    assert [(name, flavour) for name, flavour, _ in targets] == [
        ("gpu-node-001", "hami"),
        ("gpu-node-002", "hami-legacy"),
        ("gpu-node-003", "volcano"),
        ("gpu-node-004", "kai"),
    ]
    assert [address.rsplit(":", 1)[0] for _, _, address in targets] == [
        "127.1.0.1",
        "127.1.0.2",
        "127.1.0.3",
        "127.1.0.4",
    ]
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        for name, _, address in targets:
            url = f"http://{address}/metrics"
            assert farm.url(name) == url
            async with session.get(url, headers={"Accept-Encoding": "identity"}) as response:
                assert response.status == 200
                assert response.headers["Content-Type"] == TEXT_CONTENT_TYPE
                assert "Content-Encoding" not in response.headers
                plain = await response.read()
            assert plain == farm.node(name).exposition(NOW)
            parse(plain.decode())
            async with session.get(url, headers={"Accept-Encoding": "gzip"}) as response:
                assert response.status == 200
                assert response.headers["Content-Encoding"] == "gzip"
                assert response.headers["Content-Type"] == TEXT_CONTENT_TYPE
                assert gzip.decompress(await response.read()) == plain
            assert farm.request_count(name) == 2
        async with session.get(f"http://{targets[0][2]}/other") as response:
            assert response.status == 404


async def test_farm_binds_a_given_port() -> None:
    nodes = build_cluster(2, start_time=NOW)
    with reserved_port("127.1.0.1", "127.1.0.2") as port:
        async with MonitorFarm(nodes, port=port, clock=lambda: NOW) as running:
            assert running.address("gpu-node-001") == f"127.1.0.1:{port}"
            assert running.address("gpu-node-002") == f"127.1.0.2:{port}"
            async with (
                aiohttp.ClientSession() as session,
                session.get(running.url("gpu-node-002")) as response,
            ):
                assert await response.read() == nodes[1].exposition(NOW)


async def test_fault_flaky(farm: MonitorFarm) -> None:
    name = "gpu-node-001"
    farm.set_fault(name, "flaky")
    statuses: list[int | str] = []
    timeout = aiohttp.ClientTimeout(total=0.3)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for _ in range(6):
            try:
                async with session.get(farm.url(name)) as response:
                    await response.read()
                    statuses.append(response.status)
            except TimeoutError:
                statuses.append("timeout")
    assert statuses == [200, 200, 500, 200, "timeout", 500]
    farm.set_fault(name, None)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(farm.url(name)) as response,
    ):
        assert response.status == 200


async def test_fault_500_html_and_unknown(farm: MonitorFarm) -> None:
    name = "gpu-node-002"
    async with aiohttp.ClientSession() as session:
        farm.set_fault(name, "500")
        async with session.get(farm.url(name)) as response:
            assert response.status == 500
        farm.set_fault(name, "html")
        async with session.get(farm.url(name)) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/html")
            assert (await response.text()).startswith("<!DOCTYPE html>")
    with pytest.raises(ValueError, match="unknown fault"):
        farm.set_fault(name, "explode")
    assert set(FAULTS) >= {"flaky", "500", "html", "malformed", "timeout", "drip"}


async def test_fault_malformed(farm: MonitorFarm) -> None:
    name = "gpu-node-003"
    farm.set_fault(name, "malformed")
    async with aiohttp.ClientSession() as session, session.get(farm.url(name)) as response:
        assert response.status == 200
        body = (await response.read()).decode()
    good = farm.node(name).exposition(NOW).decode().splitlines()
    lines = body.splitlines()
    assert len(lines) == len(good) + 1
    broken = [line for line in lines if line not in good]
    assert len(broken) == 1
    assert len(good) // 4 < lines.index(broken[0]) < 3 * len(good) // 4
    with pytest.raises(ValueError):  # noqa: PT011 - the parser's message is not ours
        parse(body)


async def test_fault_timeout_and_a_clean_stop() -> None:
    nodes = build_cluster(1, start_time=NOW)
    running = MonitorFarm(nodes, stall_s=30.0, clock=lambda: NOW)
    await running.start()
    running.set_fault("gpu-node-001", "timeout")
    timeout = aiohttp.ClientTimeout(total=0.3)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        with pytest.raises(TimeoutError):
            async with session.get(running.url("gpu-node-001")) as response:
                await response.read()
    # A request still stalled when the farm stops must not keep anything alive.
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))

    async def stalled() -> int:
        async with session.get(running.url("gpu-node-001")) as response:
            return response.status

    client = asyncio.create_task(stalled())
    await eventually(lambda: holds(running.request_count("gpu-node-001") == 2), 5, "stalled")
    async with asyncio.timeout(
        MAX_STALL_S / 4
    ):  # stopping cuts the stall short, never waits it out
        await running.stop()
    with pytest.raises(aiohttp.ClientError):
        await client
    await session.close()
    await asyncio.sleep(0)  # one turn of the loop, so the closed session's callbacks have run
    assert {t for t in asyncio.all_tasks() if not t.done()} == {asyncio.current_task()}
    await running.stop()  # idempotent


async def test_fault_drip(farm: MonitorFarm) -> None:
    name = "gpu-node-004"
    farm.set_fault(name, "drip")
    received = b""
    async with aiohttp.ClientSession() as session, session.get(farm.url(name)) as response:
        assert response.status == 200
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 0.7
        while loop.time() < deadline:
            try:
                received += await asyncio.wait_for(
                    response.content.readany(), deadline - loop.time()
                )
            except TimeoutError:
                break
    assert 1 <= len(received) <= 5
    assert farm.node(name).exposition(NOW).startswith(received)


async def test_fault_oversized_reads_only_a_prefix(farm: MonitorFarm) -> None:
    name = "gpu-node-001"
    farm.set_fault(name, "oversized")
    prefix = b""
    async with aiohttp.ClientSession() as session, session.get(farm.url(name)) as response:
        assert response.status == 200
        assert "Content-Length" not in response.headers
        while len(prefix) < 2 * MIB:
            chunk = await response.content.readany()
            assert chunk
            prefix += chunk
    families = parse(prefix[: prefix.rindex(b"\n") + 1].decode())
    assert len(families) == 1


async def test_fault_oversized_total_size() -> None:
    nodes = build_cluster(1, start_time=NOW)
    async with (
        MonitorFarm(nodes, oversized_bytes=3 * MIB, clock=lambda: NOW) as running,
        aiohttp.ClientSession() as session,
    ):
        running.set_fault("gpu-node-001", "oversized")
        async with session.get(running.url("gpu-node-001")) as response:
            body = await response.read()
    assert len(body) >= 3 * MIB
    assert body.endswith(b"\n")


async def test_fault_gzip_bomb_reads_only_a_prefix(farm: MonitorFarm) -> None:
    name = "gpu-node-002"
    farm.set_fault(name, "gzip_bomb")
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.get(farm.url(name), headers={"Accept-Encoding": "identity"}) as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Encoding"] == "gzip"
        compressed = await response.read()
    assert len(compressed) < 16 * MIB
    expanded_mod_2_32 = struct.unpack("<I", compressed[-4:])[0]
    bomb = build_gzip_bomb(GIB + 64 * MIB)
    assert bomb.body == compressed
    assert bomb.expanded_size > GIB
    assert expanded_mod_2_32 == bomb.expanded_size % (1 << 32)
    decompressor = zlib.decompressobj(wbits=31)
    prefix = decompressor.decompress(compressed[: 256 * 1024], MIB)
    assert len(prefix) == MIB
    assert len(parse(prefix[: prefix.rindex(b"\n") + 1].decode())) == 1


def test_small_gzip_bomb_is_valid_gzip() -> None:
    bomb = build_gzip_bomb(3 * MIB + 17, chunk_bytes=64 * 1024)
    data = gzip.decompress(bomb.body)  # checks the CRC and the length
    assert len(data) == bomb.expanded_size >= 3 * MIB + 17
    assert data.endswith(b"\n")
    parse(data[:100_000][: data[:100_000].rindex(b"\n") + 1].decode())


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_crc32_combine(first: bytes, second: bytes) -> None:
    combined = crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second))
    assert combined == zlib.crc32(first + second)


async def test_fault_weird_labels(farm: MonitorFarm) -> None:
    name = "gpu-node-001"
    farm.set_fault(name, "weird_labels")
    async with aiohttp.ClientSession() as session, session.get(farm.url(name)) as response:
        body = (await response.read()).decode()
    for escaped in ('\\"', "\\\\", "\\n", "ü中"):
        assert escaped in body
    pods = {
        sample.labels["pod"]
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if "pod" in sample.labels
    }
    assert pods
    assert all(pod.endswith(WEIRD_SUFFIX) for pod in pods)
    node = farm.node(name)
    assert reference_normalise(body, name) == expected_canonical(node, NOW)
    farm.set_fault(name, None)
    assert not node.weird_labels
