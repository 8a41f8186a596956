"""The agent's install holds the agent only: nothing its modules import comes with the collector's extra.

``scripts/check-agent-install`` (``make wheel-check``) installs ``.[agent]`` from the
registry and checks what pip resolved. This is the suite's fast half, without a network:
every module of the agent is imported in a fresh interpreter, and each third-party module
it loaded is traced to the distributions that installed it (their metadata, here): none may
be one that only the collector's extra brings, its requirements' requirements included.
A new import of numpy (or of anything else of the collector's) in the agent fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
OURS = ("agent", "core", "collector", "simulator")
HEAVY = ("numba", "llvmlite", "numpy", "kubernetes-asyncio", "jinja2")
"""What the image of both programs carried for the collector: ~300 MiB of its ~390."""

_IMPORT_EVERY_AGENT_MODULE = """
import importlib, json, pkgutil, sys
import agent
for info in pkgutil.walk_packages(agent.__path__, "agent."):
    if info.name.rpartition(".")[2] != "__main__":
        importlib.import_module(info.name)
print(json.dumps(sorted({name.partition(".")[0] for name in sys.modules})))
"""


def _agent_modules() -> list[str]:
    """The top-level modules a fresh interpreter holds once it imported every agent module."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_EVERY_AGENT_MODULE],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    names: list[str] = json.loads(done.stdout)
    return [n for n in names if n not in sys.stdlib_module_names and n not in OURS]


def _closure(lines: Iterable[str]) -> set[str]:
    """The distributions requirement ``lines`` install, theirs included (markers evaluated here)."""
    found: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[Requirement, tuple[str, ...]]] = [(Requirement(line), ("",)) for line in lines]
    while todo:
        requirement, extras = todo.pop()
        if requirement.marker is not None and not any(
            requirement.marker.evaluate({"extra": extra}) for extra in extras
        ):
            continue
        name = canonicalize_name(requirement.name)
        if (name, frozenset(requirement.extras)) in seen:
            continue
        seen.add((name, frozenset(requirement.extras)))
        found.add(name)
        try:
            requires = metadata.requires(requirement.name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: a marker kept it out of this environment
        todo += [(Requirement(line), ("", *requirement.extras)) for line in requires]
    return found


@cache
def _collector_only() -> frozenset[str]:
    """Distributions that ``.[collector]`` installs and ``.[agent]`` does not (pyproject.toml's)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base, extras = project["dependencies"], project["optional-dependencies"]
    return frozenset(_closure(base + extras["collector"]) - _closure(base + extras["agent"]))


def _only_the_collectors(module: str) -> bool:
    """Whether every distribution that installs top-level ``module`` comes only with the collector."""
    owners = {canonicalize_name(d) for d in metadata.packages_distributions().get(module, [])}
    return bool(owners) and owners <= _collector_only()


def test_the_agent_imports_nothing_that_only_the_collector_installs() -> None:
    modules = _agent_modules()
    assert "pydantic" in modules, "the agent's modules were imported"
    assert [m for m in modules if m.replace("_", "-") in HEAVY] == []
    assert [m for m in modules if _only_the_collectors(m)] == []


def test_the_collectors_own_dependencies_are_the_heavy_ones() -> None:
    """The check above is not vacuous: the modules it must refuse are traced to the collector."""
    assert set(HEAVY) <= _collector_only()
    for module in ("numpy", "numba", "llvmlite", "kubernetes_asyncio", "jinja2", "aiohttp"):
        assert _only_the_collectors(module), module
    for module in ("pydantic", "grpc", "pynvml", "yaml", "prometheus_client"):
        assert not _only_the_collectors(module), module
