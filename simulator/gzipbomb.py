"""A gzip bomb, built in bounded time and memory, for the ``gzip_bomb`` fault.

The member is valid gzip: the deflate blocks of one chunk repeated, with the
CRC-32 of the whole combined arithmetically instead of computed over it.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from simulator.faults import FILLER_HEAD, filler_line

MIB = 1 << 20


def _gf2_times(matrix: Sequence[int], vector: int) -> int:
    total = 0
    row = 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _gf2_square(matrix: Sequence[int]) -> list[int]:
    return [_gf2_times(matrix, matrix[row]) for row in range(32)]


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """CRC-32 of ``A + B`` from ``crc32(A)``, ``crc32(B)`` and ``len(B)`` (zlib's algorithm)."""
    if length2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << bit for bit in range(31)]  # one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    while True:
        even = _gf2_square(odd)
        if length2 & 1:
            crc1 = _gf2_times(even, crc1)
        length2 >>= 1
        if not length2:
            break
        odd = _gf2_square(even)
        if length2 & 1:
            crc1 = _gf2_times(odd, crc1)
        length2 >>= 1
        if not length2:
            break
    return crc1 ^ crc2


def _crc32_repeated(chunk_crc: int, chunk_length: int, times: int) -> int:
    """CRC-32 of a chunk repeated ``times`` times, by doubling."""
    result = 0
    power_crc, power_length = chunk_crc, chunk_length
    while times:
        if times & 1:
            result = crc32_combine(result, power_crc, power_length)
        times >>= 1
        if times:
            power_crc = crc32_combine(power_crc, power_crc, power_length)
            power_length *= 2
    return result


def _independent_deflate(data: bytes) -> bytes:
    """Raw deflate blocks for ``data`` that reference nothing outside themselves.

    A fresh compressor has no history, and the full flush ends byte-aligned
    without a final block, so copies of the result can be concatenated.
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush(zlib.Z_FULL_FLUSH)


@dataclass(frozen=True, slots=True)
class GzipBomb:
    """A gzip member and the size it expands to."""

    body: bytes
    expanded_size: int


def build_gzip_bomb(expanded_bytes: int, chunk_bytes: int = MIB) -> GzipBomb:
    """A valid gzip member expanding to at least ``expanded_bytes`` of exposition lines.

    One chunk of lines is deflated once and its blocks repeated; the CRC of the
    whole is combined arithmetically, so building a 1 GiB bomb takes
    milliseconds and about 1 MiB.
    """
    line = filler_line("bomb-000000")
    chunk = line * max(1, chunk_bytes // len(line))
    repeats = max(1, math.ceil(max(expanded_bytes - len(FILLER_HEAD), 1) / len(chunk)))
    expanded = len(FILLER_HEAD) + repeats * len(chunk)
    crc = crc32_combine(
        zlib.crc32(FILLER_HEAD),
        _crc32_repeated(zlib.crc32(chunk), len(chunk), repeats),
        repeats * len(chunk),
    )
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # deflate, no flags, mtime 0
    final_block = b"\x03\x00"  # an empty final block with fixed Huffman codes
    trailer = struct.pack("<II", crc, expanded & 0xFFFFFFFF)
    body = b"".join(
        (
            header,
            _independent_deflate(FILLER_HEAD),
            _independent_deflate(chunk) * repeats,
            final_block,
            trailer,
        )
    )
    return GzipBomb(body=body, expanded_size=expanded)
