"""The align stage's typed boundary: options, labelled units, the judge's answers, costs, candidates, the result.

Everything ``greval align`` hands from one step to the next is one of these models, so that the pure core
(split, search, scoring, decision) can be driven by simulated answers as well as by the store.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from typing import Annotated, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, computed_field

from greval.agreement.bootstrap import LEVEL, RESAMPLES, Resampling
from greval.llm.prices import RunCost
from greval.spec import Spec

Objective = Literal["kappa", "weighted_kappa", "accuracy", "macro_f1", "spearman", "mae"]
"""What the search maximises and the decision tests (as ``greval agreement`` defines each figure)."""

CATEGORICAL_OBJECTIVES: tuple[Objective, ...] = ("kappa", "weighted_kappa", "accuracy", "macro_f1")
VALUE_OBJECTIVES: tuple[Objective, ...] = ("mae", "spearman", "weighted_kappa")
LOWER_IS_BETTER: frozenset[str] = frozenset({"mae"})

#: The agreement report's name of each objective (``greval agreement`` / ``greval gate`` print these).
REPORT_NAME: dict[str, str] = {
    "kappa": "cohen_kappa",
    "weighted_kappa": "quadratic_kappa",
    "accuracy": "accuracy",
    "macro_f1": "macro_f1",
    "spearman": "spearman",
    "mae": "mae",
}


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlignOptions(Frozen):
    """How to search and decide (none of it is a flag name: ``greval.cli.align`` maps flags onto these)."""

    objective: Objective | None = Field(None, description="None: kappa for labels, mae for value scales.")
    folds: int = Field(5, ge=2, le=20, description="Cross-validation folds of the search part.")
    test_share: float = Field(0.3, gt=0.0, lt=1.0, description="Share of labelled records held out for the decision.")
    seed: int = Field(0, description="Seeds the split, the folds and every draw: the same seed, the same run.")
    min_gain: float = Field(0.0, ge=0.0, description="Adopt only when the CI's lower bound of the gain exceeds this.")
    rounds: int = Field(3, ge=1, le=10, description="Rounds of propose → evaluate → keep the best, at most.")
    beam: int = Field(2, ge=1, le=10, description="Candidates kept after a round to propose from.")
    rewrites: int = Field(2, ge=0, le=10, description="Rewrite proposals asked of the optimizer per parent and round.")
    shots: tuple[int, ...] = Field((1, 2), description="Few-shot candidates: examples per label (one candidate each).")
    example_tokens: int = Field(1500, ge=0, description="Prompt tokens the few-shot examples may take, at most.")
    label_order: bool = Field(True, description="Try the labels in reverse order (unordered labels only).")
    disagreements: int = Field(6, ge=1, le=50, description="Disagreements the optimizer sees per proposal.")
    budget_calls: int | None = Field(None, ge=0, description="Model calls align may make, at most (None: no limit).")
    budget_tokens: int | None = Field(None, ge=0, description="Tokens align may spend, at most (None: no limit).")
    resamples: int = Field(
        RESAMPLES,
        ge=100,
        validation_alias=AliasChoices("resamples", "bootstrap"),
        description="Paired bootstrap resamples of the decision (also read as `bootstrap`, its earlier name).",
    )
    level: float = Field(
        LEVEL,
        gt=0.5,
        lt=1.0,
        validation_alias=AliasChoices("level", "confidence"),
        description="The decision CI's level, 0.95 for a 95 % interval (also read as `confidence`, its earlier name).",
    )

    reuse_test: bool = Field(
        False,
        description="Draw the test part from every labelled record, also those an earlier decision read as its test "
        "part or the version in use shows as few-shot examples (the ledger; said on the page and in the evidence).",
    )

    @property
    def resampling(self) -> Resampling:
        """The decision's paired bootstrap, as one value (seeded by :attr:`seed`, as every draw)."""
        return Resampling(resamples=self.resamples, seed=self.seed, level=self.level)


class Annotation(Frozen):
    """One person's answer on a unit (as the store holds it)."""

    annotator: str
    answer: str | None = None
    comment: str | None = None


class Unit(Frozen):
    """One labelled unit: a record (or a chunk / triple of it) with the people's consensus on it.

    ``human`` is the consensus as the agreement stage reduces it: a label's code in the agreement scale's order
    (``greval.agreement.from_store.agreement_scale``), or the mean value. ``record_hash`` is the unit's group:
    units of one record content always fall on the same side of every split.
    """

    key: str = Field(description="The agreement stage's item key: record id, or record id/item id.")
    record_id: str
    record_hash: str
    item_id: str = ""
    human: float
    annotations: tuple[Annotation, ...] = ()
    probability: float | None = Field(None, description="Inclusion probability of a review design, if any.")
    stratum: str | None = None


#: The errors of a judge that could not be reached (after the run's retries): they say nothing of the prompt,
#: so align leaves their units out of a comparison instead of counting them as wrong answers.
UNREACHED = frozenset({"rate_limited", "server_error", "timeout", "connection"})


class Answer(Frozen):
    """The judge's answer on one unit: a label or a value, or neither — an error, counted as a wrong answer
    (the agreement stage's default) unless the judge could not be reached at all (``excluded``)."""

    label: str | None = None
    value: float | None = None
    reason: str | None = None
    error_kind: str | None = Field(None, description="The stored error's kind, when the answer is an error.")

    @property
    def ok(self) -> bool:
        return self.label is not None or self.value is not None

    @property
    def excluded(self) -> bool:
        """No answer because the judge could not be reached (server errors, time-outs after the retries): the
        unit is left out of every comparison this answer takes part in, and counted."""
        return not self.ok and self.error_kind in UNREACHED


class Usage(Frozen):
    """One model's calls and tokens: prompt tokens (of them, those the provider read from its prompt cache) and
    answer tokens — the split the price table prices (:func:`greval.llm.prices.run_cost`)."""

    calls: int = 0
    tokens_in: int = 0
    tokens_cached: int = 0
    tokens_out: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            calls=self.calls + other.calls,
            tokens_in=self.tokens_in + other.tokens_in,
            tokens_cached=self.tokens_cached + other.tokens_cached,
            tokens_out=self.tokens_out + other.tokens_out,
        )


class Cost(Frozen):
    """Model calls and tokens, by the model that spent them (its label, ``provider:model``: what the price table
    prices); the totals are sums over the models."""

    models: dict[str, Usage] = Field(default_factory=dict, description="Calls and tokens by model label.")

    @classmethod
    def of(cls, model: str, calls: int = 0, tokens_in: int = 0, tokens_out: int = 0, tokens_cached: int = 0) -> Cost:
        """One model's spend (nothing spent: the empty cost)."""
        usage = Usage(calls=calls, tokens_in=tokens_in, tokens_cached=tokens_cached, tokens_out=tokens_out)
        return cls(models={model: usage}) if usage != Usage() else cls()

    def _sum(self, name: str) -> int:
        return sum(int(getattr(u, name)) for u in self.models.values())

    @computed_field  # type: ignore[prop-decorator]
    @property
    def calls(self) -> int:
        return self._sum("calls")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens(self) -> int:
        """Prompt and answer tokens (what a token budget counts)."""
        return self._sum("tokens_in") + self._sum("tokens_out")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens_in(self) -> int:
        return self._sum("tokens_in")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens_cached(self) -> int:
        return self._sum("tokens_cached")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens_out(self) -> int:
        return self._sum("tokens_out")

    def __add__(self, other: Cost) -> Cost:
        models = dict(self.models)
        for name, usage in other.models.items():
            models[name] = models[name] + usage if name in models else usage
        return Cost(models=models)


class Judged(Frozen):
    """What a judge function returns: an answer per unit key (units without one are missing), and its cost."""

    answers: dict[str, Answer]
    cost: Cost = Cost()


# -------------------------------------------------------------------------------------------- recipes
class FewShotStep(Frozen):
    """Add few-shot examples drawn from the training units: the parent's mistakes first, balanced over labels."""

    kind: Literal["few_shot"] = "few_shot"
    per_label: int = Field(ge=1, le=10)


class RewriteStep(Frozen):
    """Ask the optimizer for edits (description, steps, label descriptions, instructions); ``proposal`` n of many."""

    kind: Literal["rewrite"] = "rewrite"
    proposal: int = Field(ge=0)


class LabelOrderStep(Frozen):
    """List the labels in reverse order (the judge's position bias)."""

    kind: Literal["label_order"] = "label_order"


Step = Annotated[FewShotStep | RewriteStep | LabelOrderStep, Field(discriminator="kind")]


class Recipe(Frozen):
    """A candidate: the steps that turn the current spec into it. Instantiated per fold from that fold's
    training units only, and once more from the whole search part for the test."""

    steps: tuple[Step, ...] = ()

    @cached_property
    def id(self) -> str:
        blob = json.dumps([s.model_dump() for s in self.steps], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10] if self.steps else "current"

    @property
    def parent(self) -> Recipe:
        return Recipe(steps=self.steps[:-1])

    def child(self, step: FewShotStep | RewriteStep | LabelOrderStep) -> Recipe:
        return Recipe(steps=(*self.steps, step))

    def has(self, kind: str) -> bool:
        return any(s.kind == kind for s in self.steps)

    def describe(self) -> str:
        if not self.steps:
            return "the current spec"
        parts = []
        for s in self.steps:
            if isinstance(s, FewShotStep):
                parts.append(f"few-shot ({s.per_label} per label)")
            elif isinstance(s, RewriteStep):
                parts.append(f"rewrite #{s.proposal + 1}")
            else:
                parts.append("labels reversed")
        return " + ".join(parts)


# -------------------------------------------------------------------------------------------- results
class FoldResult(Frozen):
    """One candidate on one fold: the spec version instantiated from the other folds, scored on this one."""

    fold: int
    spec_hash: str | None = None
    units: int = 0
    score: float | None = None
    examples: tuple[str, ...] = Field((), description="Unit keys the instance holds as few-shot examples.")
    note: str | None = None


class CandidateResult(Frozen):
    """A candidate's cross-validated score: its objective on the out-of-fold answers of every search unit."""

    id: str
    recipe: Recipe
    description: str
    round: int
    parent: str | None = None
    status: Literal["scored", "skipped", "not applicable"] = "scored"
    folds: tuple[FoldResult, ...] = ()
    cv: float | None = None
    note: str | None = None
    cost: Cost = Cost()
    excluded: int = Field(
        0, description="Search units left out of the score: the judge could not be reached for them (after retries)."
    )


class Difference(Frozen):
    """The paired test-part comparison: the objective of both versions and the gain (positive = better)."""

    old: float | None
    new: float | None
    gain: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    level: float = Field(validation_alias=AliasChoices("level", "confidence"), description="The CI's level (0.95).")
    resamples: int
    unit: str = Field(description="What the bootstrap resamples: records, or units within design strata.")
    n_units: int
    n_records: int
    weighted: bool = Field(False, description="Design-weighted (1/π) figures of a review design.")
    note: str | None = None
    excluded: int = Field(
        0, description="Test units left out, pairwise: the judge could not be reached for either version on them."
    )


class Ceiling(Frozen):
    """People's agreement with each other on the test part (the judge cannot be expected to beat it)."""

    metric: str
    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    note: str | None = None


class ConfusionTable(Frozen):
    """One version's answers on the test part against people's, beside the objective (categorical scales):
    accuracy, the confusion (rows: people's label; columns: the judge's, then its invalid or missing answers)
    and each label's precision and recall — scikit-learn's definitions, over the units both versions were
    judged on, each counted once (not design-weighted)."""

    version: str
    n: int
    accuracy: float
    labels: tuple[str, ...]
    confusion: tuple[tuple[int, ...], ...]
    precision: dict[str, float]
    recall: dict[str, float]


class Decision(Frozen):
    """Whether the winner replaces the current spec: only when the gain's CI lower bound exceeds ``min_gain``."""

    objective: Objective
    adopted: bool
    min_gain: float
    difference: Difference | None = None
    ceiling: Ceiling | None = None
    message: str
    tables: tuple[ConfusionTable, ...] = Field((), description="The current spec's and the winner's test-part tables.")


class SplitSummary(Frozen):
    """The once-only split by record and the search part's folds."""

    seed: int
    records_search: int
    units_search: int
    records_test: int
    units_test: int
    fold_units: tuple[int, ...]
    test_units: tuple[str, ...] = Field((), description="The test part's units (their keys).")
    fold_of: dict[str, int] = Field(default_factory=dict, description="Each search unit's fold (by key, from 0).")


class LedgerNote(Frozen):
    """Where this decision stands in the ledger of the metric's labels (greval.align.ledger)."""

    labelled: int = Field(description="Labelled records (by content) align read.")
    fresh: int = Field(
        description="Of them, those no earlier decision read as its test part and no version in use "
        "shows as a few-shot example: what the test part is drawn from (all, with reuse_test)."
    )
    tested_before: int = Field(0, description="Labelled records an earlier decision read as its test part.")
    examples: int = Field(0, description="Labelled records the version in use (or the one aligned) shows as examples.")
    reuse_test: bool = False
    number: int | None = Field(None, description="This decision's number among the metric's (None: none recorded).")
    decisions: int = Field(description="Decisions taken on this metric's labels so far, this one included (k).")
    rate: float = Field(description="The measured per-decision rate of a false adoption (r).")
    family_wise: float = Field(description="1 - (1 - r)^k: the chance that some decision so far adopted falsely.")
    repeat: bool = Field(False, description="The same run as a recorded decision: not counted again.")
    decision_id: str | None = None


class Example(Frozen):
    """A few-shot example of the final spec: which labelled unit, the label and the reason shown."""

    unit: str
    answer: str
    reason: str
    reason_from: Literal["comment", "optimizer", "label description"]


# --------------------------------------------------------------------------------------------- events
class RoundStarted(Frozen):
    round: int
    candidates: int


class CandidateScored(Frozen):
    candidate: CandidateResult


class AlignNote(Frozen):
    text: str


class Judging(Frozen):
    """Progress inside a round: judgements made of those planned."""

    done: int
    total: int


AlignEvent = RoundStarted | CandidateScored | AlignNote | Judging


# ---------------------------------------------------------------------------------------- the result
class AlignPlan(Frozen):
    """What ``--dry-run`` prints: the split, the search's shape and its estimated cost, before any call."""

    spec: str
    version: str
    judge: str
    optimizer: str
    objective: Objective
    split: SplitSummary
    first_round: int = Field(description="Candidates of the first round.")
    later_rounds: int = Field(description="Candidates of each later round, at most.")
    rounds: int
    per_candidate: Cost = Field(
        description="A round-1 candidate, on average: its judgements of the search part with the prompt it carries, "
        "and its optimizer calls (greval.align.estimate)."
    )
    current: Cost = Field(description="The current spec's verdicts still missing on the search and test parts.")
    decision: Cost = Field(description="Held back for the decision: the winner on the test part, its final instance.")
    estimate: Cost = Field(
        description="What the run is likely to spend: the current spec's missing verdicts, round 1 in full and the "
        "decision (greval.align.estimate); each later round, when the one before improved, adds ``later_round``."
    )
    later_round: Cost = Field(Cost(), description="What one later round is likely to add.")
    at_most: Cost = Field(Cost(), description="Every round in full at the budget's upper token bounds.")
    measured: int = Field(0, description="Stored verdicts the estimate's tokens per call were measured on.")
    usd: RunCost | None = Field(None, description="``estimate`` at the price table's prices (None: no table).")
    usd_later_round: RunCost | None = None
    usd_at_most: RunCost | None = None
    prices: str = Field("", description="Where the prices come from, or why there is no cost.")
    budget_calls: int | None = None
    budget_tokens: int | None = None
    notes: tuple[str, ...] = ()
    ledger: LedgerNote | None = None


class AlignResult(Frozen):
    """What ``greval align`` found, decided and wrote."""

    spec: str
    old_hash: str
    new_hash: str | None = Field(None, description="The winner's version judged on the test part (None: none).")
    adopted: bool
    objective: Objective
    decision: Decision
    best: CandidateResult
    candidates: tuple[CandidateResult, ...]
    split: SplitSummary
    stopped: str
    spent: Cost
    usd: RunCost | None = Field(None, description="``spent`` at the price table's prices (None: no table).")
    prices: str = Field("", description="Where the prices come from, or why there is no cost.")
    budget_calls: int | None = None
    budget_tokens: int | None = None
    judge: str
    optimizer: str
    datasets: tuple[str, ...] = ()
    gold: str | None = Field(None, description="The gold each unit's label is (None: people's consensus).")
    examples: tuple[Example, ...] = ()
    notes: tuple[str, ...] = ()
    new_spec: Spec | None = None
    new_search_units: int = Field(
        0, description="Search units the new version also judged, as a fold's instance (its instances were equal)."
    )
    diff: str = ""
    files: dict[str, str] = Field(default_factory=dict)
    ledger: LedgerNote | None = None


__all__ = [
    "CATEGORICAL_OBJECTIVES",
    "LOWER_IS_BETTER",
    "REPORT_NAME",
    "VALUE_OBJECTIVES",
    "AlignEvent",
    "AlignNote",
    "AlignOptions",
    "AlignPlan",
    "AlignResult",
    "Annotation",
    "Answer",
    "CandidateResult",
    "CandidateScored",
    "Ceiling",
    "ConfusionTable",
    "Cost",
    "Decision",
    "Difference",
    "Example",
    "FewShotStep",
    "FoldResult",
    "Frozen",
    "Judged",
    "Judging",
    "LabelOrderStep",
    "LedgerNote",
    "Objective",
    "Recipe",
    "RewriteStep",
    "RoundStarted",
    "SplitSummary",
    "Step",
    "Unit",
    "Usage",
]
