"""Fuzz targets: each takes one input's bytes and fails only on a crash.

Each answers whether the input was accepted. A crash is any exception but the target's documented refusals (``ParseError``
for a body, ``RegionError`` for a region file, ``QueryError`` for a query, a 4xx
envelope for a request), or a 5xx answer. Each target also offers seeds: valid
inputs of every shape it reads, which the fuzzer mutates from.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qsl

import aiohttp
from aiohttp import web
from multidict import MultiDict

from agent.hamicore import RegionError, read_region
from collector.app import build_app
from collector.normalise.bodies import Normaliser
from collector.normalise.registration import GFD_MEMORY, HAMI_REGISTER, VOLCANO_REGISTER, capacity
from collector.promql.params import parse_duration, parse_time
from collector.promql.query import prepare_instant
from collector.promql.values import QueryError
from collector.settings import CollectorSettings
from collector.sources.files import load_targets
from collector.tsdb.history import History
from collector.views.models import ApiError
from collector.web.rest.endpoints import LIST_CONTAINERS, LIST_NODES, Endpoint, list_query
from fuzz.tenant_promql import seeds as _tenant_promql_seeds
from fuzz.tenant_promql import tenant_promql
from simulator.cluster import build_cluster
from simulator.families import MONITORS
from simulator.node_objects import node_object
from simulator.regions import ProcSlot, RegionSpec, pack

BODY_LIMIT = 1 << 20
"""Most bytes a fuzzed gzip body may inflate to, as the scrape's body limit bounds it."""


class Crash(AssertionError):
    """A target answered in a way no input may make it answer."""


def exposition(data: bytes) -> bool:
    """Our text 0.0.4 / OpenMetrics parser and the normaliser; the first byte picks the form."""
    mode, body = (data[0] % 3, data[1:]) if data else (0, b"")
    if mode == 2:  # a gzip body, inflated within the body limit as the scrape does
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            body = inflate.decompress(body, BODY_LIMIT)
        except zlib.error:
            return False
    try:
        Normaliser("fuzz").normalise(body, openmetrics=mode == 1)
    except ValueError:  # ParseError: the documented refusal
        return False
    return True


def _exposition_seeds() -> list[bytes]:
    nodes = build_cluster(len(MONITORS), seed=1, cards=1, allocations_per_node=2, start_time=1e9)
    bodies = [node.exposition(1e9) for node in nodes]
    return [
        *(b"\x00" + body for body in bodies),
        *(b"\x01" + body + b"# EOF\n" for body in bodies[:2]),
        *(b"\x02" + gzip.compress(body) for body in bodies[:2]),
    ]


def region(data: bytes) -> bool:
    """HAMi-core's region reader over a file holding ``data``."""
    with tempfile.NamedTemporaryFile(prefix="fuzz-region-") as file:
        file.write(data)
        file.flush()
        try:
            read_region(file.name)
        except RegionError:
            return False
    return True


def _region_seeds() -> list[bytes]:
    uuid = "GPU-00000000-1111-2222-3333-444444444444"
    procs = [ProcSlot(pid=7, hostpid=70, used=[(1, 2, 3, 0, 6)], device_util=[(0, 0, 50)])]
    return [
        pack(RegionSpec(layout=layout, uuids=[uuid], limits=[1 << 30], procs=procs))
        for layout in ("v0", "v1.1", "v1.2")
    ]


def targets_file(data: bytes) -> bool:
    """The file_sd reader; the first byte picks JSON or YAML."""
    suffix, body = (".json" if data[:1] == b"{" or data[:1] == b"[" else ".yaml"), data
    fd, name = tempfile.mkstemp(prefix="fuzz-targets-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(body)
        load_targets(Path(name))
    except ValueError:
        return False
    finally:
        os.unlink(name)
    return True


def _targets_seeds() -> list[bytes]:
    group = {"targets": ["10.0.0.1:9394"], "labels": {"node": "gpu-1", "flavour": "volcano"}}
    return [
        json.dumps([group]).encode(),
        b"- targets: ['10.0.0.2:9394']\n  labels: {node: gpu-2, __scheme__: https}\n",
    ]


_RECORDS = (HAMI_REGISTER[0], HAMI_REGISTER[1], VOLCANO_REGISTER)


def node_record(data: bytes) -> bool:
    """A Node's GPU record: the first byte picks the annotation (HAMi's, its old name,
    Volcano's) or GPU Feature Discovery's memory label; accepted when read whole."""
    pick, text = (data[0] % 4, data[1:].decode("utf-8", "replace")) if data else (0, "")
    meta: dict[str, object] = {"name": "fuzz", "annotations": {}, "labels": {}}
    if pick < len(_RECORDS):
        meta["annotations"] = {_RECORDS[pick]: text}
    else:
        meta["labels"] = {GFD_MEMORY: text}
    allocatable = {"nvidia.com/gpu": "8", "volcano.sh/vgpu-number": "8"}
    found = capacity({"metadata": meta, "status": {"allocatable": allocatable}})
    return found is not None and not found.problems


def _node_record_seeds() -> list[bytes]:
    nodes = build_cluster(len(MONITORS), seed=1, cards=2, allocations_per_node=1, start_time=1e9)
    seeds = []
    for node in nodes:
        meta = node_object(node)["metadata"]
        for pick, key in enumerate(_RECORDS):
            if key in meta["annotations"]:
                seeds.append(bytes([pick]) + meta["annotations"][key].encode())
        if GFD_MEMORY in meta["labels"]:
            seeds.append(b"\x03" + meta["labels"][GFD_MEMORY].encode())
    return seeds


_HISTORY = History(clock=lambda: 1_000.0)
_HISTORY.record("gpu-1", {b'up{job="a"}': 1.0, b'hami_memory_used{device="0"}': 5.0}, 990.0)


def promql(data: bytes) -> bool:
    """The PromQL front end: parse, plan and run over a tiny history, within limits."""
    text = data.decode("utf-8", "replace")
    try:
        prepare_instant(text, 1_000.0, _HISTORY, 300.0, 1.0, 100_000).run()
    except QueryError:
        return False
    return True


def _promql_seeds() -> list[bytes]:
    return [
        b"up",
        b'sum by (node) (rate(hami_memory_used{device=~"0|1"}[5m]))',
        b"topk(3, sum(rate(x_total[1m])) by (le)) > bool 1",
        b"max_over_time(up[10m:1m] offset 1m) / on(node) group_left count(up)",
        b'label_replace(up, "a", "$1", "job", "(.*)") or vector(1)',
    ]


def rest_params(data: bytes) -> bool:
    """The REST API's and the Prometheus API's parameter checks, over one query string."""
    pairs = parse_qsl(data.decode("utf-8", "replace"), keep_blank_values=True)
    timing = [(name, value) for name, value in pairs if name in _PROMETHEUS_PARAMS]
    query: MultiDict[str] = MultiDict(p for p in pairs if p[0] not in _PROMETHEUS_PARAMS)
    accepted = [_list_accepts(query, endpoint) for endpoint in (LIST_NODES, LIST_CONTAINERS)]
    for name, value in timing:
        try:
            if name in ("step", "timeout"):
                parse_duration(value, name)
            else:
                parse_time(value, name)
        except QueryError:
            return False
    return any(accepted)


_PROMETHEUS_PARAMS = frozenset({"time", "start", "end", "step", "timeout"})


def _list_accepts(query: MultiDict[str], endpoint: Endpoint) -> bool:
    try:
        list_query(query, endpoint)
    except ApiError as exc:
        if exc.status != 400:
            raise Crash(f"status {exc.status}") from None
        return False
    return True


def _rest_seeds() -> list[bytes]:
    return [
        b"sort=-memory_used_bytes&limit=5&namespace=a",
        b"node=gpu-1&sort=node&limit=1",
        b"time=1700000000.5&step=1m30s&timeout=2s",
        b"start=2026-01-01T00:00:00Z&end=2026-01-02T00:00:00.5Z",
    ]


class Push:
    """``POST /api/v1/push`` of a running collector; the first byte picks encoding and headers."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._url = ""
        self._loop.run_until_complete(self._start())

    async def _start(self) -> None:
        settings = CollectorSettings(
            listen="127.0.0.1:0", kubernetes=False, push_auth="none", push_body_limit=BODY_LIMIT
        )
        self._runner = web.AppRunner(build_app(settings), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self._url = f"http://{host}:{port}/api/v1/push"
        self._session = aiohttp.ClientSession()

    def __call__(self, data: bytes) -> bool:
        return self._loop.run_until_complete(self._post(data))

    async def _post(self, data: bytes) -> bool:
        assert self._session is not None
        flags, body = (data[0], data[1:]) if data else (0, b"")
        headers = {"Content-Type": "application/json"}
        if flags & 1:
            body = gzip.compress(body, compresslevel=1)
        if flags & 3:
            headers["Content-Encoding"] = "gzip"
        if flags & 4:
            headers["Content-Type"] = "text/plain; charset=latin-1"
        async with self._session.post(self._url, data=body, headers=headers) as resp:
            answer = await resp.read()
            if resp.status >= 500:
                raise Crash(f"{resp.status}: {answer[:200]!r}")
            if resp.status >= 400 and json.loads(answer).get("status") != "error":
                raise Crash(f"no error envelope: {answer[:200]!r}")
            return resp.status == 204

    def close(self) -> None:
        """Stop the collector."""

        async def stop() -> None:
            if self._session is not None:
                await self._session.close()
            if self._runner is not None:
                await self._runner.cleanup()

        self._loop.run_until_complete(stop())
        self._loop.close()


def _push_seeds() -> list[bytes]:
    card = {"index": 0, "uuid": "GPU-1", "name": "A100", "memory_used": 1, "utilization": 5.0}
    region = {
        "pod_uid": "u1",
        "container": "c",
        "devices": [{"index": 0, "uuid": "GPU-1", "memory_used": 1, "memory_limit": 2}],
        "last_kernel_time": 5,
    }
    payload = {
        "node": "gpu-1",
        "agent": "a1",
        "sequence": 1,
        "time": 1.7e9,
        "nvml": True,
        "cards": [card],
        "regions": [region],
    }
    body = json.dumps(payload).encode()
    viewed = payload | {
        "cards": [
            card
            | {
                "energy": 10.0,
                "idle_energy": 1.0,
                "ecc_corrected": 2,
                "ecc_uncorrected": 0,
                "clock_events": 68,
                "xid_errors": {"79": 1},
                "mig": [{"uuid": "MIG-1", "gpu_instance_id": 1, "compute_instance_id": 0}],
            }
        ],
        "processes": [
            {"device": "GPU-1", "pod_uid": "u1", "container_id": "c1", "processes": 1,
             "memory_used": 5, "utilization": 3.0, "energy": 2.0},
            {"device": "MIG-1", "processes": 1, "memory_used": 7},
        ],
        "assignments": [
            {"namespace": "n", "pod": "p", "container": "c", "resource": "nvidia.com/gpu",
             "devices": ["GPU-1"]}
        ],
    }  # fmt: skip
    return [b"\x00" + body, b"\x01" + body, b"\x00" + json.dumps(viewed).encode()]


SEEDS: dict[str, Callable[[], list[bytes]]] = {
    "exposition": _exposition_seeds,
    "region": _region_seeds,
    "targets_file": _targets_seeds,
    "promql": _promql_seeds,
    "tenant_promql": _tenant_promql_seeds,
    "rest_params": _rest_seeds,
    "push": _push_seeds,
    "node_record": _node_record_seeds,
}
"""Every target by name, with its seeds."""


def target(name: str) -> tuple[Callable[[bytes], bool], Callable[[], None]]:
    """The target ``name`` and what stops it (the push target runs a collector)."""
    if name == "push":
        push = Push()
        return push, push.close
    plain: dict[str, Callable[[bytes], bool]] = {
        "exposition": exposition,
        "region": region,
        "targets_file": targets_file,
        "promql": promql,
        "tenant_promql": tenant_promql,
        "rest_params": rest_params,
        "node_record": node_record,
    }
    return plain[name], lambda: None
