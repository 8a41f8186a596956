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
from agent.nvml import ERROR_KEYS, NvmlSampler, ProcessSample
from core.clockevents import CLOCK_EVENT_REASONS, active
from core.payload import Card, Mig, Payload
from simulator.nvml import (
    FIELDS,
    H200_MEMORY,
    MIB,
    SimulatedCard,
    SimulatedMig,
    SimulatedNvml,
    SimulatedProcess,
    make_cards,
)

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
    "energy": ("energy",),
    "ecc": ("ecc_corrected", "ecc_uncorrected"),
    "clock_events": ("clock_events",),
}
#: Calls per sample behind one error key (ECC: one per error type).
CALLS = {"ecc": 2}
#: Card fields the sampler never sets (the agent computes it from the processes' shares).
NOT_SAMPLED = {"idle_energy", "unattributed_energy"}


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
        elif attr not in NOT_SAMPLED:
            assert value is not None, attr
    calls = CALLS.get(field, 1)
    assert sampler.errors == {field: calls}
    assert "NotSupported" in sampler.last_error[field]

    sampler.sample()
    assert sampler.errors == {field: 2 * calls}  # counted per failed read, every sample


def test_every_fake_field_is_a_sampler_error_key() -> None:
    not_card_fields = {"handle", "uuid", "mig", "processes", "process_utilization", "events"}
    assert set(PER_FIELD) | not_card_fields == FIELDS
    assert set(ERROR_KEYS) >= FIELDS


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
    fake.cards[0].processes = [SimulatedProcess(4242, GIB, "compute", [(10, 30)])]
    fake.cards[1].energy_mj = 5_000
    fake.cards[1].clock_events = 0x4
    assert gpucheck.main(fake, ["--events-seconds", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["uuid"] for c in report["cards"]] == [c.uuid for c in fake.cards]
    assert report["errors"] == {"power": 2}  # two samples are taken
    assert report["driver_version"] == "550.127.05"
    assert set(report["memory_v1_v2"]["0"]) == {"v1", "v2"}
    assert report["processes"] == [
        {
            "device": fake.cards[0].uuid,
            "card": fake.cards[0].uuid,
            "pid": 4242,
            "memory": GIB,
            "sm": 30.0,
        }
    ]
    assert report["energy_j"]["1"] == 5.0
    assert report["ecc"]["0"] == {"corrected": 0, "uncorrected": 0}
    assert report["clock_events"]["1"]["bitmask"] == 4
    assert report["clock_events"]["1"]["reasons"]["sw_power_cap"] == 1
    assert report["clock_events"]["1"]["reasons"]["gpu_idle"] == 0
    assert report["mig"] == {"0": [], "1": []}
    assert report["events"] is None
    assert not fake.initialized


def test_gpucheck_watches_events_for_the_given_time(capsys: pytest.CaptureFixture[str]) -> None:
    fake = SimulatedNvml(2, fail={("events", 1): pynvml.NVML_ERROR_NOT_SUPPORTED})
    assert gpucheck.main(fake, ["--events-seconds", "0.2"]) == 0
    events = json.loads(capsys.readouterr().out)["events"]
    assert events["watched"] == [fake.cards[0].uuid]
    assert events["errors"] == {"events": 1}
    assert events["xid_errors"] == {}
    assert events["reason"] is None
    assert not fake.initialized


def test_gpucheck_without_a_driver_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpucheck.main(SimulatedNvml(no_driver=True)) == 1
    assert "Library Not Found" in capsys.readouterr().err


# -- energy, ECC, clocks-event reasons ------------------------------------------------------


def test_energy_is_read_in_joules_and_grows_with_step() -> None:
    fake = SimulatedNvml(2, seed=4)
    fake.cards[0].energy_mj = 123_456
    sampler = started(fake)
    assert [c.energy for c in sampler.sample()] == [pytest.approx(123.456), 0.0]

    fake.step(0.0)
    fake.step(10.0)  # 10 s at >= 75 W: at least 750 J more
    energies = [c.energy or 0.0 for c in sampler.sample()]
    assert energies[0] >= 123.456 + 750
    assert energies[1] >= 750
    fake.step(5.0)  # back in time: the counter does not go backwards
    assert [c.energy for c in sampler.sample()] == energies


def test_a_card_without_energy_support_has_none_not_zero() -> None:
    fake = SimulatedNvml(2, fail={("energy", 0): pynvml.NVML_ERROR_NOT_SUPPORTED})
    fake.cards[1].energy_mj = 0
    sampler = started(fake)
    cards = sampler.sample()
    assert cards[0].energy is None
    assert cards[1].energy == 0.0
    assert sampler.errors == {"energy": 1}


def test_ecc_reads_both_types_of_the_aggregate_counter() -> None:
    fake = SimulatedNvml(2)
    fake.cards[1].ecc_corrected = 17
    fake.cards[1].ecc_uncorrected = 2
    sampler = started(fake)
    cards = sampler.sample()
    assert [(c.ecc_corrected, c.ecc_uncorrected) for c in cards] == [(0, 0), (17, 2)]
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 4


def test_ecc_unsupported_is_none_for_both_types() -> None:
    sampler = started(SimulatedNvml(1, fail={("ecc", 0): pynvml.NVML_ERROR_NOT_SUPPORTED}))
    (card,) = sampler.sample()
    assert (card.ecc_corrected, card.ecc_uncorrected) == (None, None)
    assert sampler.errors == {"ecc": 2}


def test_clock_events_bitmask_is_read_and_decoded() -> None:
    fake = SimulatedNvml(1)
    fake.cards[0].clock_events = 0x1 | 0x4 | 0x40
    (card,) = started(fake).sample()
    assert card.clock_events == 0x45
    decoded = dict(active(0x45))
    assert [name for name, on in decoded.items() if on] == [
        "gpu_idle",
        "sw_power_cap",
        "hw_thermal_slowdown",
    ]
    assert len(decoded) == len(CLOCK_EVENT_REASONS) == 9
    assert active(0) == [(name, 0) for _, name in CLOCK_EVENT_REASONS]
    assert dict(active(0x200 | 0x100)) == {**dict(active(0)), "display_clock_setting": 1}


def test_clock_events_bits_match_the_binding() -> None:
    for bit, name in CLOCK_EVENT_REASONS:
        camel = "".join(part.capitalize() for part in name.split("_"))
        assert getattr(pynvml, f"nvmlClocksEventReason{camel}") == bit, name


def test_clock_events_move_to_the_throttle_call_when_the_new_one_is_gone() -> None:
    fake = SimulatedNvml(2, missing={"nvmlDeviceGetCurrentClocksEventReasons"})
    for card in fake.cards:
        card.clock_events = 0x8
    sampler = started(fake)
    assert [c.clock_events for c in sampler.sample()] == [8, 8]
    assert [c.clock_events for c in sampler.sample()] == [8, 8]
    assert not sampler.errors
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 4


def test_xid_counts_are_copied_into_their_cards() -> None:
    fake = SimulatedNvml(2)
    counts = {fake.cards[1].uuid: {79: 1, 13: 2}, "GPU-gone": {48: 1}}
    cards = started(fake).sample(counts)
    assert cards[0].xid_errors == {}
    assert cards[1].xid_errors == {79: 1, 13: 2}


# -- MIG ----------------------------------------------------------------------------------


def mig_card(uuid: str = "GPU-11111111-2222-3333-4444-555555555555") -> SimulatedCard:
    """An H100-like card with a 3g.40gb instance in slot 0, a hole, and a 1c.2g.20gb one in slot 2."""
    return SimulatedCard(
        uuid=uuid,
        mig=[
            SimulatedMig(
                uuid="MIG-aaaaaaaa-0000-0000-0000-000000000001",
                gpu_instance_id=2,
                compute_instance_id=0,
                slices=3,
                memory_total=40_192 * MIB,
                memory_used=1_000 * MIB,
                processes=[SimulatedProcess(100, 900 * MIB)],
            ),
            None,
            SimulatedMig(
                uuid="MIG-aaaaaaaa-0000-0000-0000-000000000002",
                gpu_instance_id=5,
                compute_instance_id=1,
                slices=2,
                compute_slices=1,
                memory_total=19_968 * MIB,
                processes=[
                    SimulatedProcess(200, None, "compute"),
                    SimulatedProcess(201, 10 * MIB, "graphics"),
                ],
            ),
        ],
    )


def test_a_mig_card_reports_its_instances() -> None:
    fake = SimulatedNvml([SimulatedCard(uuid="GPU-plain"), mig_card()])
    sampler = started(fake)

    plain, mig = sampler.sample()

    assert plain.mig == []
    assert mig.mig == [
        Mig(
            uuid="MIG-aaaaaaaa-0000-0000-0000-000000000001",
            gpu_instance_id=2,
            compute_instance_id=0,
            profile="3g.40gb",
            memory_used=1_000 * MIB,
            memory_total=40_192 * MIB,
        ),
        Mig(
            uuid="MIG-aaaaaaaa-0000-0000-0000-000000000002",
            gpu_instance_id=5,
            compute_instance_id=1,
            profile="1c.2g.20gb",
            memory_used=0,
            memory_total=19_968 * MIB,
        ),
    ]
    assert mig.utilization is None  # NOT_SUPPORTED on a MIG-enabled card
    assert sampler.errors == {"utilization": 1}  # the empty slot is no error


def test_mig_mode_not_supported_is_a_card_without_mig_not_an_error() -> None:
    sampler = started(SimulatedNvml(2, fail={("mig", 1): pynvml.NVML_ERROR_NOT_SUPPORTED}))
    assert [c.mig for c in sampler.sample()] == [[], []]
    assert not sampler.errors


def test_a_failing_mig_call_is_counted_and_the_card_still_reported() -> None:
    fake = SimulatedNvml([mig_card()], fail={("mig", 0): pynvml.NVML_ERROR_UNKNOWN})
    sampler = started(fake)
    (card,) = sampler.sample()
    assert card.mig == []
    assert card.memory_total == H200_MEMORY
    assert sampler.errors["mig"] == 1


# -- processes ------------------------------------------------------------------------------


def test_processes_in_both_lists_are_one_with_the_larger_memory() -> None:
    fake = SimulatedNvml(2)
    fake.cards[0].processes = [
        SimulatedProcess(10, 2 * GIB, "compute"),
        SimulatedProcess(10, 3 * GIB, "graphics"),
        SimulatedProcess(11, None, "compute"),
        SimulatedProcess(11, GIB, "graphics"),
        SimulatedProcess(12, None, "graphics"),
    ]
    uuid = fake.cards[0].uuid
    assert started(fake).processes() == [
        ProcessSample(device=uuid, card=uuid, pid=10, memory=3 * GIB, sm=0.0),
        ProcessSample(device=uuid, card=uuid, pid=11, memory=GIB, sm=0.0),
        ProcessSample(device=uuid, card=uuid, pid=12, memory=None, sm=0.0),
    ]


def test_process_utilisation_counts_each_sample_once() -> None:
    fake = SimulatedNvml(1)
    busy = SimulatedProcess(7, GIB, "compute", [(1_000, 40), (2_000, 60)])
    idle = SimulatedProcess(8, GIB, "compute", [])
    fake.cards[0].processes = [busy, idle]
    sampler = started(fake)

    assert [(p.pid, p.sm) for p in sampler.processes()] == [(7, 50.0), (8, 0.0)]
    # The fake holds the same samples: NVML returns only newer ones, so none.
    assert [(p.pid, p.sm) for p in sampler.processes()] == [(7, 0.0), (8, 0.0)]

    busy.samples.append((3_000, 90))
    idle.samples.extend([(2_500, 10), (3_500, 30)])
    assert [(p.pid, p.sm) for p in sampler.processes()] == [(7, 90.0), (8, 20.0)]
    assert not sampler.errors  # NOT_FOUND (no new sample) is not a failure


def test_process_utilisation_unsupported_is_none_and_counted() -> None:
    fake = SimulatedNvml(2, fail={("process_utilization", 0): pynvml.NVML_ERROR_NOT_SUPPORTED})
    for card in fake.cards:
        card.processes = [SimulatedProcess(5, GIB, "compute", [(1, 50)])]
    sampler = started(fake)
    assert [p.sm for p in sampler.processes()] == [None, 50.0]
    assert sampler.errors == {"process_utilization": 1}


def test_a_mig_cards_processes_are_read_per_instance() -> None:
    card = mig_card()
    sampler = started(SimulatedNvml([card]))
    first, second = (m.uuid for m in card.mig if m is not None)
    assert sampler.processes() == [
        ProcessSample(device=first, card=card.uuid, pid=100, memory=900 * MIB, sm=None),
        ProcessSample(device=second, card=card.uuid, pid=200, memory=None, sm=None),
        ProcessSample(device=second, card=card.uuid, pid=201, memory=10 * MIB, sm=None),
    ]
    assert not sampler.errors


def test_a_lost_card_does_not_lose_the_others_processes() -> None:
    fake = SimulatedNvml(3, lost={1})
    for i, card in enumerate(fake.cards):
        card.processes = [SimulatedProcess(100 + i, GIB)]
    sampler = started(fake)
    assert [(p.card, p.pid) for p in sampler.processes()] == [
        (fake.cards[0].uuid, 100),
        (fake.cards[2].uuid, 102),
    ]
    assert sampler.errors == {"handle": 1}


def test_an_unreadable_process_list_costs_that_card_only() -> None:
    fake = SimulatedNvml(2, fail={("processes", 0): pynvml.NVML_ERROR_NO_PERMISSION})
    for card in fake.cards:
        card.processes = [SimulatedProcess(9, GIB)]
    sampler = started(fake)
    assert [p.card for p in sampler.processes()] == [fake.cards[1].uuid]
    assert sampler.errors == {"processes": 2}  # the compute and the graphics list


def test_processes_before_start_are_empty() -> None:
    fake = SimulatedNvml(1)
    assert NvmlSampler(fake).processes() == []
    assert not fake.calls


def test_a_removed_card_drops_its_utilisation_timestamp() -> None:
    fake = SimulatedNvml(2)
    for card in fake.cards:
        card.processes = [SimulatedProcess(1, GIB, "compute", [(5, 10)])]
    sampler = started(fake)
    sampler.processes()
    assert len(sampler._seen) == 2
    del fake.cards[0]
    sampler.processes()
    assert list(sampler._seen) == [fake.cards[0].uuid]


# -- device IDs ------------------------------------------------------------------------------


def test_device_uuid_for_each_id_form() -> None:
    plain = SimulatedCard(uuid="GPU-00000000-0000-0000-0000-000000000000")
    card = mig_card()
    sampler = started(SimulatedNvml([plain, card]))
    mig_uuid = "MIG-aaaaaaaa-0000-0000-0000-000000000002"

    assert sampler.device_uuid(plain.uuid) == plain.uuid
    assert sampler.device_uuid(card.uuid) == card.uuid
    assert sampler.device_uuid(mig_uuid) == mig_uuid
    assert sampler.device_uuid("0") == plain.uuid
    assert sampler.device_uuid("1") == card.uuid
    assert sampler.device_uuid(f"MIG-{card.uuid}/5/1") == mig_uuid
    assert sampler.device_uuid(f"MIG-{card.uuid}/2/0") == "MIG-aaaaaaaa-0000-0000-0000-000000000001"

    assert sampler.device_uuid(f"MIG-{card.uuid}/5/0") is None  # no such instance
    assert sampler.device_uuid(f"MIG-{plain.uuid}/1/0") is None  # not a MIG card
    assert sampler.device_uuid("MIG-GPU-nope/x/0") is None
    assert sampler.device_uuid("GPU-ffffffff-0000-0000-0000-000000000000") is None
    assert sampler.device_uuid("MIG-ffffffff-0000-0000-0000-000000000000") is None
    assert sampler.device_uuid("7") is None
    assert sampler.device_uuid("nvidia0") is None
    assert sampler.device_uuid("") is None


def test_device_uuid_before_start_is_none() -> None:
    assert NvmlSampler(SimulatedNvml(1)).device_uuid("0") is None
