"""The soak's shape: sizes, intervals, the schedule of faults, scaled with ``SOAK_MINUTES``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Plan:
    """The run's shape; times in seconds."""

    minutes: float
    monitors: int = 20
    spares: int = 4
    agents: int = 4
    cards: int = 4
    allocations: int = 12
    interval: float = 3.0
    timeout: float = 2.5
    agent_interval: float = 2.0
    history_retention: float = 120.0
    """Short, so the history is full (its memory steady) early in the run."""
    agent_backoff: float = 30.0
    """The agent's longest wait between two failed pushes (agent/push.py)."""
    seed: int = 7
    every: dict[str, float] = field(
        default_factory=lambda: {
            "workload": 3.0,
            "rollout": 20.0,
            "replace": 45.0,
            "fault": 15.0,
            "refused": 10.0,
            "check": 5.0,
        }
    )

    @property
    def seconds(self) -> float:
        return self.minutes * 60.0

    @property
    def stale_after(self) -> float:
        return 3 * self.interval

    @property
    def grace(self) -> float:
        """Time for a change to show: a scrape, a watch event, an expiry tick, a read."""
        return self.interval + self.timeout + 4.0

    @property
    def outage(self) -> float:
        """The API server's outage: a minute in an hour's run, scaled, at least 10 s."""
        return max(10.0, self.minutes)

    @property
    def warmup(self) -> float:
        """Seconds of a collector's life before its tasks and descriptors are judged."""
        return min(120.0, 0.2 * self.seconds)

    @property
    def memory_warmup(self) -> float:
        """Seconds of a collector's life before its RSS is judged: its history is full then."""
        return self.history_retention + 30.0

    def once(self) -> list[tuple[float, str]]:
        """One-off faults, at fractions of the run."""
        marks = [
            (0.15, "cut watches"),
            (0.22, "410 gone"),
            (0.30, "kill agents"),
            (0.40, "api down"),
            (0.60, "kill collector"),
            (0.72, "410 gone"),
            (0.80, "kill agents"),
            (0.88, "cut watches"),
        ]
        return [(f * self.seconds, what) for f, what in marks]


@dataclass
class Sample:
    """One sample of the collector's resources."""

    t: float
    pid: int
    rss_mib: float
    fds: int
    tasks: float
    targets: float
