"""``python -m agent.gpucheck``: one real NVML sample, printed as JSON, for a first run on a GPU node.

Why it exists: CI has no GPU, so the sampler's real-driver path is only
exercised here. It prints what the agent would push (the cards), the error
counts and last errors per field, the driver version, what two samples cost,
and, for each card, the v1 and v2 memory readings side by side so the choice
of v1 in :mod:`agent.nvml` can be checked against this driver. Exit status 0
when NVML answered, 1 (with the reason on stderr) when it is unavailable.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from agent.nvml import NvmlSampler, describe


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


def main(nvml: Any = None) -> int:
    """Run the check; ``nvml`` is for tests (a :class:`simulator.nvml.SimulatedNvml`)."""
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
        report = {
            "driver_version": driver,
            "cards": [card.model_dump() for card in cards],
            "errors": dict(sampler.errors),
            "last_error": sampler.last_error,
            "sample_ms": {"first": (t1 - t0) * 1e3, "second": (t2 - t1) * 1e3},
            "memory_v1_v2": {
                card.index: _memory_v1_v2(sampler.module, card.index) for card in cards
            },
        }
        print(json.dumps(report, indent=2, default=str))
    finally:
        sampler.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
