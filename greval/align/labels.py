"""From the store to labelled units: people's labels on a spec, reduced to a consensus per unit exactly as the
agreement stage reduces them (``greval.agreement.from_store.store_frame`` joins labels and verdicts;
``greval.agreement.prepare`` takes the majority label or the mean value and checks every answer against the
spec's scale), or to the gold ``greval agreement --gold`` chooses (``greval.agreement.gold.choose_gold``: an
adjudicator's label, a label model's estimate, one annotator's), with each unit's record content, annotators,
comments and review-design probabilities."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from greval.agreement import compute_agreement
from greval.agreement.from_store import store_frame
from greval.agreement.gold.choose import choose_gold
from greval.agreement.models import AgreementOptions, AgreementScale, GoldChoice
from greval.agreement.prepare import prepare
from greval.align.models import Annotation, Ceiling, Unit
from greval.dataset.frame import Frame
from greval.dataset.records import Record
from greval.errors import UserError
from greval.spec import BaseSpec, Spec
from greval.store.store import Store, spec_keys


@dataclass
class LabelSet:
    """A spec version's labelled units and what running its candidates needs."""

    spec: Spec
    spec_key: str
    judge_key: str
    judge: str
    scale: AgreementScale
    units: tuple[Unit, ...]
    records: dict[str, Record]
    deps: list[BaseSpec] = field(default_factory=list)
    datasets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The gold each unit's label is (``GoldChoice.describe``), or None: people's consensus.
    gold: str | None = None
    #: People's agreement with each other as ``greval agreement`` reports it (every item two of them labelled,
    #: ties included), or None when no item has two labels.
    ceiling: Ceiling | None = None


def _text(v: Any) -> str | None:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return None
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def dependencies(store: Store, spec: Spec, spec_key: str) -> list[BaseSpec]:
    """The stored versions of the spec's dependencies its key was made with (their production versions first,
    then any other stored version); one line if none fits."""
    if not spec.depends_on:
        return []
    choices = [_versions_of(store, name) for name in spec.depends_on]
    for combo in itertools.islice(itertools.product(*choices), 256):
        deps = list(combo)
        if spec_keys([*deps, spec])[spec.name] == spec_key:
            return deps
    names = ", ".join(spec.depends_on)
    raise UserError(
        f"{spec.name} depends on {names}, and no stored version of them is the one this version was judged "
        f"with: run `greval run` with the current specs first"
    )


def _versions_of(store: Store, name: str) -> list[BaseSpec]:
    """A metric's stored versions, its production version first."""
    first = store.production_key(name)
    keys = [k for k in store.reader_keys(name, all_versions=True) if k != first]
    return [store.any_spec(k) for k in ([first] if first else []) + keys]


def human_ceiling(
    frame: pd.DataFrame, scale: AgreementScale, seed: int = 0, gold: GoldChoice | None = None
) -> Ceiling | None:
    """The human ceiling of ``greval agreement`` on this frame (one definition: the agreement stage's mean
    pairwise figure over every item two people labelled, disagreements and ties counted), with its n; with an
    adjudicated ``gold``, over the reviewers only (adjudicators settle, as ``greval agreement --gold`` says)."""

    if "annotator" not in frame or frame["annotator"].nunique() < 2:
        return None
    report = compute_agreement(frame, scale, AgreementOptions(seed=seed), gold)
    if report.ceiling is None:
        return None
    e = report.ceiling.human_pairwise_mean
    return Ceiling(metric=report.ceiling.metric, value=e.value, ci_low=e.ci_low, ci_high=e.ci_high, n=e.n, note=e.note)


def load_labels(
    store: Store,
    name: str,
    version: str | None,
    judge: str,
    datasets: Sequence[str] = (),
    gold: GoldChoice | None = None,
) -> LabelSet:
    """The labelled units of ``name`` (``version``: a spec hash, None: the latest) judged by ``judge`` (a judge
    key or label), each labelled with ``gold`` (None: people's consensus). One-line errors: no labels, no
    verdicts by that judge, answers outside the spec's scale, a gold the labels cannot give."""

    frame, scale, sel = store_frame(store, name, judge, "item", version, datasets=datasets)
    spec = store.spec(sel.spec_key)
    options = AgreementOptions()
    values = choose_gold(Frame.of(frame), scale, options, gold).values if gold is not None else None
    prep = prepare(frame, scale, options, values)
    hashes: dict[tuple[str, str], set[str]] = {}
    for row in store.human_labels(name, submitted=True):
        hashes.setdefault((row["record_id"], row["item_id"]), set()).add(row["record_hash"])
    judged = store.judged_hashes(sel.spec_key)
    by_item = {str(k): g for k, g in frame.groupby("item", sort=False)}
    codes = prep.h if scale.kind == "categorical" else prep.hv
    units: list[Unit] = []
    notes: list[str] = []
    for item, human in zip(prep.items, codes, strict=True):
        rows = by_item[item]
        first = rows.iloc[0]
        rid, iid = str(first["record_id"]), str(first["item_id"])
        found = sorted(hashes.get((rid, iid), set()))
        chosen = next((h for h in found if h in judged), found[0] if found else "")
        if len(found) > 1:
            notes.append(f"{item}: labels on {len(found)} contents of this record; the judged one is used")
        probability = first["probability"] if "probability" in rows else None
        units.append(
            Unit(
                key=item,
                record_id=rid,
                record_hash=chosen,
                item_id=iid,
                human=float(human),
                annotations=tuple(
                    Annotation(annotator=str(r["annotator"]), answer=_text(r["human"]), comment=_text(r["comment"]))
                    for _, r in rows.iterrows()
                ),
                probability=None if probability is None or pd.isna(probability) else float(probability),
                stratum=_text(first["stratum"]) if "stratum" in rows else None,
            )
        )
    left_out = prep.counts.items - len(prep.items)
    if left_out:
        why = "people's answers tie" if gold is None else f"its gold ({gold.describe()}) is tied or missing"
        notes.append(f"{left_out} labelled unit(s) left out: no human answer, or {why}")
    if gold is not None:
        notes.append(f"each unit's label is the gold ({gold.describe()}), not people's consensus")
    stored = {r.hash: r for r in store.records(sorted({u.record_hash for u in units}))}
    records = {
        u.record_hash: Record(id=u.record_id, hash=u.record_hash, data=stored[u.record_hash].data) for u in units
    }
    return LabelSet(
        spec=spec,
        spec_key=sel.spec_key,
        judge_key=sel.judge_key,
        judge=sel.judge,
        scale=scale,
        units=tuple(units),
        records=records,
        deps=dependencies(store, spec, sel.spec_key),
        datasets=list(sel.datasets),
        notes=notes,
        ceiling=human_ceiling(frame, scale, gold=gold),
        gold=gold.describe() if gold is not None else None,
    )


__all__ = ["LabelSet", "dependencies", "load_labels"]
