"""Bounded decompression of bodies that come from outside (scraped pages, pushes).

Both sources inflate for themselves rather than let aiohttp do it: aiohttp takes
a gzip stream that ends early for a whole one (a monitor that died mid-body
would hand on a prefix whose last value may be cut), and it inflates without a
limit, so a small bomb would grow to any size before a body limit could see it.
"""

from __future__ import annotations

import zlib

WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
"""zlib's window bits for each Content-Encoding this module inflates."""


class InflateError(ValueError):
    """The body is not valid in its encoding, or stops before its end."""


class Inflate:
    """Inflate one body, chunk by chunk, to at most ``limit`` + 1 bytes in all.

    The one byte past the limit lets the caller tell "too large" from "exactly
    the limit". Gzip members may follow one another: concatenated members are
    one gzip stream, as RFC 1952 says.
    """

    def __init__(self, encoding: str, limit: int) -> None:
        self._wbits = WBITS[encoding]
        self._limit = limit
        self._out = 0
        self._inflate = zlib.decompressobj(self._wbits)
        self._ended = False

    def feed(self, data: bytes) -> bytes:
        """The bytes ``data`` inflates to, stopping one byte past the limit."""
        out = bytearray()
        while data and self._out <= self._limit:
            self._ended = False
            try:
                part = self._inflate.decompress(data, self._limit + 1 - self._out)
            except zlib.error as exc:
                raise InflateError(str(exc)) from None
            out += part
            self._out += len(part)
            if self._inflate.eof:
                data = self._inflate.unused_data
                self._inflate = zlib.decompressobj(self._wbits)
                self._ended = True
            else:
                data = self._inflate.unconsumed_tail
        return bytes(out)

    def finish(self) -> None:
        """Raise :class:`InflateError` if the body stopped inside a stream: it was cut short."""
        if not self._ended:
            raise InflateError("the body ends before its compressed stream does (truncated)")
