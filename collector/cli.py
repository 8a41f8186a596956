"""``hami-collector``: ``serve`` a cluster, or run the embedded ``demo``.

Every setting of :class:`~collector.settings.CollectorSettings` is a flag here,
made from the model itself, so flags, env vars and the file cannot drift apart.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from collections.abc import Callable, Sequence

from aiohttp import web

from collector import __version__
from collector.app import StartupError, build_app
from collector.settings import CollectorSettings
from core import logs
from core.malloc import set_policy
from core.settings import add_model_flags, load_settings, parse_listen, plain

ENV_PREFIX = "HAMI_COLLECTOR_"

log = logging.getLogger(__name__)


def parser() -> argparse.ArgumentParser:
    """The command line of ``hami-collector``."""
    top = argparse.ArgumentParser(
        prog="hami-collector", description=plain((__doc__ or "").split("\n\n")[0])
    )
    top.add_argument("--version", action="version", version=__version__)
    commands = top.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="Collect from a cluster and serve the results.")
    add_model_flags(serve, CollectorSettings, ENV_PREFIX)
    demo = commands.add_parser(
        "demo",
        help="Run the collector on an embedded simulated cluster.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    demo.add_argument("--listen", default="127.0.0.1:9396", help="Address to serve on, HOST:PORT.")
    demo.add_argument("--nodes", type=int, default=6, help="Simulated GPU nodes (at least 1).")
    demo.add_argument("--interval", type=float, default=5.0, help="Seconds between scrapes.")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = vars(parser().parse_args(argv))
    command = args.pop("command")
    if command == "demo":
        from simulator.run import run_demo

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
    # RSS must not step up for good after each oversized body, and a query's large arrays
    # must not wait on huge pages' first touch
    set_policy()
    idle = _nothing_to_collect(settings)
    if idle:
        print(f"cannot start: {idle}", file=sys.stderr)
        return 2
    try:
        sockets = _bind(*parse_listen(settings.listen))
    except OSError as exc:
        print(
            f"cannot start: cannot listen on {settings.listen} "
            f"(--listen / {ENV_PREFIX}LISTEN): {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 2
    try:
        web.run_app(build_app(settings), sock=sockets, print=_announce(sockets))
    except StartupError as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
    finally:
        for sock in sockets:
            sock.close()
    return 0


def _nothing_to_collect(settings: CollectorSettings) -> str | None:
    """Why the settings leave the collector without any source, or None."""
    pushes = settings.push_auth == "none" or settings.push_token_file is not None
    if settings.kubernetes or settings.targets_file is not None or pushes:
        return None
    return (
        "nothing to collect: --no-kubernetes without --targets-file, and pushes are off "
        "(set --targets-file, --push-token-file, or run with Kubernetes)"
    )


def _bind(host: str, port: int) -> list[socket.socket]:
    """Bind every address ``host`` names on ``port``, as aiohttp would; listen comes later.

    Binding here rather than in aiohttp lets the log say which port ``--listen
    HOST:0`` was given. Like aiohttp: SO_REUSEADDR, and IPv6 sockets IPv6 only.
    """
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _announce(sockets: list[socket.socket]) -> Callable[[str], None]:
    """Say each bound address in the log once serving starts, instead of aiohttp's banner."""

    def announce(banner: str) -> None:
        for sock in sockets:
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
            log.info("listening on http://%s:%d", shown, port)

    return announce
