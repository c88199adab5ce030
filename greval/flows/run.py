"""The composed run, written once: open the data, choose the judge, open the store, plan, judge, after-run.

:func:`arun_dataset` (and :func:`run_dataset`, its sync wrapper) is the one front door every way of judging data
goes through: ``greval run`` and ``greval quickstart``, ``greval.evaluate`` / ``aevaluate`` (and the pytest
fixture, through them), ``greval.run`` / ``greval.arun`` and ``greval spec try``. So the judge choice, the note
before the embedded judge is built, progress, a clean Ctrl-C and the after-run steps (verdicts back to Phoenix)
are the same on each. Nothing here prints or parses flags: what a step has to say reaches the caller as typed
events (:data:`RunEvent`); a Ctrl-C ends, once the run has recorded itself as interrupted, as
:class:`RunInterrupted` with the one line that says how to resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from greval._sync import on_greval_loop, run_sync
from greval.dataset.source import DataSource, Opened, missing_field
from greval.errors import DataError, GrevalError, Terminated, option
from greval.llm.config import (
    JudgeChoice,
    JudgeConfig,
    Notify,
    default_judge,
    is_local_ref,
    local_concurrency,
    resolve_judge,
)
from greval.llm.local import BUILD_ESTIMATE, LocalJudgeError, find_engine
from greval.llm.local.engine import why_build
from greval.runner import driver
from greval.runner.options import ProgressHook, RunOptions, RunSummary
from greval.runner.plan import Plan, plan_work
from greval.spec import BaseSpec, order_specs
from greval.store.backend import RECONNECT_WAIT_S
from greval.store.store import Store

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

#: Who the judge is, as every door takes it: a name (``"openai:gpt-4o-mini"``, ``"local"``), the flags' choice,
#: a config, or None (``GREVAL_JUDGE``, else the specs' own judge, else the default judge).
JudgeRef = str | JudgeChoice | JudgeConfig | None


class DataNote(BaseModel):
    """Something in the dataset the user should know of (a repeated row read once, a trace's gaps, what went
    back to Phoenix): nothing the user gave disappears without a word."""

    text: str


class JudgeNote(BaseModel):
    """What the judge layer says: the default judge chosen, an embedded judge started or stopped."""

    text: str


class RunPlanned(BaseModel):
    """What the run is about to do, known before any model call or judge server."""

    records: int
    distinct_contents: int = Field(description="Records with distinct content (identical ones are judged once).")
    specs: list[str]
    judge: str = Field(description="The judge's label (its model, or the local model's identity).")
    needs_judge: bool = Field(description="Some spec needs a judge model (else every metric is computed).")
    judgements: int = Field(description="Judgements that still need the judge model (0: no judge is started).")
    computed: int = Field(description="Computed scores still to make.")
    skipped: int = Field(0, description="Judgements to store as skipped, no call: a required input is absent.")
    builds_judge: bool = Field(
        False, description="The embedded judge's engine is not installed yet: serving it starts a long build."
    )
    store: str = Field("", description="The store, as messages name it (a URL's password masked).")

    def build_note(self) -> str | None:
        """The note before a first build of the embedded judge's engine (option fields named: each door writes
        them its own way), or None when nothing is built."""
        if not self.builds_judge:
            return None

        return (
            f"{why_build()}, and the embedded judge's llama-server is not built yet: it is built now, once (a C++ "
            f"build, {BUILD_ESTIMATE}; an interrupt keeps the work done for the next time). To skip it, name a judge: "
            f"{option('judge')} openai:gpt-4o-mini with OPENAI_API_KEY set, or any OpenAI-compatible server with "
            f"{option('judge')} openai:MODEL {option('base_url')} URL."
        )


RunEvent = DataNote | JudgeNote | RunPlanned


class DatasetRun(BaseModel):
    """What :func:`arun_dataset` did: the judge it chose, the runner's summary, the record ids it was given (in
    the data's order), and what the data had to say."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    ref: str = Field(description="The judge reference used: the caller's, else the spec's, else the default judge.")
    judge: JudgeConfig
    summary: RunSummary
    where: str = Field(description="What the data is called in messages (a path, 'the DataFrame' …).")
    ids: list[str] = Field(default_factory=list, description="Every record id the run was given, in order.")
    notes: list[str] = Field(default_factory=list, description="The data's notes and the after-run lines.")
    inputs: int | None = Field(None, description="Rows given, for an in-memory table (before repeats were merged).")
    origin: Callable[[Sequence[str]], str] | None = Field(
        None,
        exclude=True,
        description="Where a trace source reads the fields skipped records lacked (for their notes; see "
        "TraceRows.origin; None: a table's columns, which the field mapping names).",
    )


class RunInterrupted(GrevalError, KeyboardInterrupt):
    """A run stopped by Ctrl-C (or SIGTERM) after it recorded itself as interrupted: its message is the one
    line a user needs (what is stored, how to resume); ``summary`` is the run's, as stored; ``kept`` the
    verdicts stored of its records, ``made`` the judgements this run made."""

    def __init__(self, summary: dict[str, Any], terminated: bool = False) -> None:
        metrics = summary.get("metrics", [])
        self.kept = sum(int(m.get("verdicts", 0)) for m in metrics)
        self.made = sum(int(m.get("judged", 0)) for m in metrics)
        self.summary, self.terminated = summary, terminated
        super().__init__(f"interrupted: {self.stored}; run the same again to resume (nothing stored is paid again)")

    @property
    def stored(self) -> str:
        return f"{self.kept} verdict(s) stored ({self.made} judgement(s) made by this run)"


def choose_judge(specs: Sequence[BaseSpec], judge: JudgeRef, notify: Notify) -> tuple[str, JudgeConfig]:
    """(the judge reference used, its config): a config as given; else the caller's name, else
    ``GREVAL_JUDGE``, else the first spec's judge, else the default judge (said through ``notify``); its
    parameters fill in from that spec's judge block. Computed metrics alone need no judge: none is resolved or
    required."""
    if isinstance(judge, JudgeConfig):
        return judge.label, judge
    choice = judge if isinstance(judge, JudgeChoice) else JudgeChoice(ref=judge or os.environ.get("GREVAL_JUDGE"))
    defaults = next((s.judge for s in specs if s.judge.model), specs[0].judge)
    needs_judge = any(s.needs_model for s in specs)
    ref = choice.ref or defaults.model or (default_judge(notify) if needs_judge else "computed:greval")
    return ref, resolve_judge(ref, **choice.with_defaults(defaults).params())


def with_concurrency(options: RunOptions | None, ref: str) -> RunOptions:
    """The run's options with its calls in flight: as given, else the embedded judge's parallel slots (more
    would queue inside llama-server), else 8."""
    opts = options or RunOptions()
    if "concurrency" in opts.model_fields_set:
        return opts
    return opts.model_copy(update={"concurrency": local_concurrency() if is_local_ref(ref) else 8})


async def arun_dataset(
    source: DataSource,
    specs: Sequence[BaseSpec],
    judge: JudgeRef,
    store: str | Path | Store,
    options: RunOptions | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
    *,
    asked: Collection[str] | None = None,
    progress: ProgressHook | None = None,
    model: BaseChatModel | None = None,
    store_wait: float = RECONNECT_WAIT_S,
    strict_inputs: bool = False,
    interrupted: list[RunInterrupted] | None = None,
) -> DatasetRun:
    """Judge every record of ``source`` with ``specs`` (put in dependency order) into ``store`` — a path, a URL
    or an open Store (left open) — and say what happens through ``on_event``.

    ``judge``: see :data:`JudgeRef` (``model``: a LangChain chat model to call instead of building one);
    ``options``: how to run (concurrency unset: the embedded judge's slots, else 8); ``asked``: the names the
    caller asked for (the others are dependencies pulled in: their lack of verdicts fails nothing);
    ``progress``: the runner's (done, total, errors) hook; ``store_wait``: how long a PostgreSQL store that went
    away is waited for; ``strict_inputs``: a metric asked for whose required field no record has is a
    :class:`DataError` before anything is judged (else its records are skipped and counted). The data is opened
    before the store: a missing file is one error, and no run is recorded. An interrupt (KeyboardInterrupt, or the
    task cancelled: a Ctrl-C where the run was awaited) ends the run as interrupted; its
    :class:`RunInterrupted` is appended to ``interrupted`` (the sync wrapper raises it) and a KeyboardInterrupt
    raised here becomes it."""
    emit = on_event or (lambda event: None)
    specs = order_specs(specs)
    opened = source.open()
    if strict_inputs:
        _check_inputs(specs, asked, opened, source)
    ref, cfg = choose_judge(specs, judge, lambda text: emit(JudgeNote(text=text)))
    opts = with_concurrency(options, ref)
    with _opened_store(store, store_wait) as st:
        plan = plan_work(specs, opened.rows, st, cfg, opts.retry_errors, opts.sample)
        for note in opened.notes:  # nothing the user gave disappears without a word
            emit(DataNote(text=note))
        emit(_planned(plan, specs, cfg, st))
        try:
            summary = await driver.arun(
                specs,
                opened.rows,
                st,
                cfg,
                model=model,
                options=opts,
                dataset=opened.where,
                progress=progress,
                plan=plan,
                asked=asked,
                notify=lambda text: emit(JudgeNote(text=text)),
            )
        except (KeyboardInterrupt, asyncio.CancelledError) as exc:  # the run recorded itself as interrupted
            stop = _interrupted(st, exc)
            if interrupted is not None:
                interrupted.append(stop)
            if isinstance(exc, asyncio.CancelledError):
                raise  # the task's own end: whoever awaited it decides what a cancel means
            raise stop from None
        after = opened.after_run(st, summary, specs) if opened.after_run is not None else []
    for line in after:
        emit(DataNote(text=line))
    return DatasetRun(
        ref=ref,
        judge=cfg,
        summary=summary,
        where=opened.where,
        ids=[rid for rid, _ in plan.members],
        notes=[*opened.notes, *after],
        inputs=opened.inputs,
        origin=opened.origin,
    )


def run_dataset(
    source: DataSource,
    specs: Sequence[BaseSpec],
    judge: JudgeRef,
    store: str | Path | Store,
    options: RunOptions | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
    *,
    poll: Callable[[], None] | None = None,
    **kwargs: Any,
) -> DatasetRun:
    """:func:`arun_dataset` from synchronous code (a script, a notebook cell: it runs on greval's own loop, so a
    running Jupyter loop is fine); ``poll`` is called while waiting (a notebook's progress bar draws there). A
    Ctrl-C ends as :class:`RunInterrupted`, once the run has recorded itself."""
    stopped: list[RunInterrupted] = []
    try:
        return run_sync(
            arun_dataset(source, specs, judge, store, options, on_event, interrupted=stopped, **kwargs), poll=poll
        )
    except KeyboardInterrupt as exc:
        if not stopped or isinstance(exc, RunInterrupted):
            raise
        stopped[0].terminated = isinstance(exc, Terminated)
        raise stopped[0] from None


async def arun_dataset_on_loop(
    source: DataSource, specs: Sequence[BaseSpec], judge: JudgeRef, store: str | Path | Store, **kwargs: Any
) -> DatasetRun:
    """:func:`arun_dataset` awaited from another event loop (``await greval.aevaluate(...)``): the run happens
    on greval's loop while the caller's stays free (``poll``: called meanwhile)."""
    poll = kwargs.pop("poll", None)
    return await on_greval_loop(arun_dataset(source, specs, judge, store, **kwargs), poll=poll)


async def arun(
    specs: Sequence[BaseSpec],
    records: Any,
    store: Store,
    cfg: JudgeRef,
    *,
    model: BaseChatModel | None = None,
    options: RunOptions | None = None,
    dataset: str | None = None,
    progress: ProgressHook | None = None,
    asked: Collection[str] | None = None,
    notify: Notify | None = None,
) -> RunSummary:
    """``greval.arun``: judge ``records`` (Records, dicts, a DataFrame, a path …: a :class:`DataSource`'s data)
    with ``specs`` into ``store`` through the front door; the run's summary. ``notify``: any callable taking a
    string, told what the judge layer and the data have to say (else logged); ``dataset``: the run's name for
    its data."""
    driver.check_arguments(specs, records)  # metric names or a DataFrame: one line pointing to greval.evaluate
    say = notify or logging.getLogger("greval.run").info
    source = DataSource(data=records, name=dataset)
    done = await arun_dataset(
        source, specs, cfg, store, options, _told(say), asked=asked, progress=progress, model=model
    )
    return done.summary


def run(specs: Sequence[BaseSpec], records: Any, store: Store, cfg: JudgeRef, **kwargs: Any) -> RunSummary:
    """``greval.run``: :func:`arun` from synchronous code (on greval's own loop: a notebook's running loop is
    fine)."""
    return run_sync(arun(specs, records, store, cfg, **kwargs))


def _told(say: Notify) -> Callable[[RunEvent], None]:
    """Events as the lines a plain callable is told: notes, the judge layer's words, the build note."""

    def told(event: RunEvent) -> None:
        if isinstance(event, RunPlanned):
            if (note := event.build_note()) is not None:
                say(f"note: {note}")
        else:
            say(event.text if isinstance(event, JudgeNote) else f"note: {event.text}")

    return told


def _check_inputs(specs: Sequence[BaseSpec], asked: Collection[str] | None, opened: Opened, source: DataSource) -> None:
    required = {s.name: s.required_inputs() for s in specs if asked is None or s.name in asked}
    problem = missing_field(required, opened, source.mapping)
    if problem is not None:
        raise DataError(problem)


@contextlib.contextmanager
def _opened_store(store: str | Path | Store, wait_s: float) -> Any:
    """The store given, or opened from its path or URL (and closed after)."""
    if isinstance(store, Store):
        yield store
        return
    with Store(store, wait_s=wait_s) as st:
        yield st


def _planned(plan: Plan, specs: Sequence[BaseSpec], cfg: JudgeConfig, st: Store) -> RunPlanned:
    return RunPlanned(
        records=plan.records,
        distinct_contents=plan.distinct_contents,
        specs=[s.name for s in specs],
        judge=cfg.label,
        needs_judge=any(s.needs_model for s in specs),
        judgements=plan.judgements,
        computed=plan.computed,
        skipped=plan.skipped,
        builds_judge=plan.judgements > 0 and _needs_build(cfg),
        store=st.name,
    )


def _needs_build(cfg: JudgeConfig) -> bool:
    """Whether serving this judge builds llama-server first: no prebuilt engine (the xllamacpp wheel) and no build
    yet (a GREVAL_LLAMA_* setting that is wrong is said when the judge is served). llm.local is imported only for
    a local judge, as the runner does."""
    if cfg.provider not in ("local", "gguf"):
        return False

    try:
        return find_engine() is None
    except LocalJudgeError:
        return False


def _interrupted(st: Store, exc: BaseException) -> RunInterrupted:
    """The one line an interrupted run ends with: what is stored, and that the same call resumes it."""
    return RunInterrupted(st.last_run_summary(os.getpid()) or {}, terminated=isinstance(exc, Terminated))


__all__ = [
    "DataNote",
    "DatasetRun",
    "JudgeNote",
    "JudgeRef",
    "RunEvent",
    "RunInterrupted",
    "RunPlanned",
    "arun",
    "arun_dataset",
    "arun_dataset_on_loop",
    "choose_judge",
    "run",
    "run_dataset",
    "with_concurrency",
]
