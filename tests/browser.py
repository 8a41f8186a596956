"""Debian's chromium, headless, driven by the browser tests of the collector's pages.

``make tools`` fetches it into .tools/chromium; each call starts one browser that
loads a page and writes its DOM (``--dump-dom``) or a screenshot (``--screenshot=``)
while the test's event loop keeps serving the page.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = ROOT / ".tools" / "chromium" / "run"


def chromium() -> Path:
    """The chromium launcher; fails the test, naming the fix, when it was not fetched."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make tools` (make test does it)")
    return CHROMIUM


async def browse(profile: Path, *args: str, timeout: float = 60.0) -> str:
    """Run headless chromium with ``args``; return its stdout. The loop serves meanwhile."""
    process = await asyncio.create_subprocess_exec(
        chromium(),
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"chromium took longer than {timeout}s: {args}") from None
    assert process.returncode == 0, err.decode(errors="replace")[-2000:]
    return out.decode()


async def page_and_shot(profile: Path, shot: Path, url: str, size: tuple[int, int]) -> str:
    """Load ``url`` once: its DOM, and a screenshot of that same page at ``size`` into ``shot``."""
    width, height = size
    return await browse(
        profile,
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        f"--screenshot={shot}",
        "--dump-dom",
        url,
    )


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG, from its header; fails on anything else."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    assert head[12:16] == b"IHDR", head
    width, height = struct.unpack(">II", head[16:24])
    return width, height
