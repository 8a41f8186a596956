"""A fake of the part of the pynvml module that :mod:`agent.nvml` uses, for CI and the demo.

Why a fake module rather than mocks: the sampler's value is in how it treats
NVML's failures, so the fake fails the way pynvml does. It raises the real
``pynvml.NVMLError(code)`` with real ``NVML_ERROR_*`` codes (pynvml turns that
into the matching ``NVMLError_*`` subclass), refuses calls before ``nvmlInit``
with ``NVML_ERROR_UNINITIALIZED``, and answers in NVML's own units
(milliwatts, whole percent, whole °C) so unit conversions are tested too.

Drive it through plain attributes: :attr:`SimulatedNvml.cards` (add, remove,
edit), :attr:`SimulatedNvml.fail` (``{("temperature", 2): NVML_ERROR_NOT_SUPPORTED}``),
:attr:`SimulatedNvml.lost`, :attr:`SimulatedNvml.init_error`, :attr:`SimulatedNvml.count_error`.
:meth:`SimulatedNvml.step` moves every reading to a time, deterministically from the
seed, for a demo whose graphs move.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NoReturn

import pynvml  # type: ignore[import-untyped, unused-ignore]

MIB: Final = 1024 * 1024
H200_MEMORY: Final = 143_771 * MIB
"""What NVML reports as total memory for an H200 (141 GB HBM3e)."""
H200_POWER_LIMIT_MW: Final = 700_000
IDLE_POWER_MW: Final = 75_000

#: Per-card calls that :attr:`SimulatedNvml.fail` can make fail, by the sampler's error key.
FIELDS: Final = frozenset(
    {"handle", "uuid", "name", "memory", "utilization", "temperature", "power"}
)


@dataclass
class SimulatedCard:
    """One fake GPU, in NVML's units: bytes, whole percent, whole °C, milliwatts.

    Its NVML index is its position in :attr:`SimulatedNvml.cards`.
    ``memory_reserved`` only shows through the v2 memory call.
    """

    uuid: str
    name: str = "NVIDIA H200"
    memory_total: int = H200_MEMORY
    memory_used: int = 0
    memory_reserved: int = 0
    utilization: int = 0
    memory_utilization: int = 0
    temperature: int = 30
    power_mw: int = IDLE_POWER_MW


@dataclass(frozen=True)
class FakeHandle:
    """Stands for ``c_nvmlDevice_t``; the fake resolves it by index at each call."""

    index: int


@dataclass(frozen=True)
class FakeMemory:
    """Same attributes as ``c_nvmlMemory_t`` (and ``c_nvmlMemory_v2_t`` with version, reserved)."""

    total: int
    free: int
    used: int
    reserved: int = 0
    version: int = 0


@dataclass(frozen=True)
class FakeUtilization:
    """Same attributes as ``c_nvmlUtilization_t``."""

    gpu: int
    memory: int


@dataclass(frozen=True)
class _Drift:
    """A card's fixed character in :meth:`SimulatedNvml.step`, drawn once from the seed."""

    busy: float
    period: float
    phase: float
    resident: float


def fake_uuid(rng: random.Random) -> str:
    """``GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec``: NVML's UUID shape, from ``rng``."""
    h = f"{rng.getrandbits(128):032x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def make_cards(count: int, seed: int = 0, name: str = "NVIDIA H200") -> list[SimulatedCard]:
    """``count`` idle cards with UUIDs drawn from ``seed`` (same seed, same UUIDs)."""
    rng = random.Random(seed)
    return [SimulatedCard(uuid=fake_uuid(rng), name=name) for _ in range(count)]


def _raise(code: int) -> NoReturn:
    """Raise as pynvml does: ``NVMLError(code)`` becomes the code's ``NVMLError_*`` subclass."""
    raise pynvml.NVMLError(code)


class SimulatedNvml:
    """Module-like stand-in for ``pynvml``; pass it as ``NvmlSampler(nvml=SimulatedNvml(...))``.

    ``cards``: a list of :class:`SimulatedCard` or a count (made by :func:`make_cards`).
    ``fail``: ``{(field, index): NVML_ERROR_*}``, field one of :data:`FIELDS`; that
    call on that card raises that code. ``no_driver``: ``nvmlInit`` raises
    ``NVML_ERROR_LIBRARY_NOT_FOUND`` (``init_error`` picks another code, such as
    ``NVML_ERROR_DRIVER_NOT_LOADED``). ``lost``: indices whose handle lookup (and
    any call on an earlier handle) raises ``NVML_ERROR_GPU_IS_LOST``.
    ``as_bytes``: strings come back as bytes, as in nvidia-ml-py before 11.515.
    ``missing``: function names that raise ``NVML_ERROR_FUNCTION_NOT_FOUND``, as a
    driver without that symbol does. :attr:`calls` counts calls by name.
    """

    NVMLError: Final = pynvml.NVMLError
    NVML_TEMPERATURE_GPU: Final[int] = pynvml.NVML_TEMPERATURE_GPU
    nvmlMemory_v2: Final[int] = pynvml.nvmlMemory_v2

    def __init__(
        self,
        cards: Sequence[SimulatedCard] | int = 8,
        *,
        seed: int = 0,
        fail: Mapping[tuple[str, int], int] | None = None,
        no_driver: bool = False,
        init_error: int | None = None,
        lost: Iterable[int] = (),
        as_bytes: bool = False,
        missing: Iterable[str] = (),
        driver_version: str = "550.127.05",
    ) -> None:
        self.cards: list[SimulatedCard] = (
            make_cards(cards, seed) if isinstance(cards, int) else list(cards)
        )
        self.seed = seed
        self.fail: dict[tuple[str, int], int] = dict(fail or {})
        for field, _ in self.fail:
            if field not in FIELDS:
                raise ValueError(f"unknown field {field!r}; one of {sorted(FIELDS)}")
        self.init_error: int | None = (
            pynvml.NVML_ERROR_LIBRARY_NOT_FOUND if no_driver else init_error
        )
        self.count_error: int | None = None
        self.lost: set[int] = set(lost)
        self.as_bytes = as_bytes
        self.missing: set[str] = set(missing)
        self.driver_version = driver_version
        self.refcount = 0
        self.calls: Counter[str] = Counter()
        self._drift: dict[str, _Drift] = {}

    @property
    def initialized(self) -> bool:
        """Whether more ``nvmlInit`` than ``nvmlShutdown`` calls succeeded."""
        return self.refcount > 0

    # -- driving it ------------------------------------------------------------

    def step(self, now: float) -> None:
        """Set every card's readings for time ``now`` (seconds), coherently.

        A pure function of (seed, UUID, now): each card has a fixed share of
        work and a slow wave over it (period 2-15 minutes), and memory,
        temperature and power follow its load the way a real card's do. Two
        demos with the same seed show the same graphs.
        """
        for card in self.cards:
            d = self._drift.get(card.uuid)
            if d is None:
                rng = random.Random(f"{self.seed}/{card.uuid}")
                d = _Drift(
                    busy=rng.random(),
                    period=rng.uniform(120.0, 900.0),
                    phase=rng.uniform(0.0, 2 * math.pi),
                    resident=rng.uniform(0.05, 0.6),
                )
                self._drift[card.uuid] = d
            wave = 0.5 + 0.5 * math.sin(2 * math.pi * now / d.period + d.phase)
            load = min(1.0, max(0.0, d.busy * (0.6 + 0.4 * wave)))
            card.utilization = round(100 * load)
            card.memory_utilization = round(70 * load)
            resident = d.resident * d.busy + 0.3 * load
            card.memory_used = min(card.memory_total, round(card.memory_total * resident))
            card.temperature = round(30 + 50 * load)
            card.power_mw = round(IDLE_POWER_MW + (H200_POWER_LIMIT_MW - IDLE_POWER_MW) * load)

    # -- the pynvml API ----------------------------------------------------------

    def _call(self, name: str) -> None:
        self.calls[name] += 1
        if name in self.missing:
            _raise(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if self.refcount <= 0:
            _raise(pynvml.NVML_ERROR_UNINITIALIZED)

    def _card(self, handle: FakeHandle, field: str) -> SimulatedCard:
        index = handle.index
        if index in self.lost:
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        if not 0 <= index < len(self.cards):
            # The card went away after the handle was taken.
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        code = self.fail.get((field, index))
        if code is not None:
            _raise(code)
        return self.cards[index]

    def _str(self, value: str) -> str | bytes:
        return value.encode() if self.as_bytes else value

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            _raise(self.init_error)
        self.refcount += 1

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")
        self.refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._call("nvmlSystemGetDriverVersion")
        return self._str(self.driver_version)

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        if self.count_error is not None:
            _raise(self.count_error)
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._call("nvmlDeviceGetHandleByIndex")
        handle = FakeHandle(index)
        self._card(handle, "handle")
        return handle

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str | bytes:
        self._call("nvmlDeviceGetUUID")
        return self._str(self._card(handle, "uuid").uuid)

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str | bytes:
        self._call("nvmlDeviceGetName")
        return self._str(self._card(handle, "name").name)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> FakeMemory:
        self._call("nvmlDeviceGetMemoryInfo")
        card = self._card(handle, "memory")
        free = card.memory_total - card.memory_used
        if not version:
            return FakeMemory(total=card.memory_total, free=free, used=card.memory_used)
        return FakeMemory(
            total=card.memory_total,
            free=free,
            used=card.memory_used - card.memory_reserved,
            reserved=card.memory_reserved,
            version=version,
        )

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> FakeUtilization:
        self._call("nvmlDeviceGetUtilizationRates")
        card = self._card(handle, "utilization")
        return FakeUtilization(gpu=card.utilization, memory=card.memory_utilization)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperature")
        return self._temperature(handle, sensor)

    def nvmlDeviceGetTemperatureV(self, handle: FakeHandle, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperatureV")
        return self._temperature(handle, sensor)

    def _temperature(self, handle: FakeHandle, sensor: int) -> int:
        card = self._card(handle, "temperature")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return card.temperature

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        self._call("nvmlDeviceGetPowerUsage")
        return self._card(handle, "power").power_mw
