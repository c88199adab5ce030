"""greval's in-memory search engine for argilla-server 2.8.0 (replaces Elasticsearch/OpenSearch).

Runs inside the Argilla server's own virtual environment. The database stays the single
source of truth: the index is a plain in-memory copy of what Elasticsearch would hold, rebuilt
from the database the first time the engine is used after a start, and kept current through
the same hooks Argilla calls on its Elasticsearch engine.

Semantics follow ``argilla_server.search_engine.commons`` (the Elasticsearch engine):
per-user response-status queues, ``simple_query_string``-like text search (AND of terms),
terms/range filters on metadata, suggestions, responses and record properties, multi-key
sort with missing values last, progress counts, metadata metrics and cosine kNN search.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import cmp_to_key
from typing import Any
from uuid import UUID

from argilla_server.enums import (
    MetadataPropertyType,
    RecordSortField,
    ResponseStatusFilter,
    SimilarityOrder,
    SortOrder,
)
from argilla_server.models import (
    Dataset,
    MetadataProperty,
    Record,
    Response,
    Suggestion,
    User,
    VectorSettings,
)
from argilla_server.search_engine.base import (
    AndFilter,
    FloatMetadataMetrics,
    IntegerMetadataMetrics,
    MetadataFilterScope,
    MetadataMetrics,
    Order,
    RangeFilter,
    RecordFilterScope,
    ResponseFilterScope,
    SearchEngine,
    SearchResponseItem,
    SearchResponses,
    SuggestionFilterScope,
    TermsFilter,
    TermsMetrics,
    TextQuery,
)
from argilla_server.search_engine.base import (
    Filter as EngineFilter,
)
from argilla_server.search_engine.base import (
    FilterScope as EngineScope,
)

ENGINE_NAME = "greval"
_LOGGER = logging.getLogger("greval.search")
_WORD = re.compile(r"\w+", re.UNICODE)

Doc = dict[str, Any]


def _enum_value(value: Any) -> Any:
    """Store enums as their plain value, as Elasticsearch would see them in JSON."""
    return getattr(value, "value", value)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [v for v in value if v is not None]
    return [value]


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _term_matches(value: Any, wanted: Sequence[Any]) -> bool:
    """Keyword equality like an Elasticsearch ``terms`` query (``"3"`` matches the integer 3)."""
    text = str(_enum_value(value))
    number = _as_number(value)
    for w in wanted:
        if text == str(_enum_value(w)):
            return True
        if number is not None and (other := _as_number(w)) is not None and number == other:
            return True
    return False


def _in_range(value: Any, ge: float | None, le: float | None) -> bool:
    number = _as_number(value)
    if number is None:
        return False
    if ge is not None and number < ge:
        return False
    return not (le is not None and number > le)


def _field_text(value: Any) -> str:
    """Searchable text of a record field: text, chat messages' content, or str() of a custom value."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in value)
    return str(value)


# --------------------------------------------------------------------------- text query


class _Term:
    """One query clause: a word, a prefix (``word*``) or a phrase; possibly negated."""

    def __init__(self, raw: str, negated: bool, phrase: bool) -> None:
        self.negated = negated
        self.prefix = not phrase and raw.endswith("*")
        self.words = _tokens(raw)

    def count(self, token_lists: Iterable[list[str]]) -> int:
        """How often the clause occurs across the given token lists (one list per field)."""
        if not self.words:
            return 0
        total = 0
        n = len(self.words)
        for toks in token_lists:
            for i in range(len(toks) - n + 1):
                window = toks[i : i + n]
                if self.prefix:
                    if window[:-1] == self.words[:-1] and window[-1].startswith(self.words[-1]):
                        total += 1
                elif window == self.words:
                    total += 1
        return total


def _parse_query(q: str) -> list[list[_Term]]:
    """Parse a subset of ``simple_query_string``: AND by default, ``|`` for OR, ``-`` to negate, quotes."""
    groups: list[list[_Term]] = [[]]
    for m in re.finditer(r'(-?)"([^"]*)"|(\|)|(\S+)', q):
        if m.group(3):
            groups.append([])
            continue
        if m.group(2) is not None:
            term = _Term(m.group(2), negated=bool(m.group(1)), phrase=True)
        else:
            raw = m.group(4)
            if raw in {"+", "-"}:
                continue
            negated = raw.startswith("-")
            term = _Term(raw.lstrip("+-"), negated=negated, phrase=False)
        if term.words:
            groups[-1].append(term)
    return [g for g in groups if g]


def _text_score(doc: Doc, text: TextQuery | str, dataset: Dataset) -> float:
    """0 when the record does not match; a tf-based positive score otherwise."""
    if isinstance(text, str):
        text = TextQuery(q=text)
    tokens: dict[str, list[str]] = doc["_tokens"]
    token_lists = [tokens.get(text.field, [])] if text.field else list(tokens.values())
    groups = _parse_query(text.q)
    if not groups:
        return 0.0
    best = 0.0
    for group in groups:
        score = 0.0
        ok = True
        for term in group:
            n = term.count(token_lists)
            if term.negated:
                if n:
                    ok = False
                    break
            elif n == 0:
                ok = False
                break
            else:
                score += 1.0 + math.log(n)
        if ok:
            best = max(best, score or 1.0)
    return best


# --------------------------------------------------------------------------- documents


def _record_doc(record: Record, seq: int) -> Doc:
    """The in-memory document for a record; touches the same attributes as Argilla's ES engine."""
    dataset = record.dataset
    fields: dict[str, Any] = dict(record.fields or {})
    tokens: dict[str, list[str]] = {}
    for field in dataset.fields:
        if field.is_image:
            continue
        tokens[field.name] = _tokens(_field_text(fields.get(field.name)))
    doc: Doc = {
        "id": record.id,
        "external_id": record.external_id,
        "status": _enum_value(record.status),
        "inserted_at": record.inserted_at,
        "updated_at": record.updated_at,
        "_seq": seq,
        "_tokens": tokens,
        "metadata": {k: v for k, v in (record.metadata_ or {}).items() if v is not None},
        "responses": [_response_doc(r) for r in (record.responses or [])],
        "suggestions": {s.question.name: _suggestion_doc(s) for s in (record.suggestions or [])},
        "vectors": {str(v.vector_settings_id): [float(x) for x in v.value] for v in (record.vectors or [])},
    }
    return doc


def _response_doc(response: Response) -> Doc:
    return {
        "id": response.id,
        "status": _enum_value(response.status),
        "user_id": response.user_id,
        "values": {q: (v or {}).get("value") for q, v in (response.values or {}).items()},
    }


def _suggestion_doc(suggestion: Suggestion) -> Doc:
    return {
        "type": _enum_value(suggestion.type),
        "agent": suggestion.agent,
        "score": suggestion.score,
        "value": suggestion.value,
    }


class _Index:
    """All datasets' documents, keyed by dataset id then record id (insertion-ordered)."""

    def __init__(self) -> None:
        self.datasets: dict[UUID, dict[UUID, Doc]] = {}
        self.seq = 0
        self.loaded = False
        self.lock = asyncio.Lock()

    def docs(self, dataset_id: UUID) -> dict[UUID, Doc]:
        return self.datasets.setdefault(dataset_id, {})

    def put(self, record: Record) -> None:
        docs = self.docs(record.dataset_id)
        old = docs.get(record.id)
        if old is None:
            self.seq += 1
        docs[record.id] = _record_doc(record, old["_seq"] if old else self.seq)

    def find(self, record_id: UUID, dataset_id: UUID | None = None) -> Doc | None:
        if dataset_id is not None:
            return self.datasets.get(dataset_id, {}).get(record_id)
        for docs in self.datasets.values():
            if record_id in docs:
                return docs[record_id]
        return None


_INDEX = _Index()


async def _load_from_database() -> None:
    """Rebuild the index from the database (the source of truth) once per server process."""
    from argilla_server.database import AsyncSessionLocal
    from sqlalchemy import select
    from sqlalchemy.orm import selectinload

    async with _INDEX.lock:
        if _INDEX.loaded:
            return
        started = datetime.now()
        count = 0
        async with AsyncSessionLocal() as db:
            datasets = (
                await db.scalars(select(Dataset).options(selectinload(Dataset.fields)).order_by(Dataset.inserted_at))
            ).all()
            for dataset in datasets:
                _INDEX.docs(dataset.id)
                offset = 0
                while True:
                    batch = (
                        await db.scalars(
                            select(Record)
                            .where(Record.dataset_id == dataset.id)
                            .options(
                                selectinload(Record.responses),
                                selectinload(Record.suggestions).selectinload(Suggestion.question),
                                selectinload(Record.vectors),
                            )
                            .order_by(Record.inserted_at, Record.id)
                            .offset(offset)
                            .limit(1000)
                        )
                    ).all()
                    if not batch:
                        break
                    for record in batch:
                        record.dataset = dataset
                        _INDEX.put(record)
                    count += len(batch)
                    offset += len(batch)
                    db.expunge_all()
        _INDEX.loaded = True
        elapsed = (datetime.now() - started).total_seconds()
        _LOGGER.info("search index rebuilt from the database: %d records in %.2fs", count, elapsed)


# --------------------------------------------------------------------------- filters and sort


def _scope_values(doc: Doc, scope: EngineScope) -> list[Any]:
    if isinstance(scope, MetadataFilterScope):
        return _as_list(doc["metadata"].get(scope.metadata_property))
    if isinstance(scope, SuggestionFilterScope):
        suggestion = doc["suggestions"].get(scope.question)
        return _as_list(suggestion.get(scope.property)) if suggestion else []
    if isinstance(scope, RecordFilterScope):
        return _as_list(doc.get(scope.property))
    raise ValueError(f"Cannot process request for search scope {scope}")


def _user_responses(doc: Doc, user: User | None) -> list[Doc]:
    responses: list[Doc] = doc["responses"]
    if user is None:
        return responses
    return [r for r in responses if r["user_id"] == user.id]


def _value_matches(values: list[Any], flt: TermsFilter | RangeFilter) -> bool:
    if isinstance(flt, TermsFilter):
        return any(_term_matches(v, flt.values) for v in values)
    return any(_in_range(v, flt.ge, flt.le) for v in values)


def _matches(doc: Doc, flt: EngineFilter) -> bool:
    if isinstance(flt, AndFilter):
        return all(_matches(doc, f) for f in flt.filters)
    scope = flt.scope
    if isinstance(scope, ResponseFilterScope):
        responses = _user_responses(doc, scope.user)
        if scope.question:
            return any(_value_matches(_as_list(r["values"].get(scope.question)), flt) for r in responses)
        if scope.property == "status" and isinstance(flt, TermsFilter):
            wanted = [str(_enum_value(v)) for v in flt.values]
            if ResponseStatusFilter.pending.value in wanted and not responses:
                return True
            others = [w for w in wanted if w != ResponseStatusFilter.pending.value]
            if not others:
                return False
            return any(r["status"] in others for r in responses)
        raise ValueError(f"Cannot process filter scope {scope}")
    if isinstance(flt, TermsFilter | RangeFilter):
        return _value_matches(_scope_values(doc, scope), flt)
    raise ValueError(f"Cannot process request for filter {flt}")


def _sortable(value: Any) -> tuple[int, Any]:
    """A total order over mixed values: numbers (and dates) before strings."""
    number = _as_number(value)
    if number is not None and not isinstance(value, str):
        return (0, number)
    return (1, str(_enum_value(value)))


def _sort_value(doc: Doc, order: Order) -> tuple[int, Any] | None:
    """Like Elasticsearch: min (asc) or max (desc) of a multi-valued field; avg over responses."""
    scope = order.scope
    if isinstance(scope, ResponseFilterScope):
        key = scope.question or scope.property or ""
        raw = [
            v
            for r in _user_responses(doc, scope.user)
            for v in _as_list(r["values"].get(key) if scope.question else r.get(key))
        ]
        numbers = [n for v in raw if (n := _as_number(v)) is not None and not isinstance(v, str)]
        if numbers and len(numbers) == len(raw):
            return (0, sum(numbers) / len(numbers))
        values = [_sortable(v) for v in raw]
    else:
        values = [_sortable(v) for v in _scope_values(doc, scope)]
    if not values:
        return None
    return min(values) if order.order == SortOrder.asc else max(values)


def _sort_docs(docs: list[Doc], sort: Sequence[Order]) -> list[Doc]:
    keys = {id(d): [_sort_value(d, o) for o in sort] for d in docs}
    descending = [o.order == SortOrder.desc for o in sort]

    def compare(a: Doc, b: Doc) -> int:
        for va, vb, desc in zip(keys[id(a)], keys[id(b)], descending, strict=True):
            if va is None and vb is None:
                continue
            if va is None:
                return 1  # missing values last, whatever the direction
            if vb is None:
                return -1
            if va == vb:
                continue
            result = -1 if va < vb else 1
            return -result if desc else result
        return int(a["_seq"]) - int(b["_seq"])

    return sorted(docs, key=cmp_to_key(compare))


def _random_for_user(user_id: Any, record_id: UUID) -> float:
    """Deterministic per-user shuffle, as Elasticsearch's seeded ``random_score`` gives each annotator."""
    digest = hashlib.sha1(f"{user_id}:{record_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0 or nb == 0:
        return 0.0
    return dot / (na * nb)


# --------------------------------------------------------------------------- the engine


@SearchEngine.register(engine_name=ENGINE_NAME)
class GrevalSearchEngine(SearchEngine):
    """In-process search engine; every instance shares one index for the whole server process."""

    @classmethod
    async def new_instance(cls) -> GrevalSearchEngine:
        await _load_from_database()
        return cls()

    async def close(self) -> None:
        return None

    async def ping(self) -> bool:
        return True

    async def info(self) -> dict[str, Any]:
        return {"engine": ENGINE_NAME, "datasets": len(_INDEX.datasets)}

    async def create_index(self, dataset: Dataset) -> None:
        _INDEX.docs(dataset.id)

    async def delete_index(self, dataset: Dataset) -> None:
        _INDEX.datasets.pop(dataset.id, None)

    async def configure_metadata_property(self, dataset: Dataset, metadata_property: MetadataProperty) -> None:
        return None

    async def configure_index_vectors(self, vector_settings: VectorSettings) -> None:
        return None

    async def index_records(self, dataset: Dataset, records: Iterable[Record]) -> None:
        for record in records:
            _INDEX.put(record)

    async def partial_record_update(self, record: Record, **update: Any) -> None:
        doc = _INDEX.find(record.id, record.dataset_id)
        if doc is not None:
            doc.update({k: _enum_value(v) for k, v in update.items()})

    async def delete_records(self, dataset: Dataset, records: Iterable[Record]) -> None:
        docs = _INDEX.docs(dataset.id)
        for record in records:
            docs.pop(record.id, None)

    async def update_record_response(self, response: Response) -> None:
        doc = _INDEX.find(response.record_id, response.record.dataset_id)
        if doc is None:
            return
        doc["responses"] = [r for r in doc["responses"] if r["id"] != response.id] + [_response_doc(response)]

    async def delete_record_response(self, response: Response) -> None:
        doc = _INDEX.find(response.record_id, response.record.dataset_id)
        if doc is not None:
            doc["responses"] = [r for r in doc["responses"] if r["id"] != response.id]

    async def update_record_suggestion(self, suggestion: Suggestion) -> None:
        doc = _INDEX.find(suggestion.record_id, suggestion.record.dataset_id)
        if doc is not None:
            doc["suggestions"][suggestion.question.name] = _suggestion_doc(suggestion)

    async def delete_record_suggestion(self, suggestion: Suggestion) -> None:
        doc = _INDEX.find(suggestion.record_id, suggestion.record.dataset_id)
        if doc is not None:
            doc["suggestions"].pop(suggestion.question.name, None)

    async def get_dataset_progress(self, dataset: Dataset) -> dict[str, Any]:
        if dataset.is_draft:
            return {}
        docs = _INDEX.docs(dataset.id).values()
        counts = Counter(str(d["status"]) for d in docs)
        return {"total": sum(counts.values()), **counts}

    async def get_dataset_user_progress(self, dataset: Dataset, user: User) -> dict[str, Any]:
        if dataset.is_draft:
            return {}
        counts = Counter(
            str(r["status"])
            for d in _INDEX.docs(dataset.id).values()
            for r in d["responses"]
            if r["user_id"] == user.id
        )
        return {"total": sum(counts.values()), **counts}

    def _candidates(
        self, dataset: Dataset, query: TextQuery | str | None, flt: EngineFilter | None
    ) -> list[tuple[Doc, float]]:
        hits: list[tuple[Doc, float]] = []
        for doc in _INDEX.docs(dataset.id).values():
            if flt is not None and not _matches(doc, flt):
                continue
            score = 1.0
            if query is not None:
                score = _text_score(doc, query, dataset)
                if score <= 0:
                    continue
            hits.append((doc, score))
        return hits

    async def search(
        self,
        dataset: Dataset,
        query: TextQuery | str | None = None,
        filter: EngineFilter | None = None,
        sort: list[Order] | None = None,
        offset: int = 0,
        limit: int = 100,
        user_id: Any = None,
    ) -> SearchResponses:
        hits = self._candidates(dataset, query, filter)
        items: list[SearchResponseItem]
        if sort:
            ordered = _sort_docs([d for d, _ in hits], sort)
            items = [SearchResponseItem(record_id=d["id"], score=None) for d in ordered[offset : offset + limit]]
        else:
            if user_id is not None:
                hits = [(d, s * _random_for_user(user_id, d["id"])) for d, s in hits]
            if query is not None or user_id is not None:
                hits.sort(key=lambda h: (-h[1], h[0]["_seq"]))
            items = [SearchResponseItem(record_id=d["id"], score=s) for d, s in hits[offset : offset + limit]]
        return SearchResponses(items=items, total=len(hits))

    async def similarity_search(
        self,
        dataset: Dataset,
        vector_settings: VectorSettings,
        value: list[float] | None = None,
        record: Record | None = None,
        query: TextQuery | str | None = None,
        filter: EngineFilter | None = None,
        max_results: int = 100,
        order: SimilarityOrder = SimilarityOrder.most_similar,
        threshold: float | None = None,
    ) -> SearchResponses:
        if bool(value) == bool(record):
            raise ValueError("Must provide either vector value or record to compute the similarity search")
        excluded: UUID | None = None
        vector = value
        if not vector and record is not None:
            excluded = record.id
            vector = record.vector_value_by_vector_settings(vector_settings)
        if not vector:
            raise ValueError("Cannot find a vector value to apply with provided info")
        key = str(vector_settings.id)
        sign = -1.0 if order == SimilarityOrder.least_similar else 1.0
        scored: list[tuple[Doc, float]] = []
        for doc, _ in self._candidates(dataset, query, filter):
            other = doc["vectors"].get(key)
            if other is None or doc["id"] == excluded:
                continue
            # Elasticsearch's cosine similarity score: (1 + cos) / 2
            scored.append((doc, (1.0 + sign * _cosine(vector, other)) / 2.0))
        scored.sort(key=lambda h: (-h[1], h[0]["_seq"]))
        top = scored[:max_results]
        total = len(top)
        if threshold is not None:
            top = [h for h in top if h[1] >= threshold]
        return SearchResponses(items=[SearchResponseItem(record_id=d["id"], score=s) for d, s in top], total=total)

    async def compute_metrics_for(self, metadata_property: MetadataProperty) -> MetadataMetrics:
        docs = _INDEX.docs(metadata_property.dataset_id).values()
        values = [v for d in docs for v in _as_list(d["metadata"].get(metadata_property.name))]
        if metadata_property.type == MetadataPropertyType.terms:
            counts = Counter(str(v) for v in values)
            ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            return TermsMetrics(total=len(values), values=[TermsMetrics.TermCount(term=t, count=c) for t, c in ordered])
        numbers = [n for v in values if (n := _as_number(v)) is not None]
        if metadata_property.type == MetadataPropertyType.integer:
            ints = [int(n) for n in numbers]
            return IntegerMetadataMetrics(min=min(ints, default=None), max=max(ints, default=None))
        return FloatMetadataMetrics(min=min(numbers, default=None), max=max(numbers, default=None))


__all__ = ["ENGINE_NAME", "GrevalSearchEngine", "RecordSortField"]
