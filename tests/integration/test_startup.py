"""The first run: start-up mistakes end with exit code 2 and one line naming the setting.

Where waiting is right (the Kubernetes API not answering yet), the collector
starts and ``/readyz`` says what it waits for and why.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import eventually, reserved_port, running_collector

from collector.app import METRICS
from collector.promql import warmup
from collector.settings import CollectorSettings


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port another socket listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_collector_listen_address_in_use(busy_port: int) -> None:
    done = run(
        "collector",
        "serve",
        "--no-kubernetes",
        "--push-auth=none",
        "--listen",
        f"127.0.0.1:{busy_port}",
    )
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert f"127.0.0.1:{busy_port}" in line
    assert "--listen" in line
    assert "in use" in line


def test_agent_listen_address_in_use(busy_port: int, tmp_path: Path) -> None:
    done = run(
        "agent",
        "run",
        "--node",
        "gpu-1",
        "--no-nvml",
        "--roots",
        str(tmp_path),
        "--listen",
        f"127.0.0.1:{busy_port}",
        "--collector",
        "http://127.0.0.1:1",
    )
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "--listen" in line
    assert "in use" in line


def _refused_targets_file(path: Path) -> str:
    """Start serve on the targets file ``path``: it must exit 2, and its one stderr line."""
    done = run(
        "collector",
        "serve",
        "--no-kubernetes",
        "--listen",
        "127.0.0.1:0",
        "--targets-file",
        str(path),
    )
    assert done.returncode == 2
    return one_line(done.stderr)


@pytest.mark.parametrize(
    ("content", "words"),
    [(None, "No such file"), ("[{targets: [", "targets.yaml"), ("[[[" * 5000, "too deeply")],
    ids=["missing", "broken", "deep"],
)
def test_collector_targets_file_must_load_at_start(
    tmp_path: Path, content: str | None, words: str
) -> None:
    path = tmp_path / "targets.yaml"
    if content is not None:
        path.write_text(content)
    line = _refused_targets_file(path)
    assert "--targets-file" in line
    assert words in line


def test_a_malformed_targets_file_names_the_file_group_and_field(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text("- targets: [a:1]\n  labels: {node: n1}\n- targets: [b:1]\n  labels: {}\n")
    line = _refused_targets_file(path)
    assert "--targets-file / HAMI_COLLECTOR_TARGETS_FILE" in line
    assert f"{path}: group 1: labels.node: Field required" in line


def test_a_collector_without_any_source_does_not_start() -> None:
    done = run("collector", "serve", "--no-kubernetes", "--listen", "127.0.0.1:0")
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "nothing to collect" in line
    assert "--targets-file" in line


def test_an_unset_timeout_follows_a_shorter_interval() -> None:
    assert CollectorSettings(interval=1).timeout == 1
    assert CollectorSettings(interval=30).timeout == 10
    assert CollectorSettings(interval=5, timeout=2).timeout == 2


def test_an_explicit_timeout_over_the_interval_is_refused() -> None:
    done = run("collector", "serve", "--no-kubernetes", "--interval", "1", "--timeout", "2")
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "--timeout / HAMI_COLLECTOR_TIMEOUT: 2 s is longer than --interval (1 s)" in line


async def test_readyz_says_why_discovery_waits(tmp_path: Path) -> None:
    with reserved_port() as port:  # nothing listens: every list is refused
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(_KUBECONFIG.replace("PORT", str(port)))
        async with (
            running_collector(kubeconfig=kubeconfig, interval=1) as (url, _),
            aiohttp.ClientSession() as session,
        ):
            text = ""

            async def explained() -> bool:
                nonlocal text
                async with session.get(url + "/readyz") as resp:
                    text = await resp.text()
                    return resp.status == 503 and "Error" in text

            await eventually(explained, what="/readyz to name the discovery error")
    assert text.startswith("not ready: discovery has not synced: ")
    assert "pods" in text


async def test_readyz_waits_for_the_query_engine_s_compiled_loops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    compile_all = warmup.warm

    def held(*args: Any) -> float:
        assert release.wait(60), "the test never released the warm-up"
        return compile_all(*args)

    monkeypatch.setattr(warmup, "warm", held)
    async with (
        running_collector(kubernetes=False, push_auth="none") as (url, app),
        aiohttp.ClientSession(url) as session,
    ):
        async with session.get("/readyz") as resp:
            assert (resp.status, await resp.text()) == (
                503,
                "not ready: the query engine is compiling its loops\n",
            )
        async with session.get("/healthz") as resp:
            assert resp.status == 200  # alive meanwhile: a liveness probe must not kill it
        release.set()

        async def ready() -> bool:
            async with session.get("/readyz") as resp:
                return resp.status == 200

        await eventually(ready, 60, "ready once the loops are compiled")
        (gauge,) = app[METRICS].warmup.collect()
        assert gauge.samples[0].value > 0


_KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:PORT"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""
