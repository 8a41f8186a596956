"""A PromQL evaluator over the collector's short history, for Grafana and promtool.

Parsing is promql-parser's (Prometheus' own grammar, in Rust); this package
evaluates the subset real dashboards of these metrics use, and refuses anything
else with an ``execution`` error naming the feature, never a wrong answer.
"""
