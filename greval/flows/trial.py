"""`greval spec try`: run a draft on a few human-labelled records and show the judge's agreement with them —
through the front door (greval.flows.run), as an experiment run."""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.markup import escape
from rich.table import Table

from greval.agreement import AgreementOptions, compute_agreement
from greval.agreement.models import AgreementReport
from greval.agreement.scale import agreement_scale
from greval.agreement.tables import read_table, select
from greval.dataset.limits import ReadLimits
from greval.dataset.records import Record, content_hash, load_records
from greval.dataset.source import DataSource
from greval.errors import UserError, option, render_options
from greval.flows.run import JudgeRef, RunEvent, run_dataset
from greval.judge.outcome import config_for
from greval.runner.options import RunOptions, RunSummary
from greval.spec import BaseSpec, CategoricalScale, Spec
from greval.store.results import metric_notes
from greval.store.store import Store, spec_keys


def human_frame(
    spec: Spec,
    records: Sequence[Any],
    results: Mapping[str, Any],
    humans: Mapping[str, Sequence[tuple[str, Any]]],
) -> Any:
    """The agreement module's frame: one row per record (or per chunk / triple for item metrics) and human
    annotator; the ``annotator`` column only when some record has several human answers."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    several = any(len(v) > 1 for v in humans.values())
    for rec in records:
        res = results.get(rec.hash)
        verdicts = {v.item_id: v for v in res.verdicts} if res is not None else {}
        answers = list(humans.get(rec.id) or [("human", None)])
        for annotator, human in answers:
            extra = {"annotator": str(annotator)} if several else {}
            if spec.each is None:
                judged = _verdict_value(spec, verdicts.get(""))
                rows.append({"item": rec.id, "judge": judged, "human": human, **extra})
                continue
            ids = [it["id"] for it in rec.items(spec.each)]
            per_item = _per_item(human, ids, rec.id)
            for iid in ids:
                judged = _verdict_value(spec, verdicts.get(iid))
                rows.append({"item": f"{rec.id}/{iid}", "judge": judged, "human": per_item.get(iid), **extra})
    return pd.DataFrame(rows, columns=["item", "judge", "human", *(["annotator"] if several else [])])


def humans_from_file(
    path: str,
    column: str,
    id_column: str | None = None,
    annotator_column: str | None = None,
    limits: ReadLimits | None = None,
) -> dict[str, list[tuple[str, Any]]]:
    """Human answers kept in their own table (e.g. pulled from Argilla), joined on the record id."""

    table = read_table(path, as_text=True, limits=limits)  # a label spelled NA / None / null stays that label
    id_col = id_column or next((c for c in ("record_id", "id") if c in table.columns), None)
    if id_col is None:
        raise UserError(f"{path}: no record_id or id column; name it with {option('human_id_column')}")
    ids = select(table, id_col).astype(str)
    values = select(table, column)
    annotators = select(table, annotator_column).astype(str) if annotator_column else None
    out: dict[str, list[tuple[str, Any]]] = {}
    for i, (rid, value) in enumerate(zip(ids, values, strict=True)):
        who = str(annotators.iloc[i]) if annotators is not None else f"h{len(out.get(rid, [])) + 1}"
        out.setdefault(rid, []).append((who, _plain(value)))
    return out


def _verdict_value(spec: Spec, v: Any) -> Any:
    if v is None or v.status != "ok":
        return None
    return v.label if isinstance(spec.scale, CategoricalScale) else v.value


def _per_item(human: Any, ids: Sequence[str], rid: str) -> dict[str, Any]:
    if isinstance(human, str) and human.strip()[:1] in ("[", "{"):
        with contextlib.suppress(json.JSONDecodeError):
            human = json.loads(human)
    if human is None or (isinstance(human, float) and math.isnan(human)):
        return {}
    if hasattr(human, "tolist"):
        human = human.tolist()
    if isinstance(human, Mapping):
        return {str(k): v for k, v in human.items()}
    if isinstance(human, list):
        if len(human) != len(ids):
            raise UserError(
                f"record {rid}: the human column holds {len(human)} labels for {len(ids)} items; "
                "give one per item, in item order, or a mapping {item_id: label}"
            )
        return dict(zip(ids, human, strict=True))
    raise UserError(
        f"record {rid}: an item metric needs per-item human labels: a list in item order or {{item_id: label}}"
    )


def split_human(records: Sequence[Any], column: str) -> tuple[list[Any], dict[str, list[tuple[str, Any]]]]:
    """Take the human column out of the records (so the store sees the same records as `greval run`)."""

    humans: dict[str, list[tuple[str, Any]]] = {}
    out: list[Any] = []
    found = False
    for rec in records:
        data = dict(rec.data)
        value: Any = None
        if column in data:
            value = data.pop(column)
            found = True
        else:
            cur: Any = data
            for part in column.split("."):
                cur = cur.get(part) if isinstance(cur, Mapping) else None
            value = cur
            found = found or value is not None
        humans[rec.id] = [("human", value)]
        out.append(Record(id=rec.id, hash=content_hash(data), data=data))
    if not found:
        cols = sorted({k for r in records for k in r.data})
        raise UserError(f"{option('human_column')} {column!r} not found; columns: {', '.join(cols)}")
    return out, humans


class TrialRequest(BaseModel):
    """What ``spec try`` judges and compares: the labelled data and where its people's answers are."""

    model_config = ConfigDict(frozen=True)

    data_file: str
    human_column: str
    human_file: str | None = Field(None, description="People's answers in a table of their own (else a column).")
    human_id_column: str | None = None
    annotator_column: str | None = None
    mapping: dict[str, str] | None = None
    id_column: str | None = None
    limit: int | None = 20
    limits: ReadLimits | None = None
    store: str | None = Field(None, description="Keep the verdicts here (an experiment run), else a temporary store.")
    bootstrap: int = 200


class TrialResult(BaseModel):
    """The agreement of the draft with people, the frame it was computed on, and the run's summary."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    report: AgreementReport
    frame: Any = Field(description="The agreement stage's long frame (a pandas DataFrame).")
    summary: RunSummary


def try_spec(
    specs: Sequence[BaseSpec],
    target: Spec,
    request: TrialRequest,
    judge: JudgeRef = None,
    on_event: Callable[[RunEvent], None] | None = None,
) -> TrialResult:
    """Judge the labelled records with ``specs`` through the front door — an experiment run, never what a reader
    of the store reads by default — and compute the agreement of ``target`` with the people's answers (a column
    of the data file, or of ``request.human_file`` joined on the record id)."""

    r = request
    loaded = load_records(r.data_file, r.mapping, r.id_column, r.limit, limits=r.limits)
    if r.human_file:
        records = loaded
        humans = humans_from_file(r.human_file, r.human_column, r.human_id_column, r.annotator_column, r.limits)
        if not any(rec.id in humans for rec in records):
            raise UserError(f"{r.human_file}: no human answer for any of the {len(records)} record ids")
    else:
        records, humans = split_human(loaded, r.human_column)
    with tempfile.TemporaryDirectory(prefix="greval-try-") as tmp:
        path = r.store or str(Path(tmp) / "try.sqlite")
        source = DataSource(data=records, name=r.data_file)
        done = run_dataset(source, specs, judge, path, RunOptions(experiment="spec try"), on_event)
        key, jkey = spec_keys(specs)[target.name], config_for(target, done.judge).key
        with Store(path) as st:
            results = {rec.hash: st.result(key, jkey, rec) for rec in records}
    frame = human_frame(target, records, results, humans)
    frame["human"] = frame["human"].map(_plain)
    report = compute_agreement(frame, agreement_scale(target), AgreementOptions(bootstrap=r.bootstrap))
    return TrialResult(report=report, frame=frame, summary=done.summary)


def _plain(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v


def print_try(
    console: Any, spec: Spec, report: Any, frame: Any, summary: Any, names: Mapping[str, str] | None = None
) -> None:
    """Compact agreement: counts, headline metrics with CIs, and the confusion matrix for labels (``names``: how
    notes write option fields; the CLI passes its flags)."""

    c = report.counts
    console.print(
        f"[bold]{spec.name}[/] ({spec.hash}) judged by {summary.judge}: {c.items_compared} of {c.items} "
        f"items compared ({c.items_missing_human} without a human label, {c.items_invalid_judge} judge failures)",
        highlight=False,
    )

    for m in summary.metrics:  # why judge answers failed (truncated, content filter …), as `greval run` says
        if m.spec == spec.name:
            for note in metric_notes(m):
                console.print(f"[yellow]note:[/] {escape(render_options(note, names or {}))}", highlight=False)
    t = Table(title="judge vs human", title_justify="left")
    for col in ("metric", "value", "95% CI", "n", "note"):
        t.add_column(col, justify="right" if col in ("value", "n") else "left")
    for name, e in report.metrics.items():
        ci = f"[{e.ci_low:.3f}, {e.ci_high:.3f}]" if e.ci_low is not None and e.ci_high is not None else ""
        t.add_row(name, "—" if e.value is None else f"{e.value:.3f}", escape(ci), str(e.n), escape(e.note or ""))
    console.print(t)
    if report.categorical is not None:
        cm = Table(title="confusion (rows human, columns judge)", title_justify="left")
        cm.add_column("human \\ judge")
        for lab in report.categorical.confusion.judge_labels:
            cm.add_column(escape(lab), justify="right")
        for lab, row in zip(report.categorical.confusion.labels, report.categorical.confusion.counts, strict=True):
            cm.add_row(escape(lab), *[str(v) for v in row])
        console.print(cm)
    for note in report.notes:
        console.print(f"  note: {escape(render_options(note, names or {}))}", highlight=False)
