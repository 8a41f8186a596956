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

Beyond the card readings it has what the per-process, MIG and event calls need:
a card's :attr:`SimulatedCard.processes` (and a MIG instance's), per-process SM
samples returned only when newer than the caller's timestamp (as NVML does), a
card's :attr:`SimulatedCard.mig` instances behind MIG handles, and XID events
posted with :meth:`SimulatedNvml.post_xid` to every event set that registered
the card (an event no set registered for is lost, as on a node: NVML does not
replay events from before registration).
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NoReturn

import pynvml  # type: ignore[import-untyped, unused-ignore]

MIB: Final = 1024 * 1024
H200_MEMORY: Final = 143_771 * MIB
"""What NVML reports as total memory for an H200 (141 GB HBM3e)."""
H200_POWER_LIMIT_MW: Final = 700_000
IDLE_POWER_MW: Final = 75_000

#: Per-card calls that :attr:`SimulatedNvml.fail` can make fail, by the sampler's error key.
#: ``mig`` fails the MIG mode call; ``processes`` both running-process calls;
#: ``events`` the XID registration (``nvmlDeviceRegisterEvents``).
FIELDS: Final = frozenset(
    {
        "handle",
        "uuid",
        "name",
        "memory",
        "utilization",
        "temperature",
        "power",
        "energy",
        "ecc",
        "clock_events",
        "mig",
        "processes",
        "process_utilization",
        "events",
    }
)

#: What NVML puts in a process's gpuInstanceId/computeInstanceId outside MIG (0xFFFFFFFF).
NO_INSTANCE: Final = 0xFFFFFFFF
MAX_MIG_DEVICES: Final = 7
"""What ``nvmlDeviceGetMaxMigDeviceCount`` answers for an A100/H100/H200."""


@dataclass
class SimulatedProcess:
    """One process on a card or MIG instance.

    ``used_memory`` in bytes, None where the driver hides it (the binding's
    rendering of NVML_VALUE_NOT_AVAILABLE); ``samples``: (timestamp in µs,
    smUtil 0-100) as NVML's per-process sampler buffers them; append to it to
    make the process busy. A plain tuple in this order works too.
    """

    pid: int
    used_memory: int | None
    kind: Literal["compute", "graphics"] = "compute"
    samples: list[tuple[int, int]] = field(default_factory=list)


def _process(entry: SimulatedProcess | tuple[Any, ...]) -> SimulatedProcess:
    """A :class:`SimulatedProcess` from itself or from a plain (pid, memory, kind, samples) tuple."""
    return entry if isinstance(entry, SimulatedProcess) else SimulatedProcess(*entry)


@dataclass
class SimulatedMig:
    """One MIG instance (GPU instance + compute instance) of a :class:`SimulatedCard`.

    ``slices``/``compute_slices`` are the GPU and compute instance slice counts
    ``nvmlDeviceGetAttributes`` reports; ``memory_total`` is in bytes and
    ``nvmlDeviceGetAttributes`` reports it in MiB.
    """

    uuid: str
    gpu_instance_id: int
    compute_instance_id: int = 0
    slices: int = 1
    compute_slices: int | None = None
    memory_total: int = 16_384 * MIB
    memory_used: int = 0
    processes: list[SimulatedProcess] = field(default_factory=list)


@dataclass
class SimulatedCard:
    """One fake GPU, in NVML's units: bytes, whole percent, whole °C, milliwatts.

    Its NVML index is its position in :attr:`SimulatedNvml.cards`.
    ``memory_reserved`` only shows through the v2 memory call. ``energy_mj``:
    millijoules since the driver loaded (:meth:`SimulatedNvml.step` adds power x
    time); ``ecc_corrected``/``ecc_uncorrected``: aggregate counts;
    ``clock_events``: the reasons bitmask. ``mig``: its MIG instances by slot
    (None: an empty slot); the card is MIG-enabled when it has any, or when
    ``mig_enabled``. On a MIG-enabled card utilisation and per-process
    utilisation answer NOT_SUPPORTED, as on a real one.
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
    energy_mj: int = 0
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    clock_events: int = 0
    mig_enabled: bool = False
    mig: list[SimulatedMig | None] = field(default_factory=list)
    processes: list[SimulatedProcess] = field(default_factory=list)

    @property
    def mig_mode(self) -> bool:
        """Whether MIG is (currently) enabled on this card."""
        return self.mig_enabled or any(m is not None for m in self.mig)


@dataclass(frozen=True)
class FakeHandle:
    """Stands for ``c_nvmlDevice_t``; the fake resolves it by index at each call."""

    index: int


@dataclass(frozen=True)
class FakeMigHandle(FakeHandle):
    """A MIG device handle: the parent card's index and the instance's slot."""

    slot: int


@dataclass(frozen=True)
class FakeProcessInfo:
    """Same attributes (NVML's camelCase names) as the binding's ``c_nvmlProcessInfo_v3_t`` object."""

    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = NO_INSTANCE
    computeInstanceId: int = NO_INSTANCE
    usedGpuCcProtectedMemory: int = 0


@dataclass(frozen=True)
class FakeProcessUtilization:
    """Same attributes as ``c_nvmlProcessUtilizationSample_t``."""

    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int = 0
    encUtil: int = 0
    decUtil: int = 0


@dataclass(frozen=True)
class FakeAttributes:
    """The fields of ``c_nvmlDeviceAttributes`` the sampler reads."""

    gpuInstanceSliceCount: int
    computeInstanceSliceCount: int
    memorySizeMB: int
    multiprocessorCount: int = 0


@dataclass(frozen=True)
class FakeEventData:
    """Same attributes as ``c_nvmlEventData_t``."""

    device: FakeHandle
    eventType: int
    eventData: int
    gpuInstanceId: int = NO_INSTANCE
    computeInstanceId: int = NO_INSTANCE


class FakeEventSet:
    """Stands for ``c_nvmlEventSet_t``: the cards registered and the events queued for them."""

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # card index -> event type mask
        self.queue: deque[FakeEventData] = deque()
        self.freed = False


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
    nvmlEventTypeXidCriticalError: Final[int] = pynvml.nvmlEventTypeXidCriticalError

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
        for name, _ in self.fail:
            if name not in FIELDS:
                raise ValueError(f"unknown field {name!r}; one of {sorted(FIELDS)}")
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
        self._stepped: float | None = None
        # Guards the event sets: nvmlEventSetWait_v2 blocks in one thread
        # (the XID watcher) while a test or the demo posts from another.
        self._events = threading.Condition()
        self._event_sets: list[FakeEventSet] = []
        self.lost_events = 0
        """XIDs posted while no event set had the card registered (NVML does not replay them)."""

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
        demos with the same seed show the same graphs. Each card's energy
        counter grows by its power times the time since the previous step (a
        step back in time adds nothing: the counter never goes backwards).
        """
        dt = 0.0 if self._stepped is None else max(0.0, now - self._stepped)
        self._stepped = now
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
            # mW x s = mJ; the power of the interval's end stands for the interval.
            card.power_mw = round(IDLE_POWER_MW + (H200_POWER_LIMIT_MW - IDLE_POWER_MW) * load)
            card.energy_mj += round(card.power_mw * dt)

    def post_xid(
        self,
        index: int,
        xid: int,
        gpu_instance_id: int = NO_INSTANCE,
        compute_instance_id: int = NO_INSTANCE,
    ) -> int:
        """An XID critical error on card ``index``; returns how many event sets it reached.

        It is queued on every set that registered the card for XID events and
        wakes their waiters; with none, it is lost (counted in :attr:`lost_events`).
        """
        with self._events:
            reached = 0
            for event_set in self._event_sets:
                mask = event_set.registered.get(index, 0)
                if mask & pynvml.nvmlEventTypeXidCriticalError and not event_set.freed:
                    event_set.queue.append(
                        FakeEventData(
                            device=FakeHandle(index),
                            eventType=pynvml.nvmlEventTypeXidCriticalError,
                            eventData=xid,
                            gpuInstanceId=gpu_instance_id,
                            computeInstanceId=compute_instance_id,
                        )
                    )
                    reached += 1
            if not reached:
                self.lost_events += 1
            self._events.notify_all()
            return reached

    def registered(self, index: int) -> bool:
        """Whether some live event set has card ``index`` registered (for tests to wait on)."""
        with self._events:
            return any(
                index in event_set.registered and not event_set.freed
                for event_set in self._event_sets
            )

    # -- the pynvml API ----------------------------------------------------------

    def _call(self, name: str) -> None:
        self.calls[name] += 1
        if name in self.missing:
            _raise(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if self.refcount <= 0:
            _raise(pynvml.NVML_ERROR_UNINITIALIZED)

    def _card(self, handle: FakeHandle, field: str) -> SimulatedCard:
        """The handle's (parent) card; raises as NVML would for a lost or failed one."""
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

    def _mig(self, handle: FakeHandle, field: str) -> SimulatedMig | None:
        """The MIG instance behind a MIG handle, None for a card's handle."""
        card = self._card(handle, field)
        if not isinstance(handle, FakeMigHandle):
            return None
        mig = card.mig[handle.slot] if 0 <= handle.slot < len(card.mig) else None
        if mig is None or not card.mig_mode:
            # The instance was destroyed (or MIG disabled) after the handle was taken.
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig

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
        card = self._card(handle, "uuid")
        mig = self._mig(handle, "uuid")
        return self._str(card.uuid if mig is None else mig.uuid)

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str | bytes:
        self._call("nvmlDeviceGetName")
        return self._str(self._card(handle, "name").name)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> FakeMemory:
        self._call("nvmlDeviceGetMemoryInfo")
        card = self._card(handle, "memory")
        mig = self._mig(handle, "memory")
        if mig is not None:
            return FakeMemory(
                total=mig.memory_total,
                free=mig.memory_total - mig.memory_used,
                used=mig.memory_used,
                version=version or 0,
            )
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
        if card.mig_mode or isinstance(handle, FakeMigHandle):
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
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

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        self._call("nvmlDeviceGetTotalEnergyConsumption")
        return self._card(handle, "energy").energy_mj

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter: int) -> int:
        self._call("nvmlDeviceGetTotalEccErrors")
        card = self._card(handle, "ecc")
        if counter not in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return card.ecc_corrected
        if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return card.ecc_uncorrected
        _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        self._call("nvmlDeviceGetCurrentClocksEventReasons")
        return self._card(handle, "clock_events").clock_events

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        self._call("nvmlDeviceGetCurrentClocksThrottleReasons")
        return self._card(handle, "clock_events").clock_events

    # -- MIG -----------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        self._call("nvmlDeviceGetMigMode")
        card = self._card(handle, "mig")
        if isinstance(handle, FakeMigHandle):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if card.mig_mode else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        self._call("nvmlDeviceGetMaxMigDeviceCount")
        self._card(handle, "mig")
        return MAX_MIG_DEVICES

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, index: int) -> FakeMigHandle:
        self._call("nvmlDeviceGetMigDeviceHandleByIndex")
        card = self._card(handle, "mig")
        if not card.mig_mode:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= index < MAX_MIG_DEVICES:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(card.mig) or card.mig[index] is None:
            _raise(pynvml.NVML_ERROR_NOT_FOUND)  # an empty slot
        return FakeMigHandle(handle.index, index)

    def nvmlDeviceIsMigDeviceHandle(self, handle: FakeHandle) -> int:
        # The binding returns a c_uint here; an int stands for it (both go through bool()).
        self._call("nvmlDeviceIsMigDeviceHandle")
        self._card(handle, "mig")
        return int(isinstance(handle, FakeMigHandle))

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeHandle) -> int:
        self._call("nvmlDeviceGetGpuInstanceId")
        mig = self._mig(handle, "mig")
        if mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeHandle) -> int:
        self._call("nvmlDeviceGetComputeInstanceId")
        mig = self._mig(handle, "mig")
        if mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.compute_instance_id

    def nvmlDeviceGetAttributes(self, handle: FakeHandle) -> FakeAttributes:
        self._call("nvmlDeviceGetAttributes")
        card = self._card(handle, "mig")
        mig = self._mig(handle, "mig")
        if mig is None:
            return FakeAttributes(
                gpuInstanceSliceCount=MAX_MIG_DEVICES,
                computeInstanceSliceCount=MAX_MIG_DEVICES,
                memorySizeMB=card.memory_total // MIB,
            )
        return FakeAttributes(
            gpuInstanceSliceCount=mig.slices,
            computeInstanceSliceCount=mig.slices
            if mig.compute_slices is None
            else mig.compute_slices,
            memorySizeMB=mig.memory_total // MIB,
        )

    # -- processes -----------------------------------------------------------------

    def _processes(self, handle: FakeHandle) -> list[tuple[SimulatedProcess, int, int]]:
        """(process, GI id, CI id) of what runs on the handle; a MIG card's handle sees all instances."""
        card = self._card(handle, "processes")
        mig = self._mig(handle, "processes")
        if mig is not None:
            return [
                (_process(p), mig.gpu_instance_id, mig.compute_instance_id) for p in mig.processes
            ]
        if card.mig_mode:
            return [
                (_process(p), m.gpu_instance_id, m.compute_instance_id)
                for m in card.mig
                if m is not None
                for p in m.processes
            ]
        return [(_process(p), NO_INSTANCE, NO_INSTANCE) for p in card.processes]

    def _running(self, handle: FakeHandle, kind: str) -> list[FakeProcessInfo]:
        return [
            FakeProcessInfo(
                pid=p.pid,
                usedGpuMemory=p.used_memory,
                gpuInstanceId=gi,
                computeInstanceId=ci,
            )
            for p, gi, ci in self._processes(handle)
            if p.kind == kind
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        self._call("nvmlDeviceGetComputeRunningProcesses")
        return self._running(handle, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        self._call("nvmlDeviceGetGraphicsRunningProcesses")
        return self._running(handle, "graphics")

    def nvmlDeviceGetProcessUtilization(
        self, handle: FakeHandle, last_seen: int
    ) -> list[FakeProcessUtilization]:
        """The samples newer than ``last_seen`` (µs), as NVML keeps them; NOT_FOUND when none."""
        self._call("nvmlDeviceGetProcessUtilization")
        card = self._card(handle, "process_utilization")
        if card.mig_mode or isinstance(handle, FakeMigHandle):
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        samples = [
            FakeProcessUtilization(pid=p.pid, timeStamp=stamp, smUtil=sm)
            for p in map(_process, card.processes)
            for stamp, sm in p.samples
            if stamp > last_seen
        ]
        if not samples:
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        return samples

    # -- events --------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._call("nvmlEventSetCreate")
        event_set = FakeEventSet()
        with self._events:
            self._event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(
        self, handle: FakeHandle, event_types: int, event_set: FakeEventSet
    ) -> None:
        self._call("nvmlDeviceRegisterEvents")
        self._card(handle, "events")
        if event_set.freed:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        with self._events:
            mask = event_set.registered.get(handle.index, 0)
            event_set.registered[handle.index] = mask | event_types
            self._events.notify_all()

    def nvmlEventSetWait_v2(self, event_set: FakeEventSet, timeout_ms: int) -> FakeEventData:
        """The oldest queued event, waiting at most ``timeout_ms``; NVML_ERROR_TIMEOUT if none came."""
        self._call("nvmlEventSetWait_v2")
        deadline = time.monotonic() + timeout_ms / 1000.0
        with self._events:
            while not event_set.queue:
                if event_set.freed:
                    _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
                left = deadline - time.monotonic()
                if left <= 0:
                    _raise(pynvml.NVML_ERROR_TIMEOUT)
                self._events.wait(left)
            return event_set.queue.popleft()

    def nvmlEventSetWait(self, event_set: FakeEventSet, timeout_ms: int) -> FakeEventData:
        return self.nvmlEventSetWait_v2(event_set, timeout_ms)

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        self._call("nvmlEventSetFree")
        with self._events:
            event_set.freed = True
            event_set.queue.clear()
            if event_set in self._event_sets:
                self._event_sets.remove(event_set)
            self._events.notify_all()
