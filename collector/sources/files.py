"""Static targets from a Prometheus file_sd file, re-read when it changes."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from collector.normalise.schema import Flavour
from collector.sources.targets import DiscoveryState, Target

log = logging.getLogger(__name__)


class _Labels(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    node: str = Field(min_length=1)
    flavour: str = "hami"
    metrics_path: str = Field("/metrics", alias="__metrics_path__")
    scheme: str = Field("http", alias="__scheme__", pattern="^https?$")


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid")

    targets: list[str]
    labels: _Labels


_GROUPS = TypeAdapter(list[_Group])


def load_targets(path: Path) -> list[Target]:
    """Read and check a file_sd file; raise ``ValueError`` naming what is wrong."""
    raw = path.read_bytes()
    try:
        text = raw.decode()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        groups = _GROUPS.validate_python(data or [])
    except ValidationError as exc:
        raise ValueError(f"{path}: {_first_problem(exc)}") from None
    except (ValueError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    except RecursionError:  # both parsers recurse per level of nesting
        raise ValueError(f"{path}: nested too deeply") from None
    targets = []
    for index, group in enumerate(groups):
        labels = group.labels
        if labels.flavour not in set(Flavour):
            raise ValueError(
                f"{path}: group {index}: labels.flavour {labels.flavour!r} "
                f"is not one of {', '.join(Flavour)}"
            )
        for address in group.targets:
            url = f"{labels.scheme}://{address}{labels.metrics_path}"
            targets.append(
                Target(
                    f"file/{labels.node}/{url}", url, labels.node, Flavour(labels.flavour), address
                )
            )
    return targets


def _first_problem(error: ValidationError) -> str:
    """``group N: FIELD: what is wrong``, for the first of a file's problems."""
    item = error.errors(include_url=False)[0]
    loc = [str(part) for part in item["loc"]]
    where = f"group {loc[0]}: {'.'.join(loc[1:]) or 'the group'}" if loc else "the file"
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{where}: {item['msg']}{more}"


class FileDiscovery:
    """Polls a targets file; a bad version keeps the last good set and says why."""

    def __init__(
        self, path: Path, sink: Callable[[list[Target]], Awaitable[None]], poll: float = 2.0
    ) -> None:
        self.path = path
        self.synced = False
        self._sink = sink
        self._poll = poll
        self._targets = 0
        self._error = ""

    def status(self) -> DiscoveryState:
        """Whether the file was read, how many targets it gave, why its latest read failed."""
        return DiscoveryState(f"targets file {self.path}", self.synced, self._targets, self._error)

    async def run(self) -> None:
        """Re-read the file whenever its size or modification time changes."""
        seen: tuple[int, int] | None = None
        while True:
            try:
                stat = self.path.stat()
                stamp = (stat.st_mtime_ns, stat.st_size)
            except OSError as exc:
                stamp = (-1, -1)
                self._error = f"cannot read: {exc}"
                if seen != stamp:
                    log.error(
                        "cannot read targets file %s: %s; keeping the last good targets",
                        self.path,
                        exc,
                    )
            if stamp != seen and stamp != (-1, -1):
                try:
                    targets = await asyncio.to_thread(load_targets, self.path)
                except (OSError, ValueError) as exc:
                    log.error("bad targets file, keeping the last good targets: %s", exc)
                    self._error = f"{exc}; the last good targets are kept"
                else:
                    log.info("targets file %s: %d targets", self.path, len(targets))
                    await self._sink(targets)
                    self._targets, self._error = len(targets), ""
            seen = stamp
            self.synced = True
            await asyncio.sleep(self._poll)
