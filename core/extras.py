"""Which of a program's own dependencies are missing, read from the installed distribution.

One distribution holds both programs, and each program's dependencies are an
extra of it (``pip install 'hami-usage-collector[agent]'`` or ``[collector]``),
so that the image every GPU node pulls carries the agent only. A program
started where its extra was not installed says so in one line, naming what to
install, instead of a traceback from its first import. The list is the one pip
installed from (``Requires-Dist: numba>=0.61; extra == "collector"`` in the
distribution's metadata), so a requirement added to an extra in
``pyproject.toml`` is checked here with no change.

Written by hand: ``packaging`` parses requirements, but the agent's install
does not hold it, and only the name and the extra of each line are read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib import metadata
from typing import Final

DISTRIBUTION: Final = "hami-usage-collector"

_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_ONLY_EXTRA = re.compile(r"""\s*extra\s*==\s*["']([A-Za-z0-9._-]+)["']\s*""")


def missing(extras: Sequence[str]) -> list[str]:
    """The distributions that ``extras`` require and that are not installed, in listed order.

    Empty when this project is not installed itself (run from a source tree: no
    metadata says what was meant to be installed). A requirement whose marker says
    more than its extra (a platform, a Python version) is not checked: evaluating
    it needs ``packaging``.
    """
    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    absent = []
    for line in requires:
        spec, _, marker = line.partition(";")
        extra = _ONLY_EXTRA.fullmatch(marker)
        name = _NAME.match(spec)
        if extra is None or extra.group(1) not in extras or name is None:
            continue
        try:
            metadata.distribution(name.group(1))
        except metadata.PackageNotFoundError:
            absent.append(name.group(1))
    return absent


def install_hint(program: str, extras: Sequence[str]) -> str | None:
    """The one line ``program`` says when a dependency of ``extras`` is missing; None when none is."""
    absent = missing(extras)
    if not absent:
        return None
    return (
        f"cannot start: {program} needs {', '.join(absent)}, not installed here: "
        f"pip install '{DISTRIBUTION}[{','.join(extras)}]'"
    )
