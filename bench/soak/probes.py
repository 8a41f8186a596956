"""What the soak asks the collector besides ``/metrics``: pushes to refuse, a node's history."""

from __future__ import annotations

import gzip
import time

import aiohttp

from bench.soak.checks import REFUSED_PREFIX
from core.payload import Card, Payload

_TIMEOUT = aiohttp.ClientTimeout(total=10)


def refused_payload() -> bytes:
    """A valid payload for a node that does not exist: whatever shows of it was accepted."""
    payload = Payload(
        node=REFUSED_PREFIX + "x",
        agent="soak",
        sequence=1,
        time=time.time(),
        nvml=True,
        cards=[Card(index=0, uuid="GPU-refused", utilization=77.0)],
    )
    return payload.model_dump_json().encode()


async def refused_pushes(
    session: aiohttp.ClientSession, base: str, token: str, big: bool
) -> list[tuple[str, int]]:
    """Send pushes that must be refused; ``(kind, HTTP status)`` of each (0: no answer)."""
    payload = refused_payload()
    good = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    cases = [
        ("wrong token", payload, {**good, "Authorization": "Bearer nope"}),
        ("invalid payload", payload.replace(b'"sequence":1', b'"sequence":-1'), good),
        ("truncated gzip", gzip.compress(payload)[:20], {**good, "Content-Encoding": "gzip"}),
    ]
    if big:
        cases.append(("too large", b" " * (5 << 20), good))
    answers = []
    for kind, body, headers in cases:
        try:
            url = base + "/api/v1/push"
            async with session.post(url, data=body, headers=headers, timeout=_TIMEOUT) as r:
                status = r.status
        except (aiohttp.ClientError, TimeoutError):
            status = 0
        answers.append((kind, status))
    return answers


async def history_stamps(
    session: aiohttp.ClientSession, base: str, node: str, window: float, at: float
) -> list[float]:
    """Timestamps of one pushed series of ``node`` in the ``window`` seconds before ``at``.

    Read as a range selector through ``/prometheus``, as Grafana or promtool would.
    """
    query = f'hami_host_gpu_utilization_ratio{{node="{node}",device_index="0"}}[{int(window)}s]'
    params = {"query": query, "time": f"{at:.3f}"}
    url = base + "/prometheus/api/v1/query"
    async with session.get(url, params=params, timeout=_TIMEOUT) as r:
        body = await r.json()
    result = body.get("data", {}).get("result", [])
    return [float(t) for t, _ in result[0]["values"]] if result else []
