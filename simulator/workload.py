"""The simulated workload: cards and pods drawn at random, and how their readings move.

Every draw takes its random generator from the caller, so a cluster stays a
pure function of its seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from simulator.devices import Allocation, Card
from simulator.families import KAI_SHARING_ANNOTATIONS

MIB = 1 << 20
_TWO_MIB = 2 * MIB

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


def draw_cards(rng: random.Random, count: int) -> list[Card]:
    """``count`` cards of one randomly chosen model, indexed from 0."""
    model, memory = rng.choices(_GPU_MODELS, weights=_GPU_MODEL_WEIGHTS)[0]
    return [
        Card(
            index=index,
            uuid=_gpu_uuid(rng),
            name=model,
            memory_total=memory,
            reserved=rng.choice(_RESERVED),
        )
        for index in range(count)
    ]


def draw_kai_annotation(rng: random.Random) -> str | None:
    """A pod's KAI sharing annotation: one in eight pods has none."""
    if rng.random() < 0.125:
        return None
    return rng.choice(KAI_SHARING_ANNOTATIONS)


@dataclass(frozen=True, slots=True)
class Slot:
    """One vGPU of a pod being created: container, vdevice index, card, limit cap (MiB)."""

    container: str
    vdevice_index: int
    card: int
    limit_cap_mib: int


def plan_slots(
    rng: random.Random, cards: int, allocations: int, cap_mib: Mapping[int, int]
) -> list[list[Slot]]:
    """Split ``allocations`` vGPUs into pods (1 or 2 containers, 1 or 2 vGPUs each) over cards."""
    load = [0] * cards
    per_card = max(1, -(-allocations // cards)) if cards else 1

    def least_loaded(exclude: set[int]) -> int:
        candidates = [i for i in range(cards) if i not in exclude]
        lowest = min(load[i] for i in candidates)
        return rng.choice([i for i in candidates if load[i] == lowest])

    pods: list[list[Slot]] = []
    remaining = allocations
    while remaining > 0:
        if remaining >= 2 and rng.random() < 0.15:
            containers = list(_PAIR_CONTAINERS)
        else:
            containers = [rng.choice(_SINGLE_CONTAINERS)]
        slots: list[Slot] = []
        for container in containers:
            if remaining <= 0:
                break
            vgpus = 2 if cards >= 2 and remaining >= 2 and rng.random() < 0.15 else 1
            used_cards: set[int] = set()
            for vdevice in range(vgpus):
                card = least_loaded(used_cards)
                used_cards.add(card)
                load[card] += 1
                slots.append(Slot(container, vdevice, card, cap_mib[card] // per_card))
                remaining -= 1
        pods.append(slots)
    return pods


@dataclass(frozen=True, slots=True)
class _PodIdentity:
    namespace: str
    pod: str
    uid: str
    annotation: str | None


def _draw_allocation(
    rng: random.Random, pod: _PodIdentity, slot: Slot, busy: bool, kernel_time: int
) -> Allocation:
    """One vGPU of ``pod`` in ``slot``: a limit under the slot's cap, memory split within it."""
    choices = [mib for mib in _LIMITS_MIB if mib <= slot.limit_cap_mib]
    limit = (rng.choice(choices) if choices else max(slot.limit_cap_mib, 256)) * MIB
    context, module, offset = rng.choice(_CONTEXTS), rng.choice(_MODULES), rng.choice(_OFFSETS)
    if context + module + offset > limit // 2:
        context, module, offset = 0, 0, 0
    room = limit - context - module - offset
    buffer = int(room * rng.uniform(0.05, 0.85)) // _TWO_MIB * _TWO_MIB
    return Allocation(
        namespace=pod.namespace,
        pod=pod.pod,
        pod_uid=pod.uid,
        container=slot.container,
        card=slot.card,
        vdevice_index=slot.vdevice_index,
        limit=limit,
        used=context + module + buffer + offset,
        context=context,
        module=module,
        buffer=buffer,
        sm_util=rng.randint(5, 95) if busy else 0,
        last_kernel_time=kernel_time,
        kai_annotation=pod.annotation,
    )


def new_pod(
    rng: random.Random,
    slots: Sequence[Slot],
    now: int,
    taken_names: set[tuple[str, str]],
    annotation: str | None,
) -> list[Allocation]:
    """Allocations of a fresh pod occupying ``slots``, started at ``now``.

    Its ``(namespace, pod)`` is new to ``taken_names``, which records it. Three
    containers in four are busy (a kernel ran at ``now``); an idle one last ran
    a kernel between 30 s and 2 h earlier.
    """
    namespace = rng.choice(_NAMESPACES)
    pod = _pod_name(rng)
    while (namespace, pod) in taken_names:
        pod = _pod_name(rng)
    taken_names.add((namespace, pod))
    identity = _PodIdentity(namespace, pod, _pod_uid(rng), annotation)
    busy_by_container: dict[str, bool] = {}
    kernel_by_container: dict[str, int] = {}
    allocations: list[Allocation] = []
    for slot in slots:
        if slot.container not in busy_by_container:
            busy = rng.random() < 0.75
            busy_by_container[slot.container] = busy
            kernel_by_container[slot.container] = now if busy else now - rng.randint(30, 7200)
        busy, kernel_time = busy_by_container[slot.container], kernel_by_container[slot.container]
        allocations.append(_draw_allocation(rng, identity, slot, busy, kernel_time))
    return allocations


FULL_NAMESPACE = "team-a"
FULL_CONTAINER = "cuda"
_FULL_LIMIT = 4096 * MIB


def full_pod(seed: int, node: str, card: int) -> Allocation:
    """A busy container of ``team-a`` on ``card`` whose vGPU memory is full, and stays full.

    HAMi-core reports a container's limit as its card's total memory, so a
    framework that reserves the card's memory up front (TensorFlow does by
    default) takes its whole limit at start and holds it.
    """
    rng = random.Random(f"full|{seed}|{node}")
    context = _CONTEXTS[1]
    return Allocation(
        namespace=FULL_NAMESPACE,
        pod=f"fill-{node}",
        pod_uid=_pod_uid(rng),
        container=FULL_CONTAINER,
        card=card,
        vdevice_index=0,
        limit=_FULL_LIMIT,
        used=_FULL_LIMIT,
        context=context,
        module=0,
        buffer=_FULL_LIMIT - context,
        sm_util=rng.randint(40, 90),
        last_kernel_time=None,  # a busy container: each step sets it to now
    )


def _triangle(x: float) -> float:
    """A triangle wave of period 1 with values in [-1, 1]."""
    fraction = x - math.floor(x)
    return 4.0 * abs(fraction - 0.5) - 1.0


@dataclass(frozen=True, slots=True)
class Profile:
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

    def apply(self, allocation: Allocation, tick: int) -> None:
        """Set the allocation's buffer, usage and SM utilisation for the second ``tick``.

        A busy allocation's buffer and utilisation follow triangle waves, and it
        launched a kernel at ``tick``; an idle one keeps its buffer and runs at 0 % SM.
        """
        if self.amplitude:
            wave = _triangle(tick / self.period + self.phase)
            raw = int(self.base_buffer + self.amplitude * wave)
            buffer = min(max(raw // _TWO_MIB * _TWO_MIB, 0), self.room)
        else:
            buffer = self.base_buffer
        allocation.buffer = buffer
        allocation.used = allocation.context + allocation.module + buffer + self.offset
        if self.busy:
            wave = _triangle(tick / self.util_period + self.util_phase)
            allocation.sm_util = min(
                100, max(1, round(self.base_util + self.util_amplitude * wave))
            )
            allocation.last_kernel_time = tick
        else:
            allocation.sm_util = 0


def new_profile(seed: int, node: str, allocation: Allocation) -> Profile:
    """The movement of ``allocation`` on ``node``, drawn from its identity and readings now."""
    pod_uid, container, vdevice = allocation.key
    rng = random.Random(f"profile|{seed}|{node}|{pod_uid}|{container}|{vdevice}")
    busy = allocation.sm_util > 0
    offset = allocation.offset
    room = max(
        allocation.limit - allocation.context - allocation.module - offset,
        allocation.buffer,
        0,
    )
    # A buffer that fills its room was taken whole up front and is held (full_pod()).
    moves = busy and allocation.buffer < room
    return Profile(
        busy=busy,
        base_buffer=allocation.buffer,
        room=room,
        offset=offset,
        amplitude=allocation.buffer * rng.uniform(0.05, 0.3) if moves else 0.0,
        period=rng.uniform(120.0, 900.0),
        phase=rng.random(),
        base_util=allocation.sm_util,
        util_amplitude=rng.uniform(3.0, 20.0) if busy else 0.0,
        util_period=rng.uniform(30.0, 300.0),
        util_phase=rng.random(),
    )
