"""Dataset scores of a run's records, with their CIs — per metric, and per system — and the paired change of a
score against a baseline on the same records: what :class:`greval.flows.results.Results` summarises and ``greval gate``
tests.

Every figure is the one greval defines elsewhere: the record rows and :class:`MetricFigures` of
:mod:`greval.store.results` (the dataset score is :func:`~greval.store.results.dataset_score`), the score's CI
of the store report (:func:`~greval.report.stats.score_ci`), the paired CI from the agreement stage's
bootstrap (:mod:`greval.agreement.bootstrap`). Pure reads: no model call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from greval.agreement import bootstrap as bs
from greval.agreement.models import Estimate
from greval.errors import UserError
from greval.report.models import MeanCI
from greval.report.stats import score_ci
from greval.store.results import MetricFigures, dataset_score, figures_from_rows, item_rows, record_rows
from greval.store.store import Store


class SystemFilter(BaseModel):
    """The records of one system: those whose field ``column`` holds ``value`` (compared as text)."""

    column: str
    value: str

    @classmethod
    def parse(cls, text: str) -> SystemFilter:
        column, sep, value = text.partition("=")
        if not sep or not column.strip() or not value.strip():
            raise UserError(f"system {text!r}: write COLUMN=VALUE, e.g. system=rag-v2")
        return cls(column=column.strip(), value=value.strip())

    def __str__(self) -> str:
        return f"{self.column}={self.value}"

    def matches(self, data: Mapping[str, Any]) -> bool:
        value = data.get(self.column)
        return value is not None and str(value) == self.value


class ScoreRow(BaseModel):
    """One metric's figures and dataset score (with its bootstrap CI) over a set of records."""

    metric: str
    spec_hash: str
    judge: str
    system: str | None = Field(None, description="COLUMN=VALUE when the records are one system's, else None.")
    figures: MetricFigures
    score: MeanCI

    def estimate(self) -> Estimate:
        """The dataset score and its CI as the gate's conditions test them."""
        f, s = self.figures, self.score
        return Estimate(value=f.mean_score, n=f.scored, ci_low=s.ci_low, ci_high=s.ci_high, note=s.note)


def run_items(store: Store, run_id: str, metrics: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """Item rows of the given (spec key, judge key) pairs on the records a run was given (every record id)."""
    items: list[dict[str, Any]] = []
    for spec_key, judge_key in metrics:
        items += item_rows(store, run_id=run_id, spec_key=spec_key, judge_key=judge_key)
    return items


def in_system(store: Store, items: Sequence[Mapping[str, Any]], system: SystemFilter) -> list[Mapping[str, Any]]:
    """The item rows of records whose data says they are ``system``'s (a content's data is its id's)."""
    hashes = {r["record_hash"] for r in items}
    data = {rec.hash: rec.data for rec in store.records(hashes)}
    return [r for r in items if system.matches(data.get(r["record_hash"], {}))]


def system_values(store: Store, items: Sequence[Mapping[str, Any]], column: str) -> set[str]:
    """The values the records of ``items`` hold in ``column`` (as text)."""
    hashes = {r["record_hash"] for r in items}
    return {str(rec.data[column]) for rec in store.records(hashes) if rec.data.get(column) is not None}


def score_rows(
    store: Store,
    items: Sequence[Mapping[str, Any]],
    systems: Sequence[SystemFilter] = (),
    resampling: bs.Resampling | None = None,
) -> list[ScoreRow]:
    """Each metric's (version, judge) figures and dataset score with its CI (``resampling``: the default
    bootstrap unless given): over every record of ``items`` when no system is given, else once per system over
    its records."""
    specs = {key: store.any_spec(key) for key in dict.fromkeys(r["spec_key"] for r in items)}
    parts: list[tuple[str | None, Sequence[Mapping[str, Any]]]] = [(None, items)] if not systems else []
    parts += [(str(s), in_system(store, items, s)) for s in systems]
    out = []
    for system, part in parts:
        recs = record_rows(part, specs)
        for fig in figures_from_rows(part, specs):
            grp = [r for r in recs if r["spec_key"] == fig.spec_key and r["judge_key"] == fig.judge_key]
            ci = score_ci(grp, fig.aggregate, resampling)
            out.append(
                ScoreRow(
                    metric=fig.spec, spec_hash=fig.spec_hash, judge=fig.judge, system=system, figures=fig, score=ci
                )
            )
    return out


class PairedChange(BaseModel):
    """A dataset score now minus the baseline's, on the records both scored (paired by record id), with a
    percentile bootstrap CI that resamples those records (each keeps its two scores)."""

    current: float | None
    baseline: float | None
    change: float | None = Field(description="current − baseline (negative: the score dropped).")
    ci_low: float | None = None
    ci_high: float | None = None
    paired: int = Field(description="Records scored on both sides.")
    only_current: int = Field(0, description="Records scored now but not in the baseline (not compared).")
    only_baseline: int = Field(0, description="Records scored in the baseline but not now (not compared).")
    note: str | None = None


def _scored(rows: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Record id -> its record row, for the rows with a score (the rows dataset_score counts)."""
    return {str(r["record_id"]): r for r in rows if r["status"] in ("ok", "partial") and r["score"] is not None}


def paired_change(
    current: Sequence[Mapping[str, Any]],
    baseline: Sequence[Mapping[str, Any]],
    pooling: str,
    resampling: bs.Resampling | None = None,
    *,
    resamples: int | None = None,
    seed: int | None = None,
) -> PairedChange:
    """:class:`PairedChange` of two sets of one metric's record rows. Each side's score is
    :func:`dataset_score` of its paired rows; each resample recomputes both the same way (Σ score·units /
    Σ units when pooled, the mean of record scores for ``macro``) over the same resampled records
    (``resampling``, or its keywords ``resamples``, ``seed``)."""
    boot = bs.Resampling.of(resampling, resamples=resamples, seed=seed)
    now, before = _scored(current), _scored(baseline)
    ids = sorted(i for i in now if i in before)  # record-id order: the CI does not follow storage order
    out = PairedChange(
        current=dataset_score([now[i] for i in ids], pooling)[0],
        baseline=dataset_score([before[i] for i in ids], pooling)[0],
        change=None,
        paired=len(ids),
        only_current=len(now) - len(ids),
        only_baseline=len(before) - len(ids),
    )
    if out.current is None or out.baseline is None:
        out.note = "no record scored on both sides"
        return out
    out.change = out.current - out.baseline
    if boot.resamples <= 0:
        return out
    micro = pooling == "micro"

    def columns(r: Mapping[str, Any]) -> list[float]:
        w = float(r["units"]) if micro else 1.0
        return [float(r["score"]) * w, w]

    values = np.asarray([columns(now[i]) + columns(before[i]) for i in ids], dtype=np.float64)
    ci = boot.cis(len(ids), batched=_change(values))["change"]
    out.ci_low, out.ci_high, out.note = ci.low, ci.high, ci.note
    return out


def _change(values: np.ndarray) -> Callable[[bs.Batch], dict[str, bs.FloatArray]]:
    """The batched statistic: each resample's (Σ now·w / Σ w) − (Σ before·w / Σ w), NaN where undefined."""

    def statistic(batch: bs.Batch) -> dict[str, bs.FloatArray]:
        sums = batch.sums(values)
        with np.errstate(invalid="ignore", divide="ignore"):
            diff = sums[:, 0] / sums[:, 1] - sums[:, 2] / sums[:, 3]
        return {"change": np.where(np.isfinite(diff), diff, np.nan)}

    return statistic
