"""Who is reading, and what they may see: the one value every read surface filters by.

The read-authorization middleware (:mod:`collector.auth.readers`) puts an
:class:`Access` on each request it lets through; every surface (the Prometheus
API, REST, chargeback, ``/metrics``, the status page) reads it with
:func:`access_of` and filters *before* it computes anything. Without read
authorization (``--read-auth none``) every request is a cluster reader.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web


@dataclass(frozen=True, slots=True)
class Access:
    """An identity and the namespaces it may read; ``namespaces`` None: every series.

    A tenant (``namespaces`` a set, maybe empty) sees only series whose
    ``namespace`` label is one of its namespaces: never a card's, a node's or
    the collector's own series, which have none.
    """

    identity: str
    namespaces: frozenset[str] | None = None

    @property
    def cluster(self) -> bool:
        """Whether this reader sees the whole cluster."""
        return self.namespaces is None

    def sees(self, namespace: str | None) -> bool:
        """Whether a series with this ``namespace`` label (None: none) is visible."""
        return self.namespaces is None or (namespace is not None and namespace in self.namespaces)


CLUSTER = Access("anonymous")
"""The reader of a collector without read authorization."""

ACCESS = web.RequestKey("access", Access)
"""Where the middleware keeps the request's :class:`Access`."""


def access_of(request: web.Request) -> Access:
    """The request's reader; a cluster reader where no middleware set one."""
    found: Access = request.get(ACCESS, CLUSTER)
    return found
