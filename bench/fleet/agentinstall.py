"""The node agent's install and memory: its own image's ``.[agent]`` against both programs' install.

Why: every GPU node pulls the agent's image, and the one image of before held
both programs (the collector's numba, llvmlite, numpy, kubernetes_asyncio, …).
Goals: the agent's installed site-packages at most 100 MiB, and its RSS no
higher than with both programs installed (the image of before).

Setup: ``scripts/check-agent-install`` makes each install, the Dockerfile's
steps (the wheel, a fresh virtualenv, ``<wheel>[extras]`` from the registry in
binary wheels, pip removed): once with ``--extras agent`` (its checks included),
once with ``--extras agent,collector``; its figure is the sum of the sizes of
site-packages' files. Then each install's own ``hami-agent run --no-nvml``
(without ``PYTHONPATH``: the installed code, not this tree's) runs on
:func:`bench.fleet.agent.write_node`'s 8 cards and 64 regions against
:func:`bench.fleet.agent.measure`'s stub collector, and its ``VmRSS`` and
``VmHWM`` are read from ``/proc`` after :data:`bench.fleet.agent.WARMUP_PUSHES`
+ :data:`bench.fleet.agent.WINDOW_PUSHES` pushes. The two installs take turns,
:data:`ROUNDS` rounds each, in this one run.

Results go to ``bench/results/agent-install.md`` and ``.json``.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.fleet.agent import measure, plain_command, write_node
from bench.kit.table import write_result

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check-agent-install"
AGENT = "agent"
BOTH = "agent,collector"
"""The extras of the agent's image, and of the one image of before."""
ROUNDS = 2
GOAL_SITE_PACKAGES_MIB = 100.0


def install(extras: str, folder: Path) -> dict[str, Any]:
    """``extras`` installed by the check script into ``folder/venv``; its figures."""
    figures = folder / "install.json"
    subprocess.run(
        [sys.executable, SCRIPT, "--extras", extras, "--venv", folder / "venv", "--json", figures],
        check=True,
        timeout=900,
    )
    result: dict[str, Any] = json.loads(figures.read_text())
    return result


def installed_command(venv: Path, root: Path) -> Callable[[str], list[str]]:
    """The bench's plain agent, run by the install's own ``hami-agent`` without ``PYTHONPATH``."""
    plain = plain_command(root)

    def command(collector: str) -> list[str]:
        flags = plain(collector)[3:]  # after "python -m agent"
        # env execs the program: the PID measured is the agent's
        return ["env", "-u", "PYTHONPATH", str(venv / "bin" / "hami-agent"), *flags]

    return command


def run(rounds: int = ROUNDS) -> dict[str, Any]:
    """Both installs' sizes, then their agents' memory in turns; written to ``agent-install.*``."""
    with tempfile.TemporaryDirectory(prefix="bench-agent-install-") as folder:
        work = Path(folder)
        installs = {extras: install(extras, work / extras) for extras in (AGENT, BOTH)}
        regions = work / "regions"
        write_node(regions)
        memory: dict[str, list[dict[str, Any]]] = {AGENT: [], BOTH: []}
        for _ in range(rounds):
            for extras in (AGENT, BOTH):
                command = installed_command(work / extras / "venv", regions)
                memory[extras].append(asyncio.run(measure(command)))
    rss = {e: statistics.median(m["rss_mib"] for m in runs) for e, runs in memory.items()}
    peak = {e: statistics.median(m["rss_mib_peak"] for m in runs) for e, runs in memory.items()}
    size = {e: installs[e]["site_packages_mib"] for e in installs}
    # "no higher" beyond what the same install moves between two of its own runs
    spread = max(
        max(m["rss_mib"] for m in runs) - min(m["rss_mib"] for m in runs)
        for runs in memory.values()
    )
    result = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "rounds": rounds,
        "installs": installs,
        "memory": memory,
        "site_packages_mib": size,
        "rss_mib": rss,
        "rss_mib_peak": peak,
        "rss_mib_spread_within_an_install": spread,
        "goal_site_packages_mib": GOAL_SITE_PACKAGES_MIB,
        "meets_goal": size[AGENT] <= GOAL_SITE_PACKAGES_MIB and rss[AGENT] - rss[BOTH] <= spread,
    }
    write_result("agent-install", markdown(result), result)
    return result


def markdown(r: dict[str, Any]) -> str:
    """``agent-install.md``: the run, the table, how it was measured."""
    size, rss, peak = r["site_packages_mib"], r["rss_mib"], r["rss_mib_peak"]
    bare = statistics.median(m["bare_python_rss_mib"] for m in r["memory"][AGENT])
    lines = [
        "# The agent's install",
        "",
        f"{r['date']}, Python {r['python']}, {r['cpus']} CPUs, {r['rounds']} rounds of each install"
        " in turns.",
        "",
        "| figure | `.[agent]` (the agent's image) | `.[agent,collector]` (the image of before) |",
        "|---|---|---|",
        f"| site-packages | {size[AGENT]:.1f} MiB | {size[BOTH]:.1f} MiB |",
        f"| distributions | {len(r['installs'][AGENT]['distributions'])}"
        f" | {len(r['installs'][BOTH]['distributions'])} |",
        f"| agent RSS after {r['memory'][AGENT][0]['pushes']} pushes, median | {rss[AGENT]:.1f} MiB"
        f" | {rss[BOTH]:.1f} MiB |",
        f"| agent peak RSS (VmHWM), median | {peak[AGENT]:.1f} MiB | {peak[BOTH]:.1f} MiB |",
        "",
        f"Goal: site-packages ≤ {r['goal_site_packages_mib']:g} MiB and RSS no higher than with"
        " both programs installed, beyond the spread between runs of one install"
        f" ({r['rss_mib_spread_within_an_install']:.2f} MiB):"
        f" {'met' if r['meets_goal'] else 'NOT met'}. A bare Python process:"
        f" {bare:.1f} MiB RSS.",
        "",
        "Each install is `scripts/check-agent-install --extras E` (the Dockerfile's steps);"
        " each agent is the install's own `hami-agent run --no-nvml --interval 5` on 8 cards"
        " and 64 HAMi-core regions, pushing to a stub collector. Every figure: "
        "`agent-install.json`.",
        "",
        f"`.[agent]`: {', '.join(r['installs'][AGENT]['distributions'])}.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    """Run it and print the table."""
    print(markdown(run()))


if __name__ == "__main__":
    main()
