"""What people label: the labelable units and the pure choice among them (no I/O, no Argilla).

Every pick carries its inclusion probability; a push records it in the store so agreement estimated on a
non-uniform sample (stratified, uncertain-first) can be reweighted honestly (Horvitz-Thompson:
weight = 1 / probability).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from greval.annotation.errors import AnnotationError

Strategy = Literal["all", "random", "stratified", "uncertain"]
STRATEGIES: tuple[Strategy, ...] = ("all", "random", "stratified", "uncertain")


@dataclass(frozen=True)
class Unit:
    """One thing a person can label: a record (``item_id == ""``) or one chunk / triple of it."""

    record_hash: str
    item_id: str
    stratum: str  # the judge's verdict (label, or value as text)
    confidence: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.record_hash, self.item_id)


@dataclass(frozen=True)
class Pick:
    """A selected unit, why it was selected, and the probability it had of being selected."""

    unit: Unit
    selection: str
    probability: float
    rank: int


def _shuffled(units: Sequence[Unit], rng: random.Random) -> list[Unit]:
    ordered = sorted(units, key=lambda u: u.key)  # independent of the input order
    rng.shuffle(ordered)
    return ordered


def allocate(sizes: Mapping[str, int], n: int) -> dict[str, int]:
    """Split ``n`` across strata as evenly as their sizes allow (rare labels are covered, not drowned)."""
    alloc = dict.fromkeys(sizes, 0)
    left = min(n, sum(sizes.values()))
    open_ = sorted(s for s in sizes if sizes[s] > 0)
    while left > 0 and open_:
        share = max(1, left // len(open_))
        for s in list(open_):
            take = min(share, sizes[s] - alloc[s], left)
            alloc[s] += take
            left -= take
            if alloc[s] >= sizes[s]:
                open_.remove(s)
            if left == 0:
                break
    return alloc


def select(
    units: Sequence[Unit],
    strategy: Strategy,
    n: int | None = None,
    seed: int = 0,
    control_share: float = 0.2,
) -> list[Pick]:
    """Choose what people label, with each unit's inclusion probability.

    - ``all``: everything (probability 1).
    - ``random``: a simple random sample of n (probability n/N).
    - ``stratified``: by the judge's verdict, n split evenly across verdicts (probability n_h/N_h).
    - ``uncertain``: the least confident verdicts first (a take-all stratum, probability 1), plus a random
      control slice (``control_share`` of n) drawn from the rest (probability n_c/(N - n_u)), so the
      uncertain bias can be undone when estimating agreement. Unknown confidence counts as confident.
    """
    if strategy not in STRATEGIES:
        raise AnnotationError(f"--select {strategy!r}: choose one of {', '.join(STRATEGIES)}")
    if not 0.0 <= control_share <= 1.0:
        raise AnnotationError(f"--control-share {control_share}: give a share between 0 and 1")
    if n is not None and n < 1:
        raise AnnotationError(f"--n {n}: give a positive number of items")
    rng = random.Random(seed)
    total = len(units)
    if strategy == "all" or n is None or n >= total:
        if strategy != "all" and n is None:
            raise AnnotationError(f"--select {strategy} needs --n (how many items to label)")
        ordered = sorted(units, key=lambda u: u.key)
        return [Pick(u, "all", 1.0, i) for i, u in enumerate(ordered)]
    picks: list[Pick] = []
    if strategy == "random":
        chosen = _shuffled(units, rng)[:n]
        picks = [Pick(u, "random", n / total, i) for i, u in enumerate(chosen)]
    elif strategy == "stratified":
        by: dict[str, list[Unit]] = defaultdict(list)
        for u in units:
            by[u.stratum].append(u)
        alloc = allocate({s: len(v) for s, v in by.items()}, n)
        rows: list[tuple[Unit, str, float]] = []
        for s in sorted(by):
            for u in _shuffled(by[s], rng)[: alloc[s]]:
                rows.append((u, f"stratum:{s}", alloc[s] / len(by[s])))
        rng.shuffle(rows)  # interleave strata so a partial annotation pass still covers every label
        picks = [Pick(u, sel, p, i) for i, (u, sel, p) in enumerate(rows)]
    else:  # uncertain
        n_control = round(n * control_share)
        n_uncertain = n - n_control
        tie = {u.key: rng.random() for u in sorted(units, key=lambda u: u.key)}
        by_doubt = sorted(units, key=lambda u: (1.0 if u.confidence is None else u.confidence, tie[u.key]))
        uncertain, rest = by_doubt[:n_uncertain], by_doubt[n_uncertain:]
        picks = [Pick(u, "uncertain", 1.0, i) for i, u in enumerate(uncertain)]
        if rest and n_control:
            p = min(1.0, n_control / len(rest))
            control = _shuffled(rest, rng)[:n_control]
            picks += [Pick(u, "control", p, n_uncertain + i) for i, u in enumerate(control)]
    return picks
