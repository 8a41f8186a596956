"""The Prometheus HTTP API under ``/prometheus/api/v1/``: Grafana's datasource, promtool's peer.

One envelope for every answer (``{"status": "success", "data": ...}`` or
``{"status": "error", "errorType": ..., "error": ...}``) with Prometheus' status
codes: 400 bad_data, 422 execution, 503 timeout, 404 not_found. Every query
reads the history, which the store feeds on each change.

Every query goes through the collector's one engine
(:class:`~collector.promql.engine.Engine`): its slots, its per-identity cap
(one more answers 429), its timeout and sample limit, its worker thread. The
answer's JSON body is written in that thread too.

A tenant (:class:`~collector.auth.access.Access` with namespaces) sees only
its namespaces' series, as behind prom-label-proxy: every selector of its
queries and every ``match[]`` of its series, labels and label values reads gets
``namespace=~"<its namespaces>"`` added (:func:`~collector.promql.plan.restrict`),
before any data is read; metadata lists only the families it has series of.

The endpoints that carry no series (exemplars, rules, alerts, format_query)
are in :mod:`collector.web.grafana`.
"""

from __future__ import annotations

import json
import logging
import platform
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import promql_parser
from aiohttp import web
from multidict import MultiDict, MultiMapping

from collector import __version__
from collector.auth.access import Access, access_of
from collector.normalise import schema
from collector.promql.engine import Engine, Queries, Unavailable
from collector.promql.limits import check_depth
from collector.promql.params import parse_duration, parse_time
from collector.promql.plan import parse_promql, selector_matchers, tenant_matcher
from collector.promql.values import QueryError
from collector.store.latest import Store
from collector.tsdb.history import History
from collector.tsdb.series import Matcher
from collector.web.promjson import instant_body, matrix_body

PREFIX = "/prometheus/api/v1"
PROMETHEUS_VERSION = "2.42.0"
"""The Prometheus whose HTTP API this one matches: ``status/buildinfo``'s ``version``."""
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_STATUS = {
    "bad_data": 400,
    "execution": 422,
    "timeout": 503,
    "canceled": 503,
    "not_found": 404,
    "internal": 500,
    "unavailable": 429,
}
_SUFFIXES = ("", "_total", "_bucket", "_count", "_sum", "_created", "_info")
"""What a family's series names may add to its name (metadata of a tenant's families)."""
log = logging.getLogger(__name__)


class PrometheusAPI:
    """Handlers of the Prometheus-compatible endpoints."""

    def __init__(
        self, store: Store, engine: Engine, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._history: History = store.history
        self._engine = engine
        self._clock = clock

    def routes(self) -> list[web.RouteDef]:
        """Every endpoint, with GET and (form) POST where Prometheus has both."""
        both = {
            "/query": self.query,
            "/query_range": self.query_range,
            "/series": self.series,
            "/labels": self.labels,
        }
        out = [
            web.route(method, PREFIX + path, _enveloped(h))
            for path, h in both.items()
            for method in ("GET", "POST")
        ]
        out.append(web.get(PREFIX + "/label/{name}/values", _enveloped(self.label_values)))
        out.append(web.get(PREFIX + "/metadata", _enveloped(self.metadata)))
        out.append(web.get(PREFIX + "/status/buildinfo", _enveloped(self.buildinfo)))
        from collector.web import grafana  # it builds on this module's envelope

        out.extend(grafana.routes())
        return out

    async def query(self, params: _Params) -> Any:
        """An instant query."""
        at = parse_time(params.one("time"), "time") if params.has("time") else self._clock()
        query = params.required("query")
        access = access_of(params.request)

        def answer(queries: Queries) -> bytes:
            prepared = queries.instant(query, at)
            return instant_body(prepared.result_type, prepared.run(), at)

        return await self._engine.run(
            answer,
            identity=access.identity,
            namespaces=access.namespaces,
            time_limit=_request_timeout(params),
        )

    async def query_range(self, params: _Params) -> Any:
        """A range query; Prometheus' limit of 11,000 points per series applies."""
        start = parse_time(params.required("start"), "start")
        end = parse_time(params.required("end"), "end")
        step = parse_duration(params.required("step"), "step")
        query = params.required("query")
        access = access_of(params.request)
        return await self._engine.run(
            lambda queries: matrix_body(queries.range(query, start, end, step).columns()),
            identity=access.identity,
            namespaces=access.namespaces,
            time_limit=_request_timeout(params),
        )

    async def series(self, params: _Params) -> Any:
        """The label sets of the series that match any ``match[]`` in the window."""
        selectors = params.all("match[]")
        if not selectors:
            raise QueryError("bad_data", "no match[] parameter provided")
        start, end = self._window(params)
        found: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        for matchers in _restricted(_selectors(selectors), access_of(params.request)):
            for group in self._history.select(matchers, start, end):
                for labels in group.labels:
                    found.setdefault(tuple(sorted(labels.items())), dict(labels))
        return _limited(list(found.values()), params)

    async def labels(self, params: _Params) -> Any:
        """Label names of the matching series (all of them without ``match[]``); 2.42 has no
        ``limit`` here, so one is ignored, as 2.42 ignores it."""
        start, end = self._window(params)
        names: set[str] = set()
        for matchers in _restricted(_selectors(params.all("match[]")), access_of(params.request)):
            names |= self._history.label_names(matchers, start, end)
        return sorted(names)

    async def label_values(self, params: _Params) -> Any:
        """Values of one label among the matching series (``limit`` ignored, as by 2.42)."""
        name = params.request.match_info["name"]
        if not _LABEL_NAME.fullmatch(name):
            raise QueryError("bad_data", f"invalid label name: {json.dumps(name)}")
        start, end = self._window(params)
        values: set[str] = set()
        for matchers in _restricted(_selectors(params.all("match[]")), access_of(params.request)):
            values |= self._history.label_values(name, matchers, start, end)
        return sorted(values)

    async def metadata(self, params: _Params) -> Any:
        """Type and HELP of every family the collector serves (``metric`` narrows it);
        a tenant's, only of the families it has series of in the window.

        ``limit`` as 2.42 reads it: at most that many families, none for 0, all for a
        negative one, ``bad_data`` if not an integer. ``limit_per_metric`` (newer
        Prometheus; 2.42 ignores it) changes nothing: each family has one entry.
        """
        visible = self._visible_names(access_of(params.request), params)
        families = dict(schema.FAMILIES)
        for node in self._store.nodes():
            view = self._store.view(node)
            if view is not None:
                for name, family in view.families.items():
                    families.setdefault(name, family)
        wanted = params.one("metric") if params.has("metric") else None
        out = {
            name: [
                {"type": "unknown" if f.type == "untyped" else f.type, "help": f.help, "unit": ""}
            ]
            for name, f in sorted(families.items())
            if (wanted is None or name == wanted)
            and (visible is None or any(name + end in visible for end in _SUFFIXES))
        }
        limit = _metadata_limit(params)
        if limit >= 0:
            out = dict(list(out.items())[:limit])
        return out

    def _visible_names(self, access: Access, params: _Params) -> set[str] | None:
        """The metric names of a tenant's series in the window; None for a cluster reader."""
        if access.namespaces is None:
            return None
        start, end = self._window(params)
        matcher = tenant_matcher(access.namespaces)
        return self._history.label_values("__name__", [matcher], start, end)

    async def buildinfo(self, params: _Params) -> Any:
        """Build information: ``version`` is :data:`PROMETHEUS_VERSION`, the Prometheus whose
        API this one matches (Grafana switches features on by it), the collector's own is
        ``hamiUsageCollectorVersion``. No ``features`` and no ``application``, so Grafana
        takes us for plain Prometheus (no ruler API); no ``status/flags``, so not Thanos.
        There is no Go build: ``revision``, ``branch``, ``buildDate`` and ``goVersion``
        are empty, ``pythonVersion`` says what runs it."""
        return {
            "version": PROMETHEUS_VERSION,
            "revision": "",
            "branch": "",
            "buildUser": "hami-usage-collector",
            "buildDate": "",
            "goVersion": "",
            "hamiUsageCollectorVersion": __version__,
            "pythonVersion": platform.python_version(),
        }

    def _window(self, params: _Params) -> tuple[float, float]:
        now = self._clock()
        start = (
            parse_time(params.one("start"), "start")
            if params.has("start")
            else now - self._history.retention
        )
        end = parse_time(params.one("end"), "end") if params.has("end") else now
        return start, end


class _Params:
    """Query-string and form parameters together, as Prometheus reads them."""

    def __init__(self, request: web.Request, form: Any) -> None:
        self.request = request
        self._query = request.query
        self._form = form

    def has(self, name: str) -> bool:
        return name in self._query or name in self._form

    def one(self, name: str) -> str:
        value = self._form.get(name) if name in self._form else self._query.get(name)
        return str(value)

    def required(self, name: str) -> str:
        if not self.has(name) or not self.one(name):
            raise QueryError("bad_data", f'invalid parameter "{name}": missing')
        return self.one(name)

    def all(self, name: str) -> list[str]:
        return [str(v) for v in (*self._query.getall(name, []), *self._form.getall(name, []))]


def _enveloped(handler: Callable[[_Params], Any]) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.Response:
        try:
            form = await _form(request)
        except QueryError as exc:
            return _error(exc.error_type, str(exc), 415)
        try:
            data = await handler(_Params(request, form))
        except Unavailable as exc:
            response = _error("unavailable", str(exc))
            response.headers["Retry-After"] = "1"
            return response
        except QueryError as exc:
            return _error(exc.error_type, str(exc))
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            return _error("internal", "internal error, see the collector's log")
        if isinstance(data, bytes):  # a whole body, written by the handler (a query's)
            return web.Response(body=data, content_type="application/json")
        if isinstance(data, web.Response):  # a whole answer (exemplars' 204, as 2.42's)
            return data
        return web.json_response({"status": "success", "data": data})

    return handle


def _error(error_type: str, message: str, status: int | None = None) -> web.Response:
    body = {"status": "error", "errorType": error_type, "error": message}
    return web.json_response(body, status=status or _STATUS.get(error_type, 500))


_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


async def _form(request: web.Request) -> MultiMapping[Any]:
    """A POST's form parameters; a body that is not a UTF-8 form is refused, not ignored."""
    if request.method != "POST" or not request.body_exists:
        return MultiDict()
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):  # aiohttp leaves bodies encoded (errors.HANDLER_ARGS)
        raise QueryError("bad_data", f"content encoding {encoding!r} is not accepted here")
    charset = (request.charset or "utf-8").lower()
    if request.content_type not in _FORMS or charset not in ("utf-8", "utf8", "us-ascii"):
        raise QueryError(
            "bad_data",
            f"a POST body must be a UTF-8 form ({', '.join(_FORMS)}), "
            f"not {request.content_type}; charset={charset}",
        )
    try:
        return await request.post()
    except ValueError as exc:  # a multipart body without its boundary, bytes not UTF-8
        raise QueryError("bad_data", f"unreadable form body: {exc}") from None


def _selectors(texts: Sequence[str]) -> list[tuple[Matcher, ...]]:
    out = []
    for text in texts:
        check_depth(text)
        try:
            expr, strings = parse_promql(text)
        except (ValueError, RuntimeError) as exc:
            raise QueryError("bad_data", f'invalid parameter "match[]": {exc}') from None
        if not isinstance(expr, promql_parser.VectorSelector):
            raise QueryError(
                "bad_data", f'invalid parameter "match[]": {text} is not a series selector'
            )
        try:
            out.append(selector_matchers(expr, strings))
        except QueryError as exc:
            raise QueryError(exc.error_type, f'invalid parameter "match[]": {exc}') from None
    return out


def _restricted(selectors: list[tuple[Matcher, ...]], access: Access) -> list[tuple[Matcher, ...]]:
    """The ``match[]`` selectors a reader reads: a tenant's each with its namespaces' matcher
    added, or that matcher alone without any; a cluster reader's as given (none: everything)."""
    if access.namespaces is None:
        return selectors or [()]
    matcher = tenant_matcher(access.namespaces)
    return [(*matchers, matcher) for matchers in selectors] or [(matcher,)]


def _request_timeout(params: _Params) -> float | None:
    """The request's ``timeout`` parameter (the engine keeps the lower of it and its own); an
    empty one is absent, as Prometheus takes it (prometheus-adapter sends ``timeout=`` whenever
    its own deadline has passed: Go prints a negative duration as "")."""
    if not params.has("timeout") or not params.one("timeout"):
        return None
    return parse_duration(params.one("timeout"), "timeout")


def _positive(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise QueryError("bad_data", f'invalid parameter "{name}": must be a non-negative integer')
    return value


def _metadata_limit(params: _Params) -> int:
    """Metadata's ``limit`` as 2.42 parses it: -1 (none) when absent or empty."""
    text = params.one("limit") if params.has("limit") else ""
    if not text:
        return -1
    if not re.fullmatch(r"[+-]?[0-9]+", text):  # what Go's strconv.Atoi takes
        raise QueryError("bad_data", "limit must be a number")
    return int(text)


def _limited(items: list[Any], params: _Params) -> list[Any]:
    if params.has("limit"):
        limit = _positive(params.one("limit"), "limit")
        if limit:
            return items[:limit]
    return items
