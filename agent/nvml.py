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
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any, ClassVar, Final, TypedDict

import pynvml  # type: ignore[import-untyped, unused-ignore]
from pydantic import ValidationError

from core.payload import Card

log = logging.getLogger(__name__)

# The error codes are NVML's C ABI, identical in any binding, so the real
# module's constants serve for an injected fake as well.
_FUNCTION_NOT_FOUND: Final[int] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
_TEMPERATURE_GPU: Final[int] = pynvml.NVML_TEMPERATURE_GPU

# nvmlDeviceGetTemperature is marked "will be removed in CUDA 14.0"; its
# successor nvmlDeviceGetTemperatureV is missing from older drivers. Use the
# old one while it works (every driver in the field has it) and switch once to
# the new one if the library or the binding no longer has it.
_TEMPERATURE_LEGACY: Final = "nvmlDeviceGetTemperature"
_TEMPERATURE_V: Final = "nvmlDeviceGetTemperatureV"

#: Keys of :attr:`NvmlSampler.errors`. ``count``: the device count could not be
#: read (the sample is empty); ``handle``/``uuid``: the card is skipped;
#: ``card``: the readings did not make a valid :class:`Card` (skipped);
#: ``driver``: :meth:`NvmlSampler.driver_version` failed; the rest: that field
#: of that card is None (``name`` is "").
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
        self._logged: set[tuple[str, str]] = set()
        self.reason: str | None = "not started"
        self.errors: Counter[str] = Counter()
        self.last_error: dict[str, str] = {}

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

    def sample(self) -> list[Card]:
        """One :class:`Card` per readable GPU, in NVML index order; ``[]`` if unavailable.

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
            card = self._read_card(index)
            if card is not None:
                cards.append(card)
        return cards

    def _read_card(self, index: int) -> Card | None:
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
        try:
            return Card(index=index, uuid=uuid, **readings)
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

    _READINGS: ClassVar[tuple[tuple[str, Callable[[NvmlSampler, Any], _Readings]], ...]] = (
        ("name", _read_name),
        ("memory", _read_memory),
        ("utilization", _read_utilization),
        ("temperature", _read_temperature),
        ("power", _read_power),
    )
    """The optional readings of a card, in call order: (error key, reader).

    A reader that raises ``NVMLError`` costs only its own fields: they stay at
    :class:`Card`'s defaults (None; ``""`` for the name).
    """

    def _temperature(self, handle: Any) -> float:
        """GPU core temperature in °C, moving to the V call once if the old one is gone."""
        try:
            return float(getattr(self._nvml, self._temperature_fn)(handle, _TEMPERATURE_GPU))
        except self._error as exc:
            if getattr(exc, "value", None) != _FUNCTION_NOT_FOUND:
                raise
            other = (
                _TEMPERATURE_V
                if self._temperature_fn == _TEMPERATURE_LEGACY
                else _TEMPERATURE_LEGACY
            )
            if not hasattr(self._nvml, other):
                raise
            log.info("%s is not in this NVML; using %s", self._temperature_fn, other)
            self._temperature_fn = other
            return float(getattr(self._nvml, other)(handle, _TEMPERATURE_GPU))

    def _failed(self, key: str, exc: BaseException, index: int | None = None) -> None:
        """Count a failure; log each distinct one loudly once, then quietly."""
        text = describe(exc)
        self.errors[key] += 1
        self.last_error[key] = text
        where = "" if index is None else f" (GPU {index})"
        level = logging.DEBUG if (key, text) in self._logged else logging.WARNING
        self._logged.add((key, text))
        log.log(level, "NVML %s failed%s: %s", key, where, text)

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
