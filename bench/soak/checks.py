"""The soak's oracle: what one read of ``/metrics`` must show, given the simulated cluster's state.

Pure functions of a page and the nodes' states, so their own logic is tested
(``tests/unit/test_soak_checks.py``) apart from the soak. A node is judged only
once its state has been settled for ``grace`` seconds (a scrape, a watch
event, an expiry tick), and a node that must go is given ``stale_after``
more: that is the promise under test, "no ghost series for more than
``stale_after``".
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

SeriesKey = tuple[str, frozenset[tuple[str, str]]]
"""A series identity: name plus its full label set (as ``testing/oracle.py`` has it)."""
OWN = "hami_usage_collector_"
REFUSED_PREFIX = "gpu-refused-"
"""Node names of the pushes the soak sends to be refused: never to be seen."""


@dataclass
class Page:
    """One read of ``/metrics``: the data series by node, duplicates, our own series."""

    series: dict[str, set[SeriesKey]] = field(default_factory=dict)
    duplicates: list[str] = field(default_factory=list)
    own: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    def value(self, name: str, default: float = 0.0) -> float:
        """Sum of our own family ``name`` over its label sets."""
        return sum(v for _, v in self.own.get(name, [])) if name in self.own else default


def parse_page(text: str) -> Page:
    """Parse a text-format page (prometheus_client's parser) into a :class:`Page`."""
    page = Page()
    seen: Counter[SeriesKey] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            seen[key] += 1
            if sample.name.startswith(OWN):
                page.own.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
            else:
                page.series.setdefault(sample.labels.get("node", ""), set()).add(key)
    page.duplicates = [f"{name}{dict(labels)}" for (name, labels), n in seen.items() if n > 1]
    return page


@dataclass(frozen=True)
class NodeState:
    """What the oracle knows of one node at the time of a read."""

    name: str
    live: bool
    """Served by a healthy source (monitor up and not failing, or agents running)."""
    since: float
    """Monotonic time the node's state last changed."""
    expected: frozenset[SeriesKey] | None = None
    """The series a correct collector shows for it (None: only its presence is judged)."""
    pods: frozenset[str] | None = None
    """Pods its series must name (agent nodes: attribution through the pod watch)."""


@dataclass
class Verdict:
    """Problems found in one read; ``mismatched`` nodes are judged again at the next read."""

    problems: list[str] = field(default_factory=list)
    mismatched: set[str] = field(default_factory=set)
    passed: Counter[str] = field(default_factory=Counter)
    """Judgements that held, by kind: the checks were not vacuous."""


def judge(
    page: Page,
    nodes: Iterable[NodeState],
    now: float,
    quiet_until: float,
    grace: float,
    stale_after: float,
    mismatched_before: set[str],
) -> Verdict:
    """The problems ``page`` shows at monotonic time ``now``.

    Nothing is judged before ``quiet_until`` (a collector restart, an API
    outage). A node whose series differ from the oracle's is a problem only if
    it differed at the previous read too (a pod churned between the scrape and
    this read is no fault).
    """
    verdict = Verdict()
    out = verdict.problems
    out.extend(f"duplicate series: {d}" for d in page.duplicates[:5])
    feeding = page.own.get(OWN + "node_source_info", [])
    counted = Counter(labels.get("node", "") for labels, _ in feeding)
    out.extend(f"node {n} fed by {c} sources at once" for n, c in counted.items() if c > 1)
    states = {s.name: s for s in nodes}
    for name in page.series:
        if name.startswith(REFUSED_PREFIX):
            out.append(f"node {name} shown: a refused push was accepted")
        elif name not in states:
            out.append(f"node {name} shown: no such node")
    if now < quiet_until:
        return verdict
    for state in states.values():
        settled = now - max(state.since, quiet_until - grace)
        shown = page.series.get(state.name)
        if state.live and settled > grace and not shown:
            out.append(f"node {state.name} missing ({settled:.0f} s after its last change)")
        elif not state.live and settled > grace + stale_after:
            if shown:
                out.append(f"ghost: node {state.name} shown {settled:.0f} s after it went")
            else:
                verdict.passed["gone node absent"] += 1
        elif state.live and shown and settled > grace:
            problem = _content(state, shown)
            if problem:
                verdict.mismatched.add(state.name)
                if state.name in mismatched_before:
                    out.append(problem)
            else:
                verdict.passed[_content_kind(state)] += 1
    return verdict


def _content_kind(state: NodeState) -> str:
    if state.expected is not None:
        return "live node's series equal the oracle's"
    return "live agent node's pods attributed" if state.pods is not None else "live node shown"


def _content(state: NodeState, shown: set[SeriesKey]) -> str | None:
    """How a live node's series differ from the oracle's, if they do."""
    if state.expected is not None and shown != state.expected:
        missing, extra = state.expected - shown, shown - state.expected
        name, labels = min(missing or extra)
        return (
            f"node {state.name}: {len(missing)} series missing, {len(extra)} extra "
            f"(e.g. {name} {dict(labels)})"
        )
    if state.pods is not None:
        pods = {pod for _, labels in shown if (pod := dict(labels).get("pod")) is not None}
        if pods != state.pods:
            wrong, absent = sorted(pods - state.pods)[:2], sorted(state.pods - pods)[:2]
            return f"node {state.name}: pods {wrong} shown that should not be, {absent} missing"
    return None


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(seconds, value)`` points, per hour (0 with fewer than 3)."""
    if len(points) < 3:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 3600.0


def largest_gap(stamps: list[float], start: float, end: float) -> float:
    """The longest stretch of ``[start, end]`` without a point of ``stamps`` (seconds)."""
    inside = sorted(t for t in stamps if start <= t <= end)
    edges = [start, *inside, end]
    return max(b - a for a, b in itertools.pairwise(edges))
