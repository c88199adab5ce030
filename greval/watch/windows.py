"""A watch's windows: per metric and per time window (by when each trace started), its volume, spend, dataset
score and judge-vs-human agreement with their CIs, and whether it is in alarm.

Every figure is the one greval defines elsewhere: the dataset score and its CI as the run summary, ``greval gate``
and ``greval history`` give it (:func:`greval.report.scores.score_rows`), agreement with people on the window's
labelled records as ``greval history`` computes it — design-weighted on a review sample, as ``greval gate`` tests
it (:func:`greval.report.history.agreement_on`) — and a window is **in alarm** when its interval lies wholly on
the worse side of its baseline's, the rule ``greval history`` flags drops with
(:func:`greval.report.history.worse`). The baseline is the production period before the window (the windows
before it judged by the metric's production version, at most :attr:`Baseline.windows` of them, pooled) or one
named window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from greval.agreement.bootstrap import Resampling
from greval.agreement.models import Estimate
from greval.errors import UserError
from greval.report.format import fmt_ci, fmt_number
from greval.report.history import agreement_on, worse
from greval.report.models import MeanCI
from greval.report.scores import run_items, score_rows
from greval.store.store import Store
from greval.store.watch import DONE
from greval.traces.spans import parse_time

__all__ = ["Baseline", "Scope", "Volume", "WindowFigures", "evaluate", "window_label"]


def window_label(start: float) -> str:
    """A window as people and the explorer name it: its start, UTC (``2025-05-01T10:05:00Z``)."""
    return datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Baseline(BaseModel):
    """What a window is compared with: the production period before it, or one named window."""

    window: float | None = Field(None, description="A named window's start (None: the production period).")
    windows: int = Field(12, ge=1, description="The production period's latest windows pooled, at most.")

    @classmethod
    def parse(cls, text: str | None, windows: int = 12) -> Baseline:
        """``production`` (or nothing), or a window's start: ISO 8601 (``2025-05-01T10:00:00Z``) or Unix seconds."""
        if text is None or text.strip() in ("", "production"):
            return cls(windows=windows)
        at = parse_time(float(text) if text.replace(".", "", 1).isdigit() else text)
        if at is None:
            raise UserError(f"baseline {text!r}: write 'production' or a window's start, e.g. 2025-05-01T10:00:00Z")
        return cls(window=at.timestamp(), windows=windows)


class Scope(NamedTuple):
    """One metric of one watch, judged by one judge under its production version."""

    watch_id: str
    metric: str
    spec_key: str
    spec_hash: str
    judge_key: str
    seconds: float


class Volume(BaseModel):
    """What a window saw and did (traces), and what it cost."""

    seen: int = 0
    matched: int = Field(0, description="Passed the filter.")
    sampled: int = 0
    malformed: int = 0
    oversize: int = 0
    waiting: int = Field(0, description="Admitted, not judged yet.")
    held: int = Field(0, description="Held back by the daily budget.")
    judged: int = Field(
        0, description="Judged (ok or failed), written back or not; a trace the metric skipped is not (as in a run)."
    )
    failed: int = 0
    skipped: int = 0
    written: int = Field(0, description="Written back to the source (Phoenix).")
    tokens: int = 0
    usd: float | None = None


class Compared(BaseModel):
    """The baseline a window was compared with."""

    what: str
    score: MeanCI
    agreement: Estimate | None = None


class WindowFigures(BaseModel):
    """One window of one metric."""

    metric: str
    start: float
    end: float
    label: str
    spec_hash: str
    spec_key: str = ""
    judge_key: str = ""
    volume: Volume
    score: MeanCI
    agreement_figure: str | None = None
    agreement: Estimate | None = None
    baseline: Compared | None = None
    alarms: list[str] = Field(default_factory=list, description="One line per figure in alarm.")
    review_units: int | None = None


def _volume(rows: Sequence[Mapping[str, Any]], strata: Mapping[str, tuple[int, int, int]]) -> Volume:
    v = Volume()
    for stratum, (seen, matched, sampled) in strata.items():
        if stratum == "!malformed":
            v.malformed += seen
        elif stratum == "!oversize":
            v.oversize += seen
        else:
            v.seen, v.matched, v.sampled = v.seen + seen, v.matched + matched, v.sampled + sampled
    usd: float | None = None
    for r in rows:
        status = r["status"]
        v.waiting += status == "admitted"
        v.held += status == "over_budget"
        v.judged += status in DONE and status != "skipped"
        v.failed += status == "failed"
        v.skipped += status == "skipped"
        v.written += status == "written"
        v.tokens += int(r["tokens"] or 0)
        if r["usd"] is not None:
            usd = (usd or 0.0) + float(r["usd"])
    v.usd = usd
    return v


def judged_items(store: Store, scope: Scope, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The verdict item rows of a window's judged traces (read through the runs that judged them: a window's
    records are a few runs' snapshots, never the whole store)."""
    keep = {(str(r["record_id"]), str(r["record_hash"])) for r in rows if r["status"] in DONE and r["record_hash"]}
    runs = sorted({str(r["run_id"]) for r in rows if r["status"] in DONE and r["run_id"]})
    seen: set[tuple[str, str, str]] = set()
    out: list[dict[str, Any]] = []
    for run_id in runs:
        for item in run_items(store, run_id, [(scope.spec_key, scope.judge_key)]):
            key = (str(item["record_id"]), str(item["record_hash"]), str(item["item_id"]))
            if key[:2] in keep and key not in seen:
                seen.add(key)
                out.append(item)
    return out


def _figures(
    store: Store, scope: Scope, items: Sequence[dict[str, Any]], resamples: int, seed: int
) -> tuple[MeanCI, str | None, Estimate | None]:
    boot = Resampling(resamples=resamples, seed=seed)
    rows = score_rows(store, items, resampling=boot) if items else []
    score = rows[0].score if rows else MeanCI(n=0, mean=None, std=None, note="no verdicts")
    if not items:
        return score, None, None
    figure, agreement = agreement_on(
        store, scope.metric, scope.spec_key, scope.judge_key, list(items), boot, weighted=True
    )
    return score, figure, agreement


def _said(score: MeanCI | Estimate) -> str:
    value = score.mean if isinstance(score, MeanCI) else score.value
    return f"{fmt_number(value)} {fmt_ci(score)}".strip()


def _alarms(scope: Scope, w: WindowFigures) -> list[str]:
    """One line per figure of ``w`` whose interval lies wholly on the worse side of its baseline's."""
    b = w.baseline
    if b is None:
        return []
    out = []
    head = f"{scope.metric}: window {w.label}"
    if worse(None, w.score.ci_low, w.score.ci_high, b.score.ci_low, b.score.ci_high):
        out.append(f"{head}: score {_said(w.score)} lies below the baseline's {_said(b.score)} ({b.what})")
    a, ba = w.agreement, b.agreement
    if a is not None and ba is not None and worse(w.agreement_figure, a.ci_low, a.ci_high, ba.ci_low, ba.ci_high):
        side = "above" if w.agreement_figure in ("mae", "rmse") else "below"
        out.append(
            f"{head}: {w.agreement_figure} vs people {_said(a)} lies {side} the baseline's {_said(ba)} ({b.what})"
        )
    return out


def _baseline_windows(store: Store, scope: Scope, start: float, rule: Baseline) -> tuple[list[float], str]:
    if rule.window is not None:
        named = window_label(rule.window - rule.window % scope.seconds)
        return ([rule.window - rule.window % scope.seconds] if start != rule.window else []), f"window {named}"
    before = [w for w in store.item_windows(scope.watch_id, scope.metric) if w < start][-rule.windows :]
    return before, f"the production period: {len(before)} window(s) before"


def evaluate(
    store: Store, scope: Scope, windows: Sequence[float], rule: Baseline, resamples: int = 1000, seed: int = 0
) -> list[tuple[WindowFigures, bool]]:
    """Each window's figures, compared with its baseline and stored, with whether its alarm is new."""
    out = []
    for start in sorted(set(windows)):
        rows = store.window_items(scope.watch_id, scope.metric, [start])
        strata = store.window_strata(scope.watch_id, [start]).get(start, {})
        items = judged_items(store, scope, rows)
        score, figure, agreement = _figures(store, scope, items, resamples, seed)
        w = WindowFigures(
            metric=scope.metric,
            start=start,
            end=start + scope.seconds,
            label=window_label(start),
            spec_hash=scope.spec_hash,
            spec_key=scope.spec_key,
            judge_key=scope.judge_key,
            volume=_volume(rows, strata),
            score=score,
            agreement_figure=figure,
            agreement=agreement,
        )
        base, what = _baseline_windows(store, scope, start, rule)
        if base:
            pooled = judged_items(store, scope, store.window_items(scope.watch_id, scope.metric, base))
            if pooled:
                b_score, _, b_agreement = _figures(store, scope, pooled, resamples, seed)
                w.baseline = Compared(what=what, score=b_score, agreement=b_agreement)
        w.alarms = _alarms(scope, w)
        stored = store.watch_window(scope.watch_id, scope.metric, start)
        w.review_units = stored.review_units if stored is not None else None
        new = store.save_window(
            scope.watch_id,
            scope.metric,
            (start, w.end),
            scope.spec_key,
            w.model_dump(mode="json"),
            "\n".join(w.alarms) or None,
        )
        out.append((w, new))
    return out
