"""From the store to the agreement stage's boundary: judge verdicts joined with human labels, exactly.

Humans and the judge meet on (record id, record content hash, item id) for one metric: the judge's
verdicts are cached by content, and listed once per record id that has that content, so two records with
identical content and different ids are two items here too. Every human answer becomes one row; an item a
human labelled but the judge never answered (or answered with an error) keeps its row with the judge
missing, so the invalid-answer policy decides what happens to it — nothing is dropped from one side only.

Human labels come from one or more datasets (Argilla datasets, or ``import``): all by default, unless the
same annotator answered the same item in several of them (a blind copy and a copy with suggestions) — then
the user chooses, because counting one person twice would fake a human-vs-human ceiling.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Literal

import pandas as pd
from pydantic import BaseModel

from greval.agreement.agreement import compute_agreement
from greval.agreement.design import SELECTION_ATTR
from greval.agreement.gold.choose import ANSWERED_AT
from greval.agreement.models import (
    GROUPS_ARE_RECORDS,
    AgreementOptions,
    AgreementReport,
    AgreementScale,
    CategoricalReport,
)
from greval.agreement.prepare import CONFIDENCE_COLUMN
from greval.agreement.scale import agreement_scale
from greval.errors import UserError, option
from greval.spec import CategoricalScale, EachTarget, Spec
from greval.store.results import aggregate_items, rule_label
from greval.store.store import Store


class StoreSelection(BaseModel):
    """Which verdicts the frame was built from (shown in reports)."""

    spec: str
    spec_hash: str
    spec_key: str
    production: bool = True  # the metric's production version (else one named NAME@HASH)
    judge_key: str
    judge: str
    level: str
    judged_items: int
    labelled_items: int
    joined_rows: int
    datasets: list[str] = []


def _judge_key(store: Store, spec_key: str, judge: str | None) -> tuple[str, str]:
    rows = store.verdict_judges(spec_key)
    if not rows:
        raise UserError("no judge verdicts for this metric in the store; run `greval run` first")
    if judge is None:
        return rows[0]["judge_key"], rows[0]["label"]
    for r in rows:
        if judge in (r["judge_key"], r["label"]):
            return r["judge_key"], r["label"]
    raise UserError(f"no verdicts by judge {judge!r}; judges here: {', '.join(r['label'] for r in rows)}")


def store_frame(
    store: Store,
    spec_name: str,
    judge: str | None = None,
    level: Literal["item", "record"] = "item",
    version: str | None = None,
    datasets: Sequence[str] = (),
    records: Collection[tuple[str, str]] | None = None,
) -> tuple[pd.DataFrame, AgreementScale, StoreSelection]:
    """The long (item, annotator) frame for one metric, its scale, and what was selected.

    Columns: item, judge, human, annotator, group (the record, so bootstrap resamples whole records for
    chunk / triple metrics), record_id, item_id, reason, comment, judge_confidence (the verdict's confidence:
    ``UnitVerdict.best_confidence``, empty when it has none), ``system`` when records carry one, and
    ``answered_at`` (when each person answered, epoch seconds) when some answers have a time.
    ``level="record"`` compares many-metrics on the aggregated record score instead (value scale 0–1).
    ``version`` picks a spec version by hash (default: the metric's production version). ``datasets``: the
    human-label datasets to use (default: every one, see the module doc). ``records``: the (record id, content
    hash) pairs to keep (a run's or a system's records, one side of a report's comparison); default every
    labelled record.
    """
    chosen, spec = store.reader_spec(f"{spec_name}@{version}" if version else spec_name)
    spec_key = chosen.spec_key
    judge_key, judge_label = _judge_key(store, spec_key, judge)
    judged = pd.DataFrame(store.verdicts_by_record_id(spec_key, judge_key))
    humans = _human_rows(store, spec.name, datasets)
    if records is not None:
        keep = set(records)
        pairs = zip(humans["record_id"].astype(str), humans["record_hash"].astype(str), strict=True)
        humans = humans[[p in keep for p in pairs]].reset_index(drop=True)
    if judged.empty:
        judged = pd.DataFrame(columns=["record_hash", "record_id", "item_id", "status", "label", "value", "reason"])
    judged = judged[judged["item_id"] != ""] if spec.each else judged
    merged = _joined(store, spec, spec_key, judge_key, humans, judged)
    cols = ["item", "judge", "human", "annotator", "group", "record_id", "item_id", "reason", "comment"]
    cols += [CONFIDENCE_COLUMN]
    cols += ["system"] if "system" in merged else []
    cols += [ANSWERED_AT] if _answer_times(store, spec.name, merged) else []
    selected = _design_columns(store, spec.name, merged)
    if selected is not None:
        cols += ["stratum", "probability", "selected"]
    frame = merged[cols].reset_index(drop=True)
    frame.attrs[GROUPS_ARE_RECORDS] = True  # the bootstrap resamples records: its notes say so
    if selected is not None:
        frame.attrs[SELECTION_ATTR] = selected
    scale = agreement_scale(spec)
    if level == "record" and spec.each:
        frame, scale = _record_level(spec, frame)
    selection = StoreSelection(
        spec=spec.name,
        spec_hash=spec.hash,
        spec_key=spec_key,
        production=chosen.production,
        judge_key=judge_key,
        judge=judge_label,
        level=level if spec.each else "record",
        judged_items=int((judged["status"] == "ok").sum()),
        labelled_items=int(humans[["record_id", "record_hash", "item_id"]].drop_duplicates().shape[0]),
        joined_rows=len(frame),
        datasets=sorted(humans["dataset"].unique()),
    )
    return frame, scale, selection


def _joined(
    store: Store, spec: Spec, spec_key: str, judge_key: str, humans: pd.DataFrame, judged: pd.DataFrame
) -> pd.DataFrame:
    """Every human answer with the judge's verdict on its item (missing where the judge has no ok verdict),
    its confidence, the item and group ids, and the record's system when records carry one."""
    merged = humans.merge(judged, on=["record_id", "record_hash", "item_id"], how="left")
    ok = merged["status"] == "ok"
    if isinstance(spec.scale, CategoricalScale):
        merged["judge"] = merged["label"].where(ok, None)
        merged["human"] = merged["h_label"]
    else:
        merged["judge"] = merged["value"].where(ok, None)
        merged["human"] = merged["h_value"]
    # The judge's confidence in an ok verdict (the agreement rate of several samples, else the token
    # confidence of log-probabilities, else None): UnitVerdict.best_confidence, the one rule every stage uses.
    confidence = {(u.record_hash, u.item_id): u.best_confidence for u in store.unit_verdicts(spec_key, judge_key)}
    merged[CONFIDENCE_COLUMN] = [
        confidence.get((str(h), str(i))) if good else None
        for h, i, good in zip(merged["record_hash"], merged["item_id"], ok, strict=True)
    ]
    merged[CONFIDENCE_COLUMN] = pd.to_numeric(merged[CONFIDENCE_COLUMN], errors="coerce")
    merged["item"] = merged["record_id"].astype(str) + merged["item_id"].map(lambda i: f"/{i}" if i else "")
    merged["group"] = merged["record_id"].astype(str)
    systems = {h: data.get("system") for h, data in store.labelled_record_data(spec.name).items()}
    if any(v is not None for v in systems.values()):
        merged["system"] = merged["record_hash"].map(systems).astype("string")
    return merged


def _answer_times(store: Store, spec_name: str, merged: pd.DataFrame) -> bool:
    """When each person answered (the ``answered_at`` column: labels per hour), when any answer has a time."""
    times = store.answer_times(spec_name)
    if not times:
        return False
    keys = zip(
        merged["dataset"],
        merged["record_id"],
        merged["record_hash"],
        merged["item_id"],
        merged["annotator"],
        strict=True,
    )
    merged[ANSWERED_AT] = [times.get((str(d), str(r), str(h), str(i), str(a))) for d, r, h, i, a in keys]
    return True


def _design_columns(store: Store, spec_name: str, merged: pd.DataFrame) -> dict[str, tuple[int, float]] | None:
    """How each labelled item was selected (stratum, inclusion probability, units its stratum selected), as
    columns of `merged`: agreement weights a non-uniform sample back (1/π). Returns each stratum's (units
    selected, probability), or None when no push recorded a selection."""
    chosen = store.dataset_selections(spec_name)
    if not chosen:
        return None
    how = [
        chosen.get(str(d), {}).get((str(h), str(i)))
        for d, h, i in zip(merged["dataset"], merged["record_hash"], merged["item_id"], strict=True)
    ]
    several = len(chosen) > 1  # one design per dataset: keep their strata apart
    merged["stratum"] = [
        (f"{d}:{x[0]}" if several else x[0]) if x else None for d, x in zip(merged["dataset"], how, strict=True)
    ]
    merged["probability"] = [x[1] if x else float("nan") for x in how]
    # How many units each stratum selected, labelled or not: design_report corrects for the unlabelled.
    selected = {
        (f"{d}:{s}" if several else s): n
        for d, units in chosen.items()
        for s, n in Counter(stratum for stratum, _ in units.values()).items()
    }
    merged["selected"] = [selected.get(s) if s is not None else None for s in merged["stratum"]]
    probability = {(f"{d}:{s}" if several else s): p for d, units in chosen.items() for s, p in units.values()}
    return {s: (n, probability[s]) for s, n in selected.items()}


def _human_rows(store: Store, spec_name: str, datasets: Sequence[str]) -> pd.DataFrame:
    """Submitted human answers of the chosen datasets; a clear error when the choice is needed or wrong."""
    humans = pd.DataFrame(
        store.human_labels(spec_name, submitted=True),
        columns=["dataset", "record_id", "record_hash", "item_id", "annotator", "label", "value", "comment"],
    ).rename(columns={"label": "h_label", "value": "h_value"})
    if humans.empty:
        raise UserError(
            f"no human labels for {spec_name!r} in the store: pull them with `greval annotate pull` "
            "or load them with `greval annotate import-labels`"
        )
    have = sorted(humans["dataset"].unique())
    if datasets:
        unknown = sorted(set(datasets) - set(have))
        if unknown:
            raise UserError(
                f"no human labels of {spec_name!r} from dataset(s) {', '.join(unknown)}; have: {', '.join(have)}"
            )
        humans = humans[humans["dataset"].isin(list(datasets))]
    key = ["record_id", "record_hash", "item_id", "annotator"]
    twice = humans[humans.duplicated(key, keep=False)]
    if not twice.empty:
        where = sorted(twice["dataset"].unique())
        raise UserError(
            f"{twice['annotator'].nunique()} annotator(s) answered the same {spec_name!r} items in several datasets "
            f"({', '.join(where)}); choose which to compare with {option('datasets')} NAME (repeatable)"
        )
    return humans.reset_index(drop=True)


def _record_level(spec: Spec, frame: pd.DataFrame) -> tuple[pd.DataFrame, AgreementScale]:
    """Each annotator's and the judge's record score, aggregated the way the spec aggregates items; with a
    ``target.record_label`` rule, their record labels by it (each from the items that annotator labelled)."""
    rows = []
    rule = spec.target.record_label if isinstance(spec.target, EachTarget) else None
    for (record, annotator), grp in frame.groupby(["record_id", "annotator"], sort=False):
        as_labels = isinstance(spec.scale, CategoricalScale)

        def score(col: str, g: pd.DataFrame = grp, labels: bool = as_labels) -> float | str | None:
            vals = [None if pd.isna(x) else x for x in g[col]]
            if rule is not None:
                return rule_label(spec, [str(v) if v is not None else None for v in vals])
            if labels:
                return aggregate_items(spec, [str(v) if v is not None else None for v in vals], [])
            return aggregate_items(spec, [], [float(v) if v is not None else None for v in vals])

        rows.append(
            {
                "item": str(record),
                "judge": score("judge"),
                "human": score("human"),
                "annotator": annotator,
                "group": str(record),
                "record_id": record,
                "item_id": "",
            }
        )
    out = pd.DataFrame(rows)
    if rule is not None:
        return out, AgreementScale(kind="categorical", labels=[rule.then, rule.otherwise])
    lo, hi = (0.0, 1.0) if isinstance(spec.scale, CategoricalScale) else (spec.scale.min, spec.scale.max)
    return out, AgreementScale(kind="value", min=lo, max=hi)


# --------------------------------------------------------------------------------------------- prevalence
# THE prevalence of a store's metric, the one definition every surface shows (`greval agreement --store`, the
# report's index and agreement page, their JSON): the judge's label shares over EVERY judged item (labelled or
# not: Prevalence.observed, n_judged), people's shares over the labelled items (Prevalence.human, n_labelled),
# and the correction from the judge's error rates measured on the labelled items.


def every_verdict_frame(
    frame: pd.DataFrame, verdicts: Iterable[tuple[str, str, object]], system_of: Mapping[str, object]
) -> pd.DataFrame:
    """The labelled frame (``store_frame``'s) completed with every other ok verdict — ``verdicts``: (record id,
    item id, label), already those of the frame's version and judge — as rows without a human label (in item
    order), with each row's system (``system_of``: record id → system)."""
    frame = frame.drop(columns=[c for c in ("stratum", "probability", "selected") if c in frame.columns])
    frame.attrs.clear()
    seen = set(frame["item"])
    extra = []
    for record_id, item_id, label in verdicts:
        item = str(record_id) + (f"/{item_id}" if item_id else "")
        if item not in seen:
            seen.add(item)
            extra.append({"item": item, "judge": label, "human": None, "group": str(record_id)})
    extra.sort(key=lambda r: str(r["item"]))  # one frame, one bootstrap draw, whoever lists the verdicts
    full = pd.concat([frame, pd.DataFrame(extra, columns=["item", "judge", "human", "group"])], ignore_index=True)
    full["record_id"] = full["group"]
    full["system"] = full["group"].map(system_of).astype("string")
    return full


def judged_prevalence(full: pd.DataFrame, scale: AgreementScale, options: AgreementOptions) -> AgreementReport:
    """The agreement report of ``every_verdict_frame``'s frame, per system when records name one: only its
    prevalence (whole and per system) is read — the other figures stay the labelled frame's."""
    slices = ["system"] if bool(full["system"].notna().any()) else []
    return compute_agreement(full, scale, options.model_copy(update={"slices": slices, "protocol": "pooled"}))


def with_judged_prevalence(rep: AgreementReport, judged: AgreementReport) -> AgreementReport:
    """``rep`` (the labelled frame's report) showing ``judged``'s prevalence, whole and per system."""
    if rep.categorical is None or judged.categorical is None:
        return rep
    cat = rep.categorical.model_copy(update={"prevalence": judged.categorical.prevalence})
    slices = dict(rep.slices)
    if "system" in slices:
        by = judged.slices.get("system", {})
        slices["system"] = {
            name: sub.model_copy(update={"categorical": _prevalence_of(sub.categorical, by.get(name))})
            for name, sub in slices["system"].items()
        }
    return rep.model_copy(update={"categorical": cat, "slices": slices})


def _prevalence_of(cat: CategoricalReport | None, judged: AgreementReport | None) -> CategoricalReport | None:
    if cat is None:
        return None
    prev = judged.categorical.prevalence if judged is not None and judged.categorical is not None else None
    return cat.model_copy(update={"prevalence": prev})


def judged_frame(store: Store, frame: pd.DataFrame, sel: StoreSelection) -> pd.DataFrame:
    """``store_frame``'s frame completed with every other ok verdict of ``sel``'s version and judge in the store
    (``every_verdict_frame``), each row's system its record's ``system`` field (as ``store_frame`` reads it)."""
    _, spec = store.reader_spec(f"{sel.spec}@{sel.spec_hash}")
    rows = [v for v in store.verdicts_by_record_id(sel.spec_key, sel.judge_key) if v["status"] == "ok"]
    rows = [v for v in rows if (v["item_id"] != "") == (spec.each is not None)]
    systems = {r.id: r.data.get("system") for r in store.records({v["record_hash"] for v in rows})}
    return every_verdict_frame(frame, [(v["record_id"], v["item_id"], v["label"]) for v in rows], systems)
