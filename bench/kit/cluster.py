"""The simulated cluster every benchmark uses, with the scrape stage's per-target state.

``build_cluster(1000, seed=1, ...)`` gives ~249 series per node (~248k samples
per scrape round). A :class:`Cluster` also holds what the scrape stage keeps per
target (one :class:`Normaliser` and one :class:`Source` per node) and a store
fed by them, so the page and serving benchmarks can reuse warm batches instead
of ingesting the cluster again. Time is simulated: pass ``k`` is the monitors'
state at ``START + k * STEP``, so every run sees the same bodies.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from collector.normalise.batch import Batch, Source
from collector.normalise.bodies import Normaliser
from collector.normalise.schema import SourceKind
from collector.store.latest import Store
from simulator.cluster import build_cluster
from simulator.node import SimulatedNode
from simulator.run import collector_flavour

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: where ``python -m bench...`` subprocesses run."""
NODES = 1000
SEED = 1
START = 1_700_000_000.0
"""Simulated Unix time of pass 0 (fixed, so bodies are the same in every run)."""
STEP = 15.0
"""Seconds of simulated time between two passes: the default scrape interval."""
HAMI: tuple[str, ...] = ("hami",)
MIXED: tuple[str, ...] = ("hami", "hami-legacy", "volcano", "kai")
PRIORITY = {SourceKind.AGENT: 0, SourceKind.HAMI: 1, SourceKind.KAI: 2, SourceKind.VOLCANO: 3}


def kind_of(simulated: str) -> SourceKind:
    """The source kind of a simulated monitor."""
    return SourceKind(collector_flavour(simulated))


class Cluster:
    """Simulated nodes plus one Normaliser and Source per node, and a store they feed."""

    def __init__(self, flavours: Sequence[str], nodes: int = NODES) -> None:
        self.flavours = tuple(flavours)
        self.nodes: list[SimulatedNode] = build_cluster(
            nodes, seed=SEED, flavours=self.flavours, start_time=START
        )
        self.sources = [
            Source(
                f"uid-{n.name}",
                f"monitors/{n.name}:9394",
                n.name,
                kind_of(n.flavour),
                PRIORITY[kind_of(n.flavour)],
            )
            for n in self.nodes
        ]
        self.normalisers = [Normaliser(n.name) for n in self.nodes]
        self.store = Store(stale_after=1e9)
        self.tick = -1

    @property
    def now(self) -> float:
        """Simulated time of the current pass."""
        return START + self.tick * STEP

    def advance(self) -> list[bytes]:
        """Step every node to the next pass and render its body (slow: keep out of timings)."""
        self.tick += 1
        now = self.now
        for node in self.nodes:
            node.step(now)
        return [node.exposition(now) for node in self.nodes]

    def churns(self) -> bool:
        """Whether the current pass crossed a churn point (some pods replaced: new series)."""
        period = SimulatedNode.CHURN_PERIOD_S
        return self.tick > 0 and (self.now // period) != ((self.now - STEP) // period)

    def ingest(self, bodies: Sequence[bytes], first: int = 0) -> None:
        """Normalise ``bodies`` (nodes ``first``...) and put each batch into the store."""
        put = self.store.put
        at = self.now
        for source, normaliser, body in zip(
            self.sources[first:], self.normalisers[first:], bodies, strict=False
        ):
            put(source, normaliser.normalise(body), at)

    def held(self) -> list[tuple[Source, Batch]]:
        """Every node's latest batch, to fill another store without ingesting again."""
        out: list[tuple[Source, Batch]] = []
        for node in self.store.nodes():
            view = self.store.view(node)
            if view is not None:
                out.extend((h.source, h.batch) for h in view.sources)
        return out

    def samples(self, first: int = 0, last: int | None = None) -> int:
        """Samples in the latest batches of nodes ``first`` to ``last`` (exclusive)."""
        held = self.held()[first:last]
        return sum(batch.samples for _, batch in held)

    def live_series(self) -> int:
        """Series the store serves, all nodes."""
        total = 0
        for node in self.store.nodes():
            view = self.store.view(node)
            total += len(view.series) if view is not None else 0
        return total


@functools.cache
def cluster(flavours: tuple[str, ...]) -> Cluster:
    """The shared cluster of ``flavours`` (built once per run: it takes seconds)."""
    return Cluster(flavours)


def warm(flavours: tuple[str, ...]) -> Cluster:
    """The shared cluster, ingested at least once (its store full, its caches warm)."""
    c = cluster(flavours)
    if c.tick < 0:
        c.ingest(c.advance())
    return c
