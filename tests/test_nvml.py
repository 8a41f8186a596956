"""The NVML sampler against the fake pynvml, and against the real one without a driver.

Why: a node's NVML fails piecemeal (a board without a power sensor, a GPU
that fell off the bus, a driver that is not loaded) and the agent must still
push whatever it could read. The fake raises the real ``pynvml.NVMLError``
codes, so these tests exercise the sampler's actual ``except`` clauses; the
last group runs the real binding on this driverless machine, which is the CI
path of every agent without a GPU.
"""

from __future__ import annotations

import json
import logging

import pynvml  # type: ignore[import-untyped, unused-ignore]
import pytest

from agent import gpucheck
from agent.nvml import NvmlSampler
from core.payload import Card, Payload
from simulator.nvml import FIELDS, H200_MEMORY, SimulatedCard, SimulatedNvml, make_cards

GIB = 1024**3


def started(fake: SimulatedNvml) -> NvmlSampler:
    sampler = NvmlSampler(fake)
    assert sampler.start(), sampler.reason
    return sampler


def complete(card: Card) -> bool:
    return all(
        value is not None
        for value in (
            card.memory_used,
            card.memory_total,
            card.utilization,
            card.memory_utilization,
            card.temperature,
            card.power,
        )
    )


# -- reading ------------------------------------------------------------------


def test_reads_every_card_in_payload_units() -> None:
    fake = SimulatedNvml(8, seed=3)
    for i, fake_card in enumerate(fake.cards):
        fake_card.memory_used = i * GIB
        fake_card.utilization = 10 * i
        fake_card.memory_utilization = 5 * i
        fake_card.temperature = 40 + i
        fake_card.power_mw = 100_000 + 1_234 * i
    sampler = started(fake)

    cards = sampler.sample()

    assert [c.index for c in cards] == list(range(8))
    assert [c.uuid for c in cards] == [c.uuid for c in fake.cards]
    for i, card in enumerate(cards):
        assert card.name == "NVIDIA H200"
        assert card.memory_used == i * GIB
        assert card.memory_total == H200_MEMORY
        assert card.utilization == 10 * i
        assert card.memory_utilization == 5 * i
        assert card.temperature == 40 + i
        assert card.power == pytest.approx(100.0 + 1.234 * i)  # mW -> W
    assert not sampler.errors
    assert sampler.available
    assert sampler.reason is None


def test_cards_fit_the_push_payload() -> None:
    fake = SimulatedNvml(8, seed=1)
    fake.step(1000.0)
    cards = started(fake).sample()
    payload = Payload(node="n1", agent="a1", sequence=0, time=1.0, nvml=True, cards=cards)
    assert Payload.model_validate_json(payload.model_dump_json()).cards == cards


def test_sample_before_start_is_empty_and_calls_nothing() -> None:
    fake = SimulatedNvml(2)
    sampler = NvmlSampler(fake)
    assert sampler.sample() == []
    assert not sampler.available
    assert not fake.calls


# -- partial failures ------------------------------------------------------------

PER_FIELD = {
    "name": ("name",),
    "memory": ("memory_used", "memory_total"),
    "utilization": ("utilization", "memory_utilization"),
    "temperature": ("temperature",),
    "power": ("power",),
}


@pytest.mark.parametrize("field", sorted(PER_FIELD))
def test_a_field_error_costs_that_field_of_that_card_only(field: str) -> None:
    fake = SimulatedNvml(4, fail={(field, 2): pynvml.NVML_ERROR_NOT_SUPPORTED})
    sampler = started(fake)

    cards = sampler.sample()

    assert [c.index for c in cards] == [0, 1, 2, 3]
    for card in cards[:2] + cards[3:]:
        assert complete(card)
        assert card.name == "NVIDIA H200"
    broken = cards[2].model_dump()
    for attr, value in broken.items():
        if attr in PER_FIELD[field]:
            assert value == ("" if attr == "name" else None), attr
        else:
            assert value is not None, attr
    assert sampler.errors == {field: 1}
    assert "NotSupported" in sampler.last_error[field]

    sampler.sample()
    assert sampler.errors == {field: 2}  # counted per failed read, every sample


def test_every_fake_field_is_a_sampler_error_key() -> None:
    assert set(PER_FIELD) | {"handle", "uuid"} == FIELDS


def test_a_repeated_failure_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    sampler = started(SimulatedNvml(2, fail={("power", 1): pynvml.NVML_ERROR_NOT_SUPPORTED}))
    with caplog.at_level(logging.WARNING, logger="agent.nvml"):
        for _ in range(5):
            sampler.sample()
    assert len(caplog.records) == 1
    assert "power" in caplog.records[0].getMessage()
    assert sampler.errors["power"] == 5


def test_a_lost_card_is_skipped_and_the_rest_reported() -> None:
    fake = SimulatedNvml(4, lost={1})
    sampler = started(fake)

    cards = sampler.sample()

    assert [c.index for c in cards] == [0, 2, 3]
    assert all(complete(c) for c in cards)
    assert [c.uuid for c in cards] == [fake.cards[i].uuid for i in (0, 2, 3)]
    assert sampler.errors == {"handle": 1}
    assert "GpuIsLost" in sampler.last_error["handle"]

    fake.lost.clear()  # back after a reset
    assert [c.index for c in sampler.sample()] == [0, 1, 2, 3]


def test_an_unreadable_uuid_skips_the_card() -> None:
    sampler = started(SimulatedNvml(3, fail={("uuid", 0): pynvml.NVML_ERROR_NO_PERMISSION}))
    assert [c.index for c in sampler.sample()] == [1, 2]
    assert sampler.errors == {"uuid": 1}


def test_an_empty_uuid_skips_the_card() -> None:
    fake = SimulatedNvml(2)
    fake.cards[0].uuid = ""
    sampler = started(fake)
    assert [c.index for c in sampler.sample()] == [1]
    assert sampler.errors == {"uuid": 1}


def test_a_reading_the_payload_rejects_skips_only_that_card() -> None:
    fake = SimulatedNvml(3)
    fake.cards[1].uuid = "GPU-" + "f" * 200  # longer than Card allows
    sampler = started(fake)
    assert [c.index for c in sampler.sample()] == [0, 2]
    assert sampler.errors == {"card": 1}


def test_an_unreadable_device_count_gives_an_empty_sample() -> None:
    fake = SimulatedNvml(2)
    sampler = started(fake)
    fake.count_error = pynvml.NVML_ERROR_UNKNOWN
    assert sampler.sample() == []
    assert sampler.errors == {"count": 1}
    fake.count_error = None
    assert len(sampler.sample()) == 2


def test_device_count_is_read_every_sample() -> None:
    fake = SimulatedNvml(2, seed=5)
    sampler = started(fake)
    assert len(sampler.sample()) == 2

    fake.cards.append(SimulatedCard(uuid="GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"))
    cards = sampler.sample()
    assert [c.index for c in cards] == [0, 1, 2]
    assert cards[2].uuid == "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"

    del fake.cards[:2]
    cards = sampler.sample()
    assert [(c.index, c.uuid) for c in cards] == [(0, "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec")]
    assert fake.calls["nvmlDeviceGetCount"] == 3
    assert not sampler.errors


def test_temperature_moves_to_the_v_call_when_the_old_one_is_gone() -> None:
    fake = SimulatedNvml(2, missing={"nvmlDeviceGetTemperature"})
    for card in fake.cards:
        card.temperature = 55
    sampler = started(fake)

    assert [c.temperature for c in sampler.sample()] == [55, 55]
    assert [c.temperature for c in sampler.sample()] == [55, 55]
    assert not sampler.errors
    assert fake.calls["nvmlDeviceGetTemperature"] == 1  # tried once, then never again
    assert fake.calls["nvmlDeviceGetTemperatureV"] == 4


# -- strings ---------------------------------------------------------------------


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_names_and_uuids_are_str_whatever_the_binding_returns(as_bytes: bool) -> None:
    fake = SimulatedNvml(2, seed=9, as_bytes=as_bytes)
    sampler = started(fake)
    cards = sampler.sample()
    assert [c.uuid for c in cards] == [c.uuid for c in fake.cards]
    assert all(type(c.uuid) is str and c.name == "NVIDIA H200" for c in cards)
    assert sampler.driver_version() == "550.127.05"


def test_fake_uuids_look_like_nvmls() -> None:
    uuids = [c.uuid for c in make_cards(16, seed=0)]
    assert len(set(uuids)) == 16
    assert uuids == [c.uuid for c in make_cards(16, seed=0)]
    for uuid in uuids:
        parts = uuid.split("-")
        assert parts[0] == "GPU"
        assert [len(p) for p in parts[1:]] == [8, 4, 4, 4, 12]
        int("".join(parts[1:]), 16)


# -- no driver, start and close ------------------------------------------------------


def test_no_driver_start_is_false_with_a_reason_and_nothing_raises() -> None:
    fake = SimulatedNvml(4, no_driver=True)
    sampler = NvmlSampler(fake)

    assert sampler.start() is False
    assert not sampler.available
    assert sampler.reason is not None
    assert "Library Not Found" in sampler.reason
    assert sampler.sample() == []
    assert sampler.driver_version() is None
    sampler.close()
    assert fake.calls == {"nvmlInit": 1}


def test_driver_not_loaded_reason() -> None:
    sampler = NvmlSampler(SimulatedNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    assert sampler.start() is False
    assert sampler.reason is not None
    assert "DriverNotLoaded" in sampler.reason


def test_an_oserror_from_init_is_caught() -> None:
    class Broken(SimulatedNvml):
        def nvmlInit(self) -> None:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    sampler = NvmlSampler(Broken())
    assert sampler.start() is False
    assert sampler.reason is not None
    assert "libnvidia-ml" in sampler.reason
    assert sampler.sample() == []


def test_start_is_idempotent_and_close_shuts_down_once() -> None:
    fake = SimulatedNvml(2)
    sampler = NvmlSampler(fake)
    assert sampler.start()
    assert sampler.start()
    assert fake.refcount == 1

    sampler.close()
    assert not fake.initialized
    assert fake.calls["nvmlShutdown"] == 1
    assert not sampler.available
    assert sampler.sample() == []

    sampler.close()  # second close is a no-op
    assert fake.calls["nvmlShutdown"] == 1


def test_context_manager_starts_and_closes() -> None:
    fake = SimulatedNvml(1)
    with NvmlSampler(fake) as sampler:
        assert fake.initialized
        assert len(sampler.sample()) == 1
    assert not fake.initialized


def test_fake_refuses_calls_before_init() -> None:
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        SimulatedNvml(1).nvmlDeviceGetCount()


def test_fake_rejects_an_unknown_failure_field() -> None:
    with pytest.raises(ValueError, match="temprature"):
        SimulatedNvml(1, fail={("temprature", 0): pynvml.NVML_ERROR_NOT_SUPPORTED})


# -- the real binding, no driver on this machine (the CI path) ---------------------------


def test_real_pynvml_without_a_driver_reports_why() -> None:
    sampler = NvmlSampler()
    try:
        if sampler.start():
            pytest.skip("NVML works on this machine; this test covers the no-driver path")
        assert sampler.reason is not None
        assert "library" in sampler.reason.lower() or "driver" in sampler.reason.lower()
        assert sampler.sample() == []
        assert not sampler.available
    finally:
        sampler.close()


# -- drift, cost, gpucheck ---------------------------------------------------------------


def test_step_is_deterministic_and_stays_in_range() -> None:
    a, b = SimulatedNvml(8, seed=11), SimulatedNvml(8, seed=11)
    a.step(600.0)
    b.step(600.0)
    assert a.cards == b.cards
    before = [c.utilization for c in a.cards]
    a.step(900.0)
    assert [c.utilization for c in a.cards] != before

    sampler = started(a)
    for t in range(0, 3600, 60):
        a.step(float(t))
        for card in sampler.sample():
            assert complete(card)
            assert 0 <= (card.utilization or 0) <= 100
            assert 0 <= (card.memory_used or 0) <= (card.memory_total or 0)
            assert 75 <= (card.power or 0) <= 700
    assert not sampler.errors


def test_gpucheck_prints_one_sample(capsys: pytest.CaptureFixture[str]) -> None:
    fake = SimulatedNvml(2, fail={("power", 1): pynvml.NVML_ERROR_NOT_SUPPORTED})
    assert gpucheck.main(fake) == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["uuid"] for c in report["cards"]] == [c.uuid for c in fake.cards]
    assert report["errors"] == {"power": 2}  # two samples are taken
    assert report["driver_version"] == "550.127.05"
    assert set(report["memory_v1_v2"]["0"]) == {"v1", "v2"}
    assert not fake.initialized


def test_gpucheck_without_a_driver_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpucheck.main(SimulatedNvml(no_driver=True)) == 1
    assert "Library Not Found" in capsys.readouterr().err
