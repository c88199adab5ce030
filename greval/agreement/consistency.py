"""compute_consistency: the judge's agreement with itself over two runs per item (the original and the swapped
order, two seeds …), compared like two annotators. Four steps: read the rows, pivot them to one pair of
answers per item, code the answers, compute the figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from greval.agreement import resampling
from greval.agreement import stats as st
from greval.agreement.models import (
    INVALID_LABEL,
    AgreementOptions,
    AgreementScale,
    ConfusionMatrix,
    ConsistencyCounts,
    ConsistencyReport,
    Estimate,
    GroupFigures,
)
from greval.agreement.prepare import few, label_text
from greval.agreement.resampling import Statistic, bootstrap_info, bootstrap_note, check_protocol, estimate
from greval.agreement.stats import IntArray, Val
from greval.dataset.frame import Frame
from greval.errors import DataError, option

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class RunRows:
    """The frame's rows, checked: each row's item, run, answer (canonical text; None = missing) and group."""

    scale: AgreementScale
    runs: list[str]
    items: list[str]
    row_runs: list[str]
    answers: list[str | None]
    groups: list[str | None] | None


@dataclass
class Pairs:
    """One pair of answers per item, coded: label i → i, an invalid answer → k (the second of two invalid
    answers → k + 1 when they count as disagreeing)."""

    items: int
    a: IntArray
    b: IntArray
    groups: IntArray | None
    group_names: list[str]
    repeated: int
    both_invalid: int
    one_invalid: int


def _check(frame: Frame, scale: AgreementScale, options: AgreementOptions) -> None:
    """A categorical scale, the columns pairing needs, groups for the per-group protocol."""
    if scale.kind != "categorical":
        raise DataError(
            f"{option('pair_by')} compares categorical answers (consistency, κ); "
            f"use {option('AgreementScale.kind')} categorical"
        )
    for col in ("item", "judge", "run"):
        if col not in frame.columns:
            raise DataError(f"missing column {col!r} for {option('pair_by')}")
    check_protocol(frame, options)


def _runs(frame: Frame, column: str) -> tuple[list[str], list[str]]:
    """(the two runs in order of appearance, each row's run)."""
    runs_raw = [label_text(v, {}) for v in frame["run"]]
    runs = list(dict.fromkeys(r for r in runs_raw if r is not None))
    if len(runs) != 2:
        raise DataError(f"{option('pair_by')} {column}: expected exactly two runs, found {len(runs)}: {runs[:6]}")
    unnamed = sum(r is None for r in runs_raw)
    if unnamed:
        raise DataError(f"{option('pair_by')} {column}: {unnamed} row(s) name no run")
    return runs, [str(r) for r in runs_raw]


def _read(frame: Frame, scale: AgreementScale, options: AgreementOptions, column: str) -> RunRows:
    """The rows, or a DataError naming what is wrong with them."""
    _check(frame, scale, options)
    missing = frozenset(options.missing_values)
    answers = [label_text(v, options.mapping, missing) for v in frame["judge"]]
    runs, row_runs = _runs(frame, column)
    labels = list(scale.labels) if scale.labels else sorted({a for a in answers if a is not None})
    if not labels:
        raise DataError(f"no judge answers to compare; pass {option('AgreementScale.labels')}")
    items = [label_text(v, {}) for v in frame["item"]]
    no_id = sum(i is None for i in items)
    if no_id:
        raise DataError(f"{no_id} row(s) have no item id")
    return RunRows(
        scale=scale.model_copy(update={"labels": labels}),
        runs=runs,
        items=[str(i) for i in items],
        row_runs=row_runs,
        answers=answers,
        groups=[label_text(v, {}) for v in frame["group"]] if "group" in frame.columns else None,
    )


def _pivot(rows: RunRows) -> tuple[list[str], dict[tuple[str, str], str | None], dict[str, str | None], int]:
    """(items in order of first appearance, {(item, run): answer}, each item's group, rows repeating an
    answer); an item with two different answers in one run, or without a group, is a DataError."""
    seen: dict[tuple[str, str], str | None] = {}
    conflict: list[str] = []
    repeated = 0
    group_of: dict[str, str | None] = {}
    for r, (item, run, ans) in enumerate(zip(rows.items, rows.row_runs, rows.answers, strict=True)):
        if item not in group_of:
            group_of[item] = rows.groups[r] if rows.groups is not None else None
        key = (item, run)
        if key in seen:
            if seen[key] != ans:
                conflict.append(item)
            repeated += 1
        seen[key] = ans
    if conflict:
        bad = list(dict.fromkeys(conflict))
        raise DataError(f"{len(bad)} item(s) have two different answers in one run ({few(bad)})")
    order = list(group_of)
    if rows.groups is not None and any(group_of[i] is None for i in order):
        raise DataError("some items have no group id")
    return order, seen, group_of, repeated


def _pairs(rows: RunRows, options: AgreementOptions) -> Pairs:
    """The items answered in both runs, their answers coded."""
    order, seen, group_of, repeated = _pivot(rows)
    labels = rows.scale.labels or []
    index = {lab: i for i, lab in enumerate(labels)}
    k = len(labels)
    first, second = rows.runs
    paired = [i for i in order if (i, first) in seen and (i, second) in seen]

    def codes(run: str) -> IntArray:
        return np.array([index.get(a, k) if (a := seen[(i, run)]) is not None else k for i in paired], dtype=np.int64)

    a, b = codes(first), codes(second)
    both = (a == k) & (b == k)
    one = (a == k) != (b == k)
    if options.invalid_pairs == "disagree":
        b = np.where(both, k + 1, b).astype(np.int64)  # a second, different "invalid": never matches the first
    group_names = sorted({g for g in group_of.values() if g is not None})
    gidx = {g: n for n, g in enumerate(group_names)}
    groups = np.array([gidx[str(group_of[i])] for i in paired], dtype=np.int64) if rows.groups is not None else None
    return Pairs(
        items=len(order),
        a=a,
        b=b,
        groups=groups,
        group_names=group_names,
        repeated=repeated,
        both_invalid=int(both.sum()),
        one_invalid=int(one.sum()),
    )


def _figures(
    pairs: Pairs, k: int, options: AgreementOptions
) -> tuple[dict[str, Estimate], list[GroupFigures], list[str]]:
    """Consistency and Cohen's κ with their CIs, the per-group values (per-group protocol) and its note."""
    ja, jb, groups = pairs.a, pairs.b, pairs.groups
    n_codes = k + 2

    def base(idx: IntArray, _inst: IntArray | None) -> dict[str, Val]:
        return {"consistency": st.accuracy(ja[idx], jb[idx]), "cohen_kappa": st.cohen_kappa(ja[idx], jb[idx], n_codes)}

    per_group = options.protocol == "per-group" and groups is not None
    fn: Statistic = resampling.per_group(base, groups) if per_group else base
    n = len(ja)
    everything = np.arange(n, dtype=np.int64)
    cis = resampling.cis(options, n, groups, fn)
    metrics = {name: estimate(v, n, cis.get(name)) for name, v in fn(everything, groups).items()}
    if not (per_group and groups is not None and n):
        return metrics, [], []
    per = resampling.group_values(base, everything, groups)
    listed = [
        GroupFigures(
            group=pairs.group_names[g],
            n=size,
            metrics={m: Estimate(value=v, n=size, note=w) for m, (v, w) in f.items()},
        )
        for g, (size, f) in per.items()
    ]
    return metrics, listed, ["per-group protocol: each figure is the unweighted mean of its values in the groups"]


def _notes(pairs: Pairs, options: AgreementOptions) -> list[str]:
    """What happened to the rows that are not one clean pair of answers."""
    notes: list[str] = []
    only_one = pairs.items - len(pairs.a)
    if only_one:
        notes.append(f"{only_one} item(s) appear in only one run: left out")
    if pairs.repeated:
        notes.append(f"{pairs.repeated} row(s) repeat an item's answer in the same run identically: counted once")
    if pairs.both_invalid:
        notes.append(
            f"{pairs.both_invalid} item(s) have an invalid answer in both runs: counted as "
            f"{'agreement' if options.invalid_pairs == 'agree' else 'disagreement'} "
            f"({option('AgreementOptions.invalid_pairs')})"
        )
    return notes


def compute_consistency(
    frame: Frame | pd.DataFrame, scale: AgreementScale, options: AgreementOptions | None = None, column: str = "run"
) -> ConsistencyReport:
    """Agreement of the judge with itself: the frame's `run` column names two runs per item (e.g. the
    original and the swapped order, or two seeds); pivoted to one row per item, the runs are compared
    like two annotators: consistency (share of items with the same answer) and Cohen's κ.

    An invalid answer (missing, or not a label) is one more category; two invalid answers for one item
    count as agreement or not by `options.invalid_pairs`. Items seen in only one run are counted, left out.
    """
    options = options or AgreementOptions()
    frame = Frame.of(frame)
    rows = _read(frame, scale, options, column)
    pairs = _pairs(rows, options)
    k = len(rows.scale.labels or [])
    n = len(pairs.a)
    metrics, per_group, notes = _figures(pairs, k, options)
    merged = np.minimum(np.vstack([pairs.a, pairs.b]), k).astype(np.int64)  # both "invalid" codes as one column
    cm = st.confusion(merged[0], merged[1], k + 1) if n else np.zeros((k + 1, k + 1), dtype=np.int64)
    label_names = [*(rows.scale.labels or []), INVALID_LABEL]
    notes += _notes(pairs, options)
    info = None
    if options.resamples > 0:
        grouped = pairs.groups is not None
        info = bootstrap_info(
            resampling.resample_unit(grouped, options), len(pairs.group_names) if grouped else n, options
        )
        notes.append(bootstrap_note(info))
    return ConsistencyReport(
        column=column,
        runs=rows.runs,
        scale=rows.scale,
        options=options,
        counts=ConsistencyCounts(
            rows=len(frame),
            items=pairs.items,
            items_paired=n,
            items_one_run_only=pairs.items - n,
            items_both_invalid=pairs.both_invalid,
            items_one_invalid=pairs.one_invalid,
        ),
        metrics=metrics,
        confusion=ConfusionMatrix(labels=label_names, judge_labels=label_names, counts=cm.tolist()),
        per_group=per_group,
        bootstrap=info,
        notes=notes,
    )
