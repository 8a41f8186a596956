"""A deterministic simulator of the per-node GPU monitors (HAMi, Volcano vGPU, KAI).

Every GPU node of a HAMi, Volcano vGPU or KAI cluster runs a monitor on port 9394
that serves Prometheus text for its own node. This module reproduces, byte for
byte, what each flavour of that monitor serves, from simulated cards and vGPU
allocations whose values drift with time, and states independently which
canonical series a correct collector must output for the node
(:meth:`SimulatedNode.expected_canonical`).

Flavours (see ``MONITOR_METRICS`` for the exact families, HELP texts and labels):

``hami``
    HAMi v2.10 ``vGPUmonitor``: canonical ``hami_*`` names; host series labelled
    node/device_index/device_uuid/device_type except the memory-controller one,
    which has no node; ``hami_build_info``; ``hami_mig_device_info`` for MIG slices.
``hami-legacy``
    HAMi before 2.9: legacy names only; host series carry nodeid, deviceidx,
    deviceuuid, devicetype; ``Device_memory_desc_of_container`` is a counter whose
    byte breakdown sits in the context/module/data/offset labels.
``volcano``
    Volcano vGPU monitor: legacy names; host series carry only deviceidx and
    deviceuuid; ``Device_memory_desc_of_container`` is a counter.
``kai``
    KAI ``kai-resource-isolator`` monitor: ``hami_*`` names; host memory and
    utilisation only, without node; ``hami_container_device_memory_bytes`` keeps
    context_size/module_size/buffer_size/offset labels; container series only
    for pods annotated ``gpu-fraction`` or ``gpu-memory``; no MIG, no build info.

Everything here is pure Python, performs no I/O and is deterministic: a cluster
is a function of ``(seed, start_time)`` and a node's later state a function of
the times passed to :meth:`SimulatedNode.step`.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "BUILD_INFO",
    "FLAVOURS",
    "KAI_SHARING_ANNOTATIONS",
    "MONITOR_METRICS",
    "WEIRD_SUFFIX",
    "ZONE",
    "Allocation",
    "Card",
    "MetricSpec",
    "MigSlice",
    "Sample",
    "SeriesKey",
    "SimulatedNode",
    "build_cluster",
    "escape_help",
    "escape_label_value",
    "format_sample_value",
    "go_float",
    "render_exposition",
]

FLAVOURS: tuple[str, ...] = ("hami", "hami-legacy", "volcano", "kai")
"""The monitor flavours the simulator can impersonate."""

ZONE = "vGPU"
"""Constant label every monitor adds to its collector's series (not to hami_build_info)."""

SeriesKey = tuple[str, frozenset[tuple[str, str]]]
"""A series identity: metric name plus its full label set."""

MIB = 1 << 20
_TWO_MIB = 2 * MIB

BUILD_INFO: Mapping[str, str] = {
    "build_date": "2026-03-18T09:12:44Z",
    "compiler": "gc",
    "go_version": "go1.24.6",
    "platform": "linux/amd64",
    "revision": "9c41d7be",
    "version": "v2.10.0",
}
"""Label values of the simulated HAMi v2.10 ``hami_build_info`` series."""

WEIRD_SUFFIX = ' q"uote b\\ack n\nl {br},c=v ü中'
"""Appended to namespace, pod and container while a node's ``weird_labels`` is on."""


# --------------------------------------------------------------------------
# Number and text formatting, as Go's client_golang writes the text format
# --------------------------------------------------------------------------


def _shortest_digits(value: float) -> tuple[str, int]:
    """Shortest round-trip decimal digits of a finite positive float.

    Returns ``(digits, point)`` with ``value == 0.<digits> * 10**point`` and no
    leading or trailing zeros in ``digits``. Python's ``repr`` and Go's strconv
    both pick the shortest string that round-trips (the closest one on ties).
    """
    if value < 1e15 and value.is_integer():  # fast path: most samples are whole numbers
        whole = str(int(value))
        return whole.rstrip("0"), len(whole)
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    return stripped.rstrip("0"), point


def go_float(value: float) -> str:
    """Format like Go's ``strconv.FormatFloat(value, 'g', -1, 64)``.

    Go's rule for the shortest 'g' form: with ``x`` the decimal exponent of the
    value written as d.ddd * 10**x, use the %e form when ``x < -4 or x >= 6`` (the
    precision is taken as 6 when it is "shortest"; the threshold of 21 belongs to
    fmt's ``%v``, not to strconv), else the %f form. The exponent has a sign and
    at least two digits: ``2.87244288e+08``, ``1e-05``, ``3664``, ``0.0001``.
    NaN is ``NaN``, infinities are ``+Inf`` / ``-Inf``, negative zero ``-0``.
    """
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, v) < 0 else ""
    if v == 0:
        return sign + "0"
    digits, point = _shortest_digits(abs(v))
    exponent = point - 1
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        exp_sign = "-" if exponent < 0 else "+"
        return f"{sign}{mantissa}e{exp_sign}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def format_sample_value(value: float) -> str:
    """A sample value as client_golang's text writer prints it (any zero is ``0``)."""
    if value == 0:
        return "0"
    return go_float(value)


def escape_label_value(value: str) -> str:
    """Escape a label value for the text format: backslash, double quote, newline."""
    if "\\" not in value and '"' not in value and "\n" not in value:
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    """Escape a HELP text for the text format: backslash and newline only."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


# --------------------------------------------------------------------------
# What each flavour's monitor declares
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One family a monitor declares: name, HELP, variable labels (upstream order), type."""

    name: str
    help: str
    labels: tuple[str, ...]
    type: str = "gauge"
    zone: bool = True
    """Whether the monitor's wrapping registerer adds ``zone="vGPU"``."""


class Sample(NamedTuple):
    """One exposed sample: name, complete label set (zone included) and value."""

    name: str
    labels: dict[str, str]
    value: float


_HOST_V210 = ("node", "device_index", "device_uuid", "device_type")
_HOST_NO_NODE = ("device_index", "device_uuid", "device_type")
_CTR = ("namespace", "pod", "container", "vdevice_index", "device_uuid")
_LEGACY_CTR = ("podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid")
_LEGACY_MEMORY = (*_LEGACY_CTR, "context", "module", "data", "offset")


def _table(*specs: MetricSpec) -> dict[str, MetricSpec]:
    return {spec.name: spec for spec in specs}


_HAMI_CONTAINER_SPECS = (
    MetricSpec("hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes", _CTR),
    MetricSpec("hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes", _CTR),
    MetricSpec(
        "hami_container_device_utilization_ratio", "Container device SM utilization ratio", _CTR
    ),
    MetricSpec(
        "hami_container_last_kernel_elapsed_seconds",
        "Seconds since last kernel execution in container",
        _CTR,
    ),
    MetricSpec(
        "hami_vgpu_memory_context_bytes", "Container device memory context size in bytes", _CTR
    ),
    MetricSpec(
        "hami_vgpu_memory_module_bytes", "Container device memory module size in bytes", _CTR
    ),
    MetricSpec(
        "hami_vgpu_memory_buffer_bytes", "Container device memory buffer size in bytes", _CTR
    ),
)

_LEGACY_CONTAINER_SPECS = (
    MetricSpec("vGPU_device_memory_usage_in_bytes", "vGPU device usage", _LEGACY_CTR),
    MetricSpec("vGPU_device_memory_limit_in_bytes", "vGPU device limit", _LEGACY_CTR),
    MetricSpec(
        "Device_memory_desc_of_container",
        "Container device meory description",  # sic: the typo is upstream's
        _LEGACY_MEMORY,
        type="counter",
    ),
    MetricSpec(
        "Device_utilization_desc_of_container",
        "Container device utilization description",
        _LEGACY_CTR,
    ),
    MetricSpec(
        "Device_last_kernel_of_container", "Container device last kernel description", _LEGACY_CTR
    ),
)

MONITOR_METRICS: Mapping[str, Mapping[str, MetricSpec]] = {
    "hami": _table(
        MetricSpec(
            "hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes", _HOST_V210
        ),
        MetricSpec(
            "hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)", _HOST_V210
        ),
        MetricSpec(
            "hami_host_gpu_memory_controller_utilization_ratio",
            "GPU memory controller utilization ratio (0-100)",
            _HOST_NO_NODE,
        ),
        *_HAMI_CONTAINER_SPECS,
        MetricSpec(
            "hami_container_device_memory_bytes", "Container device memory usage in bytes", _CTR
        ),
        MetricSpec(
            "hami_mig_device_info",
            "MIG runtime identity for a container allocation",
            (*_CTR, "mig_uuid", "profile", "gpu_instance_id", "compute_instance_id"),
        ),
        MetricSpec(
            "hami_build_info",
            "hami build metadata exposed as labels with a constant value of 1.",
            ("build_date", "compiler", "go_version", "platform", "revision", "version"),
            zone=False,
        ),
    ),
    "kai": _table(
        MetricSpec(
            "hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes", _HOST_NO_NODE
        ),
        MetricSpec(
            "hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)", _HOST_NO_NODE
        ),
        *_HAMI_CONTAINER_SPECS,
        MetricSpec(
            "hami_container_device_memory_bytes",
            'Container device memory usage breakdown in bytes (The label "context_size", '
            '"module_size", "buffer_size" and "offset" will be deprecated in v2.10.0, use '
            "hami_vgpu_memory_context_bytes, hami_vgpu_memory_module_bytes and "
            "hami_vgpu_memory_buffer_bytes instead)",
            (*_CTR, "context_size", "module_size", "buffer_size", "offset"),
        ),
    ),
    "hami-legacy": _table(
        MetricSpec(
            "HostGPUMemoryUsage",
            "GPU device memory usage",
            ("nodeid", "deviceidx", "deviceuuid", "devicetype"),
        ),
        MetricSpec(
            "HostCoreUtilization",
            "GPU core utilization",
            ("nodeid", "deviceidx", "deviceuuid", "devicetype"),
        ),
        *_LEGACY_CONTAINER_SPECS,
    ),
    "volcano": _table(
        MetricSpec("HostGPUMemoryUsage", "GPU device memory usage", ("deviceidx", "deviceuuid")),
        MetricSpec("HostCoreUtilization", "GPU core utilization", ("deviceidx", "deviceuuid")),
        *_LEGACY_CONTAINER_SPECS,
    ),
}
"""flavour -> metric name -> what that flavour's monitor declares for it."""

KAI_SHARING_ANNOTATIONS: tuple[str, ...] = ("gpu-fraction", "gpu-memory")
"""Pods carrying one of these annotations are the only ones the KAI monitor reports."""


def render_exposition(samples: Iterable[Sample], specs: Mapping[str, MetricSpec]) -> bytes:
    """Render samples as client_golang's promhttp does (text format 0.0.4).

    Families sorted by name, each with ``# HELP`` then ``# TYPE``; samples sorted
    by their label values taken in label-name order; labels sorted by name;
    label values and HELP escaped; values formatted with :func:`go_float`.
    """
    by_name: dict[str, list[Sample]] = {}
    for sample in samples:
        by_name.setdefault(sample.name, []).append(sample)
    parts: list[str] = []
    pairs_seen: dict[tuple[str, str], str] = {}  # label values repeat a lot: render each once
    for name in sorted(by_name):
        spec = specs[name]
        parts.append(f"# HELP {name} {escape_help(spec.help)}\n# TYPE {name} {spec.type}\n")
        rows: list[tuple[int, tuple[str, ...], list[str], float]] = []
        for sample in by_name[name]:
            keys = sorted(sample.labels)
            values = tuple(sample.labels[key] for key in keys)
            rows.append((len(keys), values, keys, sample.value))
        rows.sort(key=lambda row: (row[0], row[1]))
        for _, values, keys, value in rows:
            if keys:
                rendered_pairs: list[str] = []
                for pair in zip(keys, values, strict=True):
                    text = pairs_seen.get(pair)
                    if text is None:
                        text = f'{pair[0]}="{escape_label_value(pair[1])}"'
                        pairs_seen[pair] = text
                    rendered_pairs.append(text)
                pairs = ",".join(rendered_pairs)
                parts.append(f"{name}{{{pairs}}} {format_sample_value(value)}\n")
            else:
                parts.append(f"{name} {format_sample_value(value)}\n")
    return "".join(parts).encode("utf-8")


# --------------------------------------------------------------------------
# The simulated hardware and workload
# --------------------------------------------------------------------------


@dataclass(slots=True)
class Card:
    """One physical GPU as NVML reports it, plus its current host-level readings."""

    index: int
    uuid: str
    """The NVML UUID; monitors publish its first 40 characters."""
    name: str
    """The NVML name, e.g. ``NVIDIA H200``; monitors publish ``"NVIDIA-" + name``."""
    memory_total: int
    memory_used: int = 0
    utilization: int = 0
    memory_controller_utilization: int = 0
    reserved: int = 287244288
    """Bytes NVML counts as used on the card outside any vGPU allocation."""

    @property
    def device_type(self) -> str:
        """The ``device_type`` / ``devicetype`` label value (known upstream double prefix)."""
        return "NVIDIA-" + self.name

    @property
    def device_uuid(self) -> str:
        """The ``device_uuid`` / ``deviceuuid`` label value."""
        return self.uuid[:40]


@dataclass(frozen=True, slots=True)
class MigSlice:
    """The MIG identity of an allocation (only the ``hami`` flavour publishes it)."""

    mig_uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int


@dataclass(slots=True)
class Allocation:
    """One vGPU of one container: HAMi-core's per-device accounting for it."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    card: int
    """Index of the physical card backing this vGPU."""
    vdevice_index: int
    limit: int
    used: int
    context: int
    module: int
    buffer: int
    sm_util: int
    last_kernel_time: int | None
    """Unix seconds of the container's last kernel launch; None while none ran."""
    kai_annotation: str | None = "gpu-fraction"
    """The pod's KAI sharing annotation; only the ``kai`` flavour looks at it."""
    mig: MigSlice | None = None

    @property
    def offset(self) -> int:
        """Bytes in use beyond context, module and buffer (never negative)."""
        return max(self.used - self.context - self.module - self.buffer, 0)

    @property
    def key(self) -> tuple[str, str, int]:
        """Identity within a node: pod UID, container, vdevice index."""
        return (self.pod_uid, self.container, self.vdevice_index)


@dataclass(frozen=True, slots=True)
class _Profile:
    """How one allocation's readings move with time (fixed for its lifetime)."""

    busy: bool
    base_buffer: int
    room: int
    offset: int
    amplitude: float
    period: float
    phase: float
    base_util: int
    util_amplitude: float
    util_period: float
    util_phase: float


def _triangle(x: float) -> float:
    """A triangle wave of period 1 with values in [-1, 1]."""
    fraction = x - math.floor(x)
    return 4.0 * abs(fraction - 0.5) - 1.0


# Workload vocabulary for build_cluster and churn.
_GPU_MODELS: tuple[tuple[str, int], ...] = (
    ("NVIDIA H200", 143771 * MIB),
    ("NVIDIA H100 80GB HBM3", 81559 * MIB),
    ("NVIDIA A100-SXM4-80GB", 81920 * MIB),
    ("NVIDIA L40S", 46068 * MIB),
    ("Tesla T4", 15360 * MIB),
)
_GPU_MODEL_WEIGHTS = (4, 3, 2, 1, 1)
_NAMESPACES = (
    "team-a",
    "team-b",
    "team-c",
    "team-d",
    "ml-platform",
    "research",
    "inference",
    "default",
)
_POD_KINDS = ("train", "train", "train", "infer", "finetune", "notebook", "eval")
_SINGLE_CONTAINERS = ("cuda", "main", "main", "trainer", "pytorch", "worker")
_PAIR_CONTAINERS = ("main", "worker")
_K8S_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_LIMITS_MIB = (2048, 3000, 4096, 8000, 10240, 16384, 20000, 24576, 40960)
_CONTEXTS = (0, 304087040, 331350016, 379584512, 413138944, 547356672)
_MODULES = (0, 0, 2097152, 6291456, 14680064)
_OFFSETS = (0, 0, 0, 2097152, 4194304)
_RESERVED = (287244288, 287244288, 454033408, 524288000)


def _k8s_suffix(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(_K8S_ALPHABET) for _ in range(length))


def _hex(rng: random.Random, length: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(length))


def _gpu_uuid(rng: random.Random) -> str:
    """An NVML-style UUID: ``GPU-`` + 8-4-4-4-12 hex digits, 40 characters."""
    return f"GPU-{_hex(rng, 8)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 12)}"


def _pod_uid(rng: random.Random) -> str:
    return f"{_hex(rng, 8)}-{_hex(rng, 4)}-4{_hex(rng, 3)}-{_hex(rng, 4)}-{_hex(rng, 12)}"


def _pod_name(rng: random.Random) -> str:
    kind = rng.choice(_POD_KINDS)
    return f"{kind}-{_k8s_suffix(rng, rng.choice((9, 10)))}-{_k8s_suffix(rng, 5)}"


def _kai_annotation(rng: random.Random) -> str | None:
    if rng.random() < 0.125:
        return None
    return rng.choice(KAI_SHARING_ANNOTATIONS)


@dataclass(frozen=True, slots=True)
class _Slot:
    """One vGPU of a pod being created: container, vdevice index, card, limit cap (MiB)."""

    container: str
    vdevice_index: int
    card: int
    limit_cap_mib: int


def _new_pod(
    rng: random.Random,
    slots: Sequence[_Slot],
    now: int,
    taken_names: set[tuple[str, str]],
    annotation: str | None,
) -> list[Allocation]:
    """Allocations of a fresh pod occupying ``slots``, started at ``now``."""
    namespace = rng.choice(_NAMESPACES)
    pod = _pod_name(rng)
    while (namespace, pod) in taken_names:
        pod = _pod_name(rng)
    taken_names.add((namespace, pod))
    uid = _pod_uid(rng)
    busy_by_container: dict[str, bool] = {}
    kernel_by_container: dict[str, int] = {}
    allocations: list[Allocation] = []
    for slot in slots:
        if slot.container not in busy_by_container:
            busy = rng.random() < 0.75
            busy_by_container[slot.container] = busy
            kernel_by_container[slot.container] = now if busy else now - rng.randint(30, 7200)
        busy = busy_by_container[slot.container]
        choices = [mib for mib in _LIMITS_MIB if mib <= slot.limit_cap_mib]
        limit = (rng.choice(choices) if choices else max(slot.limit_cap_mib, 256)) * MIB
        context, module, offset = rng.choice(_CONTEXTS), rng.choice(_MODULES), rng.choice(_OFFSETS)
        if context + module + offset > limit // 2:
            context, module, offset = 0, 0, 0
        room = limit - context - module - offset
        buffer = int(room * rng.uniform(0.05, 0.85)) // _TWO_MIB * _TWO_MIB
        allocations.append(
            Allocation(
                namespace=namespace,
                pod=pod,
                pod_uid=uid,
                container=slot.container,
                card=slot.card,
                vdevice_index=slot.vdevice_index,
                limit=limit,
                used=context + module + buffer + offset,
                context=context,
                module=module,
                buffer=buffer,
                sm_util=rng.randint(5, 95) if busy else 0,
                last_kernel_time=kernel_by_container[slot.container],
                kai_annotation=annotation,
            )
        )
    return allocations


class SimulatedNode:
    """One GPU node and the monitor running on it, in one of :data:`FLAVOURS`."""

    CHURN_PERIOD_S = 60
    """Pods may end (and be replaced) once per this many seconds of simulated time."""
    CHURN_PROBABILITY = 0.04
    """Chance that a given pod ends at a churn point."""
    MAX_CHURN_EPOCHS = 16
    """A step that jumps further than this many churn periods applies only the last ones."""

    def __init__(
        self,
        name: str,
        flavour: str,
        cards: Sequence[Card],
        allocations: Sequence[Allocation],
        seed: int = 0,
    ) -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"unknown flavour {flavour!r}; expected one of {FLAVOURS}")
        indices = [card.index for card in cards]
        if len(set(indices)) != len(indices):
            raise ValueError(f"node {name}: duplicate card index in {indices}")
        missing = {a.card for a in allocations} - set(indices)
        if missing:
            raise ValueError(f"node {name}: allocations reference unknown cards {sorted(missing)}")
        self.name = name
        self.flavour = flavour
        self.cards: list[Card] = list(cards)
        self.allocations: list[Allocation] = list(allocations)
        self.seed = seed
        self.revision = 0
        """Bumped whenever the node's state changes; lets servers cache renderings."""
        self._weird_labels = False
        self._tick: int | None = None
        self._epoch: int | None = None
        self._profiles: dict[tuple[str, str, int], _Profile] = {}

    def __repr__(self) -> str:
        return (
            f"SimulatedNode(name={self.name!r}, flavour={self.flavour!r}, "
            f"cards={len(self.cards)}, allocations={len(self.allocations)}, seed={self.seed})"
        )

    # -- state --------------------------------------------------------------

    @property
    def weird_labels(self) -> bool:
        """While on, namespace/pod/container label values end in :data:`WEIRD_SUFFIX`."""
        return self._weird_labels

    @weird_labels.setter
    def weird_labels(self, value: bool) -> None:
        if value != self._weird_labels:
            self._weird_labels = value
            self.revision += 1

    def refresh_cards(self) -> None:
        """Derive each card's host readings from the allocations it backs.

        memory used = reserved + sum of vGPU usage (capped at the total),
        utilisation = sum of SM utilisation (capped at 100), memory-controller
        utilisation = 40 % of that.
        """
        used: dict[int, int] = {card.index: 0 for card in self.cards}
        util: dict[int, int] = {card.index: 0 for card in self.cards}
        for allocation in self.allocations:
            used[allocation.card] += allocation.used
            util[allocation.card] += allocation.sm_util
        for card in self.cards:
            card.memory_used = min(card.memory_total, card.reserved + used[card.index])
            card.utilization = min(100, util[card.index])
            card.memory_controller_utilization = card.utilization * 2 // 5
        self.revision += 1

    def step(self, now: float) -> None:
        """Advance the simulation to ``now`` (Unix seconds).

        Readings are a function of the whole second ``floor(now)``, so repeated
        calls within one second change nothing. Every :attr:`CHURN_PERIOD_S`
        seconds each pod ends with :attr:`CHURN_PROBABILITY` and a new pod with
        the same shape (containers, vGPUs, cards) takes its place, so the number
        of allocations never changes. The first call only sets the readings.
        Card readings are then re-derived (:meth:`refresh_cards`); a node built by
        hand keeps the card readings it was given until its first step.
        """
        tick = math.floor(now)
        if tick == self._tick:
            return
        epoch = tick // self.CHURN_PERIOD_S
        if self._epoch is not None and epoch > self._epoch:
            first = max(self._epoch + 1, epoch - self.MAX_CHURN_EPOCHS + 1)
            for churn_epoch in range(first, epoch + 1):
                self._churn(churn_epoch, tick)
        self._epoch = epoch
        self._tick = tick
        self._apply_readings(tick)
        self.refresh_cards()

    def _profile(self, allocation: Allocation) -> _Profile:
        profile = self._profiles.get(allocation.key)
        if profile is None:
            pod_uid, container, vdevice = allocation.key
            rng = random.Random(f"profile|{self.seed}|{self.name}|{pod_uid}|{container}|{vdevice}")
            busy = allocation.sm_util > 0
            offset = allocation.offset
            room = max(
                allocation.limit - allocation.context - allocation.module - offset,
                allocation.buffer,
                0,
            )
            profile = _Profile(
                busy=busy,
                base_buffer=allocation.buffer,
                room=room,
                offset=offset,
                amplitude=allocation.buffer * rng.uniform(0.05, 0.3) if busy else 0.0,
                period=rng.uniform(120.0, 900.0),
                phase=rng.random(),
                base_util=allocation.sm_util,
                util_amplitude=rng.uniform(3.0, 20.0) if busy else 0.0,
                util_period=rng.uniform(30.0, 300.0),
                util_phase=rng.random(),
            )
            self._profiles[allocation.key] = profile
        return profile

    def _apply_readings(self, tick: int) -> None:
        last_kernel: dict[tuple[str, str], int] = {}
        for allocation in self.allocations:
            profile = self._profile(allocation)
            if profile.amplitude:
                wave = _triangle(tick / profile.period + profile.phase)
                raw = int(profile.base_buffer + profile.amplitude * wave)
                buffer = min(max(raw // _TWO_MIB * _TWO_MIB, 0), profile.room)
            else:
                buffer = profile.base_buffer
            allocation.buffer = buffer
            allocation.used = allocation.context + allocation.module + buffer + profile.offset
            if profile.busy:
                wave = _triangle(tick / profile.util_period + profile.util_phase)
                allocation.sm_util = min(
                    100, max(1, round(profile.base_util + profile.util_amplitude * wave))
                )
                allocation.last_kernel_time = tick
            else:
                allocation.sm_util = 0
            if allocation.last_kernel_time is not None:
                container = (allocation.pod_uid, allocation.container)
                last_kernel[container] = max(
                    last_kernel.get(container, allocation.last_kernel_time),
                    allocation.last_kernel_time,
                )
        # HAMi-core keeps one last-kernel time per container, shared by its vGPUs.
        for allocation in self.allocations:
            shared = last_kernel.get((allocation.pod_uid, allocation.container))
            if shared is not None:
                allocation.last_kernel_time = shared

    def _churn(self, epoch: int, tick: int) -> None:
        rng = random.Random(f"churn|{self.seed}|{self.name}|{epoch}")
        pods: dict[str, list[Allocation]] = {}
        for allocation in self.allocations:
            pods.setdefault(allocation.pod_uid, []).append(allocation)
        ending = [uid for uid in pods if rng.random() < self.CHURN_PROBABILITY]
        if not ending:
            return
        taken = {(a.namespace, a.pod) for a in self.allocations}
        load: dict[int, int] = {}
        for allocation in self.allocations:
            load[allocation.card] = load.get(allocation.card, 0) + 1
        # A new vGPU may take at most its card's fair share of the memory.
        share_mib = {
            card.index: (card.memory_total - card.reserved)
            // MIB
            // max(load.get(card.index, 1), 1)
            for card in self.cards
        }
        for uid in ending:
            old = pods[uid]
            slots = [_Slot(a.container, a.vdevice_index, a.card, share_mib[a.card]) for a in old]
            fresh = _new_pod(rng, slots, tick, taken, _kai_annotation(rng))
            for allocation in old:
                self._profiles.pop(allocation.key, None)
            position = self.allocations.index(old[0])
            remaining = [a for a in self.allocations if a.pod_uid != uid]
            self.allocations = remaining[:position] + fresh + remaining[position:]
        self.revision += 1

    # -- what the monitor serves ----------------------------------------------

    def _identity(self, allocation: Allocation) -> tuple[str, str, str]:
        """(namespace, pod, container) as the monitor labels them."""
        if self._weird_labels:
            return (
                allocation.namespace + WEIRD_SUFFIX,
                allocation.pod + WEIRD_SUFFIX,
                allocation.container + WEIRD_SUFFIX,
            )
        return (allocation.namespace, allocation.pod, allocation.container)

    def visible_allocations(self) -> list[Allocation]:
        """The allocations this node's monitor reports (KAI: annotated pods only)."""
        if self.flavour == "kai":
            return [a for a in self.allocations if a.kai_annotation in KAI_SHARING_ANNOTATIONS]
        return list(self.allocations)

    def _card(self, index: int) -> Card:
        for card in self.cards:
            if card.index == index:
                return card
        raise KeyError(index)

    def samples(self, now: float) -> list[Sample]:
        """Every sample the monitor would serve at ``now``, in no particular order."""
        specs = MONITOR_METRICS[self.flavour]
        out: list[Sample] = []

        def emit(name: str, values: Sequence[str], value: float) -> None:
            spec = specs[name]
            labels = dict(zip(spec.labels, values, strict=True))
            if spec.zone:
                labels["zone"] = ZONE
            out.append(Sample(name, labels, float(value)))

        flavour = self.flavour
        for card in self.cards:
            index, uuid, dtype = str(card.index), card.device_uuid, card.device_type
            if flavour == "hami":
                host = (self.name, index, uuid, dtype)
                emit("hami_host_gpu_memory_used_bytes", host, card.memory_used)
                emit("hami_host_gpu_utilization_ratio", host, card.utilization)
                emit(
                    "hami_host_gpu_memory_controller_utilization_ratio",
                    (index, uuid, dtype),
                    card.memory_controller_utilization,
                )
            elif flavour == "kai":
                emit("hami_host_gpu_memory_used_bytes", (index, uuid, dtype), card.memory_used)
                emit("hami_host_gpu_utilization_ratio", (index, uuid, dtype), card.utilization)
            elif flavour == "hami-legacy":
                emit("HostGPUMemoryUsage", (self.name, index, uuid, dtype), card.memory_used)
                emit("HostCoreUtilization", (self.name, index, uuid, dtype), card.utilization)
            else:  # volcano
                emit("HostGPUMemoryUsage", (index, uuid), card.memory_used)
                emit("HostCoreUtilization", (index, uuid), card.utilization)

        tick = math.floor(now)
        for a in self.visible_allocations():
            namespace, pod, container = self._identity(a)
            ctr = (namespace, pod, container, str(a.vdevice_index), self._card(a.card).device_uuid)
            elapsed = None if a.last_kernel_time is None else max(tick - a.last_kernel_time, 0)
            if flavour in ("hami", "kai"):
                emit("hami_vgpu_memory_used_bytes", ctr, a.used)
                emit("hami_vgpu_memory_limit_bytes", ctr, a.limit)
                if flavour == "hami":
                    emit("hami_container_device_memory_bytes", ctr, a.used)
                else:
                    breakdown = (str(a.context), str(a.module), str(a.buffer), str(a.offset))
                    emit("hami_container_device_memory_bytes", (*ctr, *breakdown), a.used)
                emit("hami_container_device_utilization_ratio", ctr, a.sm_util)
                emit("hami_vgpu_memory_context_bytes", ctr, a.context)
                emit("hami_vgpu_memory_module_bytes", ctr, a.module)
                emit("hami_vgpu_memory_buffer_bytes", ctr, a.buffer)
                if elapsed is not None:
                    emit("hami_container_last_kernel_elapsed_seconds", ctr, elapsed)
                if flavour == "hami" and a.mig is not None:
                    mig = a.mig
                    identity = (
                        mig.mig_uuid,
                        mig.profile,
                        str(mig.gpu_instance_id),
                        str(mig.compute_instance_id),
                    )
                    emit("hami_mig_device_info", (*ctr, *identity), 1)
            else:  # hami-legacy, volcano
                emit("vGPU_device_memory_usage_in_bytes", ctr, a.used)
                emit("vGPU_device_memory_limit_in_bytes", ctr, a.limit)
                breakdown = (str(a.context), str(a.module), str(a.buffer), str(a.offset))
                emit("Device_memory_desc_of_container", (*ctr, *breakdown), a.used)
                emit("Device_utilization_desc_of_container", ctr, a.sm_util)
                if elapsed is not None:
                    emit("Device_last_kernel_of_container", ctr, elapsed)

        if flavour == "hami":
            build = specs["hami_build_info"].labels
            emit("hami_build_info", [BUILD_INFO[label] for label in build], 1)
        return out

    def exposition(self, now: float) -> bytes:
        """The exact body this node's monitor serves on ``/metrics`` at ``now``."""
        return render_exposition(self.samples(now), MONITOR_METRICS[self.flavour])

    # -- the oracle ---------------------------------------------------------------

    def expected_canonical(self, now: float) -> dict[SeriesKey, float]:
        """The canonical series a correct collector outputs for this node at ``now``.

        Written from the reference tables, independently of :meth:`samples`:
        HAMi v2.10 names; labels as the v2.10 monitor names them (legacy ones
        renamed), ``zone="vGPU"`` kept, ``node=<node name>`` on every series;
        the byte breakdown becomes the ``hami_vgpu_memory_{context,module,buffer}_bytes``
        series; ``offset`` is dropped; ``device_type`` appears only where the
        monitor sent it; ``hami_build_info`` passes through with ``node`` added.
        """
        result: dict[SeriesKey, float] = {}

        def put(name: str, labels: dict[str, str], value: float) -> None:
            full = dict(labels)
            full["node"] = self.name
            result[(name, frozenset(full.items()))] = float(value)

        for card in self.cards:
            host = {
                "device_index": str(card.index),
                "device_uuid": card.uuid[:40],
                "zone": "vGPU",
            }
            if self.flavour != "volcano":
                host["device_type"] = "NVIDIA-" + card.name
            put("hami_host_gpu_memory_used_bytes", host, card.memory_used)
            put("hami_host_gpu_utilization_ratio", host, card.utilization)
            if self.flavour == "hami":
                put(
                    "hami_host_gpu_memory_controller_utilization_ratio",
                    host,
                    card.memory_controller_utilization,
                )

        uuid_of = {card.index: card.uuid[:40] for card in self.cards}
        for a in self.allocations:
            if self.flavour == "kai" and a.kai_annotation not in ("gpu-fraction", "gpu-memory"):
                continue
            namespace, pod, container = a.namespace, a.pod, a.container
            if self.weird_labels:
                namespace += WEIRD_SUFFIX
                pod += WEIRD_SUFFIX
                container += WEIRD_SUFFIX
            labels = {
                "namespace": namespace,
                "pod": pod,
                "container": container,
                "vdevice_index": str(a.vdevice_index),
                "device_uuid": uuid_of[a.card],
                "zone": "vGPU",
            }
            put("hami_vgpu_memory_used_bytes", labels, a.used)
            put("hami_vgpu_memory_limit_bytes", labels, a.limit)
            put("hami_container_device_memory_bytes", labels, a.used)
            put("hami_container_device_utilization_ratio", labels, a.sm_util)
            put("hami_vgpu_memory_context_bytes", labels, a.context)
            put("hami_vgpu_memory_module_bytes", labels, a.module)
            put("hami_vgpu_memory_buffer_bytes", labels, a.buffer)
            if a.last_kernel_time is not None:
                elapsed = max(math.floor(now) - a.last_kernel_time, 0)
                put("hami_container_last_kernel_elapsed_seconds", labels, elapsed)
            if self.flavour == "hami" and a.mig is not None:
                mig_labels = dict(labels)
                mig_labels["mig_uuid"] = a.mig.mig_uuid
                mig_labels["profile"] = a.mig.profile
                mig_labels["gpu_instance_id"] = str(a.mig.gpu_instance_id)
                mig_labels["compute_instance_id"] = str(a.mig.compute_instance_id)
                put("hami_mig_device_info", mig_labels, 1)

        if self.flavour == "hami":
            put("hami_build_info", dict(BUILD_INFO), 1)
        return result


# --------------------------------------------------------------------------
# Clusters
# --------------------------------------------------------------------------


def _plan_slots(
    rng: random.Random, cards: int, allocations: int, cap_mib: Mapping[int, int]
) -> list[list[_Slot]]:
    """Split ``allocations`` vGPUs into pods (1 or 2 containers, 1 or 2 vGPUs each) over cards."""
    load = [0] * cards
    per_card = max(1, -(-allocations // cards)) if cards else 1

    def least_loaded(exclude: set[int]) -> int:
        candidates = [i for i in range(cards) if i not in exclude]
        lowest = min(load[i] for i in candidates)
        return rng.choice([i for i in candidates if load[i] == lowest])

    pods: list[list[_Slot]] = []
    remaining = allocations
    while remaining > 0:
        if remaining >= 2 and rng.random() < 0.15:
            containers = list(_PAIR_CONTAINERS)
        else:
            containers = [rng.choice(_SINGLE_CONTAINERS)]
        slots: list[_Slot] = []
        for container in containers:
            if remaining <= 0:
                break
            vgpus = 2 if cards >= 2 and remaining >= 2 and rng.random() < 0.15 else 1
            used_cards: set[int] = set()
            for vdevice in range(vgpus):
                card = least_loaded(used_cards)
                used_cards.add(card)
                load[card] += 1
                slots.append(_Slot(container, vdevice, card, cap_mib[card] // per_card))
                remaining -= 1
        pods.append(slots)
    return pods


def build_cluster(
    nodes: int,
    seed: int = 0,
    cards: int = 8,
    allocations_per_node: int = 28,
    flavours: Sequence[str] = FLAVOURS,
    *,
    start_time: float | None = None,
) -> list[SimulatedNode]:
    """A cluster of ``nodes`` simulated GPU nodes, flavours assigned round-robin.

    Nodes are named ``gpu-node-001``…; each has ``cards`` cards of one model and
    ``allocations_per_node`` vGPU allocations (pods such as ``team-a/train-…``
    with containers such as ``cuda`` or ``main``), every one of which has
    launched a kernel. Last-kernel times are placed relative to ``start_time``
    (default: now), so the cluster is a pure function of ``seed`` and
    ``start_time``.
    """
    if nodes < 0 or cards < 0 or allocations_per_node < 0:
        raise ValueError("nodes, cards and allocations_per_node must not be negative")
    if not flavours:
        raise ValueError("flavours must not be empty")
    unknown = [f for f in flavours if f not in FLAVOURS]
    if unknown:
        raise ValueError(f"unknown flavours {unknown}; expected some of {FLAVOURS}")
    if cards == 0 and allocations_per_node > 0:
        raise ValueError("allocations need at least one card per node")
    now = math.floor(time.time() if start_time is None else start_time)
    width = max(3, len(str(nodes)))
    cluster: list[SimulatedNode] = []
    for position in range(nodes):
        rng = random.Random(f"node|{seed}|{position}")
        name = f"gpu-node-{position + 1:0{width}d}"
        model, memory = rng.choices(_GPU_MODELS, weights=_GPU_MODEL_WEIGHTS)[0]
        node_cards = [
            Card(
                index=index,
                uuid=_gpu_uuid(rng),
                name=model,
                memory_total=memory,
                reserved=rng.choice(_RESERVED),
            )
            for index in range(cards)
        ]
        cap_mib = {card.index: (card.memory_total - card.reserved) // MIB for card in node_cards}
        taken: set[tuple[str, str]] = set()
        allocations: list[Allocation] = []
        for slots in _plan_slots(rng, cards, allocations_per_node, cap_mib):
            allocations.extend(_new_pod(rng, slots, now, taken, _kai_annotation(rng)))
        node = SimulatedNode(
            name, flavours[position % len(flavours)], node_cards, allocations, seed
        )
        node.refresh_cards()
        cluster.append(node)
    return cluster
