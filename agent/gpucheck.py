"""``python -m agent.gpucheck``: one real NVML sample, printed as JSON, for a first run on a GPU node.

Why it exists: CI has no GPU, so the sampler's real-driver path is only
exercised here. It prints what the agent would push (the cards), the error
counts and last errors per field, the driver version, what two samples cost,
and, for each card, the v1 and v2 memory readings side by side so the choice
of v1 in :mod:`agent.nvml` can be checked against this driver. It also prints
what runs on the cards (:meth:`~agent.nvml.NvmlSampler.processes`), each card's
MIG instances, energy, ECC counts and decoded clocks-event reasons, and the
XIDs seen during a short event watch (``--events-seconds N``, default 3; 0
skips it). Exit status 0 when NVML answered, 1 (with the reason on stderr) when
it is unavailable.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from agent.nvml import NvmlSampler, describe
from agent.xid import XidWatcher
from core.clockevents import active


def _memory_v1_v2(nvml: Any, index: int) -> dict[str, Any]:
    """Both memory calls for one card; any failure is reported as text, never raised."""
    out: dict[str, Any] = {}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        v1 = nvml.nvmlDeviceGetMemoryInfo(handle)
        out["v1"] = {"total": int(v1.total), "free": int(v1.free), "used": int(v1.used)}
    except nvml.NVMLError as exc:
        out["v1"] = describe(exc)
        return out
    try:
        v2 = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        out["v2"] = {
            "total": int(v2.total),
            "reserved": int(v2.reserved),
            "free": int(v2.free),
            "used": int(v2.used),
        }
    except (nvml.NVMLError, TypeError, AttributeError) as exc:
        out["v2"] = describe(exc)
    return out


def _watch_events(nvml: Any, seconds: float) -> dict[str, Any]:
    """Run an :class:`XidWatcher` for ``seconds``; what it registered, saw and failed at."""
    watcher = XidWatcher(nvml)
    stop = threading.Event()
    thread = threading.Thread(
        target=watcher.run, args=(stop, 200), name="gpucheck-xid", daemon=True
    )
    thread.start()
    # Waits on events, never a sleep: a watcher that gives up early (no events
    # in this driver) sets ready with a reason and ends the watch at once.
    deadline = time.monotonic() + seconds
    watcher.ready.wait(seconds)
    if watcher.reason is None:
        stop.wait(max(0.0, deadline - time.monotonic()))
    stop.set()
    thread.join(timeout=5.0)
    return {
        "seconds": seconds,
        "watched": watcher.watched,
        "xid_errors": watcher.counts(),
        "errors": dict(watcher.errors),
        "last_error": watcher.last_error,
        "reason": watcher.reason,
    }


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m agent.gpucheck", description=__doc__)
    parser.add_argument(
        "--events-seconds",
        type=float,
        default=3.0,
        metavar="N",
        help="how long to watch for XID events (default 3; 0 skips the watch)",
    )
    return parser.parse_args(argv)


def main(nvml: Any = None, argv: Sequence[str] | None = None) -> int:
    """Run the check; ``nvml`` is for tests (a :class:`simulator.nvml.SimulatedNvml`).

    ``argv``: the command-line arguments; None means the defaults (not
    ``sys.argv``, so a test calling ``main()`` does not parse pytest's).
    """
    args = _arguments([] if argv is None else argv)
    sampler = NvmlSampler(nvml)
    if not sampler.start():
        print(sampler.reason, file=sys.stderr)
        return 1
    try:
        driver = sampler.driver_version()
        t0 = time.perf_counter()
        cards = sampler.sample()
        t1 = time.perf_counter()
        sampler.sample()
        t2 = time.perf_counter()
        processes = sampler.processes()
        t3 = time.perf_counter()
        events = (
            _watch_events(sampler.module, args.events_seconds) if args.events_seconds > 0 else None
        )
        report = {
            "driver_version": driver,
            "cards": [card.model_dump() for card in cards],
            "energy_j": {card.index: card.energy for card in cards},
            "ecc": {
                card.index: {"corrected": card.ecc_corrected, "uncorrected": card.ecc_uncorrected}
                for card in cards
            },
            "clock_events": {
                card.index: None
                if card.clock_events is None
                else {"bitmask": card.clock_events, "reasons": dict(active(card.clock_events))}
                for card in cards
            },
            "mig": {card.index: [mig.model_dump() for mig in card.mig] for card in cards},
            "processes": [asdict(process) for process in processes],
            "events": events,
            "errors": dict(sampler.errors),
            "last_error": sampler.last_error,
            "sample_ms": {
                "first": (t1 - t0) * 1e3,
                "second": (t2 - t1) * 1e3,
                "processes": (t3 - t2) * 1e3,
            },
            "memory_v1_v2": {
                card.index: _memory_v1_v2(sampler.module, card.index) for card in cards
            },
        }
        print(json.dumps(report, indent=2, default=str))
    finally:
        sampler.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(argv=sys.argv[1:]))
