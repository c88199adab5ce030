"""What the judge hands the runner and the store: the verdicts of one judgement and its call log.

Plain pydantic models with no model-calling code, so that reading a store (``greval results``, ``greval
report``, agreement from a store) does not import LangChain. ``greval.judge.judge`` re-exports every name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class ItemVerdict(BaseModel):
    """The verdict on one record (``item_id == ""``) or one chunk / triple of it."""

    item_id: str = ""
    status: Literal["ok", "error", "skipped"] = "ok"
    label: str | None = None
    value: int | None = None
    score: float | None = Field(None, description="The value, or the label's score when labels have scores.")
    reason: str | None = None
    confidence: float | None = Field(None, description="Share of samples agreeing with the verdict.")
    error: str | None = None
    samples: list[dict[str, Any]] | None = None


class CallLog(BaseModel):
    """One request to the model (retries of the same request are counted in ``attempts``)."""

    method: str
    items: list[str]
    latency_ms: float
    tokens_in: int = 0
    tokens_out: int = 0
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
