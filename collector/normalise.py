"""Turn what one source offers, exposition bodies or pushed readings, into canonical series.

This is the one stage between every source and the store. A
:class:`Normaliser` belongs to one source and so to one node. For bodies it
maps each *series text* it has seen to what that series becomes in the
canonical schema, so that in steady state a body costs one cache lookup per
line; for readings it keeps the keys of each card and vGPU from one push to
the next, so a push costs a lookup per card and per vGPU.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from collector import schema
from collector.batch import Batch
from collector.exposition.parse import Labels, parse, parse_series, parse_value, split_samples
from collector.exposition.render import series_key


class Derived(NamedTuple):
    """What a series text becomes when it is not one canonical series of the same value.

    ``outputs`` holds ``(key, fixed value)`` pairs; ``None`` means the sample's
    own value. ``conflict`` marks a sample whose ``node`` label named another node.
    """

    outputs: tuple[tuple[bytes, float | None], ...]
    conflict: bool


DROP = Derived((), False)
"""Cache entry of a series that is dropped on purpose (denied or unmappable), and counted."""

Entry = bytes | Derived

_SIZE_NAMES = sorted((*schema.MEMORY_BREAKDOWN, *schema.BREAKDOWN_DROPPED), key=len, reverse=True)
_SIZE_LABEL = re.compile(b"([{,](?:" + "|".join(_SIZE_NAMES).encode() + b')=")([^"]*)"')
"""A byte-size label of the container memory series: its ``[{,]name="`` and its value."""


class Shape(NamedTuple):
    """What a container memory series text becomes, whatever its byte-size label values.

    ``keys[i]`` is the breakdown series of the text's ``kept[i]``-th size
    label (the others, such as ``offset``, have no canonical series).
    """

    key: bytes
    conflict: bool
    kept: tuple[int, ...]
    keys: tuple[bytes, ...]


class Group(NamedTuple):
    """Readings of one card or one container vGPU: ``values[i]`` goes to ``families[i]``.

    ``labels`` identify the card or vGPU (``zone`` is added here); a value
    that could not be read is None and makes no series.
    """

    families: tuple[str, ...]
    labels: Labels
    values: tuple[float | None, ...]


class Readings(NamedTuple):
    """One decoded push: its groups, and how many readings were dropped before (no owner)."""

    groups: tuple[Group, ...]
    dropped: int = 0


@dataclass(frozen=True, slots=True)
class PassThrough:
    """Which families outside the schema are passed through (full-match regexes)."""

    allow: Sequence[str] = (".*",)
    deny: Sequence[str] = ()

    def passes(self, name: str) -> bool:
        """Return whether an unknown family called ``name`` is kept."""
        return any(re.fullmatch(p, name) for p in self.allow) and not any(
            re.fullmatch(p, name) for p in self.deny
        )


class Normaliser:
    """Map one node's bodies, from any flavour, onto the canonical schema."""

    def __init__(self, node: str, passthrough: PassThrough | None = None) -> None:
        self.node = node
        self._passthrough = passthrough or PassThrough()
        self._cache: dict[bytes, Entry] = {}
        self._derived: set[Derived] = set()
        self._shapes: dict[bytes, Shape] = {}
        self._families: Mapping[str, schema.Family] = {}
        self._group_keys: dict[tuple[tuple[str, ...], Labels], tuple[bytes, ...]] = {}
        self._previous_keys: dict[tuple[tuple[str, ...], Labels], tuple[bytes, ...]] = {}

    def normalise(self, body: bytes, openmetrics: bool = False) -> Batch:
        """Normalise one body; raise ``ParseError`` or ``ValueError`` if it is bad."""
        series, values = split_samples(body)
        found = list(map(self._cache.get, series))
        try:
            if None in found:
                self._learn(series, found)
            if b"_" in b"".join(values):
                raise ValueError("a value with a digit separator")
            keys: list[Entry] = found  # type: ignore[assignment]
            floats = list(map(float, values))
        except ValueError:
            keys, floats = self._parse(body, openmetrics)
        return self._assemble(keys, floats)

    def readings(self, readings: Readings) -> Batch:
        """Turn decoded readings into canonical series, named and labelled as a HAMi v2.10 monitor does.

        ``samples`` counts every reading offered, those dropped before included.
        """
        series: dict[bytes, float] = {}
        offered = 0
        for group in readings.groups:
            keys, values = self._keys(group), group.values
            if None in values:  # a reading that could not be read makes no series
                kept = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
                keys, values = tuple(k for k, _ in kept), tuple(v for _, v in kept)
            series.update(zip(keys, map(float, values), strict=True))  # type: ignore[arg-type]  # None filtered above
            offered += len(values)
        self._previous_keys, self._group_keys = self._group_keys, {}
        return Batch(
            series,
            samples=offered + readings.dropped,
            duplicates=offered - len(series),  # each value either adds its key or repeats one
            dropped=readings.dropped,
        )

    def _keys(self, group: Group) -> tuple[bytes, ...]:
        """The keys of a group; a card's or vGPU's label set rarely changes between two pushes."""
        ident = (group.families, group.labels)
        keys = self._group_keys.get(ident) or self._previous_keys.get(ident)
        if keys is None:
            labels = (*group.labels, schema.ZONE)
            keys = tuple(series_key(name, labels) for name in group.families)
        self._group_keys[ident] = keys
        return keys

    def _learn(self, series: tuple[bytes, ...], found: list[Entry | None]) -> None:
        """Parse only the series texts the cache lacks (new pods, sizes in labels).

        Raise ``ValueError`` to send the body to the strict parser: a text that
        does not parse on its own (it names the line), or a family outside the
        schema (its HELP and TYPE come from the comment lines).
        """
        for i, entry in enumerate(found):
            if entry is None:
                found[i] = self._resized(series[i])
        self._prune(set(series))

    def _resized(self, raw: bytes) -> Entry:
        """The entry of a new series text; the parser only for a shape not seen before.

        Old monitors put byte sizes in label values, so their container memory
        texts are new on every scrape; cut out, the sizes leave a text (the
        shape) that stays, and the sizes themselves are parsed here.
        """
        pieces = _SIZE_LABEL.split(raw) if b"\\" not in raw else [raw]
        values, sized = pieces[2::3], pieces[1::3]
        del pieces[2::3]
        template = b"".join(pieces)
        shape = self._shapes.get(template) if values else None
        if shape is not None:
            sizes = map(parse_value, map(values.__getitem__, shape.kept))
            derived = Derived(
                ((shape.key, None), *zip(shape.keys, sizes, strict=True)), shape.conflict
            )
            self._cache[raw] = derived
            self._derived.add(derived)
            return derived
        name, labels = parse_series(raw)
        if not schema.known(name):
            raise ValueError("a family outside the schema")
        entry = self._cached(raw, name, labels)
        memory = schema.LEGACY.get(name, (name,))[0] == schema.CONTAINER_MEMORY
        if memory and values and isinstance(entry, Derived):
            self._learn_shape(template, sized, entry)
        return entry

    def _learn_shape(self, template: bytes, labels: list[bytes], entry: Derived) -> None:
        """Keep the shape of a container memory text whose size labels made ``entry``."""
        kept = tuple(
            i for i, label in enumerate(labels) if label[1:-2].decode() in schema.MEMORY_BREAKDOWN
        )
        keys = tuple(key for key, _ in entry.outputs[1:])
        if len(kept) == len(keys):
            self._shapes[template] = Shape(entry.outputs[0][0], entry.conflict, kept, keys)

    def _parse(self, body: bytes, openmetrics: bool) -> tuple[list[Entry], list[float]]:
        parsed = parse(body, openmetrics)
        self._prune({s.series for s in parsed.samples})
        keys: list[Entry] = []
        families = dict(self._families)
        for sample in parsed.samples:
            entry = self._cache.get(sample.series)
            if entry is None:
                entry = self._cached(sample.series, sample.name, sample.labels)
            keys.append(entry)
            if entry is not DROP and not schema.known(sample.name):
                families[sample.name] = schema.Family(
                    sample.name,
                    parsed.helps.get(sample.name, ""),
                    parsed.types.get(sample.name, "untyped"),
                )
        if families != self._families:
            self._families = families
        return keys, [s.value for s in parsed.samples]

    def _cached(self, raw: bytes, name: str, labels: Labels) -> Entry:
        entry = self._entry(raw, name, labels)
        self._cache[raw] = entry
        if isinstance(entry, Derived):
            self._derived.add(entry)
        return entry

    def _prune(self, live: set[bytes]) -> None:
        """Keep the cache near the live series: texts with changing sizes in labels churn."""
        if len(self._cache) > 2 * len(live) + 64:
            self._cache = {k: v for k, v in self._cache.items() if k in live}
            self._derived = {e for e in self._cache.values() if isinstance(e, Derived)}
        if len(self._shapes) > len(live) + 64:
            self._shapes.clear()  # shapes of pods gone; the live ones are learnt again

    def _assemble(self, keys: list[Entry], values: Iterable[float]) -> Batch:
        out: dict[Entry, float] = dict(zip(keys, values, strict=True))
        duplicates = len(keys) - len(out)
        dropped = conflicts = 0
        if self._derived:
            for entry in self._derived.intersection(out):
                value = out.pop(entry)
                if entry is DROP:
                    dropped = keys.count(DROP)
                    duplicates -= dropped - 1
                    continue
                conflicts += entry.conflict
                for key, fixed in entry.outputs:
                    if fixed is None:
                        duplicates += key in out
                        out[key] = value
                    else:
                        out.setdefault(key, fixed)  # a series of its own beats a label's copy
        return Batch(out, len(keys), duplicates, conflicts, dropped, self._families)  # type: ignore[arg-type]

    def _entry(self, raw: bytes, name: str, labels: Labels) -> Entry:
        if name in schema.UNMAPPABLE_LEGACY:
            return DROP
        legacy = schema.LEGACY.get(name)
        if legacy is not None:
            name, renames = legacy
            labels = tuple((renames.get(k, k), v) for k, v in labels)
        rest = dict(labels)
        conflict = rest.pop("node", self.node) != self.node
        if name not in schema.FAMILIES and not self._passthrough.passes(name):
            return DROP
        breakdown: list[tuple[bytes, float | None]] = []
        if name == schema.CONTAINER_MEMORY:
            sizes = {k: rest.pop(k) for k in list(rest) if k in schema.MEMORY_BREAKDOWN}
            for k in schema.BREAKDOWN_DROPPED:
                rest.pop(k, None)
            for label, size in sizes.items():
                family = schema.MEMORY_BREAKDOWN[label]
                breakdown.append((series_key(family, rest.items()), parse_value(size.encode())))
        key = series_key(name, rest.items())
        if key == raw:
            key = raw  # share the monitor's own text: most canonical series arrive as they are kept
        if breakdown or conflict:
            return Derived(((key, None), *breakdown), conflict)
        return key
