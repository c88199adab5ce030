"""The search: propose → evaluate by cross-validation → keep the best few → propose again from them.

Honest nesting: a candidate is a :class:`Recipe`; for each fold k it is instantiated from the other folds only
(few-shot examples and the disagreements a rewrite sees come from there, through a :class:`LabelView` that
holds nothing else) and judged on fold k. Its score is the objective over the out-of-fold answers of every
search unit, so a candidate is never scored on an item it learnt from. Selection reads these scores only; the
test part is not handed to the search at all. A parent's out-of-fold answers are what its children learn
from (for fold k: its answers on the other folds).

Stops after ``rounds`` rounds, after a round without improvement, when the best score reaches the people's own
agreement (the human ceiling, when it is the same figure), or when nothing fits the budget any more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from greval.agreement.models import AgreementScale
from greval.align.generators import Generator, Instance, TrainContext
from greval.align.meter import Meter, OutOfBudget
from greval.align.models import (
    AlignEvent,
    AlignNote,
    AlignOptions,
    Answer,
    CandidateResult,
    CandidateScored,
    Cost,
    FoldResult,
    Frozen,
    Recipe,
    RoundStarted,
)
from greval.align.objective import Scorer, reached
from greval.align.ports import JudgeFn, Optimizer, Proposal, ReasonRequest, Reasons, RewriteRequest
from greval.align.split import SearchPart
from greval.align.view import LabelView, Tracer
from greval.errors import UserError
from greval.spec import Spec


class SearchResult(Frozen):
    """Every candidate tried, the best by cross-validation, and why the search stopped."""

    candidates: tuple[CandidateResult, ...]
    best: CandidateResult
    stopped: str


@dataclass
class _Tally:
    cost: Cost = field(default_factory=Cost)


class _Budgeted:
    """The optimizer behind the meter: each call is checked before it is made and charged after."""

    def __init__(self, inner: Optimizer, meter: Meter, tally: _Tally, reserve: bool) -> None:
        self.inner, self.meter, self.tally, self.reserve = inner, meter, tally, reserve

    def estimate_rewrite(self, request: RewriteRequest) -> Cost:
        return self.inner.estimate_rewrite(request)

    async def rewrite(self, request: RewriteRequest) -> Proposal:
        self.meter.check(self.inner.estimate_rewrite(request), reserve=self.reserve)
        out = await self.inner.rewrite(request)
        self._charge(out.cost)
        return out

    def estimate_reasons(self, requests: Sequence[ReasonRequest]) -> Cost:
        return self.inner.estimate_reasons(requests)

    async def reasons(self, requests: Sequence[ReasonRequest]) -> Reasons:
        self.meter.check(self.inner.estimate_reasons(requests), reserve=self.reserve)
        out = await self.inner.reasons(requests)
        self._charge(out.cost)
        return out

    def allowance(self, spec: Spec, rewrites: int, reasons: int) -> Cost:
        return self.inner.allowance(spec, rewrites, reasons)

    def _charge(self, cost: Cost) -> None:
        self.meter.charge(cost)
        self.tally.cost = self.tally.cost + cost


@dataclass
class Candidate:
    """A candidate while the search runs (:class:`CandidateResult` is its frozen report)."""

    recipe: Recipe
    round: int
    parent: str | None
    status: str = "scored"
    folds: dict[int, FoldResult] = field(default_factory=dict)
    oof: dict[str, Answer] = field(default_factory=dict)
    cv: float | None = None
    note: str | None = None
    tally: _Tally = field(default_factory=_Tally)
    excluded: int = 0

    def result(self) -> CandidateResult:
        return CandidateResult(
            id=self.recipe.id,
            recipe=self.recipe,
            description=self.recipe.describe(),
            round=self.round,
            parent=self.parent,
            status=self.status,
            folds=tuple(self.folds[k] for k in sorted(self.folds)),
            cv=self.cv,
            note=self.note,
            cost=self.tally.cost,
            excluded=self.excluded,
        )


@dataclass
class Context:
    """What the search works with (everything but the test part)."""

    base: Spec
    part: SearchPart
    scale: AgreementScale
    scorer: Scorer
    judge: JudgeFn
    optimizer: Optimizer
    generators: dict[str, Generator]
    options: AlignOptions
    meter: Meter
    records: dict[str, dict[str, object]]
    tracer: Tracer | None = None
    emit: Callable[[AlignEvent], None] = lambda event: None
    ceiling: float | None = None


class Search:
    """One search over the search part (see the module doc)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.candidates: dict[str, Candidate] = {}
        self.instances: dict[tuple[str, int | None], Instance] = {}

    # ---------------------------------------------------------------------------------- instances
    async def instance(self, recipe: Recipe, fold: int | None, tally: _Tally, reserve: bool = False) -> Instance:
        """The recipe's spec for ``fold`` (None: the whole search part), learnt from that fold's training units."""
        key = (recipe.id, fold)
        if key in self.instances:
            return self.instances[key]
        if not recipe.steps:
            found = Instance(self.ctx.base)
        else:
            found = await self._apply(recipe, fold, tally, reserve)
        self.instances[key] = found
        return found

    async def _apply(self, recipe: Recipe, fold: int | None, tally: _Tally, reserve: bool) -> Instance:
        c = self.ctx
        parent = await self.instance(recipe.parent, fold, tally, reserve)
        if parent.spec is None:
            return parent
        step = recipe.steps[-1]
        view = LabelView(
            c.part.training_units(fold),
            "final" if fold is None else f"train:{fold}",
            answers=self.candidates[recipe.parent.id].oof,
            records=c.records,
            tracer=c.tracer,
        )
        salt = f"{recipe.id}|{'final' if fold is None else fold}"
        train = TrainContext(
            view, parent.spec, c.scale, _Budgeted(c.optimizer, c.meter, tally, reserve), c.options, salt
        )
        got = await c.generators[step.kind].apply(step, train)
        return Instance(got.spec, got.note, parent.examples + got.examples, parent.shown + got.shown)

    # --------------------------------------------------------------------------------- evaluation
    async def evaluate(self, recipe: Recipe, round_no: int, parent: str | None) -> Candidate:
        """Instantiate the recipe per fold, judge each fold's units with its instance, score out of fold."""
        c = self.ctx
        cand = Candidate(recipe, round_no, parent)
        self.candidates[recipe.id] = cand
        try:
            specs = {k: await self.instance(recipe, k, cand.tally) for k in range(c.part.k)}
        except OutOfBudget as exc:
            cand.status, cand.note = "skipped", f"budget: {exc}"
            return cand
        missing = next((i for i in specs.values() if i.spec is None), None)
        if missing is not None:
            cand.status, cand.note = "not applicable", missing.note
            return cand
        groups: dict[str, tuple[Spec, list[int]]] = {}
        for k, inst in specs.items():
            assert inst.spec is not None
            groups.setdefault(inst.spec.hash, (inst.spec, []))[1].append(k)
        plan = [(spec, [u for k in ks for u in c.part.fold_units(k)]) for spec, ks in groups.values()]
        need = sum((c.judge.estimate(spec, units) for spec, units in plan), Cost())
        if not c.meter.fits(need):
            cand.status, cand.note = "skipped", f"budget: {c.meter.describe(need)}"
            return cand
        for spec, units in plan:
            judged = await c.judge(spec, units)
            c.meter.charge(judged.cost)
            cand.tally.cost = cand.tally.cost + judged.cost
            cand.oof.update({u.key: judged.answers[u.key] for u in units if u.key in judged.answers})
        self._score(cand, specs)
        return cand

    def _score(self, cand: Candidate, specs: dict[int, Instance]) -> None:
        c = self.ctx
        for k, inst in specs.items():
            units = c.part.fold_units(k)
            view = LabelView(units, f"score:{k}", answers=cand.oof, tracer=c.tracer)
            value, note = c.scorer.point(view.units, cand.oof)
            spec = inst.spec
            cand.folds[k] = FoldResult(
                fold=k,
                spec_hash=spec.hash if spec else None,
                units=len(units),
                score=value,
                examples=inst.examples,
                note=note,
            )
        everything = LabelView(c.part.units, "select", answers=cand.oof, tracer=c.tracer)
        cand.cv, cand.note = c.scorer.point(everything.units, cand.oof)
        cand.excluded = len(everything.units) - len(reached(everything.units, cand.oof))

    # ------------------------------------------------------------------------------------ rounds
    def _rank(self, cand: Candidate) -> tuple[float, int, int]:
        """Higher is better: the signed CV score, then fewer steps, then the earlier round."""
        score = float("-inf") if cand.cv is None else self.ctx.scorer.sign * cand.cv
        return score, -len(cand.recipe.steps), -cand.round

    def _proposals(self, beam: Sequence[Candidate], round_no: int) -> list[tuple[Candidate, Recipe]]:
        out: dict[str, tuple[Candidate, Recipe]] = {}
        for parent in beam:
            for gen in self.ctx.generators.values():
                for step in gen.propose(parent.recipe, self.ctx.base, round_no, self.ctx.options):
                    child = parent.recipe.child(step)
                    if child.id not in self.candidates and child.id not in out:
                        out[child.id] = (parent, child)
        return list(out.values())

    async def run(self) -> SearchResult:
        c = self.ctx
        c.emit(RoundStarted(round=0, candidates=1))
        base = await self.evaluate(Recipe(), 0, None)
        c.emit(CandidateScored(candidate=base.result()))
        if base.status != "scored" or base.cv is None:
            why = base.note or "its objective is undefined on the search part"
            raise UserError(f"the current spec cannot be scored on the search part ({why})")
        best, beam = base, [base]
        stopped = f"{c.options.rounds} round(s) done"
        for round_no in range(1, c.options.rounds + 1):
            todo = self._proposals(beam, round_no)
            if not todo:
                stopped = "nothing left to propose"
                break
            c.emit(RoundStarted(round=round_no, candidates=len(todo)))
            short = False
            for parent, recipe in todo:
                cand = await self.evaluate(recipe, round_no, parent.recipe.id)
                short = short or cand.status == "skipped"
                c.emit(CandidateScored(candidate=cand.result()))
            scored = [x for x in self.candidates.values() if x.status == "scored" and x.cv is not None]
            top = max(scored, key=self._rank)
            if self._rank(top)[0] <= self._rank(best)[0]:
                stopped = f"round {round_no} brought no improvement"
                if short:
                    stopped += " (some candidates did not fit the budget)"
                break
            best = top
            if best.cv is not None and best.cv == c.scorer.perfect:
                stopped = f"round {round_no} reached perfect agreement on the search part"
                break
            if c.ceiling is not None and best.cv is not None and best.cv >= c.ceiling:
                stopped = f"round {round_no} reached the human ceiling ({c.ceiling:.3f})"
                break
            if short:
                stopped = f"round {round_no}: the budget left fits no more candidates"
                c.emit(AlignNote(text=stopped))
                break
            beam = sorted(scored, key=self._rank, reverse=True)[: c.options.beam]
        return SearchResult(
            candidates=tuple(x.result() for x in self.candidates.values()), best=best.result(), stopped=stopped
        )

    async def final(self, recipe: Recipe) -> Instance:
        """The winner instantiated from the whole search part (with the budget's reserve)."""
        return await self.instance(recipe, None, _Tally(), reserve=True)


__all__ = ["Candidate", "Context", "Search", "SearchResult"]
