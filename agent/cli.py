"""``hami-agent``: ``run`` on a GPU node, or ``sample`` once and print what would be pushed."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from agent import __version__
from agent.app import Sampler, StartupError, run, start_nvml
from agent.settings import ENV_PREFIX, AgentSettings
from core import logs
from core.settings import add_model_flags, load_settings, plain


def parser() -> argparse.ArgumentParser:
    """The command line of ``hami-agent``."""
    top = argparse.ArgumentParser(
        prog="hami-agent", description=plain((__doc__ or "").split("\n\n")[0])
    )
    top.add_argument("--version", action="version", version=__version__)
    commands = top.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="Sample every interval and push to the collector.")
    add_model_flags(run, AgentSettings, ENV_PREFIX)
    sample = commands.add_parser("sample", help="Read once and print the snapshot as JSON.")
    add_model_flags(sample, AgentSettings, ENV_PREFIX)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = vars(parser().parse_args(argv))
    command = args.pop("command")
    settings = load_settings(AgentSettings, args, ENV_PREFIX)
    logs.setup(settings.log_format, settings.log_level)
    if command == "sample":
        nvml = start_nvml(settings.nvml)
        payload = Sampler(
            settings.node or "unknown", settings.roots, settings.grace, nvml
        ).snapshot()
        print(payload.model_dump_json(indent=2))
        return 0
    if not settings.node:
        print(
            "invalid setting --node / HAMI_AGENT_NODE: required (or set NODE_NAME)", file=sys.stderr
        )
        return 2
    try:
        asyncio.run(run(settings))
    except StartupError as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
    return 0
