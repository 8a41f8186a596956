"""Filling the store for the query bench: renderer processes, normalise + put in this process."""

from __future__ import annotations

import itertools
import struct
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from bench.kit.cluster import ROOT
from bench.query.setup import (
    HELPER,
    MONITORS,
    RENDERERS,
    ROUNDS,
    SEED,
    STEP,
    TRACE_NODES,
    TRACE_ROUNDS,
)
from collector.normalise.batch import Source
from collector.normalise.bodies import Normaliser
from collector.normalise.schema import SourceKind
from collector.store.latest import Store
from simulator.cluster import build_cluster
from testing.processes import stop

GOLDEN = (5**0.5 - 1) / 2
"""Node ``i``'s offset is the fraction of ``i * GOLDEN`` times the step: evenly spread."""


def render(nodes: int, first: int, last: int, start: float, rounds: int, step: float) -> None:
    """Render nodes ``first..last-1`` of the cluster for ``rounds`` times to stdout, framed.

    Each round: ``<I`` count, ``count`` x ``<I`` body lengths, then the bodies.
    """
    cluster = build_cluster(nodes, seed=SEED, flavours=MONITORS, start_time=start)[first:last]
    out = sys.stdout.buffer
    try:
        for k in range(rounds):
            t = start + k * step
            bodies = []
            for node in cluster:
                node.step(t)
                bodies.append(node.exposition(t))
            head = struct.pack(f"<{len(bodies) + 1}I", len(bodies), *map(len, bodies))
            out.write(head + b"".join(bodies))
            out.flush()
    except BrokenPipeError:
        pass


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise RuntimeError("a renderer process ended early")
    return data


def _read_round(stream: IO[bytes]) -> list[bytes]:
    (count,) = struct.unpack("<I", _read_exact(stream, 4))
    sizes = struct.unpack(f"<{count}I", _read_exact(stream, 4 * count))
    data = _read_exact(stream, sum(sizes))
    out = []
    at = 0
    for size in sizes:
        out.append(data[at : at + size])
        at += size
    return out


@dataclass
class Fill:
    """What filling the store took."""

    wall_s: float = 0.0
    first_round_s: float = 0.0
    normalise_s: float = 0.0
    put_s: float = 0.0
    waited_s: float = 0.0
    cpu_s: float = 0.0
    rounds: int = 0
    samples: int = 0
    traced: list[list[Mapping[bytes, float]]] = field(default_factory=list)
    """The first :data:`TRACE_NODES` nodes' series of every round."""

    def figures(self) -> dict[str, Any]:
        """The fill as plain figures."""
        return {
            "wall_s": self.wall_s,
            "first_round_s": self.first_round_s,
            "normalise_s": self.normalise_s,
            "put_s": self.put_s,
            "collector_s": self.normalise_s + self.put_s,
            "collector_s_per_round_after_first": (
                (self.normalise_s + self.put_s - self.first_round_s) / max(1, self.rounds - 1)
            ),
            "waited_for_renderers_s": self.waited_s,
            "process_cpu_s": self.cpu_s,
            "rounds": self.rounds,
            "samples_put": self.samples,
        }


def fill(
    store: Store,
    nodes: int,
    start: float,
    step: float = STEP,
    rounds: int = ROUNDS,
    traced: int = TRACE_NODES,
) -> Fill:
    """Put ``rounds`` rounds of every node into ``store``, sampled at ``start + k * step``
    less each node's own offset.

    Why offsets: a collector scrapes its targets spread over the interval, as
    Prometheus does, so no two nodes share their sample times; reads must not
    be measured on the one time axis all nodes would share without them. The
    offsets are whole milliseconds in ``(-step, 0]``, so no point lies after
    the last round's time. The batches of the first ``traced`` nodes in the first :data:`TRACE_ROUNDS`
    rounds are kept for the traced history.
    """
    names = [n.name for n in build_cluster(nodes, seed=SEED, flavours=MONITORS, start_time=start)]
    sources = [Source(f"uid-{n}", f"monitors/{n}:9394", n, SourceKind.HAMI, 1) for n in names]
    normalisers = [Normaliser(n) for n in names]
    cuts = [nodes * i // RENDERERS for i in range(RENDERERS + 1)]
    renderers = [
        subprocess.Popen(
            [*HELPER, "render", str(nodes), str(a), str(b), repr(start), str(rounds), repr(step)],
            stdout=subprocess.PIPE,
            cwd=ROOT,
        )
        for a, b in itertools.pairwise(cuts)
        if b > a
    ]
    # spread as evenly as a golden-ratio sequence spreads, whatever the node count
    offsets = [-round((i * GOLDEN % 1.0) * step * 1000) / 1000 for i in range(nodes)]
    out = Fill()
    cpu0 = time.process_time()
    began = time.perf_counter()
    put = store.put
    try:
        for k in range(rounds):
            t = start + k * step
            t0 = time.perf_counter()
            bodies: list[bytes] = []
            for r in renderers:
                assert r.stdout is not None
                bodies.extend(_read_round(r.stdout))
            t1 = time.perf_counter()
            batches = [n.normalise(b) for n, b in zip(normalisers, bodies, strict=True)]
            t2 = time.perf_counter()
            at = time.monotonic()
            for source, batch, offset in zip(sources, batches, offsets, strict=True):
                put(source, batch, at, sampled=t + offset)
            t3 = time.perf_counter()
            out.waited_s += t1 - t0
            out.normalise_s += t2 - t1
            out.put_s += t3 - t2
            out.samples += sum(b.samples for b in batches)
            if k < TRACE_ROUNDS and traced:
                out.traced.append([b.series for b in batches[:traced]])
            if k == 0:
                out.first_round_s = t3 - t1
            out.rounds += 1
    finally:
        for r in renderers:
            stop(r)
    out.wall_s = time.perf_counter() - began
    out.cpu_s = time.process_time() - cpu0
    return out
