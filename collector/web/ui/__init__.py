"""The collector's own pages for people: the overview, nodes, workloads, namespaces and status.

Server-rendered HTML (:mod:`.layout`), numbers in units a person reads
(:mod:`.units`), inline SVG charts (:mod:`.charts`); every number comes from
the REST API's read model, so a page and ``/api/v1`` never disagree; the status
page reads the sources' own state (:mod:`collector.views.sourcestate`).
"""
