"""What the table views share: their checked query string, their pages of rows, their errors.

A view's query is checked as strictly as the REST API's (an unknown or
repeated parameter, a sort field the view lacks, a page that is not a
positive number: 400 naming it), and rows are sorted by the REST API's own
:func:`~collector.views.listing.sort_and_limit`, so a view and its REST
twin list the same rows in the same order. A page is cut before its rows are
built: only :data:`~collector.web.ui.layout.PAGE_ROWS` rows are ever rendered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar
from urllib.parse import urlencode

from multidict import MultiMapping

from collector.views import listing
from collector.views.listing import ListQuery, sort_and_limit
from collector.web.ui.layout import PAGE_ROWS

KEPT = ("refresh",)
"""Parameters every view takes and hands on in its links (the page frame reads them)."""

T = TypeVar("T")


class ViewError(Exception):
    """A request a view answers with an error page: ``status`` and what was wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def bad(message: str) -> ViewError:
    """A 400 saying ``message``."""
    return ViewError(400, message)


@dataclass(frozen=True, slots=True)
class ViewQuery:
    """A view's checked query: REST's sort and filters, the page, and the raw parameters."""

    listing: ListQuery
    page: int
    params: Mapping[str, str]

    def href(self, path: str, **changes: str | int | None) -> str:
        """``path`` with this query's parameters, ``changes`` applied (None drops one)."""
        params: dict[str, str | int | None] = {**self.params, **changes}
        kept = {k: v for k, v in params.items() if v not in (None, "")}
        return f"{path}?{urlencode(kept)}" if kept else path

    def sorted_by(self, path: str, field: str) -> str:
        """The link that sorts by ``field``: descending first, ascending once it is."""
        now = self.params.get("sort")
        return self.href(path, sort=field if now == f"-{field}" else f"-{field}", page=None)


def check_names(query: MultiMapping[str], allowed: Sequence[str] = ()) -> None:
    """Raise a 400 for a parameter not in ``allowed`` (nor :data:`KEPT`), or one given twice,
    as REST checks its own (:func:`~collector.views.listing.check_names`)."""
    listing.check_names(query, (*allowed, *KEPT))


def view_query(
    query: MultiMapping[str],
    sorts: Sequence[str],
    filters: Sequence[str],
    more: Sequence[str] = (),
) -> ViewQuery:
    """Check a view's query string; raise a 400 :class:`ViewError` naming a bad parameter.

    ``sorts`` are the fields it sorts by, ``filters`` the parameters that narrow
    its rows, ``more`` parameters of its own (which it checks itself).
    """
    check_names(query, ("page", "sort", *filters, *more))
    sort = query.get("sort") or None
    if sort is not None and sort.removeprefix("-") not in sorts:
        raise bad(
            f"query parameter 'sort': unknown field {sort[:40]!r}; allowed: {', '.join(sorts)} "
            "(prefix '-' for descending)"
        )
    page = 1
    raw = query.get("page")
    if raw:
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 9 and int(raw) > 0):
            raise bad(f"query parameter 'page' must be a positive integer, not {raw[:40]!r}")
        page = int(raw)
    listing = ListQuery(
        {name: query[name] for name in filters if query.get(name)},
        None if sort is None else sort.removeprefix("-"),
        sort is not None and sort.startswith("-"),
        None,
    )
    return ViewQuery(listing, page, {name: query[name] for name in query if query[name]})


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a view's rows, and where it stands among all of them."""

    rows: list[T]
    total: int
    number: int


def page_of(
    items: list[T], query: ViewQuery, value: Callable[[T, str], object] = getattr
) -> Page[T]:
    """The query's page of ``items``, sorted as the REST API sorts them."""
    ordered = sort_and_limit(items, query.listing, value)
    start = (query.page - 1) * PAGE_ROWS
    return Page(ordered[start : start + PAGE_ROWS], len(items), query.page)
