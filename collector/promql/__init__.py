"""A PromQL evaluator over the collector's short history, for Grafana and promtool.

Parsing is promql-parser's (Prometheus' own grammar, in Rust); this package
evaluates Prometheus 2.42's language over float samples, and refuses what lies
outside it (native histograms, functions newer than 2.42) with an
``execution`` error naming the feature, never a wrong answer.

A query goes plan, select, evaluate: :mod:`.plan` turns the parsed query into
a small tree, :mod:`.select` reads each selector once from the storage (when
each part is evaluated is :mod:`.timing`'s), :mod:`.evaluate` walks the tree
once over whole arrays (:mod:`.arrays`) with the lookups of :mod:`.lookup`,
the operators of :mod:`.binary` and :mod:`.aggregate` and the functions of
:mod:`.instant`, :mod:`.relabel`, :mod:`.ranges` and :mod:`.histogram`
(``histogram_quantile`` over classic buckets); :mod:`.ranking` ranks and
sorts as Prometheus' Go code does, ties included. :mod:`.query` holds the
entry points, :mod:`.limits` a query's time and sample budget, :mod:`.values`
the result types, :mod:`.floats` Go's float arithmetic and formatting.
"""
