"""Thousands of monitors pulled by one collector, beside vmagent and Prometheus."""
