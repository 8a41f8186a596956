"""The import graph follows the data's trip: no arrow against it, no package cycle.

Every module of the product (``core``, ``agent``, ``collector``, ``simulator``) is read as
source; its imports (top level and inside functions) are checked against the
layers below. A module may import its own layer or a lower one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    (
        "agent",
        "collector.compiled",
        "collector.schema",
        "collector.labelsets",
        "collector.allocation",
        "collector.exposition",
    ),
    ("collector.batch", "collector.tsdb"),
    ("collector.normalise", "collector.layout", "collector.promql"),
    ("collector.store",),
    ("collector.selfmetrics",),
    ("collector.settings", "collector.sources"),
    ("collector.web", "collector.remote"),
    ("collector.app",),
    ("simulator",),
    ("collector.cli", "collector.__main__"),
)
"""Lowest first. The query engine reads the history's types only; sources never reach an output."""

FORBIDDEN: tuple[tuple[str, str], ...] = (
    ("agent", "collector"),
    ("core", "collector"),
    ("core", "agent"),
    ("collector.promql", "collector.store"),
    ("collector.promql", "collector.normalise"),
    ("collector.promql", "collector.layout"),
    ("collector.tsdb", "collector.promql"),
)
"""(importer, imported) prefixes that must never meet, whatever the layers say."""

SIMULATOR_USES_AGENT = {
    "simulator.agentloop": "agent",
    "simulator.regions": "agent.region_layout",
    "simulator.kubelet": "agent.podresources",
}
"""Where the simulator may reach into the agent: the module that runs the real agent in-process,
the region writer, which takes its offsets from the reader's layout, and the kubelet, which
serves the proto the agent's stubs were generated from."""


def _modules() -> Iterator[tuple[str, Path]]:
    for package in ("core", "agent", "collector", "simulator"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def _imports(module: str, path: Path) -> Iterator[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _layer(name: str) -> int | None:
    found = [
        (len(prefix), rank)
        for rank, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if _within(name, prefix)
    ]
    return max(found)[1] if found else None


def _edges() -> list[tuple[str, str]]:
    ours = ("core", "agent", "collector", "simulator")
    return [
        (module, imported)
        for module, path in _modules()
        for imported in _imports(module, path)
        if imported.split(".")[0] in ours
    ]


def test_every_product_module_has_a_layer() -> None:
    unplaced = [m for m, _ in _modules() if _layer(m) is None and m not in ("agent", "collector")]
    assert unplaced == []


def test_no_import_goes_against_the_data() -> None:
    wrong = []
    for module, imported in _edges():
        if imported in ("collector", "agent"):  # the package roots hold only __version__
            continue
        if _within(module, "simulator") and _within(imported, "agent"):
            allowed = SIMULATOR_USES_AGENT.get(module)
            if allowed is None or not _within(imported, allowed):
                wrong.append(f"{module} -> {imported} (see SIMULATOR_USES_AGENT)")
            continue
        low, high = _layer(imported), _layer(module)
        assert low is not None, imported
        assert high is not None, module
        if low > high:
            wrong.append(f"{module} -> {imported}")
    assert wrong == []


@pytest.mark.parametrize(("importer", "imported"), FORBIDDEN)
def test_forbidden_pairs_never_meet(importer: str, imported: str) -> None:
    found = [f"{m} -> {i}" for m, i in _edges() if _within(m, importer) and _within(i, imported)]
    assert found == []


def test_no_package_imports_another_that_imports_it_back() -> None:
    def package(name: str) -> str:
        parts = name.split(".")
        return ".".join(parts[:2]) if parts[0] == "collector" else parts[0]

    graph: dict[str, set[str]] = {}
    for module, imported in _edges():
        a, b = package(module), package(imported)
        if a != b and b not in ("collector", "agent"):
            graph.setdefault(a, set()).add(b)
    cycles = sorted(
        f"{a} <-> {b}" for a, deps in graph.items() for b in deps if a in graph.get(b, ())
    )
    assert cycles == []


def test_the_checker_sees_a_wrong_arrow(tmp_path: Path) -> None:
    """The rules are not vacuous: a module of a low layer importing a high one is found."""
    source = tmp_path / "store.py"
    source.write_text("from collector.web.metrics import MetricsPage\nfrom . import schema\n")
    found = list(_imports("collector.store", source))
    assert found == ["collector.web.metrics", "collector"]
    assert _layer("collector.web.metrics") > _layer("collector.store")  # type: ignore[operator]
