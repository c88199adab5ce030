"""Verdicts as the later stages read them: which judges answered a metric, and their verdicts by unit or by
record id (annotation pushes them to people, agreement sets them beside people's answers). Counts and
scores are not here: :mod:`greval.store.results` defines every figure once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypedDict

from greval.store.connection import StoreFile


class VerdictJudge(TypedDict):
    """A judge with verdicts of one metric version: how many, and when the last one was written."""

    judge_key: str
    label: str
    identity: str
    n: int
    last: float


@dataclass(frozen=True)
class UnitVerdict:
    """A judge's ok verdict on one unit (a record, or one of its items), under one of the record's ids."""

    record_hash: str
    item_id: str
    record_id: str
    label: str | None
    value: int | None
    confidence: float | None
    reason: str | None
    token_confidence: float | None = None  # from the judge's token log-probabilities (greval run --logprobs)

    @property
    def best_confidence(self) -> float | None:
        """The one confidence later stages use (selection, suggestions, calibration): the agreement rate of
        several samples when the judge was asked more than once (it measures the answer's stability),
        else the token confidence of the one answer, else None."""
        return self.confidence if self.confidence is not None else self.token_confidence


class JudgedUnit(TypedDict):
    """The latest ok verdict on a unit, with the judge that gave it (its label and identity, JSON)."""

    record_hash: str
    item_id: str
    label: str | None
    value: int | None
    confidence: float | None
    reason: str | None
    judge: str
    identity: str


class IdVerdict(TypedDict):
    """A verdict of any status, listed once per record id that has the judged content."""

    record_hash: str
    record_id: str
    item_id: str
    status: str
    label: str | None
    value: int | None
    reason: str | None


class VerdictLookups(StoreFile):
    """Reads of the ``verdicts`` table for annotation and agreement: what a reader sees, without the judgements an
    experiment made under a version that is not its own (greval.store.versions)."""

    def _shown(self, spec_key: str, alias: str = "verdicts") -> str:
        """The condition that leaves out what experiments made under ``spec_key`` (none for a version only
        experiments judged: what the user named), as `` AND …``; empty when nothing is hidden."""
        if not self._rows("SELECT 1 FROM experiment_verdicts LIMIT 1"):
            return ""
        if self._rows("SELECT 1 FROM specs WHERE spec_key=? AND experiment=1", (spec_key,)):
            return ""
        a = alias  # qualified: inside the subquery a bare column would be experiment_verdicts' own
        return (
            " AND NOT EXISTS (SELECT 1 FROM experiment_verdicts e WHERE e.spec_key = "
            f"{a}.spec_key AND e.judge_key = {a}.judge_key AND e.record_hash = {a}.record_hash)"
        )

    def verdict_judges(self, spec_key: str, *, ok_only: bool = False, newest_first: bool = False) -> list[VerdictJudge]:
        """The judges with verdicts of a metric version (only ok ones: ``ok_only``), most verdicts first, or
        the most recently written first (``newest_first``)."""
        rows = self._rows(
            "SELECT j.judge_key, j.label, j.identity, COUNT(*) AS n, MAX(v.updated_at) AS last FROM verdicts v"
            " JOIN judges j ON j.judge_key = v.judge_key WHERE v.spec_key=?"
            + self._shown(spec_key, "v")
            + (" AND v.status='ok'" if ok_only else "")
            + " GROUP BY j.judge_key ORDER BY "
            + ("last DESC" if newest_first else "n DESC")
            + ", j.judge_key",
            (spec_key,),
        )
        return [VerdictJudge(judge_key=k, label=lab, identity=i, n=int(n), last=float(t)) for k, lab, i, n, t in rows]

    def unit_verdicts(self, spec_key: str, judge_key: str) -> list[UnitVerdict]:
        """One judge's ok verdicts of a metric version, by record hash then item id."""
        rows = self._rows(
            "SELECT record_hash, item_id, record_id, label, value, confidence, reason, token_confidence FROM verdicts"
            f" WHERE spec_key=? AND judge_key=? AND status='ok'{self._shown(spec_key)} ORDER BY record_hash, item_id",
            (spec_key, judge_key),
        )
        return [
            UnitVerdict(
                record_hash=h, item_id=i, record_id=r, label=lab, value=v, confidence=c, reason=why, token_confidence=t
            )
            for h, i, r, lab, v, c, why, t in rows
        ]

    def unit_samples(self, spec_key: str, judge_key: str) -> dict[tuple[str, str], list[Any]]:
        """The answers of a judge asked several times per unit (``--samples``), by (record hash, item id); units
        asked once are absent."""
        rows = self._rows(
            "SELECT record_hash, item_id, samples FROM verdicts"
            f" WHERE spec_key=? AND judge_key=? AND samples IS NOT NULL{self._shown(spec_key)}",
            (spec_key, judge_key),
        )
        out: dict[tuple[str, str], list[Any]] = {}
        for h, i, samples in rows:
            found = json.loads(samples) if isinstance(samples, str) else samples
            if isinstance(found, list) and found:
                out[str(h), str(i)] = found
        return out

    def judgement_calls(self, spec_key: str, judge_key: str) -> dict[str, list[tuple[str, list[str], int]]]:
        """Each judgement's requests to the model, by record hash: (structured-output method, item ids asked
        about, attempts: the times it was sent, retries included) per call, in call order — what rebuilds the
        messages each call sent (the answers are not read)."""
        rows = self._rows(
            "SELECT record_hash, calls FROM judgements WHERE spec_key=? AND judge_key=? AND calls IS NOT NULL",
            (spec_key, judge_key),
        )
        out: dict[str, list[tuple[str, list[str], int]]] = {}
        for h, calls in rows:
            logged = json.loads(calls) if isinstance(calls, str) else calls
            if isinstance(logged, list):
                out[str(h)] = [
                    (str(c.get("method", "")), [str(i) for i in c.get("items") or []], int(c.get("attempts") or 1))
                    for c in logged
                    if isinstance(c, dict)
                ]
        return out

    def unusable_units(self, spec_key: str, judge_key: str) -> dict[str, int]:
        """One judge's verdicts of a metric version that are not ok (nothing to push, nothing to compare), by
        why: an error's kind (``error`` when unknown), or ``skipped``."""
        rows = self._rows(
            "SELECT CASE WHEN status='error' THEN COALESCE(error_kind, 'error') ELSE status END AS why, COUNT(*)"
            f" FROM verdicts WHERE spec_key=? AND judge_key=? AND status<>'ok'{self._shown(spec_key)}"
            " GROUP BY why ORDER BY why",
            (spec_key, judge_key),
        )
        return {str(why): int(n) for why, n in rows}

    def latest_unit_verdicts(self, spec_key: str) -> dict[tuple[str, str], JudgedUnit]:
        """(record hash, item id) -> the most recently written ok verdict of a metric version, any judge."""
        rows = self._rows(
            "SELECT v.record_hash, v.item_id, v.label, v.value, v.confidence, v.reason, j.label, j.identity"
            " FROM verdicts v JOIN judges j ON j.judge_key=v.judge_key WHERE v.spec_key=? AND v.status='ok'"
            + self._shown(spec_key, "v")
            + " ORDER BY v.updated_at, v.rowid",
            (spec_key,),
        )
        return {
            (h, i): JudgedUnit(
                record_hash=h, item_id=i, label=lab, value=v, confidence=c, reason=why, judge=judge, identity=ident
            )
            for h, i, lab, v, c, why, judge, ident in rows
        }

    def verdicts_by_record_id(self, spec_key: str, judge_key: str) -> list[IdVerdict]:
        """One judge's verdicts of a metric version, once per record id with the judged content."""
        rows = self._rows(
            "SELECT v.record_hash, COALESCE(i.record_id, v.record_id), v.item_id, v.status, v.label, v.value,"
            " v.reason FROM verdicts v LEFT JOIN record_ids i ON i.record_hash = v.record_hash"
            f" WHERE v.spec_key=? AND v.judge_key=?{self._shown(spec_key, 'v')}"
            " ORDER BY v.record_hash, v.item_id, i.rowid",
            (spec_key, judge_key),
        )
        return [
            IdVerdict(record_hash=h, record_id=r, item_id=i, status=st, label=lab, value=v, reason=why)
            for h, r, i, st, lab, v, why in rows
        ]

    def judged_hashes(self, spec_key: str) -> set[str]:
        """The contents a metric version has verdicts on (any judge, any status)."""
        sql = f"SELECT DISTINCT record_hash FROM verdicts WHERE spec_key=?{self._shown(spec_key)}"
        return {h for (h,) in self._rows(sql, (spec_key,))}
