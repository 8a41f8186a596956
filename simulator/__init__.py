"""The embedded demo: a deterministic simulated cluster (monitors, agents on simulated cards, pods) that `hami-collector demo` serves."""
