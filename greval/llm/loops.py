"""What belongs to one event loop — HTTP clients and their pooled connections — made on the loop's first use and
closed inside that loop when it shuts down.

A connection belongs to the loop that opened it: a client used from greval's background loop (``invoke``) and then
under ``asyncio.run`` (``ainvoke``) must not share one. The closing rides on ``loop.shutdown_asyncgens()``, which
``asyncio.run`` calls and greval's background loop calls at exit (greval._sync): an async generator suspended
for the loop's lifetime, resumed then to close what it holds.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["PerLoop"]

S = TypeVar("S")


class PerLoop(Generic[S]):
    """One ``make()`` per event loop, handed to ``close`` inside the loop when it shuts down."""

    def __init__(self, make: Callable[[], S], close: Callable[[S], Awaitable[None]]) -> None:
        self._make, self._close = make, close
        # the loop -> its state, and the suspended generator that closes it (held here: the loop holds it weakly)
        self._held: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[S, AsyncIterator[None]]] = (
            weakref.WeakKeyDictionary()
        )

    async def get(self) -> S:
        """The running loop's state (made, and registered to be closed with the loop, on first use)."""
        loop = asyncio.get_running_loop()
        held = self._held.get(loop)
        if held is None:
            state = self._make()
            closer = self._closing(state)
            await anext(closer)  # registers it with the loop's async-generator shutdown
            held = self._held[loop] = (state, closer)
        return held[0]

    def current(self) -> S | None:
        """The running loop's state if it has one (nothing is made)."""
        held = self._held.get(asyncio.get_running_loop())
        return None if held is None else held[0]

    async def _closing(self, state: S) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self._close(state)
