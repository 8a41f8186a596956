"""NVML's clocks-event reasons: the bits of ``nvmlDeviceGetCurrentClocksEventReasons``.

Why here and not in the agent: the agent pushes the raw bitmask
(:attr:`core.payload.Card.clock_events`) and the collector decodes it into one
series per reason; the collector must not import the agent, so the table lives
in :mod:`core`, which both sides share.

The values are NVML's C ABI (``nvmlClocksEventReason*`` in nvml.h, identical to
the older ``nvmlClocksThrottleReason*``); they are spelt out rather than read
from pynvml so the collector does not need the binding installed.
"""

from __future__ import annotations

from typing import Final

#: (bit, reason) for every documented reason, in bit order. ``gpu_idle``: nothing
#: runs, clocks are down on purpose; ``applications_clocks_setting``: clocks are
#: held by ``nvidia-smi -ac``; ``sw_power_cap``: the power limit holds clocks
#: down; ``hw_slowdown``: a hardware slowdown (thermal or power brake) is
#: active; ``sync_boost``: clocks follow a sync-boost group; ``sw_thermal_slowdown``:
#: the driver cools the card; ``hw_thermal_slowdown``: the card itself does;
#: ``hw_power_brake_slowdown``: an external power brake (the PSU) asserts;
#: ``display_clock_setting``: the display clock holds clocks.
CLOCK_EVENT_REASONS: Final[tuple[tuple[int, str], ...]] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def active(bitmask: int) -> list[tuple[str, int]]:
    """(reason, 1 if its bit is set else 0) for every documented reason, in table order.

    Every reason is listed, set or not, so a series per reason goes back to 0
    when the reason clears instead of going stale; bits NVML adds later (not in
    the table) are ignored rather than guessed at.
    """
    return [(reason, 1 if bitmask & bit else 0) for bit, reason in CLOCK_EVENT_REASONS]
