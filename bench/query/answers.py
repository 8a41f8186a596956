"""Comparing answers: ours and Prometheus', as series -> points."""

from __future__ import annotations

import json
import math
from typing import Any

from collector.promql.values import Element, RangeSeries

Points = list[tuple[float, float]]
Answer = dict[tuple[tuple[str, str], ...], Points]


def _key(labels: Any) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def from_json(body: bytes) -> Answer:
    """A Prometheus API answer (vector or matrix) as series -> points."""
    data = json.loads(body)
    if data.get("status") != "success":
        raise RuntimeError(f"query failed: {body[:300]!r}")
    result = data["data"]["result"]
    if data["data"]["resultType"] == "vector":
        return {_key(s["metric"]): [(float(s["value"][0]), float(s["value"][1]))] for s in result}
    return {_key(s["metric"]): [(float(t), float(v)) for t, v in s["values"]] for s in result}


def from_ours(result: Any, at: float) -> Answer:
    """Our evaluator's answer as series -> points."""
    out: Answer = {}
    for s in result:
        if isinstance(s, Element):
            out[_key(s.labels)] = [(at, s.value)]
        elif isinstance(s, RangeSeries):
            out[_key(s.labels)] = list(s.points)
    return out


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def differences(want: Answer, got: Answer) -> list[str]:
    """How ``got`` differs from ``want`` (Prometheus'): label sets, timestamps, values."""
    problems = []
    if want.keys() != got.keys():
        missing, extra = want.keys() - got.keys(), got.keys() - want.keys()
        problems.append(f"{len(missing)} series missing, {len(extra)} extra")
    for k in want.keys() & got.keys():
        w, g = want[k], got[k]
        if [t for t, _ in w] != [t for t, _ in g]:
            problems.append(f"{dict(k)}: {len(g)} timestamps, Prometheus {len(w)}")
        elif not all(_same(a, b) for (_, a), (_, b) in zip(w, g, strict=True)):
            problems.append(f"{dict(k)}: values differ")
    return problems


def per_step(answer: Answer) -> dict[float, list[float]]:
    """Each timestamp's values, whatever series holds them, ascending (NaN as +inf)."""
    steps: dict[float, list[float]] = {}
    for points in answer.values():
        for t, v in points:
            steps.setdefault(t, []).append(math.inf if math.isnan(v) else v)
    return {t: sorted(vs) for t, vs in steps.items()}


def same_per_step(want: Answer, got: Answer) -> bool:
    """Whether each timestamp holds the same values in both, whichever series hold them:
    what ``topk`` agrees on where tied series are picked otherwise."""
    a, b = per_step(want), per_step(got)
    return a.keys() == b.keys() and all(
        len(a[t]) == len(b[t]) and all(map(_same, a[t], b[t])) for t in a
    )


def agreement(want: Answer, got: Answer) -> dict[str, Any]:
    """Whether two answers agree, with counts and the first problems."""
    problems = differences(want, got)
    return {
        "agree": not problems and bool(want),
        "same_per_step": same_per_step(want, got),
        "series": len(want),
        "points": sum(len(p) for p in want.values()),
        "problems": len(problems),
        "first_problems": problems[:5],
    }
