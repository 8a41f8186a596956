"""Content types both programs serve and read."""

from __future__ import annotations

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus text exposition format 0.0.4."""

OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
"""OpenMetrics 1.0.0 text."""
