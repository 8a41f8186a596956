"""What a total covers, in words: the cards' memory (which cards report used, which a total),
and the vGPUs a namespace's sums count.

A sum of the cards that report a value is no sum of every card: each page writes
its coverage beside it (``used 1.02 TiB of 5.3 TiB on 64 of 68 cards; 4 cards
report no total``), and compares used with total only over the cards that report
both. The figures are the read model's (:class:`~collector.views.models.NodeSummary`
and its ``memory_compared``); only their words are made here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from collector.views.models import NodeSummary
from collector.web.ui import units


@dataclass(frozen=True, slots=True)
class Memory:
    """The cards' memory, each sum with the cards it covers (None where it covers none)."""

    cards: int = 0
    used: int | None = None
    used_cards: int = 0
    total: int | None = None
    total_cards: int = 0
    compared_cards: int = 0
    compared_used: int | None = None
    compared_total: int | None = None
    compared_allocated: int | None = None

    @classmethod
    def of(cls, summaries: Iterable[NodeSummary]) -> Memory:
        """The memory of these nodes' summaries, summed."""
        found = cls()
        for s in summaries:
            found = found + cls.of_node(s)
        return found

    @classmethod
    def of_node(cls, s: NodeSummary) -> Memory:
        """One node's memory, as its REST summary gives it."""
        compared = s.memory_compared
        return cls(
            s.card_count,
            s.memory_used_bytes,
            s.memory_used_cards,
            s.memory_total_bytes,
            s.memory_total_cards,
            0 if compared is None else compared.cards,
            None if compared is None else compared.used_bytes,
            None if compared is None else compared.total_bytes,
            None if compared is None else compared.allocated_bytes,
        )

    def __add__(self, other: Memory) -> Memory:
        return Memory(
            self.cards + other.cards,
            _add(self.used, other.used),
            self.used_cards + other.used_cards,
            _add(self.total, other.total),
            self.total_cards + other.total_cards,
            self.compared_cards + other.compared_cards,
            _add(self.compared_used, other.compared_used),
            _add(self.compared_total, other.compared_total),
            _add(self.compared_allocated, other.compared_allocated),
        )


def _add(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


def plural(count: int, noun: str) -> str:
    """``1 card``, ``68 cards``."""
    return f"{units.count(count)} {noun}{'' if count == 1 else 's'}"


def _report(count: int, noun: str) -> str:
    """``1 card reports``, ``4 cards report``."""
    return f"{plural(count, noun)} report{'s' if count == 1 else ''}"


def share(covered: int, every: int, what: str) -> str:
    """Which of ``every`` vGPUs a sum covers: ``228 of 236 vGPUs with a memory allocation``."""
    if every == 0:
        return "no vGPU yet"
    if covered == every:
        return f"all {plural(every, 'vGPU')} with {what}"
    return f"{units.count(covered)} of {plural(every, 'vGPU')} with {what}"


def _on(covered: int, cards: int) -> str:
    """``the card``, ``all 8 cards``, ``6 of 8 cards``."""
    if covered == cards:
        return "the card" if cards == 1 else f"all {plural(cards, 'card')}"
    return f"{units.count(covered)} of {plural(cards, 'card')}"


def coverage(memory: Memory) -> str:
    """What the cards' memory figures cover: ``used 1.02 TiB of 5.3 TiB on 64 of 68 cards; 4
    cards report no total (they use 38 GiB)``. Used is compared with the total only over
    the cards that report both; what the others use is said apart."""
    n = memory.cards
    if n == 0:
        return "no card reported yet"
    if memory.used_cards == 0:
        head = "no card reports its used memory"
    elif memory.compared_cards == 0:
        head = (
            f"used {units.size(memory.used)} on {_on(memory.used_cards, n)};"
            " no card reports its memory total"
        )
    else:
        head = (
            f"used {units.size(memory.compared_used)} of {units.size(memory.compared_total)}"
            f" on {_on(memory.compared_cards, n)}"
        )
    parts = [head]
    if memory.compared_cards and memory.total_cards < n:
        others = (memory.used or 0) - (memory.compared_used or 0)
        said = f"{_report(n - memory.total_cards, 'card')} no total"
        parts.append(said + (f" (they use {units.size(others)})" if others > 0 else ""))
    if memory.used_cards and memory.used_cards < n:
        parts.append(f"{_report(n - memory.used_cards, 'card')} no used memory")
    return "; ".join(parts)
