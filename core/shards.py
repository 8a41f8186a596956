"""Which shard holds a node: one stable hash, the same in the collector and the agent.

The rule is the first 8 bytes of the SHA-256 digest of the node name's UTF-8
bytes, read as a big-endian unsigned integer, modulo the shard count. SHA-256
(not Python's ``hash()``, which is salted per process) gives every program, in
every language, the same answer: ``python3 -c`` or ``sha256sum`` can check it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

HASH_RULE = "int.from_bytes(sha256(node.encode('utf-8')).digest()[:8], 'big') % shard_count"
"""The rule, as the collector states it in ``GET /api/v1/shards``."""


def shard_of(node: str, count: int) -> int:
    """The index (0 .. count-1) of the shard that holds ``node``."""
    if count < 1:
        raise ValueError(f"shard count must be at least 1, not {count}")
    digest = hashlib.sha256(node.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard of ``count``: the nodes whose :func:`shard_of` is ``index``."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index {self.index} is not in 0..{self.count - 1}")

    def holds(self, node: str) -> bool:
        """Whether this shard keeps ``node``'s data (always, with one shard)."""
        return self.count == 1 or shard_of(node, self.count) == self.index


WHOLE = Shard()
"""The one shard of an unsharded collector: it holds every node."""
