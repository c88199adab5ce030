"""What the judge hands the runner and the store: the verdicts of one judgement and its call log.

Plain pydantic models with no model-calling code, so that reading a store (``greval results``, ``greval
report``, agreement from a store) does not import LangChain. ``greval.judge.judge`` re-exports the result
models (``CallLog``, ``ItemVerdict``, ``JudgeResult``, ``MISSING_INPUT``, ``not_applicable``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final, Literal

from pydantic import BaseModel, Field


class ErrorKind(StrEnum):
    """What went wrong with a judge call; the prefix of every stored error text (``"<kind>: …"``)."""

    CONTEXT_LENGTH = "context_length"  # the prompt does not fit the model's context (this request)
    CONTENT_FILTER = "content_filter"  # the provider's content filter refused this request
    BAD_REQUEST = "bad_request"  # any other 4xx about this request (invalid image, …)
    UNSUPPORTED = "unsupported"  # the structured-output method was refused: fall back to the next one
    RATE_LIMITED = "rate_limited"  # 429: retried after Retry-After, the limiter cuts concurrency
    QUOTA = "quota"  # 429 insufficient_quota: out of credit, every call fails
    SERVER_ERROR = "server_error"  # 5xx: retried
    TIMEOUT = "timeout"  # retried
    CONNECTION = "connection"  # retried
    UNPARSABLE = "unparsable"  # the answer is not JSON or does not fit the verdict schema (after re-asking)
    TRUNCATED = "truncated"  # the answer hit the max_tokens limit (finish_reason "length"; after re-asking)
    DEPENDENCY = "dependency"  # a metric it depends on failed (or was not given) for this record: not asked
    INCOMPLETE = "incomplete"  # a many-judge left items out (after re-asking)
    AUTH = "auth"  # 401 / 403: every call fails
    NOT_FOUND = "not_found"  # 404, e.g. an unknown model: every call fails
    INVALID_INPUT = "invalid_input"  # a computed metric cannot score this record's data (wrong type, no reference)
    UNKNOWN = "unknown"  # anything else (not an HTTP error): recorded for this judgement

    @property
    def retryable(self) -> bool:
        return self in _RETRYABLE

    @property
    def fatal(self) -> bool:
        """Every call would fail this way: stop the run."""
        return self in _FATAL


_RETRYABLE = frozenset({ErrorKind.RATE_LIMITED, ErrorKind.SERVER_ERROR, ErrorKind.TIMEOUT, ErrorKind.CONNECTION})
_FATAL = frozenset({ErrorKind.AUTH, ErrorKind.NOT_FOUND, ErrorKind.QUOTA})


Method = Literal["json_schema", "function_calling", "json_mode"]
"""How a judge asks for structured output (JSON schema, a forced tool call, JSON mode with the schema in the
prompt). Here, with no SDK, so that run options and spec declarations can name it without LangChain."""


PROMPT_LAYOUT: Final = 2
"""The layout of the judge's prompt (``greval/judge/prompt.py``, the pipeline steps' wording in
``greval/judge/pipeline.py``, the answer schema sent with a request). Part of the key of every verdict a model
gives (``greval.store.store.spec_keys``): bump it whenever what a judge model reads changes, so a run judges
again rather than mixing verdicts given to two prompts. 1: until 2026-11 (Markdown sections, the schema with
its descriptions); 2: the compact layout (issue 35)."""

RECORD_ITEM: Final = ""
"""The item id of a record-level verdict (a whole answer, not one of its chunks or triples)."""

UNITS: Final = "units"
"""The key of a record's ``outputs`` holding how many items its score is a share / mean over: the record's
weight in a dataset score pooled over items (``dataset_aggregate: micro``)."""


class ItemVerdict(BaseModel):
    """The verdict on one record (``item_id == ""``) or one chunk / triple of it."""

    item_id: str = RECORD_ITEM
    status: Literal["ok", "error", "skipped"] = "ok"
    label: str | None = None
    value: int | None = None
    score: float | None = Field(None, description="The value, or the label's score when labels have scores.")
    reason: str | None = None
    confidence: float | None = Field(None, description="Share of samples agreeing with the verdict.")
    token_confidence: float | None = Field(
        None,
        description="The judge's own probability of the verdict, from its token log-probabilities "
        "(greval.judge.logprobs; the mean over samples); None when they were not asked for or not given.",
    )
    error: str | None = None
    error_kind: ErrorKind | None = Field(None, description="Why an error verdict failed; set when status is 'error'.")
    samples: list[dict[str, Any]] | None = None


class CallLog(BaseModel):
    """One request to the model (retries of the same request are counted in ``attempts``)."""

    method: str
    items: list[str]
    latency_ms: float
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = Field(
        0, description="Of tokens_in, those the provider read from its prompt cache (OpenAI's cached_tokens)."
    )
    attempts: int = 1
    raw: str = ""
    error: str | None = None


class JudgeResult(BaseModel):
    """Everything one judgement of one record produced, successful or not."""

    spec: str
    spec_hash: str
    verdicts: list[ItemVerdict] = Field(default_factory=list)
    outputs: dict[str, Any] = Field(default_factory=dict)
    calls: list[CallLog] = Field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(v.status == "ok" for v in self.verdicts)

    @property
    def tokens_in(self) -> int:
        return sum(c.tokens_in for c in self.calls)

    @property
    def tokens_out(self) -> int:
        return sum(c.tokens_out for c in self.calls)

    @property
    def tokens_cached(self) -> int:
        return sum(c.tokens_cached for c in self.calls)

    @property
    def attempts(self) -> int:
        return sum(c.attempts for c in self.calls)

    @property
    def latency_ms(self) -> float:
        return sum(c.latency_ms for c in self.calls)


MISSING_INPUT = "missing required input"


def not_applicable(result: JudgeResult) -> bool:
    """A metric that could not apply to a record (an input it requires is absent) - not a failure of the
    judge, so metrics that read it go on without it."""
    return bool(result.error and result.error.startswith(MISSING_INPUT))
