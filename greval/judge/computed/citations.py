"""Citations and sources: parsing citations (GraphRAG ``[Data: ...]``, spans, brackets) and checking them
against the record's own chunks, for citation coverage / validity and the share of orphan claims (claims
with no source). Plain parsing, no library."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from greval.judge.computed.common import ComputeError, record_verdict, short, texts, units_of, word_tokens
from greval.spec import StrictModel
from greval.spec.computed import CitationParams, OrphanParams, match_key
from greval.types import ItemVerdict


class Citation(StrictModel):
    """One parsed citation: the id it points at, optionally a dataset type, a section and a span."""

    text: str
    ref: str
    kind: str | None = None
    section: str | None = None
    start: int | None = None
    end: int | None = None
    at: int = 0


_GRAPHRAG = re.compile(r"\[Data:\s*([^\]]*)\]", re.IGNORECASE)
_GRAPHRAG_PART = re.compile(r"([A-Za-z][A-Za-z _-]*?)\s*\(([^)]*)\)")
_SPAN = re.compile(r"(?P<id>\b[A-Za-z_][\w.-]*?):(?P<start>\d+)\s*[-–]\s*(?P<end>\d+)\b")
# "IMPRESSION section, chunk_11:..." - the words before "section" back to the nearest delimiter.
_SECTION_BEFORE = re.compile(r"([^()\[\];,.:\n]{1,80}?)\s+section\s*[,:]?\s*$", re.IGNORECASE)
_BRACKET = re.compile(r"\[\s*([\w.-]+(?:\s*[,;]\s*[\w.-]+)*)\s*\]")
_SINGULAR = {
    "entities": "entity",
    "relationships": "relationship",
    "reports": "report",
    "sources": "source",
    "claims": "claim",
    "covariates": "covariate",
    "documents": "document",
    "chunks": "chunk",
    "text units": "text unit",
}


def parse_citations(text: str, styles: Sequence[str] = ("graphrag", "span", "bracket")) -> list[Citation]:
    """Every citation in a text, in order of appearance.

    GraphRAG: ``[Data: Sources (1, 2); Entities (5, +more)]`` (``+more`` is skipped); span:
    ``chunk_5:200-250``, optionally ``IMPRESSION section, chunk_11:4648-5547``; bracket: ``[chunk_5]``,
    ``[1, 2]``.
    """
    found: list[Citation] = []
    taken: list[tuple[int, int]] = []
    if "graphrag" in styles:
        for m in _GRAPHRAG.finditer(text):
            taken.append(m.span())
            for part in _GRAPHRAG_PART.finditer(m.group(1)):
                kind = part.group(1).strip()
                for ref in part.group(2).split(","):
                    ref = ref.strip()
                    if ref and not ref.lstrip().startswith("+"):
                        found.append(Citation(text=f"{kind} ({ref})", ref=ref, kind=kind, at=m.start()))
    if "span" in styles:
        for m in _SPAN.finditer(text):
            if any(a <= m.start() < b for a, b in taken):
                continue
            taken.append(m.span())
            before = _SECTION_BEFORE.search(text[max(0, m.start() - 100) : m.start()])
            section = _section_name(before.group(1)) if before else None
            found.append(
                Citation(
                    text=(f"{section.strip()} section, " if section else "") + m.group(0).strip(),
                    ref=m.group("id"),
                    section=section.strip() if section else None,
                    start=int(m.group("start")),
                    end=int(m.group("end")),
                    at=m.start(),
                )
            )
    if "bracket" in styles:
        for m in _BRACKET.finditer(text):
            if any(a <= m.start() < b or a < m.end() <= b for a, b in taken):
                continue
            for ref in re.split(r"\s*[,;]\s*", m.group(1)):
                if ref:
                    found.append(Citation(text=f"[{ref}]", ref=ref, at=m.start()))
    return sorted(found, key=lambda c: c.at)


def _section_name(phrase: str) -> str:
    """The trailing capitalised words of "see the Past Medical History" (all of it when none is)."""
    words = phrase.split()
    tail: list[str] = []
    for w in reversed(words):
        if not (w[:1].isupper() or w[:1].isdigit()):
            break
        tail.insert(0, w)
    return " ".join(tail or words)


def _chunk_meta(chunk: Mapping[str, Any]) -> dict[str, Any]:
    """A chunk's metadata, also when the dataset nested it as ``metadata: {...}``."""
    meta = dict(chunk.get("metadata") or {})
    inner = meta.pop("metadata", None)
    if isinstance(inner, Mapping):
        meta = {**inner, **meta}
    return meta


def _kindmatch_key(kind: str) -> str:
    k = match_key(kind)
    return _SINGULAR.get(k, k)


def chunk_ids(chunks: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, Mapping[str, Any]]:
    """Every id a chunk answers to (its ``keys``, on the chunk or in its metadata; the first chunk wins)."""
    by_id: dict[str, Mapping[str, Any]] = {}
    for ch in chunks:
        meta = _chunk_meta(ch)
        for k in keys:
            v = ch.get(k, meta.get(k))
            if v is not None and str(v).strip():
                by_id.setdefault(match_key(str(v)), ch)
    return by_id


def resolve_chunk(
    c: Citation, chunks: Sequence[Mapping[str, Any]], id_keys: Sequence[str]
) -> tuple[Mapping[str, Any] | None, str | None]:
    """The chunk a citation points at (matched on ``id_keys``), or None and why not."""
    by_id = chunk_ids(chunks, id_keys)
    chunk: Mapping[str, Any] | None = None
    if c.kind is None:
        chunk = by_id.get(match_key(c.ref))
    else:  # GraphRAG: "Sources (3)" is chunk "3" (typed as a source if typed at all), or "source:3" / "source_3"
        kind = _kindmatch_key(c.kind)
        for sep in (":", "_", "-", " "):
            chunk = by_id.get(match_key(f"{kind}{sep}{c.ref}")) or by_id.get(match_key(f"{c.kind}{sep}{c.ref}"))
            if chunk is not None:
                break
        if chunk is None:
            bare = by_id.get(match_key(c.ref))
            if bare is not None:
                meta = _chunk_meta(bare)
                typed = next((meta[k] for k in ("type", "dataset", "kind") if meta.get(k)), None)
                if typed is not None and _kindmatch_key(str(typed)) != kind:
                    return None, f"id {c.ref!r} is a {typed}, not one of the {c.kind}"
                chunk = bare
    if chunk is None:
        ids = [str(ch.get("id")) for ch in chunks]
        known = ", ".join(ids[:8]) + (", …" if len(ids) > 8 else "")
        return None, f"unknown id {c.ref!r} (the record has {known or 'no chunks'})"
    return chunk, None


def cited_text(c: Citation, chunk: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The text a citation points at in its chunk, or None and why not: the whole chunk text for a bare id;
    for a span, the slice ``text[start - o : end - o]``, where ``o`` is the chunk's metadata ``start_char``
    (the span's offsets are then document offsets) or 0 (offsets into the chunk's own text)."""
    text = str(chunk.get("text", ""))
    if c.start is None or c.end is None:
        return text, None
    if c.start >= c.end:
        return None, f"span {c.start}-{c.end}: start ≥ end"
    lo = _chunk_meta(chunk).get("start_char")
    try:
        offset = int(lo) if lo is not None else 0
    except (TypeError, ValueError):
        return None, f"chunk {c.ref} has a start_char that is not a number: {lo!r}"
    a, b = c.start - offset, c.end - offset
    if a < 0 or b > len(text):
        return None, f"span {c.start}-{c.end} out of bounds: chunk {c.ref} covers {offset}-{offset + len(text)}"
    return text[a:b], None


def check_citation(c: Citation, chunks: Sequence[Mapping[str, Any]], p: CitationParams) -> str | None:
    """Why a citation is invalid, or None when it is valid."""
    chunk, why = resolve_chunk(c, chunks, p.id_keys)
    if chunk is None:
        return why
    meta = _chunk_meta(chunk)
    if c.section is not None and p.check_sections:
        title = meta.get("section_title") or meta.get("section")
        cited, want = _sectionmatch_key(c.section), _sectionmatch_key(str(title)) if title is not None else ""
        # The cited phrase may carry words before the section name ("see the IMPRESSION section, ...").
        if title is not None and not (cited == want or cited.endswith(" " + want)):
            return f"section mismatch: cited {c.section!r}, chunk {c.ref} is in {str(title)!r}"
    if c.start is not None and c.end is not None and p.check_spans:
        if c.start >= c.end:
            return f"span {c.start}-{c.end}: start ≥ end"
        lo, hi = meta.get("start_char"), meta.get("end_char")
        if lo is None or hi is None:  # no document offsets: the span is within the chunk's own text
            lo, hi = 0, len(str(chunk.get("text", "")))
        lo_i, hi_i = int(lo), int(hi)
        if c.start < lo_i or c.end > hi_i:
            return f"span {c.start}-{c.end} out of bounds: chunk {c.ref} covers {lo_i}-{hi_i}"
    return None


def _sectionmatch_key(name: str) -> str:
    return re.sub(r"[^\w]+", " ", name).strip().casefold()


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def split_sentences(text: str) -> list[str]:
    """Sentences of an answer (regex: no punkt download). A fragment that is only citations joins the
    sentence before it; markdown headings are not claims and are dropped."""
    out: list[str] = []
    for raw in _SENTENCE_END.split(text):
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        rest = _GRAPHRAG.sub("", _SPAN.sub("", _BRACKET.sub("", s)))
        if not re.search(r"\w", rest) and out:
            out[-1] = f"{out[-1]} {s}"
            continue
        if re.search(r"\w", s):
            out.append(s)
    return out


def strip_citations(text: str, styles: Sequence[str] = ("graphrag", "span", "bracket")) -> str:
    """The text with every citation of ``styles`` removed (the words a claim says, without its sources)."""
    for style, pattern in (("graphrag", _GRAPHRAG), ("span", _SPAN), ("bracket", _BRACKET)):
        if style in styles:
            text = pattern.sub(" ", text)
    return text


TEXT_KEY = "text"
"""The key of an item's own words: citations there must be written as citations."""


def item_citations(item: Any, p: CitationParams) -> list[Citation]:
    """The citations of one item (a claim): written ones anywhere, and in a source-like key (every key of
    ``item_keys`` but ``text``) a bare id as well, so ``{"text": ..., "source": "c3"}`` cites chunk c3, as
    ``orphan_claims`` counts it sourced."""
    if not isinstance(item, Mapping):
        return parse_citations(str(item), p.styles)
    found: list[Citation] = []
    for k in p.item_keys:
        v = item.get(k)
        values = v if isinstance(v, list | tuple) else [] if v is None else [v]
        for x in values:
            s = str(x).strip()
            if not s:
                continue
            written = parse_citations(s, p.styles)
            if written or k == TEXT_KEY:
                found.extend(written)
            else:
                found.extend(Citation(text=ref, ref=ref) for ref in re.split(r"\s*[,;]\s*", s) if ref)
    return found


def citations(p: CitationParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Citation coverage (sentences or items citing something) and validity (citations that resolve)."""
    chunks = [c for c in data.get("chunks") or [] if isinstance(c, Mapping)]
    if p.items:
        value = data.get(p.items)
        if not isinstance(value, list):
            raise ComputeError(f"{p.items}: expected a list, got {type(value).__name__}")
        units = [
            it if isinstance(it, str) else str(it.get(TEXT_KEY, it)) if isinstance(it, Mapping) else str(it)
            for it in value
        ]
        per_unit = [item_citations(it, p) for it in value]
        unit_name = "item"
        words = [str(it.get(TEXT_KEY, "")) if isinstance(it, Mapping) else str(it) for it in value]
    else:
        units = split_sentences(" ".join(texts(data.get(p.field))))
        per_unit = [parse_citations(u, p.styles) for u in units]
        unit_name = "sentence"
        words = units
    # Density counts the words the units say, without their citation markup (see word_tokens).
    tokens = sum(len(word_tokens(strip_citations(w, p.styles))) for w in words)
    cites: list[Citation] = []
    problems: list[str | None] = []
    uncited: list[int] = []
    evidenced = 0
    for i, found in enumerate(per_unit):
        if not found:
            uncited.append(i)
        why = [check_citation(c, chunks, p) for c in found]
        evidenced += any(w is None for w in why)
        cites.extend(found)
        problems.extend(why)
    valid = sum(1 for x in problems if x is None)
    n = len(units)
    coverage = (n - len(uncited)) / n if units else None
    evidence_coverage = evidenced / n if units else None
    validity = valid / len(cites) if cites else None
    per_sentence = len(cites) / n if units else None
    per_100 = 100.0 * len(cites) / tokens if tokens else None
    items = [
        ItemVerdict(
            item_id=f"citation:{i}",
            label="valid" if why is None else "invalid",
            score=1.0 if why is None else 0.0,
            reason=f"{c.text}: " + ("resolves" if why is None else why),
        )
        for i, (c, why) in enumerate(zip(cites, problems, strict=True), start=1)
    ]
    cov_text = f"{n - len(uncited)}/{n} {unit_name}s cite" if units else f"no {unit_name}s"
    val_text = f"{valid}/{len(cites)} citations valid" if cites else "no citations found"
    ev_text = f"{evidenced}/{n} {unit_name}s have a valid citation" if units else f"no {unit_name}s"
    first_bad = next((f"{c.text}: {w}" for c, w in zip(cites, problems, strict=True) if w), None)
    score: float | None
    if p.score == "validity":
        score, reason, units_n = validity, f"{val_text}; {cov_text}", len(cites)
    elif p.score == "coverage":
        score, reason, units_n = coverage, f"{cov_text}; {val_text}", n
    elif p.score == "evidence_coverage":
        score, reason, units_n = evidence_coverage, f"{ev_text}; {val_text}", n
    elif p.score == "density_per_sentence":
        score, units_n = per_sentence, 1
        reason = f"{len(cites)} citations in {n} {unit_name}s" if units else f"no {unit_name}s"
    else:
        score, units_n = per_100, 1
        reason = f"{len(cites)} citations in {tokens} word tokens" if tokens else "no word tokens"
    if first_bad:
        reason += f" (first invalid: {short(first_bad, 120)})"
    outputs: dict[str, Any] = {
        "coverage": coverage,
        "validity": validity,
        "evidence_coverage": evidence_coverage,
        "density_per_sentence": per_sentence,
        "density_per_100_tokens": per_100,
        "units": units_of(score, units_n),
        "segments": n,
        "cited_segments": n - len(uncited),
        "evidenced_segments": evidenced,
        "tokens": tokens,
        "citations": len(cites),
        "valid_citations": valid,
        "uncited": [short(units[i]) for i in uncited[:20]],
        "invalid": [f"{c.text}: {w}" for c, w in zip(cites, problems, strict=True) if w][:20],
    }
    return [record_verdict(score, reason), *items], outputs


def orphan_claims(p: OrphanParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Share of claims without a source (lower is better)."""
    value = data.get(p.field)
    if not isinstance(value, list):
        raise ComputeError(f"{p.field}: expected a list of claims, got {type(value).__name__}")
    items: list[ItemVerdict] = []
    orphans = 0
    for i, claim in enumerate(value, start=1):
        text = (
            claim
            if isinstance(claim, str)
            else str(claim.get(p.text_key, ""))
            if isinstance(claim, Mapping)
            else str(claim)
        )
        source = None
        if isinstance(claim, Mapping):
            source = next((k for k in p.source_keys if _has_value(claim.get(k))), None)
        cited = p.inline_citations and bool(parse_citations(text))
        orphan = source is None and not cited
        orphans += orphan
        why = "no source" if orphan else (f"source in {source!r}" if source else "inline citation")
        items.append(
            ItemVerdict(
                item_id=f"claim:{i}",
                label="orphan" if orphan else "sourced",
                score=1.0 if orphan else 0.0,
                reason=f"{short(text, 60)}: {why}",
            )
        )
    rate = orphans / len(value) if value else None
    reason = f"{orphans}/{len(value)} claims have no source" if value else "no claims"
    outputs = {"claims": len(value), "orphans": orphans, "orphan_rate": rate, "units": units_of(rate, len(value))}
    return [record_verdict(rate, reason), *items], outputs


def _has_value(v: Any) -> bool:
    if v is None:
        return False
    if isinstance(v, str):
        return bool(v.strip())
    if isinstance(v, list | tuple | dict | set):
        return any(_has_value(x) for x in (v.values() if isinstance(v, dict) else v))
    return True
