"""agent.attribution: per-container usage from NVML's processes, the energy split, and which
reading gives a HAMi-core region's utilisation."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from agent.attribution import EnergyLedger, Utilization, usage
from agent.cgroups import Owner
from agent.hamicore import DeviceUsage, RegionUsage
from agent.nvml import ProcessSample
from agent.region_scan import RegionKey
from core.payload import Card, ContainerUsage, Mig

A = Owner("aaaaaaaa-0000-4000-8000-000000000001", "a" * 64)
B = Owner("bbbbbbbb-0000-4000-8000-000000000002", "b" * 64)
GPU0, GPU1 = "GPU-0", "GPU-1"


def _sample(device: str, pid: int, memory: int | None, sm: float | None) -> ProcessSample:
    return ProcessSample(device=device, card=device, pid=pid, memory=memory, sm=sm)


def _use(device: str, who: Owner | None, utilization: float | None) -> ContainerUsage:
    return ContainerUsage(
        device=device,
        pod_uid=None if who is None else who.pod_uid,
        container_id=None if who is None else who.container_id,
        processes=1,
        memory_used=0,
        utilization=utilization,
    )


def _card(uuid: str, energy: float | None, utilization: float | None, *migs: str) -> Card:
    mig = [Mig(uuid=m, gpu_instance_id=i, compute_instance_id=0) for i, m in enumerate(migs)]
    return Card(index=0, uuid=uuid, energy=energy, utilization=utilization, mig=mig)


def _energy(usages: Sequence[ContainerUsage], who: Owner | None) -> float:
    pod = None if who is None else who.pod_uid
    (found,) = [u.energy for u in usages if u.pod_uid == pod]
    return _set(found)


def _set(value: float | None) -> float:
    """A running total the ledger must have set."""
    assert value is not None
    return value


# --- usage ---------------------------------------------------------------------------------


def test_processes_of_one_container_on_one_card_are_summed() -> None:
    samples = [_sample(GPU0, 1, 100, 20.0), _sample(GPU0, 2, 50, 5.0)]
    (got,) = usage(samples, {1: A, 2: A})
    assert (got.device, got.pod_uid, got.container_id) == (GPU0, A.pod_uid, A.container_id)
    assert (got.processes, got.memory_used, got.utilization) == (2, 150, 25.0)
    assert got.energy is None


def test_one_container_on_two_cards_is_two_usages() -> None:
    got = usage([_sample(GPU0, 1, 10, 1.0), _sample(GPU1, 1, 20, 2.0)], {1: A})
    assert [(u.device, u.memory_used, u.utilization) for u in got] == [
        (GPU0, 10, 1.0),
        (GPU1, 20, 2.0),
    ]


def test_host_processes_unreadable_pids_and_hidden_readings() -> None:
    samples = [
        _sample(GPU0, 1, None, None),  # host process, memory hidden, no sm
        _sample(GPU0, 2, 30, None),  # host process
        _sample(GPU0, 3, 40, 9.0),  # unreadable cgroup: nobody's
        _sample(GPU0, 4, None, 7.0),
    ]
    host, b = usage(samples, {1: None, 2: None, 4: B})
    assert (host.pod_uid, host.container_id, host.processes) == (None, None, 2)
    assert (host.memory_used, host.utilization) == (30, None)
    assert (b.pod_uid, b.memory_used, b.utilization) == (B.pod_uid, 0, 7.0)


def test_utilization_sums_the_processes_that_have_one() -> None:
    (got,) = usage([_sample(GPU0, 1, 0, None), _sample(GPU0, 2, 0, 3.0)], {1: A, 2: A})
    assert got.utilization == 3.0


def test_no_samples() -> None:
    assert usage([], {1: A}) == []


# --- EnergyLedger --------------------------------------------------------------------------


def test_first_reading_is_a_baseline() -> None:
    cards, usages = EnergyLedger().split([_card(GPU0, 1000.0, 50.0)], [_use(GPU0, A, 50.0)])
    assert cards[0].idle_energy == 0.0
    assert usages[0].energy == 0.0


def test_split_with_known_numbers() -> None:
    ledger = EnergyLedger()
    ledger.split([_card(GPU0, 1000.0, 0.0)], [_use(GPU0, A, 0.0), _use(GPU0, None, 0.0)])
    # 100 J; the card is 60% busy; A has 30 of the 40 points of SM, the host 10.
    cards, usages = ledger.split(
        [_card(GPU0, 1100.0, 60.0)], [_use(GPU0, A, 30.0), _use(GPU0, None, 10.0)]
    )
    assert _energy(usages, A) == pytest.approx(45.0)
    assert _energy(usages, None) == pytest.approx(15.0)
    assert cards[0].idle_energy == pytest.approx(40.0)
    # Next 50 J, card utilisation unknown: busy = sum of the containers' = 50%.
    cards, usages = ledger.split(
        [_card(GPU0, 1150.0, None)], [_use(GPU0, A, 25.0), _use(GPU0, None, 25.0)]
    )
    assert _energy(usages, A) == pytest.approx(45.0 + 12.5)
    assert _energy(usages, None) == pytest.approx(15.0 + 12.5)
    assert cards[0].idle_energy == pytest.approx(40.0 + 25.0)


def test_busy_fraction_is_capped_and_idle_containers_get_nothing() -> None:
    ledger = EnergyLedger()
    ledger.split([_card(GPU0, 0.0, None)], [_use(GPU0, A, 0.0), _use(GPU0, B, None)])
    cards, usages = ledger.split(
        [_card(GPU0, 10.0, None)], [_use(GPU0, A, 150.0), _use(GPU0, B, 50.0)]
    )
    assert [_energy(usages, A), _energy(usages, B)] == pytest.approx([7.5, 2.5])
    assert cards[0].idle_energy == pytest.approx(0.0, abs=1e-12)
    cards, usages = ledger.split(
        [_card(GPU0, 20.0, 80.0)], [_use(GPU0, A, 0.0), _use(GPU0, B, None)]
    )
    assert [_energy(usages, A), _energy(usages, B)] == pytest.approx([7.5, 2.5])
    assert cards[0].idle_energy == pytest.approx(10.0)


def _invariant(
    cards: Sequence[Card], usages: Sequence[ContainerUsage], first: dict[str, float]
) -> None:
    for card in cards:
        devices = {card.uuid} | {m.uuid for m in card.mig}
        shared = sum(_set(u.energy) for u in usages if u.device in devices)
        increase = _set(card.energy) - first[card.uuid]
        assert math.isclose(_set(card.idle_energy) + shared, increase, rel_tol=1e-9, abs_tol=1e-9)


def test_invariant_over_random_snapshots() -> None:
    rng = random.Random(20261204)
    ledger = EnergyLedger()
    energy = {GPU0: 5e6, GPU1: 123.0}
    first = dict(energy)
    owners = [A, B, None]
    for step in range(10):
        cards = [
            _card(GPU0, energy[GPU0], rng.choice([None, rng.uniform(0, 120)])),
            _card(GPU1, energy[GPU1], rng.uniform(0, 100), "MIG-1a", "MIG-1b"),
        ]
        usages = [_use(GPU0, who, rng.uniform(0, 70)) for who in owners]
        usages += [_use("MIG-1a", A, rng.uniform(0, 100)), _use("MIG-1b", B, None)]
        cards, usages = ledger.split(cards, usages)
        _invariant(cards, usages, first)
        if step:
            assert all(u.energy is not None for u in usages)
        energy = {uuid: e + rng.uniform(0, 4000) for uuid, e in energy.items()}


def test_card_without_energy() -> None:
    ledger = EnergyLedger()
    ledger.split([_card(GPU0, 100.0, 50.0)], [_use(GPU0, A, 50.0)])
    cards, usages = ledger.split([_card(GPU0, None, 50.0)], [_use(GPU0, A, 50.0)])
    assert cards[0].idle_energy is None
    assert usages[0].energy is None
    # The gap's energy is not lost: the next reading splits all of it.
    cards, usages = ledger.split([_card(GPU0, 300.0, 50.0)], [_use(GPU0, A, 50.0)])
    assert usages[0].energy == pytest.approx(100.0)
    assert cards[0].idle_energy == pytest.approx(100.0)


def test_a_card_that_never_has_energy() -> None:
    ledger = EnergyLedger()
    for _ in range(2):
        cards, usages = ledger.split([_card(GPU0, None, 90.0)], [_use(GPU0, A, 90.0)])
        assert (cards[0].idle_energy, usages[0].energy) == (None, None)


def test_reading_going_backwards_starts_over() -> None:
    ledger = EnergyLedger()
    ledger.split([_card(GPU0, 1000.0, 100.0)], [_use(GPU0, A, 10.0)])
    ledger.split([_card(GPU0, 1100.0, 100.0)], [_use(GPU0, A, 10.0)])
    cards, usages = ledger.split([_card(GPU0, 5.0, 100.0)], [_use(GPU0, A, 10.0)])
    assert usages[0].energy == pytest.approx(100.0)  # nothing split for the reload's interval
    assert cards[0].idle_energy == pytest.approx(0.0)
    cards, usages = ledger.split([_card(GPU0, 25.0, 100.0)], [_use(GPU0, A, 10.0)])
    assert usages[0].energy == pytest.approx(120.0)  # totals go on from the new baseline


def test_mig_instances_count_to_their_card() -> None:
    ledger = EnergyLedger()
    card = _card(GPU0, 0.0, None, "MIG-a", "MIG-b")
    ledger.split([card, _card(GPU1, 0.0, 100.0)], [_use("MIG-a", A, 20.0), _use("MIG-b", B, 20.0)])
    cards, usages = ledger.split(
        [card.model_copy(update={"energy": 100.0}), _card(GPU1, 50.0, 100.0)],
        [_use("MIG-a", A, 20.0), _use("MIG-b", B, 20.0), _use("MIG-x", None, 50.0)],
    )
    assert [u.energy for u in usages] == [pytest.approx(20.0), pytest.approx(20.0), None]
    assert cards[0].idle_energy == pytest.approx(60.0)
    assert cards[1].idle_energy == pytest.approx(50.0)  # busy, but nobody on it


def test_a_container_leaving_keeps_nothing() -> None:
    ledger = EnergyLedger()
    both = [_use(GPU0, A, 50.0), _use(GPU0, B, 50.0)]
    ledger.split([_card(GPU0, 0.0, 100.0)], both)
    ledger.split([_card(GPU0, 100.0, 100.0)], both)
    cards, usages = ledger.split([_card(GPU0, 200.0, 100.0)], [_use(GPU0, A, 50.0)])
    assert usages[0].energy == pytest.approx(150.0)
    # B's 50 J left with it: the totals now fall short by exactly that...
    assert _set(cards[0].idle_energy) + _set(usages[0].energy) == pytest.approx(200.0 - 50.0)
    # ...and increases still add up while the set stays the same.
    cards2, usages2 = ledger.split([_card(GPU0, 260.0, 100.0)], [_use(GPU0, A, 50.0)])
    gained = _set(cards2[0].idle_energy) - _set(cards[0].idle_energy)
    gained += _set(usages2[0].energy) - _set(usages[0].energy)
    assert gained == pytest.approx(60.0)
    # B coming back starts from zero.
    _, usages3 = ledger.split([_card(GPU0, 260.0, 100.0)], both)
    assert _energy(usages3, B) == 0.0


def test_a_card_that_went_away_starts_over() -> None:
    ledger = EnergyLedger()
    ledger.split([_card(GPU0, 0.0, 100.0)], [_use(GPU0, A, 1.0)])
    ledger.split([_card(GPU0, 10.0, 100.0)], [_use(GPU0, A, 1.0)])
    ledger.split([], [])
    cards, usages = ledger.split([_card(GPU0, 50.0, 100.0)], [_use(GPU0, A, 1.0)])
    assert (cards[0].idle_energy, usages[0].energy) == (0.0, 0.0)


def test_processes_of_no_pod_are_the_card_s_unattributed_energy() -> None:
    ledger = EnergyLedger()
    ledger.split([_card(GPU0, 0.0, 100.0)], [_use(GPU0, A, 1.0), _use(GPU0, None, 1.0)])
    cards, usages = ledger.split(
        [_card(GPU0, 100.0, 80.0)], [_use(GPU0, A, 30.0), _use(GPU0, None, 10.0)]
    )
    assert cards[0].unattributed_energy == pytest.approx(20.0)  # 80 J busy, a quarter the host's
    assert _energy(usages, None) == pytest.approx(20.0)
    # the host's processes end and come back: the card's total goes on, never back
    cards, _ = ledger.split([_card(GPU0, 200.0, 80.0)], [_use(GPU0, A, 30.0)])
    assert cards[0].unattributed_energy == pytest.approx(20.0)
    cards, usages = ledger.split(
        [_card(GPU0, 300.0, 80.0)], [_use(GPU0, A, 20.0), _use(GPU0, None, 20.0)]
    )
    assert cards[0].unattributed_energy == pytest.approx(60.0)
    assert _energy(usages, None) == pytest.approx(40.0)  # the usage's own total started over
    total = _set(cards[0].idle_energy) + _set(cards[0].unattributed_energy)
    assert total + _energy(usages, A) == pytest.approx(300.0)  # pods + idle + unattributed


def test_a_card_without_energy_has_no_unattributed_energy() -> None:
    cards, _ = EnergyLedger().split([_card(GPU0, None, 50.0)], [_use(GPU0, None, 50.0)])
    assert cards[0].unattributed_energy is None


# --- Utilization -----------------------------------------------------------------------


def _region(path: str, *sm: float) -> RegionUsage:
    devices = tuple(
        DeviceUsage(i, f"GPU-{i}", 0, 1, 0, 0, 0, value, stale_memory=0)
        for i, value in enumerate(sm)
    )
    return RegionUsage(Path(path), "v1.2", devices, None, processes=1)


KEY: RegionKey = ("pod", A.pod_uid, "main")


def _pick(
    utilization: Utilization,
    region: RegionUsage,
    usages: Sequence[ContainerUsage],
    owners: frozenset[Owner] = frozenset({A}),
) -> list[tuple[float, str]]:
    picked = utilization.regions({KEY: region}, lambda key: owners, usages)
    return [picked[(KEY, d.index)] for d in region.devices]


def test_a_region_without_utilisation_takes_nvml_s_for_its_container() -> None:
    utilization = Utilization()
    nvml = [_use("GPU-0", A, 30.0), _use("GPU-0", A, 12.0), _use("GPU-0", B, 50.0)]
    nvml.append(_use("GPU-1", A, 7.0))
    got = _pick(utilization, _region("/r", 0.0, 0.0), nvml)
    assert got == [(42.0, "nvml"), (7.0, "nvml")]  # B's processes are another container's
    # processes of no known owner give nothing to take: the region's own 0 stays
    assert _pick(utilization, _region("/r", 0.0, 0.0), nvml, frozenset()) == [
        (0.0, "hami-core"),
        (0.0, "hami-core"),
    ]


def test_once_a_region_reports_utilisation_its_own_is_used_idle_or_not() -> None:
    utilization = Utilization()
    nvml = [_use("GPU-0", A, 30.0)]
    assert _pick(utilization, _region("/r", 0.0), nvml) == [(30.0, "nvml")]
    assert _pick(utilization, _region("/r", 25.0), nvml) == [(25.0, "hami-core")]
    assert _pick(utilization, _region("/r", 0.0), nvml) == [(0.0, "hami-core")]  # idle: its own
    # another file (a new pod) learns afresh; a file not read in a snapshot is forgotten
    assert _pick(utilization, _region("/s", 0.0), nvml) == [(30.0, "nvml")]
    assert _pick(utilization, _region("/r", 0.0), nvml) == [(30.0, "nvml")]


def test_utilisation_above_100_is_clamped_and_counted() -> None:
    utilization = Utilization()
    assert _pick(utilization, _region("/r", 180.0), []) == [(100.0, "hami-core")]
    assert _pick(utilization, _region("/s", 0.0), [_use("GPU-0", A, 130.0)]) == [(100.0, "nvml")]
    clamped = utilization.usages([_use(GPU0, A, 250.0), _use(GPU0, B, 99.0), _use(GPU0, B, None)])
    assert [u.utilization for u in clamped] == [100.0, 99.0, None]
    assert utilization.clamped == 3
