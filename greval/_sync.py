"""The one bridge from synchronous code to greval's async path.

LangChain's OpenAI client caches its HTTP connection pool per process, and a pool belongs to the event loop
that first used it. ``asyncio.run`` per call would create and close a loop each time and leave the cached
pool bound to a dead loop, so every sync wrapper submits to one long-lived loop in a daemon thread instead.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import threading
import time
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_lock = threading.Lock()


#: How long the exit waits for greval's loop to close what it holds (its HTTP connections), seconds.
EXIT_CLOSE_S = 2.0


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The loop's thread: run until :func:`_shut_down` stops it, then close it."""
    try:
        loop.run_forever()
    finally:
        loop.close()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            _thread = threading.Thread(target=_serve, args=(loop,), name="greval-loop", daemon=True)
            _thread.start()
            _loop = loop
        return _loop


def _shut_down() -> None:
    """At exit: greval's loop shut down as ``asyncio.run`` shuts its loop down — the async generators that
    hold the loop's HTTP clients (greval.llm.wire, greval.llm.sdk) closed, with their pooled connections — then stopped.

    Without it Python collects the open connections at shutdown and prints a ``ResourceWarning: unclosed
    transport`` for each (seen with ``-W always::ResourceWarning`` or ``-X dev``). A loop that does not finish
    within :data:`EXIT_CLOSE_S` (a call that blocks it) is left to the process's end, its warnings silenced."""
    loop, thread = _loop, _thread
    if loop is None or thread is None or loop.is_closed() or not loop.is_running():
        return
    done = asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop)
    try:
        done.result(timeout=EXIT_CLOSE_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(EXIT_CLOSE_S)  # the loop closed too: nothing of it left for the interpreter's teardown
    except BaseException:  # a blocked loop, or Ctrl-C during the exit: the connections go with the process
        done.cancel()
        warnings.simplefilter("ignore", ResourceWarning)


atexit.register(_shut_down)


#: How often a waiting caller runs its ``poll`` callback (seconds).
POLL_S = 0.1


@dataclass(frozen=True, eq=False)
class _Call:
    """One :func:`run_sync` call in progress: its coroutine ended (``finished``), and nothing it made would be
    lost by leaving it now (``saved``, :func:`work_saved`)."""

    finished: threading.Event = field(default_factory=threading.Event)
    saved: threading.Event = field(default_factory=threading.Event)
    #: Held while the coroutine runs, released once ``finished`` is set: what the caller's thread waits on.
    running: threading.Lock = field(default_factory=threading.Lock)

    def wait(self, timeout: float) -> bool:
        """Whether the coroutine has ended, waiting up to ``timeout`` seconds. On a bare lock, not on
        ``finished``: a signal handler that raises (Ctrl-C, SIGTERM: greval.cli.common.run_signals) while
        Event.wait re-takes its Condition's lock leaves that lock released, and the wait's own exit then fails
        with "release unlocked lock" instead of the interrupt (seen in CI). A lock's acquire that a handler
        interrupts simply has not acquired it."""
        if self.finished.is_set():
            return True
        if self.running.acquire(timeout=timeout):
            self.running.release()
            return True
        return self.finished.is_set()


_calls: set[_Call] = set()  # the run_sync calls whose coroutine runs now
_call: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("greval_sync_call", default=None)


def work_saved() -> None:
    """Say, from a coroutine :func:`run_sync` runs, that what it made is stored: what remains (a run's closing
    bookkeeping) may be abandoned without losing any of it (:func:`wait_saved`). A no-op elsewhere."""
    call = _call.get()
    if call is not None:
        call.saved.set()


def busy() -> bool:
    """Whether a synchronous caller is waiting for a coroutine on greval's loop (a run going on)."""
    return bool(_calls)


def wait_saved(timeout: float) -> bool:
    """Wait, at most ``timeout`` seconds, until every coroutine :func:`run_sync` runs now has stored what it made
    (:func:`work_saved`) or ended. For a command's second Ctrl-C, which ends the process without waiting for the
    rest. True when all did in time."""
    deadline = time.monotonic() + timeout
    for call in list(_calls):
        while not (call.saved.is_set() or call.finished.is_set()):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            call.saved.wait(min(left, 0.05))
    return True


def run_sync(coro: Coroutine[Any, Any, T], *, poll: Callable[[], None] | None = None) -> T:
    """Run a coroutine to completion from synchronous code, on greval's loop, and wait for it here.

    Also from inside a running event loop (Jupyter runs one in the thread that runs a cell): the coroutine
    runs on greval's own loop all the same, and this thread waits for it as for any blocking call — nothing
    is nested in the caller's loop. Only a call from greval's own loop is refused (it would wait for itself).
    ``poll``: called in this thread every :data:`POLL_S` while waiting (a notebook's progress bar is drawn
    from the thread that runs the cell)."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None and running is _loop:
        coro.close()
        raise RuntimeError(
            "greval: a sync call from greval's own event loop would wait for itself; await the async API"
        )
    call = _Call()
    call.running.acquire()

    async def until_done() -> T:
        _call.set(call)  # this task's context: work_saved() in the coroutine reaches this call
        try:
            return await coro
        finally:
            call.finished.set()
            call.running.release()
            _calls.discard(call)

    _calls.add(call)
    future = asyncio.run_coroutine_threadsafe(until_done(), _background_loop())
    try:
        while not call.wait(POLL_S):
            if poll is not None:
                poll()
        return future.result()
    except BaseException:
        # Ctrl-C (or any error) in this thread: cancel the coroutine and wait for its own cleanup — a run
        # records its status and summary in the store — before the caller closes what it uses. A second
        # Ctrl-C stops the wait (the command line ends the process then: greval.cli.common.run_signals).
        future.cancel()
        with contextlib.suppress(KeyboardInterrupt):
            while not call.wait(0.1):
                pass
        raise
    finally:
        _calls.discard(call)


async def on_greval_loop(coro: Coroutine[Any, Any, T], *, poll: Callable[[], None] | None = None) -> T:
    """Await, from any event loop, a coroutine that runs on greval's loop (the async twin of :func:`run_sync`).

    The caller's loop stays free meanwhile, and greval's model clients keep to the one loop their connection
    pools belong to. ``poll``: called on the caller's loop every :data:`POLL_S` until the coroutine ends.
    Cancelling the caller cancels the coroutine."""
    loop = _background_loop()
    if asyncio.get_running_loop() is loop:
        return await coro
    future = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))
    try:
        while poll is not None and not future.done():
            await asyncio.wait([future], timeout=POLL_S)
            poll()
        return await future
    except asyncio.CancelledError:
        future.cancel()  # reaches the task on greval's loop
        raise
