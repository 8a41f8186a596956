"""hami-agent: reads HAMi-core shared regions and NVML on a GPU node and pushes them."""

__version__ = "0.1.0"
