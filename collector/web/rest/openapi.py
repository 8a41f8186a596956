"""The OpenAPI 3.1 document of the REST API, generated from the endpoint table and the models.

Everything in it is read by the API's users: :data:`DESCRIPTION`, the endpoints'
summaries and parameters, and the models' docstrings and field descriptions, in plain
text (Markdown where any), without the developers' words (roles, module names, ``await``).
``tests/integration/test_help_and_links.py`` reads the served document for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from collector import __version__
from collector.views.models import JSON, Error
from collector.web.rest.endpoints import ENDPOINTS, Endpoint, Param

DESCRIPTION = """\
What each node, card and vGPU container of the cluster is using right now, as JSON; and, \
under `/api/v1/usage`, what each namespace, pod or node was allocated and used over a window \
of the collector's history (chargeback, also as CSV).

Each vGPU row carries its allocation (what its pod requested) next to its usage. Every answer \
is built from one state of the collector's data and names it (`generation`): answers with the \
same generation saw the same data.

Errors share one envelope, `{"status": "error", "error": "not_found", "message": "…"}`; \
a bad query parameter is named in the message."""
"""The document's own description: the API in its users' terms."""

_ERRORS = {
    400: ("BadRequest", "A query parameter is unknown, repeated or invalid; the message names it."),
    404: ("NotFound", "No such node or pod has data."),
    422: ("TooManySamples", "The report would read more points than --query-max-samples."),
    503: ("Timeout", "The report took longer than --query-timeout."),
}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of :data:`ENDPOINTS`, schemas generated from the models."""
    models: list[type[BaseModel]] = [Error]
    models += [e.response for e in ENDPOINTS if e.response is not None]
    refs, definitions = models_json_schema(
        [(m, "serialization") for m in models], ref_template="#/components/schemas/{model}"
    )
    ref = {m: refs[(m, "serialization")] for m in models}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "hami-usage-collector",
            "version": __version__,
            "description": DESCRIPTION,
        },
        "paths": {e.path: {"get": _operation(e, ref)} for e in ENDPOINTS},
        "components": {
            "schemas": definitions.get("$defs", {}),
            "responses": {
                name: {
                    "description": description,
                    "content": {JSON: {"schema": ref[Error]}},
                }
                for name, description in _ERRORS.values()
            },
        },
    }


def _operation(endpoint: Endpoint, ref: Mapping[type[BaseModel], Any]) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": {
            "description": endpoint.summary,
            "content": {
                JSON: {
                    "schema": ref[endpoint.response]
                    if endpoint.response is not None
                    else {"type": "object", "description": "an OpenAPI 3.1 document"}
                }
            },
        }
    }
    if endpoint.csv:
        responses["200"]["content"]["text/csv"] = {
            "schema": {"type": "string", "description": "a header row, then one row per item"}
        }
    for status in endpoint.errors:
        responses[str(status)] = {"$ref": f"#/components/responses/{_ERRORS[status][0]}"}
    operation: dict[str, Any] = {
        "operationId": endpoint.operation,
        "summary": endpoint.summary,
        "responses": responses,
    }
    if endpoint.params:
        operation["parameters"] = [_parameter(p) for p in endpoint.params]
    return operation


def _parameter(param: Param) -> dict[str, Any]:
    return {
        "name": param.name,
        "in": param.where,
        "required": param.where == "path",
        "description": param.description,
        "schema": dict(param.schema),
    }
