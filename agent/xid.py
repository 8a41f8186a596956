"""XID watcher: counts NVML's XID critical-error events per card, in a thread of its own.

Why a thread: XIDs arrive as events, not as a value to read. NVML hands them
out through ``nvmlEventSetWait_v2``, which blocks up to a timeout, and it does
not replay events from before the set was registered, so a poll once per
snapshot would miss every XID between two snapshots. The watcher waits in a
loop instead and keeps counts since its start; the sampler copies them into
each card (:meth:`agent.nvml.NvmlSampler.sample`).

Why bounded: each wait has a timeout (``wait_ms``) and the loop checks the
stop event between waits, so a supervisor stops the thread within one timeout.
A failing wait is retried after waiting on the stop event for the same time,
never in a hot loop.

Why it takes its own NVML reference: ``nvmlInit`` is reference-counted, so
the watcher can start and end independently of the sampler without either
shutting NVML down under the other.

Cards are registered once, at the start: a card added later (hot-plug, a
driver reload) is not watched until the watcher is restarted.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import Counter
from collections.abc import Hashable
from types import ModuleType
from typing import Any, Final

import pynvml  # type: ignore[import-untyped, unused-ignore]

from agent.nvml import Failures, describe

log = logging.getLogger(__name__)

# The event type and error codes are NVML's C ABI, the same for an injected fake.
XID_CRITICAL_ERROR: Final[int] = pynvml.nvmlEventTypeXidCriticalError
_TIMEOUT: Final[int] = pynvml.NVML_ERROR_TIMEOUT
_WAIT: Final = "nvmlEventSetWait_v2"

#: Keys of :attr:`XidWatcher.errors`. ``init``/``create``/``count``: the
#: watcher could not start (see :attr:`XidWatcher.reason`); ``handle``/``uuid``:
#: a card is not watched; ``events``: registering a card failed (NOT_SUPPORTED
#: on a board without XID events), it is not watched; ``wait``: a wait failed
#: other than by timing out; ``device``: an event's card could not be named
#: (the event is dropped); ``free``: releasing the set failed.
ERROR_KEYS: Final = (
    "init",
    "create",
    "count",
    "handle",
    "uuid",
    "events",
    "wait",
    "device",
    "free",
)


def _key(handle: Any) -> Hashable:
    """A dict key for a device handle: its address for a ctypes pointer, itself otherwise.

    pynvml's ``c_nvmlDevice_t`` is a ctypes pointer; two pointer objects to the
    same device compare unequal, but their addresses are equal (NVML hands out
    one handle per device), so the address identifies the card an event names.
    """
    if isinstance(handle, ctypes._Pointer):
        address: int | None = ctypes.cast(handle, ctypes.c_void_p).value
        return ("address", address)
    return handle  # type: ignore[no-any-return]


class XidWatcher:
    """Counts XID critical errors by card UUID and XID; run :meth:`run` in a thread.

    :meth:`counts` is safe from any thread. :attr:`ready` is set once the
    cards are registered (or the watcher gave up: then :attr:`reason` says
    why), so a caller can wait for the watch to be live before relying on it.
    """

    def __init__(self, nvml: ModuleType | Any = None) -> None:
        """``nvml``: the pynvml module, or anything with its API (:class:`simulator.nvml.SimulatedNvml`)."""
        self._nvml: Any = pynvml if nvml is None else nvml
        self._error: type[Exception] = self._nvml.NVMLError
        self._lock = threading.Condition()
        self._counts: dict[str, Counter[int]] = {}
        self._total = 0
        self._failures = Failures("NVML XID")
        self.errors = self._failures.errors
        self.last_error = self._failures.last_error
        self.reason: str | None = None
        self.watched: list[str] = []
        """UUIDs of the cards registered for XID events."""
        self.ready = threading.Event()

    def counts(self) -> dict[str, dict[int, int]]:
        """XID -> events, per card UUID, since :meth:`run` started; a copy."""
        with self._lock:
            return {uuid: dict(by_xid) for uuid, by_xid in self._counts.items()}

    def wait_counted(self, total: int, timeout: float) -> bool:
        """Wait up to ``timeout`` s until at least ``total`` events were counted; whether they were."""
        with self._lock:
            return self._lock.wait_for(lambda: self._total >= total, timeout)

    def run(self, stop: threading.Event, wait_ms: int = 1000) -> None:
        """Watch until ``stop`` is set; returns early (with :attr:`reason`) if events are unavailable.

        Never raises for an NVML failure: a supervised thread that died on one
        would lose the counts with it.
        """
        try:
            self._run(stop, wait_ms)
        finally:
            self.ready.set()

    def _run(self, stop: threading.Event, wait_ms: int) -> None:
        try:
            self._nvml.nvmlInit()
        except (self._error, OSError) as exc:
            self._give_up("init", exc)
            return
        try:
            try:
                event_set = self._nvml.nvmlEventSetCreate()
            except self._error as exc:
                self._give_up("create", exc)
                return
            try:
                cards = self._register(event_set)
                if cards is None:
                    return
                self.ready.set()
                self._watch(event_set, cards, stop, wait_ms)
            finally:
                try:
                    self._nvml.nvmlEventSetFree(event_set)
                except self._error as exc:
                    self._failed("free", exc)
        finally:
            try:
                self._nvml.nvmlShutdown()
            except self._error as exc:
                log.debug("nvmlShutdown failed: %s", describe(exc))

    def _register(self, event_set: Any) -> dict[Hashable, str] | None:
        """Register every card for XID events; handle key -> UUID, or None (with a reason) if none could be."""
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
        except self._error as exc:
            self._give_up("count", exc)
            return None
        cards: dict[Hashable, str] = {}
        for index in range(count):
            try:
                handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            except self._error as exc:
                self._failed("handle", exc, index)
                continue
            try:
                uuid = _text(self._nvml.nvmlDeviceGetUUID(handle))
            except self._error as exc:
                self._failed("uuid", exc, index)
                continue
            try:
                self._nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL_ERROR, event_set)
            except self._error as exc:
                # NOT_SUPPORTED on a board without XID events: watch the others.
                self._failed("events", exc, index)
                continue
            cards[_key(handle)] = uuid
            self.watched.append(uuid)
        if not cards:
            self.reason = f"XID events unavailable: none of {count} cards could be registered"
            log.info("%s", self.reason)
            return None
        return cards

    def _watch(
        self, event_set: Any, cards: dict[Hashable, str], stop: threading.Event, wait_ms: int
    ) -> None:
        while not stop.is_set():
            try:
                data = getattr(self._nvml, _WAIT)(event_set, wait_ms)
            except self._error as exc:
                if getattr(exc, "value", None) == _TIMEOUT:
                    continue  # nothing happened within wait_ms: check stop, wait again
                self._failed("wait", exc)
                stop.wait(wait_ms / 1000.0)
                continue
            if not int(data.eventType) & XID_CRITICAL_ERROR:
                continue
            uuid = cards.get(_key(data.device))
            if uuid is None:
                uuid = self._uuid_of(data.device)
                if uuid is None:
                    continue
            self._count(uuid, int(data.eventData))

    def _uuid_of(self, handle: Any) -> str | None:
        """The UUID of an event's device not found by handle; None (counted) if unreadable."""
        try:
            return _text(self._nvml.nvmlDeviceGetUUID(handle)) or None
        except self._error as exc:
            self._failed("device", exc)
            return None

    def _count(self, uuid: str, xid: int) -> None:
        with self._lock:
            self._counts.setdefault(uuid, Counter())[xid] += 1
            self._total += 1
            self._lock.notify_all()
        log.warning("XID %d on %s", xid, uuid)

    def _give_up(self, key: str, exc: BaseException) -> None:
        self.errors[key] += 1
        self.last_error[key] = describe(exc)
        self.reason = f"XID events unavailable: {describe(exc)}"
        log.info("%s", self.reason)

    def _failed(self, key: str, exc: BaseException, index: int | None = None) -> None:
        self._failures.failed(key, exc, index)


def _text(value: Any) -> str:
    """A str from a binding that returns str or bytes (see :func:`agent.nvml._text`)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)
