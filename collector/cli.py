"""``hami-collector``: ``serve`` a cluster, or run the embedded ``demo``.

Every setting of :class:`~collector.settings.CollectorSettings` is a flag here,
made from the model itself, so flags, env vars and the file cannot drift apart.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web
from pydantic import BaseModel, ValidationError

from collector import __version__, logs
from collector.app import StartupError, build_app
from collector.settings import CollectorSettings, config_file, describe_error, parse_listen

ENV_PREFIX = "HAMI_COLLECTOR_"


def add_model_flags(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """Add a ``--flag`` for every field of ``model``; unset flags leave the field alone."""
    for name, field in model.model_fields.items():
        flag = "--" + name.replace("_", "-")
        help_text = f"{field.description} (env {ENV_PREFIX}{name.upper()})"
        if field.annotation is bool:
            parser.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        else:
            parser.add_argument(
                flag, default=argparse.SUPPRESS, metavar=name.upper(), help=help_text
            )


def load_settings(flags: dict[str, Any], path: Path | None) -> CollectorSettings:
    """Build settings from flags, env vars and ``path``; raise ``SystemExit(2)`` naming bad ones."""
    try:
        token = config_file.set(path)
        try:
            return CollectorSettings(**flags)
        finally:
            config_file.reset(token)
    except ValidationError as exc:
        print(describe_error(exc, ENV_PREFIX), file=sys.stderr)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"invalid settings file {path}: {exc}", file=sys.stderr)
    raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    """The command line of ``hami-collector``."""
    top = argparse.ArgumentParser(prog="hami-collector", description=__doc__)
    top.add_argument("--version", action="version", version=__version__)
    commands = top.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="Collect from a cluster and serve the results.")
    serve.add_argument(
        "--config",
        type=Path,
        default=None,
        help=f"YAML or JSON settings file (env {ENV_PREFIX}CONFIG).",
    )
    add_model_flags(serve, CollectorSettings)
    demo = commands.add_parser("demo", help="Run the collector on an embedded simulated cluster.")
    demo.add_argument("--listen", default="127.0.0.1:9396", help="Address to serve on, HOST:PORT.")
    demo.add_argument("--nodes", type=int, default=6, help="Simulated GPU nodes (at least 1).")
    demo.add_argument("--interval", type=float, default=5.0, help="Seconds between scrapes.")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = vars(parser().parse_args(argv))
    command = args.pop("command")
    if command == "demo":
        from collector.demo.run import run_demo

        if args["nodes"] < 1:
            print("invalid setting --nodes: expected a whole number >= 1", file=sys.stderr)
            return 2
        try:
            parse_listen(args["listen"])
        except ValueError as exc:
            print(f"invalid setting --listen: {exc}", file=sys.stderr)
            return 2
        return run_demo(args["listen"], args["nodes"], args["interval"])
    path = args.pop("config") or _env_path()
    settings = load_settings(args, path)
    logs.setup(settings.log_format, settings.log_level)
    host, port = parse_listen(settings.listen)
    try:
        web.run_app(build_app(settings), host=host, port=port, print=None)
    except StartupError as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


def _env_path() -> Path | None:
    value = os.environ.get(ENV_PREFIX + "CONFIG")
    return Path(value) if value else None
