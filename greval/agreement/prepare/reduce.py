"""Phase 2 of prepare: one record per item. The judge's verdict (identical repeats collapse, different ones are
refused), the human answers per annotator (one annotator answering twice differently is refused), reduced to
a consensus (the majority label, a tie left out and counted; the mean value), and the invalid-answer policy
applied to the items compared. Every item set aside is counted, with a note."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from greval.agreement.prepare.answers import few, in_bounds, value_of
from greval.agreement.prepare.validate import Rows
from greval.errors import DataError, option

MISSING = -1
"""The code of a missing answer in the prevalence arrays (Reduced.all_j, all_h)."""


@dataclass
class Item:
    """One item's rows, reduced."""

    judge: set[str] = field(default_factory=set)
    """Its distinct judge answers (canonical text); more than one is an error."""
    judge_rows: int = 0
    humans: dict[str, float] = field(default_factory=dict)
    """annotator → code / value."""
    group: str | None = None
    scores: set[float] = field(default_factory=set)
    judge_value: float | None = None
    """The judge's valid answer as a code / value; None when missing or not on the scale (invalid)."""
    consensus: float | None = None
    """People's majority code or mean value; None without a human answer or on a tied majority."""


@dataclass
class Reduced:
    """The frame reduced to one record per item, and the items the judge is compared with people on."""

    order: list[str]
    """Every item, in order of first appearance."""
    items: dict[str, Item]
    group_names: list[str]
    anonymous: int
    """Items with several human rows and no annotator column (read as anonymous annotators)."""
    notes: list[str]
    compared: list[str] = field(default_factory=list)
    """Items compared: with a human consensus, and a judge answer the policy kept."""
    human: list[float] = field(default_factory=list)
    judge: list[float | None] = field(default_factory=list)
    """The compared items' judge answers after `label:X`; None where still invalid (as-wrong, opposite)."""
    labelled: list[str] = field(default_factory=list)
    """Items with at least one human answer (the ceiling's items)."""
    all_j: list[int] = field(default_factory=list)
    """Every item's judge code, or MISSING (prevalence; categorical only)."""
    all_h: list[int] = field(default_factory=list)
    all_g: list[int] = field(default_factory=list)
    missing_human: int = 0
    invalid: int = 0
    dropped: int = 0
    tied: int = 0


def reduce_items(rows: Rows, gold: Mapping[str, float | None] | None = None) -> Reduced:
    """One record per item, its consensus, and the policy applied; raises DataError for conflicting rows.
    ``gold`` (item → code / value, None when tied; an item absent has none) replaces people's consensus
    (greval.agreement.gold)."""
    order, items, notes = _collect(rows)
    group_names = sorted({g for i in order if (g := items[i].group) is not None})
    if rows.groups is not None and any(items[i].group is None for i in order):
        raise DataError("some items have no group id")
    anonymous = 0 if rows.annotator_column else sum(1 for i in order if len(items[i].humans) > 1)
    if anonymous:
        notes.append(
            f"{anonymous} item(s) have several human rows and there is no annotator column: read as anonymous "
            "annotators (#1, #2 … in file order), reduced to the majority label / mean value (ties counted), "
            "with a human–human ceiling (pairwise figures pair rows by file order; α does not depend on it)"
        )
    red = Reduced(order=order, items=items, group_names=group_names, anonymous=anonymous, notes=notes)
    _compare(rows, red, gold)
    if red.missing_human:
        notes.append(f"{red.missing_human} item(s) without a human answer left out of the comparison")
    if red.tied:
        whose = "human majority" if gold is None else "gold label"
        notes.append(f"{red.tied} item(s) whose {whose} is tied left out of the judge comparison")
    if red.invalid:
        notes.append(
            f"{red.invalid} compared/labelled item(s) with an invalid or missing judge answer: policy {rows.policy}"
        )
    return red


def _collect(rows: Rows) -> tuple[list[str], dict[str, Item], list[str]]:
    """Each item's rows gathered in order of first appearance; conflicting rows refused, repeats noted."""
    items: dict[str, Item] = {}
    twice_same: list[str] = []
    twice_diff: list[str] = []
    for r, item in enumerate(rows.items):
        rec = items.setdefault(item, Item())
        if rows.judge_text is not None and rows.judge_text[r] is not None:
            rec.judge.add(str(rows.judge_text[r]))
            rec.judge_rows += 1
        if rows.scores is not None and (score := rows.scores[r]) is not None:
            rec.scores.add(score)
        if (hv := rows.human[r]) is not None:
            who = rows.annotators[r]
            if who in rec.humans:
                (twice_same if rec.humans[who] == hv else twice_diff).append(item)
            rec.humans[who] = hv
        if rows.groups is not None and rec.group is None:
            rec.group = rows.groups[r]
    order = list(items)
    return order, items, _check_repeats(rows, order, items, twice_same, twice_diff)


def _check_repeats(
    rows: Rows, order: list[str], items: dict[str, Item], twice_same: list[str], twice_diff: list[str]
) -> list[str]:
    """Refuse an annotator's two different answers, several judge verdicts or scores for one item; note the
    identical repeats."""
    notes: list[str] = []
    if twice_diff:
        bad = list(dict.fromkeys(twice_diff))
        raise DataError(
            f"{len(bad)} item(s) have two different answers from one annotator ({few(bad)}); "
            "one answer per annotator and item is expected"
        )
    if twice_same:
        notes.append(
            f"{len(set(twice_same))} item(s) list the same annotator's identical answer on several rows: counted once"
        )
    multi = [i for i in order if len(items[i].judge) > 1]
    if multi:
        ex = multi[0]
        raise DataError(
            f"{len(multi)} item(s) have several different judge verdicts ({few(multi)}; e.g. {ex!r}: "
            f"{sorted(items[ex].judge)}); one verdict per item is expected — if rows are one item under "
            f"several conditions, leave out {option('item')} and cluster them with {option('group')}"
        )
    multi_score = [i for i in order if len(items[i].scores) > 1]
    if multi_score:
        raise DataError(f"{len(multi_score)} item(s) have several different scores ({few(multi_score)})")
    repeated = sum(1 for i in order if items[i].judge_rows > 1)
    if repeated and not rows.annotator_column:
        notes.append(f"the judge's verdict is repeated identically on the rows of {repeated} item(s): counted once")
    return notes


def judge_value(item: Item, rows: Rows) -> float | None:
    """The item's judge verdict as a label code or a value; None when missing or not on the scale."""
    verdict = next(iter(item.judge)) if item.judge else None
    if rows.categorical:
        index = rows.index
        return float(index[verdict]) if verdict in index else None
    v = value_of(verdict, rows.scale)
    return None if v is None or not in_bounds(v, rows.scale) else v


def consensus(humans: dict[str, float], categorical: bool) -> tuple[float | None, bool]:
    """(people's majority code or mean value, whether the majority is tied); (None, False) without answers."""
    if not humans:
        return None, False
    if not categorical:
        return float(np.mean(list(humans.values()))), False
    top = Counter(humans.values()).most_common()
    if len(top) > 1 and top[0][1] == top[1][1]:
        return None, True
    return top[0][0], False


def _compare(rows: Rows, red: Reduced, gold: Mapping[str, float | None] | None) -> None:
    """Each item's judge value and consensus (or gold), the prevalence codes, and the compared items under the
    policy."""
    group_index = {g: n for n, g in enumerate(red.group_names)}
    for name in red.order:
        item = red.items[name]
        item.judge_value = jval = judge_value(item, rows)
        if gold is None:
            hval, tied = consensus(item.humans, rows.categorical)
        else:
            hval, tied = gold.get(name), name in gold and gold[name] is None
        item.consensus = hval
        red.all_j.append(MISSING if jval is None or not rows.categorical else int(jval))
        red.all_h.append(MISSING if hval is None or not rows.categorical else int(hval))
        red.all_g.append(group_index[str(item.group)] if rows.groups is not None else 0)
        if not item.humans:
            red.missing_human += 1
            continue
        red.labelled.append(name)
        invalid = jval is None and rows.has_judge
        red.invalid += int(invalid)
        if tied:
            red.tied += 1
            continue
        if hval is None:  # an item the gold does not cover (the chosen annotator did not label it)
            continue
        if invalid and rows.policy == "drop":
            red.dropped += 1
            continue
        if invalid and rows.fill_code is not None:
            jval = float(rows.fill_code)
        elif invalid and rows.fill_value is not None:
            jval = rows.fill_value
        red.compared.append(name)
        red.human.append(hval)
        red.judge.append(jval)
