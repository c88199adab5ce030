"""The dry run's estimate: what ``greval align`` is likely to spend, modelled on what it does.

Round 1 always runs: every candidate the generators propose for the current spec, each judging every search
record once (fold k's units with the instance learnt from the other folds), with the prompt that candidate really
carries (a few-shot candidate's examples, chosen as the search chooses them, within the example budget), plus its
optimizer calls (one rewrite question per fold; one reason per example without a person's comment, per fold).
Then the decision: the winner on every test record and its final instance. The current spec's verdicts still
missing are added. A later round runs only when the one before improved, so it is shown apart, as what one more
round would add. Prompt tokens are prompt characters at the prompt tokens per character this judge spent on the
stored verdicts of this metric, answers at their mean answer tokens (the optimizer's at what its earlier answers
took, else at the size of the answer it is asked for); cached tokens at the share the provider cached there.
The budget meter keeps its own upper bounds (:class:`greval.align.store_judge.TokenBound`): this is an
estimate, not a limit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from greval.align.edits import scale_items, validated
from greval.align.generators import TrainContext, generators, human_answer
from greval.align.generators.fewshot import FewShot, comment, meaning
from greval.align.labels import LabelSet
from greval.align.models import AlignOptions, Cost, FewShotStep, Recipe, RewriteStep, Step, Usage
from greval.align.optimizer import reason_record, rewrite_record
from greval.align.ports import Disagreement, ReasonRequest, RewriteRequest
from greval.align.split import Split
from greval.align.store_judge import StoreOptimizer, StoreRuns, prompt_chars
from greval.align.text import confusion_text, record_text, spec_yaml
from greval.align.view import LabelView
from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.spec import CategoricalScale, Spec
from greval.store.results import item_rows

TOKENS_PER_CHAR = 0.25
"""Prompt tokens per character when no stored verdict of the judge reports its tokens (English runs near it)."""

REASON_CHARS = 200
"""A reason's characters: of a few-shot example or a disagreement (as the search sizes examples), of an answer."""


@dataclass(frozen=True)
class Rates:
    """What a judge's calls spent on average: prompt tokens per prompt character, answer tokens per call, the
    share of prompt tokens the provider read from its cache; ``seen``: the judgements they were measured on."""

    per_char: float = TOKENS_PER_CHAR
    out: float | None = None
    cached: float = 0.0
    seen: int = 0


def judge_rates(runs: StoreRuns, labels: LabelSet, cfg: JudgeConfig) -> Rates:
    """The means over this metric's stored one-call verdicts by this judge (judgements with re-asks, about twice
    the median prompt tokens per character, are left out, as the budget's calibration does)."""
    rows = item_rows(runs.store, spec_key=labels.spec_key, judge_key=cfg.key)
    spent = {r["record_hash"]: r for r in rows if r["status"] == "ok" and r["tokens_in"]}
    seen = [(prompt_chars(labels.spec, rec) * cfg.samples, spent[h]) for h, rec in labels.records.items() if h in spent]
    if not seen:
        return Rates()
    middle = median(int(row["tokens_in"]) / chars for chars, row in seen)
    single = [(chars, row) for chars, row in seen if int(row["tokens_in"]) / chars <= 1.5 * middle]
    t_in = sum(int(row["tokens_in"]) for _, row in single)
    return Rates(
        per_char=t_in / sum(chars for chars, _ in single),
        out=sum(int(row["tokens_out"] or 0) for _, row in single) / (len(single) * cfg.samples),
        cached=sum(int(row["tokens_cached"] or 0) for _, row in single) / t_in,
        seen=len(single),
    )


def answer_tokens(runs: StoreRuns, spec: Spec, cfg: JudgeConfig, chars: int, rates: Rates) -> float:
    """One answer of ``spec``'s question: the mean of its stored answers by this model, else ``chars`` (the
    size of the answer asked for) at ``rates``' tokens per character."""
    rows = item_rows(runs.store, spec_key=runs.key(spec, []), judge_key=cfg.key)
    outs = [int(r["tokens_out"]) for r in rows if r["status"] == "ok" and r["tokens_out"]]
    return sum(outs) / (len(outs) * cfg.samples) if outs else chars * rates.per_char


def _scaled(cost: Cost, factor: float) -> Cost:
    """``cost`` times ``factor`` (a mean, or a share of it), each count rounded."""

    def part(n: int) -> int:
        return round(n * factor)

    return Cost(
        models={
            m: Usage(
                calls=part(u.calls),
                tokens_in=part(u.tokens_in),
                tokens_cached=part(u.tokens_cached),
                tokens_out=part(u.tokens_out),
            )
            for m, u in cost.models.items()
        }
    )


@dataclass(frozen=True)
class Guess:
    """One round-1 candidate's estimate: its judging of the search part, its optimizer calls, and the spec its
    prompts are sized by (None: not applicable, nothing spent)."""

    judging: Cost
    asking: Cost
    spec: Spec | None


class Estimator:
    """The estimate of one align run (module doc) over the store's verdicts and the split's parts."""

    def __init__(
        self, runs: StoreRuns, labels: LabelSet, split: Split, judge: JudgeConfig, opt: StoreOptimizer
    ) -> None:
        self.runs, self.labels, self.split, self.cfg, self.opt = runs, labels, split, judge, opt
        self.rates = judge_rates(runs, labels, judge)
        self.search = self._records([u.record_hash for u in split.search.units])
        self.test = self._records([u.record_hash for u in split.test])

    def _records(self, hashes: Sequence[str]) -> list[Record]:
        return [self.labels.records[h] for h in dict.fromkeys(hashes)]

    def judging(self, spec: Spec, records: Sequence[Record]) -> Cost:
        """The judge's calls on ``records`` with ``spec``'s prompt (one per record and sample)."""
        r = self.rates
        out = r.out if r.out is not None else _answer_chars(spec) * r.per_char
        return self._calls(self.cfg, spec, records, out)

    def asking(self, spec: Spec, records: Sequence[Record], answer_chars: int) -> Cost:
        """The optimizer's calls: ``spec``'s question on each of ``records``."""
        cfg = self.opt.cfg
        return self._calls(cfg, spec, records, answer_tokens(self.runs, spec, cfg, answer_chars, self.rates))

    def _calls(self, cfg: JudgeConfig, spec: Spec, records: Sequence[Record], out: float) -> Cost:
        chars = sum(prompt_chars(spec, rec) for rec in records) * cfg.samples
        calls = len(records) * cfg.samples
        t_in = round(chars * self.rates.per_char)
        return Cost.of(cfg.label, calls, t_in, round(calls * out), round(t_in * self.rates.cached))

    def current(self) -> Cost:
        """The current spec's verdicts (and its dependencies') still missing on either part."""
        labels = self.labels
        pending = self.runs.pending(labels.spec, labels.deps, self.cfg, [*self.search, *self.test])
        return sum((self.judging(s, [rec]) for s, rec in pending), Cost())

    def _context(self, opts: AlignOptions) -> TrainContext:
        """Fold 0's training view, as the search hands it to a round-1 step (no parent answers: the examples come
        in the seeded order, of the same sizes)."""
        view = LabelView(
            self.split.search.training_units(0),
            "estimate",
            records={h: r.data for h, r in self.labels.records.items()},
        )
        return TrainContext(view, self.labels.spec, self.labels.scale, self.opt, opts, "estimate")

    def few_shot(self, step: FewShotStep, opts: AlignOptions) -> Guess:
        """The examples the step would choose, in every prompt; a reason asked per example without a comment."""
        ctx, base = self._context(opts), self.labels.spec
        chosen = FewShot().choose(step, ctx) if not base.outputs else []
        if not chosen:
            return Guess(Cost(), Cost(), None)
        answers = [human_answer(u, ctx.scale) for u in chosen]
        reasons = [comment(u, a) for u, a in zip(chosen, answers, strict=True)]
        data = base.model_dump(mode="json")
        data["examples"] = [
            *data.get("examples", []),
            *(
                FewShot.example(base, ctx, u, a, r or "x" * REASON_CHARS)
                for u, a, r in zip(chosen, answers, reasons, strict=True)
            ),
        ]
        spec = validated(data, f"{base.name} (few-shot estimate)")
        asked = [
            reason_record(
                ReasonRequest(
                    record=record_text(base, ctx.view.record(u), u.item_id), answer=a, meaning=meaning(base, a)
                )
            )
            for u, a, r in zip(chosen, answers, reasons, strict=True)
            if r is None
        ]
        units = self.split.search.units
        uncommented = sum(1 for u in units if comment(u, human_answer(u, ctx.scale)) is None)
        per_fold = self.asking(self.opt.reasoner, asked, REASON_CHARS) if asked else Cost()
        share = min(self.split.search.k * len(asked), uncommented) / len(asked) if asked else 0.0
        return Guess(self.judging(spec, self.search), _scaled(per_fold, share), spec)

    def rewrite(self, step: RewriteStep, opts: AlignOptions) -> Guess:
        """One rewrite question per fold (the spec, the confusion, the disagreements shown), then its judging."""
        ctx, base = self._context(opts), self.labels.spec
        units = ctx.view.units
        shown = tuple(
            Disagreement(
                record=record_text(base, ctx.view.record(u), u.item_id),
                judge=human_answer(u, ctx.scale),
                judge_reason="x" * REASON_CHARS,
                people=human_answer(u, ctx.scale),
            )
            for u in units[: opts.disagreements]
        )
        request = RewriteRequest(
            spec_yaml=spec_yaml(base),
            confusion=confusion_text(units, {}, ctx.scale),
            disagreements=shown,
            proposal=step.proposal,
            proposals=opts.rewrites,
            scale_items=scale_items(base),
        )
        text = [base.description, base.instructions or "", *base.steps, *scale_items(base)]
        answer = REASON_CHARS + sum(len(t) for t in text)  # the edits restate the spec's words
        asking = self.asking(self.opt.rewriter, [rewrite_record(request)] * self.split.search.k, answer)
        return Guess(self.judging(base, self.search), asking, base)

    def guess(self, step: Step, opts: AlignOptions) -> Guess:
        if isinstance(step, FewShotStep):
            return self.few_shot(step, opts)
        if isinstance(step, RewriteStep):
            return self.rewrite(step, opts)
        return Guess(self.judging(self.labels.spec, self.search), Cost(), self.labels.spec)


def _answer_chars(spec: Spec) -> int:
    """A verdict's size when no stored one reports its tokens: a reason, the longest label, the extra outputs."""
    names = [lab.name for lab in spec.scale.labels] if isinstance(spec.scale, CategoricalScale) else ["100"]
    return len(json.dumps({"reason": "x" * REASON_CHARS, "label": max(names, key=len)})) + 100 * len(spec.outputs)


@dataclass(frozen=True)
class Expected:
    """The estimate's parts (module doc)."""

    current: Cost
    per_candidate: Cost
    first_round: Cost
    decision: Cost
    later_round: Cost
    candidates: int
    measured: int

    @property
    def total(self) -> Cost:
        """The current spec's missing verdicts, round 1 and the decision."""
        return self.current + self.first_round + self.decision


def expected(est: Estimator, opts: AlignOptions) -> Expected:
    """What the run is likely to spend (module doc)."""
    base, k = est.labels.spec, est.split.search.k
    gens = generators()
    steps = [s for g in gens.values() for s in g.propose(Recipe(), base, 1, opts)]
    guesses = [est.guess(s, opts) for s in steps]
    live = [g for g in guesses if g.spec is not None]
    first = sum((g.judging + g.asking for g in guesses), Cost())
    winner = sum((est.judging(g.spec, est.test) for g in live if g.spec is not None), Cost())
    final = sum((g.asking for g in live), Cost())
    decision = _scaled(winner, 1 / len(live)) + _scaled(final, 1 / (len(live) * k)) if live else Cost()
    children = sum(len(g.propose(Recipe().child(s), base, 2, opts)) for s in steps for g in gens.values())
    per = _scaled(first, 1 / len(steps)) if steps else Cost()
    return Expected(
        current=est.current(),
        per_candidate=per,
        first_round=first,
        decision=decision,
        later_round=_scaled(first, opts.beam * children / len(steps) ** 2) if steps else Cost(),
        candidates=len(steps),
        measured=est.rates.seen,
    )


__all__ = ["Estimator", "Expected", "Guess", "Rates", "answer_tokens", "expected", "judge_rates"]
