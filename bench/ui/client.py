"""``python -m bench.ui.client BASE REPEATS PATH...``: each path's wall times over HTTP, as JSON.

A process of its own, so the server's event loop serves and nothing else: one
plain HTTP/1.1 connection, one request at a time, the body read whole.
"""

from __future__ import annotations

import http.client
import json
import sys
import time
from urllib.parse import urlsplit


def times(base: str, repeats: int, path: str) -> list[float]:
    """Seconds each of ``repeats`` GETs of ``path`` took, after one untimed GET."""
    url = urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=120)
    found = []
    for i in range(repeats + 1):
        began = time.perf_counter()
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit(f"GET {path}: HTTP {response.status}")
        if i:
            found.append(time.perf_counter() - began)
    connection.close()
    return found


def main(argv: list[str]) -> None:
    """Print ``{path: [seconds, ...]}`` for every path of ``argv``."""
    base, repeats, *paths = argv
    print(json.dumps({path: times(base, int(repeats), path) for path in paths}))


if __name__ == "__main__":
    main(sys.argv[1:])
