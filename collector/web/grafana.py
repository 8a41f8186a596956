"""The rest of what Grafana's Prometheus datasource asks of ``/prometheus/api/v1/``.

Prometheus 2.42's answers for a server with no exemplar storage, no rule files
and no alerts, each validated as 2.42 validates it (``web/api/v1/api.go`` at
``v2.42.0``):

- ``query_exemplars`` (GET and POST): ``start``/``end`` parsed (bad: ``bad_data``),
  ``end`` before ``start`` refused, ``query`` parsed (bad: ``bad_data``, the parse
  error alone); ``data`` is ``[]``; a query without a selector (``1+1``) is
  answered 204 with no body, as by 2.42. Grafana sends ``query=test`` here on loading
  the datasource: a success shows exemplar support, which then finds none.
- ``rules`` (GET): ``{"groups": []}``; ``type`` is ``alert``, ``record`` or empty,
  any case, else ``bad_data``. Grafana reads recording rules from it on load.
- ``alerts`` (GET): ``{"alerts": []}``.
- ``format_query`` (GET and POST): the parser's canonical text of ``query``
  (promql-parser's ``prettify()``, Prometheus' ``Pretty(0)``); bad: ``bad_data``
  ``invalid parameter "query": ...``.

None of them carries data of any series, so a tenant
(:class:`~collector.auth.access.Access` with namespaces) gets the same answers
as a cluster reader.
"""

from __future__ import annotations

import math
from typing import Any

import promql_parser
from aiohttp import web

from collector.promql.limits import check_depth
from collector.promql.params import parse_time
from collector.promql.values import QueryError
from collector.web.promapi import PREFIX, _enveloped, _Params

_RULE_TYPES = ("", "alert", "record")


def routes() -> list[web.RouteDef]:
    """The endpoints, with GET and (form) POST where Prometheus 2.42 has both."""
    out = [
        web.route(method, PREFIX + path, _enveloped(handler))
        for path, handler in (
            ("/query_exemplars", query_exemplars),
            ("/format_query", format_query),
        )
        for method in ("GET", "POST")
    ]
    out.append(web.get(PREFIX + "/rules", _enveloped(rules)))
    out.append(web.get(PREFIX + "/alerts", _enveloped(alerts)))
    return out


def _parse(text: str, param: str | None) -> promql_parser.Expr:
    """``text`` parsed; a parse error is ``bad_data``, prefixed with ``param`` if given."""
    check_depth(text)
    try:
        expr: promql_parser.Expr = promql_parser.parse(text)
    except (ValueError, RuntimeError) as exc:
        prefix = "" if param is None else f'invalid parameter "{param}": '
        raise QueryError("bad_data", f"{prefix}{exc}") from None
    return expr


def _has_selector(expr: promql_parser.Expr) -> bool:
    """Whether ``expr`` reads any series (Prometheus' ``ExtractSelectors`` finds one)."""
    found: list[bool] = []

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(True)
            return False
        return True

    promql_parser.walk(expr, visit)
    return bool(found)


def _time(params: _Params, name: str, default: float) -> float:
    return parse_time(params.one(name), name) if params.has(name) else default


async def query_exemplars(params: _Params) -> Any:
    """No exemplars are kept: ``[]`` for a valid request, Prometheus' errors for a bad one."""
    start = _time(params, "start", -math.inf)
    end = _time(params, "end", math.inf)
    if end < start:
        raise QueryError("bad_data", "end timestamp must not be before start timestamp")
    query = params.one("query") if params.has("query") else ""
    if not _has_selector(_parse(query, None)):
        return web.Response(status=204)  # 2.42's answer: no selector, no data, no body
    return []


async def rules(params: _Params) -> Any:
    """No rule groups; ``type`` (``alert`` or ``record``) read from the URL, as 2.42 does."""
    kind = params.request.query.get("type", "").lower()
    if kind not in _RULE_TYPES:
        raise QueryError("bad_data", f'invalid parameter "type": not supported value "{kind}"')
    return {"groups": []}


async def alerts(params: _Params) -> Any:
    """No alerts."""
    return {"alerts": []}


async def format_query(params: _Params) -> Any:
    """``query`` in the parser's canonical form."""
    query = params.one("query") if params.has("query") else ""
    return _parse(query, "query").prettify()
