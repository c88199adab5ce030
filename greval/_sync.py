"""The one bridge from synchronous code to greval's async path.

LangChain's OpenAI client caches its HTTP connection pool per process, and a pool belongs to the event loop
that first used it. ``asyncio.run`` per call would create and close a loop each time and leave the cached
pool bound to a dead loop, so every sync wrapper submits to one long-lived loop in a daemon thread instead.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
import warnings
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def _quiet_exit() -> None:
    # Pooled keep-alive connections of the background loop are dropped with the process; Python would
    # otherwise print a ResourceWarning for each one at shutdown.
    warnings.simplefilter("ignore", ResourceWarning)


atexit.register(_quiet_exit)


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="greval-loop", daemon=True).start()
            _loop = loop
        return _loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code (not from inside a running event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise RuntimeError("greval: inside a running event loop, await the async API (ajudge / arun) instead")
    finished = threading.Event()

    async def until_done() -> T:
        try:
            return await coro
        finally:
            finished.set()

    future = asyncio.run_coroutine_threadsafe(until_done(), _background_loop())
    try:
        return future.result()
    except BaseException:
        # Ctrl-C (or any error) in this thread: cancel the coroutine and wait for its own cleanup — a run
        # records its status and summary in the store — before the caller closes what it uses. A second
        # Ctrl-C stops the wait.
        future.cancel()
        with contextlib.suppress(KeyboardInterrupt):
            while not finished.wait(0.1):
                pass
        raise
