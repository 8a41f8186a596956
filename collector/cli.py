"""``hami-collector``: ``serve`` a cluster, or run the embedded ``demo``.

Every setting of :class:`~collector.settings.CollectorSettings` is a flag here,
made from the model itself, so flags, env vars and the file cannot drift apart.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from aiohttp import web

from collector import __version__
from collector.app import StartupError, build_app
from collector.settings import CollectorSettings
from core import logs
from core.settings import add_model_flags, load_settings, parse_listen

ENV_PREFIX = "HAMI_COLLECTOR_"


def parser() -> argparse.ArgumentParser:
    """The command line of ``hami-collector``."""
    top = argparse.ArgumentParser(prog="hami-collector", description=__doc__)
    top.add_argument("--version", action="version", version=__version__)
    commands = top.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="Collect from a cluster and serve the results.")
    add_model_flags(serve, CollectorSettings, ENV_PREFIX)
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
    settings = load_settings(CollectorSettings, args, ENV_PREFIX)
    logs.setup(settings.log_format, settings.log_level)
    host, port = parse_listen(settings.listen)
    try:
        web.run_app(build_app(settings), host=host, port=port, print=None)
    except StartupError as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
    return 0
