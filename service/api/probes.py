"""Probes of the services the API depends on, shared by the requests that come while one runs
(a database or a Redis that hangs holds one thread of the pool the routes run in, not one per
request), each awaited for at most a deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

T = TypeVar("T")


async def shared(app: FastAPI, name: str, check: Callable[[], T]) -> T:
    """``check()``'s answer, run in the thread pool one at a time per ``name``: a request that
    comes while one runs awaits the same answer."""
    loop = asyncio.get_running_loop()
    running: asyncio.Future[Any] | None = getattr(app.state, name, None)
    if running is None or running.done() or running.get_loop() is not loop:
        running = asyncio.ensure_future(run_in_threadpool(check))
        running.add_done_callback(_retrieved)  # no "never retrieved" log if all left
        setattr(app.state, name, running)
    return await asyncio.shield(running)


def _retrieved(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()
