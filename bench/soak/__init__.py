"""The soak: the collector for an hour of churn and faults, checked against the simulator."""
