"""The history: what the store's views looked like over the last hour, and how to select from it.

The query engine (:mod:`collector.promql`) reads it through
:class:`~collector.tsdb.series.Queryable`; nothing here knows about PromQL.
"""
