"""NVML sampler: one :class:`~core.payload.Card` per GPU, read one field at a time.

Why one field at a time: NVML support varies by board, driver and
virtualisation. A vGPU guest or a MIG-enabled card may answer
``NVML_ERROR_NOT_SUPPORTED`` for temperature or power while its memory reading
is fine, so one failed call must cost that field only, never the card or the
snapshot. A card whose handle or UUID cannot be read (fallen off the bus:
``NVML_ERROR_GPU_IS_LOST``; hidden from the container:
``NVML_ERROR_NO_PERMISSION``) cannot be named, so it is left out and the
other cards are still reported.

Why the NVML module is injectable: CI and the demo have no GPU, so they hand
in :mod:`simulator.nvml`, which raises the real ``pynvml.NVMLError``; the
``except`` clauses exercised in tests are therefore the ones that run on a
node.

pynvml ships no type stubs. Everything it returns is ``Any`` and is turned
into ``int``/``float``/``str`` on the line that reads it, so ``Any`` never
leaves this module.

Beyond the card's own readings (energy, ECC, clocks-event reasons, MIG
instances) the sampler reads what runs on each card (:meth:`NvmlSampler.processes`)
and maps the device IDs the kubelet hands out to UUIDs
(:meth:`NvmlSampler.device_uuid`). XID events come from :mod:`agent.xid`, a
blocking wait that lives in its own thread; :meth:`NvmlSampler.sample` only
copies its counts into the cards.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any, ClassVar, Final, TypedDict

import pynvml  # type: ignore[import-untyped, unused-ignore]
from pydantic import ValidationError

from core.payload import Card, Mig

log = logging.getLogger(__name__)

# The error codes are NVML's C ABI, identical in any binding, so the real
# module's constants serve for an injected fake as well.
_FUNCTION_NOT_FOUND: Final[int] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
_NOT_SUPPORTED: Final[int] = pynvml.NVML_ERROR_NOT_SUPPORTED
_NOT_FOUND: Final[int] = pynvml.NVML_ERROR_NOT_FOUND
_TEMPERATURE_GPU: Final[int] = pynvml.NVML_TEMPERATURE_GPU
_MIG_ENABLED: Final[int] = pynvml.NVML_DEVICE_MIG_ENABLE
_ECC_CORRECTED: Final[int] = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
_ECC_UNCORRECTED: Final[int] = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
# Aggregate, not volatile: the volatile count resets with the driver, the
# aggregate one is the card's lifetime (kept in its inforom), so a rate over
# it survives agent and driver restarts alike.
_ECC_AGGREGATE: Final[int] = pynvml.NVML_AGGREGATE_ECC
_MIB: Final = 1024 * 1024
# Card.xid_errors' bound; NVML's XIDs are below 256 anyway.
_MAX_XIDS: Final = 256

# nvmlDeviceGetTemperature is marked "will be removed in CUDA 14.0"; its
# successor nvmlDeviceGetTemperatureV is missing from older drivers. Use the
# old one while it works (every driver in the field has it) and switch once to
# the new one if the library or the binding no longer has it.
_TEMPERATURE_LEGACY: Final = "nvmlDeviceGetTemperature"
_TEMPERATURE_V: Final = "nvmlDeviceGetTemperatureV"

# The clocks-event call was named "...ThrottleReasons" until R535; the old name
# is deprecated (to go in CUDA 14.0). Here the new one is the first choice
# and the old one the fallback for older drivers, switched once the same way.
_CLOCKS_EVENT: Final = "nvmlDeviceGetCurrentClocksEventReasons"
_CLOCKS_THROTTLE: Final = "nvmlDeviceGetCurrentClocksThrottleReasons"

#: Keys of :attr:`NvmlSampler.errors`. ``count``: the device count could not be
#: read (the sample is empty); ``handle``/``uuid``: the card is skipped;
#: ``card``: the readings did not make a valid :class:`Card` (skipped);
#: ``driver``: :meth:`NvmlSampler.driver_version` failed; ``mig``: a MIG call
#: failed (a MIG mode answering NOT_SUPPORTED is a card without MIG, not an
#: error); that instance is left out, or its memory is None or its profile "";
#: ``processes``: a running-process list of a device could not be read;
#: ``process_utilization``: per-process utilisation of a card could not be read
#: (its processes' ``sm`` is None); ``events`` is :mod:`agent.xid`'s; the rest:
#: that field of that card is None (``name`` is "").
ERROR_KEYS: Final = (
    "count",
    "driver",
    "handle",
    "uuid",
    "card",
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
)


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process on one device, as NVML's per-process view gives it.

    ``device`` is the UUID of what the process runs on (the card, or its MIG
    instance), ``card`` the physical card's UUID. ``memory`` is None where the
    driver hides it (NVML_VALUE_NOT_AVAILABLE); ``sm`` is the process's SM
    utilisation (0-100) averaged over the samples NVML took since the previous
    read, 0.0 when NVML has none newer, None where the device has no
    per-process utilisation (a MIG instance).
    """

    device: str
    card: str
    pid: int
    memory: int | None
    sm: float | None


class Failures:
    """Failed NVML calls by key: counted, the latest text kept, each distinct one logged
    loudly once and then quietly (a permanent NOT_SUPPORTED must not flood the log)."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._logged: set[tuple[str, str]] = set()
        self.errors: Counter[str] = Counter()
        self.last_error: dict[str, str] = {}

    def failed(self, key: str, exc: BaseException, index: int | None = None) -> str:
        """Count and log one failure; return its :func:`describe` text."""
        text = describe(exc)
        self.errors[key] += 1
        self.last_error[key] = text
        where = "" if index is None else f" (GPU {index})"
        level = logging.DEBUG if (key, text) in self._logged else logging.WARNING
        self._logged.add((key, text))
        log.log(level, "%s %s failed%s: %s", self._what, key, where, text)
        return text


def describe(exc: BaseException) -> str:
    """``NVMLError_LibraryNotFound: NVML Shared Library Not Found``: class and text.

    pynvml maps each code to an ``NVMLError_*`` subclass whose name says what
    happened, and its text is the driver's own wording; both help a person
    reading an agent log on a node they cannot reach.
    """
    return f"{type(exc).__name__}: {exc}"


class _Readings(TypedDict, total=False):
    """The fields of a :class:`Card` that one optional NVML call gives."""

    name: str
    memory_used: int
    memory_total: int
    utilization: float
    memory_utilization: float
    temperature: float
    power: float
    energy: float
    ecc_corrected: int
    ecc_uncorrected: int
    clock_events: int


@dataclass(frozen=True, slots=True)
class _Device:
    """Something processes run on: a card, or one MIG instance of it (handle stays inside)."""

    handle: Any
    uuid: str
    card: str
    index: int
    mig: bool


def _profile(attributes: Any) -> str:
    """``1g.10gb`` (or ``1c.2g.20gb`` for a compute instance smaller than its GPU instance).

    Derived from nvmlDeviceGetAttributes on the MIG handle, the one call an
    unprivileged agent can make (the GPU instance profile calls need the GPU
    instance handle, which needs root). The size is the instance's memory
    rounded up to whole GiB, which gives the driver's own profile names on
    A100/H100 (9.75 GiB -> "10gb", 4.75 GiB -> "5gb"); a profile the driver
    names otherwise shows its rounded size, still telling the profiles apart.
    """
    slices = int(attributes.gpuInstanceSliceCount)
    compute = int(attributes.computeInstanceSliceCount)
    gib = math.ceil(int(attributes.memorySizeMB) * _MIB / 1024**3)
    name = f"{slices}g.{gib}gb"
    return f"{compute}c.{name}" if 0 < compute < slices else name


def _text(value: Any) -> str:
    """A str from a binding that returns str (nvidia-ml-py >= 11.515) or bytes (older)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


class NvmlSampler:
    """Reads every GPU through NVML; never raises for an NVML failure.

    Use :meth:`start` once, :meth:`sample` per snapshot, :meth:`close` at the
    end (or ``with NvmlSampler() as sampler:``). Without a driver,
    :meth:`start` returns False, :attr:`reason` says why, and :meth:`sample`
    returns ``[]``, so an agent on a CPU node or in CI runs unchanged.

    :attr:`errors` counts failures per key of :data:`ERROR_KEYS`, one per failed
    call per sample, so a rate shows a persistent gap (a board without a power
    sensor) as clearly as a flapping one. :attr:`last_error` keeps the latest
    :func:`describe` text per key. Each distinct (key, text) is logged once at
    WARNING, then at DEBUG, so a permanent NOT_SUPPORTED does not flood the log.
    """

    def __init__(self, nvml: ModuleType | Any = None) -> None:
        """``nvml``: the pynvml module, or anything with its API (:class:`simulator.nvml.SimulatedNvml`).

        Nothing is called here: loading the library happens in :meth:`start`,
        which reports failure instead of raising.
        """
        self._nvml: Any = pynvml if nvml is None else nvml
        self._error: type[Exception] = self._nvml.NVMLError
        self._started = False
        self._temperature_fn: str = _TEMPERATURE_LEGACY
        self._clocks_fn: str = _CLOCKS_EVENT
        # Per card UUID, the newest per-process utilisation sample seen (µs,
        # NVML's clock): the next read asks only for newer ones, so a sample
        # counts in exactly one read.
        self._seen: dict[str, int] = {}
        self.reason: str | None = "not started"
        self._failures = Failures("NVML")
        self.errors = self._failures.errors
        self.last_error = self._failures.last_error

    @property
    def module(self) -> Any:
        """The NVML module in use, for diagnostics beyond the sample (:mod:`agent.gpucheck`)."""
        return self._nvml

    @property
    def available(self) -> bool:
        """Whether NVML is initialised, i.e. whether :meth:`sample` can return cards."""
        return self._started

    def start(self) -> bool:
        """Initialise NVML; False (and :attr:`reason`) without a library or driver.

        Catches ``NVMLError`` (``LIBRARY_NOT_FOUND`` when ``libnvidia-ml.so.1``
        is absent, ``DRIVER_NOT_LOADED``, ``LIB_RM_VERSION_MISMATCH`` after a
        driver upgrade without reboot, ...) and ``OSError`` (a binding that lets
        the dlopen failure through). Calling it again after success is a no-op,
        so NVML's reference count is taken once and :meth:`close` releases it.
        """
        if self._started:
            return True
        try:
            self._nvml.nvmlInit()
        except self._error as exc:
            self.reason = f"NVML unavailable: {describe(exc)}"
        except OSError as exc:
            self.reason = f"NVML unavailable: cannot load the NVML library (libnvidia-ml): {exc}"
        else:
            self._started = True
            self.reason = None
            if not hasattr(self._nvml, _TEMPERATURE_LEGACY):
                self._temperature_fn = _TEMPERATURE_V
            if not hasattr(self._nvml, _CLOCKS_EVENT):
                self._clocks_fn = _CLOCKS_THROTTLE
            return True
        log.info("%s", self.reason)
        return False

    def driver_version(self) -> str | None:
        """The driver version NVML reports, or None; for start-up logs and :mod:`agent.gpucheck`."""
        if not self._started:
            return None
        try:
            return _text(self._nvml.nvmlSystemGetDriverVersion())
        except self._error as exc:
            self._failed("driver", exc)
            return None

    def sample(self, xid_errors: Mapping[str, Mapping[int, int]] | None = None) -> list[Card]:
        """One :class:`Card` per readable GPU, in NVML index order; ``[]`` if unavailable.

        ``xid_errors``: XID counts per card UUID (:meth:`agent.xid.XidWatcher.counts`),
        copied into each card's :attr:`~core.payload.Card.xid_errors`.

        The device count is read on every call, not cached at start, so a card
        that disappears or is added (hot-plug, a GPU reset, a driver reload)
        shows in the next snapshot instead of turning into errors forever.
        Handles are not cached for the same reason; the lookup is a table read
        in the driver.
        """
        if not self._started:
            return []
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
        except self._error as exc:
            self._failed("count", exc)
            return []
        cards: list[Card] = []
        for index in range(count):
            card = self._read_card(index, xid_errors or {})
            if card is not None:
                cards.append(card)
        return cards

    def _read_card(self, index: int, xid_errors: Mapping[str, Mapping[int, int]]) -> Card | None:
        """One card, each call guarded on its own (see the module docstring for why)."""
        identity = self._identify(index)
        if identity is None:
            return None
        handle, uuid = identity
        readings: _Readings = {}
        for key, read in self._READINGS:
            try:
                readings.update(read(self, handle))
            except self._error as exc:
                self._failed(key, exc, index)
        migs = [
            mig
            for mig_handle, mig_uuid in self._mig_handles(handle, index) or ()
            if (mig := self._read_mig(mig_handle, mig_uuid, index)) is not None
        ]
        xids = {int(xid): int(n) for xid, n in xid_errors.get(uuid, {}).items()}
        if len(xids) > _MAX_XIDS:
            xids = dict(sorted(xids.items())[:_MAX_XIDS])
        try:
            return Card(index=index, uuid=uuid, mig=migs, xid_errors=xids, **readings)
        except ValidationError as exc:
            # A value outside the payload's bounds (a 200-character UUID, a
            # negative reading from a broken binding) would otherwise be
            # rejected by the collector along with every other card.
            self._failed("card", exc, index)
            return None

    def _identify(self, index: int) -> tuple[Any, str] | None:
        """The card's handle and UUID, or None (counted) if it cannot be named."""
        try:
            handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
        except self._error as exc:
            self._failed("handle", exc, index)
            return None
        try:
            uuid = _text(self._nvml.nvmlDeviceGetUUID(handle))
        except self._error as exc:
            self._failed("uuid", exc, index)
            return None
        if not uuid:
            self._failed("uuid", ValueError("empty UUID"), index)
            return None
        return handle, uuid

    def _read_name(self, handle: Any) -> _Readings:
        return {"name": _text(self._nvml.nvmlDeviceGetName(handle))}

    def _read_memory(self, handle: Any) -> _Readings:
        # v1 on purpose: every driver has it. Its ``used`` is total - free
        # and so includes memory the driver reserves for itself; the v2
        # call (nvmlDeviceGetMemoryInfo(handle, version=nvmlMemory_v2),
        # drivers >= R510) reports that part separately as ``reserved``.
        memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        return {"memory_used": int(memory.used), "memory_total": int(memory.total)}

    def _read_utilization(self, handle: Any) -> _Readings:
        rates = self._nvml.nvmlDeviceGetUtilizationRates(handle)
        return {"utilization": float(rates.gpu), "memory_utilization": float(rates.memory)}

    def _read_temperature(self, handle: Any) -> _Readings:
        return {"temperature": self._temperature(handle)}

    def _read_power(self, handle: Any) -> _Readings:
        return {"power": int(self._nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0}  # mW -> W

    def _read_energy(self, handle: Any) -> _Readings:
        # mJ since the driver loaded -> J. Volta and later only; older boards
        # answer NOT_SUPPORTED and the field stays None, never 0.
        return {"energy": int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle)) / 1000.0}

    def _read_ecc_corrected(self, handle: Any) -> _Readings:
        count = self._nvml.nvmlDeviceGetTotalEccErrors(handle, _ECC_CORRECTED, _ECC_AGGREGATE)
        return {"ecc_corrected": int(count)}

    def _read_ecc_uncorrected(self, handle: Any) -> _Readings:
        count = self._nvml.nvmlDeviceGetTotalEccErrors(handle, _ECC_UNCORRECTED, _ECC_AGGREGATE)
        return {"ecc_uncorrected": int(count)}

    def _read_clock_events(self, handle: Any) -> _Readings:
        return {
            "clock_events": int(
                self._either("_clocks_fn", (_CLOCKS_EVENT, _CLOCKS_THROTTLE), handle)
            )
        }

    _READINGS: ClassVar[tuple[tuple[str, Callable[[NvmlSampler, Any], _Readings]], ...]] = (
        ("name", _read_name),
        ("memory", _read_memory),
        ("utilization", _read_utilization),
        ("temperature", _read_temperature),
        ("power", _read_power),
        ("energy", _read_energy),
        # Two calls, two fields: a board that counts one type only keeps it.
        ("ecc", _read_ecc_corrected),
        ("ecc", _read_ecc_uncorrected),
        ("clock_events", _read_clock_events),
    )
    """The optional readings of a card, in call order: (error key, reader).

    A reader that raises ``NVMLError`` costs only its own fields: they stay at
    :class:`Card`'s defaults (None; ``""`` for the name).
    """

    def _temperature(self, handle: Any) -> float:
        """GPU core temperature in °C, moving to the V call once if the old one is gone."""
        names = (_TEMPERATURE_LEGACY, _TEMPERATURE_V)
        return float(self._either("_temperature_fn", names, handle, _TEMPERATURE_GPU))

    def _either(self, slot: str, names: tuple[str, str], *args: Any) -> Any:
        """Call the function ``self.<slot>`` names; on FUNCTION_NOT_FOUND switch once to the other of ``names``.

        The library raises FUNCTION_NOT_FOUND when the driver lacks the symbol
        (the binding has both names); :meth:`start` already picked the other one
        where the binding lacks a name.
        """
        current: str = getattr(self, slot)
        try:
            return getattr(self._nvml, current)(*args)
        except self._error as exc:
            if getattr(exc, "value", None) != _FUNCTION_NOT_FOUND:
                raise
            other = names[1] if current == names[0] else names[0]
            if not hasattr(self._nvml, other):
                raise
            log.info("%s is not in this NVML; using %s", current, other)
            setattr(self, slot, other)
            return getattr(self._nvml, other)(*args)

    # -- MIG ---------------------------------------------------------------------------

    def _mig_handles(self, handle: Any, index: int) -> list[tuple[Any, str]] | None:
        """(MIG handle, MIG UUID) of each instance of a MIG-enabled card; None if MIG is off.

        A MIG mode of NOT_SUPPORTED is the answer of every card without MIG
        (pre-Ampere, consumer boards), so it is not counted; other failures are,
        under ``mig``, and the card is then read as one without instances.
        """
        try:
            current = int(self._nvml.nvmlDeviceGetMigMode(handle)[0])
        except self._error as exc:
            if getattr(exc, "value", None) != _NOT_SUPPORTED:
                self._failed("mig", exc, index)
            return None
        if current != _MIG_ENABLED:
            return None
        try:
            slots = int(self._nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        except self._error as exc:
            self._failed("mig", exc, index)
            return []
        found: list[tuple[Any, str]] = []
        for slot in range(slots):
            try:
                mig_handle = self._nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except self._error as exc:
                # An empty slot: NVML numbers slots up to the maximum, not the instances.
                if getattr(exc, "value", None) != _NOT_FOUND:
                    self._failed("mig", exc, index)
                continue
            try:
                uuid = _text(self._nvml.nvmlDeviceGetUUID(mig_handle))
            except self._error as exc:
                self._failed("mig", exc, index)
                continue
            if uuid:
                found.append((mig_handle, uuid))
        return found

    def _read_mig(self, handle: Any, uuid: str, index: int) -> Mig | None:
        """One MIG instance; None (counted) without its ids, which name it in the payload."""
        try:
            gpu_instance = int(self._nvml.nvmlDeviceGetGpuInstanceId(handle))
            compute_instance = int(self._nvml.nvmlDeviceGetComputeInstanceId(handle))
        except self._error as exc:
            self._failed("mig", exc, index)
            return None
        memory_used: int | None = None
        memory_total: int | None = None
        try:
            memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            memory_used, memory_total = int(memory.used), int(memory.total)
        except self._error as exc:
            self._failed("mig", exc, index)
        profile = ""
        try:
            profile = _profile(self._nvml.nvmlDeviceGetAttributes(handle))
        except self._error as exc:
            self._failed("mig", exc, index)
        try:
            return Mig(
                uuid=uuid,
                gpu_instance_id=gpu_instance,
                compute_instance_id=compute_instance,
                profile=profile,
                memory_used=memory_used,
                memory_total=memory_total,
            )
        except ValidationError as exc:
            self._failed("mig", exc, index)
            return None

    # -- processes ---------------------------------------------------------------------

    def _devices(self) -> Iterator[_Device]:
        """Every card, or for a MIG-enabled card each of its instances, read now.

        Handles are looked up on every call and never kept, for the reason
        :meth:`sample` gives: a handle taken before a GPU reset or a MIG
        reconfiguration names a device that is gone or is another one.
        """
        if not self._started:
            return
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
        except self._error as exc:
            self._failed("count", exc)
            return
        for index in range(count):
            identity = self._identify(index)
            if identity is None:
                continue
            handle, uuid = identity
            migs = self._mig_handles(handle, index)
            if migs is None:
                yield _Device(handle, uuid, uuid, index, mig=False)
                continue
            for mig_handle, mig_uuid in migs:
                yield _Device(mig_handle, mig_uuid, uuid, index, mig=True)

    def processes(self) -> list[ProcessSample]:
        """Every process on every card and MIG instance, with its SM utilisation; ``[]`` if unavailable.

        A process in both the compute and the graphics list (a CUDA/OpenGL
        interop app) is one process: it is listed once per device, with the
        larger of its two memory readings. A card that cannot be read costs its
        own processes only.
        """
        out: list[ProcessSample] = []
        seen_cards: set[str] = set()
        for device in self._devices():
            seen_cards.add(device.card)
            memory = self._running(device)
            if memory is None:
                continue
            # MIG instances have no per-process utilisation (NVML documents
            # NOT_SUPPORTED), so it is not asked for; sm stays None.
            sm = None if device.mig or not memory else self._process_sm(device)
            for pid, used in sorted(memory.items()):
                out.append(
                    ProcessSample(
                        device=device.uuid,
                        card=device.card,
                        pid=pid,
                        memory=used,
                        sm=None if sm is None else sm.get(pid, 0.0),
                    )
                )
        # A card that went away takes its timestamp along, so the map stays bounded.
        for uuid in self._seen.keys() - seen_cards:
            del self._seen[uuid]
        return out

    def _running(self, device: _Device) -> dict[int, int | None] | None:
        """pid -> memory (bytes, None where hidden) from both lists; None if neither could be read."""
        merged: dict[int, int | None] = {}
        read_any = False
        for name in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",
        ):
            try:
                listed = getattr(self._nvml, name)(device.handle)
            except self._error as exc:
                self._failed("processes", exc, device.index)
                continue
            read_any = True
            for proc in listed:
                pid = int(proc.pid)
                # The binding turns NVML_VALUE_NOT_AVAILABLE into None.
                raw = proc.usedGpuMemory
                used = None if raw is None else int(raw)
                before = merged.get(pid)
                if before is not None:
                    # Listed twice: the larger reading; a hidden (None) one loses to a number.
                    used = before if used is None else max(before, used)
                merged[pid] = used
        return merged if read_any else None

    def _process_sm(self, device: _Device) -> dict[int, float] | None:
        """pid -> mean smUtil of the samples NVML took since the last read; None if unreadable.

        NVML answers NOT_FOUND, not an empty list, when it has no sample newer
        than the timestamp: that is "idle since the last read", so ``{}``
        (every process gets 0.0).
        """
        since = self._seen.get(device.card, 0)
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(device.handle, since)
        except self._error as exc:
            if getattr(exc, "value", None) == _NOT_FOUND:
                return {}
            self._failed("process_utilization", exc, device.index)
            return None
        totals: dict[int, list[float]] = {}
        newest = since
        for sample in samples:
            stamp = int(sample.timeStamp)
            if stamp <= since:
                continue  # a driver that returns the boundary sample again
            newest = max(newest, stamp)
            totals.setdefault(int(sample.pid), []).append(float(sample.smUtil))
        self._seen[device.card] = newest
        return {pid: sum(values) / len(values) for pid, values in totals.items()}

    # -- device IDs ---------------------------------------------------------------------

    def device_uuid(self, device_id: str) -> str | None:
        """The UUID of a device ID as the kubelet's PodResources API lists it; None if not on this node.

        The device plugin may list a card's UUID (``GPU-…``), a MIG instance's
        (``MIG-…``), a card's index (``"0"``), or the pre-R470 MIG form
        ``MIG-GPU-<card uuid>/<gpu instance>/<compute instance>``; all come back
        as the UUID NVML and the payload use for that device.
        """
        if not self._started or not device_id:
            return None
        if device_id.isdigit():
            identity = self._identify(int(device_id))
            return None if identity is None else identity[1]
        if device_id.startswith("MIG-GPU-"):
            return self._legacy_mig_uuid(device_id)
        if device_id.startswith(("GPU-", "MIG-")):
            for device in self._devices():
                if device_id in (device.uuid, device.card):
                    return device_id
        return None

    def _legacy_mig_uuid(self, device_id: str) -> str | None:
        """``MIG-GPU-<uuid>/<gi>/<ci>`` -> that instance's ``MIG-…`` UUID."""
        parts = device_id[len("MIG-") :].split("/")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            return None
        card, gpu_instance, compute_instance = parts[0], int(parts[1]), int(parts[2])
        for device in self._devices():
            if not device.mig or device.card != card:
                continue
            try:
                ids = (
                    int(self._nvml.nvmlDeviceGetGpuInstanceId(device.handle)),
                    int(self._nvml.nvmlDeviceGetComputeInstanceId(device.handle)),
                )
            except self._error as exc:
                self._failed("mig", exc, device.index)
                continue
            if ids == (gpu_instance, compute_instance):
                return device.uuid
        return None

    def _failed(self, key: str, exc: BaseException, index: int | None = None) -> None:
        self._failures.failed(key, exc, index)

    def close(self) -> None:
        """Release NVML (nvmlShutdown) if :meth:`start` took it; safe to call twice."""
        if not self._started:
            return
        self._started = False
        self.reason = "closed"
        try:
            self._nvml.nvmlShutdown()
        except self._error as exc:
            log.debug("nvmlShutdown failed: %s", describe(exc))

    def __enter__(self) -> NvmlSampler:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
