"""What the pages read of the sources' own state: the scrape loops and the discovery streams.

The status page and the overview show how each source stands (a target's
latest scrapes, a discovery stream's sync and error) without importing the
stage that keeps it: they read it through these structural types, which
:mod:`collector.sources` satisfies without naming them
(:class:`~collector.sources.scrape.ScrapeLoop`,
:class:`~collector.sources.targets.DiscoveryState`). ``collector/app.py``
hands the pages the loops running now; mypy checks there that they fit.

Every member is read-only: a page reads a loop's state, never changes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from collector.normalise.batch import Source


class ScrapeTarget(Protocol):
    """A monitor the collector scrapes: where, for which node, of which flavour."""

    @property
    def url(self) -> str:
        """The address scraped."""

    @property
    def node(self) -> str:
        """The node its series are for."""

    @property
    def flavour(self) -> str:
        """The monitor's flavour (``hami``, ``volcano``, ``kai``)."""

    @property
    def name(self) -> str:
        """What discovery calls it (a pod's name, a targets file's address)."""


class ScrapeHealth(Protocol):
    """What a target's latest scrapes said. Wall-clock times (``time.time()``)."""

    @property
    def scrapes(self) -> int:
        """Scrapes so far (0: never scraped yet)."""

    @property
    def failing(self) -> bool:
        """Whether the latest scrape failed."""

    @property
    def last_success(self) -> float | None:
        """When the latest good scrape ended."""

    @property
    def duration(self) -> float | None:
        """Seconds the latest scrape took."""

    @property
    def samples(self) -> int | None:
        """Samples of the latest good scrape."""

    @property
    def error(self) -> str:
        """The latest failure's message, kept after a recovery."""

    @property
    def error_at(self) -> float | None:
        """When the latest failure happened."""

    @property
    def recent(self) -> Iterable[bool]:
        """The latest outcomes, oldest first: True for a good scrape."""


class Scraped(Protocol):
    """One target's scrape loop: the target, its health, and the source its batches name."""

    @property
    def target(self) -> ScrapeTarget:
        """The target scraped."""

    @property
    def health(self) -> ScrapeHealth:
        """Its latest scrapes."""

    @property
    def source(self) -> Source:
        """The source of its batches in the store."""


class DiscoveryStream(Protocol):
    """How one discovery stream stands: a pod watch, a targets file."""

    @property
    def what(self) -> str:
        """The stream, as a person names it."""

    @property
    def synced(self) -> bool:
        """Whether it has listed (or read) once."""

    @property
    def objects(self) -> int:
        """What it holds now (pods, targets)."""

    @property
    def error(self) -> str:
        """Its latest failure; empty once an attempt after it succeeded."""


def target_state(loop: Scraped) -> str:
    """A target's state: ``up`` or ``failing`` as its latest scrape went, ``pending`` before
    the first."""
    health = loop.health
    return "pending" if health.scrapes == 0 else "failing" if health.failing else "up"
