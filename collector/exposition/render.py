"""Render series in Prometheus text 0.0.4 and OpenMetrics 1.0.

A series is kept as its *key*: the exposition text of its name and labels
(``name{a="b",...}``), labels sorted and values escaped, without ``node``. The
key is both the series identity and most of its output line, so rendering a
line is two concatenations and a float formatting.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from collector.exposition.parse import parse_series


def escape_label_value(value: str) -> str:
    """Escape a label value as both formats require: backslash, quote, newline."""
    if "\\" in value or '"' in value or "\n" in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def escape_help(text: str, openmetrics: bool) -> str:
    """Escape HELP text: backslash and newline, and quotes in OpenMetrics."""
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if openmetrics else text


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
            have = {label for label, _ in parse_series(key)[1]}
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
