"""How judge calls are executed: typed failures, bounded adaptive concurrency, retries that respect the server.

One asyncio code path. Every failure is classified once, into an :class:`ErrorKind`, from what the error *is*
(its exception type, HTTP status and the structured ``code`` / ``param`` of the error body; well-known message
phrases only for servers that send no code), and that kind decides what happens:

* ``rate_limited``, ``server_error``, ``timeout``, ``connection``: retried with exponential backoff and full
  jitter, honouring ``Retry-After``; the attempt count is bounded.
* ``context_length``, ``content_filter``, ``bad_request``, ``unparsable``, ``incomplete``: about ONE request —
  the judgement gets an error verdict and the run goes on.
* ``unsupported``: the server refused the structured-output method; the judge falls back to the next method.
* ``auth``, ``not_found``, ``quota``: every call would fail the same way — :class:`JudgeUnavailable` stops the run.

:func:`describe_error` is the one place an error becomes text: ``"<kind>: <detail>"`` with API keys and
bearer tokens removed (:func:`redact`), so the text can be printed, logged, stored and exported.

The limiter (:class:`greval.llm.limiter.AdaptiveLimiter`) cuts concurrency once per rate-limit episode and
grows it back per round of successes (see its docstring).
"""

from __future__ import annotations

import asyncio
import datetime
import random
import re
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, Field

from greval.errors import GrevalError, UserError, option
from greval.llm.limiter import AdaptiveLimiter
from greval.types import ErrorKind

if TYPE_CHECKING:
    from tenacity import RetryCallState

T = TypeVar("T")


class RetryPolicy(BaseModel):
    """Bounds on retrying one judge call."""

    max_attempts: int = Field(6, ge=1, description="Transport attempts per call (429 / 5xx / timeout).")
    base_delay: float = Field(0.5, ge=0, description="First backoff, doubled each attempt (with jitter).")
    max_delay: float = Field(30.0, ge=0, description="Longest single wait, Retry-After included.")
    parse_attempts: int = Field(3, ge=1, description="Calls per item before an unparsable answer is an error.")
    reask_rounds: int = Field(2, ge=0, description="Follow-up calls for items a many-judge left out.")


# ------------------------------------------------------------------------------------------ kinds
class JudgeError(GrevalError):
    """An error greval raises about one judgement, with its kind (see :class:`ErrorKind`)."""

    kind: ErrorKind = ErrorKind.UNKNOWN


class CallFailed(JudgeError, UserError):
    """A model call failed for good — retries spent, or an error about this request (context length …).

    Raised by :func:`call_with_retries` instead of the SDK's exception, whose text may hold whatever the server
    echoed (an API key): the message is :func:`describe_error`'s (``"<kind>: …"``, redacted). A judge records
    it as the judgement's error; a one-shot command prints it in one line.
    """

    def __init__(self, text: str, kind: ErrorKind, status: int | None = None) -> None:
        super().__init__(text)
        self.kind = kind
        self.status = status


class JudgeUnavailable(UserError):
    """The judge cannot be used at all (bad key, unknown model, no usable method): stop the run, keep what is
    stored. Its message is already redacted."""

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.UNKNOWN) -> None:
        super().__init__(message)
        self.kind = kind


class CutOff(JudgeError):
    """The model stopped at the max_tokens limit (finish_reason ``length``) before its answer was complete."""

    kind = ErrorKind.TRUNCATED


class Filtered(JudgeError):
    """The provider's content filter withheld the answer (HTTP 200, finish_reason ``content_filter``)."""

    kind = ErrorKind.CONTENT_FILTER


CUT_OFF_HINT = f"raise the judge's token budget ({option('max_tokens')}) or use a larger judge model"


def finish_reason(message: Any) -> str | None:
    """Why the model stopped, as a chat model's message reports it (``stop``, ``length``, ``content_filter`` …)."""
    meta = getattr(message, "response_metadata", None) or {}
    reason = meta.get("finish_reason")
    return str(reason) if reason else None


class UnsupportedMethod(JudgeError):
    """The server rejected this structured-output method (HTTP 400): fall back to the next one."""

    kind = ErrorKind.UNSUPPORTED


@dataclass(frozen=True)
class Failure:
    kind: ErrorKind
    status: int | None = None
    retry_after: float | None = None


# ------------------------------------------------------------------------------- classification
def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and what caused it (LangChain wraps the SDK's errors), at most a few levels."""
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(out) < 5 and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)
    return out


def _status(exc: BaseException) -> int | None:
    for e in _chain(exc):
        status = getattr(e, "status_code", None)
        if isinstance(status, int):
            return status
        code = getattr(getattr(e, "response", None), "status_code", None)
        if isinstance(code, int):
            return code
    return None


def _error_body(exc: BaseException) -> dict[str, Any]:
    """The error object of an HTTP error's JSON body (``{"message", "type", "code", "param"}``), if any."""
    for e in _chain(exc):
        body = getattr(e, "body", None)
        if isinstance(body, dict):
            inner = body.get("error", body)
            return inner if isinstance(inner, dict) else body
    return {}


def _field(exc: BaseException, name: str) -> str:
    for e in _chain(exc):
        value = getattr(e, name, None)
        if isinstance(value, str) and value:
            return value.lower()
    value = _error_body(exc).get(name)
    return str(value).lower() if value not in (None, "") else ""


def _retry_after(exc: BaseException) -> float | None:
    headers = None
    for e in _chain(exc):
        headers = getattr(getattr(e, "response", None), "headers", None)
        if headers:
            break
    if not headers:
        return None
    raw = headers.get("retry-after-ms")
    if raw:
        try:
            return max(0.0, float(raw) / 1000.0)
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
        return max(0.0, (when - datetime.datetime.now(when.tzinfo)).total_seconds())


# Structured error codes (OpenAI, Azure OpenAI, llama.cpp, LiteLLM …).
_CONTEXT_CODES = frozenset(
    {"context_length_exceeded", "string_above_max_length", "exceed_context_size_error", "context_window_exceeded"}
)
_FILTER_CODES = frozenset({"content_filter", "content_policy_violation", "invalid_prompt", "moderation_blocked"})
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
# Request parameters that carry a structured-output method: a 400 about one of them refuses the method.
_METHOD_PARAMS = frozenset(
    {"response_format", "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls"}
)
# For servers whose errors carry no code (vLLM, Ollama, older proxies): their well-known phrases (and every one
# LangChain's ChatOpenAI turns into its context-overflow error, so greval's own client needs no LangChain for it).
_CONTEXT_PHRASES = (
    "context_length_exceeded",
    "contextwindowexceeded",
    "maximum context length",
    "context length",
    "context window",
    "context size",
    "prompt is too long",
    "input tokens exceed",
    "too many tokens",
)
_FILTER_PHRASES = ("content filter", "content_filter", "content management policy", "content policy", "flagged")
_METHOD_PHRASES = ("response_format", "json_schema", "tool_choice", "tools", "tool call", "function call", "functions")


def _sdk_kind(exc: BaseException) -> ErrorKind | None:
    """A failure without an HTTP status from the libraries greval calls models through (openai, httpx,
    LangChain), by class. Only libraries already imported are asked: an exception of one of their classes means
    its module was imported, so a failure never imports them (a run with greval's own judge has none of them)."""
    openai, httpx, lc = (sys.modules.get(m) for m in ("openai", "httpx", "langchain_core.exceptions"))
    overflow = getattr(lc, "ContextOverflowError", None)  # langchain-core >= 1.0
    for e in _chain(exc):
        if overflow is not None and isinstance(e, overflow):
            return ErrorKind.CONTEXT_LENGTH
        if _instance(e, (openai, "APITimeoutError"), (httpx, "TimeoutException")):
            return ErrorKind.TIMEOUT
        if _instance(e, (openai, "APIConnectionError"), (httpx, "TransportError")):
            return ErrorKind.CONNECTION
        if _instance(e, (openai, "RateLimitError")):
            return ErrorKind.RATE_LIMITED
        if _instance(e, (openai, "AuthenticationError"), (openai, "PermissionDeniedError")):
            return ErrorKind.AUTH
        if _instance(e, (openai, "NotFoundError")):
            return ErrorKind.NOT_FOUND
    return None


def _instance(e: BaseException, *classes: tuple[Any, str]) -> bool:
    """Whether ``e`` is an instance of one of ``(module or None, class name)``."""
    return any(isinstance(e, cls) for module, name in classes if isinstance(cls := getattr(module, name, None), type))


def _foreign_names(exc: BaseException) -> str:
    """Class names along the cause chain: the last resort for providers' SDKs greval does not depend on
    (and so cannot import to test by class), whose timeouts and refusals carry no HTTP status."""
    return " ".join(c.__name__ for e in _chain(exc) for c in type(e).__mro__)


def _finish_kind(exc: BaseException) -> ErrorKind | None:
    """The openai SDK's ``.parse()`` raises on an answer that did not finish (HTTP 200, not an API error); only
    when the SDK is imported can an exception be one of its."""
    openai = sys.modules.get("openai")
    for e in _chain(exc):
        if _instance(e, (openai, "LengthFinishReasonError")):
            return ErrorKind.TRUNCATED
        if _instance(e, (openai, "ContentFilterFinishReasonError")):
            return ErrorKind.CONTENT_FILTER
    return None


def _classify_request_error(exc: BaseException, status: int) -> ErrorKind:
    """A 4xx that is neither auth, not-found nor rate limiting: about this request, or about the method."""
    code = _field(exc, "code")
    if status == 413 or code in _CONTEXT_CODES or _sdk_kind(exc) == ErrorKind.CONTEXT_LENGTH:
        return ErrorKind.CONTEXT_LENGTH
    if code in _FILTER_CODES:
        return ErrorKind.CONTENT_FILTER
    if _field(exc, "param") in _METHOD_PARAMS:
        return ErrorKind.UNSUPPORTED
    text = (str(_error_body(exc).get("message") or "") or str(exc)).lower()
    if any(p in text for p in _CONTEXT_PHRASES):
        return ErrorKind.CONTEXT_LENGTH
    if any(p in text for p in _FILTER_PHRASES):
        return ErrorKind.CONTENT_FILTER
    if any(p in text for p in _METHOD_PHRASES):
        return ErrorKind.UNSUPPORTED  # a 400 about the response format or the tools refuses the method
    return ErrorKind.BAD_REQUEST


def classify(exc: BaseException) -> Failure:
    """What an exception from any LangChain chat model (or greval itself) means, and so what to do about it."""
    if isinstance(exc, JudgeUnavailable):
        return Failure(exc.kind)
    if isinstance(exc, JudgeError):
        return Failure(exc.kind)
    finished = _finish_kind(exc)
    if finished is not None:
        return Failure(finished)
    status = _status(exc)
    if status is None:
        if isinstance(exc, asyncio.TimeoutError | TimeoutError):
            return Failure(ErrorKind.TIMEOUT)
        known = _sdk_kind(exc)
        if known is not None:
            return Failure(known, None, _retry_after(exc) if known == ErrorKind.RATE_LIMITED else None)
        names = _foreign_names(exc)
        if "Timeout" in names:
            return Failure(ErrorKind.TIMEOUT)
        if isinstance(exc, ConnectionError) or "Connection" in names:
            return Failure(ErrorKind.CONNECTION)
        if "RateLimit" in names:
            return Failure(ErrorKind.RATE_LIMITED, None, _retry_after(exc))
        if "Authentication" in names or "PermissionDenied" in names:
            return Failure(ErrorKind.AUTH)
        if "NotFound" in names:
            return Failure(ErrorKind.NOT_FOUND)
        if "ContextOverflow" in names or "ContextWindow" in names:
            return Failure(ErrorKind.CONTEXT_LENGTH)
        return Failure(ErrorKind.UNKNOWN)
    if status == 429:
        if _field(exc, "code") in _QUOTA_CODES or _field(exc, "type") in _QUOTA_CODES:
            return Failure(ErrorKind.QUOTA, status)
        return Failure(ErrorKind.RATE_LIMITED, status, _retry_after(exc))
    if status >= 500 or status == 409:
        return Failure(ErrorKind.SERVER_ERROR, status, _retry_after(exc))
    if status == 408:
        return Failure(ErrorKind.TIMEOUT, status)
    if status in (401, 403):
        return Failure(ErrorKind.AUTH, status)
    if status == 404:
        return Failure(ErrorKind.NOT_FOUND, status)
    if 400 <= status < 500:
        return Failure(_classify_request_error(exc, status), status)
    return Failure(ErrorKind.UNKNOWN, status)


# ------------------------------------------------------------------------------------- secrets
_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()
_MIN_SECRET = 8  # shorter "keys" (``test``, ``x``) are placeholders: replacing them would garble messages
REDACTED = "[REDACTED]"  # upper case: rich (the CLI's console) reads "[redacted]" as a style tag
_TOKEN_PATTERNS = (
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=:-]+"), r"\1 " + REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"), REDACTED),
    (
        re.compile(
            r"(?i)\b(api[_-]?key|x-api-key|authorization)(['\"]?\s*[:=]\s*['\"]?)(?!(?:bearer|basic)\s)[^\s'\",;\[]+"
        ),
        r"\1\2" + REDACTED,
    ),
)


def register_secret(value: str | None) -> None:
    """Remember a configured API key: :func:`redact` removes it from every error text from now on."""
    if value and len(value) >= _MIN_SECRET:
        with _SECRETS_LOCK:
            _SECRETS.add(value)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` without API keys: every registered key (and ``secrets``), and ``Bearer …`` / ``sk-…`` /
    ``api_key=…``-shaped tokens, replaced by ``[REDACTED]``."""
    with _SECRETS_LOCK:
        known = sorted({*_SECRETS, *(s for s in secrets if s and len(s) >= _MIN_SECRET)}, key=len, reverse=True)
    for secret in known:
        if secret in text:
            text = text.replace(secret, REDACTED)
    for pattern, replacement in _TOKEN_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


# --------------------------------------------------------------------------------- describing
_MAX_DETAIL = 300


def _detail(exc: BaseException, failure: Failure) -> str:
    if isinstance(exc, JudgeError | JudgeUnavailable):
        return str(exc)
    if failure.kind is ErrorKind.TRUNCATED:
        usage = next((getattr(e, "completion", None) for e in _chain(exc) if hasattr(e, "completion")), None)
        used = getattr(getattr(usage, "usage", None), "completion_tokens", None)
        after = f" after {used} tokens" if used else ""
        return f"the answer was cut off at the token limit{after} (finish_reason=length); {CUT_OFF_HINT}"
    if failure.kind is ErrorKind.CONTENT_FILTER and failure.status is None:
        return "the provider's content filter withheld the answer (finish_reason=content_filter)"
    if failure.status is not None:
        message = _error_body(exc).get("message")
        text = message if isinstance(message, str) and message else str(exc)
        return f"HTTP {failure.status}: {text}"
    text = str(exc)
    if failure.kind in (ErrorKind.TIMEOUT, ErrorKind.CONNECTION):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def describe_error(exc: BaseException) -> str:
    """The one place an error becomes text: ``"<kind>: <detail>"`` on one line, secrets removed.

    Everything greval prints, logs, stores, exports or raises about a failed call goes through here.
    """
    failure = classify(exc)
    detail = redact(" ".join(_detail(exc, failure).split()))
    if len(detail) > _MAX_DETAIL:
        detail = detail[: _MAX_DETAIL - 1] + "…"
    prefix = f"{failure.kind.value}: "
    return detail if detail.startswith(prefix) else prefix + detail


# ------------------------------------------------------------------------------------- retries
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


def _retryable(exc: BaseException) -> bool:
    return classify(exc).kind.retryable


async def call_with_retries(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    limiter: AdaptiveLimiter | None,
    on_attempt: Callable[[], None] | None = None,
) -> T:
    """Run ``fn`` under the limiter, retrying transport failures.

    Raises only greval's typed errors, with redacted messages: ``UnsupportedMethod`` (the method was refused)
    and ``JudgeUnavailable`` (auth, unknown model, quota) at once, retrying cannot help; :class:`CallFailed`
    for an error about this one request (context length, content filter …), at once, or for the last
    transport error once the attempts are spent.
    """
    try:
        return await _call_with_retries(fn, policy, limiter, on_attempt)
    except (JudgeError, JudgeUnavailable):
        raise
    except Exception as exc:
        failure = classify(exc)
        raise CallFailed(describe_error(exc), failure.kind, failure.status) from None


async def _call_with_retries(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    limiter: AdaptiveLimiter | None,
    on_attempt: Callable[[], None] | None,
) -> T:

    async def attempt() -> T:
        if on_attempt is not None:
            on_attempt()
        try:
            if limiter is None:
                result = await fn()
            else:
                async with limiter:
                    # The limiter hears how the call went while the call still holds its slot: a refused call
                    # must cut before its slot goes to the next waiter.
                    started = limiter.clock()
                    try:
                        result = await fn()
                    except Exception as exc:
                        failure = classify(exc)
                        if failure.kind is ErrorKind.RATE_LIMITED:
                            limiter.on_rate_limited(started, failure.retry_after)
                        raise
                    limiter.on_success(started)
        except Exception as exc:
            failure = classify(exc)
            if failure.kind is ErrorKind.UNSUPPORTED and not isinstance(exc, UnsupportedMethod):
                raise UnsupportedMethod(describe_error(exc)) from None
            if failure.kind.fatal and not isinstance(exc, JudgeUnavailable):
                raise JudgeUnavailable(
                    f"the judge model cannot be used — {describe_error(exc)}", failure.kind
                ) from None
            raise
        return result

    # Most calls succeed at once: only a failed first attempt pays for setting up (and importing) tenacity.
    try:
        return await attempt()
    except Exception as exc:
        if not _retryable(exc) or policy.max_attempts <= 1:
            raise
        await asyncio.sleep(_delay(exc, 1, policy))
    from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.max_attempts - 1),
        wait=_wait(policy, offset=1),
        retry=retry_if_exception(_retryable),
        reraise=True,
    )
    return await retrying(attempt)


__all__: list[Any] = [
    "REDACTED",
    "CallFailed",
    "ErrorKind",
    "Failure",
    "JudgeError",
    "JudgeUnavailable",
    "RetryPolicy",
    "UnsupportedMethod",
    "call_with_retries",
    "classify",
    "describe_error",
    "redact",
    "register_secret",
]
