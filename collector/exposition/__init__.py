"""Prometheus exposition formats: parsing monitor bodies and rendering our own."""
