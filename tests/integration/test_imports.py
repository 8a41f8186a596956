"""The import graph follows the data's trip: no arrow against it, no package cycle.

Every module of the product (``core``, ``agent``, ``collector``, ``simulator``) is read as
source; its imports (top level and inside functions) are checked against the
layers below. A module may import its own layer or a lower one.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("collector.auth",),
    (
        "agent",
        "collector.compiled",
        "collector.memory",
        "collector.normalise.schema",
        "collector.normalise.labelsets",
        "collector.normalise.allocation",
        "collector.normalise.registration",
        "collector.exposition",
    ),
    ("collector.normalise.batch", "collector.tsdb"),
    ("collector.normalise", "collector.promql"),
    ("collector.store",),
    ("collector.selfmetrics",),
    ("collector.settings", "collector.sources"),
    ("collector.views", "collector.remote"),
    ("collector.web",),
    ("collector.app",),
    ("simulator",),
    ("collector.cli", "collector.__main__"),
)
"""Lowest first, the data's trip: the schema and its formats, the history, normalise and the
query engine, the store, the sources; then the read model and remote write, which read the
store; the web, which serves them. Who is asking (``collector.auth``) sits under every stage
that asks it (sources' pushes, web's reads) and imports none of them. The query engine reads
the history's types only; sources never reach an output."""

FORBIDDEN: tuple[tuple[str, str], ...] = (
    ("agent", "collector"),
    ("core", "collector"),
    ("core", "agent"),
    ("collector.promql", "collector.store.latest"),
    ("collector.promql", "collector.normalise.bodies"),
    ("collector.promql", "collector.normalise.layout"),
    ("collector.tsdb", "collector.promql"),
    ("collector.tsdb", "collector.exposition"),
    ("collector.web", "collector.sources"),
    ("collector.views", "collector.sources"),
    ("collector.web.ui", "collector.web.rest"),
    ("collector.web.rest", "collector.web.ui"),
)
"""(importer, imported) prefixes that must never meet, whatever the layers say. The pages read
the sources' state through :mod:`collector.views.sourcestate`'s structural types, which the
sources satisfy without importing them: neither the web nor the read model imports a source."""

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
    """What ``module`` imports; ``from package import module`` is the module imported."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                inner = f"{base}.{alias.name}"
                yield inner if _is_module(inner) else base


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


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
    source.write_text("from collector.web.metrics import MetricsPage\nfrom .. import settings\n")
    found = list(_imports("collector.store.latest", source))
    assert found == ["collector.web.metrics", "collector.settings"]
    assert _layer("collector.web.metrics") > _layer("collector.store.latest")  # type: ignore[operator]


AUTH = "collector.auth"
"""The one package that reads credentials and asks the API server about them."""
REVIEW_CALLS = frozenset(
    {
        "create_token_review",
        "create_subject_access_review",
        "V1TokenReview",
        "V1SubjectAccessReview",
    }
)
"""What reviewing a token or an identity's rights takes from kubernetes_asyncio."""


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _names_the_header(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.lower() == "authorization"
    return isinstance(node, ast.Attribute) and node.attr == "AUTHORIZATION"  # aiohttp.hdrs


def _writes(node: ast.AST, parent: ast.AST | None) -> bool:
    """Whether the header name is used to build an outgoing request's headers:
    ``headers["Authorization"] = ...`` or a dict literal's key."""
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return isinstance(parent.ctx, ast.Store)
    return isinstance(parent, ast.Dict) and any(key is node for key in parent.keys)


def _header_reads(source: str) -> list[int]:
    """Lines of ``source`` that read the ``Authorization`` header (name it other than to set it)."""
    tree = ast.parse(source)
    parents = _parents(tree)
    return [
        node.lineno  # type: ignore[attr-defined]
        for node in ast.walk(tree)
        if _names_the_header(node) and not _writes(node, parents.get(node))
    ]


def _review_calls(source: str) -> list[int]:
    """Lines of ``source`` naming what a TokenReview or SubjectAccessReview is made with."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if (isinstance(node, ast.Attribute) and node.attr in REVIEW_CALLS)
        or (isinstance(node, ast.Name) and node.id in REVIEW_CALLS)
        or (isinstance(node, ast.alias) and node.name in REVIEW_CALLS)
    ]


def _outside_auth(find: Callable[[str], list[int]]) -> list[str]:
    return [
        f"{module}:{line}"
        for module, path in _modules()
        if not _within(module, AUTH)
        for line in find(path.read_text())
    ]


def test_only_auth_reads_the_authorization_header() -> None:
    """Credentials are read in one place: one parser, one set of rules for Bearer and Basic."""
    assert _outside_auth(_header_reads) == []
    assert _header_reads((ROOT / "collector" / "auth" / "headers.py").read_text()) != []


def test_only_auth_reviews_tokens() -> None:
    """One TokenReview client and cache: pushes, reads and sign-ins share it."""
    assert _outside_auth(_review_calls) == []
    assert _review_calls((ROOT / "collector" / "auth" / "reviews.py").read_text()) != []


def test_the_auth_rules_catch_a_reader_and_let_a_writer_be() -> None:
    """The rules are not vacuous: each way of reading the header or making a review is found;
    setting the header on an outgoing request is not a read."""
    reads = """
token = request.headers.get("Authorization", "")
if "authorization" in request.headers:
    pass
value = request.headers[hdrs.AUTHORIZATION]
"""
    assert _header_reads(reads) == [2, 3, 5]
    writes = """
headers["Authorization"] = f"Bearer {token}"
sent = {"Authorization": basic.encode(), "Accept": "*/*"}
"""
    assert _header_reads(writes) == []
    reviews = """
from kubernetes_asyncio.client import V1TokenReview
await api.create_subject_access_review(review)
"""
    assert _review_calls(reviews) == [2, 3]
