"""Find HAMi-core region files in their folders and read the newest one of each key.

Where the files are (:func:`scan`)
    Each root is a base folder holding ``containers/`` and/or ``claims/``: pass
    ``/usr/local/vgpu`` for HAMi, KAI and HAMi-DRA, and ``/usr/local/vgpu/vgpu``
    as well for Volcano (its plugin writes ``/usr/local/vgpu/vgpu/containers``).
    A root or subfolder that does not exist is simply empty. The same key found
    under two roots is one region (the newest file wins, as below).

Several ``.cache`` files for one key
    A container folder collects one random-named ``.cache`` file per container
    run (restarts), so older files are leftovers whose processes are gone but
    whose slots may still say "running". They are never summed, and never
    used: only the most recently modified file is read, the others are counted
    in ``Scan.ignored``. If the newest one cannot be read (a container that has
    just started and not yet initialised it), the key is a failure of this scan
    rather than a report of an earlier run's figures.

Slots whose process is gone
    With ``judges``, each region read is given the judge of its key and file
    (:data:`Judges`), which decides which of its slots' processes are gone
    (:mod:`agent.slots`); see :func:`agent.hamicore.read_region`.
"""

from __future__ import annotations

import errno
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent import hamicore
from agent.hamicore import RegionError, RegionUsage, SlotJudge

PodKey = tuple[Literal["pod"], str, str]
ClaimKey = tuple[Literal["claim"], str]
RegionKey = PodKey | ClaimKey
"""("pod", pod_uid, container) or ("claim", claim_uid)."""

Judges = Callable[[RegionKey, Path], SlotJudge | None]
"""The slot judge of one region, given its key and the file read for it; None: none can judge."""

_CacheFile = tuple[float, str, Path]
"""(mtime, name, path) of one ``*.cache`` entry."""


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed file or folder of a scan; ``key`` is None when the folder name gave none."""

    key: RegionKey | None
    error: RegionError


@dataclass(frozen=True, slots=True)
class Scan:
    """The outcome of one pass over the roots."""

    regions: Mapping[RegionKey, RegionUsage]
    failures: tuple[Failure, ...]
    errors: Mapping[str, int]
    """Failures counted by reason."""
    ignored: int
    """``.cache`` files not read because a newer file of the same key read correctly."""
    stale: int
    """Keys skipped because their newest file is older than ``grace``."""


_POD_UID_MAX = 64
_CONTAINER_MAX = 253
_CLAIM_UID_MAX = 64


def _pod_key(name: str) -> PodKey | None:
    pod_uid, sep, container = name.partition("_")
    if not sep or not pod_uid or not container:
        return None
    if len(pod_uid) > _POD_UID_MAX or len(container) > _CONTAINER_MAX:
        return None
    return ("pod", pod_uid, container)


def _claim_key(name: str) -> ClaimKey | None:
    if not name or len(name) > _CLAIM_UID_MAX:
        return None
    return ("claim", name)


def _os_error(exc: OSError, path: Path, what: str) -> RegionError:
    if exc.errno == errno.ENOENT:
        return RegionError("vanished", path, f"{what} disappeared")
    return RegionError("unreadable", path, f"cannot {what}: {exc.strerror or exc}")


def _subfolders(base: Path, failures: list[Failure]) -> list[tuple[str, Path]]:
    try:
        with os.scandir(base) as it:
            entries = list(it)
    except FileNotFoundError:
        return []
    except OSError as exc:
        failures.append(Failure(None, _os_error(exc, base, "list folder")))
        return []
    out: list[tuple[str, Path]] = []
    for entry in entries:
        try:
            if entry.is_dir():
                out.append((entry.name, Path(entry.path)))
        except OSError:
            continue  # vanished between listing and looking: nothing to report
    return out


def _cache_files(folder: Path, key: RegionKey, failures: list[Failure]) -> list[_CacheFile]:
    """(mtime, name, path) of the ``*.cache`` entries in ``folder``."""
    try:
        with os.scandir(folder) as it:
            entries = [e for e in it if e.name.endswith(".cache")]
    except OSError as exc:
        failures.append(Failure(key, _os_error(exc, folder, "list folder")))
        return []
    out: list[_CacheFile] = []
    for entry in entries:
        path = Path(entry.path)
        try:
            out.append((entry.stat().st_mtime, entry.name, path))
        except OSError as exc:
            failures.append(Failure(key, _os_error(exc, path, "stat file")))
    return out


def _collect(
    base: Path,
    key_of: Callable[[str], RegionKey | None],
    bad_name: str,
    candidates: dict[RegionKey, list[_CacheFile]],
    failures: list[Failure],
) -> None:
    """Add the ``.cache`` files of each subfolder of ``base`` to its key's candidates."""
    for name, folder in _subfolders(base, failures):
        key = key_of(name)
        if key is None:
            failures.append(Failure(None, RegionError("bad_folder", folder, bad_name)))
            continue
        candidates.setdefault(key, []).extend(_cache_files(folder, key, failures))


def _choose(
    candidates: Mapping[RegionKey, list[_CacheFile]],
    grace: float | None,
    when: float,
    failures: list[Failure],
    judges: Judges | None,
) -> tuple[dict[RegionKey, RegionUsage], int, int]:
    """Read the newest file of each fresh key: (regions, ignored files, stale keys)."""
    regions: dict[RegionKey, RegionUsage] = {}
    ignored = 0
    stale = 0
    for key, files in candidates.items():
        if not files:
            continue
        files.sort(key=lambda f: (f[0], f[1]), reverse=True)
        if grace is not None and when - files[0][0] > grace:
            stale += 1
            continue
        ignored += len(files) - 1
        try:
            # Looked up on the module at each call, so a test can stand in for the reader.
            path = files[0][2]
            judge = None if judges is None else judges(key, path)
            regions[key] = hamicore.read_region(path, judge)
        except RegionError as exc:
            failures.append(Failure(key, exc))  # never an older file: it belongs to an earlier run
    return regions, ignored, stale


def scan(
    roots: Sequence[Path],
    *,
    grace: float | None = None,
    now: float | None = None,
    judges: Judges | None = None,
) -> Scan:
    """Read every region under ``<root>/containers/*/`` and ``<root>/claims/*/``.

    ``containers/<podUID>_<container>`` is split on the first ``_`` (a name
    without one, or with an empty side, is a ``bad_folder`` failure);
    ``claims/<claimUID>`` is keyed by the claim UID. With ``grace``, a key whose
    newest ``.cache`` file was last modified more than ``grace`` seconds before
    ``now`` is skipped and counted as stale (leftovers of deleted pods; note an
    idle process may not touch its region for a long time, so keep it generous).
    Any error is confined to its own folder or file and recorded; the scan goes on.
    ``judges``: see the module docstring.
    """
    failures: list[Failure] = []
    candidates: dict[RegionKey, list[_CacheFile]] = {}
    for root in roots:
        root = Path(root)
        _collect(
            root / "containers",
            _pod_key,
            "folder name is not <podUID>_<container>",
            candidates,
            failures,
        )
        _collect(
            root / "claims", _claim_key, "folder name is not a claim UID", candidates, failures
        )
    when = time.time() if now is None else now
    regions, ignored, stale = _choose(candidates, grace, when, failures, judges)
    errors: Counter[str] = Counter(f.error.reason for f in failures)
    return Scan(
        regions=regions,
        failures=tuple(failures),
        errors=dict(errors),
        ignored=ignored,
        stale=stale,
    )
