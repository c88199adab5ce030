"""The store report's models: what ``greval report`` computes (greval.report.store_report) and every rendering
reads (report.json is their dump; greval.report.html, greval.report.terminal and greval.report.plots draw
from them alone, so each figure shows the same numbers as the tables).

A new panel or section reads these models; a new figure is a field here, computed once in
greval.report.stats or greval.report.store_report.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from greval.store.results import MetricFigures, metric_notes


class MeanCI(BaseModel):
    """A mean (or a metric's dataset score) with its 95% percentile bootstrap CI (greval.report.stats); ``note``
    says why a figure is missing (no score, one score) or how it was pooled."""

    n: int
    mean: float | None
    std: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    note: str | None = None


class LabelShare(BaseModel):
    """One label's share of a categorical metric's ok verdicts (records, or items of a per-item metric), with
    its 95% percentile bootstrap CI over records (greval.report.stats.label_shares)."""

    label: str
    count: int
    share: float | None
    ci_low: float | None = None
    ci_high: float | None = None


class Shares(BaseModel):
    """A categorical metric summarised by its labels: how a metric whose labels have no scores is described
    (it has no mean), and beside the dataset score of one whose labels do."""

    unit: Literal["records", "items"] = Field(description="What a share counts: records, or a per-item metric's items.")
    n: int = Field(description="Verdicts counted (ok records, or ok items).")
    records: int = Field(description="Records the shares are over (the bootstrap resamples them).")
    shares: list[LabelShare]
    note: str | None = None


class ScoreStats(BaseModel):
    """The distribution of a set of record scores, and how many records were not scored and why.

    ``n``: scored records (ok and partial with a score); rates are over ``records`` (every outcome). std is the
    sample std (ddof=1); percentiles use numpy's default (linear interpolation between order statistics)."""

    records: int = Field(description="Record ids with an outcome (ok + partial + failed + skipped).")
    n: int
    mean: MeanCI
    median: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    p5: float | None = None
    p25: float | None = None
    p75: float | None = None
    p95: float | None = None
    failed: int = 0
    skipped: int = 0
    failure_rate: float | None = None
    skip_rate: float | None = None


MetricKey = tuple[str, str, str]
"""A metric's row in a store report: (name, spec hash, judge) — a store may hold several versions or judges of
one name, and a system's or group's row belongs to one of them."""


class SystemRow(BaseModel):
    metric: str
    spec_hash: str = ""
    judge: str = ""
    system: str
    score: MeanCI
    stats: ScoreStats | None = None
    judged: int = Field(description="Record ids of this system with an outcome (any status).")
    failed: int
    skipped: int = 0
    failure_rate: float
    efficiency: dict[str, float] = Field(default_factory=dict)
    shares: Shares | None = None

    @property
    def key(self) -> MetricKey:
        return self.metric, self.spec_hash, self.judge


class LabelSource(BaseModel):
    """Human labels of a metric from one place: an Argilla dataset (``source`` "argilla"), or a file
    (``source`` "import", or "import:FILE" when the file's name is known; ``dataset`` "import" when the
    labels went to the store only, else the Argilla dataset they were also given to)."""

    dataset: str
    source: str
    submitted: int
    other: int = Field(0, description="Draft and discarded answers (not compared with the judge).")


class GroupCell(BaseModel):
    """One (system, group) cell of a metric's system × group table."""

    system: str
    group: str
    score: MeanCI = Field(description="The cell's dataset score (the metric's aggregate) with its CI.")
    stats: ScoreStats
    efficiency: dict[str, float] = Field(default_factory=dict)
    shares: Shares | None = None


class GroupTable(BaseModel):
    """A metric's record scores by system × the values of a group column (e.g. method × film)."""

    metric: str
    judge: str
    column: str
    systems: list[str]
    groups: list[str]
    cells: list[GroupCell]
    missing_group: int = Field(0, description="Record rows with no value in the group column: in no cell.")
    missing_system: int = Field(0, description="Record rows with a group value but no system value: in no cell.")
    spec_hash: str = ""

    @property
    def key(self) -> MetricKey:
        return self.metric, self.spec_hash, self.judge

    def notes(self) -> list[str]:
        """What is not in the table, in words (printed, and on every rendering)."""
        out = []
        if self.missing_group:
            out.append(
                f"{self.metric}: {self.missing_group} record(s) have no value in '{self.column}': not in the "
                "system × group table"
            )
        if self.missing_system:
            out.append(
                f"{self.metric}: {self.missing_system} record(s) with a '{self.column}' value have no system: "
                "not in the system × group table"
            )
        return out


class CorrectedShare(BaseModel):
    """One label's share among a system's judge verdicts, raw and corrected for the judge's measured errors."""

    label: str
    raw: float = Field(description="Share of the judge's valid verdicts with this label.")
    corrected: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    note: str | None = None


class CorrectedSystem(BaseModel):
    """A system's label prevalence, as the judge reports it and corrected (greval.agreement's Prevalence)."""

    metric: str
    system: str = Field(description="A system, or 'all' for every record of the metric.")
    method: str
    n_judged: int = Field(description="Verdicts (items) with a valid judge label: the raw shares' n.")
    n_labelled: int = Field(description="Items with a human label: where the judge's error rates come from.")
    shares: list[CorrectedShare]
    raw_score: float | None = Field(None, description="Σ raw share × label score (the judge's mean label score).")
    corrected_score: float | None = Field(None, description="Σ corrected share × label score (no CI).")
    note: str | None = None


class MetricRow(BaseModel):
    metric: str
    kind: str
    spec_hash: str
    judge: str
    figures: MetricFigures
    score: MeanCI
    stats: ScoreStats | None = None
    shares: Shares | None = Field(None, description="Categorical judge metrics: each label's share with its CI.")
    scale_range: tuple[float, float] | None = Field(
        None, description="The range a record score lies in (the spec's scale, else the scores'): one axis per range."
    )
    histogram: dict[str, int] = Field(
        default_factory=dict, description="Record scores in 10 equal bins (metrics without a distribution)."
    )
    corrected: list[CorrectedSystem] = Field(default_factory=list)
    agreement: dict[str, Any] | None = None
    agreement_page: str | None = None
    labels: list[LabelSource] = Field(default_factory=list)

    @property
    def key(self) -> MetricKey:
        return self.metric, self.spec_hash, self.judge

    @property
    def records(self) -> int:
        return self.figures.records

    @property
    def by_shares(self) -> bool:
        """Whether the metric is described by its label shares: a categorical metric whose labels have no
        scores has no dataset score (no mean to take)."""
        return self.score.mean is None and self.shares is not None and self.shares.n > 0

    @property
    def failed(self) -> int:
        return self.figures.failed

    @property
    def distribution(self) -> dict[str, int]:
        return self.figures.distribution


class ExperimentRow(BaseModel):
    """An experiment run (an align candidate's judging, a `spec try`, a compare side run): stored, paid once, never
    a reader's default, so the report lists it apart with the figures its own summary holds."""

    run_id: str
    started_at: float
    status: str
    purpose: str = Field(description="What it tried (an align candidate, a spec try, a side run).")
    records: int | None = Field(None, description="Records in its run summary (None: no summary yet, or killed).")
    scores: dict[str, float | None] = Field(
        default_factory=dict, description="Dataset score per metric version judged (NAME@HASH8), as its run printed."
    )


class StoreReport(BaseModel):
    store: str
    metrics: list[MetricRow]
    systems: list[SystemRow]
    system_column: str | None
    group_column: str | None = None
    system_field: str | None = Field(None, description="The record field asked for as the system (found or not).")
    groups: list[GroupTable] = Field(default_factory=list)
    all_versions: bool = Field(
        False, description="Every version of each metric (experiments aside), not only its production version."
    )
    bootstrap: int = Field(
        1000, description="Resamples of every bootstrap CI the report shows (scores, shares, agreement, prevalence)."
    )
    experiments: list[ExperimentRow] = Field(
        default_factory=list, description="The store's experiment runs, apart from every figure above."
    )

    def label(self, key: MetricKey) -> str:
        """How a metric row is named where rows of several versions or judges of one name meet: its name, with
        @HASH8 when the report holds several versions of it and (judge) when several judges."""
        same = [m.key for m in self.metrics if m.metric == key[0]]
        out = key[0]
        if len({h for _, h, _ in same}) > 1:
            out += f"@{key[1][:8]}"
        if len({j for _, _, j in same}) > 1:
            out += f" ({key[2]})"
        return out

    def row(self, key: MetricKey) -> MetricRow:
        """The metric row a system's or group's row belongs to."""
        return next(m for m in self.metrics if m.key == key)

    def notes(self) -> list[str]:
        """Every note of the report, once (the same list on every rendering); a corrected share's notes are in
        its row of the prevalence-corrected table."""
        found = [n for m in self.metrics for n in metric_notes(m.figures)]
        found += [n for g in self.groups for n in g.notes()]
        return list(dict.fromkeys(found))
