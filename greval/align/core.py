"""The whole align run over labelled units, without I/O: split once, search on the search part, instantiate
the winner from the whole search part, decide once on the test part. Driven by the store in ``greval align``
and by simulated answers in the tests (the null test runs it hundreds of times)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from greval.agreement.models import AgreementScale
from greval.align.decide import CEILING_METRIC, decide
from greval.align.generators import Generator, generators
from greval.align.meter import Meter, OutOfBudget
from greval.align.models import (
    AlignEvent,
    AlignNote,
    AlignOptions,
    Ceiling,
    Cost,
    Decision,
    Example,
    Frozen,
    SplitSummary,
    Unit,
)
from greval.align.objective import Scorer, default_objective
from greval.align.ports import JudgeFn, Optimizer
from greval.align.search import Context, Search, SearchResult
from greval.align.split import Split, split_units
from greval.align.view import Tracer
from greval.spec import CategoricalScale, Spec


class Outcome(Frozen):
    """What one align run found and decided."""

    split: SplitSummary
    search: SearchResult
    final: Spec | None = None
    examples: tuple[Example, ...] = ()
    decision: Decision
    spent: Cost
    stopped: str


def summary(split: Split, seed: int) -> SplitSummary:
    part = split.search
    return SplitSummary(
        seed=seed,
        records_search=len({u.record_hash for u in part.units}),
        units_search=len(part.units),
        records_test=len({u.record_hash for u in split.test}),
        units_test=len(split.test),
        fold_units=tuple(len(part.fold_units(k)) for k in range(part.k)),
        test_units=tuple(u.key for u in split.test),
        fold_of={u.key: part.folds[u.record_hash] for u in part.units},
    )


def reserve(base: Spec, test: Sequence[Unit], judge: JudgeFn, optimizer: Optimizer, options: AlignOptions) -> Cost:
    """What the decision may need, held back from the search: the current spec's missing test verdicts, the
    winner's on every test unit (with room for examples), and the optimizer's calls for its final instance."""
    room = options.example_tokens * 4 + 2000  # the examples' characters, and room for rewritten text
    judged = judge.estimate(base, test) + judge.estimate(base, test, fresh=True, extra_chars=room)
    labels = len(base.scale.labels) if isinstance(base.scale, CategoricalScale) else len(base.scale.ranges)
    rewrites = options.rounds if options.rewrites else 0
    return judged + optimizer.allowance(base, rewrites, max(options.shots, default=0) * labels)


async def align_units(
    base: Spec,
    units: Sequence[Unit],
    scale: AgreementScale,
    judge: JudgeFn,
    optimizer: Optimizer,
    options: AlignOptions,
    *,
    meter: Meter | None = None,
    records: Mapping[str, Mapping[str, Any]] | None = None,
    tracer: Tracer | None = None,
    emit: Callable[[AlignEvent], None] | None = None,
    strategies: dict[str, Generator] | None = None,
    ceiling: Ceiling | None = None,
    used: frozenset[str] = frozenset(),
) -> Outcome:
    """Split, search, instantiate the winner, decide (see the module doc). ``ceiling``: people's agreement with
    each other as the agreement stage reports it (greval.align.labels.human_ceiling): the search stops when it
    reaches it (when it is the objective's figure), and the decision shows it. ``used``: record hashes the test
    part may not hold (the ledger's; greval.align.split.split_units)."""
    say = emit or (lambda event: None)
    meter = meter or Meter(options.budget_calls, options.budget_tokens)
    objective = options.objective or default_objective(scale)
    scorer = Scorer(scale, objective)
    split = split_units(units, options.test_share, options.folds, options.seed, used)
    if meter.limited:
        meter.reserve = reserve(base, split.test, judge, optimizer, options)
    stop_at = ceiling.value if ceiling is not None and CEILING_METRIC.get(ceiling.metric) == objective else None
    search = Search(
        Context(
            base=base,
            part=split.search,
            scale=scale,
            scorer=scorer,
            judge=judge,
            optimizer=optimizer,
            generators=strategies or generators(),
            options=options,
            meter=meter,
            records={h: dict(d) for h, d in (records or {}).items()},
            tracer=tracer,
            emit=say,
            ceiling=stop_at,
        )
    )
    found = await search.run()
    final: Spec | None = None
    examples: tuple[Example, ...] = ()
    if found.best.recipe.steps:
        try:
            inst = await search.final(found.best.recipe)
        except OutOfBudget as exc:
            say(AlignNote(text=f"the winner could not be instantiated within the budget ({exc})"))
            inst = None
        if inst is not None and inst.spec is None:
            say(AlignNote(text=f"the winner does not apply to the whole search part: {inst.note}"))
        if inst is not None and inst.spec is not None:
            final = inst.spec
            examples = tuple(Example(unit=u, answer=a, reason=r, reason_from=s) for u, a, r, s in inst.shown)
    try:
        decision = await decide(base, final, split.test, judge, scorer, options, meter, tracer, ceiling)
    except OutOfBudget as exc:
        decision = Decision(
            objective=objective,
            adopted=False,
            min_gain=options.min_gain,
            message=f"no decision: judging the test part does not fit the budget ({exc}); the current spec stays",
        )
    return Outcome(
        split=summary(split, options.seed),
        search=found,
        final=final,
        examples=examples,
        decision=decision,
        spent=meter.spent,
        stopped=found.stopped,
    )


__all__ = ["Outcome", "align_units", "reserve", "summary"]
