"""The composed loop, without the command line: :func:`run_dataset` (resolve the judge, read the dataset, run
every judgement through :mod:`greval.runner`, summarise), used by ``greval run`` and ``greval quickstart``; and
the quick start's pieces (the bundled example's workspace, its label files). Nothing here prints or parses
flags: what a step has to say reaches the caller as typed events (greval/cli/ prints them).
"""

from __future__ import annotations

import csv
import shlex
import shutil
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from greval._sync import run_sync
from greval.dataset.limits import ReadLimits
from greval.llm.config import (
    JudgeChoice,
    JudgeConfig,
    Notify,
    default_judge,
    is_local_ref,
    local_concurrency,
    resolve_judge,
)
from greval.paths import examples_dir
from greval.runner.driver import arun
from greval.runner.options import ProgressHook, RunOptions, RunSummary
from greval.runner.plan import plan_work
from greval.spec import BaseSpec
from greval.store.backend import RECONNECT_WAIT_S
from greval.store.store import Store
from greval.traces.detect import open_data
from greval.traces.source import TraceRows

EXAMPLE = "begin"
SPEC = "attribution"
FILES = ("records.jsonl", "human_labels.csv", "attribution.yaml", "NOTICE", "LICENSE")


def greval_argv() -> list[str]:
    """How to type greval so that the printed commands work as printed: ``greval`` when that is this
    environment's command on PATH, else its full path (scripts/quickstart.sh run outside a virtual
    environment installs into ./.venv, whose bin/ is not on PATH), else ``python -m greval``."""
    mine = Path(sys.prefix) / "bin" / "greval"
    found = shutil.which("greval")
    if found and mine.exists() and Path(found).resolve() == mine.resolve():
        return ["greval"]
    return [str(mine)] if mine.exists() else [sys.executable, "-m", "greval"]


def greval_command() -> str:
    """:func:`greval_argv` as the shell takes it."""
    return shlex.join(greval_argv())


def write_workspace(directory: Path) -> list[str]:
    """Copy the bundled example into ``directory`` (existing files are left alone: they may be edited)."""
    directory.mkdir(parents=True, exist_ok=True)
    src = examples_dir() / EXAMPLE
    written = []
    for name in FILES:
        target = directory / name
        if not target.exists():
            shutil.copyfile(src / name, target)
            written.append(name)
    return written


#: With Argilla, how many of the example's records arrive with their human labels; the others are the user's.
IMPORTED = 20

#: Predefined metrics that fit a typical RAG file (question, answer, chunks); the first is reviewed in Argilla.
OWN_SPECS = ("answer_quality", "chunk_evaluation")


def first_records(rows: list[dict[str, Any]], n: int | None) -> list[dict[str, Any]]:
    """The rows of the first ``n`` distinct record ids, in file order (all rows when ``n`` is None)."""
    if n is None:
        return rows
    keep = list(dict.fromkeys(str(r["record_id"]) for r in rows))[:n]
    return [r for r in rows if str(r["record_id"]) in keep]


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["record_id", "label", "annotator"])
        writer.writeheader()
        writer.writerows(rows)


# ------------------------------------------------------------------------------------- run a dataset
class DataNote(BaseModel):
    """Something in the dataset the user should know of (e.g. a repeated row read once): nothing the user
    gave disappears without a word."""

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
        False, description="The embedded judge's llama-server is not built yet: serving it starts a long build."
    )


RunEvent = DataNote | RunPlanned


class DatasetRun(BaseModel):
    """What :func:`run_dataset` did: the judge it chose and the runner's summary."""

    ref: str = Field(description="The judge reference used: the flag's, else the spec's, else the default judge.")
    judge: JudgeConfig
    summary: RunSummary


def choose_judge(specs: Sequence[BaseSpec], judge: JudgeChoice, notify: Notify) -> tuple[str, JudgeConfig]:
    """(the judge reference used, its config): the choice's, else the first spec's that names one, else the
    default judge (said through ``notify``); its parameters fill in from that spec's judge block. Computed
    metrics alone need no judge: none is resolved or required. What ``greval run`` and
    :func:`greval.evaluate` judge with."""
    defaults = next((s.judge for s in specs if s.judge.model), specs[0].judge)
    needs_judge = any(s.needs_model for s in specs)
    ref = judge.ref or defaults.model or (default_judge(notify) if needs_judge else "computed:greval")
    return ref, resolve_judge(ref, **judge.with_defaults(defaults).params())


def run_options(options: RunOptions | None, ref: str, concurrency: int | None) -> RunOptions:
    """The run's options with its calls in flight: ``concurrency``, else the local judge's parallel slots (more
    would queue inside llama-server), else 8. ``greval run``, the quick start and :func:`greval.evaluate`."""
    auto = local_concurrency() if is_local_ref(ref) else 8
    return (options or RunOptions()).model_copy(update={"concurrency": concurrency or auto})


def run_dataset(
    specs: Sequence[BaseSpec],
    data: str | Path,
    store: str | Path,
    judge: JudgeChoice,
    *,
    options: RunOptions | None = None,
    concurrency: int | None = None,
    mapping: Mapping[str, str] | None = None,
    id_column: str | None = None,
    limit: int | None = None,
    asked: Collection[str] | None = None,
    limits: ReadLimits | None = None,
    store_wait: float = RECONNECT_WAIT_S,
    notify: Notify,
    on_event: Callable[[RunEvent], None] | None = None,
    progress: ProgressHook | None = None,
) -> DatasetRun:
    """Judge every record of ``data`` with ``specs`` into ``store``: the loop ``greval run`` and ``greval
    quickstart`` share.

    The judge is the choice's, else the first spec's that names one, else the default judge (said through
    ``notify``); its parameters fill in from that spec's judge block. Computed metrics alone need no judge: none
    is resolved, started or required. ``concurrency`` None: the embedded judge's parallel slots, else 8
    (``options.concurrency`` is then ignored). A local judge is served by the runner only while calls are
    needed; the judge layer's messages go to ``notify``, this function's to ``on_event``, the runner's progress
    to ``progress``. ``asked``: the spec names the user asked for (None: all; the others are dependencies pulled
    in, see :attr:`RunSummary.empty_metrics`); ``limits`` bound what reading ``data`` may cost; ``store_wait``:
    seconds a write waits for a PostgreSQL store that went away. A Ctrl-C propagates once the run has recorded
    itself as interrupted."""
    emit = on_event or (lambda event: None)
    # Streamed: rows are hashed and asked of the store in chunks; only rows with work left become Records
    # (a finished job re-run holds no Record and imports no judge stack).
    # A table, a tracing tool's export or a phoenix:// project (greval.traces); a missing file or an unknown format
    # fails here, before the store is opened.
    records = open_data(data, mapping, id_column, limit, limits)
    needs_judge = any(s.needs_model for s in specs)
    ref, cfg = choose_judge(specs, judge, notify)
    opts = run_options(options, ref, concurrency)
    with Store(store, wait_s=store_wait) as st:
        plan = plan_work(specs, records, st, cfg, opts.retry_errors, opts.sample)
        for note in records.notes:  # nothing the user gave disappears without a word
            emit(DataNote(text=note))
        emit(
            RunPlanned(
                records=plan.records,
                distinct_contents=plan.distinct_contents,
                specs=[s.name for s in specs],
                judge=cfg.label,
                needs_judge=needs_judge,
                judgements=plan.judgements,
                computed=plan.computed,
                skipped=plan.skipped,
                builds_judge=plan.judgements > 0 and _needs_build(cfg),
            )
        )
        summary = run_sync(
            arun(
                specs,
                records,
                st,
                cfg,
                options=opts,
                dataset=str(data),
                progress=progress,
                plan=plan,
                asked=asked,
                notify=notify,
            )
        )
        if isinstance(records, TraceRows):  # verdicts back to where the traces came from (Phoenix)
            for line in records.after_run(st, summary, specs):
                emit(DataNote(text=line))
    return DatasetRun(ref=ref, judge=cfg, summary=summary)


def _needs_build(cfg: JudgeConfig) -> bool:
    """Whether serving this judge builds llama-server first: no prebuilt engine (the xllamacpp wheel) and no
    build yet (a GREVAL_LLAMA_* setting that is wrong is said when the judge is served). llm.local is imported
    only for a local judge, as the runner does."""
    if cfg.provider not in ("local", "gguf"):
        return False
    from greval.llm.local import LocalJudgeError, find_engine

    try:
        return find_engine() is None
    except LocalJudgeError:
        return False
