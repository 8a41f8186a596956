"""Turn the exposition bodies one source offers into canonical series.

This is the stage between every pulled source and the store. A
:class:`Normaliser` belongs to one source and so to one node. It keeps the
layout of the source's last body (:mod:`collector.normalise.layout`): a body laid out the
same is matched against it as a whole; a new one is parsed here, each *series
text* mapped to what that series becomes in the canonical schema.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from collector.exposition.parse import Frame, Labels, parse, parse_series, parse_value
from collector.normalise import labelsets, schema
from collector.normalise.batch import Batch
from collector.normalise.layout import (
    DROP,
    SIZE_LABEL,
    Derived,
    Entry,
    Layout,
    Shape,
    Sized,
    lay_out,
)


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


def _fixed(text: bytes, entry: Entry) -> bytes | Derived:
    """A memory line known by its shape as a plain line: its sizes read from ``text``."""
    if not isinstance(entry, Sized):
        return entry
    sizes = SIZE_LABEL.split(text)[2::3]
    kept = (parse_value(sizes[i]) for i in entry.shape.kept)
    outputs = ((entry.shape.key, None), *zip(entry.shape.keys, kept, strict=True))
    return Derived(outputs, entry.shape.conflict)


class Normaliser:
    """Map one node's bodies, from any flavour, onto the canonical schema."""

    def __init__(self, node: str, passthrough: PassThrough | None = None) -> None:
        self.node = node
        self._passthrough = passthrough or PassThrough()
        self._layout: Layout | None = None
        self._frame: Frame | None = None
        self._shapes: dict[bytes, Shape] = {}
        self._families: Mapping[str, schema.Family] = {}

    def normalise(self, body: bytes, openmetrics: bool = False) -> Batch:
        """Normalise one body; raise ``ParseError`` or ``ValueError`` if it is bad."""
        layout, frame = self._layout, self._frame
        cut = frame.cut(body) if frame is not None else None
        row = layout.row(*cut) if cut is not None and layout is not None else None
        if row is None:
            frame = Frame.of(body)
            cut = frame.cut(body)
            assert cut is not None, "a body has its own frame"
            return self._learn(body, frame, *cut, openmetrics)
        assert layout is not None
        try:
            return layout.batch(row, self._families)
        except ValueError:
            return self._strict(body, openmetrics)

    def _learn(
        self,
        body: bytes,
        frame: Frame,
        series: Sequence[bytes],
        values: Sequence[bytes],
        openmetrics: bool,
    ) -> Batch:
        """A body laid out anew (new pods, first scrape): parse only the texts not known.

        A text that does not parse on its own, a family outside the schema (its
        HELP and TYPE come from the comment lines) or a bad value send the body
        to the strict parser, which names the bad line.
        """
        known = self._known()
        try:
            entries = [known.get(text) or self._resolve(text) for text in series]
            layout = lay_out(series, entries)
            if layout is None:  # memory lines too irregular for a table: sizes as constants
                layout = lay_out(series, list(map(_fixed, series, entries)))
            assert layout is not None, "plain lines need no table"
            row = layout.row(series, values)
            assert row is not None, "a body matches its own layout"
            batch = layout.batch(row, self._families)
        except ValueError:
            return self._strict(body, openmetrics)
        self._keep(layout, frame)
        return batch

    def _known(self) -> dict[bytes, Entry]:
        """The entries of the last body's texts (memory lines known by their shape aside)."""
        if self._layout is None:
            return {}
        return dict(zip(self._layout.texts, self._layout.entries, strict=True))

    def _resolve(self, raw: bytes) -> Entry:
        """The entry of a new series text; the parser only for a shape not seen before.

        Old monitors put byte sizes in label values, so their container memory
        texts are new on every scrape; cut out, the sizes leave a text (the
        shape) that stays. The layout parses the sizes with the values.
        """
        pieces = SIZE_LABEL.split(raw) if b"\\" not in raw else [raw]
        values, sized = pieces[2::3], pieces[1::3]
        del pieces[2::3]
        template = b"".join(pieces)
        shape = self._shapes.get(template) if values else None
        if shape is not None:
            return Sized(shape, len(values))
        name, labels = parse_series(raw)
        if not schema.known(name):
            raise ValueError("a family outside the schema")
        entry = self._entry(raw, name, labels)
        memory = schema.LEGACY.get(name, (name,))[0] == schema.CONTAINER_MEMORY
        if memory and values and isinstance(entry, Derived):
            shape = self._learn_shape(template, sized, entry)
            if shape is not None:
                return Sized(shape, len(values))
        return entry

    def _learn_shape(self, template: bytes, labels: list[bytes], entry: Derived) -> Shape | None:
        """Keep the shape of a container memory text whose size labels made ``entry``."""
        kept = tuple(
            i for i, label in enumerate(labels) if label[1:-2].decode() in schema.MEMORY_BREAKDOWN
        )
        keys = tuple(key for key, _ in entry.outputs[1:])
        if len(kept) != len(keys):
            return None
        shape = self._shapes[template] = Shape(entry.outputs[0][0], entry.conflict, kept, keys)
        return shape

    def _strict(self, body: bytes, openmetrics: bool) -> Batch:
        """Parse and check the whole body: for bodies the split cannot take, and to name errors."""
        parsed = parse(body, openmetrics)
        known = self._known()
        entries: list[Entry] = []
        families = dict(self._families)
        for sample in parsed.samples:
            entry = known.get(sample.series)
            if entry is None:
                entry = known[sample.series] = self._entry(
                    sample.series, sample.name, sample.labels
                )
            entries.append(entry)
            if entry is not DROP and not schema.known(sample.name):
                families[sample.name] = schema.Family(
                    sample.name,
                    parsed.helps.get(sample.name, ""),
                    parsed.types.get(sample.name, "untyped"),
                )
        if families != self._families:
            self._families = families
        layout = lay_out([s.series for s in parsed.samples], entries)
        assert layout is not None, "plain lines need no table"
        batch = layout.assemble([s.value for s in parsed.samples], self._families)
        self._keep(layout, Frame.of(body))
        return batch

    def _keep(self, layout: Layout, frame: Frame) -> None:
        self._layout, self._frame = layout, frame
        if len(self._shapes) > layout.counts.samples + 64:
            self._shapes.clear()  # shapes of pods gone; the live ones are learnt again

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
                breakdown.append((labelsets.key(family, rest.items()), parse_value(size.encode())))
        key = labelsets.key(name, rest.items())
        if key == raw:
            key = raw  # share the monitor's own text: most canonical series arrive as they are kept
        if breakdown or conflict:
            return Derived(((key, None), *breakdown), conflict)
        return key
