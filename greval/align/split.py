"""The once-only split of the labelled units by record, and the search part's folds.

Units are grouped by record content (``record_hash``): every chunk of a record, and every record id sharing one
content, fall on the same side, so a few-shot example (a record's content) can never be the item it is scored
on. Groups are stratified by their people's label and ranked by a seeded hash (``greval.dataset.sample.rank``):
the split is a pure function of the seed and the labelled records, never of their order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from pydantic import Field

from greval.align.models import Frozen, Unit
from greval.dataset.sample import rank
from greval.errors import UserError, option


class SearchPart(Frozen):
    """The units the search may read, each record's content in one of ``k`` folds."""

    units: tuple[Unit, ...]
    folds: dict[str, int] = Field(description="record_hash -> fold (0..k-1).")
    k: int

    def fold_units(self, fold: int) -> tuple[Unit, ...]:
        return tuple(u for u in self.units if self.folds[u.record_hash] == fold)

    def training_units(self, fold: int | None) -> tuple[Unit, ...]:
        """The units a fold's instance may learn from: every other fold (all the search part for None)."""
        return tuple(u for u in self.units if fold is None or self.folds[u.record_hash] != fold)


class Split(Frozen):
    """The search part and the test part, which no search step reads (the search is handed ``search`` only)."""

    search: SearchPart
    test: tuple[Unit, ...]


def _groups(units: Sequence[Unit]) -> dict[str, list[Unit]]:
    out: dict[str, list[Unit]] = {}
    for u in units:
        out.setdefault(u.record_hash, []).append(u)
    return out


def _stratum(units: Sequence[Unit]) -> int:
    """A group's label for stratification: its units' most frequent (rounded) consensus, lowest on ties."""
    counts = Counter(round(u.human) for u in units)
    top = max(counts.values())
    return min(c for c, n in counts.items() if n == top)


def _allocate(sizes: Mapping[int, int], total: int) -> dict[int, int]:
    """``total`` spread over strata in proportion to their sizes (largest remainders; ties to the lower stratum)."""
    n = sum(sizes.values())
    exact = {s: total * size / n for s, size in sizes.items()}
    out = {s: int(v) for s, v in exact.items()}
    left = total - sum(out.values())
    for s in sorted(exact, key=lambda s: (-(exact[s] - out[s]), s))[:left]:
        out[s] += 1
    return out


def minimum_records(folds: int, test_share: float) -> int:
    """The fewest labelled records a split needs: 2 per fold in the search part and 2 in the test part."""
    n = 2
    while True:
        test = round(test_share * n)
        if test >= 2 and n - test >= 2 * folds:
            return n
        n += 1


def test_size(records: int, test_share: float, folds: int) -> int:
    """The records of the test part, of ``records`` labelled ones."""
    return min(max(2, round(test_share * records)), records - 2 * folds)


def split_units(
    units: Sequence[Unit], test_share: float, folds: int, seed: int, spent: Collection[str] = frozenset()
) -> Split:
    """Split once by record into a search part (in ``folds`` folds) and a test part, stratified by label. The
    test part is drawn from records not in ``spent`` (record hashes the ledger says are used: an earlier
    decision's test part, the version in use's few-shot examples); spent records may still be searched on."""
    groups = _groups(units)
    need = minimum_records(folds, test_share)
    if len(groups) < need:
        raise UserError(
            f"{len(groups)} labelled record(s); {folds} folds with a test share of {test_share:g} need at least "
            f"{need} (2 per fold, 2 for the test): label more records, or lower {option('folds')}"
        )
    n_test = test_size(len(groups), test_share, folds)
    fresh = [h for h in groups if h not in spent]
    if len(fresh) < n_test:
        raise UserError(
            f"{len(fresh)} fresh labelled record(s) of {len(groups)} (the others were an earlier align decision's "
            f"test part or are few-shot examples of the version in use); this split's test part needs {n_test}: "
            f"label more records, or decide on used labels with {option('reuse_test')}"
        )
    strata: dict[int, list[str]] = {}
    for h, members in groups.items():
        strata.setdefault(_stratum(members), []).append(h)
    for s in strata:
        strata[s].sort(key=lambda h: rank(seed, "align-split", h))
    eligible = {s: [h for h in hs if h not in spent] for s, hs in strata.items()}
    take = _allocate({s: len(v) for s, v in eligible.items() if v}, n_test)
    test_groups = {h for s, hs in eligible.items() for h in hs[: take.get(s, 0)]}
    # Folds: the search groups in stratum order, each stratum in its seeded order, dealt round-robin.
    order = [h for s in sorted(strata) for h in strata[s] if h not in test_groups]
    fold_of = {h: i % folds for i, h in enumerate(order)}
    search = tuple(u for u in units if u.record_hash not in test_groups)
    return Split(
        search=SearchPart(units=search, folds=fold_of, k=folds),
        test=tuple(u for u in units if u.record_hash in test_groups),
    )


__all__ = ["SearchPart", "Split", "minimum_records", "split_units", "test_size"]
