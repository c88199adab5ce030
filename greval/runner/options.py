"""What a run is asked to do and what it says it did: :class:`RunOptions` in, :class:`RunSummary` out.

The options change how a run judges, never a verdict's identity; :meth:`RunOptions.call_options` turns them
into the one bundle every evaluator of a run shares (:class:`greval.judge.options.CallOptions`). The summary's
per-metric figures are the store's (:class:`greval.store.results.MetricFigures`), with this run's activity
beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

from pydantic import BaseModel, Field

from greval.dataset.sample import Sample
from greval.judge.logprobs import LogprobRequest
from greval.judge.options import CallOptions
from greval.llm.limiter import AdaptiveLimiter
from greval.llm.prices import Price, RunCost, load_prices, run_cost
from greval.llm.retry import RetryPolicy
from greval.store.results import MetricFigures

__all__ = [
    "PER_WORKER",
    "WORKER_MIN_WORK",
    "EngineTotals",
    "MetricSummary",
    "ProgressHook",
    "RunOptions",
    "RunSummary",
    "SampleSummary",
    "default_workers",
]

#: What a run reports as it goes: (done, total, errors).
ProgressHook = Callable[[int, int, int], None]

#: Calls in flight one process feeds: ~1 ms of client CPU a call (greval.llm.wire) keeps one event loop at 0.89 of
#: the limit at 128 in flight and 200 ms of latency, where two workers did no better (0.987×) and at 256 they did
#: (1.16×; scripts/bench_run.py, docs/benchmarks.md). The default is one process per this many, one per core.
PER_WORKER = 128

#: Judgements a worker process is worth starting for (its start costs ~0.5 s of CPU, ~150 calls' worth).
WORKER_MIN_WORK = 256


class RunOptions(BaseModel):
    """How to run (none of it changes a verdict's identity)."""

    concurrency: int = Field(8, ge=1, description="Model calls in flight at most.")
    adaptive: bool = Field(True, description="Halve concurrency once per rate-limit episode, then grow back.")
    method: str = Field(
        "auto",
        description="Structured-output method (json_schema, function_calling, json_mode), or auto with fallbacks.",
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    retry_errors: bool = Field(False, description="Judge again what earlier runs recorded as errors.")
    direct: bool = Field(
        True,
        description="Call OpenAI-compatible models without LangChain's per-call machinery when no callback, "
        "tracer or cache is attached (same requests, less client CPU; see greval.llm.call).",
    )
    logprobs: int | None = Field(
        None,
        ge=0,
        le=20,
        description="Ask an OpenAI-compatible judge for token log-probabilities with this many alternatives per "
        "token (None: not asked): each new verdict gets its token_confidence. Not part of the judge's identity: "
        "verdicts stored without it are reused as they are (their token_confidence stays empty).",
    )
    sample: Sample | None = Field(
        None,
        description="Judge a reproducible random sample: N records and / or at most N items per record of a "
        "many-metric (greval.dataset.sample). Not part of any verdict's identity: a sampled verdict is the "
        "verdict an unsampled run would store, so it is reused by either.",
    )
    engine: Literal["local", "ray"] = Field(
        "local",
        description="Where the judging runs: this process (local), or shards of the pending records in Ray tasks "
        "(ray: greval.scale; each task opens the store by its reference and judges with this same runner).",
    )
    shards: int | None = Field(
        None, ge=1, description="With engine ray: tasks to split into (None: the cluster's CPUs)."
    )
    workers: int | None = Field(
        None,
        ge=1,
        description="With engine local: processes the pending records are sharded across, each with its share of "
        "the concurrency, against the same store (greval.scale.processes; 1: this process alone). None: chosen "
        "from the concurrency and the cores (default_workers): one process feeds about 128 calls in flight.",
    )
    ray_address: str | None = Field(
        None, description="With engine ray: 'auto' or ray://host:port to join a cluster (None: start a local one)."
    )
    experiment: str | None = Field(
        None,
        description="An experiment run, and what it tries ('align candidate', 'spec try', 'side run'): stored like "
        "any run (resumable, paid once) but never what a reader reads by default, and it never changes a "
        "metric's production version (greval.store.versions). None: a run.",
    )
    promote: bool = Field(
        False,
        description="When the run finishes, make the versions it judged their metrics' production versions (a run "
        "of an edited spec file otherwise leaves production where it was, and says so).",
    )
    dataset_name: str | None = Field(
        None, description="A name for the dataset's snapshot, kept with the run: history compares like with like."
    )

    def call_options(self, samples: int, limiter: AdaptiveLimiter) -> CallOptions:
        """How every evaluator of one run (or of one Ray task) calls the model: built once, with the run's one
        ``limiter`` and one log-probability request (its notes are the run's). ``samples``: the judge's."""
        return CallOptions(
            method=cast(Any, self.method),  # checked where a call is made: an unknown method is its error
            samples=samples,
            policy=self.retry,
            limiter=limiter,
            direct=self.direct,
            logprobs=None if self.logprobs is None else LogprobRequest(self.logprobs),
        )


def default_workers(concurrency: int, work: int, cores: int, *, local_judge: bool) -> int:
    """The worker processes a run shards into when not told: one per :data:`PER_WORKER` calls in flight, at most
    one per core and one per :data:`WORKER_MIN_WORK` judgements left (``work``); one for the embedded judge,
    whose server is the limit, not the client."""
    if local_judge:
        return 1
    n = min(cores, -(-concurrency // PER_WORKER), work // WORKER_MIN_WORK)
    return max(1, n)


class MetricSummary(MetricFigures):
    """One metric in a run: what this run did (judged, reused, calls, tokens) beside the figures of every
    record id the run was given (:class:`greval.store.results.MetricFigures`, the same figures every command shows)."""

    judged: int = Field(
        0,
        description="Judgements made by this run: a verdict or an error stored. A record the metric does not "
        "apply to (an input it requires is absent) is not judged: the figures count it as skipped.",
    )
    reused: int = Field(0, description="Judgements already in the store (no call).")
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = Field(0, description="Of tokens_in, those the provider read from its prompt cache.")
    calls: int = 0
    asked: bool = Field(
        True, description="Asked for by the caller (False: only pulled in as a dependency of a metric asked for)."
    )


class SampleSummary(BaseModel):
    """What a sampled run drew, stored with its summary (the run's options hold the :class:`Sample` asked for)."""

    seed: int
    records: int | None = Field(None, description="`Sample.records` as asked (None: every record).")
    items: int | None = Field(None, description="`Sample.items` as asked (None: every item).")
    records_drawn: int = Field(description="Records judged (the run's snapshot).")
    records_of: int = Field(
        description="Records drawn from: the dataset after its field mapping, row limit and repeated rows."
    )
    items_drawn: dict[str, int] = Field(
        default_factory=dict,
        description="Many-metric -> items drawn over the run's records (each record id counted, as figures count).",
    )
    items_of: dict[str, int] = Field(default_factory=dict, description="Many-metric -> items of the run's records.")


class EngineTotals(BaseModel):
    """What the judging reports beside the per-metric activity: the peak concurrency (summed over the shards),
    rate-limited calls, what the run has to say once (token log-probabilities), and the processes that judged."""

    peak: int = 0
    rate_limited: int = 0
    notes: list[str] = Field(default_factory=list)
    workers: int = 1

    @classmethod
    def of(cls, calls: CallOptions) -> EngineTotals:
        """The totals of judging in this process with ``calls`` (its limiter and log-probability request)."""
        limiter = calls.limiter
        return cls(
            peak=limiter.peak if limiter is not None else 0,
            rate_limited=limiter.rate_limited if limiter is not None else 0,
            notes=calls.logprobs.notes() if calls.logprobs is not None else [],
        )


class RunSummary(BaseModel):
    run_id: str
    records: int
    distinct_contents: int = Field(0, description="Distinct record contents (identical records cost one call).")
    judge: str
    seconds: float
    calls: int
    metrics: list[MetricSummary]
    peak_concurrency: int
    rate_limited: int
    workers: int = Field(1, description="Processes that judged: 1 (this one), worker processes or Ray tasks.")
    notes: list[str] = Field(
        default_factory=list, description="What the run has to say once (token log-probabilities, the sample)."
    )
    sample: SampleSummary | None = Field(None, description="What a sampled run drew (None: not sampled).")

    def cost(self, table: Mapping[str, Price] | None = None) -> RunCost:
        """What this run's calls cost: each metric's tokens at its judge's prices (``table``: default greval's
        prices with the user's table over them, :func:`greval.llm.prices.load_prices`)."""
        return run_cost((m.model_dump() for m in self.metrics), load_prices() if table is None else table)

    @property
    def failed(self) -> int:
        """Records (per metric) with a stored error: no verdict at all, or some items without one."""
        return sum(m.failed + m.partial for m in self.metrics)

    @property
    def empty_metrics(self) -> list[MetricSummary]:
        """What failed, the one definition (``greval run`` exits 1 for it): the metrics asked for that have no
        verdict at all on a non-empty dataset. A dependency only pulled in is not among them: where it failed, the
        metrics reading it failed too; where it did not apply, they were judged without it (a note says so)."""
        return [m for m in self.metrics if m.asked and self.records and m.ok + m.partial == 0]
