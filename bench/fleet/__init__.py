"""Cluster-scale benches: the agent's footprint, the status page, shards, remote write, whole-process memory."""
