"""align and the ledger of spent labels (greval.store.ledger): which labelled records a new decision may test on,
and the record of each decision taken on a test part — numbered per metric, with every label's use.

A decision's test part is drawn from *fresh* records: none an earlier decision read as its test part, none the
version in use (the production version, and the version aligned) shows as a few-shot example. Each decision
taken is counted: after k decisions on one metric's labels, the chance that some one of them adopted a version
that is no better is 1 - (1 - r)^k, at the per-decision rate r measured below.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from greval.align.core import Outcome
from greval.align.labels import LabelSet
from greval.align.models import AlignOptions, AlignResult, LedgerNote, Unit
from greval.spec import Spec
from greval.store.ledger import DecisionRow, LabelUse
from greval.store.store import Store, spec_keys
from greval.store.versions import Promotion

FALSE_ADOPTION_RATE = 0.015
"""The per-decision rate of a false adoption, as measured: tests/align/test_core.py's null test ran align 200
times on seeded answers no candidate can improve (100 labelled records, three rounds) and the decision adopted 3
(1.5 %; docs/align.md, "Is the rule honest?"). With 50 records it was 7 of 200 (3.5 %): a small test part
makes the rate higher, so the family-wise figure is a floor for small label sets."""


def family_wise(k: int, rate: float = FALSE_ADOPTION_RATE) -> float:
    """The chance that at least one of ``k`` decisions adopted falsely, each at ``rate``: 1 - (1 - r)^k."""
    return 1.0 - (1.0 - rate) ** k


def decision_id(labels: LabelSet, judge_key: str, optimizer_key: str, options: AlignOptions) -> str:
    """The same run (spec version, judges, options, labelled units) has the same id: a repeated or resumed run
    is the decision it repeats, never a new one counted again."""
    units = sorted((u.key, u.record_hash, u.human) for u in labels.units)
    body = [labels.spec_key, judge_key, optimizer_key, options.model_dump(mode="json"), units]
    if labels.gold is not None:  # the same labels under another gold are another decision (ids before: kept)
        body.append(labels.gold)
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]


class Fresh:
    """The records a decision may test on: what the ledger holds for this metric (or, for a repeat, what it
    held when the decision was first taken)."""

    def __init__(self, store: Store, labels: LabelSet, did: str, options: AlignOptions) -> None:
        self.labels, self.did, self.options = labels, did, options
        labelled = {u.record_hash for u in labels.units}
        self.previous = store.decision(did)
        if self.previous is not None:  # a repeat: the same exclusions as then
            tested = set(self.previous.evidence.get("tested_before", [])) & labelled
            shown = set(self.previous.evidence.get("examples", [])) & labelled
        else:
            tested = store.tested_hashes(labels.spec.name) & labelled
            prod = store.production_key(labels.spec.name)
            versions = [labels.spec.hash] + ([store.any_spec(prod).hash] if prod else [])
            shown = store.example_hashes(labels.spec.name, versions) & labelled
        self.tested, self.shown = tested, shown
        self.labelled = labelled
        self.count = store.decision_count(labels.spec.name)

    @property
    def used(self) -> frozenset[str]:
        """The records the test part may not hold (none with ``reuse_test``)."""
        return frozenset() if self.options.reuse_test else frozenset(self.tested | self.shown)

    def note(self, decisions: int, number: int | None = None, *, repeat: bool = False) -> LedgerNote:
        """The ledger's figures with ``decisions`` taken on the metric's labels (k)."""
        k = decisions
        return LedgerNote(
            labelled=len(self.labelled),
            fresh=len(self.labelled - (self.tested | self.shown)),
            tested_before=len(self.tested),
            examples=len(self.shown),
            reuse_test=self.options.reuse_test,
            number=number,
            decisions=k,
            rate=FALSE_ADOPTION_RATE,
            family_wise=family_wise(k),
            repeat=repeat,
            decision_id=self.did if number is not None else None,
        )


def _uses(units: Sequence[Unit], outcome: Outcome, from_key: str, to_key: str | None) -> list[LabelUse]:
    by_key = {u.key: u for u in units}
    out = [
        LabelUse(record_id=u.record_id, record_hash=u.record_hash, item_id=u.item_id, use="test", spec_key=from_key)
        for u in (by_key[k] for k in outcome.split.test_units)
    ]
    out += [
        LabelUse(
            record_id=u.record_id, record_hash=u.record_hash, item_id=u.item_id, use="search", fold=f, spec_key=from_key
        )
        for k, f in outcome.split.fold_of.items()
        for u in (by_key[k],)
    ]
    if to_key is not None:
        out += [
            LabelUse(
                record_id=u.record_id, record_hash=u.record_hash, item_id=u.item_id, use="example", spec_key=to_key
            )
            for u in (by_key[e.unit] for e in outcome.examples)
        ]
    return out


def record(store: Store, fresh: Fresh, outcome: Outcome) -> LedgerNote:
    """Record the decision when it read the test part (a winner was judged there); its note either way. A run
    the ledger holds already (the same id) is said to be that decision, not counted again."""
    labels, d = fresh.labels, outcome.decision
    if d.difference is None:  # the test part was not read: no decision taken on it
        return fresh.note(fresh.count)
    final: Spec | None = outcome.final
    to_key = spec_keys([*labels.deps, final])[final.name] if final is not None else None
    row = DecisionRow(
        spec_name=labels.spec.name,
        decision_id=fresh.did,
        from_key=labels.spec_key,
        to_key=to_key,
        adopted=d.adopted,
        objective=d.objective,
        gain=d.difference.gain,
        ci_low=d.difference.ci_low,
        ci_high=d.difference.ci_high,
        seed=fresh.options.seed,
        reuse_test=fresh.options.reuse_test,
        evidence={"tested_before": sorted(fresh.tested), "examples": sorted(fresh.shown), "message": d.message},
    )
    done = store.record_decision(row, _uses(labels.units, outcome, labels.spec_key, to_key))
    count = store.decision_count(labels.spec.name)
    return fresh.note(count, done.number, repeat=fresh.previous is not None)


def describe(note: LedgerNote, *, planned: bool = False) -> list[str]:
    """The ledger's lines, as the terminal, the page and the plan say them (one wording, one figure)."""
    used = []
    if note.tested_before:
        used.append(f"{note.tested_before} an earlier decision's test part")
    if note.examples:
        used.append(f"{note.examples} few-shot examples of the version in use")
    why = f" ({'; '.join(used)})" if used else ""
    lines = [f"fresh labels: {note.fresh} of {note.labelled} labelled records{why}"]
    if note.reuse_test:
        lines.append("reuse_test: the test part was drawn from every labelled record, used ones included")
    fw = f"{note.family_wise:.1%} (1 - (1 - {note.rate:g})^{note.decisions}; r measured by the null test)"
    if planned:
        lines.append(f"this would be decision {note.decisions} on these labels: family-wise false-adoption chance {fw}")
    elif note.number is None:
        lines.append(
            f"no decision taken on the test part (not counted); {note.decisions} decision(s) on these labels so far, "
            f"family-wise false-adoption chance {fw}"
        )
    else:
        again = " (the same run again: not counted twice)" if note.repeat else ""
        lines.append(
            f"decision {note.number}{again}; {note.decisions} decision(s) on these labels so far, family-wise "
            f"false-adoption chance {fw}"
        )
    return lines


def promote_adopted(store: Store, result: AlignResult) -> Promotion | None:
    """Make an adopted version the metric's production version (what every reader reads by default), with a note
    naming its decision; None when nothing was adopted."""
    note = result.ledger
    if not result.adopted or note is None or note.decision_id is None:
        return None
    row = store.decision(note.decision_id)
    if row is None or row.to_key is None:
        return None
    if store.production_key(result.spec) == row.to_key:
        return None
    return store.promote(
        result.spec, row.to_key, "align", note=f"align decision {row.number}: {result.decision.message}"
    )


__all__ = ["FALSE_ADOPTION_RATE", "Fresh", "decision_id", "describe", "family_wise", "promote_adopted", "record"]
