"""Benchmarks of the collector against peers measured in the same run.

One entry point: ``python -m bench NAME [options]`` (``--help`` lists the
benches; no NAME runs the full set, as ``make bench`` does). Subpackages by
subject: ``foundation`` (the hot paths on one core), ``push``, ``query``,
``fleet`` (cluster-scale: agent, status page, shards, remote write, RSS),
``scale``, ``load`` and ``soak``; ``kit`` is what they share (processes and
ports, timing, the simulated cluster and its monitor farm, the one writer of
``bench/results/``). The fakes they share with the tests live in ``testing``.
Never collected by pytest; everything runs on loopback, bounded in count and time.
"""
