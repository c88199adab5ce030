"""What people label: the labelable units and the pure choice among them (no I/O, no Argilla).

Every pick carries its inclusion probability; a push records it in the store so agreement estimated on a
non-uniform sample (stratified, uncertain-first) can be reweighted honestly (Horvitz-Thompson:
weight = 1 / probability).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from typing import Literal

from greval.annotation.errors import AnnotationError
from greval.errors import option

Strategy = Literal["all", "random", "stratified", "uncertain"]
STRATEGIES: tuple[Strategy, ...] = ("all", "random", "stratified", "uncertain")


@dataclass(frozen=True)
class Unit:
    """One thing a person can label: a record (``item_id == ""``) or one chunk / triple of it."""

    record_hash: str
    item_id: str
    stratum: str  # the judge's verdict (label, or value as text)
    confidence: float | None = None
    disagreement: float = 0.0  # share of a judge panel's other judges that gave another verdict

    @cached_property
    def key(self) -> tuple[str, str]:
        """Computed once per unit (kept in its ``__dict__``): sorts and lookups of a review read it millions of
        times."""
        return (self.record_hash, self.item_id)


_by_key = attrgetter("key")


@dataclass(frozen=True)
class Pick:
    """A selected unit, why it was selected, and the probability it had of being selected."""

    unit: Unit
    selection: str
    probability: float
    rank: int


def _shuffled(units: Sequence[Unit], rng: random.Random) -> list[Unit]:
    ordered = sorted(units, key=_by_key)  # independent of the input order
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
        raise AnnotationError(f"{option('strategy')} {strategy!r}: choose one of {', '.join(STRATEGIES)}")
    if not 0.0 <= control_share <= 1.0:
        raise AnnotationError(f"{option('control_share')} {control_share}: give a share between 0 and 1")
    if n is not None and n < 1:
        raise AnnotationError(f"{option('select.n')} {n}: give a positive number of items")
    rng = random.Random(seed)
    total = len(units)
    if strategy == "all" or n is None or n >= total:
        if strategy != "all" and n is None:
            n_items = f"{option('select.n')} (how many items to label)"
            raise AnnotationError(f"{option('strategy')} {strategy} needs {n_items}")
        ordered = sorted(units, key=_by_key)
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
        by_doubt = _doubt_sorted(units, rng, panel=False)
        uncertain, rest = by_doubt[:n_uncertain], by_doubt[n_uncertain:]
        picks = [Pick(u, "uncertain", 1.0, i) for i, u in enumerate(uncertain)]
        if rest and n_control:
            p = min(1.0, n_control / len(rest))
            control = _shuffled(rest, rng)[:n_control]
            picks += [Pick(u, "control", p, n_uncertain + i) for i, u in enumerate(control)]
    return picks


# ==================================================================================== review rounds
UNCERTAIN = "uncertain"
CONTROL = "control:"


def doubt_order(units: Sequence[Unit], seed: int) -> list[Unit]:
    """Most doubtful first: panel disagreement (highest first), then confidence (lowest first; unknown counts
    as confident), ties broken by a seeded shuffle — the same order in every round of a review."""
    return _doubt_sorted(units, random.Random(seed), panel=True)


def _doubt_sorted(units: Sequence[Unit], rng: random.Random, panel: bool) -> list[Unit]:
    """``units`` by panel disagreement (highest first; only if ``panel``), then confidence (lowest first, unknown
    counts as 1.0), then a seeded random tie-break drawn in key order (independent of the input order)."""
    tie = {u.key: rng.random() for u in sorted(units, key=_by_key)}
    parts = [[1.0 if u.confidence is None else u.confidence for u in units], [tie[u.key] for u in units]]
    if panel:
        parts.insert(0, [-u.disagreement for u in units])
    return _sorted_by(units, parts)


def _sorted_by(units: Sequence[Unit], parts: Sequence[Sequence[float]]) -> list[Unit]:
    """``units`` stably sorted by the tuple of ``parts`` (one value per unit each, most significant first).

    One stable sort per part, the least significant first, gives the same order as one sort by the tuples and
    is several times faster (floats compare directly, not tuple by tuple); NaN compares inconsistently, so
    with a NaN the tuples are sorted as they are."""
    if any(math.isnan(sum(part)) for part in parts):  # a NaN in it (or inf and -inf: sorted as tuples too)
        return [units[i] for i in sorted(range(len(units)), key=lambda i: tuple(part[i] for part in parts))]
    order = list(range(len(units)))
    for part in reversed(parts):
        order.sort(key=part.__getitem__)
    return [units[i] for i in order]


def _rest(
    order: Sequence[Unit], certain: Collection[tuple[str, str]], controls: Collection[tuple[str, str]]
) -> tuple[dict[str, list[Unit]], dict[str, list[Unit]], dict[str, list[Unit]]]:
    """The units outside the take-all slice by verdict stratum, in ``order``: all of them, those drawn as
    controls before, and those not drawn yet (one pass: a review round reads thousands of units)."""
    rest: dict[str, list[Unit]] = defaultdict(list)
    for u in order:
        if u.key not in certain:
            rest[u.stratum].append(u)
    drawn: dict[str, list[Unit]] = {h: [] for h in rest}
    undrawn: dict[str, list[Unit]] = {h: [] for h in rest}
    for h, members in rest.items():
        for u in members:
            (drawn if u.key in controls else undrawn)[h].append(u)
    return rest, drawn, undrawn


def review_round(
    units: Sequence[Unit],
    previous: Mapping[tuple[str, str], str],
    batch: int,
    control_share: float,
    seed: int,
    round_no: int,
) -> list[Pick]:
    """The whole selection of a review after one more round, every unit with its current inclusion probability.

    A review is one sampling design that grows: a take-all slice of the most doubtful units (the first
    ``U`` of :func:`doubt_order`, probability 1) and, from the rest, a random control sample stratified by the
    judge's verdict (probability ``c_h / N_h`` in verdict stratum ``h``). Each round extends the take-all
    prefix by ``batch - round(batch * control_share)`` units and adds new control draws so that about
    ``batch`` units are new. Units once selected stay selected: a control unit the growing prefix reaches
    becomes part of it, and the controls left in the rest are still a simple random sample of it (a random
    sample restricted to a fixed subset is a random sample of that subset), so the probabilities returned
    hold for the cumulative sample, and agreement over every round's labels is weighted with them.

    ``previous``: (record hash, item id) -> selection (``uncertain`` or ``control:<verdict>``) of the earlier
    rounds. ``round_no`` seeds this round's control draws.
    """
    if batch < 1:
        raise AnnotationError(f"{option('batch')} {batch}: give a positive number of items")
    if not 0.0 <= control_share <= 1.0:
        raise AnnotationError(f"{option('control_share')} {control_share}: give a share between 0 and 1")
    order = doubt_order(units, seed)
    by_key = {u.key: u for u in units}
    taken = {k for k, sel in previous.items() if sel == UNCERTAIN and k in by_key}
    n_uncertain = batch - round(batch * control_share)
    size = sum(1 for k in previous if previous[k] == UNCERTAIN) + n_uncertain
    certain: list[Unit] = [u for u in order[:size]]
    certain += [by_key[k] for k in sorted(taken - {u.key for u in certain})]
    certain_keys = {u.key for u in certain}
    new_certain = sum(1 for u in certain if u.key not in previous)
    controls = {k for k, sel in previous.items() if sel.startswith(CONTROL)}
    rest, drawn, undrawn = _rest(order, certain_keys, controls)
    budget = max(0, batch - new_certain)
    room = {h: len(rest[h]) - len(drawn[h]) for h in rest}
    rng = random.Random(f"{seed}:{round_no}")
    # Verdicts with no control draw yet get one first (a stratum never drawn from leaves its items with no
    # chance of selection, and the figures could not speak for them); the rest of the budget goes evenly.
    first = [h for h in sorted(rest) if not drawn[h] and room[h] > 0]
    rng.shuffle(first)
    alloc = dict.fromkeys(rest, 0) | dict.fromkeys(first[:budget], 1)
    more = allocate({h: room[h] - alloc[h] for h in rest}, budget - sum(alloc.values()))
    alloc = {h: alloc[h] + more[h] for h in rest}
    for h in sorted(rest):
        drawn[h] = drawn[h] + _shuffled(undrawn[h], rng)[: alloc[h]]
    picks = [Pick(u, UNCERTAIN, 1.0, i) for i, u in enumerate(certain)]
    for h in sorted(drawn):
        p = len(drawn[h]) / len(rest[h])
        picks += [Pick(u, f"{CONTROL}{h}", p, len(picks) + i) for i, u in enumerate(drawn[h])]
    return picks
