"""Remote write: the store's series, as they change, sent to Prometheus-compatible receivers.

:mod:`~collector.remote.encode` makes the wire bytes, :mod:`~collector.remote.queue`
holds and sends them per destination, :mod:`~collector.remote.writer` turns the
store's changes into samples and fans them out.
"""
