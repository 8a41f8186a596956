"""What sources hand to the store: whole batches of canonical series, and who sent them.

Every source (a scrape target, an agent's push) produces one :class:`Batch` per
reading through :mod:`collector.normalise.bodies`; the store keeps the latest per
:class:`Source`. A batch means the same whatever its source.
"""

from __future__ import annotations

from array import array
from collections.abc import ItemsView, Iterator, Mapping, ValuesView
from dataclasses import dataclass, field

from collector.normalise import schema
from collector.normalise.schema import SourceKind


@dataclass(frozen=True, slots=True)
class Source:
    """Where batches come from; ``id`` is stable for its life (a pod UID, an agent).

    ``name`` is how people know it (``namespace/pod``, ``host:port``). A lower
    ``priority`` wins when two sources of one node offer the same series.
    """

    id: str
    name: str
    node: str
    kind: SourceKind
    priority: int


@dataclass(frozen=True, slots=True)
class Batch:
    """One source's latest reading, normalised; immutable once made.

    ``series`` maps a series key to its value; ``families`` holds the type and
    HELP of the families outside the schema. ``samples`` counts what the source
    offered (exposition lines, or a push's readings), ``dropped`` what was left
    out on purpose, ``duplicates`` what repeated a series of the same batch.

    A series key is the canonical identity of a series, name and labels, as
    bytes: ``name{a="b",...}`` with labels sorted and escaped, without ``node``
    (:func:`collector.normalise.labelsets.series_key` makes it,
    :func:`~collector.normalise.labelsets.key_labels` decodes it). Bytes hash and
    compare in C and are most of an output line already; a typed key (a
    NamedTuple of name and label pairs) measured 2.1 times the cost of building
    and reading a 249k-series batch and about 800 bytes more per series, so the
    typed form is made only where a reader needs the labels, once per series.

    A normaliser hands a :class:`Series`; other sources may hand a dict.
    """

    series: Mapping[bytes, float]
    samples: int = 0
    duplicates: int = 0
    conflicts: int = 0
    dropped: int = 0
    families: Mapping[str, schema.Family] = field(default_factory=dict)


class Series(Mapping[bytes, float]):
    """A batch's series as two arrays, keys and packed values: 16 bytes a series, not ~90.

    A dict of float objects costs a hash-table slot and a float object per
    series, for every target's latest batch; most readers only iterate. The
    keys tuple is shared by the batches of one layout (see
    :mod:`collector.normalise.layout`). The index (key to position) is built only when a
    reader asks for a single series, and goes with this batch when the next
    one replaces it.
    """

    __slots__ = ("_index", "_keys", "_values")

    def __init__(self, keys: tuple[bytes, ...], values: array[float]) -> None:
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        self._keys = keys
        self._values = values
        self._index: dict[bytes, int] | None = None

    def _position(self) -> dict[bytes, int]:
        if self._index is None:
            self._index = {key: i for i, key in enumerate(self._keys)}
        return self._index

    def __getitem__(self, key: bytes) -> float:
        return self._values[self._position()[key]]

    def __contains__(self, key: object) -> bool:
        return key in self._position()

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Series({dict(self.items())!r})"

    def values(self) -> _Values:
        """The values, iterated without the index."""
        return _Values(self)

    def items(self) -> _Items:
        """The pairs, iterated without the index."""
        return _Items(self)

    def packed(self) -> tuple[tuple[bytes, ...], array[float]]:
        """The keys and values, in the same order."""
        return self._keys, self._values


class _Values(ValuesView[float]):
    _mapping: Series

    def __iter__(self) -> Iterator[float]:
        return iter(self._mapping.packed()[1])


class _Items(ItemsView[bytes, float]):
    _mapping: Series

    def __iter__(self) -> Iterator[tuple[bytes, float]]:
        return zip(*self._mapping.packed(), strict=True)
