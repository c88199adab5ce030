"""A metric's history in a store: every run (its version, judge, dataset), every change of its production
version, and per run the dataset score and the judge-vs-human agreement with their CIs — the trend a team
watches week after week (``greval history NAME``, and its page).

Each run's figures are the ones every other command computes: the dataset score of the run's records as the run
summary and ``greval gate`` give it (:func:`greval.report.scores.score_rows`), agreement as ``greval agreement``
gives it on the labelled records among the run's (:func:`greval.agreement.from_store.store_frame` restricted to
them). A run **drops** when its CI lies wholly below the previous production run's (for an error like MAE:
above it): a change the intervals cannot explain. Experiments are left out (their runs are not the metric's
history), and so are runs of other metrics. Pure reads: no model call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from greval.agreement.agreement import compute_agreement
from greval.agreement.bootstrap import RESAMPLES, Resampling
from greval.agreement.design import report_name
from greval.agreement.models import AgreementOptions, Estimate
from greval.errors import UserError
from greval.report.models import MeanCI
from greval.report.scores import run_items, score_rows
from greval.spec import CategoricalScale, Spec
from greval.store.store import Store
from greval.store.versions import Promotion

#: The agreement figure a run's point shows, by the metric's scale (the objective greval align optimises).
AGREEMENT_FIGURE = {"categorical": "cohen_kappa", "value": "mae"}
#: Figures where lower is better (a drop is a CI wholly above the previous one).
LOWER_IS_BETTER = frozenset({"mae", "rmse"})


class RunPoint(BaseModel):
    """One run of the metric, with its figures."""

    run_id: str
    at: float = Field(description="When the run started.")
    status: str
    spec_hash: str
    spec_key: str
    production: bool = Field(description="The run judged the version that was production when it started.")
    judge: str
    dataset: str
    dataset_name: str | None = None
    records: int
    score: MeanCI
    agreement: Estimate | None = Field(None, description="Judge vs people on the run's labelled records.")
    agreement_figure: str | None = None
    score_drop: bool = Field(False, description="Its score's CI lies wholly below the previous production run's.")
    agreement_drop: bool = Field(False, description="Its agreement's CI lies wholly on the worse side of the last.")


class Period(BaseModel):
    """A stretch of time during which one version was the production version."""

    spec_hash: str
    start: float
    end: float | None = Field(None, description="None: still production.")
    source: str
    note: str | None = None


class History(BaseModel):
    """A metric's runs with their figures, its production periods and every promotion, oldest first."""

    metric: str
    runs: list[RunPoint]
    periods: list[Period]
    promotions: list[Promotion]
    resamples: int
    notes: list[str] = Field(default_factory=list)


def build_history(store: Store, name: str, *, resamples: int = RESAMPLES, seed: int = 0) -> History:
    """The history of metric ``name`` in ``store`` (see the module doc); a name the store lacks is one line."""
    store.version_rows(name)  # the metric must exist (a UserError with "did you mean" otherwise)
    promotions = store.promotions(name)
    periods = _periods(promotions)
    boot = Resampling(resamples=resamples, seed=seed)
    points = [_point(store, name, run, metric, periods, boot) for run, metric in _runs(store, name)]
    _flag_drops(points)
    notes = [] if points else [f"no finished run of {name} (experiments aside)"]
    return History(metric=name, runs=points, periods=periods, promotions=promotions, resamples=resamples, notes=notes)


def _runs(store: Store, name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(run, its summary's entry for the metric) of every finished or interrupted run that is not an experiment."""
    out = []
    for run in store.runs():
        if run.get("kind") == "experiment" or run["status"] not in ("finished", "interrupted"):
            continue
        summary = json.loads(run["summary"]) if run.get("summary") else {}
        metric = next((m for m in summary.get("metrics", []) if m.get("spec") == name), None)
        if metric is not None:
            out.append((run, metric))
    return out


def _periods(promotions: Sequence[Promotion]) -> list[Period]:
    out: list[Period] = []
    for p in promotions:
        if out:
            out[-1].end = p.at
        out.append(Period(spec_hash=p.spec_hash, start=p.at, source=p.source, note=p.note))
    return out


def _production_at(periods: Sequence[Period], at: float) -> str | None:
    """The production version's hash at ``at`` (the first one for a run before any promotion was recorded)."""
    found = [p.spec_hash for p in periods if p.start <= at]
    return found[-1] if found else (periods[0].spec_hash if periods else None)


def _point(
    store: Store,
    name: str,
    run: dict[str, Any],
    metric: dict[str, Any],
    periods: Sequence[Period],
    resampling: Resampling,
) -> RunPoint:
    key, judge_key = str(metric["spec_key"]), str(metric["judge_key"])
    items = run_items(store, run["run_id"], [(key, judge_key)])
    rows = score_rows(store, items, resampling=resampling) if items else []
    score = rows[0].score if rows else MeanCI(n=0, mean=None, std=None, note="no verdicts")
    figure, agreement = _agreement(store, name, key, judge_key, items, resampling)
    return RunPoint(
        run_id=run["run_id"],
        at=float(run["started_at"]),
        status=run["status"],
        spec_hash=str(metric.get("spec_hash", "")),
        spec_key=key,
        production=_production_at(periods, float(run["started_at"])) == metric.get("spec_hash"),
        judge=str(metric.get("judge", "")),
        dataset=str(run.get("dataset") or ""),
        dataset_name=run.get("dataset_name"),
        records=len({r["record_id"] for r in items}),
        score=score,
        agreement=agreement,
        agreement_figure=figure,
    )


def _agreement(
    store: Store, name: str, key: str, judge_key: str, items: Sequence[dict[str, Any]], resampling: Resampling
) -> tuple[str | None, Estimate | None]:
    """The run's agreement figure on its labelled records (None when people labelled none of them)."""
    return agreement_on(store, name, key, judge_key, items, resampling)


def agreement_on(
    store: Store,
    name: str,
    key: str,
    judge_key: str,
    items: Sequence[dict[str, Any]],
    resampling: Resampling,
    *,
    weighted: bool = False,
) -> tuple[str | None, Estimate | None]:
    """A metric's agreement figure (:data:`AGREEMENT_FIGURE`) on the labelled records among ``items``: a run's, or a
    ``greval watch`` window's (None when people labelled none of them). ``weighted``: on a non-random sample of
    labels (a review design), the design-weighted figure, as ``greval gate`` tests it (else the plain one)."""
    from greval.agreement.from_store import store_frame

    spec = store.any_spec(key)
    if not isinstance(spec, Spec) or not store.submitted_label_count(name):
        return None, None
    figure = AGREEMENT_FIGURE["categorical" if isinstance(spec.scale, CategoricalScale) else "value"]
    records = {(str(r["record_id"]), str(r["record_hash"])) for r in items}
    try:
        frame, scale, _ = store_frame(store, name, judge_key, version=spec.hash, records=records)
    except UserError:
        return figure, None
    if frame.empty:
        return figure, None
    report = compute_agreement(frame, scale, AgreementOptions(**resampling.model_dump()))
    design = {report_name(d.name): d for d in report.design.estimates} if weighted and report.design else {}
    if figure in design:
        d = design[figure]
        plain = report.metrics.get(figure)
        return figure, Estimate(value=d.weighted, n=plain.n if plain else 0, ci_low=d.ci_low, ci_high=d.ci_high)
    return figure, report.metrics.get(figure)


def worse(
    figure: str | None, low: float | None, high: float | None, base_low: float | None, base_high: float | None
) -> bool:
    """Whether an interval lies wholly on the worse side of a baseline's (below it; above it for an error such as
    MAE, :data:`LOWER_IS_BETTER`): the drop :func:`build_history` flags, and ``greval watch``'s alarm."""
    if figure in LOWER_IS_BETTER:
        return _below(base_high, low)
    return _below(high, base_low)


def _flag_drops(points: list[RunPoint]) -> None:
    """Mark each production run whose CI lies wholly on the worse side of the previous production run's."""
    last: RunPoint | None = None
    for p in points:
        if not p.production:
            continue
        if last is not None:
            p.score_drop = worse(None, p.score.ci_low, p.score.ci_high, last.score.ci_low, last.score.ci_high)
            if p.agreement is not None and last.agreement is not None:
                a, b = p.agreement, last.agreement
                p.agreement_drop = worse(p.agreement_figure, a.ci_low, a.ci_high, b.ci_low, b.ci_high)
        last = p


def _below(high: float | None, low: float | None) -> bool:
    return high is not None and low is not None and high < low


__all__ = ["AGREEMENT_FIGURE", "History", "Period", "RunPoint", "agreement_on", "build_history", "worse"]
