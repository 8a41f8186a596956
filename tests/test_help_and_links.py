"""What a new user reads first: ``--help`` with every default, and README links that resolve."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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


@pytest.mark.parametrize("document", _documents(), ids=lambda p: p.name)
def test_relative_links_resolve_inside_the_repository(document: Path) -> None:
    missing = []
    for target in _LINK.findall(document.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor of the same page
        path = (document.parent / target.split("#")[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            missing.append(target)
    assert not missing, f"{document.name} links to what the repository lacks: {missing}"
