"""The collector's own series about each remote-write destination."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_PREFIX = "hami_usage_collector_remote_write_"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def redact(url: str) -> str:
    """``url`` without user info, query or fragment: safe for a label and a log line."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class RemoteStats:
    """The families of every destination; one :class:`DestinationStats` per URL."""

    def __init__(self, registry: CollectorRegistry, changed: Callable[[], None]) -> None:
        r, label = registry, ["url"]
        self.changed = changed
        self.sent = Counter(
            _PREFIX + "samples_sent", "Samples the receiver accepted.", label, registry=r
        )
        self.failed = Counter(
            _PREFIX + "samples_failed",
            "Samples the receiver refused with a 4xx other than 429 (dropped, not retried).",
            label,
            registry=r,
        )
        self.dropped = Counter(
            _PREFIX + "samples_dropped",
            "Samples dropped, oldest first, because the queue was full.",
            label,
            registry=r,
        )
        self.retried = Counter(
            _PREFIX + "samples_retried",
            "Samples sent again after a 5xx, a 429 or a connection failure.",
            label,
            registry=r,
        )
        self.pending = Gauge(
            _PREFIX + "samples_pending", "Samples queued, not yet accepted.", label, registry=r
        )
        self.last_success = Gauge(
            _PREFIX + "last_success_timestamp_seconds",
            "When the receiver last accepted a request (Unix time).",
            label,
            registry=r,
        )
        self.latency = Histogram(
            _PREFIX + "send_duration_seconds",
            "Time of one successful request, from send to answer.",
            label,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )

    def destination(self, url: str) -> DestinationStats:
        """The counters of one destination, labelled with its redacted URL."""
        return DestinationStats(self, redact(url))


class DestinationStats:
    """Counts for one destination; every change is told to the page cache."""

    def __init__(self, stats: RemoteStats, name: str) -> None:
        self.name = name
        self._changed = stats.changed
        self._sent = stats.sent.labels(name)
        self._failed = stats.failed.labels(name)
        self._dropped = stats.dropped.labels(name)
        self._retried = stats.retried.labels(name)
        self._pending = stats.pending.labels(name)
        self._last_success = stats.last_success.labels(name)
        self._latency = stats.latency.labels(name)
        self.totals = dict.fromkeys(("sent", "failed", "dropped", "retried", "pending"), 0)
        """The same counts as plain numbers, for logs, the status page and tests."""
        self.last_success: float | None = None
        """When the receiver last accepted a request (Unix time)."""
        self.last_error = ""
        """What went wrong with the latest request that failed, for the status page."""
        self.failing = False
        """Whether the latest request failed (it is retried, or its samples were refused)."""

    def queued(self, samples: int, dropped: int) -> None:
        """``samples`` were queued, and ``dropped`` older ones went to make room."""
        self._pending.inc(samples - dropped)
        self.totals["pending"] += samples - dropped
        self.totals["dropped"] += dropped
        if dropped:
            self._dropped.inc(dropped)
        self._changed()

    def sent(self, samples: int, seconds: float, now: float) -> None:
        """A request of ``samples`` was accepted after ``seconds``."""
        self._sent.inc(samples)
        self._pending.dec(samples)
        self.totals["sent"] += samples
        self.totals["pending"] -= samples
        self._last_success.set(now)
        self.last_success = now
        self.failing = False
        self._latency.observe(seconds)
        self._changed()

    def trouble(self, problem: str) -> None:
        """A request failed with ``problem`` (a short line without credentials)."""
        self.last_error = problem
        self.failing = True

    def failed(self, samples: int) -> None:
        """A request of ``samples`` was refused for good."""
        self._failed.inc(samples)
        self._pending.dec(samples)
        self.totals["failed"] += samples
        self.totals["pending"] -= samples
        self._changed()

    def retried(self, samples: int) -> None:
        """A request of ``samples`` will be sent again."""
        self._retried.inc(samples)
        self.totals["retried"] += samples
        self._changed()
