"""How an evaluator calls its model, as one frozen bundle: :class:`CallOptions`.

A run builds it once (:meth:`greval.runner.options.RunOptions.call_options`) and every evaluator of the run
shares it: one adaptive limiter, one log-probability request (whose notes the run prints once). Python callers
may pass the same settings as keywords to :class:`greval.judge.judge.Judge`, :func:`greval.judge.compile` and
:func:`greval.judge.compile_suite` (:class:`Options`, turned into a bundle by :meth:`CallOptions.of`). No
LangChain here: the runner builds the bundle before knowing whether any model is called.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, Unpack

from greval.judge.logprobs import LogprobRequest
from greval.llm.limiter import AdaptiveLimiter
from greval.llm.retry import RetryPolicy
from greval.types import Method

__all__ = ["CallOptions", "Options"]


@dataclass(frozen=True)
class CallOptions:
    """How every model call of an evaluator is made. Frozen: built once, shared by the evaluators of a run."""

    #: The structured-output method, or "auto": each in turn, falling back when a server refuses one.
    method: Method | Literal["auto"] = "auto"
    #: Independent answers per judgement, combined by majority.
    samples: int = 1
    #: Transport retries, parse re-asks, item re-ask rounds.
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    #: The concurrency limit shared by every call (backs off on rate limits); None: unbounded.
    limiter: AdaptiveLimiter | None = None
    #: False: every call through LangChain's ``ainvoke`` (see greval.llm.call).
    direct: bool = True
    #: Token log-probabilities for each verdict's ``token_confidence`` (judge specs only: a pipeline's steps and
    #: computed metrics have no single verdict token to read); shared, so its notes are said once.
    logprobs: LogprobRequest | None = None

    @classmethod
    def of(cls, base: CallOptions | None = None, **options: Unpack[Options]) -> CallOptions:
        """``base`` (default: the defaults) with the keyword settings a Python caller gave, checked by name:
        ``policy=None`` is the default policy, ``logprobs=3`` a request for 3 alternatives per token."""
        calls = base or cls()
        if not options:
            return calls
        changes: dict[str, Any] = dict(options)
        if "policy" in options:
            changes["policy"] = options["policy"] or RetryPolicy()
        logprobs = options.get("logprobs")
        if isinstance(logprobs, int):
            changes["logprobs"] = LogprobRequest(logprobs)
        return dataclasses.replace(calls, **changes)

    def without_logprobs(self) -> CallOptions:
        """These options for calls whose answers have no single verdict token (a pipeline's steps)."""
        return self if self.logprobs is None else dataclasses.replace(self, logprobs=None)


class Options(TypedDict, total=False):
    """The keyword form of :class:`CallOptions` for Python callers (every key may be left out; a test holds
    the two to the same names)."""

    method: Method | Literal["auto"]
    samples: int
    policy: RetryPolicy | None
    limiter: AdaptiveLimiter | None
    direct: bool
    logprobs: LogprobRequest | int | None
