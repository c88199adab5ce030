"""How judge calls are executed: bounded, adaptive concurrency and retries that respect the server.

One asyncio code path. A call is retried on rate limits (429), server errors (5xx), connection failures and
timeouts with exponential backoff and full jitter, honouring ``Retry-After``; the attempt count is bounded.
On a 429 the limiter halves the number of calls in flight and then grows it back one slot at a time
(additive increase, multiplicative decrease), so a run settles just below the provider's limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

from pydantic import BaseModel, Field
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from greval.errors import UserError

T = TypeVar("T")


class RetryPolicy(BaseModel):
    """Bounds on retrying one judge call."""

    max_attempts: int = Field(6, ge=1, description="Transport attempts per call (429 / 5xx / timeout).")
    base_delay: float = Field(0.5, ge=0, description="First backoff, doubled each attempt (with jitter).")
    max_delay: float = Field(30.0, ge=0, description="Longest single wait, Retry-After included.")
    parse_attempts: int = Field(3, ge=1, description="Calls per item before an unparsable answer is an error.")
    reask_rounds: int = Field(2, ge=0, description="Follow-up calls for items a many-judge left out.")


class JudgeUnavailable(UserError):
    """The judge cannot be used at all (bad key, unknown model): stop the run, keep what is stored."""


class UnsupportedMethod(Exception):
    """The server rejected this structured-output method (HTTP 400): fall back to the next one."""


@dataclass
class Failure:
    kind: str  # rate_limit | server | timeout | connection | fatal | unsupported
    retry_after: float | None = None


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    raw = headers.get("retry-after-ms")
    if raw:
        try:
            return float(raw) / 1000.0
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        import datetime as _dt

        return max(0.0, (when - _dt.datetime.now(when.tzinfo)).total_seconds())


def classify(exc: BaseException) -> Failure:
    """Map an exception from any LangChain chat model to what to do about it."""
    name = type(exc).__name__
    status = _status(exc)
    if isinstance(exc, asyncio.TimeoutError | TimeoutError) or "Timeout" in name:
        return Failure("timeout")
    if status == 429 or "RateLimit" in name:
        return Failure("rate_limit", _retry_after(exc))
    if status is not None and status >= 500:
        return Failure("server", _retry_after(exc))
    if "Connection" in name or isinstance(exc, ConnectionError):
        return Failure("connection")
    if status == 400:
        text = str(exc).lower()
        if any(w in text for w in ("response_format", "json_schema", "tool", "function", "not supported")):
            return Failure("unsupported")
    if status in (401, 403, 404) or "Authentication" in name or "PermissionDenied" in name or "NotFound" in name:
        return Failure("fatal")
    if status is not None and 400 <= status < 500:
        return Failure("fatal")
    return Failure("unknown")


_RETRYABLE = {"rate_limit", "server", "timeout", "connection"}


class AdaptiveLimiter:
    """A semaphore whose size adapts: halves on rate limiting, grows back by one per window of successes.

    Waiters queue first-in first-out and a release wakes exactly the waiters that now fit (no thundering
    herd: waking everyone on each release made the client's CPU per call grow with concurrency).
    """

    def __init__(self, limit: int, adaptive: bool = True) -> None:
        if limit < 1:
            raise ValueError("concurrency must be at least 1")
        self.max_limit = limit
        self.limit = float(limit)
        self.adaptive = adaptive
        self.in_flight = 0
        self.peak = 0
        self.rate_limited = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def _take(self) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def _wake(self) -> None:
        while self._waiters and self.in_flight < int(self.limit):
            fut = self._waiters.popleft()
            if not fut.done():
                self._take()
                fut.set_result(None)

    async def __aenter__(self) -> AdaptiveLimiter:
        if self.in_flight < int(self.limit) and not self._waiters:
            self._take()
            return self
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # the slot was handed over just before the cancel
                self.in_flight -= 1
                self._wake()
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.in_flight -= 1
        self._wake()

    def on_success(self) -> None:
        if self.adaptive and self.limit < self.max_limit:
            self.limit = min(float(self.max_limit), self.limit + 1.0 / max(self.limit, 1.0))
            self._wake()

    def on_rate_limited(self) -> None:
        self.rate_limited += 1
        if self.adaptive:
            self.limit = max(1.0, self.limit / 2.0)


def _delay(exc: BaseException | None, attempt: int, policy: RetryPolicy) -> float:
    """Seconds to wait after failed attempt number ``attempt``: Retry-After when the server gives one
    (honoured up to a minute, plus a little jitter), else exponential backoff with full jitter."""
    hint = classify(exc).retry_after if exc is not None else None
    if hint is not None:
        return min(hint, max(policy.max_delay, 60.0)) + random.uniform(0, policy.base_delay)
    return random.uniform(0, min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1)))


def _wait(policy: RetryPolicy, offset: int) -> Callable[[RetryCallState], float]:
    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return _delay(exc, state.attempt_number + offset, policy)

    return wait


async def call_with_retries(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    limiter: AdaptiveLimiter | None,
    on_attempt: Callable[[], None] | None = None,
) -> T:
    """Run ``fn`` under the limiter, retrying transport failures; re-raise the last error when out of tries.

    ``UnsupportedMethod`` and ``JudgeUnavailable`` are raised at once (retrying cannot help).
    """

    async def attempt() -> T:
        if on_attempt is not None:
            on_attempt()
        try:
            if limiter is None:
                result = await fn()
            else:
                async with limiter:
                    result = await fn()
        except Exception as exc:
            kind = classify(exc).kind
            if kind == "rate_limit" and limiter is not None:
                limiter.on_rate_limited()
            if kind == "unsupported":
                raise UnsupportedMethod(str(exc)) from exc
            if kind == "fatal":
                raise JudgeUnavailable(f"the judge model refused the request: {_short(exc)}") from exc
            raise
        if limiter is not None:
            limiter.on_success()
        return result

    # Most calls succeed at once: only a failed first attempt pays for setting up tenacity.
    try:
        return await attempt()
    except Exception as exc:
        if classify(exc).kind not in _RETRYABLE or policy.max_attempts <= 1:
            raise
        await asyncio.sleep(_delay(exc, 1, policy))
    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.max_attempts - 1),
        wait=_wait(policy, offset=1),
        retry=retry_if_exception(lambda e: classify(e).kind in _RETRYABLE),
        reraise=True,
    )
    return await retrying(attempt)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300]


def describe_error(exc: BaseException) -> str:
    """A one-line, secret-free description for an error row."""
    failure = classify(exc)
    status = _status(exc)
    prefix = {
        "rate_limit": "rate limited (429)",
        "server": f"server error ({status})",
        "timeout": "timed out",
        "connection": "connection failed",
    }.get(failure.kind, type(exc).__name__)
    return f"{prefix}: {_short(exc)}" if failure.kind not in ("timeout",) else prefix


def redact(text: str, secrets: list[str | None]) -> str:
    """Remove API keys from anything about to be logged or stored."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


__all__: list[Any] = [
    "AdaptiveLimiter",
    "JudgeUnavailable",
    "RetryPolicy",
    "UnsupportedMethod",
    "call_with_retries",
    "classify",
    "describe_error",
    "redact",
]
