"""Pydantic models for agreement: the scale, the options and the (JSON-serialisable) report.

Every figure is an `Estimate`: a value that is either a real number or None with a `note` saying why
(one class, constant scores, too few items ...), the n behind it and, when bootstrapped, a CI.
A NaN is never passed off as a number.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

Kind = Literal["categorical", "value"]
Protocol = Literal["pooled", "per-group"]
ThresholdRule = Literal["gt", "ge"]
ThresholdChoice = Literal["max-f1", "max-balanced-accuracy", "youden"]
InvalidPairs = Literal["agree", "disagree"]
ResampleUnit = Literal["rows", "items", "records", "groups", "items within groups"]

GROUPS_ARE_RECORDS = "groups_are_records"
"""``frame.attrs`` key: the frame's groups are a store's records (the bootstrap notes say "records")."""

INVALID_LABEL = "<invalid>"
"""The judge's column of invalid answers in a confusion matrix (invalid answers kept as wrong)."""


#: What a κ says where people gave a single label: nothing (greval.agreement.agreement makes it undefined).
ONE_LABEL = "undefined: one label"
#: The κ statistics of an agreement report.
KAPPAS = ("cohen_kappa", "linear_kappa", "quadratic_kappa")


class AgreementScale(BaseModel):
    """What the judge and the humans answer on.

    `labels` are in the spec's order; for `ordered` scales that order is low → high, and "the judge is
    above the human" means the judge chose a later label. `scores` maps labels to numbers (used by value
    scales whose answers are words, and for signed bias on ordered labels). `min`/`max` bound a value scale.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Kind = "categorical"
    labels: list[str] | None = None
    ordered: bool = False
    scores: dict[str, float] | None = None
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _check(self) -> AgreementScale:
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            raise ValueError(f"duplicate labels in {self.labels}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} > max {self.max}")
        return self


class AgreementOptions(BaseModel):
    """How to compute: invalid-answer policy, protocol, bootstrap, slices, label mapping, scores and thresholds."""

    model_config = ConfigDict(extra="forbid")

    invalid: str = Field(
        "as-wrong",
        description="as-wrong | drop | opposite | label:X — what to do with a missing/unparseable judge answer",
    )
    protocol: Protocol = Field(
        "pooled",
        description="pooled: every statistic over all items; per-group: inside each group, then the unweighted "
        "mean over the groups where it is defined (bootstrap resamples items within each group)",
    )
    bootstrap: int = Field(1000, ge=0, description="resamples; 0 disables CIs")
    seed: int = 0
    confidence: float = Field(0.95, gt=0.0, lt=1.0)
    slices: list[str] = Field(default_factory=list)
    mapping: dict[str, str] = Field(default_factory=dict, description="raw label → label, both sides")
    missing_values: list[str] = Field(
        default_factory=list,
        description="answers (exact text, after trimming) that mean 'no answer', besides an empty cell and a "
        "JSON/Parquet null; nothing else is missing: NA, None, null, N/A and nan are labels like any other",
    )
    pos_label: str | None = Field(
        None, description="the positive label: precision / recall / F1 of it (vs the rest) in the headline"
    )
    threshold: float | None = Field(None, description="turn the judge's score into labels at this threshold")
    threshold_rule: ThresholdRule = Field("ge", description="gt: positive when score > T; ge: when score ≥ T")
    choose_threshold: ThresholdChoice | None = Field(
        None, description="choose the threshold on the selection rows (select_on) by this criterion"
    )
    select_on: str | None = Field(
        None, description="COL=VALUE: rows choosing the threshold; the other rows are evaluated"
    )
    invalid_pairs: InvalidPairs = Field(
        "disagree", description="pair-by consistency: whether two invalid answers for one item count as agreement"
    )
    alpha_max_values: int = Field(
        100,
        ge=2,
        description="skip Krippendorff α above this many distinct values (its cost is units × values²)",
    )
    calibration_bins: int = Field(
        10, ge=1, le=100, description="equal-width confidence bins of the calibration report (judge_confidence)"
    )

    @model_validator(mode="after")
    def _check(self) -> AgreementOptions:
        if self.invalid not in ("as-wrong", "drop", "opposite") and not self.invalid.startswith("label:"):
            raise ValueError(f"invalid policy must be as-wrong, drop, opposite or label:X, not {self.invalid!r}")
        if self.threshold is not None and self.choose_threshold is not None:
            raise ValueError("give a threshold or a rule to choose one, not both")
        if (self.choose_threshold is None) != (self.select_on is None):
            raise ValueError("choose_threshold and select_on go together (choose on COL=VALUE rows)")
        if self.select_on is not None and "=" not in self.select_on:
            raise ValueError(f"select_on {self.select_on!r}: expected COL=VALUE, e.g. split=dev")
        return self


class Estimate(BaseModel):
    """One figure with the n behind it; value None means undefined, and `note` says why."""

    value: float | None
    n: int
    ci_low: float | None = None
    ci_high: float | None = None
    note: str | None = None


class LabelReport(BaseModel):
    """sklearn's classification report row for one label (human = truth, judge = prediction)."""

    label: str
    precision: float
    recall: float
    f1: float
    support: int


class ConfusionMatrix(BaseModel):
    """Rows are human labels, columns judge labels, both in the spec's order.

    The judge side gets an extra column `invalid_column` when invalid answers are kept as wrong.
    """

    labels: list[str]
    judge_labels: list[str]
    counts: list[list[int]]


class DisagreementCell(BaseModel):
    """One off-diagonal confusion cell: how often the judge said `judge` when people said `human`."""

    human: str
    judge: str
    count: int
    share_of_items: float
    share_of_disagreements: float
    steps: int | None = Field(None, description="judge position − human position (ordered scales)")


class LabelBias(BaseModel):
    """How often each label is used by the judge vs by people (positive difference = judge overuses it)."""

    label: str
    judge_count: int
    human_count: int
    judge_share: float
    human_share: float
    difference: float


class Bias(BaseModel):
    """Off-diagonal mass: where the judge departs from people, signed for ordered scales."""

    disagreement_rate: Estimate
    judge_above_rate: Estimate | None = None
    judge_below_rate: Estimate | None = None
    mean_signed_steps: Estimate | None = None
    mean_signed_score: Estimate | None = Field(None, description="judge − human in the scale's scores")
    per_label: list[LabelBias]
    cells: list[DisagreementCell]


class Prevalence(BaseModel):
    """Share of each label as the judge reports it and corrected for the judge's measured error.

    Two labels: Rogan–Gladen. More: solve P(judge|human)ᵀ π = q (least squares), clip negatives to 0 and
    renormalise to 1. `q` is taken over every item with a valid judge verdict, including items no human
    labelled; P(judge|human) over the human-labelled items.
    """

    method: str
    labels: list[str]
    n_judged: int
    n_labelled: int
    observed: list[float]
    human: list[float]
    corrected: list[Estimate]
    note: str | None = None


class CategoricalReport(BaseModel):
    """Categorical agreement details beyond the headline metrics."""

    labels: list[str]
    per_label: list[LabelReport]
    confusion: ConfusionMatrix
    bias: Bias
    prevalence: Prevalence | None = None


class Describe(BaseModel):
    """Summary statistics for one side of a value scale."""

    count: int
    mean: float | None
    median: float | None
    std: float | None
    min: float | None
    max: float | None


class ValueReport(BaseModel):
    """Value-scale details: descriptive statistics of each side."""

    judge: Describe
    human: Describe
    protocol: Protocol
    n_groups: int | None = None
    groups_skipped: int | None = None


class PairAgreement(BaseModel):
    """Agreement of two coders on the items both labelled."""

    a: str
    b: str
    n: int
    value: float | None
    note: str | None = None


class Ceiling(BaseModel):
    """Human–human agreement (the ceiling a judge can be expected to reach) next to judge–human agreement."""

    metric: str = Field(description="pairwise statistic: cohen_kappa / quadratic_kappa / pearson")
    alpha_level: str
    n_annotators: int
    n_items_multi: int
    human_pairs: list[PairAgreement]
    judge_pairs: list[PairAgreement]
    human_pairwise_mean: Estimate
    judge_pairwise_mean: Estimate
    human_alpha: Estimate
    alpha_with_judge: Estimate


class Counts(BaseModel):
    """Where the rows went: nothing is dropped without being counted here."""

    rows: int
    rows_missing_judge: int = Field(0, description="rows whose judge answer is null, empty or a missing_values text")
    rows_missing_human: int = Field(0, description="rows whose human answer is null, empty or a missing_values text")
    items_several_human_rows: int = Field(
        0, description="items with several human rows and no annotator column: read as anonymous annotators"
    )
    items: int
    items_missing_human: int
    items_invalid_judge: int
    items_dropped_invalid: int
    items_tied_majority: int
    items_compared: int
    annotators: int
    groups: int | None = None


class GroupFigures(BaseModel):
    """One group's headline figures under the per-group protocol (point values; the CI is on the mean)."""

    group: str
    n: int
    metrics: dict[str, Estimate]


class BootstrapInfo(BaseModel):
    """What one bootstrap resample draws, so a reader knows which dependence the CIs respect."""

    unit: ResampleUnit = Field(
        description="rows (one item per row), items (several rows per item), records (a store's records, each "
        "with its items), groups (whole clusters), or "
        "items within groups (stratified, per-group protocol)"
    )
    n_units: int
    resamples: int
    seed: int
    confidence: float


class ThresholdInfo(BaseModel):
    """How the judge's scores became labels."""

    threshold: float
    rule: ThresholdRule
    pos_label: str
    neg_label: str
    chosen_by: ThresholdChoice | None = None
    select_on: str | None = None
    selection_items: int | None = Field(None, description="items (with a score) the threshold was chosen on")
    selection_value: float | None = Field(None, description="the criterion's value at the chosen threshold")
    candidates: int | None = Field(None, description="grid size: distinct scores on the selection rows")


class DesignEstimate(BaseModel):
    """One figure, design-weighted and plain, with the weighted figure's bootstrap interval."""

    name: str
    weighted: float | None = Field(None, description="Hájek estimate: every item counts 1/π times.")
    unweighted: float | None = Field(None, description="The same figure as if the sample were simple random.")
    ci_low: float | None = None
    ci_high: float | None = None
    note: str | None = None


class DesignReport(BaseModel):
    """Figures weighted back to the population the labelled items were drawn from (see agreement/design.py):
    shown when the items were selected with unequal probabilities (uncertain-first, stratified)."""

    estimates: list[DesignEstimate]
    strata: dict[str, int] = Field(description="Labelled items per selection stratum.")
    resamples: int
    summary: str = Field(description="Why these figures are shown (it is also among the report's notes).")
    notes: list[str] = Field(default_factory=list, description="What the weighting assumed or left out.")


class CalibrationBin(BaseModel):
    """One equal-width confidence bin [low, high) (the last one closed at 1): its rows, the weighted mean
    confidence and the weighted share of rows where the judge's answer equals the human's."""

    low: float
    high: float
    count: int = Field(description="Rows (one per item and annotator) whose confidence falls in the bin.")
    weight: float = Field(description="Their summed design weight (= count without weights).")
    mean_confidence: float | None = None
    accuracy: float | None = None
    ci_low: float | None = Field(None, description="Wilson interval of the accuracy (Kish effective n).")
    ci_high: float | None = None


class CalibrationReport(BaseModel):
    """Does the judge's confidence mean what it says? Each (item, annotator) row with a judge answer, a
    human answer and a confidence is one observation: correct when the judge's answer equals the human's
    (exact match, also on value scales). See greval/agreement/calibration.py for the definitions."""

    n: int = Field(description="Rows used: judge answer, human answer and confidence all present.")
    n_without_confidence: int = Field(0, description="Rows with both answers but no confidence: skipped.")
    n_without_answer: int = Field(0, description="Rows with a confidence but no judge or no human answer: skipped.")
    weighted: bool = Field(False, description="Rows weighted by 1/π, their inclusion probability.")
    accuracy: float | None = Field(None, description="Weighted share of correct rows.")
    mean_confidence: float | None = None
    bins: list[CalibrationBin]
    ece: Estimate = Field(description="Expected calibration error: Σ bin share × |accuracy − mean confidence|.")
    mce: Estimate = Field(description="Maximum calibration error: the largest |accuracy − mean confidence| of a bin.")
    brier: Estimate = Field(description="Weighted mean of (confidence − correct)².")
    ece_if_calibrated: float | None = Field(
        None,
        description="95th percentile of the ECE a perfectly calibrated judge with the same confidences and "
        "weights would show (simulated): the ECE's own noise floor",
    )
    resample_unit: str | None = Field(
        None, description="What the ECE / Brier bootstrap drew: rows, items, records or groups."
    )
    notes: list[str] = Field(default_factory=list)


LabelModel = Literal["majority", "dawid-skene", "mace"]
GoldMethod = Literal["majority", "dawid-skene", "mace", "adjudicated", "annotator"]
GOLD_METHODS: tuple[str, ...] = ("majority", "dawid-skene", "mace", "adjudicated")
"""The gold methods a name can spell; any other name is an annotator's (``annotator:NAME`` spells it always)."""


class GoldChoice(BaseModel):
    """Which label is an item's truth when several people labelled it (docs/agreement.md, "Gold and reviewers"):
    people's majority, a label model's estimate (Dawid–Skene, MACE), an adjudicator's label (else the
    `fallback` estimate), or one named annotator's labels."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: GoldMethod
    annotator: str | None = Field(None, description="method annotator: whose labels are the gold")
    adjudicators: list[str] = Field(default_factory=list, description="method adjudicated: whose labels win")
    fallback: LabelModel = Field("majority", description="method adjudicated: the gold where no adjudicator answered")

    @model_validator(mode="after")
    def _check(self) -> GoldChoice:
        if (self.method == "annotator") != (self.annotator is not None):
            raise ValueError("an annotator's gold names the annotator, and only it does")
        if self.adjudicators and self.method != "adjudicated":
            raise ValueError("adjudicators go with the adjudicated gold")
        return self

    @classmethod
    def parse(cls, text: str) -> GoldChoice:
        """``majority`` | ``dawid-skene`` | ``mace`` | ``adjudicated[:NAME,NAME]`` | ``annotator:NAME`` | NAME."""
        head, sep, rest = text.strip().partition(":")
        if head == "adjudicated":
            return cls(method="adjudicated", adjudicators=[n.strip() for n in rest.split(",") if n.strip()])
        if head == "annotator" and sep:
            return cls(method="annotator", annotator=rest.strip())
        if head in GOLD_METHODS and not sep:
            return cls(method=head)
        return cls(method="annotator", annotator=text.strip())

    def describe(self) -> str:
        """How a report names it: ``dawid-skene``, ``adjudicated (ann, bo; else majority)``, ``annotator ann``."""
        if self.method == "annotator":
            return f"annotator {self.annotator}"
        if self.method == "adjudicated":
            return f"adjudicated ({', '.join(self.adjudicators)}; else {self.fallback})"
        return self.method


class GoldLabel(BaseModel):
    """One item's gold: a label, or a tie (never broken: the item is left out of the judge comparison)."""

    item: str
    label: str | None = Field(description="the gold label (its text; a value scale's value); None when tied")
    tied: list[str] = Field(default_factory=list, description="the labels that tie for the gold")
    posterior: float | None = Field(
        None,
        description="the gold label's probability: a label model's posterior, majority's vote share; None for an "
        "adjudicator's or an annotator's label",
    )
    source: str = Field(description="adjudicator, annotator, majority, dawid-skene or mace")
    answers: int = Field(description="people's answers on the item")


class GoldCounts(BaseModel):
    """Items by their gold: the rest have no gold (the chosen annotator did not label them)."""

    items: int = Field(description="items with a person's answer")
    with_gold: int
    tied: int
    adjudicated: int = 0
    without_gold: int = 0


class PairEstimate(BaseModel):
    """Two people's agreement on the items both labelled, with its bootstrap CI (the ceiling's pair figure)."""

    a: str
    b: str
    estimate: Estimate


class ReviewerRow(BaseModel):
    """One person against the gold, and the judge against the same gold on the same items: the row that says
    whether the judge agrees with the gold as well as this reviewer does. The judge's own row (``role`` judge)
    covers every compared item; its figures are the headline's."""

    name: str
    role: Literal["annotator", "judge"]
    n: int = Field(description="compared items this reviewer labelled (with a gold and a judge answer kept)")
    answers: int = Field(0, description="answers this reviewer gave in all")
    figures: dict[str, Estimate] = Field(description="the reviewer against the gold")
    judge: dict[str, Estimate] = Field(default_factory=dict, description="the judge against the gold, same items")
    difference: dict[str, Estimate] = Field(
        default_factory=dict, description="judge − reviewer, paired bootstrap (the same resampled items)"
    )
    judge_vs: Literal["better", "as well", "worse"] | None = Field(
        None, description="the judge against this reviewer on the ceiling's metric: whether the CI excludes 0"
    )
    confusion: ConfusionMatrix | None = Field(None, description="rows: gold, columns: this reviewer's labels")
    model_confusion: list[list[float]] | None = Field(
        None, description="Dawid–Skene / MACE estimate of P(this reviewer's label | true label), rows true labels"
    )
    competence: float | None = Field(None, description="MACE: the probability this reviewer knows the label")
    labels_per_hour: Estimate | None = None


class ReviewersReport(BaseModel):
    """The gold, each reviewer's quality against it with the judge beside them, and people's agreement with
    each other pair by pair (the ceiling's pairs, with CIs)."""

    gold: GoldChoice
    metric: str = Field(description="the pairwise figure: the ceiling's (cohen_kappa / quadratic_kappa / pearson)")
    figures: list[str] = Field(description="the figures of each row")
    labels: list[str]
    counts: GoldCounts
    rows: list[ReviewerRow]
    pairs: list[PairEstimate] = Field(default_factory=list)
    gold_labels: list[GoldLabel] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class AgreementReport(BaseModel):
    """Judge-vs-human agreement on one frame (and, nested, per slice)."""

    scale: AgreementScale
    options: AgreementOptions
    counts: Counts
    metrics: dict[str, Estimate]
    per_group: list[GroupFigures] = Field(default_factory=list, description="per-group protocol: each group")
    bootstrap: BootstrapInfo | None = None
    threshold: ThresholdInfo | None = None
    categorical: CategoricalReport | None = None
    value: ValueReport | None = None
    ceiling: Ceiling | None = None
    slices: dict[str, dict[str, AgreementReport]] = Field(default_factory=dict)
    design: DesignReport | None = None
    calibration: CalibrationReport | None = Field(
        None, description="The judge's confidence against human labels (when the frame has judge_confidence)."
    )
    notes: list[str] = Field(default_factory=list)
    reviewers: ReviewersReport | None = Field(
        None, description="With a chosen gold: each reviewer against it, the judge beside them (absent otherwise)"
    )

    @model_serializer(mode="wrap")
    def _without_absent_reviewers(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No ``reviewers`` key without a gold: a report without one reads as it did before there was a gold."""
        data: dict[str, Any] = handler(self)
        if self.reviewers is None:
            data.pop("reviewers", None)
        return data


class Difference(BaseModel):
    """A paired-bootstrap difference `b − a` for one metric, on the items both versions share."""

    metric: str
    a: str
    b: str
    estimate: Estimate
    beyond_ci: bool | None = Field(None, description="the CI excludes 0")


class ComparisonReport(BaseModel):
    """Several judge versions on the same items, side by side, with paired differences."""

    reports: dict[str, AgreementReport]
    common_items: int
    differences: list[Difference]
    bootstrap: BootstrapInfo | None = Field(None, description="what the paired bootstrap resampled")
    notes: list[str] = Field(default_factory=list)
    paired: bool = Field(True, description="False: the sides share no items, the CIs are independent bootstraps")


class ConsistencyCounts(BaseModel):
    """Where the rows went when pairing two runs of the judge."""

    rows: int
    items: int
    items_paired: int
    items_one_run_only: int
    items_both_invalid: int
    items_one_invalid: int


class ConsistencyReport(BaseModel):
    """Agreement of the judge with itself: two runs (e.g. original / swapped order, two seeds) per item."""

    column: str = Field(description="the column whose two values name the runs")
    runs: list[str]
    scale: AgreementScale
    options: AgreementOptions
    counts: ConsistencyCounts
    metrics: dict[str, Estimate] = Field(description="consistency (share of items with the same answer), κ")
    confusion: ConfusionMatrix = Field(description="rows: first run, columns: second run")
    per_group: list[GroupFigures] = Field(default_factory=list)
    bootstrap: BootstrapInfo | None = None
    notes: list[str] = Field(default_factory=list)


class BatchTable(BaseModel):
    """One table of a batch: which file and columns were compared, and the report a single call on them gives
    (the same JSON, field for field)."""

    file: str
    judge: list[str] = Field(description="the judge column(s); several: a comparison report")
    human: str | None = Field(None, description="the human label column (none when the judge is paired by runs)")
    score: str | None = None
    report: AgreementReport | ComparisonReport | ConsistencyReport


class AgreementBatch(BaseModel):
    """Several tables' reports from one process (scripted comparisons: many files or column pairs), in order."""

    tables: list[BatchTable]
