"""Long-lived tasks with an owner: started for a block, cancelled and awaited at its end.

A module of its own so that the agent can use it without importing the
collector's app (and kubernetes_asyncio with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def owned(coro: Coroutine[Any, Any, None], name: str) -> AsyncIterator[asyncio.Task[None]]:
    """Run a task that should live as long as the block; log at once if it crashes."""
    task = asyncio.create_task(coro, name=name)
    task.add_done_callback(_ended)
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _ended(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        log.error("task %r crashed", task.get_name(), exc_info=error)
    else:
        log.warning("task %r ended, but it should run until shutdown", task.get_name())
