"""Reproducible random samples (``greval run --sample N --seed S`` and ``--sample-items N``).

Both draws rank what they choose from by a seeded hash and keep the lowest ranks, so a draw is a pure function
of the seed and what is drawn from, never of row positions:

- **records**: ranked by ``sha256(seed, record id)`` (the id is the id column's value, else the record's content
  hash). Reordering the file keeps the sample; a larger N with the same seed draws a superset of a smaller one;
  the same N and seed on the same dataset draw the same records, so a sampled run resumes and a re-run pays
  nothing twice. An edited record keeps its place in the sample when it has an id column.
- **items** (the chunks / triples a many-metric judges one by one): ranked by ``sha256(seed, record content hash,
  item id)``. Ranked by content rather than by record id because verdicts are keyed by content: two ids with the
  same content are judged once, on the same items, whichever comes first in the file.

Item ids are never changed and a sampled item's verdict is the same verdict an unsampled run would store (keyed
by spec, judge, record content and item id): see docs/sampling.md.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field


class Sample(BaseModel):
    """What to draw: N records and / or at most N items per record, from a seed."""

    model_config = ConfigDict(frozen=True)

    records: int | None = Field(None, ge=1, description="Judge this many records drawn at random (None: all).")
    items: int | None = Field(None, ge=1, description="Many-metrics: judge at most this many items per record.")
    seed: int = Field(0, description="The draw's seed: the same seed draws the same sample.")


def rank(seed: int, *parts: str) -> int:
    """The seeded rank of one thing to draw (lower ranks are drawn first)."""
    blob = "\x1f".join((str(seed), *parts))
    return int.from_bytes(hashlib.sha256(blob.encode("utf-8", "surrogatepass")).digest(), "big")


class HasId(Protocol):
    @property
    def id(self) -> str: ...


R = TypeVar("R", bound=HasId)


def sample_records(rows: Iterable[R], n: int, seed: int) -> tuple[list[R], int]:
    """The ``n`` rows whose ids rank lowest under ``seed``, in the order they were read, and how many rows were
    read. ``rows`` is read once to its end; only ``n`` rows are held at a time."""
    heap: list[tuple[int, int, R]] = []  # (-rank, -position, row): the root is the worst row kept
    total = 0
    for pos, row in enumerate(rows):
        total += 1
        entry = (-rank(seed, "record", row.id), -pos, row)
        if len(heap) < n:
            heapq.heappush(heap, entry)
        elif entry[:2] > heap[0][:2]:
            heapq.heapreplace(heap, entry)
    kept = sorted(heap, key=lambda e: -e[1])
    return [row for _, _, row in kept], total


def sample_items(ids: Sequence[str], n: int, seed: int, content: str) -> list[str]:
    """At most ``n`` of a record's item ids, drawn by ``seed`` and the record's content hash, in item order."""
    if len(ids) <= n:
        return list(ids)
    chosen = set(sorted(ids, key=lambda i: rank(seed, "item", content, i))[:n])
    return [i for i in ids if i in chosen]
