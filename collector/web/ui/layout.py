"""The frame of every page for people: title, the views' nav, the reload, the REST and
PromQL equivalents, and the shared Jinja environment views render their bodies with.

A view renders its body with :func:`template` (autoescaped, with the
:mod:`~collector.web.ui.units` formatters as filters: ``{{ x|size }}``), then
answers with :func:`render`. Pages of rows use :func:`page_number` and
:func:`pager`, :data:`PAGE_ROWS` rows a page.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple
from urllib.parse import urlencode

import jinja2
from aiohttp import web
from markupsafe import Markup, escape

from collector.auth.access import access_of
from collector.auth.signin import signed_in
from collector.web.ui import charts, units
from collector.web.ui.layout_template import FRAME

NAV = (
    ("Overview", "/"),
    ("Nodes", "/nodes"),
    ("Workloads", "/workloads"),
    ("Namespaces", "/namespaces"),
    ("Status", "/status"),
)
"""The views, in the order the nav lists them: (label, path)."""

PAGE_ROWS = 100
"""Rows (or tiles) on one page: a page stays small however large the cluster."""


class Link(NamedTuple):
    """A link in a page's footer to the same numbers elsewhere."""

    label: str
    href: str


def rest_link(path: str) -> Link:
    """A link to a REST endpoint (``/api/v1/...``), labelled with its path."""
    return Link(f"GET {path}", path)


def promql_link(expr: str) -> Link:
    """A link to an instant PromQL query of ``expr`` on the collector's Prometheus API."""
    return Link(expr, "/prometheus/api/v1/query?" + urlencode({"query": expr}))


ENVIRONMENT = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
ENVIRONMENT.filters.update(
    size=units.size,
    percent=units.percent,
    percent_100=units.percent_100,
    watts=units.watts,
    celsius=units.celsius,
    duration=units.duration,
    ago=units.ago,
    utc=units.utc,
    byte_hours=units.byte_hours,
    core_hours=units.core_hours,
    cores=units.cores,
    count=units.count,
)
ENVIRONMENT.globals.update(bar=charts.bar, sparkline=charts.sparkline, units=units)
_FRAME = ENVIRONMENT.from_string(FRAME)


def template(source: str) -> jinja2.Template:
    """A view's body template in the shared environment: autoescape on, the units as
    filters (``ago`` takes the time it is measured at: ``{{ t|ago(now) }}``), ``bar``,
    ``sparkline`` and ``units`` as globals."""
    return ENVIRONMENT.from_string(source)


def render(
    request: web.Request,
    title: str,
    body: str,
    links: Sequence[Link] = (),
    interval: float = 15.0,
    status: int = 200,
    reload: bool = True,
) -> web.Response:
    """The page: ``title`` as its ``<h1>``, then ``body`` (HTML a view's template rendered,
    without a heading of its own), ``links`` in its footer; it reloads every ``interval``
    seconds unless the URL has ``refresh=0`` or ``reload`` is false (a form would lose
    what was typed). A reader signed in by the sign-in form gets a "Sign out" button."""
    refresh = reload and request.query.get("refresh") != "0" and status == 200
    access = access_of(request)
    html = _FRAME.render(
        title=title,
        body=Markup(body),
        nav=NAV,
        current=_current(request.path),
        reader=""
        if access.cluster
        else f"{access.identity}: namespaces {', '.join(sorted(access.namespaces or ()))}",
        signed_in=signed_in(request),
        links=links,
        rendered_at=units.utc(time.time()),
        refresh_ms=max(1000, round(interval * 1000)) if refresh else 0,
        interval=units.duration(interval),
        stop_href=str(request.rel_url.update_query(refresh="0")),
    )
    return web.Response(
        status=status, text=html, content_type="text/html", headers={"Cache-Control": "no-store"}
    )


def error(request: web.Request, status: int, message: str) -> web.Response:
    """An error page (400, 404, ...) saying ``message``: what was wrong or not found."""
    title = {400: "Bad request", 403: "Not allowed", 404: "Not found"}.get(status, "Error")
    return render(request, title, f'<p class="error">{escape(message)}</p>', status=status)


def _current(path: str) -> str:
    """The nav entry of ``path``: its view's path."""
    if path == "/":
        return "/"
    return next((href for _, href in NAV[1:] if path == href or path.startswith(href + "/")), "")


def page_number(query: Mapping[str, str], name: str = "page") -> int:
    """The page asked for (from 1); ``ValueError`` naming the parameter when it is not one."""
    text = query.get(name, "1")
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < 1:
        raise ValueError(f"{name} must be a whole number from 1 (got {text[:20]!r})")
    return int(text)


def page_count(total: int, rows: int = PAGE_ROWS) -> int:
    """Pages of ``rows`` that ``total`` items fill (at least one)."""
    return max(1, math.ceil(total / rows))


def pager(request: web.Request, page: int, total: int, rows: int = PAGE_ROWS) -> Markup:
    """``page X of Y`` with previous / next links keeping the request's other parameters."""
    pages = page_count(total, rows)
    parts = [f"page {page} of {pages} ({units.count(total)} in all, {rows} a page)"]
    if page > 1:
        href = request.rel_url.update_query(page=str(page - 1))
        parts.insert(0, f'<a rel="prev" href="{escape(str(href))}">&larr; previous</a>')
    if page < pages:
        href = request.rel_url.update_query(page=str(page + 1))
        parts.append(f'<a rel="next" href="{escape(str(href))}">next &rarr;</a>')
    return Markup(f'<div class="pages">{" ".join(parts)}</div>')
