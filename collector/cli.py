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
from typing import TYPE_CHECKING

from collector import __version__
from core import logs
from core.extras import install_hint
from core.settings import (
    LISTS_NOTE,
    ArgumentParser,
    HelpFormatter,
    add_model_flags,
    load_settings,
    parse_listen,
    plain,
)

if TYPE_CHECKING:
    from collector.settings import CollectorSettings

ENV_PREFIX = "HAMI_COLLECTOR_"

log = logging.getLogger(__name__)

DEMO_EXTRAS = ["collector", "agent"]
"""What the demo needs installed: it runs the real agent's code beside the collector."""


GROUPS = {
    "discovery": (
        "kubernetes",
        "kubeconfig",
        "targets_file",
        "namespaces",
        "flavours",
        "hami_selector",
        "volcano_selector",
        "kai_selector",
        "hami_port",
        "volcano_port",
        "kai_port",
        "kube_request_timeout",
        "kube_watch_timeout",
        "allocations",
        "capacity",
    ),
    "scraping": (
        "interval",
        "timeout",
        "body_limit",
        "stale_after",
        "priority",
        "passthrough_allow",
        "passthrough_deny",
    ),
    "push (node agents)": (
        "push_auth",
        "push_token_file",
        "push_audience",
        "push_service_accounts",
        "push_body_limit",
        "push_max_inflight",
    ),
    "reads": ("read_auth", "read_auth_ttl"),
    "history and queries": (
        "history_retention",
        "history_max_points",
        "lookback",
        "query_max_samples",
        "query_timeout",
        "query_max_concurrency",
        "query_max_concurrency_per_identity",
    ),
    "remote write": (
        "remote_write_url",
        "remote_write_bearer_token_file",
        "remote_write_username",
        "remote_write_password_file",
        "remote_write_ca_file",
        "remote_write_max_samples",
        "remote_write_batch",
        "remote_write_shards",
        "remote_write_timeout",
        "remote_write_flush_timeout",
        "remote_write_metadata_interval",
        "external_label",
        "external_labels_on_metrics",
    ),
    "shards and replicas": ("shard_count", "shard_index", "replica"),
    "output and logging": ("listen", "web_config_file", "log_format", "log_level"),
}


def parser() -> argparse.ArgumentParser:
    """The command line of ``hami-collector``."""
    from collector.settings import CollectorSettings  # see main: not at the module's top

    top = ArgumentParser(
        prog="hami-collector",
        description=plain((__doc__ or "").split("\n\n")[0]),
        formatter_class=HelpFormatter,
    )
    top.add_argument("--version", action="version", version=__version__)
    commands = top.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="Collect from a cluster and serve the results.",
        description=f"Collect from a cluster and serve the results. {LISTS_NOTE}",
        usage="%(prog)s [options]",
        formatter_class=HelpFormatter,
    )
    add_model_flags(serve, CollectorSettings, ENV_PREFIX, GROUPS)
    demo = commands.add_parser(
        "demo",
        help="Run the collector on an embedded simulated cluster.",
        description="Run the collector on an embedded simulated cluster; no Kubernetes needed.",
        formatter_class=HelpFormatter,
    )
    demo.add_argument(
        "--listen",
        default="127.0.0.1:9396",
        metavar="HOST:PORT",
        help="Address to serve on (default: %(default)s).",
    )
    demo.add_argument(
        "--nodes",
        type=int,
        default=6,
        metavar="N",
        help="Simulated GPU nodes, at least 1 (default: %(default)s).",
    )
    demo.add_argument(
        "--interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="Seconds between scrapes (default: %(default)g).",
    )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    # Before anything of the collector is imported (its settings import the query engine,
    # numpy and numba): where its extra is missing, one line says what to install, where an
    # import would end in a traceback. This module imports only what both programs have.
    missing = install_hint("hami-collector", ["collector"])
    if missing:
        print(missing, file=sys.stderr)
        return 2
    from collector.settings import CollectorSettings

    args = vars(parser().parse_args(argv))
    command = args.pop("command")
    if command == "demo":
        missing = install_hint("hami-collector", DEMO_EXTRAS)
        if missing:
            print(missing, file=sys.stderr)
            return 2
        return _demo(args["listen"], args["nodes"], args["interval"])
    settings = load_settings(CollectorSettings, args, ENV_PREFIX)
    logs.setup(settings.log_format, settings.log_level)
    idle = _nothing_to_collect(settings)
    if idle:
        print(f"cannot start: {idle}", file=sys.stderr)
        return 2
    return _serve(settings)


def _serve(settings: CollectorSettings) -> int:
    """Serve until stopped; the exit status."""
    from aiohttp import web

    from collector.app import StartupError, build_app
    from collector.memory.malloc import set_policy
    from collector.web import webconfig

    # RSS must not step up for good after each oversized body, and a query's large arrays
    # must not wait on huge pages' first touch
    set_policy()
    web_config = None
    if settings.web_config_file is not None:
        try:
            web_config = webconfig.load(settings.web_config_file)
        except webconfig.WebConfigError as exc:
            print(
                f"cannot start: {exc} (--web-config-file / {ENV_PREFIX}WEB_CONFIG_FILE)",
                file=sys.stderr,
            )
            return 2
    if settings.read_auth == "basic" and (web_config is None or web_config.auth is None):
        print(
            "cannot start: --read-auth basic needs basic_auth_users in --web-config-file",
            file=sys.stderr,
        )
        return 2
    sockets = listening(settings.listen)
    if sockets is None:
        return 2
    ssl_context = web_config.ssl_context if web_config is not None else None
    try:
        web.run_app(
            build_app(settings, web_config=web_config),
            sock=sockets,
            ssl_context=ssl_context,
            print=_announce(sockets, "https" if ssl_context is not None else "http"),
        )
    except StartupError as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
    finally:
        for sock in sockets:
            sock.close()
    return 0


def _demo(listen: str, nodes: int, interval: float) -> int:
    """Check the demo's flags, bind its port, then build and serve the simulated cluster."""
    if nodes < 1:
        print(
            f"invalid setting --nodes: expected a whole number at least 1, got {nodes}",
            file=sys.stderr,
        )
        return 2
    if interval <= 0:
        print(
            f"invalid setting --interval: expected a number above 0, got {interval:g}",
            file=sys.stderr,
        )
        return 2
    try:
        parse_listen(listen)
    except ValueError as exc:
        print(f"invalid setting --listen: {exc}", file=sys.stderr)
        return 2
    # bound before the simulated cluster is built: a busy port fails at once, as serve's does
    sockets = listening(listen, "--listen")
    if sockets is None:
        return 2
    from collector.memory.malloc import set_policy
    from simulator.run import run_demo

    set_policy()  # the memory policy serve sets: the demo is the collector as it runs
    try:
        return run_demo(sockets, nodes, interval)
    finally:
        for sock in sockets:
            sock.close()


def listening(
    listen: str, names: str = f"--listen / {ENV_PREFIX}LISTEN"
) -> list[socket.socket] | None:
    """The sockets bound on ``listen``; None, once one line said why, when it cannot be bound."""
    try:
        return _bind(*parse_listen(listen))
    except OSError as exc:
        print(
            f"cannot start: cannot listen on {listen} ({names}): {exc.strerror or exc}; "
            "stop what uses it or choose another address",
            file=sys.stderr,
        )
        return None


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


def _announce(sockets: list[socket.socket], scheme: str = "http") -> Callable[[str], None]:
    """Say each bound address in the log once serving starts, instead of aiohttp's banner."""

    def announce(banner: str) -> None:
        for sock in sockets:
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
            log.info("listening on %s://%s:%d", scheme, shown, port)

    return announce
