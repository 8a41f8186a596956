"""The shipped alerts through a real Alertmanager 0.25, routed per namespace to webhooks.

The demo (``simulator.run.demo_app``) serves its cluster; a real vmalert 1.79
evaluates ``rules/hami-usage.rules.yaml`` as shipped against the demo's
``/prometheus`` and notifies a real Alertmanager started on 127.0.0.1 with
``rules/alertmanager.example.yml``, its webhook URLs pointed at a sink in this
test (and its group waits shortened: they only delay the first notification).

``HamiGPUXidError`` (no ``for:``) reaches the sink: the demo's device-plugin
node posts an XID as it starts. It carries ``node`` but no namespace: the
cluster's operators get it. Every other notification that arrives meanwhile must
be at the receiver its namespace routes to. (The namespaced alerts,
``HamiVGPUMemoryNearLimit`` with ``for: 5m`` and ``HamiGPUAllocationIdle`` after
two idle hours, do not fire within a test's time on the demo, and vmalert 1.79
has no flag that shortens a ``for:``.)

The recording rules of the file need a remote-write destination: a sink that
accepts everything.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from helpers import eventually, real_vmalert, reserved_port, serving

from simulator.run import PLUGIN_NODE, demo_app
from testing.processes import stop

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "rules" / "hami-usage.rules.yaml"
EXAMPLE = ROOT / "rules" / "alertmanager.example.yml"
BIN = ROOT / ".tools" / "alertmanager" / "usr" / "bin"
ALERTMANAGER = BIN / "prometheus-alertmanager"
AMTOOL = BIN / "amtool"
TEMPLATES = ROOT / ".tools" / "alertmanager" / "usr" / "share" / "prometheus" / "alertmanager"
ALERTMANAGER_START_TIMEOUT = 30.0


def binary(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is missing: `make tools` fetches it (scripts/fetch-alertmanager)")
    return path


def test_example_config_checks() -> None:
    """``amtool check-config`` accepts the example as shipped."""
    done = subprocess.run(
        [binary(AMTOOL), "check-config", EXAMPLE],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def receivers_at(sink: str, folder: Path) -> Path:
    """The example config with each webhook at ``sink``/<receiver> and short group waits."""
    config = yaml.safe_load(EXAMPLE.read_text())
    for receiver in config["receivers"]:
        for hook in receiver["webhook_configs"]:
            hook["url"] = f"{sink}/{receiver['name']}"
    config["route"].update(group_wait="1s", group_interval="1s")
    path = folder / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [binary(AMTOOL), "check-config", path], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return path


@contextmanager
def real_alertmanager(work: Path, config: Path) -> Iterator[str]:
    """A real Alertmanager on a loopback port, without clustering, ready; stopped at the end."""
    log_path = work / "alertmanager.log"
    for template in TEMPLATES.glob("*.tmpl"):  # default.tmpl, email.tmpl
        shutil.copy(template, work / template.name)
    with reserved_port() as port, log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                binary(ALERTMANAGER),
                f"--config.file={config}",
                f"--storage.path={work / 'alertmanager-data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=work,  # where scripts/fetch-alertmanager points it for its templates
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + ALERTMANAGER_START_TIMEOUT
            while not _ready(f"{url}/-/ready"):
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"alertmanager did not start: {log_path.read_text()}")
                time.sleep(0.1)  # a bounded poll, as in helpers._wait_ready()
            yield url
        finally:
            stop(process)


def _ready(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


class Sink:
    """The webhook receivers: every notification Alertmanager posts, by receiver."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append((request.match_info["receiver"], await request.json()))
        return web.Response()

    def alerts(self, receiver: str, name: str) -> list[dict[str, str]]:
        """The labels of every firing ``name`` alert ``receiver`` got."""
        return [
            alert["labels"]
            for got, body in self.received
            if got == receiver
            for alert in body["alerts"]
            if alert["status"] == "firing" and alert["labels"]["alertname"] == name
        ]


async def _accept(_: web.Request) -> web.Response:
    return web.Response(status=204)


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[str]:
    """The demo's app on a loopback port, as tests/test_demo_attribution.py serves it."""
    (tmp_path / "demo").mkdir()
    with reserved_port() as port:
        app, _ = demo_app(f"127.0.0.1:{port}", 1, 1.0, tmp_path / "demo")
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", port, reuse_address=True).start()
            yield f"http://127.0.0.1:{port}"
        finally:
            await runner.cleanup()


async def test_alerts_reach_the_webhooks_routed_per_namespace(demo: str, tmp_path: Path) -> None:
    binary(ALERTMANAGER)
    sink = Sink()
    hooks = web.Application()
    hooks.router.add_post("/{receiver}", sink.handle)
    writes = web.Application()
    writes.router.add_post("/api/v1/write", _accept)
    async with serving(hooks) as hooks_url, serving(writes) as writes_url:
        config = receivers_at(hooks_url, tmp_path)
        with (
            real_alertmanager(tmp_path, config) as alertmanager,
            real_vmalert(
                tmp_path,
                RULES,
                f"{demo}/prometheus",
                alertmanager,
                args=(f"-remoteWrite.url={writes_url}", "-remoteWrite.flushInterval=1s"),
            ),
        ):

            async def arrived() -> bool:
                return bool(sink.alerts("cluster-operators", "HamiGPUXidError"))

            try:
                await eventually(arrived, 60, "HamiGPUXidError at the cluster's webhook")
            except AssertionError:
                log = (tmp_path / "vmalert.log").read_text(errors="replace")
                raise AssertionError(
                    f"received: {sink.received}\nvmalert:\n{log[-4000:]}"
                ) from None

    [xid, *_] = sink.alerts("cluster-operators", "HamiGPUXidError")
    assert xid["node"] == PLUGIN_NODE
    assert xid["xid"]
    assert xid["device_uuid"]
    assert xid["severity"] == "warning"
    assert "namespace" not in xid
    # Namespaced alerts never reach the cluster's receiver, and each receiver gets its own.
    for receiver, body in sink.received:
        for alert in body["alerts"]:
            namespace = alert["labels"].get("namespace", "")
            if receiver == "cluster-operators":
                assert namespace == "", alert
            elif receiver in ("teams", "team-a"):
                assert namespace.startswith("team-"), alert
                assert alert["labels"]["node"], alert
                assert alert["labels"]["pod"], alert
            else:
                assert receiver == "platform", receiver
                assert namespace, alert
                assert not namespace.startswith("team-"), alert
        # Grouped per namespace and alert name.
        assert set(body["groupLabels"]) <= {"namespace", "alertname"}, body
