"""Rules read from the source itself, each with a test that its checker finds what it forbids.

- Every task has an owner: no module of the product makes one except ``core/tasks.py``,
  whose :class:`~core.tasks.Supervisor` and :class:`~core.tasks.Flights` cancel and
  await theirs; an ``asyncio.TaskGroup``'s own tasks, awaited at the end of its block,
  are the one other way.
- A device's UUID is cut to its label's length in one place,
  :func:`collector.normalise.labelsets.device_uuid`.
- Comments and docstrings that name a file (``collector/web/metrics.py``,
  ``docs/ui.md``), a module (``python -m bench.coldstart``, :mod:`collector.memory.heap`)
  or a name in one (:func:`core.durations.duration`) name one that exists.
"""

from __future__ import annotations

import ast
import io
import itertools
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PRODUCT = ("core", "agent", "collector", "simulator")
"""The packages that run in the programs (as ``tests/integration/test_imports.py`` reads them)."""
TASK_OWNER = ROOT / "core" / "tasks.py"
"""The one module that makes tasks."""
MAKES_A_TASK = frozenset({"create_task", "ensure_future", "run_coroutine_threadsafe"})
"""What asyncio makes a task with, as a function of the module or a method of a loop."""

CODE = ("agent", "bench", "collector", "core", "fuzz", "simulator", "testing", "tests")
"""Folders whose Python comments and docstrings are read for the names of files."""
WRITTEN = ("bench/results/",)
"""Where programs write what they make: a name there need not exist yet, its folder must."""
NOT_PATHS = {"core/v1": "the Kubernetes API group of pods and services"}
"""Words that look like one of our paths and are not one."""
ELSEWHERE = ("prometheus/",)
"""GitHub owners whose repositories' files are named as ``owner/repository/path``."""
SUFFIXES = ("py", "md", "yaml", "yml", "json", "toml", "txt", "test", "proto")
"""What the name of a file ends with, for names written relative to a folder."""


# --- every task has an owner ---------------------------------------------------------


def _task_groups(tree: ast.AST) -> set[ast.AST]:
    """The ``group.create_task(...)`` calls inside ``async with asyncio.TaskGroup() as group``."""
    owned: set[ast.AST] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.AsyncWith):
            continue
        for item in node.items:
            made = item.context_expr
            if not (isinstance(made, ast.Call) and isinstance(item.optional_vars, ast.Name)):
                continue
            func = made.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called != "TaskGroup":
                continue
            group = item.optional_vars.id
            owned |= {
                call
                for statement in node.body
                for call in ast.walk(statement)
                if isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "create_task"
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id == group
            }
    return owned


def task_makers(source: str) -> list[int]:
    """Lines of ``source`` that make a task no TaskGroup owns."""
    tree = ast.parse(source)
    owned = _task_groups(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or node in owned:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in MAKES_A_TASK:
            found.append(node.lineno)
    return sorted(found)


def _product() -> Iterator[Path]:
    for package in PRODUCT:
        yield from sorted((ROOT / package).rglob("*.py"))


def test_no_task_is_made_outside_its_owner() -> None:
    """A task made anywhere else would be fire-and-forget: nothing would cancel or await it
    at shutdown, and its crash would surface only when it is collected."""
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in _product()
        if path != TASK_OWNER
        for line in task_makers(path.read_text())
    ]
    assert found == []
    assert task_makers(TASK_OWNER.read_text()) != [], "the owner itself is read"


def test_the_task_scan_finds_each_way_of_making_one() -> None:
    source = """
import asyncio
from asyncio import ensure_future
asyncio.create_task(work())
loop.create_task(work())
asyncio.ensure_future(work())
ensure_future(work())
asyncio.run_coroutine_threadsafe(work(), loop)
async def owned():
    async with asyncio.TaskGroup() as group:
        group.create_task(work())
    other.create_task(work())
"""
    assert task_makers(source) == [4, 5, 6, 7, 8, 12]


# --- one cut of a device's UUID --------------------------------------------------------

UUID_CUT = ROOT / "collector" / "normalise" / "labelsets.py"
"""The module whose ``device_uuid`` is the one cut."""


LABEL_LENGTH = ("40", "UUID_LENGTH", "labelsets.UUID_LENGTH")
"""How the label's length is written: HAMi's monitors keep 40 characters of a UUID."""


def uuid_cuts(source: str) -> list[int]:
    """Lines of ``source`` that cut something named for a UUID to the label's length."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Slice)
        and node.slice.lower is None
        and node.slice.upper is not None
        and ast.unparse(node.slice.upper) in LABEL_LENGTH
        and "uuid" in ast.unparse(node.value).lower()
    )


def test_a_device_uuid_is_cut_in_one_place() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in _product()
        if path != UUID_CUT
        for line in uuid_cuts(path.read_text())
    ]
    assert found == []
    assert uuid_cuts(UUID_CUT.read_text()) != [], "the one cut is read"


def test_the_uuid_scan_finds_a_cut() -> None:
    source = """
label = (uuid_of(group) or "")[:40]
other = result.device_uuid[:labelsets.UUID_LENGTH]
kept = uuid[8:]
name = node[:40]
shown = labels["device_uuid"][:12]
"""
    assert uuid_cuts(source) == [2, 3]


# --- names of files in comments and docstrings ---------------------------------------


def _roots() -> str:
    return "|".join(
        sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
    )


_PATH = re.compile(rf"(?<![\w./~-])((?:{_roots()})/[\w.*{{}},/-]*[\w*}}/])")
"""A path from the repository's root: one of its folders, then names."""
_RELATIVE = re.compile(rf"(?<![\w./~-])([\w-]+(?:/[\w-]+)*/[\w.-]+\.(?:{'|'.join(SUFFIXES)}))\b")
"""A path from some folder of ours (``<folder>/<file>.py``): a folder or more, then a file."""
_MODULE = re.compile(
    r"(?:python -m |:(?:mod|func|class|meth|data|attr|exc):`~?)"
    rf"((?:{'|'.join(CODE)})(?:\.\w+)+)"
)
"""A module of ours (``python -m bench.coldstart``, :mod:`collector.memory.heap`), or a name
in one."""


def prose(source: str) -> Iterator[tuple[int, str]]:
    """Each comment and docstring of ``source`` (module, class, function and attribute
    docstrings: every string that stands alone as a statement), with its first line."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            yield node.lineno, node.value.value


def _expanded(path: str) -> list[str]:
    """``a.{md,json}`` as ``a.md`` and ``a.json``."""
    parts = re.split(r"\{([^{}]*)\}", path)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(chosen) for chosen in itertools.product(*choices)]


def _exists(path: str) -> bool:
    if path in NOT_PATHS:
        return True
    if path.startswith(WRITTEN):
        return (ROOT / path).parent.is_dir()
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


def _bound(node: ast.stmt) -> list[str]:
    """The names a top-level statement binds."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(alias.asname or alias.name).split(".")[0] for alias in node.names]
    return []


def _defines(path: Path, name: str) -> bool:
    """Whether the module at ``path`` binds ``name`` at its top level."""
    return any(name in _bound(node) for node in ast.parse(path.read_text()).body)


def _module_exists(dotted: str) -> bool:
    """Whether ``dotted`` is a module of ours, or a module and a name it binds (a class's
    attribute after that is not followed)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        module = (
            base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        )
        if module.is_file():
            return end == len(parts) or _defines(module, parts[end])
    return False


def missing_names(source: str, where: Path) -> list[str]:
    """The files and modules that the comments and docstrings of ``source`` (the file at
    ``where``) name and that do not exist; a relative path may start at the repository's
    root, at ``where``'s folder or at its top folder (``collector/``, ``bench/``)."""
    top = ROOT / where.relative_to(ROOT).parts[0]
    bases = (ROOT, where.parent, top)
    missing: set[str] = set()
    for line, text in prose(source):
        for match in _PATH.finditer(text):
            path = match.group(1).rstrip(".,")
            if not all(_exists(p) for p in _expanded(path)):
                missing.add(f"{line}: {path}")
        for match in _RELATIVE.finditer(text):
            path = match.group(1)
            if _PATH.fullmatch(path) or path.startswith(ELSEWHERE):
                continue
            if not any((base / path).exists() for base in bases):
                missing.add(f"{line}: {path}")
        for match in _MODULE.finditer(text):
            if not _module_exists(match.group(1)):
                missing.add(f"{line}: {match.group(1)}")
    return sorted(missing, key=lambda found: (int(found.split(":")[0]), found))


def test_comments_and_docstrings_name_files_that_exist() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{name}"
        for folder in CODE
        for path in sorted((ROOT / folder).rglob("*.py"))
        for name in missing_names(path.read_text(), path)
    ]
    assert found == []


def test_the_name_scan_finds_a_missing_file_and_lets_real_ones_be() -> None:
    where = ROOT / "collector" / "web" / "metrics.py"
    source = '''"""Measured with ``bench/scale.py`` (see docs/benchmarks.md#figures, rules/).

Written to ``bench/results/query_small.{json,md}`` and ``bench/results/later.*``.
"""
# the cache (rest/cache.py) beside web/metrics.py, ui/namespaces.py,
# prometheus/exporter-toolkit/docs/web-configuration.md and tests/nothing_here.py
# the core/v1 API; python -m bench.heap; :func:`core.durations.duration`
X = 1
"""After :mod:`collector.memory.heap` and :func:`core.durations.nowhere`."""
'''
    assert missing_names(source, where) == [
        "1: bench/scale.py",
        "5: rest/cache.py",
        "6: tests/nothing_here.py",
        "7: bench.heap",
        "9: core.durations.nowhere",
    ]
