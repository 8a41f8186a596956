"""The scrape target, the one thing discovery hands to the scrape stage."""

from __future__ import annotations

from dataclasses import dataclass

from collector.normalise.schema import Flavour


@dataclass(frozen=True, slots=True)
class Target:
    """An immutable scrape target. Discovery makes them; the scrape manager owns their loops.

    ``key`` identifies the target's data in the store (a pod UID, or the address of
    a static target): two targets that differ in anything are two targets.
    """

    key: str
    url: str
    node: str
    flavour: Flavour
    name: str


@dataclass(frozen=True, slots=True)
class DiscoveryState:
    """How one discovery stream stands: a pod watch, a targets file (for the status page).

    ``objects`` counts what it holds now (pods, targets); ``error`` is its latest
    failure, empty once an attempt after it succeeded.
    """

    what: str
    synced: bool
    objects: int
    error: str
