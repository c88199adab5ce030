"""``greval.evaluate(data, metrics)``: judge a DataFrame, a list of dicts, a Hugging Face Dataset or a file
with metrics given by name, file or spec object, in one call, from a script, a notebook or async code.

The run goes through greval's one front door (:func:`greval.flows.run.arun_dataset`, as ``greval run`` does),
so every verdict goes to a store and a second call on the same records pays nothing: by default a file in
greval's data directory, shared by every call of this user; the judge is chosen, a local judge built and
served, and a Ctrl-C ends (:class:`~greval.flows.run.RunInterrupted`: one line, what is stored and how to resume)
exactly as there. It runs on greval's own event loop (:mod:`greval._sync`): from synchronous code, also inside
Jupyter's running loop, the caller waits; ``await aevaluate(...)`` leaves the caller's loop free.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from greval.dataset.source import DataSource
from greval.errors import UserError, render_options
from greval.flows.progress import progress_for
from greval.flows.results import Results
from greval.flows.run import (
    DatasetRun,
    JudgeNote,
    RunEvent,
    RunPlanned,
    arun_dataset_on_loop,
    run_dataset,
)
from greval.llm.config import JudgeChoice, JudgeConfig
from greval.paths import data_dir
from greval.runner.options import RunOptions
from greval.spec import BaseSpec, order_specs, resolve_specs
from greval.store.store import Store

#: The store's file in greval's data directory when none is given.
DEFAULT_STORE = "evaluate.sqlite"

Metric = str | Path | BaseSpec


class Evaluation(BaseModel):
    """One call's arguments, checked once (see :func:`evaluate`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    data: Any
    metrics: list[Metric]
    judge: str | JudgeConfig | JudgeChoice | None = None
    store: str | Path | Store | None = None
    map: dict[str, str] | None = None
    id_column: str | None = None
    concurrency: int | None = Field(None, ge=1)
    options: RunOptions | None = None
    quiet: bool = False

    @field_validator("metrics", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        """One metric, or several."""
        return [value] if isinstance(value, str | Path | BaseSpec) else value


def default_store() -> Path:
    """Where verdicts go when no store is given: one file in greval's data directory (``GREVAL_HOME``)."""

    return data_dir() / DEFAULT_STORE


def say(text: str) -> None:
    """A message for the user (the judge chosen, a local judge started, a note on the data): a line on stderr."""
    print(text, file=sys.stderr)


def resolve_metrics(metrics: Sequence[Metric] | Metric) -> tuple[list[BaseSpec], list[str]]:
    """(every spec to run, dependencies included, in dependency order; the names asked for)."""

    given = [metrics] if isinstance(metrics, str | Path | BaseSpec) else list(metrics)
    if not given:
        raise UserError("metrics: give at least one metric (a name such as 'faithfulness', a spec file or a spec)")
    for m in given:
        if not isinstance(m, str | Path | BaseSpec):
            raise UserError(f"metrics: a {type(m).__name__} is not a metric; give a name, a spec file or a spec")
    refs = [str(m) for m in given if not isinstance(m, BaseSpec)]
    specs = {s.name: s for s in (resolve_specs(refs) if refs else [])}
    asked: list[str] = []  # in the order given: the run's (and the frames') order of metrics
    for m in given:
        if isinstance(m, BaseSpec):
            if m.name in specs and specs[m.name].hash != m.hash:
                raise UserError(f"metrics: two different specs are named {m.name!r}")
            specs[m.name] = m
            asked.append(m.name)
        else:
            asked += [s.name for s in resolve_specs([str(m)], with_dependencies=False)]
    missing = sorted({d for s in specs.values() for d in s.depends_on} - set(specs))
    for dep in resolve_specs(missing) if missing else []:
        specs.setdefault(dep.name, dep)
    asked = list(dict.fromkeys(asked))
    ordered = [specs[n] for n in asked] + [s for n, s in specs.items() if n not in asked]
    return order_specs(ordered), asked


def _events(quiet: bool) -> Callable[[RunEvent], None]:
    """What the run says, as a line on stderr (the judge chosen, a local judge started, the build note, a note
    on the data), unless ``quiet``; option fields written as this function's keyword names."""

    def said(event: RunEvent) -> None:
        if isinstance(event, RunPlanned):
            note = event.build_note()
            if note is not None:
                say(f"note: {render_options(note, KEYWORDS)}")
        elif isinstance(event, JudgeNote):
            say(render_options(event.text, KEYWORDS))
        elif not quiet:
            say(f"note: {render_options(event.text, KEYWORDS)}")

    return said


#: How this function's messages name an option field: as its keyword (``judge=``), not a command-line flag.
KEYWORDS = {"judge": "judge=", "base_url": "base_url=", "mapping": "map=", "id_column": "id_column="}


def _results(ev: Evaluation, done: DatasetRun, specs: Sequence[BaseSpec], asked: Sequence[str]) -> Results:
    """The call's Results (the run's notes said on stderr unless quiet: the data's were said as they came)."""
    handle: str | Store = ev.store if isinstance(ev.store, Store) else str(ev.store or default_store())
    positional = done.inputs is not None and done.inputs == len(done.ids)
    results = Results(
        handle, done.summary, specs, asked, done.ids, done.notes, positional=positional, origin=done.origin
    )
    if not ev.quiet:
        for note in results.notes:
            if note not in done.notes:
                say(f"note: {note}")
    return results


def _call(ev: Evaluation) -> tuple[dict[str, Any], list[BaseSpec], list[str]]:
    """The front door's arguments for this call: (keyword arguments, specs, the names asked for)."""
    specs, asked = resolve_metrics(ev.metrics)
    source = DataSource(data=ev.data, mapping=ev.map, id_column=ev.id_column)
    options = ev.options or RunOptions()
    if ev.concurrency is not None:
        options = options.model_copy(update={"concurrency": ev.concurrency})
    store = ev.store if ev.store is not None else default_store()
    args = {"source": source, "specs": specs, "judge": ev.judge, "store": store, "options": options}
    return {**args, "on_event": _events(ev.quiet), "asked": asked, "strict_inputs": True}, specs, asked


def evaluate(
    data: Any,
    metrics: Sequence[Metric] | Metric,
    *,
    judge: str | JudgeConfig | JudgeChoice | None = None,
    store: str | Path | Store | None = None,
    map: Mapping[str, str] | None = None,
    id_column: str | None = None,
    concurrency: int | None = None,
    options: RunOptions | None = None,
    progress: bool = True,
    quiet: bool = False,
) -> Results:
    """Judge every record of ``data`` with ``metrics``; every verdict is stored, so a second call pays only for
    what changed.

    ``data``: a pandas DataFrame, a list of dicts, a Hugging Face ``datasets.Dataset``, or a file path (JSONL,
    JSON, CSV, Parquet; a tracing tool's export). ``metrics``: names of predefined metrics, spec files, or spec
    objects (their dependencies come along). ``judge``: ``"openai:gpt-4o-mini"``, ``"local"`` … or a
    :class:`JudgeConfig` (default: ``GREVAL_JUDGE``, else the specs' judge, else the default judge).
    ``store``: a SQLite path, a ``postgresql://`` URL or an open :class:`Store` (default: ``evaluate.sqlite``
    in greval's data directory). ``map``: greval field → your column, e.g. ``{"chunks": "contexts"}``;
    ``id_column``: the column holding record ids. ``concurrency``: calls in flight (default 8, or the local
    judge's slots); ``options``: the rest of :class:`RunOptions`. ``progress``: a bar in a notebook or a
    terminal; ``quiet``: no notes on stderr (they stay in :attr:`Results.notes`).

    Works inside a running event loop (Jupyter): the run happens on greval's loop while this call waits. A
    mistake in the arguments or the data raises :class:`greval.errors.UserError` with a one-line message."""
    ev = Evaluation(
        data=data,
        metrics=metrics,
        judge=judge,
        store=store,
        map=map,
        id_column=id_column,
        concurrency=concurrency,
        options=options,
        quiet=quiet,
    )
    args, specs, asked = _call(ev)
    with progress_for(progress) as bar:
        done = run_dataset(**args, progress=bar, poll=bar.poll)
    return _results(ev, done, specs, asked)


async def aevaluate(
    data: Any,
    metrics: Sequence[Metric] | Metric,
    *,
    judge: str | JudgeConfig | JudgeChoice | None = None,
    store: str | Path | Store | None = None,
    map: Mapping[str, str] | None = None,
    id_column: str | None = None,
    concurrency: int | None = None,
    options: RunOptions | None = None,
    progress: bool = True,
    quiet: bool = False,
) -> Results:
    """:func:`evaluate` for async code: ``await greval.aevaluate(...)``. The run happens on greval's loop;
    the caller's loop stays free meanwhile (and draws a notebook's progress bar)."""
    ev = Evaluation(
        data=data,
        metrics=metrics,
        judge=judge,
        store=store,
        map=map,
        id_column=id_column,
        concurrency=concurrency,
        options=options,
        quiet=quiet,
    )
    args, specs, asked = _call(ev)
    with progress_for(progress) as bar:
        done = await arun_dataset_on_loop(**args, progress=bar, poll=bar.poll)
    return _results(ev, done, specs, asked)
