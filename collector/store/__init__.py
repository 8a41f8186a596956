"""The latest good batch of every source, per node (:mod:`.latest`); its history is :mod:`collector.tsdb`."""
