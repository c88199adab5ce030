"""Each reviewer against the gold, and the judge against the same gold on the same items: the table that says
whether the judge agrees with the gold as well as a given reviewer does. One row per person (their figures,
the judge's on their items, and judge − person from one paired bootstrap), then the judge's row over every
compared item (the headline's figures, computed the same way); each person's confusion against the gold, what
a label model learned of them, and their labels per hour. Figures come from greval.agreement.stats and CIs
from greval.agreement.bootstrap, resampling the compared items (or whole groups / records) as the stage does."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from greval.agreement import bootstrap as bs
from greval.agreement import resampling
from greval.agreement import stats as st
from greval.agreement.gold.choose import Chosen
from greval.agreement.headline import categorical_setup
from greval.agreement.models import (
    AgreementOptions,
    AgreementScale,
    ConfusionMatrix,
    Estimate,
    GoldCounts,
    PairEstimate,
    ReviewerRow,
    ReviewersReport,
)
from greval.agreement.prepare import Prepared
from greval.agreement.resampling import estimate
from greval.agreement.stats import BatchVal, FloatArray, IntArray

BREAK = 30 * 60
"""Seconds between two answers above which the annotator took a break (not counted as time spent labelling)."""

Figures = Callable[[bs.Batch], dict[str, BatchVal]]
"""A rater's figures against the gold over a batch of resamples."""


def figure_names(scale: AgreementScale) -> list[str]:
    """The figures of each row: agreement and κ (quadratic κ too on ordered labels); on values, r, exact, MAE."""
    if scale.kind == "value":
        return ["pearson", "exact_agreement", "mae"]
    return ["accuracy", "cohen_kappa"] + (["quadratic_kappa"] if scale.ordered else [])


def reviewers_report(
    prep: Prepared, chosen: Chosen, options: AgreementOptions, metric: str, pairs: list[PairEstimate]
) -> ReviewersReport:
    """The reviewers table of a report whose consensus is ``chosen``'s gold (``prep`` holds people only: no
    adjudicator); ``metric``: the ceiling's pairwise figure, on which the judge is set against each person."""
    names = figure_names(prep.scale)
    pooled = options.model_copy(update={"protocol": "pooled", "pos_label": None})
    people = [a for a in chosen.answers.annotators if a not in chosen.adjudicators]
    rows = [_person_row(prep, chosen, who, names, metric, pooled) for who in people]
    if prep.has_judge:  # a judge known by its scores alone has no labels to set beside people's
        rows.append(_judge_row(prep, names, pooled))
    gold = chosen.gold
    codes = gold.codes
    return ReviewersReport(
        gold=gold.choice,
        metric=metric,
        figures=names,
        labels=gold.labels,
        counts=GoldCounts(
            items=len(chosen.answers.by_item),
            with_gold=sum(1 for c in codes.values() if c is not None),
            tied=sum(1 for c in codes.values() if c is None),
            adjudicated=sum(1 for g in gold.items.values() if g.source == "adjudicator" and g.label is not None),
            without_gold=len(chosen.answers.by_item) - len(codes),
        ),
        rows=rows,
        pairs=pairs,
        gold_labels=list(gold.items.values()),
        notes=_notes(chosen, options),
    )


def _notes(chosen: Chosen, options: AgreementOptions) -> list[str]:
    choice = chosen.gold.choice
    notes = []
    if choice.method == "annotator":
        notes.append(f"{choice.annotator}'s labels are the gold: their own row agrees with itself")
    else:
        notes.append(
            "each reviewer's own labels are part of the gold they are compared with (it is estimated from "
            "everyone's answers), which flatters them against the judge; an adjudicator's label is not"
        )
    if chosen.adjudicators:
        notes.append(
            f"adjudicators ({', '.join(sorted(chosen.adjudicators))}) are the gold where they answered: not "
            "reviewers here, nor in the ceiling"
        )
    if options.protocol == "per-group":
        notes.append("the reviewers' figures are pooled over the items (the headline averages the groups)")
    return notes


def _person_row(
    prep: Prepared, chosen: Chosen, who: str, names: list[str], metric: str, options: AgreementOptions
) -> ReviewerRow:
    """One person against the gold on the compared items they labelled, the judge beside them on those items."""
    by_item = chosen.answers.by_item
    idx = np.array([r for r, i in enumerate(prep.items) if who in by_item.get(i, {})], dtype=np.int64)
    codes = np.array([by_item[prep.items[r]][who] for r in idx], dtype=np.int64)
    person = _person(prep, idx, codes, chosen, options)
    judge = _judge(prep, idx, options) if prep.has_judge else None

    def paired(b: bs.Batch) -> dict[str, BatchVal]:
        p = person(b)
        out = {f"person|{n}": p[n] for n in names}
        if judge is not None:
            j = judge(b)
            out |= {f"judge|{n}": j[n] for n in names}
            out |= {f"diff|{n}": (j[n][0] - p[n][0], j[n][1]) for n in names}
        return out

    est = _estimates(paired, prep, idx, options)
    diff = {n: est[f"diff|{n}"] for n in names if f"diff|{n}" in est}
    gold = [chosen.gold.codes[prep.items[r]] for r in idx]
    return ReviewerRow(
        name=who,
        role="annotator",
        n=len(idx),
        answers=chosen.given.get(who, 0),
        figures={n: est[f"person|{n}"] for n in names},
        judge={n: est[f"judge|{n}"] for n in names if f"judge|{n}" in est},
        difference=diff,
        judge_vs=_judge_vs(diff.get(metric)),
        confusion=_confusion(chosen.gold.labels, gold, codes),
        model_confusion=chosen.gold.model_confusion.get(who),
        competence=chosen.gold.competence.get(who),
        labels_per_hour=labels_per_hour(chosen.times[who]) if who in chosen.times else None,
    )


def _judge_row(prep: Prepared, names: list[str], options: AgreementOptions) -> ReviewerRow:
    """The judge against the gold on every compared item (the headline's figures)."""
    idx = np.arange(len(prep.items), dtype=np.int64)
    est = _estimates(_judge(prep, idx, options), prep, idx, options)
    return ReviewerRow(name="judge", role="judge", n=len(idx), figures={n: est[n] for n in names})


def _estimates(fn: Figures, prep: Prepared, idx: IntArray, options: AgreementOptions) -> dict[str, Estimate]:
    """Every figure of ``fn`` over the items ``idx``, with CIs from resamples of them (or of their groups)."""
    groups = None if prep.groups is None else prep.groups[idx]
    sampler = bs.Resampler(len(idx), groups, 0, options.seed)
    point = fn(bs.Batch(sampler, np.arange(sampler.m, dtype=np.int64)[None, :]))

    def values(b: bs.Batch) -> dict[str, FloatArray]:
        return {name: v for name, (v, _) in fn(b).items()}

    cis = resampling.cis(options, len(idx), groups, None, values, protocol=False)
    return {name: estimate(st.at(bv), len(idx), cis.get(name)) for name, bv in point.items()}


def _judge(prep: Prepared, idx: IntArray, options: AgreementOptions) -> Figures:
    """The judge's figures against the gold on ``idx`` (invalid answers as the headline counts them)."""
    if prep.scale.kind == "value":
        return _values(prep.hv[idx], prep.jv[idx])
    return _categorical(prep, prep.h[idx], prep.j_nom[idx], prep.j_ord[idx], prep.invalid[idx], options)


def _person(prep: Prepared, idx: IntArray, codes: IntArray, chosen: Chosen, options: AgreementOptions) -> Figures:
    """A person's figures against the gold on ``idx`` (their label codes ``codes``)."""
    if prep.scale.kind == "value":
        labels = chosen.answers.labels
        return _values(prep.hv[idx], np.array([float(labels[c]) for c in codes], dtype=float))
    return _categorical(prep, prep.h[idx], codes, codes, np.zeros(len(idx), dtype=np.bool_), options)


def _categorical(
    prep: Prepared, h: IntArray, j_nom: IntArray, j_ord: IntArray, invalid: st.BoolArray, options: AgreementOptions
) -> Figures:
    k, _, _, invalid_code = categorical_setup(prep.scale, options)
    (nom, n_nom), (ordc, n_ord) = st.categorical_cells(h, j_nom, j_ord, invalid, k)
    ordered = prep.scale.ordered

    def fn(b: bs.Batch) -> dict[str, BatchVal]:
        ord_tally = b.tally(ordc, n_ord) if ordered else None
        return st.categorical_from_tallies(
            b.tally(nom, n_nom), ord_tally, k, ordered, options.alpha_max_values, None, invalid_code
        )

    return fn


def _values(h: FloatArray, j: FloatArray) -> Figures:
    features = st.value_features(h, j)

    def fn(b: bs.Batch) -> dict[str, BatchVal]:
        return st.moment_metrics(b.sums(features), b.constant(j), b.constant(h))

    return fn


def _judge_vs(diff: Estimate | None) -> str | None:
    """better / as well / worse: whether the CI of judge − person excludes 0 (None without a CI)."""
    if diff is None or diff.ci_low is None or diff.ci_high is None:
        return None
    return "better" if diff.ci_low > 0 else "worse" if diff.ci_high < 0 else "as well"


def _confusion(labels: list[str], gold: list[int | None], codes: IntArray) -> ConfusionMatrix:
    k = len(labels)
    counts = np.zeros((k, k), dtype=np.int64)
    for g, c in zip(gold, codes, strict=True):
        if g is not None:
            counts[g, int(c)] += 1
    return ConfusionMatrix(labels=labels, judge_labels=labels, counts=counts.tolist())


def labels_per_hour(times: list[float]) -> Estimate:
    """Answers per hour of work: the gaps between consecutive answers up to ``BREAK`` are time spent on the
    next answer; longer gaps are breaks, not counted. n: the answers with a time."""
    gaps = np.diff(np.sort(np.asarray(times, dtype=float)))
    work = gaps[gaps <= BREAK]
    if not len(work) or float(work.sum()) <= 0:
        return Estimate(value=None, n=len(times), note=f"needs two answers less than {BREAK // 60} min apart")
    hours = float(work.sum()) / 3600
    return Estimate(
        value=len(work) / hours,
        n=len(times),
        note=f"{len(work)} answers over {hours:.2f} h of work (gaps over {BREAK // 60} min are breaks)",
    )
