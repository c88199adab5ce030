"""Citation coverage / validity / density and the share of orphan claims (claims citing nothing): every
citation is read by :mod:`.sources` (the one reader) and checked against the record's own chunks."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from greval.judge.computed.common import ComputeError, record_verdict, short, texts, units_of, word_tokens
from greval.judge.computed.sources import (
    Citation,
    ClaimCites,
    Reading,
    check_citation,
    claim_citations,
    reading_of,
    strip_citations,
)
from greval.spec.computed import CitationParams, OrphanParams
from greval.types import ItemVerdict

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def split_sentences(text: str) -> list[str]:
    """Sentences of an answer (regex: no punkt download). A fragment that is only citations joins the
    sentence before it; markdown headings are not claims and are dropped."""
    out: list[str] = []
    for raw in _SENTENCE_END.split(text):
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        rest = strip_citations(s)
        if not re.search(r"\w", rest) and out:
            out[-1] = f"{out[-1]} {s}"
            continue
        if re.search(r"\w", s):
            out.append(s)
    return out


def _units(p: CitationParams, data: Mapping[str, Any]) -> tuple[list[ClaimCites], str]:
    """The units that should cite, read: the items of ``p.items``, else the sentences of ``p.field``."""
    if p.items:
        value = data.get(p.items)
        if not isinstance(value, list):
            raise ComputeError(f"{p.items}: expected a list, got {type(value).__name__}")
        reading = reading_of(p)
        return [claim_citations(it, reading) for it in value], "item"
    sentences = split_sentences(" ".join(texts(data.get(p.field))))
    reading = Reading(styles=tuple(p.styles))  # a sentence is a claim that is all text
    return [claim_citations(u, reading) for u in sentences], "sentence"


@dataclass(frozen=True)
class _Tally:
    """What the units cite and how much of it resolves: every figure ``citations`` reports is read from here."""

    unit_name: str  # "sentence" or "item"
    units: list[str]  # each unit's text (a placeholder when it has none)
    cites: list[Citation]  # every citation, in unit order
    problems: list[str | None]  # per citation: None when it resolves, else why not
    uncited: list[int]  # the units citing nothing
    evidenced: int  # units with at least one valid citation
    tokens: int  # the units' word tokens, citation markup left out

    @property
    def n(self) -> int:
        return len(self.units)

    @property
    def valid(self) -> int:
        return sum(1 for x in self.problems if x is None)

    def figures(self) -> dict[str, float | None]:
        n, units, cites = self.n, self.units, self.cites
        return {
            "coverage": (n - len(self.uncited)) / n if units else None,
            "validity": self.valid / len(cites) if cites else None,
            "evidence_coverage": self.evidenced / n if units else None,
            "density_per_sentence": len(cites) / n if units else None,
            "density_per_100_tokens": 100.0 * len(cites) / self.tokens if self.tokens else None,
        }

    def invalid(self) -> list[str]:
        return [f"{c.text}: {w}" for c, w in zip(self.cites, self.problems, strict=True) if w]


def _tally(p: CitationParams, data: Mapping[str, Any]) -> _Tally:
    chunks = [c for c in data.get("chunks") or [] if isinstance(c, Mapping)]
    reads, unit_name = _units(p, data)
    cites: list[Citation] = []
    problems: list[str | None] = []
    uncited: list[int] = []
    evidenced = 0
    for i, r in enumerate(reads):
        found = r.citations
        if not found:
            uncited.append(i)
        why = [check_citation(c, chunks, p) for c in found]
        evidenced += any(w is None for w in why)
        cites.extend(found)
        problems.extend(why)
    return _Tally(
        unit_name=unit_name,
        units=[r.text or f"{unit_name} {i} (no text)" for i, r in enumerate(reads, start=1)],
        cites=cites,
        problems=problems,
        uncited=uncited,
        evidenced=evidenced,
        # Density counts the words the units say, without their citation markup (see word_tokens).
        tokens=sum(len(word_tokens(r.words)) for r in reads),
    )


def _headline(p: CitationParams, t: _Tally) -> tuple[float | None, str, int]:
    """The record's score (the share ``p.score`` names), its reason and the units it pools."""
    n, name, cites = t.n, t.unit_name, t.cites
    cov_text = f"{n - len(t.uncited)}/{n} {name}s cite" if t.units else f"no {name}s"
    val_text = f"{t.valid}/{len(cites)} citations valid" if cites else "no citations found"
    ev_text = f"{t.evidenced}/{n} {name}s have a valid citation" if t.units else f"no {name}s"
    score = t.figures()[p.score]
    if p.score == "validity":
        reason, units_n = f"{val_text}; {cov_text}", len(cites)
    elif p.score == "coverage":
        reason, units_n = f"{cov_text}; {val_text}", n
    elif p.score == "evidence_coverage":
        reason, units_n = f"{ev_text}; {val_text}", n
    elif p.score == "density_per_sentence":
        units_n = 1
        reason = f"{len(cites)} citations in {n} {name}s" if t.units else f"no {name}s"
    else:
        units_n = 1
        reason = f"{len(cites)} citations in {t.tokens} word tokens" if t.tokens else "no word tokens"
    invalid = t.invalid()
    if invalid:
        reason += f" (first invalid: {short(invalid[0], 120)})"
    return score, reason, units_n


def citations(p: CitationParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Citation coverage (sentences or items citing something) and validity (citations that resolve)."""
    t = _tally(p, data)
    score, reason, units_n = _headline(p, t)
    items = [
        ItemVerdict(
            item_id=f"citation:{i}",
            label="valid" if why is None else "invalid",
            score=1.0 if why is None else 0.0,
            reason=f"{c.text}: " + ("resolves" if why is None else why),
        )
        for i, (c, why) in enumerate(zip(t.cites, t.problems, strict=True), start=1)
    ]
    outputs: dict[str, Any] = {
        **t.figures(),
        "units": units_of(score, units_n),
        "segments": t.n,
        "cited_segments": t.n - len(t.uncited),
        "evidenced_segments": t.evidenced,
        "tokens": t.tokens,
        "citations": len(t.cites),
        "valid_citations": t.valid,
        "uncited": [short(t.units[i]) for i in t.uncited[:20]],
        "invalid": t.invalid()[:20],
    }
    return [record_verdict(score, reason), *items], outputs


def orphan_claims(p: OrphanParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Share of claims that cite nothing (lower is better): every form the reader knows is a source, whether
    it resolves or not (that is ``citations``' validity)."""
    value = data.get(p.field)
    if not isinstance(value, list):
        raise ComputeError(f"{p.field}: expected a list of claims, got {type(value).__name__}")
    reading = reading_of(p)
    items: list[ItemVerdict] = []
    orphans = 0
    for i, claim in enumerate(value, start=1):
        read = claim_citations(claim, reading)
        orphan = not read.citations
        orphans += orphan
        cited = ", ".join(c.text for c in read.citations[:3]) + (", …" if len(read.citations) > 3 else "")
        items.append(
            ItemVerdict(
                item_id=f"claim:{i}",
                label="orphan" if orphan else "sourced",
                score=1.0 if orphan else 0.0,
                reason=f"{short(read.text, 60)}: " + ("no source" if orphan else f"cites {cited}"),
            )
        )
    rate = orphans / len(value) if value else None
    reason = f"{orphans}/{len(value)} claims have no source" if value else "no claims"
    outputs = {"claims": len(value), "orphans": orphans, "orphan_rate": rate, "units": units_of(rate, len(value))}
    return [record_verdict(rate, reason), *items], outputs
