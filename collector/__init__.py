"""hami-usage-collector: one cluster-wide, correctly labelled view of vGPU usage."""

__version__ = "0.1.0"
