"""The layout of a target's last body, so that a body laid out the same costs a few C loops.

A monitor sends the same series in the same order scrape after scrape; only
the values change, and, in Volcano, legacy HAMi and KAI monitors, the byte
sizes in the labels of the container memory series. A :class:`Layout` records
what the normaliser made of one body: which line texts it had, where the sizes
sat, and which output series take which value. A later body matches it when
its line texts are equal (a comparison, not a hash per line) and its memory
lines are equal once their sizes are cut out (one regex split over those lines
together). Its batch is then the values converted in one pass and picked into
place. Anything else (a new pod, a line changed) takes the normaliser's slower
path, which records the new layout.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import compress
from operator import itemgetter
from typing import NamedTuple

from collector.normalise import schema
from collector.normalise.batch import Batch, Series

_SIZE_NAMES = sorted((*schema.MEMORY_BREAKDOWN, *schema.BREAKDOWN_DROPPED), key=len, reverse=True)
SIZE_LABEL = re.compile(b"([{,](?:" + "|".join(_SIZE_NAMES).encode() + b')=")([^"]*)"')
"""A byte-size label of the container memory series: its ``[{,]name="`` and its value."""
_SIZE_COLUMN = re.compile(b"[{,](?:" + "|".join(_SIZE_NAMES).encode() + b")=$")
"""The frame piece before a byte-size label's value."""


class Derived(NamedTuple):
    """What a series text becomes when it is not one canonical series of the same value.

    ``outputs`` holds ``(key, fixed value)`` pairs; ``None`` means the sample's
    own value. ``conflict`` marks a sample whose ``node`` label named another node.
    """

    outputs: tuple[tuple[bytes, float | None], ...]
    conflict: bool


DROP = Derived((), False)
"""Entry of a series that is dropped on purpose (denied or unmappable), and counted."""


class Shape(NamedTuple):
    """What a container memory series text becomes, whatever its byte-size label values.

    ``keys[i]`` is the breakdown series of the text's ``kept[i]``-th size
    label (the others, such as ``offset``, have no canonical series).
    """

    key: bytes
    conflict: bool
    kept: tuple[int, ...]
    keys: tuple[bytes, ...]


class Sized(NamedTuple):
    """A memory line known by its shape; it has ``sizes`` size labels."""

    shape: Shape
    sizes: int


Entry = bytes | Derived | Sized


class Counts(NamedTuple):
    """What a body's lines came to, as its batch reports them."""

    samples: int
    duplicates: int
    conflicts: int
    dropped: int


@dataclass(frozen=True, slots=True)
class Table:
    """Memory lines known by their shape, as a table: a row per line, a column per label value.

    Monitors sort these lines by their text, sizes included, so their order
    changes from scrape to scrape. The lines match when, split at their quotes,
    they have the label names and punctuation ``frame`` (every line the same),
    and their identities (the label values outside the ``sizes`` columns),
    sorted, are ``ids``. ``kept[i]`` are the columns of the sizes that make
    series of the ``i``-th line in that order.
    """

    frame: list[bytes]
    width: int
    identity: tuple[int, ...]
    ids: list[tuple[bytes, ...]]
    kept: tuple[tuple[int, ...], ...]

    def match(self, texts: list[bytes]) -> tuple[list[int], list[bytes]] | None:
        """The lines in ``ids`` order and their kept size texts; None if they do not match."""
        joined = b"\n".join(texts)
        if b"\\" in joined:  # an escaped quote would fool the split
            return None
        pieces = joined.split(b'"')
        if pieces[0::2] != self.frame:
            return None
        cells, width = pieces[1::2], self.width
        ids = list(zip(*[cells[column::width] for column in self.identity], strict=True))
        order = sorted(range(len(ids)), key=ids.__getitem__)
        if list(map(ids.__getitem__, order)) != self.ids:
            return None
        sizes = [
            cells[o * width + c] for o, kept in zip(order, self.kept, strict=True) for c in kept
        ]
        return order, sizes


def tabulate(texts: list[bytes], entries: list[Sized]) -> tuple[Table, list[int]] | None:
    """The table of memory lines ``texts`` (body order) and its line order; None if irregular.

    Irregular: lines with several label layouts, a backslash, size columns
    that are not where the shapes' size labels are, or two lines that differ
    only in their sizes.
    """
    joined = b"\n".join(texts)
    if not texts or b"\\" in joined:
        return None
    split = [text.split(b'"') for text in texts]
    frame = split[0][0::2]
    if any(pieces[0::2] != frame for pieces in split):
        return None
    width = len(frame) - 1
    sizes = [c for c in range(width) if _SIZE_COLUMN.search(frame[c])]
    if any(len(sizes) != entry.sizes for entry in entries):
        return None
    identity = tuple(c for c in range(width) if c not in sizes)
    ids = [tuple(pieces[2 * c + 1] for c in identity) for pieces in split]
    if len(set(ids)) != len(ids):  # which of two lines of one container is which: by text only
        return None
    order = sorted(range(len(ids)), key=ids.__getitem__)
    kept = tuple(tuple(sizes[k] for k in entries[o].shape.kept) for o in order)
    table = Table(joined.split(b'"')[0::2], width, identity, [ids[o] for o in order], kept)
    return table, order


@dataclass(frozen=True, slots=True)
class Layout:
    """One body's lines and what they became; see the module docstring.

    ``texts`` are the lines compared verbatim (``plain`` marks them with a 1
    byte, ``sized`` marks the others; None: all lines), ``entries`` what they
    became. The others are memory lines known by
    their shape, matched as a :class:`Table`.

    The values of a body's plain lines, then of its memory lines in template
    order, then their kept sizes, then ``consts``, form one row; ``pick`` takes
    each key's value from it (None: the row is the values, in key order).
    """

    texts: tuple[bytes, ...]
    entries: tuple[Entry, ...]
    plain: bytes | None
    sized: bytes
    table: Table | None
    keys: tuple[bytes, ...]
    pick: Callable[[Sequence[float]], Sequence[float]] | None
    consts: tuple[float, ...]
    counts: Counts

    def row(self, series: Sequence[bytes], values: Sequence[bytes]) -> Sequence[bytes] | None:
        """The value texts of a body's row (see above); None if the body is laid out otherwise."""
        if len(series) != self.counts.samples:
            return None
        if self.plain is None:
            return values if series == self.texts else None
        if tuple(compress(series, self.plain)) != self.texts:
            return None
        if self.table is None:
            return None
        found = self.table.match(list(compress(series, self.sized)))
        if found is None:
            return None
        order, sizes = found
        own = list(compress(values, self.sized))
        return [*compress(values, self.plain), *map(own.__getitem__, order), *sizes]

    def batch(self, row: Sequence[bytes], families: Mapping[str, schema.Family]) -> Batch:
        """The batch of a body that matched, from its :meth:`row`.

        Raise ``ValueError`` for a text that is no number (the strict parser
        then names the line).
        """
        if b"_" in b"".join(row):
            raise ValueError("a value with a digit separator")
        if self.pick is None and not self.consts:
            samples, duplicates, conflicts, dropped = self.counts
            series = Series(self.keys, array("d", map(float, row)))
            return Batch(series, samples, duplicates, conflicts, dropped, families)
        return self.assemble(list(map(float, row)), families)

    def assemble(self, row: list[float], families: Mapping[str, schema.Family]) -> Batch:
        """The batch of a row already converted (the strict parser's values)."""
        row += self.consts
        packed = array("d", row if self.pick is None else self.pick(row))
        samples, duplicates, conflicts, dropped = self.counts
        return Batch(Series(self.keys, packed), samples, duplicates, conflicts, dropped, families)


def lay_out(series: Sequence[bytes], entries: Sequence[Entry]) -> Layout | None:
    """The layout of a body whose line texts ``series`` became ``entries``; None if its
    memory lines are too irregular for a :class:`Table`.

    Every line's key takes the line's value; where several lines give one key,
    the last wins and the others count as duplicates. A size copied from a
    label never replaces a series of its own. Keys are in row order, so that
    in most bodies the row is the batch's values as they are.
    """
    lines = len(entries)
    plain = [e.__class__ is not Sized for e in entries]
    sized = [i for i in range(lines) if not plain[i]]
    table: Table | None = None
    order: list[int] = []
    if sized:
        tabled = tabulate([series[i] for i in sized], [entries[i] for i in sized])  # type: ignore[misc]
        if tabled is None:
            return None
        table, lined = tabled
        order = [sized[o] for o in lined]
    out, counts, consts = _outputs(series, entries)
    slots = list(out.values())
    if sized or consts or slots != list(range(lines)):
        table, keys, pick = _rows(out, plain, order, table, len(consts))
    else:  # every line a series of its own, in body order
        keys, pick = tuple(out), None
    # Keys are shared by identity with the texts and from body to body: the history
    # compares a node's keys tuple by `is` first (tsdb/axis.py: 0.05 us against 1.2-4.6 us
    # for 250 series), and tuples of shared bytes compare 4x faster than equal copies.
    texts = tuple(
        e if e.__class__ is bytes and e == t else t  # share the key's bytes
        for t, e in compress(zip(series, entries, strict=True), plain)
    )
    keys = texts if keys == texts else keys
    known = tuple(compress(entries, plain))
    known = next((same for same in (texts, keys) if same == known), known)  # one tuple, not two
    return Layout(
        texts,
        known,
        None if not sized else bytes(plain),
        b"" if not sized else bytes(not p for p in plain),
        table,
        keys,
        pick,
        tuple(consts),
        counts,
    )


class SizeSlot(NamedTuple):
    """A key's value is line ``line``'s ``n``-th kept size."""

    line: int
    n: int


class ConstSlot(NamedTuple):
    """A key's value is the ``n``-th constant."""

    n: int


Slot = int | SizeSlot | ConstSlot
"""Where a key's value comes from: a line's index stands for that line's value."""


def _rows(
    out: dict[bytes, Slot], plain: list[bool], order: list[int], table: Table | None, consts: int
) -> tuple[Table | None, tuple[bytes, ...], Callable[[Sequence[float]], Sequence[float]] | None]:
    """The table keeping only the sizes some key takes, the keys in row order, and their pick."""
    used = set(out.values())
    row: list[Slot] = [i for i in range(len(plain)) if plain[i]]
    row += order
    if table is not None:
        kept: list[tuple[int, ...]] = []
        for i, columns in zip(order, table.kept, strict=True):
            mine = [k for k in range(len(columns)) if SizeSlot(i, k) in used]
            row += (SizeSlot(i, k) for k in mine)
            kept.append(tuple(columns[k] for k in mine))
        table = replace(table, kept=tuple(kept))
    row += (ConstSlot(j) for j in range(consts))
    position = {slot: n for n, slot in enumerate(row)}
    ranked = sorted((position[slot], key) for key, slot in out.items())
    picked = tuple(n for n, _ in ranked)
    pick = None if picked == tuple(range(len(row))) else _picker(picked)
    return table, tuple(key for _, key in ranked), pick


def _outputs(
    series: Sequence[bytes], entries: Sequence[Entry]
) -> tuple[dict[bytes, Slot], Counts, list[float]]:
    """Each key's slot, the counts (samples, duplicates, conflicts, dropped) and the constants.

    Lines of one canonical series each come first, then the others in the body
    order of their last line: two lines with one entry (one text, or the same
    sizes) count as the later one, so the last line of a key, and the last
    size copied to a key no line has of its own, win whatever entries the lines
    got. A memory line known by its shape is one with no other line of its text.
    """
    lines = len(entries)
    ident = [(t,) if e.__class__ is Sized else e for t, e in zip(series, entries, strict=True)]
    last = dict(zip(ident, range(lines), strict=True))
    out: dict[bytes, Slot] = {e: i for e, i in last.items() if e.__class__ is bytes}
    own = set(out)
    dropped = list(entries).count(DROP)
    duplicates = lines - len(last) - max(dropped - 1, 0)
    conflicts = 0
    consts: list[float] = []
    for i in sorted(i for e, i in last.items() if e.__class__ is not bytes):
        entry = entries[i]
        outputs: list[tuple[bytes, Slot | None]]
        if isinstance(entry, Sized):
            conflicts += entry.shape.conflict
            outputs = [(entry.shape.key, None)]
            outputs += ((key, SizeSlot(i, k)) for k, key in enumerate(entry.shape.keys))
        else:
            assert isinstance(entry, Derived)
            conflicts += entry.conflict
            outputs = [
                (key, None if fixed is None else ConstSlot(_index(consts, fixed)))
                for key, fixed in entry.outputs
            ]
        for key, source in outputs:
            if source is None:  # the line's own value
                duplicates += key in out
                out[key] = i
                own.add(key)
            elif key not in own:  # a series of its own beats a label's copy
                out[key] = source
    return out, Counts(lines, duplicates, conflicts, dropped), consts


def _index(consts: list[float], value: float) -> int:
    consts.append(value)
    return len(consts) - 1


def _picker(slots: tuple[int, ...]) -> Callable[[Sequence[float]], Sequence[float]]:
    if len(slots) != 1:
        return itemgetter(*slots) if slots else lambda row: ()
    slot = slots[0]
    return lambda row: (row[slot],)
