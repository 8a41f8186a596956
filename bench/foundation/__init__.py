"""The hot paths on one core: ingest, the /metrics page and serving it, memory, the heap task."""
