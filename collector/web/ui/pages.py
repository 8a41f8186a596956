"""What the nodes, workloads and namespaces views share beyond the frame: sortable column
heads, the helpers their templates call, PromQL matchers, and the answer to a request
they refuse.

Templates are :func:`collector.web.ui.layout.template`'s (autoescaped): node, pod
and namespace names are label values, which anyone who can create a pod chooses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import jinja2
from aiohttp import web
from markupsafe import Markup

from collector.exposition.render import escape_label_value
from collector.views.models import ApiError
from collector.web.ui import charts, layout, units
from collector.web.ui.listing import ViewError

Handler = Callable[[web.Request], Awaitable[web.Response]]

MACROS = """
{%- macro sortable(query, path, field, label) -%}
{%- set now = query.params.get('sort') -%}
<th scope="col"{% if now == field %} aria-sort="ascending"{% elif now == '-' ~ field %} aria-sort="descending"{% endif %}>
<a href="{{ query.sorted_by(path, field) }}">{{ label }}</a>
{%- if now == field %} ▲{% elif now == '-' ~ field %} ▼{% endif %}</th>
{%- endmacro -%}
"""


def template(body: str) -> jinja2.Template:
    """A view's body template; it may call ``sortable(query, path, field, label)``."""
    return layout.template(MACROS + body)


def render(body: jinja2.Template, **context: Any) -> str:
    """``body`` rendered with ``context`` and the helpers every view's template calls:
    ``bar`` (:func:`charts.bar`), ``units``, ``segment`` (a name as one path segment),
    ``clock`` (a Unix time as UTC ``HH:MM``), ``known`` (:func:`known`) and ``cards_of``
    (:func:`cards_of`)."""
    return body.render(
        bar=charts.bar,
        units=units,
        segment=segment,
        clock=units.clock,
        known=known,
        cards_of=cards_of,
        **context,
    )


def known(name: str, value: float | None) -> Markup:
    """The figure ``value`` as the attribute ``data-<name>``, empty where it is unknown: the
    number a page shows, in full, for a program (or a test) to read."""
    return Markup('data-{}="{}"').format(name, "" if value is None else repr(value))


def cards_of(covered: int, cards: int) -> Markup:
    """`` on 6/8 cards`` after a sum that covers some of a node's cards only; nothing where
    it covers all (or none: the sum reads unknown)."""
    if covered == cards or covered == 0:
        return Markup("")
    return Markup(' <span class="muted">on {}/{} cards</span>').format(covered, cards)


def segment(text: str) -> str:
    """``text`` as one URL path segment (a label value may hold ``/``, ``?`` or ``#``)."""
    return quote(text, safe="")


def matcher(label: str, value: str) -> str:
    """A PromQL equality matcher, the value escaped as a label value is."""
    return f'{label}="{escape_label_value(value)}"'


def answering(handler: Handler, read: Callable[[], None]) -> Handler:
    """``handler``, noting each read (the node cache keeps warm while views are read), and a
    refused request answered with the frame's error page saying why."""

    async def answer(request: web.Request) -> web.Response:
        read()
        try:
            return await handler(request)
        except (ViewError, ApiError) as error:
            return layout.error(request, error.status, error.message)

    return answer
