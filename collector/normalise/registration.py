"""What a GPU node tells its scheduler about its cards, read from its Node object.

Pure functions of one Node object, no I/O. Three records, each named after the
upstream file that writes it (docs/metrics.md says the same for users):

- HAMi: ``hami.io/node-nvidia-register`` (``4pd.io/node-nvidia-register`` before
  the 2024 rename), written by the device plugin
  (``pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go``). Up to
  v2.7 a colon form, ``UUID,COUNT,DEVMEM,DEVCORE,TYPE,NUMA,HEALTH[,INDEX,MODE]:``
  per card (``pkg/device/devices.go`` ``EncodeNodeDevices``: 7 fields up to
  2.4, 9 from 2.5); from v2.8 a JSON array of ``DeviceInfo`` whose keys are
  all ``omitempty`` (``MarshalNodeDevices``): an absent key is zero, and an
  absent ``health`` is false.
- Volcano vGPU: ``volcano.sh/node-vgpu-register``, written by
  Project-HAMi/volcano-vgpu-device-plugin (``pkg/util/util.go``
  ``EncodeNodeDevices``), ``UUID,COUNT,DEVMEM,TYPE,HEALTH[,MODE]:`` per card
  (5 fields up to v1.9.4); a card's place in the list is its device ID.
- KAI: no per-card record. GPU Feature Discovery's node labels
  (``nvidia.com/gpu.count``, ``.product``, ``.memory``; NVIDIA
  k8s-device-plugin ``internal/lm/resource.go``) give one model per node.

``DEVMEM`` is MiB the scheduler may hand out: HAMi's is NVML's total times
``deviceMemoryScaling`` (above 1 oversubscribes), Volcano's NVML's total over
``gpu-memory-factor`` (1 unless the plugin was told otherwise). A card is
usable only when its plugin calls it healthy *and* the node's allocatable
count of the plugin's resource is above 0 (HAMi v2.10 ``NvidiaGPUDevices.CheckHealth``,
``pkg/device/nvidia/device.go``; Volcano ``NewGPUDevices``, ``device_info.go``):
a removed plugin's register annotation stays on the Node, its resource drops
to 0. Nothing malformed stops the rest: a bad card is left out and the reason
returned, from the bounded set :data:`REASONS`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from collector.normalise.allocation import MIB, parse_quantity

HAMI_REGISTER = ("hami.io/node-nvidia-register", "4pd.io/node-nvidia-register")
"""The HAMi register annotation, and its name before HAMi's rename (2.3 and older)."""
HAMI_HANDSHAKE = {
    "hami.io/node-nvidia-register": "hami.io/node-handshake",
    "4pd.io/node-nvidia-register": "4pd.io/node-handshake",
}
VOLCANO_REGISTER = "volcano.sh/node-vgpu-register"
VOLCANO_HANDSHAKE = "volcano.sh/node-vgpu-handshake"
HAMI_RESOURCE = "nvidia.com/gpu"
"""HAMi's ``resourceCountName`` in its chart's default: the count the health rule reads."""
VOLCANO_RESOURCES = ("volcano.sh/vgpu-number", "volcano.sh/vgpu-cores", "volcano.sh/vgpu-memory")
GFD_COUNT = "nvidia.com/gpu.count"
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
TIB_IN_MIB = 1 << 20
"""KAI takes a ``gpu.memory`` this large or larger as bytes, not MiB (GFD issue #26)."""
DEFAULT_MODE = "hami-core"

REASONS = ("json", "fields", "value", "uuid", "label")
"""Why a registration (or part of it) was left out: JSON that does not parse or is no array,
a card with the wrong number of fields, a field of the wrong kind, a card without a UUID,
a GPU Feature Discovery label that is not a whole number."""

_VENDOR = "NVIDIA-"
_INT = re.compile(r"[+-]?[0-9]+")
"""What Go's ``strconv.ParseInt(s, 10, ...)`` and ``Atoi`` accept (Python's ``int`` also takes
spaces and underscores, which the writers never send and HAMi's decoder refuses)."""
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_INT32 = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Card:
    """One card as its device plugin registered it.

    ``model`` is the NVML name (``NVIDIA H100 80GB HBM3``, ``Tesla T4``),
    ``memory`` the bytes the scheduler may allocate on it, ``split`` how many
    tasks may share it, ``health`` the plugin's own verdict.
    """

    uuid: str
    index: int
    model: str
    memory: int
    split: int
    mode: str
    health: bool


@dataclass(frozen=True, slots=True)
class Problem:
    """A part of a registration that could not be read: ``reason`` from :data:`REASONS`."""

    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Capacity:
    """What one node's Node object says of its GPUs.

    ``record`` is ``hami``, ``volcano`` or ``gfd``. ``count`` is how many GPUs
    the record lists (None where it cannot tell); ``usable`` the node's half of
    the health rule (None for GPU Feature Discovery, which knows no health).
    ``card_memory`` and ``model`` are GPU Feature Discovery's, one per node.
    """

    node: str
    record: str
    cards: tuple[Card, ...] = ()
    count: int | None = None
    usable: bool | None = None
    card_memory: int | None = None
    model: str | None = None
    problems: tuple[Problem, ...] = ()

    def healthy(self, card: Card) -> bool:
        """Whether the scheduler may place tasks on ``card``: its plugin and its node agree."""
        return card.health and bool(self.usable)


class _HamiDevice(BaseModel):
    """One entry of HAMi's JSON form (``DeviceInfo``): absent keys are Go's zero values."""

    model_config = ConfigDict(strict=True, extra="ignore")

    id: str = ""
    index: int = Field(0, ge=0, le=_INT32)
    count: int = Field(0, ge=0, le=_INT32)
    devmem: int = Field(0, ge=0, le=_INT32)
    type: str = ""
    mode: str = ""
    health: bool = False


def capacity(node: Mapping[str, Any]) -> Capacity | None:
    """What ``node`` registers of its GPUs; None for a node without any record."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "")
    notes = _strings(meta.get("annotations"))
    allocatable = _strings((node.get("status") or {}).get("allocatable"))
    for key in HAMI_REGISTER:
        if notes.get(key):
            return _hami(name, notes[key], allocatable, notes.get(HAMI_HANDSHAKE[key]))
    if notes.get(VOLCANO_REGISTER):
        return _volcano(name, notes[VOLCANO_REGISTER], allocatable, notes.get(VOLCANO_HANDSHAKE))
    labels = _strings(meta.get("labels"))
    if any(key in labels for key in (GFD_COUNT, GFD_PRODUCT, GFD_MEMORY)):
        return _gfd(name, labels, allocatable)
    return None


def model_name(registered_type: str) -> str:
    """The NVML name in a registered ``type``: HAMi up to 2.7 and Volcano always prefix
    ``NVIDIA-``, HAMi 2.8+ only where the name does not start with "NVIDIA" already."""
    return registered_type.removeprefix(_VENDOR)


def _strings(value: object) -> dict[str, str]:
    """A map of strings (annotations, labels, allocatable), anything else left out."""
    if not isinstance(value, Mapping):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def _hami(node: str, text: str, allocatable: Mapping[str, str], handshake: str | None) -> Capacity:
    if text.lstrip().startswith("["):
        cards, count, problems = _hami_json(text)
        usable = _allocatable(allocatable, HAMI_RESOURCE) > 0  # v2.8+: the handshake is gone
    else:
        cards, count, problems = _hami_colon(text)
        usable = _allocatable(allocatable, HAMI_RESOURCE) > 0 and not _deleted(handshake)
    return Capacity(node, "hami", cards, count, usable, problems=problems)


_Decoded = tuple[tuple[Card, ...], int | None, tuple[Problem, ...]]


def _hami_json(text: str) -> _Decoded:
    try:
        entries = json.loads(text)
    except ValueError as exc:
        return (), None, (Problem("json", f"not JSON: {exc}"),)
    if not isinstance(entries, list):
        return (), None, (Problem("json", f"a JSON {type(entries).__name__}, not an array"),)
    cards, problems = [], []
    for place, entry in enumerate(entries):
        try:
            card = _HamiDevice.model_validate(_present(entry))
        except (ValidationError, TypeError) as exc:
            problems.append(Problem("value", f"card {place}: {_first_error(exc)}"))
            continue
        if not card.id:
            problems.append(Problem("uuid", f"card {place} has no id"))
            continue
        cards.append(
            Card(
                card.id,
                card.index,
                model_name(card.type),
                card.devmem * MIB,
                card.count,
                card.mode or DEFAULT_MODE,
                card.health,
            )
        )
    return tuple(cards), len(entries), tuple(problems)


def _present(entry: object) -> dict[str, Any]:
    """An entry's keys whose value is not null: Go leaves a field at zero for a JSON null."""
    if not isinstance(entry, dict):
        raise TypeError(f"a JSON {type(entry).__name__}, not an object")
    return {key: value for key, value in entry.items() if value is not None}


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        return f"{'.'.join(map(str, error['loc'])) or 'entry'}: {error['msg']}"
    return str(exc)


def _hami_colon(text: str) -> _Decoded:
    """``UUID,COUNT,DEVMEM,DEVCORE,TYPE,NUMA,HEALTH[,INDEX,MODE]`` per card, each ended by ``:``.

    With 7 fields a card's index is its place in the list (the plugin lists
    NVML's devices in order); HAMi's own decoder assumes 0 for all of them,
    which would give every card the same ``device_index``.
    """
    cards, problems = [], []
    devices = [d for d in text.split(":") if d]
    for place, device in enumerate(devices):
        fields = device.split(",")
        if len(fields) not in (7, 9):
            problems.append(Problem("fields", f"card {place} has {len(fields)} fields, not 7 or 9"))
            continue
        try:
            split, devmem = _int(fields[1]), _int(fields[2])
            for checked in (fields[3], fields[5]):  # devcore, numa: as HAMi's decoder checks them
                _int(checked)
            health = _bool(fields[6])
            index, mode = (_int(fields[7]), fields[8]) if len(fields) == 9 else (place, "")
        except ValueError as exc:
            problems.append(Problem("value", f"card {place}: {exc}"))
            continue
        if not fields[0]:
            problems.append(Problem("uuid", f"card {place} has no UUID"))
            continue
        if min(split, devmem, index) < 0:
            problems.append(Problem("value", f"card {place}: a negative count, memory or index"))
            continue
        memory = devmem * MIB
        cards.append(
            Card(
                fields[0], index, model_name(fields[4]), memory, split, mode or DEFAULT_MODE, health
            )
        )
    return tuple(cards), len(devices), tuple(problems)


def _volcano(
    node: str, text: str, allocatable: Mapping[str, str], handshake: str | None
) -> Capacity:
    """``UUID,COUNT,DEVMEM,TYPE,HEALTH[,MODE]`` per card; Volcano skips parts without a comma.

    Up to v1.15 Volcano's scheduler judged a node by the plugin's handshake;
    from the commit that dropped it (aec04d7b) by all three allocatable vGPU
    resources being above 0. A node that still carries the handshake is
    judged the old way, plus its vGPU count.
    """
    cards, problems = [], []
    devices = [d for d in text.split(":") if "," in d]
    for place, device in enumerate(devices):
        fields = device.split(",")
        if len(fields) < 5:
            problems.append(Problem("fields", f"card {place} has {len(fields)} fields, not 5 or 6"))
            continue
        try:
            split, devmem, health = _int(fields[1]), _int(fields[2]), _bool(fields[4])
        except ValueError as exc:
            problems.append(Problem("value", f"card {place}: {exc}"))
            continue
        if not fields[0]:
            problems.append(Problem("uuid", f"card {place} has no UUID"))
            continue
        if min(split, devmem) < 0:
            problems.append(Problem("value", f"card {place}: a negative count or memory"))
            continue
        mode = fields[5] if len(fields) > 5 and fields[5] else DEFAULT_MODE
        cards.append(
            Card(fields[0], place, model_name(fields[3]), devmem * MIB, split, mode, health)
        )
    number, cores, memory = (_allocatable(allocatable, r) for r in VOLCANO_RESOURCES)
    if handshake is None:
        usable = number > 0 and cores > 0 and memory > 0
    else:
        usable = number > 0 and not _deleted(handshake)
    return Capacity(node, "volcano", tuple(cards), len(devices), usable, problems=tuple(problems))


def _gfd(node: str, labels: Mapping[str, str], allocatable: Mapping[str, str]) -> Capacity:
    """GPU Feature Discovery's labels, read as KAI reads them (``node_info.go`` ``getNodeGpuMemory``):
    the count, else allocatable ``nvidia.com/gpu``; the memory in MiB, or in bytes when it is
    1 TiB-in-MiB or more. KAI's flooring to a multiple of 100 MiB is its own accounting and
    is not applied: this is the card's memory."""
    problems = []
    count: int | None = None
    if GFD_COUNT in labels:
        try:
            count = _int(labels[GFD_COUNT])
        except ValueError as exc:
            problems.append(Problem("label", f"{GFD_COUNT}: {exc}"))
    if count is None and HAMI_RESOURCE in allocatable:
        count = int(_allocatable(allocatable, HAMI_RESOURCE))
    memory: int | None = None
    if GFD_MEMORY in labels:
        try:
            value = _int(labels[GFD_MEMORY])
            memory = value if value >= TIB_IN_MIB else value * MIB
        except ValueError as exc:
            problems.append(Problem("label", f"{GFD_MEMORY}: {exc}"))
    if (count is not None and count < 0) or (memory is not None and memory < 0):
        problems.append(Problem("label", "a negative GPU count or memory"))
        count = memory = None
    product = labels.get(GFD_PRODUCT) or None
    return Capacity(node, "gfd", (), count, None, memory, product, tuple(problems))


def _int(text: str) -> int:
    if not _INT.fullmatch(text):
        raise ValueError(f"{text!r} is not a whole number")
    return int(text)


def _bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``, as HAMi's decoders read the health field."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{text!r} is not a boolean")


def _allocatable(allocatable: Mapping[str, str], resource: str) -> float:
    """The node's allocatable quantity of ``resource``; 0 where absent or unreadable."""
    try:
        return parse_quantity(allocatable.get(resource, "0"))
    except (ValueError, ArithmeticError):
        return 0.0


def _deleted(handshake: str | None) -> bool:
    """Whether the scheduler gave up on the plugin: it writes ``Deleted_<time>`` 60 s after
    a ``Requesting_`` the plugin did not answer (HAMi up to 2.7, Volcano up to 1.15)."""
    return handshake is not None and handshake.startswith("Deleted")
