"""Bounded, adaptive concurrency for judge calls: a semaphore whose size follows the server's rate limits
(one cut per rate-limit episode, a cooldown, recovery per round of successes; see :class:`AdaptiveLimiter`)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections import deque


class AdaptiveLimiter:
    """A semaphore whose size adapts to rate limiting, like TCP's congestion window.

    * **One cut per episode.** A 429 from a call that *started* before the last cut belongs to the episode
      that cut already answered and changes nothing. A new episode halves the limit (multiplicative
      decrease), once, when the server is really refusing: at least ``tolerance`` (a third) of the last round
      of outcomes (``limit`` calls, at least ``min_window``) were 429s. Scattered 429s — a proxy refusing a
      random tenth of the calls — are left to the retries: cutting on each of them halved the window every
      round and settled a 32-slot run near 4 slots (7× slower). The price: a limit up to ~1.5× what the
      server accepts is kept as long as fewer than a third of the calls are refused (and retried).
    * **Cooldown.** After a cut, no new call starts before the 429's ``Retry-After`` has passed (the server
      asked every client of this key to wait), and only calls started after the cut count towards growth.
    * **Recovery per round.** After each round of successes (``limit`` successes at the current limit) the limit
      grows: halfway back to where it was before the cut (binary search, so a limit cut by a short burst is
      back within a few rounds), then by one per round (additive increase) to probe beyond it.

    Waiters queue first-in first-out and a release wakes exactly the waiters that now fit (no thundering
    herd). Waiters are futures of the loop they wait in: a limiter (and the judge holding it) can be used
    from several event loops, one after the other or at once.
    """

    def __init__(
        self,
        limit: int,
        adaptive: bool = True,
        *,
        tolerance: float = 1 / 3,
        min_window: int = 16,
        max_cooldown: float = 60.0,
    ) -> None:
        if limit < 1:
            raise ValueError("concurrency must be at least 1")
        self.max_limit = limit
        self.limit = float(limit)
        self.adaptive = adaptive
        self.tolerance = tolerance
        self.min_window = min_window
        self.max_cooldown = max_cooldown
        self.in_flight = 0
        self.peak = 0
        self.rate_limited = 0
        self.cuts = 0
        self.lowest = float(limit)
        self._lock = threading.RLock()  # the state is shared by every loop that uses this limiter
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._last_cut = -math.inf  # monotonic time of the last cut: the start of the current episode
        self._before_cut = float(limit)  # the limit the last cut started from (the target of recovery)
        self._resume_at = 0.0  # no call starts before this (Retry-After of the last cut)
        self._window: deque[bool] = deque(
            maxlen=max(limit, min_window)
        )  # outcomes since the cut (True: 429), newest last
        self._round = 0  # successes since the limit last changed
        self._timer_at: float | None = None  # when the pending cooldown timer fires

    @staticmethod
    def clock() -> float:
        return time.monotonic()

    # ------------------------------------------------------------------------------- slots
    def _take(self) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def _open(self) -> bool:
        return self.in_flight < int(self.limit) and self.clock() >= self._resume_at

    def _wake(self) -> None:
        """Hand free slots to the oldest waiters (each in its own loop)."""
        with self._lock:
            while self._waiters and self._open():
                fut = self._waiters.popleft()
                loop = fut.get_loop()
                if fut.done() or loop.is_closed():
                    continue
                self._take()
                if _running_loop() is loop:
                    fut.set_result(None)
                else:
                    loop.call_soon_threadsafe(self._hand_over, fut)
            if self._waiters and self.in_flight < int(self.limit):
                self._wake_at(self._resume_at)  # held by a cooldown: wake the queue when it ends

    def _hand_over(self, fut: asyncio.Future[None]) -> None:
        if fut.done():  # cancelled meanwhile: give the slot back
            self._release()
        else:
            fut.set_result(None)

    def _wake_at(self, when: float) -> None:
        """One timer (in the oldest waiter's loop) that wakes the queue when the cooldown ends."""
        if self._timer_at is not None and self._timer_at <= when:
            return
        loop = self._waiters[0].get_loop()
        if loop.is_closed():
            return
        self._timer_at = when

        def fire() -> None:
            with self._lock:
                self._timer_at = None
            self._wake()

        delay = max(0.0, when - self.clock())
        if _running_loop() is loop:
            loop.call_later(delay, fire)
        else:
            loop.call_soon_threadsafe(loop.call_later, delay, fire)

    def _release(self) -> None:
        with self._lock:
            self.in_flight -= 1
        self._wake()

    async def __aenter__(self) -> AdaptiveLimiter:
        with self._lock:
            if not self._waiters and self._open():
                self._take()
                return self
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            if self.in_flight < int(self.limit):
                self._wake_at(self._resume_at)
        try:
            await fut
        except asyncio.CancelledError:
            with self._lock:
                handed = fut.done() and not fut.cancelled()
                if not handed:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(fut)
            if handed:  # the slot was handed over just before the cancel
                self._release()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    # ------------------------------------------------------------------------------- signals
    def on_success(self, started: float | None = None) -> None:
        """A call that started at ``started`` (:meth:`clock`) succeeded."""
        if not self.adaptive:
            return
        with self._lock:
            if started is not None and started < self._last_cut:
                return  # an outcome of the window before the cut
            self._window.append(False)
            if self.limit >= self.max_limit or self.clock() < self._resume_at:
                return
            self._round += 1
            if self._round < int(self.limit):
                return
            self._round = 0
            gap = self._before_cut - self.limit
            step = max(1.0, math.floor(gap / 2)) if gap > 1 else 1.0
            self.limit = min(float(self.max_limit), self.limit + step)
        self._wake()

    def on_rate_limited(self, started: float | None = None, retry_after: float | None = None) -> None:
        """A call that started at ``started`` got a 429 (with ``Retry-After`` seconds, if the server said)."""
        with self._lock:
            self.rate_limited += 1
            if not self.adaptive:
                return
            now = self.clock()
            if started is not None and started < self._last_cut:
                return  # the episode the last cut answered
            self._window.append(True)
            size = max(int(self.limit), self.min_window)
            refused = sum(list(self._window)[-size:])
            if refused < max(1, math.ceil(self.tolerance * size)):
                return  # isolated 429s: the retries deal with them
            self._cut(now, retry_after)

    def cut(self, retry_after: float | None = None) -> None:
        """Halve the limit now, on evidence from elsewhere (another worker of the same run was rate limited:
        greval.scale), as this limiter's own rate-limit episode would."""
        with self._lock:
            self._cut(self.clock(), retry_after)

    def _cut(self, now: float, retry_after: float | None) -> None:
        """The cut itself (the caller holds the lock): half the limit, a new episode, the server's cooldown."""
        self._before_cut = self.limit
        self.limit = max(1.0, float(math.floor(self.limit / 2)))
        self.lowest = min(self.lowest, self.limit)
        self.cuts += 1
        self._last_cut = now
        self._window.clear()
        self._round = 0
        if retry_after:
            self._resume_at = max(self._resume_at, now + min(retry_after, self.max_cooldown))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
