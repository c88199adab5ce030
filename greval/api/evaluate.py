"""``greval.evaluate(data, metrics)``: judge a DataFrame, a list of dicts, a Hugging Face Dataset or a file
with metrics given by name, file or spec object, in one call, from a script, a notebook or async code.

The run is greval's one run path (:func:`greval.runner.arun`), so every verdict goes to a store and a second
call on the same records pays nothing: by default a file in greval's data directory, shared by every call of
this user. The judge is chosen as ``greval run`` chooses it (:func:`greval.workflows.choose_judge`). It runs on
greval's own event loop (:mod:`greval._sync`): from synchronous code, also inside Jupyter's running loop, the
caller waits; ``await aevaluate(...)`` leaves the caller's loop free.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from greval._sync import on_greval_loop, run_sync
from greval.api.data import Rows, check_inputs, read_data
from greval.api.results import Results
from greval.errors import UserError
from greval.llm.config import JudgeChoice, JudgeConfig
from greval.progress import Progress, progress_for
from greval.runner import RunOptions
from greval.spec import BaseSpec
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
    from greval.paths import data_dir

    return data_dir() / DEFAULT_STORE


def say(text: str) -> None:
    """A message for the user (the judge chosen, a local judge started, a note on the data): a line on stderr."""
    print(text, file=sys.stderr)


def resolve_metrics(metrics: Sequence[Metric] | Metric) -> tuple[list[BaseSpec], list[str]]:
    """(every spec to run, dependencies included, in dependency order; the names asked for)."""
    from greval.spec import order_specs, resolve_specs

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


def _judge(specs: Sequence[BaseSpec], judge: str | JudgeConfig | JudgeChoice | None) -> tuple[str, JudgeConfig]:
    """The judge's reference and config: a config as given, else ``greval run``'s choice (a name, else
    ``GREVAL_JUDGE``, else the specs' judge, else the default judge)."""
    from greval.workflows import choose_judge

    if isinstance(judge, JudgeConfig):
        return judge.label, judge
    choice = judge if isinstance(judge, JudgeChoice) else JudgeChoice(ref=judge or os.environ.get("GREVAL_JUDGE"))
    return choose_judge(specs, choice, say)


async def _evaluate(ev: Evaluation, progress: Progress) -> Results:
    """The whole call, on greval's loop: metrics, data, judge, the run, the results."""
    from greval.runner import arun, plan_work
    from greval.workflows import run_options

    specs, asked = resolve_metrics(ev.metrics)
    rows = read_data(ev.data, ev.map, ev.id_column)
    check_inputs([s for s in specs if s.name in asked], rows, ev.map)
    ref, cfg = _judge(specs, ev.judge)
    opts = run_options(ev.options, ref, ev.concurrency)
    path = ev.store if ev.store is not None else default_store()
    st = path if isinstance(path, Store) else Store(path)
    try:
        plan = plan_work(specs, rows.rows, st, cfg, opts.retry_errors, opts.sample)
        # a local judge is served by the runner while calls are needed (what it starts is said through say)
        summary = await arun(
            specs,
            rows.rows,
            st,
            cfg,
            options=opts,
            dataset=rows.where,
            progress=progress,
            plan=plan,
            asked=asked,
            notify=say,
        )
        notes = rows.notes + _after(rows, st, summary, specs)
    finally:
        if not isinstance(path, Store):
            st.close()
    handle: str | Store = path if isinstance(path, Store) else str(path)
    origin = rows.traces.origin if rows.traces is not None else None  # where a trace's fields come from
    results = Results(
        handle, summary, specs, asked, rows.ids, notes, positional=rows.inputs == len(rows.rows), origin=origin
    )
    if not ev.quiet:
        for note in results.notes:
            say(f"note: {note}")
    return results


def _after(rows: Rows, st: Store, summary: Any, specs: Sequence[BaseSpec]) -> list[str]:
    """Verdicts back to where traces came from (a Phoenix project), as ``greval run`` does."""
    return list(rows.traces.after_run(st, summary, specs)) if rows.traces is not None else []


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
    with progress_for(progress) as bar:
        return run_sync(_evaluate(ev, bar), poll=bar.poll)


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
    with progress_for(progress) as bar:
        return await on_greval_loop(_evaluate(ev, bar), poll=bar.poll)
