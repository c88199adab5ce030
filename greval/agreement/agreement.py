"""compute_agreement: judge vs people for one long (item, annotator) frame — its options checked, the judge's
labels made from a score when asked, the frame prepared, and the report assembled: headline figures with CIs,
the categorical or value sections, the human ceiling, design weights, calibration and slices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from greval.agreement import resampling
from greval.agreement import stats as st
from greval.agreement.calibration import calibration_from_frame, has_confidence
from greval.agreement.categorical import categorical_report
from greval.agreement.ceiling import ceiling, ceiling_metric, pair_estimates
from greval.agreement.design import design_report, respondents
from greval.agreement.gold.choose import Chosen, choose_gold, gold_rows, people_only
from greval.agreement.gold.quality import reviewers_report
from greval.agreement.headline import headline, n_for, pooled_headline
from greval.agreement.models import (
    KAPPAS,
    ONE_LABEL,
    AgreementOptions,
    AgreementReport,
    AgreementScale,
    Describe,
    DesignReport,
    Estimate,
    GoldChoice,
    GroupFigures,
    ValueReport,
)
from greval.agreement.prepare import Prepared, is_null, label_text, prepare, resolve_scale
from greval.agreement.resampling import bootstrap_info, bootstrap_note, check_protocol, estimate
from greval.agreement.stats import FloatArray
from greval.agreement.threshold import threshold_frame, threshold_note, wants_threshold
from greval.dataset.frame import Frame
from greval.errors import DataError, option

if TYPE_CHECKING:
    import pandas as pd

MISSING_SLICE = "(missing)"
"""The slice of rows whose slice column is empty."""


def compute_agreement(
    frame: Frame | pd.DataFrame,
    scale: AgreementScale,
    options: AgreementOptions | None = None,
    gold: GoldChoice | None = None,
) -> AgreementReport:
    """Judge-vs-human agreement for a long (item, annotator) frame (a Frame or a pandas DataFrame); see
    docs/agreement.md. ``gold``: compare the judge with this gold instead of people's majority / mean, and add
    the reviewers table (each person against it, the judge beside them).

    Raises greval.errors.DataError for user mistakes (missing columns, unknown human labels ...).
    """
    options = options or AgreementOptions()
    frame = Frame.of(frame)
    scale = resolve_scale(frame, scale, options)
    check_options(frame, scale, options)
    threshold = None
    if wants_threshold(options):
        frame, threshold = threshold_frame(frame, scale, options)
    frame, assumed = respondents(frame)
    chosen = choose_gold(frame, scale, options, gold) if gold is not None else None
    values = chosen.values if chosen is not None else None
    prep = prepare(frame, scale, options, values)
    report = _report(prep, options)
    if chosen is not None:
        _reviewers(report, prep, chosen, options)
    report.threshold = threshold
    report.design = _design(frame, prep, scale, options, assumed)
    _design_notes(report, assumed)
    if has_confidence(frame) and "judge" in frame.columns:
        report.calibration = calibration_from_frame(frame if chosen is None else gold_rows(frame, chosen), options)
    if threshold is not None:
        report.notes.append(threshold_note(threshold))
    _slices(frame, prep, scale, options, report, values)
    return report


def _reviewers(report: AgreementReport, prep: Prepared, chosen: Chosen, options: AgreementOptions) -> None:
    """With a gold: the ceiling over people only (adjudicators settle, they do not review), the reviewers table,
    and a note on the items the gold does not cover."""
    people = people_only(prep, chosen.adjudicators)
    if people is not prep and prep.has_judge:
        report.ceiling = ceiling(people, options)
    metric = report.ceiling.metric if report.ceiling is not None else ceiling_metric(prep.scale)[0]
    report.reviewers = reviewers_report(people, chosen, options, metric, pair_estimates(people, options))
    uncovered = report.reviewers.counts.without_gold
    if uncovered:
        report.notes.append(
            f"{uncovered} labelled item(s) without a gold ({chosen.gold.choice.describe()} did not label them) "
            "left out of the judge comparison"
        )
    report.notes.append(
        f"the judge is compared with the gold ({chosen.gold.choice.describe()}), not people's consensus"
    )


def check_options(frame: Frame, scale: AgreementScale, options: AgreementOptions) -> None:
    """Flag combinations that cannot work, as one-line user errors."""
    check_protocol(frame, options)
    categorical = scale.kind == "categorical"
    labels = scale.labels or []
    if options.pos_label is not None:
        if not categorical:
            raise DataError(f"{option('AgreementOptions.pos_label')} needs a categorical scale")
        if options.pos_label not in labels:
            raise DataError(
                f"{option('AgreementOptions.pos_label')} {options.pos_label!r} is not a label; labels are {labels}"
            )
    if "score" in frame.columns or wants_threshold(options):
        if "score" not in frame.columns:
            raise DataError(f"a threshold turns scores into labels: give the score column ({option('score')})")
        if not categorical:
            raise DataError(f"{option('score')} needs a categorical scale (the positive label and the rest)")
        if options.pos_label is None:
            raise DataError(
                f"{option('score')} needs {option('AgreementOptions.pos_label')}: which label a high score means"
            )
    if wants_threshold(options):
        if len(labels) != 2:
            raise DataError(f"a threshold makes two labels; the scale has {len(labels)}: {labels}")
        if "judge" in frame.columns:
            raise DataError(
                f"a threshold makes the judge's labels from its score: {option('judge')} or a threshold, not both"
            )
    if "judge" not in frame.columns and "score" not in frame.columns:
        raise DataError("missing column(s) ['judge']; give the judge's labels or its score")


def _report(prep: Prepared, options: AgreementOptions) -> AgreementReport:
    """The agreement report of prepared items (no design, calibration, threshold or slices: compute_agreement
    adds those from the frame)."""
    head = headline(prep, options)
    n = prep.counts.items_compared
    cis = resampling.cis(options, n, prep.groups, head.rest, head.batched)
    est = {name: estimate(val, n_for(name, prep), cis.get(name)) for name, val in head.point.items()}
    report = AgreementReport(scale=prep.scale, options=options, counts=prep.counts, metrics=est, notes=list(prep.notes))
    if prep.score is not None and (missing := int((~np.isfinite(prep.score)).sum())):
        report.notes.append(f"ROC-AUC / PR-AUC leave out {missing} compared item(s) without a score")
    used = skipped = None
    if options.protocol == "per-group" and prep.groups is not None and n:
        used, skipped = _per_group(prep, options, est, report)
    if prep.scale.kind == "categorical":
        if prep.has_judge:
            report.categorical = categorical_report(prep, options, est)
    else:
        report.value = ValueReport(
            judge=_describe(prep.jv[~prep.invalid]),  # valid answers only, before any substitution
            human=_describe(prep.hv),
            protocol=options.protocol,
            n_groups=used,
            groups_skipped=skipped,
        )
    report.metrics = est  # without the bias figures the categorical section took
    report.ceiling = ceiling(prep, options) if prep.has_judge else None
    if options.bootstrap > 0:
        grouped = prep.groups is not None
        unit = resampling.resample_unit(grouped, options, prep.multi_row_items, prep.groups_are_records)
        report.bootstrap = bootstrap_info(unit, len(prep.group_names) if grouped else n, options)
        report.notes.append(bootstrap_note(report.bootstrap))
    return _one_label(report) if options.protocol != "per-group" else report


def _one_label(report: AgreementReport) -> AgreementReport:
    """κ where people gave a single label is undefined — value None, the note "undefined: one label (people
    gave only …)": κ is then 0 whatever the judge answers (its chance agreement equals its agreement), a
    "0.000 [0.000, 0.000]" that reads as "no better than chance" and says nothing. The one rule every surface
    shows (terminal, JSON, the report's pages); both sides constant is already undefined in the statistics.
    Not applied to the per-group protocol's figures (means of the groups' own, as the papers it follows define
    them)."""
    only = _one_human_label(report)
    if only is None:
        return report
    note = f"{ONE_LABEL} (people gave only {only})"
    for name in KAPPAS:
        e = report.metrics.get(name)
        if e is not None and e.value is not None:
            report.metrics[name] = e.model_copy(update={"value": None, "ci_low": None, "ci_high": None, "note": note})
    return report


def _one_human_label(report: AgreementReport) -> str | None:
    """The one label (or value) people gave on the compared items, when they gave one only; else None."""
    cat = report.categorical
    if cat is not None:
        used = [lab for lab, row in zip(cat.confusion.labels, cat.confusion.counts, strict=True) if sum(row)]
        return repr(used[0]) if len(used) == 1 else None
    human = report.value.human if report.value is not None else None
    if human is not None and human.count and human.min is not None and human.min == human.max:
        return f"{human.min:g}"
    return None


def _per_group(
    prep: Prepared, options: AgreementOptions, est: dict[str, Estimate], report: AgreementReport
) -> tuple[int, int]:
    """The per-group protocol's values in each group (listed in the report), a note on every figure some
    groups leave undefined, and (groups where the first figure is defined, groups skipped)."""
    assert prep.groups is not None
    everything = np.arange(prep.counts.items_compared, dtype=np.int64)
    per = resampling.group_values(pooled_headline(prep, options), everything, prep.groups)
    report.per_group = [
        GroupFigures(
            group=prep.group_names[g],
            n=size,
            metrics={name: Estimate(value=v, n=size, note=note) for name, (v, note) in figures.items()},
        )
        for g, (size, figures) in per.items()
    ]
    for name, e in est.items():
        defined = sum(1 for _, f in per.values() if f.get(name, (None, None))[0] is not None)
        if 0 < defined < len(per):
            extra = f"mean over {defined} of {len(per)} groups ({len(per) - defined} undefined, skipped)"
            e.note = f"{e.note}; {extra}" if e.note else extra
    first = "pearson" if prep.scale.kind == "value" else "accuracy"
    used = sum(1 for _, f in per.values() if f.get(first, (None, None))[0] is not None)
    report.notes.append(
        f"per-group protocol: each headline figure is the unweighted mean of its values in the {len(per)} "
        "groups (where defined; listed per group); the classification report, confusion, prevalence and "
        "ceiling are pooled"
    )
    return used, len(per) - used


def _describe(x: FloatArray) -> Describe:
    d = st.describe(x)
    return Describe(count=len(x), mean=d["mean"], median=d["median"], std=d["std"], min=d["min"], max=d["max"])


def _design(
    frame: Frame,
    prep: Prepared,
    scale: AgreementScale,
    options: AgreementOptions,
    notes: Sequence[str] = (),
    domain: set[str] | None = None,
) -> DesignReport | None:
    """The design-weighted figures of a frame whose rows say how they were selected (None otherwise)."""
    if "probability" not in frame.columns:
        return None
    codes = scale.kind == "categorical" and scale.labels is not None
    return design_report(
        frame,
        prep.items,
        prep.h if codes else prep.hv,
        prep.j_nom if codes else prep.jv,
        scale.labels if codes else None,
        options.bootstrap,
        options.seed,
        options.confidence,
        notes,
        domain,
    )


def _design_notes(report: AgreementReport, assumed: list[str]) -> None:
    """What the report says about how its items were selected."""
    if report.design is None:
        report.notes += assumed  # equal weights, but items selected and not labelled still need saying
        return
    report.notes.append(report.design.summary)
    prevalence = report.categorical.prevalence if report.categorical is not None else None
    if prevalence is not None:
        unweighted = (
            "its error rates were measured on the labelled items as if they were a random sample; the "
            "design-weighted prevalence[X] estimates each share from the weights instead"
        )
        prevalence.note = f"{prevalence.note}; {unweighted}" if prevalence.note else unweighted


def slice_rows(values: Sequence[Any]) -> list[tuple[Any, list[int]]]:
    """The rows of each value of a slice column, values sorted (as pandas' groupby sorts them; by their text
    when they cannot be compared), rows without a value last under None."""
    rows: dict[Any, list[int]] = {}
    absent: list[int] = []
    for r, value in enumerate(values):
        (absent if is_null(value) else rows.setdefault(value, [])).append(r)
    try:
        keys = sorted(rows)
    except TypeError:
        keys = sorted(rows, key=str)
    return [(k, rows[k]) for k in keys] + ([(None, absent)] if absent else [])


def _slices(
    frame: Frame,
    prep: Prepared,
    scale: AgreementScale,
    options: AgreementOptions,
    report: AgreementReport,
    gold: dict[str, float | None] | None = None,
) -> None:
    """A report per value of each slice column (rows without a value are a slice of their own); with a gold,
    each slice compares the judge with it (estimated once, over every item)."""
    plain: dict[str, Any] = {"slices": [], "threshold": None, "choose_threshold": None, "select_on": None}
    sub_options = options.model_copy(update=plain)
    for col in options.slices:
        if col not in frame.columns:
            raise DataError(f"slice column {col!r} not in the frame; columns are {list(frame.columns)}")
        parts: dict[str, AgreementReport] = {}
        for key, rows in slice_rows(frame[col]):
            sub = frame.take(rows)
            absent = key is None
            if absent:  # rows without a value are a slice of their own, named so (not "nan")
                report.notes.append(f"slice {col}: {len(sub)} row(s) have no value, listed as {MISSING_SLICE!r}")
            sub_prep = prepare(sub, scale, sub_options, gold)
            part = parts[MISSING_SLICE if absent else str(key)] = _report(sub_prep, sub_options)
            # A domain of the same design: the slice's items, with the whole sample's weights and resamples.
            domain = {t for v in sub["item"] if (t := label_text(v, {})) is not None}
            part.design = _design(frame, prep, scale, sub_options, domain=domain)
        report.slices[col] = parts
