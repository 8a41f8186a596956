"""Debian's chromium, headless, driven by the browser tests of the collector's pages.

``make tools`` fetches it into .tools/chromium. :func:`browse` starts one browser
that loads a page and writes its DOM (``--dump-dom``) or a screenshot
(``--screenshot=``) while the test's event loop keeps serving the page. Where a
test must act on a page (fill a form, press a button, read what a script sees),
:func:`devtools` drives the browser over the Chrome DevTools Protocol instead: a
websocket (aiohttp's client) to the port the browser writes into its profile's
``DevToolsActivePort``, one command at a time, every wait bounded.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import struct
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import eventually

ROOT = Path(__file__).resolve().parents[2]
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


class DevToolsError(AssertionError):
    """A DevTools command failed, or the browser went away (a wait past its time is a
    :class:`TimeoutError`)."""


class Tab:
    """One page of a browser driven over the DevTools protocol, attached as one flat session.

    Commands are sent and answered one at a time on the test's loop; the events that
    arrive meanwhile are kept, in order, until a wait looks for them, so an event is
    never missed between a command and the wait for what it causes.
    """

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, timeout: float) -> None:
        self._ws = ws
        self._timeout = timeout
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []
        self.session: str | None = None

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, browser: bool = False
    ) -> Any:
        """Send ``method`` (to this page's session, or the browser's with ``browser``); its result."""
        sent = next(self._ids)
        message: dict[str, Any] = {"id": sent, "method": method, "params": params or {}}
        if self.session is not None and not browser:
            message["sessionId"] = self.session
        await self._ws.send_json(message)
        async with asyncio.timeout(self._timeout):
            while True:
                answer = await self._receive()
                if answer.get("id") != sent:
                    self._events.append(answer)
                elif "error" in answer:
                    raise DevToolsError(f"{method}: {answer['error']}")
                else:
                    return answer.get("result", {})

    async def _receive(self) -> dict[str, Any]:
        message = await self._ws.receive()
        if message.type is not aiohttp.WSMsgType.TEXT:
            raise DevToolsError(f"the browser's DevTools socket said {message.type.name}")
        found: dict[str, Any] = json.loads(message.data)
        return found

    async def event(self, method: str) -> dict[str, Any]:
        """The first kept or coming event ``method`` of this page (it is used up)."""
        async with asyncio.timeout(self._timeout):
            while True:
                for kept in self._events:
                    if kept.get("method") == method and kept.get("sessionId") == self.session:
                        self._events.remove(kept)
                        return dict(kept.get("params", {}))
                self._events.append(await self._receive())

    async def loads(self, action: Awaitable[Any]) -> None:
        """Run ``action`` (a navigation, a click) and wait until the page it leads to has loaded."""
        self._events = [e for e in self._events if e.get("method") != "Page.loadEventFired"]
        await action
        await self.event("Page.loadEventFired")

    async def go(self, url: str) -> None:
        """Navigate to ``url`` (redirects followed) and wait for the page's load."""

        async def navigate() -> None:
            answer = await self.call("Page.navigate", {"url": url})
            if answer.get("errorText"):
                raise DevToolsError(f"{url}: {answer['errorText']}")

        await self.loads(navigate())

    async def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` as the page's own scripts see it (a promise awaited)."""
        answer = await self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in answer:
            raise DevToolsError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def click(self, selector: str) -> None:
        """Press the element ``selector`` names, as a person would, and wait for the next page."""
        press = f"document.querySelector({json.dumps(selector)}).click()"
        await self.loads(self.evaluate(press))

    async def fill(self, selector: str, value: str) -> None:
        """Type ``value`` into the field ``selector`` names."""
        await self.evaluate(
            f"document.querySelector({json.dumps(selector)}).value = {json.dumps(value)}"
        )

    async def where(self) -> str:
        """The page's path and query."""
        found: str = await self.evaluate("location.pathname + location.search")
        return found

    async def cookies(self) -> list[dict[str, Any]]:
        """Every cookie the browser keeps, with the flags it keeps them with."""
        found: list[dict[str, Any]] = (await self.call("Storage.getCookies", browser=True))[
            "cookies"
        ]
        return found


def _fresh(profile: Path) -> tuple[Path, Path]:
    """The profile's ``DevToolsActivePort`` (none yet: an old one names a closed port) and
    the browser's log file."""
    profile.mkdir(parents=True, exist_ok=True)
    active = profile / "DevToolsActivePort"
    active.unlink(missing_ok=True)
    return active, profile.parent / "chromium.log"


@asynccontextmanager
async def devtools(profile: Path, timeout: float = 30.0) -> AsyncIterator[Tab]:
    """A headless chromium with a blank page to drive over the DevTools protocol; stopped after.

    The browser picks its debugging port (``--remote-debugging-port=0``) and writes it,
    with the browser's websocket path, into ``DevToolsActivePort`` in its profile.
    Its log goes to ``chromium.log`` beside the profile: shown if it does not start.
    """
    active, log = _fresh(profile)
    with log.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            chromium(),
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=sink,
        )
    try:

        async def written() -> bool:
            if process.returncode is not None:
                raise DevToolsError(f"chromium exited: {log.read_text(errors='replace')[-2000:]}")
            return active.exists() and len(active.read_text().split()) == 2

        await eventually(written, timeout, "chromium's DevToolsActivePort")
        port, path = active.read_text().split()
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(f"ws://127.0.0.1:{port}{path}", max_msg_size=0) as ws,
        ):
            tab = Tab(ws, timeout)
            target = await tab.call("Target.createTarget", {"url": "about:blank"})
            attached = await tab.call(
                "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
            )
            tab.session = attached["sessionId"]
            await tab.call("Page.enable")
            yield tab
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except TimeoutError:
                process.kill()
                await process.wait()
