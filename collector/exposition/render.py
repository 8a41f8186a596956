"""Render series in Prometheus text 0.0.4 and OpenMetrics 1.0.

A series is kept as its *key*: the exposition text of its name and labels
(``name{a="b",...}``), labels sorted and values escaped, without ``node``. The
key is both the series identity and most of its output line, so rendering a
line is two concatenations and a float formatting.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from collector.exposition.parse import Labels, parse_series


def escape_label_value(value: str) -> str:
    """Escape a label value as both formats require: backslash, quote, newline."""
    if "\\" in value or '"' in value or "\n" in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def escape_help(text: str, openmetrics: bool) -> str:
    """Escape HELP text: backslash and newline, and quotes in OpenMetrics."""
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if openmetrics else text


def series_key(name: str, labels: Iterable[tuple[str, str]]) -> bytes:
    """Return the canonical key of a series: its text with labels sorted by name."""
    body = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in sorted(labels))
    return f"{name}{{{body}}}".encode()


def key_labels(key: bytes) -> tuple[str, Labels]:
    """The name and labels of a key: the inverse of :func:`series_key`.

    Without a backslash no value of a canonical key holds a quote, so
    splitting on ``",`` is exact and several times faster than the parser,
    which keys with escapes take.
    """
    brace = key.find(b"{")
    if b"\\" in key or brace < 0 or key[-2:] != b'"}':
        return parse_series(key)
    pairs = key[brace + 1 : -2].split(b'",')
    labels = tuple(
        (label.decode(), value.decode()) for label, _, value in (p.partition(b'="') for p in pairs)
    )
    return key[:brace].decode(), labels


def node_suffix(node: str, external: Iterable[tuple[str, str]] = ()) -> tuple[bytes, bytes]:
    """Return what closes a key with the ``node`` label: after other labels, or alone.

    ``external`` labels (``--external-labels-on-metrics``) come before ``node``.
    """
    extra = "".join(f'{name}="{escape_label_value(value)}",' for name, value in external)
    label = f'{extra}node="{escape_label_value(node)}"}} '.encode()
    return b"," + label, label


def format_value(value: float) -> bytes:
    """Format a value the way both formats accept (NaN, +Inf, -Inf spelled out)."""
    if math.isfinite(value):
        return repr(value).encode()
    if math.isnan(value):
        return b"NaN"
    return b"+Inf" if value > 0 else b"-Inf"


def render_lines(
    items: Iterable[tuple[bytes, float]], node: str, external: Sequence[tuple[str, str]] = ()
) -> bytes:
    """Render ``(key, value)`` pairs as sample lines labelled with ``node`` (and ``external``)."""
    if external:
        return _render_external(items, node, external)
    with_labels, alone = node_suffix(node)
    out = []
    for key, value in items:
        out.append(key[:-1])
        out.append(alone if key[-2:] == b"{}" else with_labels)
        out.append(format_value(value))
        out.append(b"\n")
    return b"".join(out)


def _render_external(
    items: Iterable[tuple[bytes, float]], node: str, external: Sequence[tuple[str, str]]
) -> bytes:
    """:func:`render_lines` with external labels; one never replaces a label the series has."""
    marks = [(f'{{{name}="'.encode(), f',{name}="'.encode()) for name, _ in external]
    plain = node_suffix(node, external)
    out = []
    for key, value in items:
        suffix = plain
        if any(first in key or later in key for first, later in marks):
            have = {label for label, _ in key_labels(key)[1]}
            suffix = node_suffix(node, [(n, v) for n, v in external if n not in have])
        out.append(key[:-1])
        out.append(suffix[1] if key[-2:] == b"{}" else suffix[0])
        out.append(format_value(value))
        out.append(b"\n")
    return b"".join(out)


def render_header(name: str, metric_type: str, help_text: str, openmetrics: bool) -> bytes:
    """Render one family's HELP and TYPE lines."""
    if openmetrics and metric_type != "gauge":
        metric_type = "unknown"
    elif not openmetrics and metric_type not in ("gauge", "counter", "untyped"):
        metric_type = "untyped"
    return f"# HELP {name} {escape_help(help_text, openmetrics)}\n# TYPE {name} {metric_type}\n".encode()
