"""A person signs in to the pages in Debian's chromium, headless, driven over the DevTools protocol.

The collector checks tokens with FakeKube (read auth kubernetes; team-a's and
team-b's pods hold GPUs; alice may list pods in team-a only). The browser opens a
view, is sent to the form, signs in as alice by typing her token and pressing the
button, sees team-a and never team-b on the views and in the REST answers they
link, cannot read its own cookie from the page's scripts, signs out and is sent
back to the form.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from browser import Tab, devtools
from test_read_auth import TENANT, collector

from collector.auth.signin import COOKIE, DEFAULT_LIFETIME
from testing.fakekube import FakeKube

ROWS = "[...new Set([...document.querySelectorAll('tr[data-namespace]')].map(r => r.dataset.namespace))]"
"""The namespaces of a view's rows, each once, as the page shows them."""


async def fetched(tab: Tab, path: str) -> dict[str, Any]:
    """GET ``path`` from the page's own script (the browser sends what it sends for the page)."""
    found: dict[str, Any] = await tab.evaluate(
        f"fetch({path!r}).then(async r => ({{status: r.status, type: r.headers.get('content-type'),"
        " text: await r.text()}))"
    )
    return found


@pytest.mark.timeout(180)  # one browser start, some seconds on a busy machine
async def test_a_tenant_signs_in_sees_only_its_namespaces_and_signs_out(
    fake: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    async with collector(fake, kubeconfig) as reads, devtools(tmp_path / "profile") as tab:
        base = reads.url
        await tab.go(f"{base}/workloads?refresh=0")
        assert await tab.where() == "/login?next=%2Fworkloads%3Frefresh%3D0"
        assert await tab.evaluate("document.title") == "Sign in · hami-usage-collector"
        assert await tab.evaluate("document.querySelector('#signout')") is None

        await tab.fill("#token", reads.tenant)
        await tab.click("#signin button")
        assert await tab.where() == "/workloads?refresh=0"
        assert await tab.evaluate(ROWS) == ["team-a"]
        header = await tab.evaluate("document.querySelector('header').innerText")
        assert f"{TENANT}: namespaces team-a" in header
        assert "Sign out" in header

        assert await tab.evaluate("document.cookie") == ""  # HttpOnly: no script sees the token
        (kept,) = [c for c in await tab.cookies() if c["name"] == COOKIE]
        assert kept["value"] == reads.tenant
        assert (kept["httpOnly"], kept["sameSite"], kept["secure"]) == (True, "Strict", False)
        assert kept["path"] == "/"
        assert time.time() < kept["expires"] <= time.time() + DEFAULT_LIFETIME + 1

        pods = await fetched(tab, "/api/v1/pods")  # the REST GETs the pages link
        assert pods["status"] == 200
        assert "team-a" in pods["text"]
        assert "team-b" not in pods["text"]
        await tab.go(f"{base}/namespaces?refresh=0")
        csv = await tab.evaluate("document.querySelector('a.csv').getAttribute('href')")
        download = await fetched(tab, csv)
        assert (download["status"], download["type"]) == (200, "text/csv; charset=utf-8")
        assert "team-b" not in download["text"]
        metrics = await fetched(tab, "/metrics")  # machines' surfaces: the cookie opens none
        assert metrics["status"] == 401
        await tab.go(f"{base}/?refresh=0")
        assert "team-b" not in await tab.evaluate("document.body.innerText")
        assert (await fetched(tab, "/status"))["status"] == 403  # cluster readers' only

        await tab.go(f"{base}/workloads?refresh=0")
        await tab.click("#signout button")
        assert await tab.where() == "/login"
        assert [c for c in await tab.cookies() if c["name"] == COOKIE] == []
        await tab.go(f"{base}/workloads?refresh=0")
        assert await tab.where() == "/login?next=%2Fworkloads%3Frefresh%3D0"
