"""What a new user reads first: ``--help`` with every default, links and references that
resolve, and an API document in its users' words."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from collector.app import STORE
from collector.store.latest import Store
from collector.web.rest.handlers import RestApi

ROOT = Path(__file__).resolve().parents[2]
CHART_README = ROOT / "charts" / "hami-usage-collector" / "README.md"
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize(
    "command",
    [("collector", "serve"), ("agent", "run"), ("collector", "demo"), ("collector",), ("agent",)],
)
def test_help_shows_each_default_without_markup(command: tuple[str, ...]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", *command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"COLUMNS": "1000", "PATH": ""},
    )
    text = done.stdout
    assert "``" not in text
    assert not re.search(r":[a-z]+:`", text), "no reStructuredText role"
    assert "SUPPRESS" not in text
    options = re.split(r"\n(?=  -)", text.partition("options:")[2])
    flags = [o for o in options if re.match(r"\s+--(?!help|version|config)", o)]
    assert flags or len(command) == 1, "a subcommand has flags"
    undocumented = [o.split()[0] for o in flags if "default" not in o]
    assert not undocumented, undocumented


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@cache
def _sections(document: Path) -> dict[str, str]:
    """Each heading's anchor, as GitHub makes it, with the text under it (to the next heading).

    GitHub's anchor: the heading's text in lower case, without what is neither a letter, a
    digit, ``_``, ``-`` nor a space, spaces made ``-``; a repeated one gets ``-1``, ``-2``...
    Lines of a fenced code block are no headings.
    """
    sections: dict[str, str] = {"": ""}
    current, fenced = "", False
    for line in document.read_text().splitlines():
        if re.match(r"\s*(```|~~~)", line):
            fenced = not fenced
        heading = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading is None:
            sections[current] += line + "\n"
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        current = slug
        for n in range(1, 100):
            if current not in sections:
                break
            current = f"{slug}-{n}"
        sections[current] = ""
    return sections


@pytest.mark.parametrize("document", _documents(), ids=lambda p: p.name)
def test_relative_links_resolve_inside_the_repository(document: Path) -> None:
    missing = []
    for target in _LINK.findall(document.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        file, _, anchor = target.partition("#")
        path = (document.parent / file).resolve() if file else document
        if not path.is_relative_to(ROOT) or not path.exists():
            missing.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _sections(path):
            missing.append(f"{target} (no such heading)")
    assert not missing, f"{document.name} links to what the repository lacks: {missing}"


_README_REFERENCE = re.compile(
    r"(?P<chart>chart )?README's (?:"
    r'"(?P<quoted>[^"]+)"'
    r"|\[(?P<linked>[^\]]+)\]\([^)]*\)(?: (?P<linked_kind>section|tables?))?"
    r"|(?P<named>[A-Z][\w-]*(?: [A-Z][\w-]*)*) (?P<kind>section|tables?))"
)
"""``the README's "Heading"``, ``[Heading](...)`` or ``Heading section`` / ``tables``."""


def _wrong_references(text: str) -> list[str]:
    """The references of ``text`` to a README heading that the README lacks, each with its context."""
    text = " ".join(text.split())
    wrong = []
    for mention in re.finditer(r"README's", text):
        found = _README_REFERENCE.match(text, max(0, mention.start() - len("chart ")))
        found = found or _README_REFERENCE.match(text, mention.start())
        context = text[max(0, mention.start() - 30) : mention.end() + 40]
        if found is None:
            wrong.append(f"names no heading: ...{context}...")
            continue
        readme = CHART_README if found["chart"] else ROOT / "README.md"
        name = found["quoted"] or found["linked"] or found["named"]
        kind = found["kind"] or found["linked_kind"] or "section"
        sections = _sections(readme)
        slug = re.sub(r"[^\w\- ]", "", name.lower()).replace(" ", "-")
        if slug not in sections:
            wrong.append(f"{readme.relative_to(ROOT)} has no heading {name!r}: ...{context}...")
        elif kind.startswith("table") and not re.search(r"^\|", sections[slug], re.M):
            wrong.append(f"{readme.relative_to(ROOT)}'s {name!r} holds no table: ...{context}...")
    return wrong


@pytest.mark.parametrize("document", _documents(), ids=lambda p: p.name)
def test_every_readme_reference_names_what_the_readme_holds(document: Path) -> None:
    assert _wrong_references(document.read_text()) == []


def test_the_reference_check_refuses_a_heading_or_table_the_readme_lacks() -> None:
    """What operations.md once said of the README is refused; what it holds is not."""
    stale = (
        "installation in the README's [Deploy](../README.md#deploy) section.",
        "is in the README's\n[Configuration](../README.md#configuration) tables (collector and agent)",
        "See the README's Deploy section for the exact rules.",
        "see the README's Benchmarks section",
        "the README's opening lines",
    )
    for text in stale:
        assert len(_wrong_references(text)) == 1, text
    held = (
        "the README's [Security](../README.md#security) section",
        "the README's Documentation table",
        'The chart README\'s "Autoscaling on GPU usage" has the manifests',
    )
    for text in held:
        assert _wrong_references(text) == [], text


def _texts(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every description and summary of an OpenAPI document, with where it is."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("description", "summary") and isinstance(item, str):
                yield f"{where}/{key}", item
            else:
                yield from _texts(item, f"{where}/{key}")
    elif isinstance(value, list):
        for n, item in enumerate(value):
            yield from _texts(item, f"{where}[{n}]")


_DEVELOPERS_WORDS = re.compile(
    r":[a-z]+:`"  # a reStructuredText role: :mod:`...`, :func:`...`, :class:`...`
    r"|``"  # reStructuredText's literal
    r"|\bawait\b|\basync\b|event loop|coroutine|synchronous|docstring"
    r"|\b(?:collector|core|agent|simulator)\.[a-z_]+",  # a module of ours
    re.IGNORECASE,
)


async def test_the_api_document_speaks_in_its_users_words() -> None:
    app = web.Application()
    app[STORE] = Store(60)
    app.router.add_routes(RestApi(STORE, 15.0).routes())
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/api/v1/openapi.json")
        assert resp.status == 200
        document = await resp.json()
    texts = list(_texts(document))
    assert len(texts) > 100, "every schema, field, endpoint and parameter was read"
    assert "/info/description" in dict(texts)
    wrong = [(where, text) for where, text in texts if _DEVELOPERS_WORDS.search(text)]
    assert wrong == []
