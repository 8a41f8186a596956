"""A PromQL evaluator over the collector's short history, for Grafana and promtool.

Parsing is promql-parser's (Prometheus' own grammar, in Rust); this package
evaluates the subset real dashboards of these metrics use, and refuses anything
else with an ``execution`` error naming the feature, never a wrong answer.

A query goes plan, select, evaluate: :mod:`.plan` turns the parsed query into
a small tree, :mod:`.select` reads each selector once from the storage and
finds its points at each step, :mod:`.evaluate` walks the tree at each step
with the operators of :mod:`.binary` and :mod:`.aggregate` and the functions of
:mod:`.instant` and :mod:`.ranges`. :mod:`.query` holds the two entry points,
:mod:`.values` the types, :mod:`.floats` Go's float arithmetic.
"""
