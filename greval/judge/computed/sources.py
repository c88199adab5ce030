"""The one reader of citations: what a claim, an item or a sentence cites, and where each citation points in
the record's own chunks. Every computed metric that asks "is this claim cited?" or "what does it cite?"
(``citations``, ``orphan_claims``, ``cited_span_overlap``, ``cited_span_similarity``,
``fact_span_consistency``) asks :func:`claim_citations` and :func:`point_at`, so a form one of them
understands counts in all of them.

The forms: written in a text — GraphRAG ``[Data: Sources (1, 2)]``, a span ``chunk_5:200-250`` (optionally
``IMPRESSION section, chunk_11:4648-5547``), a bracket ``[chunk_5]`` / ``[1, 2]``; in a source key of an
object claim — any written form, a bare chunk id (``source: c3``, ``chunk_ids: [1, 2]``, ``"c1, c2"``) or a
span object ``{chunk_id, start, end}``; and a claim object carrying ``{chunk_id, start, end}`` itself.
Plain parsing, no library."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from greval.judge.computed.common import short
from greval.spec import StrictModel
from greval.spec.computed import CitationParams, ClaimParams, match_key


class Citation(StrictModel):
    """One citation: the id it points at, optionally a dataset type, a section and a span. ``problem`` is set
    for a citation that was given but cannot be read (a span object without a chunk id): it still counts as
    a citation, one that never resolves."""

    text: str
    ref: str
    kind: str | None = None
    section: str | None = None
    start: int | None = None
    end: int | None = None
    at: int = 0
    problem: str | None = None


_GRAPHRAG = re.compile(r"\[Data:\s*([^\]]*)\]", re.IGNORECASE)
_GRAPHRAG_PART = re.compile(r"([A-Za-z][A-Za-z _-]*?)\s*\(([^)]*)\)")
_SPAN = re.compile(r"(?P<id>\b[A-Za-z_][\w.-]*?):(?P<start>\d+)\s*[-–]\s*(?P<end>\d+)\b")
# "IMPRESSION section, chunk_11:..." - the words before "section" back to the nearest delimiter.
_SECTION_BEFORE = re.compile(r"([^()\[\];,.:\n]{1,80}?)\s+section\s*[,:]?\s*$", re.IGNORECASE)
_BRACKET = re.compile(r"\[\s*([\w.-]+(?:\s*[,;]\s*[\w.-]+)*)\s*\]")
_PATTERNS = (("graphrag", _GRAPHRAG), ("span", _SPAN), ("bracket", _BRACKET))
_ALL_STYLES = ("graphrag", "span", "bracket")
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


def parse_citations(text: str, styles: Sequence[str] = _ALL_STYLES) -> list[Citation]:
    """Every citation written in a text, in order of appearance.

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
            section = _section_name(before.group(1)).strip() if before else None
            found.append(
                Citation(
                    text=(f"{section} section, " if section else "") + m.group(0).strip(),
                    ref=m.group("id"),
                    section=section,
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


def strip_citations(text: str, styles: Sequence[str] = _ALL_STYLES) -> str:
    """The text with every citation of ``styles`` removed (the words a claim says, without its sources)."""
    for style, pattern in _PATTERNS:
        if style in styles:
            text = pattern.sub(" ", text)
    return text


# ------------------------------------------------------------------------------------ a claim's citations
TEXT_KEY = "text"
"""The key of an item's own words in ``citations``' ``item_keys``: citations there must be written as such."""

#: Keys of a span object naming its chunk, its start and its end (the first present wins).
SPAN_ID_KEYS = ("chunk_id", "chunk", "id", "source")
SPAN_START_KEYS = ("start", "start_char")
SPAN_END_KEYS = ("end", "end_char")
#: A claim object carrying a span itself: its own ``id`` is the claim's, not a chunk's.
_CLAIM_SPAN_ID_KEYS = tuple(k for k in SPAN_ID_KEYS if k != "id")


@dataclass(frozen=True)
class Reading:
    """Where a claim's citations are read: its text (``inline``: written citations there count), its source
    keys (written citations, bare ids and span objects) and the syntaxes parsed."""

    text_key: str = TEXT_KEY
    source_keys: tuple[str, ...] = ()
    styles: tuple[str, ...] = _ALL_STYLES
    inline: bool = True


def reading_of(p: ClaimParams | CitationParams) -> Reading:
    """A metric's parameters as a :class:`Reading`; ``citations``' ``item_keys`` hold the text key (``text``,
    when written citations in it count) and the source keys together."""
    if isinstance(p, CitationParams):
        keys = tuple(k for k in p.item_keys if k != TEXT_KEY)
        return Reading(TEXT_KEY, keys, tuple(p.styles), TEXT_KEY in p.item_keys)
    return Reading(p.text_key, tuple(p.source_keys), tuple(p.styles), p.inline_citations)


@dataclass(frozen=True)
class ClaimCites:
    """A claim read: its text as given, its words (the text without citation markup) and its citations
    (each once, in the order read: the text's first, then the source keys')."""

    text: str
    words: str
    citations: tuple[Citation, ...]


def claim_citations(claim: Any, r: Reading) -> ClaimCites:
    """What a claim (an object, or a string: a sentence, an item) cites, read as ``r`` says."""
    is_obj = isinstance(claim, Mapping)
    text = str(claim.get(r.text_key) or "") if is_obj else str(claim)
    found = parse_citations(text, r.styles) if r.inline else []
    if is_obj:
        found.extend(_keyed_citations(claim, r))
    seen: set[tuple[Any, ...]] = set()
    unique: list[Citation] = []
    for c in found:  # the same citation in the text and in `source` is one citation
        key = (_kind_key(c.kind) if c.kind else None, match_key(c.ref), c.start, c.end, c.problem)
        if key not in seen:
            seen.add(key)
            unique.append(c)
    words = " ".join(strip_citations(text, r.styles).split())
    return ClaimCites(text=text, words=words, citations=tuple(unique))


def _keyed_citations(claim: Mapping[str, Any], r: Reading) -> list[Citation]:
    found: list[Citation] = []
    used: set[str] = {r.text_key}
    if _first(claim, SPAN_START_KEYS) is not None or _first(claim, SPAN_END_KEYS) is not None:
        used.update(_CLAIM_SPAN_ID_KEYS)
        found.append(span_object(claim, _CLAIM_SPAN_ID_KEYS))
    for k in r.source_keys:
        if k in used:
            continue
        v = claim.get(k)
        for x in v if isinstance(v, list | tuple) else [] if v is None else [v]:
            found.extend(_value_citations(x, r.styles))
    return found


def _value_citations(x: Any, styles: Sequence[str]) -> list[Citation]:
    """One value of a source key: a span object, a written citation, or bare ids (``"c1, c2"``)."""
    if isinstance(x, Mapping):
        return [span_object(x)] if any(str(v).strip() for v in x.values() if v is not None) else []
    s = str(x).strip()
    if not s:
        return []
    return parse_citations(s, styles) or [Citation(text=ref, ref=ref) for ref in re.split(r"\s*[,;]\s*", s) if ref]


def _first(obj: Mapping[str, Any], keys: Sequence[str]) -> Any:
    return next((obj[k] for k in keys if obj.get(k) not in (None, "")), None)


def _as_offset(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return None


def span_object(obj: Mapping[str, Any], id_keys: Sequence[str] = SPAN_ID_KEYS) -> Citation:
    """A span given as ``{chunk_id, start, end}`` (start and end optional together: without them the whole
    chunk); a citation with a ``problem`` when it cannot be read."""
    ref = _first(obj, id_keys)
    if ref is None:
        return Citation(
            text=f"span {short(str(dict(obj)), 60)}", ref="", problem=f"no chunk id (one of {', '.join(id_keys)})"
        )
    start_v, end_v = _first(obj, SPAN_START_KEYS), _first(obj, SPAN_END_KEYS)
    if start_v is None and end_v is None:
        return Citation(text=str(ref), ref=str(ref))
    start, end = _as_offset(start_v), _as_offset(end_v)
    if start is None or end is None:
        return Citation(
            text=f"span {ref}:{start_v}-{end_v}", ref=str(ref), problem="start and end must both be whole numbers"
        )
    return Citation(text=f"{ref}:{start}-{end}", ref=str(ref), start=start, end=end)


# ------------------------------------------------------------------------------- where a citation points
def chunk_meta(chunk: Mapping[str, Any]) -> dict[str, Any]:
    """A chunk's metadata, also when the dataset nested it as ``metadata: {...}``."""
    meta = dict(chunk.get("metadata") or {})
    inner = meta.pop("metadata", None)
    if isinstance(inner, Mapping):
        meta = {**inner, **meta}
    return meta


def _kind_key(kind: str) -> str:
    k = match_key(kind)
    return _SINGULAR.get(k, k)


def chunk_ids(chunks: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, Mapping[str, Any]]:
    """Every id a chunk answers to (its ``keys``, on the chunk or in its metadata; the first chunk wins)."""
    by_id: dict[str, Mapping[str, Any]] = {}
    for ch in chunks:
        meta = chunk_meta(ch)
        for k in keys:
            v = ch.get(k, meta.get(k))
            if v is not None and str(v).strip():
                by_id.setdefault(match_key(str(v)), ch)
    return by_id


def resolve_chunk(
    c: Citation, chunks: Sequence[Mapping[str, Any]], id_keys: Sequence[str]
) -> tuple[Mapping[str, Any] | None, str | None]:
    """The chunk a citation points at (matched on ``id_keys``), or None and why not."""
    if c.problem is not None:
        return None, c.problem
    by_id = chunk_ids(chunks, id_keys)
    chunk: Mapping[str, Any] | None = None
    if c.kind is None:
        chunk = by_id.get(match_key(c.ref))
    else:  # GraphRAG: "Sources (3)" is chunk "3" (typed as a source if typed at all), or "source:3" / "source_3"
        kind = _kind_key(c.kind)
        for sep in (":", "_", "-", " "):
            chunk = by_id.get(match_key(f"{kind}{sep}{c.ref}")) or by_id.get(match_key(f"{c.kind}{sep}{c.ref}"))
            if chunk is not None:
                break
        if chunk is None:
            bare = by_id.get(match_key(c.ref))
            if bare is not None:
                meta = chunk_meta(bare)
                typed = next((meta[k] for k in ("type", "dataset", "kind") if meta.get(k)), None)
                if typed is not None and _kind_key(str(typed)) != kind:
                    return None, f"id {c.ref!r} is a {typed}, not one of the {c.kind}"
                chunk = bare
    if chunk is None:
        ids = [str(ch.get("id")) for ch in chunks]
        known = ", ".join(ids[:8]) + (", …" if len(ids) > 8 else "")
        return None, f"unknown id {c.ref!r} (the record has {known or 'no chunks'})"
    return chunk, None


@dataclass(frozen=True)
class Pointed:
    """Where a citation points: the chunk (its place in the record's ``chunks``), the characters
    ``start``-``end`` in the span's own coordinates (document offsets when the chunk's metadata has a
    ``start_char``, else offsets into the chunk's text; a bare id points at the whole chunk) and that text."""

    chunk: int
    start: int
    end: int
    text: str


def point_at(
    c: Citation, chunks: Sequence[Mapping[str, Any]], id_keys: Sequence[str]
) -> tuple[Pointed | None, str | None]:
    """The text a citation points at in the record's chunks, or None and why not: the whole chunk for a bare
    id; for a span, the slice ``text[start - o : end - o]``, where ``o`` is the chunk's metadata
    ``start_char`` (the span's offsets are then document offsets) or 0 (offsets into the chunk's text)."""
    chunk, why = resolve_chunk(c, chunks, id_keys)
    if chunk is None:
        return None, why
    place = next(i for i, ch in enumerate(chunks) if ch is chunk)
    text = str(chunk.get("text", ""))
    lo = chunk_meta(chunk).get("start_char")
    try:
        offset = int(lo) if lo is not None else 0
    except (TypeError, ValueError):
        return None, f"chunk {c.ref} has a start_char that is not a number: {lo!r}"
    if c.start is None or c.end is None:
        return Pointed(place, offset, offset + len(text), text), None
    if c.start >= c.end:
        return None, f"span {c.start}-{c.end}: start ≥ end"
    a, b = c.start - offset, c.end - offset
    if a < 0 or b > len(text):
        return None, f"span {c.start}-{c.end} out of bounds: chunk {c.ref} covers {offset}-{offset + len(text)}"
    return Pointed(place, c.start, c.end, text[a:b]), None


def check_citation(c: Citation, chunks: Sequence[Mapping[str, Any]], p: CitationParams) -> str | None:
    """Why a citation is invalid for ``citations`` (its chunk, its section, its span within the chunk's
    ``start_char`` / ``end_char``), or None when it is valid."""
    chunk, why = resolve_chunk(c, chunks, p.id_keys)
    if chunk is None:
        return why
    meta = chunk_meta(chunk)
    if c.section is not None and p.check_sections:
        title = meta.get("section_title") or meta.get("section")
        cited, want = _section_key(c.section), _section_key(str(title)) if title is not None else ""
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


def _section_key(name: str) -> str:
    return re.sub(r"[^\w]+", " ", name).strip().casefold()
