"""The query surfaces over one hour of a 1,000-node cluster, beside a real Prometheus."""
