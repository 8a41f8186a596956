"""The shipped alerts through a real Alertmanager 0.25, routed per namespace to webhooks.

The demo (``simulator.run.demo_app``) serves its cluster; a real vmalert 1.79
evaluates ``rules/hami-usage.rules.yaml`` against the demo's ``/prometheus``
and notifies a real Alertmanager started on 127.0.0.1 with
``rules/alertmanager.example.yml``: its routes as shipped, its webhook URLs
pointed at a sink in this test and its group waits shortened (they only delay
the first notification).

vmalert 1.79 has no flag that shortens a ``for:`` (its ``-remoteRead.url``
restores the pending time of an alert from an earlier run, which this test
would have to forge), and ``HamiVGPUMemoryNearLimit`` waits 5 minutes. So
the test loads a copy of the shipped file, made here, with every ``for:`` set
to ``0s``: the expressions, labels and annotations stay the shipped ones.

Two alerts must arrive. ``HamiVGPUMemoryNearLimit`` for the demo's container
of ``team-a`` that has filled its vGPU memory limit
(:func:`simulator.workload.full_pod`), with its ``node``, ``namespace``,
``pod`` and ``container``, at the ``team-a`` receiver alone; and
``HamiGPUXidError`` (no ``for:``), posted by the demo's device-plugin node as
it starts, with ``node`` and no namespace, at the cluster's operators. Every
notification that arrives meanwhile (without ``for:``, other alerts fire on the
demo as it starts up, and random containers may cross 95 %) must be at the
receiver its namespace routes to, and nowhere else.

The recording rules of the file need a remote-write destination: a sink that
accepts everything.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from helpers import eventually, real_vmalert, reserved_port, running_demo, serving

from simulator.run import PLUGIN_NODE
from simulator.workload import full_pod
from testing.processes import stop

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules" / "hami-usage.rules.yaml"
EXAMPLE = ROOT / "rules" / "alertmanager.example.yml"
BIN = ROOT / ".tools" / "alertmanager" / "usr" / "bin"
ALERTMANAGER = BIN / "prometheus-alertmanager"
AMTOOL = BIN / "amtool"
TEMPLATES = ROOT / ".tools" / "alertmanager" / "usr" / "share" / "prometheus" / "alertmanager"
ALERTMANAGER_START_TIMEOUT = 30.0
FULL_NODE = "gpu-node-001"
"""The demo's first node, where it keeps its full container (one monitored node: no flaky one)."""
ARRIVAL_TIMEOUT = 60.0


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


def rules_firing_at_once(folder: Path) -> Path:
    """The shipped rules with every ``for:`` at ``0s``, nothing else changed."""
    document = yaml.safe_load(RULES.read_text())
    waits = [rule for group in document["groups"] for rule in group["rules"] if "for" in rule]
    assert any(rule.get("alert") == "HamiVGPUMemoryNearLimit" for rule in waits)
    for rule in waits:
        rule["for"] = "0s"
    path = folder / RULES.name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
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


def routed_to(labels: dict[str, str]) -> str:
    """The receiver the example's routes name for an alert with ``labels``."""
    namespace = labels.get("namespace", "")
    if not namespace:
        return "cluster-operators"
    if namespace == "team-a":
        return "team-a"
    return "teams" if namespace.startswith("team-") else "platform"


async def _accept(_: web.Request) -> web.Response:
    return web.Response(status=204)


async def test_alerts_reach_the_webhooks_routed_per_namespace(tmp_path: Path) -> None:
    binary(ALERTMANAGER)
    full = full_pod(1, FULL_NODE, card=0)
    sink = Sink()
    hooks = web.Application()
    hooks.router.add_post("/{receiver}", sink.handle)
    writes = web.Application()
    writes.router.add_post("/api/v1/write", _accept)
    (tmp_path / "demo").mkdir()
    async with (
        running_demo(tmp_path / "demo", 1, 1.0) as (demo, _),
        serving(hooks) as hooks_url,
        serving(writes) as writes_url,
    ):
        config = receivers_at(hooks_url, tmp_path)
        with (
            real_alertmanager(tmp_path, config) as alertmanager,
            real_vmalert(
                tmp_path,
                rules_firing_at_once(tmp_path),
                f"{demo}/prometheus",
                alertmanager,
                args=(f"-remoteWrite.url={writes_url}", "-remoteWrite.flushInterval=1s"),
            ),
        ):

            async def full_arrived() -> bool:
                near = sink.alerts("team-a", "HamiVGPUMemoryNearLimit")
                return any(labels["pod"] == full.pod for labels in near)

            async def xid_arrived() -> bool:
                return bool(sink.alerts("cluster-operators", "HamiGPUXidError"))

            try:
                await eventually(full_arrived, ARRIVAL_TIMEOUT, "the full container at team-a")
                await eventually(xid_arrived, ARRIVAL_TIMEOUT, "HamiGPUXidError at the cluster's")
            except AssertionError as error:
                log = (tmp_path / "vmalert.log").read_text(errors="replace")
                raise AssertionError(
                    f"{error}\nreceived: {sink.received}\nvmalert:\n{log[-4000:]}"
                ) from None

    [near, *_] = [
        labels
        for labels in sink.alerts("team-a", "HamiVGPUMemoryNearLimit")
        if labels["pod"] == full.pod
    ]
    assert near["node"] == FULL_NODE
    assert near["namespace"] == full.namespace == "team-a"
    assert near["container"] == full.container
    assert near["vdevice_index"] == "0"
    assert near["device_uuid"].startswith("GPU-")
    assert near["severity"] == "warning"
    [xid, *_] = sink.alerts("cluster-operators", "HamiGPUXidError")
    assert xid["node"] == PLUGIN_NODE
    assert xid["xid"]
    assert xid["device_uuid"]
    assert xid["severity"] == "warning"
    assert "namespace" not in xid
    # Each alert reached only the receiver its namespace routes to (the full
    # container's: team-a, not teams, platform or the cluster's), grouped per
    # namespace and alert name.
    for receiver, body in sink.received:
        for alert in body["alerts"]:
            assert receiver == routed_to(alert["labels"]), (receiver, alert)
            if receiver != "cluster-operators":
                assert alert["labels"]["node"], alert
                assert alert["labels"]["pod"], alert
        assert set(body["groupLabels"]) <= {"namespace", "alertname"}, body
