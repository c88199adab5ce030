"""``greval gate`` without the command line: conditions on a metric → one :class:`Check` each → pass or fail.

Two kinds of condition, on any metric the store has:

- **agreement** (``kappa>=0.6``, ``accuracy>0.8`` …, judge metrics with human labels): on the report
  ``greval agreement --store`` prints (:mod:`greval.gate.checks`);
- **dataset score** (``score>=0.3``: the score the run summary prints, judge, computed and pipeline metrics
  alike) on the records of one run — the latest finished run of the metric unless a run is named — over every
  record, or per system (``COLUMN=VALUE``); and the score's **change against a baseline** (another run, or
  another version of the metric, ``NAME@HASH``) on the same records, with a paired bootstrap CI.

Each condition tests the figure's point value or an end of its CI (``side``). Nothing here prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from greval.agreement.agreement import compute_agreement
from greval.agreement.bootstrap import RESAMPLES, Resampling
from greval.agreement.from_store import store_frame
from greval.agreement.models import AgreementOptions, Estimate
from greval.errors import Remedy, UserError, option
from greval.gate.checks import Check, Condition, GateResult, Side, check, evaluate
from greval.report.scores import SystemFilter, in_system, paired_change, run_items, score_rows, system_values
from greval.spec import Spec
from greval.store.results import item_rows, record_rows
from greval.store.store import Store

#: The condition name of a metric's dataset score (the run summary's "score" column).
SCORE = "score"


class GateRequest(BaseModel):
    """What to check, and on which verdicts."""

    spec: str = Field(description="The metric: NAME, or NAME@HASH for one version.")
    conditions: list[Condition] = Field(default_factory=list)
    side: Side = "value"
    vs_ceiling: float | None = None
    judge: str | None = Field(None, description="Whose verdicts, when several judges answered this metric.")
    datasets: list[str] = Field(default_factory=list, description="Human-label datasets (default: all).")
    run: str | None = Field(None, description="The run whose records are scored (default: the latest finished).")
    systems: list[SystemFilter] = Field(default_factory=list, description="Score each of these systems apart.")
    baseline: str | None = Field(None, description="A run id, or NAME@HASH: the score's change is tested.")
    max_drop: float | None = Field(None, ge=0, description="The largest drop of the score allowed vs the baseline.")
    invalid: str = Field("as-wrong", description="How agreement counts a judge answer that is an error.")
    resamples: int = Field(RESAMPLES, description="Bootstrap resamples of every CI the conditions test.")
    seed: int = Field(0, description="Seed of those resamples.")

    @property
    def resampling(self) -> Resampling:
        """The bootstrap of every CI the gate tests, as one value."""
        return Resampling(resamples=self.resamples, seed=self.seed)


class GateOutcome(BaseModel):
    """Every condition's check, and what a reader needs to know about the figures (which run, which records)."""

    result: GateResult
    notes: list[str] = Field(default_factory=list)


def run_gate(store: Store, req: GateRequest) -> GateOutcome:
    """Check every condition of ``req`` (see the module doc); user mistakes raise :class:`UserError`."""
    agreement = [c for c in req.conditions if c.metric != SCORE]
    scores = [c for c in req.conditions if c.metric == SCORE]
    _validate(req, agreement)
    checks: list[Check] = []
    notes: list[str] = []
    if agreement or req.vs_ceiling is not None:
        checks += _agreement_checks(store, req, agreement, notes)
    if scores or req.baseline is not None:
        checks += _score_checks(store, req, scores, notes)
    return GateOutcome(result=GateResult.of(checks), notes=notes)


def _validate(req: GateRequest, agreement: Sequence[Condition]) -> None:
    if req.baseline is not None and req.max_drop is None:
        raise UserError(f"{option('baseline')} needs {option('max_drop')}: how much the score may drop, e.g. 0.02")
    if req.max_drop is not None and req.baseline is None:
        raise UserError(f"{option('max_drop')} needs a {option('baseline')} to compare with (a run id or NAME@HASH)")
    if not req.conditions and req.baseline is None and req.vs_ceiling is None:
        raise UserError(f"nothing to check: give a condition such as '{SCORE}>=0.7' or 'kappa>=0.6', or a baseline")
    if req.systems and (agreement or req.vs_ceiling is not None):
        names = ", ".join(c.metric for c in agreement) or "the ceiling"
        raise UserError(
            f"{option('systems')} applies to dataset scores and the baseline; agreement ({names}) is over every "
            "labelled item: check it in a call of its own"
        )


def _agreement_checks(store: Store, req: GateRequest, conds: Sequence[Condition], notes: list[str]) -> list[Check]:
    """The agreement report ``greval agreement --store`` prints, and the conditions on it."""

    version = store.metric_version(req.spec)
    if not isinstance(spec := store.any_spec(version.spec_key), Spec):
        raise UserError(
            f"metric {version.name!r} is a {spec.kind} metric, not a judge metric: agreement needs a judge's "
            f"verdicts and people's labels; gate its dataset score with '{SCORE}>=X'"
        )
    named = version.spec_hash if version.named else None
    frame, scale, _ = store_frame(store, version.name, req.judge, "item", named, datasets=req.datasets)
    options = AgreementOptions(invalid=req.invalid, **req.resampling.model_dump())
    report = compute_agreement(frame, scale, options)
    notes.append(
        f"{version.said()}: agreement from {report.counts.items_compared} items compared (see `greval agreement`)"
    )
    return evaluate(report, conds, req.side, req.vs_ceiling).checks


# ------------------------------------------------------------------------------------------------ scores
def _metric_of(run: Mapping[str, Any], name: str, key: str | None, judge: str | None) -> dict[str, Any] | None:
    """The run summary's entry for the metric (``key``: that version's; None: any version), by a judge's label or
    key when given."""
    summary = json.loads(run["summary"]) if run.get("summary") else {}
    for m in summary.get("metrics", []):
        if m.get("spec") != name:
            continue
        if key is not None and m.get("spec_key") != key:
            continue
        if judge is not None and judge not in (m.get("judge"), m.get("judge_key")):
            continue
        return dict(m)
    return None


def _judged(run: Mapping[str, Any]) -> str:
    summary = json.loads(run["summary"]) if run.get("summary") else {}
    return ", ".join(str(m.get("spec")) for m in summary.get("metrics", [])) or "nothing"


def find_run(store: Store, spec: str, judge: str | None, run_id: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the run, its summary's entry for the metric): the named run (any run, an experiment too: named, it is
    what the user asked for), else the latest finished run — never an experiment — that judged ``spec``'s
    version (NAME: the production version; NAME@HASH: that one)."""
    version = store.metric_version(spec)
    name = version.name
    runs = store.runs()
    if run_id is not None:
        found = next((r for r in runs if r["run_id"] == run_id), None)
        if found is None:
            raise UserError(f"no run {run_id!r} in {store.name} (`greval results runs` lists them)")
        metric = _metric_of(found, name, version.spec_key if version.named else None, judge)
        if metric is None:
            raise UserError(f"run {run_id} did not judge {spec}; it judged: {_judged(found)}")
        return found, metric
    for r in reversed(runs):
        if r["status"] != "finished" or r.get("kind") == "experiment":
            continue
        if (metric := _metric_of(r, name, version.spec_key, judge)) is not None:
            return r, metric
    raise UserError(
        f"no finished run of {version.said()} in {store.name}", remedy=Remedy("run DATA", {"spec": name}, "first")
    )


def _score_checks(store: Store, req: GateRequest, conds: Sequence[Condition], notes: list[str]) -> list[Check]:
    run, metric = find_run(store, req.spec, req.judge, req.run)
    items = run_items(store, run["run_id"], [(metric["spec_key"], metric["judge_key"])])
    for system in req.systems:
        if not in_system(store, items, system):
            found = sorted(system_values(store, items, system.column))
            raise UserError(
                f"system {system}: no record of run {run['run_id']} has it ({system.column}: "
                f"{', '.join(found) if found else 'no record has this field'})"
            )
    rows = score_rows(store, items, req.systems, req.resampling)
    version = f"{metric['spec']}@{metric['spec_hash']}"
    production = store.production_key(metric["spec"]) == metric["spec_key"]
    notes.append(
        f"{version} ({'production' if production else 'not production'}): dataset score of run {run['run_id']} "
        f"({run['dataset'] or 'no dataset name'})"
    )
    checks = []
    for row in rows:
        f = row.figures
        label = SCORE + (f" [{row.system}]" if row.system else "")
        checks += [check(label, row.estimate(), c.op, c.threshold, req.side) for c in conds]
        notes.append(
            f"{metric['spec']}{f' [{row.system}]' if row.system else ''}: {f.scored} of {f.records} records scored"
        )
    if req.baseline is not None:
        assert req.max_drop is not None
        checks += _baseline_checks(store, req, run, metric, items, notes)
    return checks


def _baseline_items(
    store: Store, req: GateRequest, run: Mapping[str, Any], metric: Mapping[str, Any], notes: list[str]
) -> tuple[list[dict[str, Any]], str]:
    """The baseline's item rows and what to call it: another run's verdicts of the metric, or this run's
    records judged by another version of it (NAME@HASH)."""
    assert req.baseline is not None
    name = metric["spec"]
    base, at, version = req.baseline.partition("@")
    if at:
        if base != name:
            raise UserError(
                f"baseline {req.baseline!r} is another metric than {name!r}: compare a metric with "
                "itself, on another run's records (a run id) or in another version (NAME@HASH)"
            )
        key = store.spec_version(name, version)
        if key is None:
            raise UserError(f"baseline {req.baseline!r}: no version {version!r} of {name!r} in {store.name}")
        items = item_rows(store, run_id=run["run_id"], spec_key=key, judge_key=metric["judge_key"])
        if not items:
            raise UserError(
                f"baseline {req.baseline!r}: no verdicts of that version on run {run['run_id']}'s "
                "records; judge them with it first"
            )
        return items, f"{req.baseline} on the same records"
    runs = {r["run_id"]: r for r in store.runs()}
    if base not in runs:
        raise UserError(f"baseline {req.baseline!r}: no such run in {store.name} (give a run id, or NAME@HASH)")
    other = _metric_of(runs[base], name, None, None)
    if other is None:
        raise UserError(
            f"baseline run {base} did not judge {name} (it judged: {_judged(runs[base])}): "
            "a baseline must be of the same metric"
        )
    if other["spec_hash"] != metric["spec_hash"]:
        notes.append(
            f"the baseline run judged {name}@{other['spec_hash'][:12]}, this run {name}@"
            f"{metric['spec_hash'][:12]}: the change mixes the records' and the metric's"
        )
    if other["judge_key"] != metric["judge_key"]:
        notes.append(f"the baseline run's judge was {other['judge']}, this run's {metric['judge']}")
    items = item_rows(store, run_id=base, spec_key=other["spec_key"], judge_key=other["judge_key"])
    if not items:
        raise UserError(f"baseline run {base} has no verdicts of {name}")
    return items, f"run {base}"


def _baseline_checks(
    store: Store,
    req: GateRequest,
    run: Mapping[str, Any],
    metric: Mapping[str, Any],
    items: Sequence[Mapping[str, Any]],
    notes: list[str],
) -> list[Check]:
    """The score's change against the baseline, paired by record id: change ≥ −max_drop (per system)."""
    assert req.max_drop is not None
    base_items, what = _baseline_items(store, req, run, metric, notes)
    spec = store.any_spec(metric["spec_key"])
    base_spec = store.any_spec(base_items[0]["spec_key"])
    checks = []
    subjects: list[SystemFilter | None] = [*req.systems] or [None]
    for system in subjects:
        now = items if system is None else in_system(store, items, system)
        before = base_items if system is None else in_system(store, base_items, system)
        change = paired_change(
            record_rows(now, {metric["spec_key"]: spec}),
            record_rows(before, {base_items[0]["spec_key"]: base_spec}),
            spec.pooling,
            req.resampling,
        )
        where = f" [{system}]" if system else ""
        est = Estimate(
            value=change.change, n=change.paired, ci_low=change.ci_low, ci_high=change.ci_high, note=change.note
        )
        paired = f"paired over {change.paired} records"
        checks.append(check(f"{SCORE} change vs {what}{where}", est, ">=", -req.max_drop, req.side, paired))
        if change.only_current or change.only_baseline:
            notes.append(
                f"{metric['spec']}{where}: {change.only_current} record(s) scored only now and "
                f"{change.only_baseline} only in the baseline are not compared"
            )
        if change.current is not None and change.baseline is not None:
            notes.append(
                f"{metric['spec']}{where}: {change.current:.3f} now, {change.baseline:.3f} in the "
                f"baseline on the {change.paired} records both scored"
            )
    return checks
