"""The simulated workload: cards and pods drawn at random, and how their readings move.

Every draw takes its random generator from the caller, so a cluster stays a
pure function of its seed.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

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


CORE_SHARES = (10, 20, 25, 30, 50, 100)
"""The SM shares (percent of a card) pods ask for."""
MIN_SHARE = CORE_SHARES[0]
BURST_CHANCE = 0.1
"""Chance that a busy container with a share of its card bursts past it (HAMi-core lets a
container use SMs beyond its share while the card has them to spare)."""
HELD_ON_CARD_0_MIB = 8192
HELD_ON_CARD_0_CORES = 40
"""What the scheduler's plan leaves free on each node's card 0 for the pods placed there
later: the fresh pod (:func:`simulator.pods.fresh_pod`, 4 GiB, 10 %) and the demo's full pod
(:func:`full_pod`, 4 GiB, 30 %)."""
FILL = 0.85
"""The most of its room a vGPU's buffer starts at (its limit less context and module)."""


def fill(memory_scaling: float) -> float:
    """How full a vGPU's buffer may start on a node whose scheduler scales its cards' memory
    by ``memory_scaling``: oversubscribed vGPUs hold less, so the cards' use stays within
    their memory (a drift of 30 % on top included)."""
    return 1.0 if memory_scaling <= 1 else 0.6 / memory_scaling


@dataclass(frozen=True, slots=True)
class Slot:
    """One vGPU of a pod being created: container, vdevice index, card, limit cap (MiB), and
    its SM share (percent). ``exact``: the limit is the cap itself (a pod taking the place of
    one just like it, or its share of an oversubscribed card); ``fill``: how full its
    buffer may start (:func:`fill`)."""

    container: str
    vdevice_index: int
    card: int
    limit_cap_mib: int
    cores: int = 100
    exact: bool = False
    fill: float = 1.0


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


def grant_cores(
    rng: random.Random, pods: list[list[Slot]], budget: Mapping[int, int]
) -> list[list[Slot]]:
    """Each slot with the SM share HAMi's scheduler would grant it: a card's shares never sum
    past its ``budget`` (100: the whole card), each at least :data:`MIN_SHARE` while the
    budget lasts; a slot whose card has none left gets 0 (no SM limit, HAMi's default:
    the card's time is shared)."""
    left = dict(budget)
    waiting = Counter(slot.card for slots in pods for slot in slots)
    granted: list[list[Slot]] = []
    for slots in pods:
        row = []
        for slot in slots:
            waiting[slot.card] -= 1
            most = left.get(slot.card, 100) - MIN_SHARE * waiting[slot.card]
            choices = [share for share in CORE_SHARES if share <= most]
            cores = rng.choice(choices) if choices else 0
            left[slot.card] = left.get(slot.card, 100) - cores
            row.append(replace(slot, cores=cores))
        granted.append(row)
    return granted


def within_share(drawn: int, cores: int, bursts: bool) -> int:
    """The SM utilisation (percent of the card) of a container given ``cores`` percent of it,
    from a draw of 0-100: the draw scaled into its share, or, for one that ``bursts``,
    1.1-1.6 times its share. Without a share (0) or with the whole card, the draw itself."""
    if drawn <= 0 or cores <= 0 or cores >= 100:
        return drawn
    if bursts:
        return min(100, round(cores * (1.1 + drawn / 200)))
    return max(1, round(drawn * cores / 100))


def bursts(pod_uid: str, container: str, vdevice: int) -> bool:
    """Whether this vGPU bursts past its share when busy: a pure function of its identity."""
    return random.Random(f"burst|{pod_uid}|{container}|{vdevice}").random() < BURST_CHANCE


@dataclass(frozen=True, slots=True)
class _PodIdentity:
    namespace: str
    pod: str
    uid: str
    annotation: str | None


def _draw_allocation(
    rng: random.Random, pod: _PodIdentity, slot: Slot, busy: bool, kernel_time: int
) -> Allocation:
    """One vGPU of ``pod`` in ``slot``: a limit under the slot's cap (or the cap itself), memory
    split within it, SM utilisation within its share."""
    choices = [mib for mib in _LIMITS_MIB if mib <= slot.limit_cap_mib]
    if slot.exact:
        limit = max(slot.limit_cap_mib, 256) * MIB
    else:
        limit = (rng.choice(choices) if choices else max(slot.limit_cap_mib, 256)) * MIB
    context, module, offset = rng.choice(_CONTEXTS), rng.choice(_MODULES), rng.choice(_OFFSETS)
    if context + module + offset > limit // 2:
        context, module, offset = 0, 0, 0
    room = limit - context - module - offset
    buffer = int(room * rng.uniform(0.05, FILL) * slot.fill) // _TWO_MIB * _TWO_MIB
    drawn = rng.randint(5, 95) if busy else 0
    burst = bursts(pod.uid, slot.container, slot.vdevice_index)
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
        sm_util=within_share(drawn, slot.cores, burst),
        last_kernel_time=kernel_time,
        kai_annotation=pod.annotation,
        cores=slot.cores,
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
_FULL_CORES = 30


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
        sm_util=within_share(rng.randint(40, 90), _FULL_CORES, bursts=False),
        last_kernel_time=None,  # a busy container: each step sets it to now
        cores=_FULL_CORES,
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
    util_cap: int = 100
    """The most its SM utilisation reaches: its share, unless it bursts past it."""

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
                self.util_cap, max(1, round(self.base_util + self.util_amplitude * wave))
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
    # Within its share (0 < cores < 100) unless it started past it: then it bursts.
    share = allocation.cores
    capped = 0 < share < 100 and allocation.sm_util <= share
    cap = share if capped else 100
    return Profile(
        busy=busy,
        base_buffer=allocation.buffer,
        room=room,
        offset=offset,
        amplitude=allocation.buffer * rng.uniform(0.05, 0.3) if moves else 0.0,
        period=rng.uniform(120.0, 900.0),
        phase=rng.random(),
        base_util=allocation.sm_util,
        util_amplitude=rng.uniform(3.0, 20.0) * cap / 100 if busy else 0.0,
        util_period=rng.uniform(30.0, 300.0),
        util_phase=rng.random(),
        util_cap=cap,
    )
