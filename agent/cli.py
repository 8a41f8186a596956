"""``hami-agent``: ``run`` on a GPU node, or ``sample`` once and print what would be pushed."""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
from collections.abc import Sequence

from agent import __version__, push
from agent.settings import ENV_PREFIX, AgentSettings
from core import logs
from core.extras import install_hint
from core.settings import (
    LISTS_NOTE,
    ArgumentParser,
    HelpFormatter,
    add_model_flags,
    load_settings,
    plain,
)

GROUPS = {
    "sampling": ("node", "interval", "roots", "grace", "nvml"),
    "attribution": ("processes", "host_proc", "pod_resources_socket"),
    "push": (
        "collector",
        "collector_shards",
        "shard_count",
        "collector_ca_file",
        "token_file",
        "backlog_seconds",
        "backlog_bytes",
        "push_timeout",
    ),
    "output and logging": ("listen", "log_format", "log_level"),
}

NO_NODE = (
    f"invalid setting --node / {ENV_PREFIX}NODE: this node's name is required; "
    "set --node, HAMI_AGENT_NODE or NODE_NAME"
)


def parser() -> argparse.ArgumentParser:
    """The command line of ``hami-agent``."""
    top = ArgumentParser(
        prog="hami-agent",
        description=plain((__doc__ or "").split("\n\n")[0]),
        formatter_class=HelpFormatter,
    )
    top.add_argument("--version", action="version", version=__version__)
    commands = top.add_subparsers(dest="command", required=True)
    for name, summary in (
        ("run", "Sample every interval and push to the collector."),
        ("sample", "Read once and print the snapshot as JSON."),
    ):
        command = commands.add_parser(
            name,
            help=summary,
            description=f"{summary} {LISTS_NOTE}",
            usage="%(prog)s [options]",
            formatter_class=HelpFormatter,
        )
        add_model_flags(command, AgentSettings, ENV_PREFIX, GROUPS)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = vars(parser().parse_args(argv))
    command = args.pop("command")
    missing = install_hint("hami-agent", ["agent"])
    if missing:
        print(missing, file=sys.stderr)
        return 2
    # Imported once install_hint found the agent's extra installed: without it (the
    # collector's image) NVML's binding would fail to import with a traceback.
    from agent.app import StartupError, run, sampler_of, start_nvml

    settings = load_settings(AgentSettings, args, ENV_PREFIX)
    logs.setup(settings.log_format, settings.log_level)
    if not settings.node:
        print(NO_NODE, file=sys.stderr)
        return 2
    try:
        push.trust(settings.collector_ca_file)
    except (OSError, ssl.SSLError) as exc:
        print(
            f"cannot start: cannot load {settings.collector_ca_file}: {exc} "
            f"(--collector-ca-file / {ENV_PREFIX}COLLECTOR_CA_FILE)",
            file=sys.stderr,
        )
        return 2
    if command == "sample":
        sampler = sampler_of(settings, start_nvml(settings.nvml))
        print(sampler.snapshot().model_dump_json(indent=2))
        sampler.close()
        return 0
    try:
        asyncio.run(run(settings))
    except StartupError as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
    return 0
