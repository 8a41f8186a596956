"""The command line: flags, env vars and a file fill one model; bad values exit 2 naming the setting."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from helpers import program

from agent.cli import main as agent_main
from agent.settings import AgentSettings
from collector.cli import ENV_PREFIX, main, parser
from collector.settings import CollectorSettings
from core.settings import FileSettings, load_settings


def one_line(err: str) -> str:
    """The one line a start-up error is, failing when there are more."""
    assert err.endswith("\n"), err
    assert err.count("\n") == 1, err
    return err.rstrip("\n")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collector", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--interval", "soon"], "--interval / HAMI_COLLECTOR_INTERVAL"),
        (["--interval", "5", "--timeout", "10"], "10 s is longer than --interval (5 s)"),
        (["--interval", "0"], "expected a number above 0, got '0'"),
        (["--listen", "nowhere"], "expected HOST:PORT"),
        (["--flavours", "hami,nvidia"], "unknown flavours ['nvidia']"),
        (["--log-format", "xml"], "--log-format / HAMI_COLLECTOR_LOG_FORMAT"),
        (["--body-limit", "-1"], "--body-limit"),
        (["--remote-write-url", "ftp://x/write"], "remote-write-url 'ftp://x/write'"),
        (["--remote-write-url", "http:///write"], "remote-write-url"),
        (["--external-label", "cluster"], "external-label 'cluster' must be NAME=VALUE"),
        (["--external-label", "1x=a"], "external-label '1x=a'"),
        (["--external-label", "node=a"], "external-label 'node'"),
        (["--external-label", "a=1", "--external-label", "a=2"], "external-label 'a'"),
        (["--external-label", "replica=a", "--replica", "b"], "external-label 'replica'"),
        (["--remote-write-max-samples", "0"], "--remote-write-max-samples"),
        (["--remote-write-shards", "100"], "--remote-write-shards"),
        (["--remote-write-username", "u"], "remote-write-password-file go together"),
        (["--remote-write-ca-file", "/nonexistent/ca.pem"], "remote-write-ca-file"),
    ],
)
def test_bad_flags_exit_2_naming_the_setting(
    args: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--no-kubernetes", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert words in err
    assert one_line(err).startswith("invalid setting --"), "it names the flag"
    assert "HAMI_COLLECTOR_" in err, "and the env var"
    assert "settings settings" not in err
    assert "errors.pydantic.dev" not in err


def test_messages_name_the_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--interval", "soon"])
    err = capsys.readouterr().err
    assert "invalid setting --interval / HAMI_COLLECTOR_INTERVAL" in err
    assert "'soon'" in err


def test_precedence_flags_over_env_over_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "collector.yaml"
    config.write_text(
        "interval: 30\ntimeout: 5\nnamespaces: [kube-system]\nkube-watch-timeout: 60\n"
    )
    monkeypatch.setenv("HAMI_COLLECTOR_INTERVAL", "20")
    monkeypatch.setenv("HAMI_COLLECTOR_FLAVOURS", "hami,kai")
    args = vars(parser().parse_args(["serve", "--timeout", "7", "--config", str(config)]))
    args.pop("command")
    settings = load_settings(CollectorSettings, args, ENV_PREFIX)
    assert settings.interval == 20, "env beats the file"
    assert settings.timeout == 7, "flags beat env and file"
    assert settings.namespaces == ["kube-system"]
    assert settings.kube_watch_timeout == 60
    assert settings.flavours == ["hami", "kai"]
    assert settings.stale_seconds == 60


def test_a_broken_settings_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "collector.yaml"
    config.write_text("interval: [\n")
    with pytest.raises(SystemExit) as info:
        main(["serve", "--config", str(config)])
    assert info.value.code == 2
    assert "invalid settings file" in capsys.readouterr().err
    config.write_text("no_such_setting: 1\n")
    with pytest.raises(SystemExit):
        main(["serve", "--config", str(config)])
    assert "unknown setting 'no_such_setting'" in capsys.readouterr().err


def test_python_dash_m_is_the_same_program() -> None:
    result = run("serve", "--help")
    assert result.returncode == 0
    for flag in (
        "--listen",
        "--targets-file",
        "--kubernetes",
        "--no-kubernetes",
        "--interval",
        "--log-format",
    ):
        assert flag in result.stdout
    bad = run("demo", "--nodes", "0")
    assert bad.returncode == 2
    assert "--nodes" in bad.stderr


async def test_serve_starts_and_stops_on_sigterm() -> None:
    args = (
        "collector",
        "serve",
        "--no-kubernetes",
        "--push-auth=none",
        "--listen=127.0.0.1:0",
        "--log-format=json",
    )
    with program(*args) as serve:
        url = await serve.url()
        assert url.startswith("http://127.0.0.1:")
        assert not url.endswith(":0"), "the log names the port it was given"
        async with aiohttp.ClientSession() as http, http.get(f"{url}/healthz") as resp:
            assert resp.status == 200
        assert serve.stop() == 0, serve.stderr


def test_the_readme_opens_with_the_two_commands_and_the_docs_list_every_setting() -> None:
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    assert readme.startswith("# hami-usage-collector\n\nOne ")  # what it is, first
    assert "```sh\nmake run" in readme.split("\n## ")[0], "the two commands on the first screen"
    assert len(readme.splitlines()) <= 300
    documents: dict[str, tuple[type[FileSettings], Path]] = {
        "HAMI_COLLECTOR_": (CollectorSettings, root / "docs" / "configuration.md"),
        "HAMI_AGENT_": (AgentSettings, root / "docs" / "configuration.md"),
    }
    for prefix, (model, page) in documents.items():
        text = page.read_text()
        for name in model.model_fields:
            assert f"`--{name.replace('_', '-')}`" in text, name
            assert f"`{prefix}{name.upper()}`" in text, name


def test_no_kubernetes_configuration_is_a_clear_start_error(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "missing")}
    result = run("serve", "--listen=127.0.0.1:0", env=env)
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert "cannot start: no Kubernetes configuration" in line
    assert "no in-cluster service account and no kubeconfig found" in line
    assert "invalid" not in line
    assert "--kubeconfig / HAMI_COLLECTOR_KUBECONFIG" in line
    assert "--no-kubernetes" in line


def test_serve_help_is_grouped_with_choices_and_whole_defaults() -> None:
    text = run("serve", "--help", env={"COLUMNS": "60", "PATH": ""}).stdout
    for heading in (
        "discovery:",
        "scraping:",
        "push (node agents):",
        "history and queries:",
        "remote write:",
        "shards and replicas:",
        "output and logging:",
    ):
        assert f"\n{heading}\n" in text, heading
    assert "--push-auth {auto,tokenreview,token,none}" in text
    assert "--log-format {text,json}" in text
    assert "--flavours {hami,volcano,kai},..." in text
    assert "default: 10, or the interval when shorter" in " ".join(text.split())
    assert "repeatable" not in text
    assert not re.search(r"\w-\n", text), "no line ends inside a hyphenated word"


def test_demo_on_a_busy_port_exits_2_with_the_serve_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        demo = run("demo", "--listen", f"127.0.0.1:{port}")
        serve = run("serve", "--no-kubernetes", "--push-auth=none", f"--listen=127.0.0.1:{port}")
    assert demo.returncode == serve.returncode == 2
    assert one_line(demo.stderr).startswith(f"cannot start: cannot listen on 127.0.0.1:{port}")
    assert one_line(serve.stderr).startswith(f"cannot start: cannot listen on 127.0.0.1:{port}")
    assert "in use" in demo.stderr


def test_agent_sample_without_a_node_says_which_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("HAMI_AGENT_NODE", raising=False)
    assert agent_main(["sample", "--no-nvml"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "--node / HAMI_AGENT_NODE" in line
    assert "NODE_NAME" in line


@pytest.mark.parametrize(
    ("program", "argv", "help_at"),
    [
        (main, ["serve", "--no-such-flag"], "hami-collector serve"),
        (main, ["demo", "--no-such-flag"], "hami-collector demo"),
        (main, ["--no-such-flag", "serve"], "hami-collector"),
        (agent_main, ["run", "--no-such-flag"], "hami-agent run"),
        (agent_main, ["sample", "--no-such-flag"], "hami-agent sample"),
    ],
)
def test_an_unknown_flag_points_at_the_help_that_lists_the_flags(
    program: Callable[[list[str]], int],
    argv: list[str],
    help_at: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        program(argv)
    assert info.value.code == 2
    line = one_line(capsys.readouterr().err)
    assert line == f"{help_at}: unrecognized arguments: --no-such-flag (see {help_at} --help)"
    if help_at == "hami-collector serve":
        with pytest.raises(SystemExit):
            program(["serve", "--help"])
        assert "--interval" in capsys.readouterr().out, "that help lists the flags"


def _installed(collector: str, agent: str) -> str:
    """Metadata as pip writes it (``METADATA``), with these requirements for the two extras."""
    lines = ["Metadata-Version: 2.1", "Name: hami-usage-collector", "Version: 0.1.0"]
    lines += ["Provides-Extra: agent", "Provides-Extra: collector", "Requires-Dist: pydantic>=2.7"]
    lines += [f'Requires-Dist: {r}; extra == "collector"' for r in collector.split()]
    lines += [f'Requires-Dist: {r}; extra == "agent"' for r in agent.split()]
    # what a marker beyond the extra leaves out is not asked for
    lines.append('Requires-Dist: numba>=0.61; extra == "collector" and python_version < "3"')
    return "\n".join(lines) + "\n"


_WITHOUT = """
import runpy, sys
REFUSED = set(sys.argv[1].split(","))
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Refuse())
sys.argv = sys.argv[2:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""
"""Run ``-m MODULE ARGS`` where the modules of ``argv[1]`` cannot be imported, as where they
are not installed."""

COLLECTORS = "numpy,numba,llvmlite,aiohttp,kubernetes_asyncio,jinja2,promql_parser,cramjam,yarl,httptools,bcrypt"
AGENTS = "pynvml,grpc,google"


@pytest.mark.parametrize(
    ("command", "installed", "refused", "expected"),
    [
        (
            ("collector", "serve", "--no-kubernetes", "--push-auth=none"),
            _installed("aiohttp no-such-part-of-the-collector", "grpcio"),
            COLLECTORS,
            "hami-collector needs no-such-part-of-the-collector, not installed here: "
            "pip install 'hami-usage-collector[collector]'",
        ),
        (
            ("collector", "serve", "--help"),
            _installed("aiohttp no-such-part-of-the-collector", "grpcio"),
            COLLECTORS,
            "hami-collector needs no-such-part-of-the-collector, not installed here: "
            "pip install 'hami-usage-collector[collector]'",
        ),
        (
            ("collector", "demo"),
            _installed("aiohttp", "grpcio no-such-part-of-the-agent"),
            AGENTS,
            "hami-collector needs no-such-part-of-the-agent, not installed here: "
            "pip install 'hami-usage-collector[collector,agent]'",
        ),
        (
            ("agent", "run", "--node", "n"),
            _installed("aiohttp", "grpcio no-such-part-of-the-agent"),
            AGENTS,
            "hami-agent needs no-such-part-of-the-agent, not installed here: "
            "pip install 'hami-usage-collector[agent]'",
        ),
    ],
    ids=["serve", "serve-help", "demo", "agent-run"],
)
def test_a_program_without_its_extra_says_what_to_install(
    tmp_path: Path, command: tuple[str, ...], installed: str, refused: str, expected: str
) -> None:
    """Its modules refused as where they are not installed: one line, no traceback."""
    info = tmp_path / "hami_usage_collector-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(installed)
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT, refused, *command],
        cwd=tmp_path,  # first on sys.path: not the source tree, where a build leaves its metadata
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{root}"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert one_line(result.stderr) == f"cannot start: {expected}"


def test_the_refusing_runner_refuses() -> None:
    """The check above is not vacuous: a refused module cannot be imported, the rest can."""

    def runner(refused: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _WITHOUT, refused, "json.tool", "--help"],
            capture_output=True,
            text=True,
            timeout=30,
        )

    assert runner("numpy").returncode == 0
    refused = runner("json")
    assert refused.returncode == 1
    assert "No module named 'json'" in refused.stderr
