"""The XID watcher against the fake NVML's event sets.

Why: XIDs come as events that NVML does not replay, so the watcher must be
registered and waiting when they happen, count each once, survive cards that
cannot be registered, and stop within one wait when told. Every wait here is
bounded (an Event or Condition with a timeout), never a sleep.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pynvml  # type: ignore[import-untyped, unused-ignore]
import pytest

from agent.nvml import NvmlSampler
from agent.xid import XidWatcher
from simulator.nvml import SimulatedNvml

TIMEOUT = 5.0


@contextmanager
def watching(fake: SimulatedNvml, wait_ms: int = 50) -> Iterator[XidWatcher]:
    """A watcher running in a thread, registered, stopped and joined at the end."""
    watcher = XidWatcher(fake)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop, wait_ms), daemon=True)
    thread.start()
    try:
        assert watcher.ready.wait(TIMEOUT)
        yield watcher
    finally:
        stop.set()
        thread.join(TIMEOUT)
        assert not thread.is_alive()


def test_three_events_on_two_cards_are_counted_once_each() -> None:
    fake = SimulatedNvml(3)
    with watching(fake) as watcher:
        assert watcher.reason is None
        assert fake.post_xid(0, 79) == 1
        assert fake.post_xid(2, 13) == 1
        assert fake.post_xid(2, 13) == 1
        assert watcher.wait_counted(3, TIMEOUT)
        assert not watcher.wait_counted(4, 0.2)  # nothing counted twice
        counts = watcher.counts()
    assert counts == {fake.cards[0].uuid: {79: 1}, fake.cards[2].uuid: {13: 2}}
    assert not watcher.errors
    assert watcher.watched == [c.uuid for c in fake.cards]
    assert not fake.initialized  # its own NVML reference is released
    assert fake.calls["nvmlEventSetFree"] == 1


def test_counts_feed_the_sample() -> None:
    fake = SimulatedNvml(2)
    with watching(fake) as watcher:
        fake.post_xid(1, 48)
        assert watcher.wait_counted(1, TIMEOUT)
        with NvmlSampler(fake) as sampler:
            cards = sampler.sample(watcher.counts())
    assert [c.xid_errors for c in cards] == [{}, {48: 1}]


def test_counts_is_a_copy() -> None:
    fake = SimulatedNvml(1)
    with watching(fake) as watcher:
        fake.post_xid(0, 31)
        assert watcher.wait_counted(1, TIMEOUT)
        copy = watcher.counts()
        copy[fake.cards[0].uuid][31] = 99
        assert watcher.counts() == {fake.cards[0].uuid: {31: 1}}


def test_events_before_registration_are_not_replayed() -> None:
    fake = SimulatedNvml(1)
    fake.nvmlInit()
    assert fake.post_xid(0, 79) == 0
    assert fake.lost_events == 1
    with watching(fake) as watcher:
        assert not watcher.wait_counted(1, 0.2)
    assert watcher.counts() == {}


def test_a_timeout_loop_exits_when_stop_is_set() -> None:
    class Counting(SimulatedNvml):
        timeouts = threading.Event()
        waits = 0

        def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> object:  # type: ignore[override]
            Counting.waits += 1
            if Counting.waits >= 3:
                Counting.timeouts.set()
            return super().nvmlEventSetWait_v2(event_set, timeout_ms)  # type: ignore[arg-type]

    fake = Counting(1)
    watcher = XidWatcher(fake)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop, 20), daemon=True)
    thread.start()
    # Several timeouts pass with nothing to count; each is a wait, not an error.
    assert Counting.timeouts.wait(TIMEOUT)
    stop.set()
    thread.join(TIMEOUT)
    assert not thread.is_alive()
    assert not watcher.errors
    assert watcher.counts() == {}
    assert not fake.initialized


def test_register_not_supported_on_one_card_leaves_the_others_counted() -> None:
    fake = SimulatedNvml(3, fail={("events", 1): pynvml.NVML_ERROR_NOT_SUPPORTED})
    with watching(fake) as watcher:
        assert watcher.watched == [fake.cards[0].uuid, fake.cards[2].uuid]
        assert fake.post_xid(1, 79) == 0  # not registered: lost, as on a node
        fake.post_xid(0, 94)
        fake.post_xid(2, 95)
        assert watcher.wait_counted(2, TIMEOUT)
        counts = watcher.counts()
    assert counts == {fake.cards[0].uuid: {94: 1}, fake.cards[2].uuid: {95: 1}}
    assert watcher.errors == {"events": 1}
    assert "NotSupported" in watcher.last_error["events"]


def test_a_lost_card_is_not_watched_and_the_others_are() -> None:
    fake = SimulatedNvml(2, lost={0})
    with watching(fake) as watcher:
        fake.post_xid(1, 43)
        assert watcher.wait_counted(1, TIMEOUT)
    assert watcher.counts() == {fake.cards[1].uuid: {43: 1}}
    assert watcher.errors == {"handle": 1}


def test_no_card_supports_events_returns_with_a_reason() -> None:
    fake = SimulatedNvml(2, fail={("events", i): pynvml.NVML_ERROR_NOT_SUPPORTED for i in (0, 1)})
    stop = threading.Event()
    watcher = XidWatcher(fake)
    watcher.run(stop, 10)  # returns by itself: stop is never set
    assert watcher.reason is not None
    assert "none of 2 cards" in watcher.reason
    assert watcher.ready.is_set()
    assert watcher.errors == {"events": 2}
    assert not fake.initialized
    assert fake.calls["nvmlEventSetFree"] == 1


def test_a_driver_without_events_returns_after_one_line(caplog: pytest.LogCaptureFixture) -> None:
    fake = SimulatedNvml(2, missing={"nvmlEventSetCreate"})
    watcher = XidWatcher(fake)
    with caplog.at_level("INFO", logger="agent.xid"):
        watcher.run(threading.Event(), 10)
    assert watcher.reason is not None
    assert "FunctionNotFound" in watcher.reason
    assert len(caplog.records) == 1
    assert watcher.errors == {"create": 1}
    assert not fake.initialized


def test_no_driver_returns_with_a_reason() -> None:
    watcher = XidWatcher(SimulatedNvml(no_driver=True))
    watcher.run(threading.Event(), 10)
    assert watcher.reason is not None
    assert "Library Not Found" in watcher.reason
    assert watcher.ready.is_set()


def test_a_failing_wait_is_counted_and_retried_without_a_hot_loop() -> None:
    class Flaky(SimulatedNvml):
        failures = 0

        def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> object:  # type: ignore[override]
            if Flaky.failures < 2:
                Flaky.failures += 1
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
            return super().nvmlEventSetWait_v2(event_set, timeout_ms)  # type: ignore[arg-type]

    fake = Flaky(1)
    with watching(fake, wait_ms=20) as watcher:
        fake.post_xid(0, 62)
        assert watcher.wait_counted(1, TIMEOUT)
    assert watcher.errors == {"wait": 2}
    assert watcher.counts() == {fake.cards[0].uuid: {62: 1}}


def test_the_real_binding_without_a_driver_reports_why() -> None:
    watcher = XidWatcher()
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop, 100), daemon=True)
    thread.start()
    assert watcher.ready.wait(TIMEOUT)
    if watcher.reason is None:
        stop.set()
        thread.join(TIMEOUT)
        pytest.skip("NVML events work on this machine; this test covers the no-driver path")
    thread.join(TIMEOUT)
    assert not thread.is_alive()
