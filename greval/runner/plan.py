"""What a run still has to do, asked of the store once: :func:`plan_work` makes the :class:`Plan`.

Records flow through in chunks of :data:`PLAN_CHUNK`: rows → content hashes → what the store still lacks →
Records only for the rows with work left. A finished job re-run holds no dataset in memory (only its (id, hash)
pairs, the snapshot), and on a SQLite store asks nothing of a chunk the memo knows is settled (greval.store.memo).
:func:`work_of` is the one definition of what a pending judgement costs, and :func:`sample_notes` what a sampled
run says about its draw.
"""

from __future__ import annotations

import functools
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from greval.dataset.compact import Hashes, Pairs, Positions
from greval.dataset.records import DataFile, HashedRow, Record
from greval.dataset.sample import Sample, sample_items, sample_records
from greval.errors import DataError, option
from greval.judge.outcome import config_for, missing_inputs, unfed
from greval.llm.config import JudgeConfig
from greval.runner.options import MetricSummary, SampleSummary
from greval.spec import BaseSpec, order_specs
from greval.store.memo import Generation, digest
from greval.store.store import Store, spec_keys

__all__ = [
    "PLAN_CHUNK",
    "PLAN_HOLD",
    "SETTLE_MIN",
    "LeftOut",
    "Plan",
    "PlannedRows",
    "Rows",
    "Work",
    "drawn_items",
    "plan_work",
    "sample_notes",
    "sample_summary",
    "unique_contents",
    "work_of",
]

#: Records planned at a time: the store is asked about one chunk's hashes at once (see Store.pending).
PLAN_CHUNK = 2000

#: New contents a chunk needs for the memo of settled chunks (greval.store.memo) to be read or written for it:
#: fewer are asked about in one store query (Store.pending asks 500 at a time), which costs less than the memo's
#: own write — and a lookup (greval serve: a few records a request) writes nothing.
SETTLE_MIN = 500

#: Rows of a dataset file a plan holds as Records at most (~2 KB each); past it, every row is kept by its
#: position in the file and read again when it is judged (a first run of 1M rows held ~2 GB of Records).
PLAN_HOLD = 20_000

#: What a run reads: Records, or a dataset file's rows already hashed (greval.dataset.records.DataFile).
Rows = Iterable[Record] | Iterable[HashedRow]

#: What a pending judgement costs (see :func:`work_of`).
Work = Literal["judgement", "computed", "skipped"]

#: A chunk's row by position, as a Record (built once, on first use).
_Made = Callable[[int], Record]


class PlannedRows:
    """Some rows of a run's dataset, in its order, iterated as Records: held as Records, or — past
    :data:`PLAN_HOLD` rows of a dataset file (:class:`DataFile`, which can be read again) — kept by their
    position in the file and read again when iterated, each checked against the content hash it was planned
    with. Memory then holds a position and a hash per row, not its Record; each iteration reads those rows
    again (at their byte offsets in a plain JSON Lines file: :meth:`DataFile.at`)."""

    def __init__(self, source: DataFile | None = None, records: Iterable[Record] = ()) -> None:
        self._source = source
        self._held: list[Record] = list(records)
        self._held_at: list[int] = []  # the held rows' positions (only with a source)
        self._at = array("q")  # positions of the rows not held, ascending
        self._hashes = Hashes()  # and the content hash each was planned with

    def add(self, position: int, row: Record | HashedRow, record: Callable[[], Record]) -> None:
        """The row at ``position`` of the dataset (``record`` makes its Record, if it is held)."""
        if self._source is None:
            self._held.append(record())
            return
        if len(self._held) < PLAN_HOLD and not self._at:
            self._held.append(record())
            self._held_at.append(position)
            return
        if self._held:  # past the limit: the held rows become positions too
            self._at.extend(self._held_at)
            self._hashes.extend(r.hash for r in self._held)
            self._held, self._held_at = [], []
        self._at.append(position)
        self._hashes.append(row.hash)

    def __len__(self) -> int:
        return len(self._held) + len(self._at)

    def __iter__(self) -> Iterator[Record]:
        if not self._at:
            yield from self._held
            return
        assert self._source is not None
        # only these rows are read: at their byte offsets once the plan's read placed them (DataFile.at)
        for row, planned in zip(self._source.at(self._at), self._hashes, strict=True):
            if row.hash != planned:
                raise DataError(f"{self._source.path}: record {row.id!r} changed while the run read the file")
            yield row.record()


def work_of(spec: BaseSpec, row: Record | HashedRow) -> Work:
    """What a pending judgement costs, the one definition every count of work uses: a model call, a computed
    score, or nothing (the record lacks an input the metric requires: it is stored as skipped, no call)."""
    if missing_inputs(spec, row.data):
        return "skipped"
    return "judgement" if spec.needs_model else "computed"


def unique_contents(records: Sequence[Record]) -> list[Record]:
    """The first record of each content: verdicts are keyed by content, so only these are judged."""
    return list({r.hash: r for r in reversed(records)}.values())[::-1]


def drawn_items(
    sample: Sample | None, spec: BaseSpec, row: Record | HashedRow, left: list[str] | None
) -> list[str] | None:
    """A many-metric's pending item ids (:meth:`Store.pending`) kept to the row's item sample (None: nothing left
    of it to judge). Record metrics, and every metric of an unsampled run, keep what is pending."""
    if sample is None or sample.items is None or spec.each is None or not left:
        return left
    chosen = set(sample_items([it["id"] for it in row.items(spec.each)], sample.items, sample.seed, row.hash))
    return [i for i in left if i in chosen] or None


class LeftOut(BaseModel):
    """A dependency a metric is judged without on some records: they lack an input the dependency requires and
    the metric does not (greval.judge.outcome.unfed). Counted per record id, as the figures count."""

    metric: str
    dependency: str
    records: int
    absent: list[str] = Field(description="The dependency's required inputs absent from those records.")

    def note(self, pulled_in: bool) -> str:
        """The run's one-line note (``pulled_in``: the dependency was not asked for, only pulled in)."""
        text = (
            f"{self.metric}: judged without the verdicts of {self.dependency} on {self.records} record(s) that lack "
            f"{', '.join(self.absent)}, which {self.dependency} requires (the judge is told)"
        )
        if pulled_in:
            text += f"; {self.dependency} was only pulled in as a dependency, not asked for: this fails nothing"
        return text


class Plan(BaseModel):
    """What a run over these records still has to do, asked of the store once (the CLI prints it, the
    runner then works from it; each model call re-checks its one judgement under a claim all the same).

    Only the records with work left are held (and those the store has never seen, to store with the run's
    snapshot); of the others only their (id, content hash) pairs."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    unique: PlannedRows = Field(
        description="The first record of each content with work left for some spec: only these are judged "
        "(a content already judged for every spec is not held; past PLAN_HOLD rows of a file, none is held)."
    )
    judge_keys: dict[str, str] = Field(description="Spec name -> the judge key the plan was made for.")
    pending: dict[str, list[list[str] | None]] = Field(description="Spec name -> per unique record (Store.pending).")
    judgements: int = Field(description="Judgements that still need the judge model (0: no server or key needed).")
    computed: int = Field(description="Computed judgements still to make.")
    skipped: int = Field(
        0, description="Judgements still to store as skipped: the record lacks an input the metric requires (no call)."
    )
    left_out: list[LeftOut] = Field(
        default_factory=list, description="Dependencies metrics are judged without on some records (see LeftOut)."
    )
    retry_errors: bool = False
    sample: Sample | None = Field(None, description="The sample the plan was drawn for (None: every record and item).")
    population: int = Field(0, description="Records the sample was drawn from (= records when not sampled).")
    items_drawn: dict[str, int] = Field(
        default_factory=dict, description="With `Sample.items`, many-metric -> items drawn over every record id."
    )
    items_of: dict[str, int] = Field(
        default_factory=dict, description="With `Sample.items`, many-metric -> items of every record id."
    )
    records: int = Field(0, description="Records in the dataset (ids; a row repeated exactly is read once).")
    distinct_contents: int = Field(0, description="Distinct record contents (identical records cost one call).")
    members: Pairs = Field(
        default_factory=Pairs, description="(record id, content hash) of every record: the run's snapshot."
    )
    unstored: PlannedRows = Field(
        default_factory=PlannedRows,
        description="Records stored with the snapshot when the store lacks it: every Record given, and the "
        "rows read from a file whose (id, content) the store has not seen.",
    )

    def made_for(self, judge_keys: dict[str, str], retry_errors: bool, sample: Sample | None) -> bool:
        """Whether this plan answers a run of these judges (spec name -> judge key), retry choice and sample."""
        return self.judge_keys == judge_keys and self.retry_errors == retry_errors and self.sample == sample


class _Planner:
    """One :func:`plan_work`: the plan's parts, filled one chunk of rows at a time."""

    def __init__(
        self,
        specs: list[BaseSpec],
        store: Store,
        cfg: JudgeConfig,
        retry_errors: bool,
        sample: Sample | None,
        source: DataFile | None,
    ) -> None:
        self.specs, self.store, self.retry_errors, self.sample = specs, store, retry_errors, sample
        self.keys = spec_keys(order_specs(specs))
        self.judge_keys = {s.name: config_for(s, cfg).key for s in specs}
        self.unique = PlannedRows(source)
        self.pending: dict[str, list[list[str] | None]] = {s.name: [] for s in specs}
        self.members = Pairs()
        self.unstored = PlannedRows(source)
        # Content hashes planned so far (by their first row in members): the first record of each is judged.
        self.seen = Positions(self.members.hashes.__getitem__)
        self.todo: Counter[Work] = Counter()
        self.by_name = {s.name: s for s in specs}
        self.readers = [s for s in specs if s.depends_on]
        self.left: Counter[tuple[str, str]] = Counter()  # (metric, dependency) -> records judged without it
        self.absent: dict[tuple[str, str], set[str]] = {}
        items = sample is not None and sample.items is not None
        self.many = [s for s in specs if s.each is not None] if items else []
        self.items_drawn = {s.name: 0 for s in self.many}
        self.items_of = {s.name: 0 for s in self.many}
        # Each pair's memo counters, read before the first chunk the memo may mark is asked about, and the
        # chunks found settled (nothing left to judge: greval.store.memo), to mark so once the plan is made.
        self.before: dict[str, Generation | None] = {}
        self.settled: dict[str, list[str]] = {s.name: [] for s in specs}

    def add(self, chunk: Sequence[Record | HashedRow]) -> None:
        """Plan one chunk: its new contents asked of the store, its rows counted and kept for the snapshot."""
        pairs = [(r.id, r.hash) for r in chunk]
        # Records given are in memory already: kept to store with the snapshot (if the store lacks it), as
        # they are. Of rows read from a file only those the store has never seen become Records for it.
        rows = [pair for r, pair in zip(chunk, pairs, strict=True) if not isinstance(r, Record)]
        known = self.store.known_records(rows) if rows else set()
        made: dict[int, Record] = {}

        def record(i: int) -> Record:
            if i not in made:
                r = chunk[i]
                made[i] = r if isinstance(r, Record) else r.record()
            return made[i]

        start = len(self.members)  # the chunk's first row's position in the dataset
        self.members.extend(pairs)  # first: `seen` reads the chunk's hashes back from it
        self._pending(chunk, record, start)
        for i, (r, pair) in enumerate(zip(chunk, pairs, strict=True)):
            if isinstance(r, Record) or pair not in known:
                self.unstored.add(start + i, r, functools.partial(record, i))
        self._count(chunk)

    def _pending(self, chunk: Sequence[Record | HashedRow], record: _Made, start: int) -> None:
        """What the store lacks for the chunk's contents not seen before; the ones with work left are held."""
        fresh = []
        for i, r in enumerate(chunk):
            if self.seen.setdefault(r.hash, start + i) is None:
                fresh.append(i)
        # Store.pending reads each record's hash and items(), which a HashedRow has as a Record has them: the
        # rows are asked about as they are (building even unvalidated Records was ~10 % of planning a re-run).
        views = cast("list[Record]", [chunk[i] for i in fresh])
        chunk_key = digest(v.hash for v in views) if len(views) >= SETTLE_MIN else None
        asked = {
            s.name: [
                drawn_items(self.sample, s, view, left)
                for view, left in zip(views, self._left(s, views, chunk_key), strict=True)
            ]
            for s in self.specs
        }
        for n, i in enumerate(fresh):
            if all(asked[s.name][n] is None for s in self.specs):
                continue
            self.unique.add(start + i, chunk[i], functools.partial(record, i))
            for s in self.specs:
                rest = asked[s.name][n]
                self.pending[s.name].append(rest)
                if rest is not None:
                    self.todo[work_of(s, views[n])] += 1

    def _left(self, s: BaseSpec, views: list[Record], chunk_key: str | None) -> list[list[str] | None]:
        """:meth:`Store.pending` of one spec on a chunk's new contents, unless the chunk is settled for it."""
        pair = (self.keys[s.name], self.judge_keys[s.name])
        if chunk_key is None:
            return self.store.pending(*pair, views, s.each, self.retry_errors)
        if s.name not in self.before:
            self.before[s.name] = self.store.generation(*pair)
        before = self.before[s.name]
        if before is None:
            return self.store.pending(*pair, views, s.each, self.retry_errors)
        if not self.retry_errors and self.store.recall(*pair, "settled", [chunk_key], before):
            return [None] * len(views)
        left = self.store.pending(*pair, views, s.each, self.retry_errors)
        if all(x is None for x in left):
            self.settled[s.name].append(chunk_key)  # (with retried errors, nothing left without them either)
        return left

    def settle(self) -> None:
        """Mark the chunks found with nothing left to judge (if no verdict of their pair was lost meanwhile)."""
        for s in self.specs:
            before = self.before.get(s.name)
            if self.settled[s.name] and before is not None:
                pair = (self.keys[s.name], self.judge_keys[s.name])
                self.store.remember(*pair, "settled", dict.fromkeys(self.settled[s.name]), before)

    def _count(self, chunk: Sequence[Record | HashedRow]) -> None:
        """Per record id, judged now or before: the dependencies the data cannot feed, the items sampled."""
        for r in chunk:
            for s in self.readers:
                for dep, names in unfed(s, self.by_name, r.data).items():
                    self.left[s.name, dep] += 1
                    self.absent.setdefault((s.name, dep), set()).update(names)
        for s in self.many:  # counted per record id, as the figures count items
            assert s.each is not None and self.sample is not None and self.sample.items is not None
            sizes = [len(r.items(s.each)) for r in chunk]
            self.items_of[s.name] += sum(sizes)
            self.items_drawn[s.name] += sum(min(n, self.sample.items) for n in sizes)

    def plan(self, population: int | None) -> Plan:
        """The plan, built without validating again what is already of its type (a pair per record)."""
        left_out = [
            LeftOut(metric=m, dependency=d, records=n, absent=sorted(self.absent[m, d]))
            for (m, d), n in self.left.items()
        ]
        return Plan.model_construct(
            unique=self.unique,
            judge_keys=self.judge_keys,
            pending=self.pending,
            judgements=self.todo["judgement"],
            computed=self.todo["computed"],
            skipped=self.todo["skipped"],
            left_out=left_out,
            retry_errors=self.retry_errors,
            sample=self.sample,
            population=len(self.members) if population is None else population,
            items_drawn=self.items_drawn,
            items_of=self.items_of,
            records=len(self.members),
            distinct_contents=len(self.seen),
            members=self.members,
            unstored=self.unstored,
        )


def plan_work(
    specs: Sequence[BaseSpec],
    records: Rows,
    store: Store,
    cfg: JudgeConfig,
    retry_errors: bool = False,
    sample: Sample | None = None,
) -> Plan:
    """Ask the store what is still missing for every spec on these records, :data:`PLAN_CHUNK` records at a
    time (``records`` is read once, in order). A row becomes a validated Record only when it has work left
    or the store has never seen it.

    ``sample``: with ``records`` set, only the records it draws are planned (the whole dataset is read once to
    draw them, holding N rows); with ``items`` set, a many-metric's pending items are kept to each record's
    item sample (greval.dataset.sample)."""
    population = None
    if sample is not None and sample.records is not None:
        drawn, population = sample_records(cast("Iterable[Record | HashedRow]", records), sample.records, sample.seed)
        records = cast("Rows", drawn)
    source = records if isinstance(records, DataFile) else None  # a file can be read again: see PlannedRows
    planner = _Planner(list(specs), store, cfg, retry_errors, sample, source)
    chunk: list[Record | HashedRow] = []
    for r in records:
        chunk.append(r)
        if len(chunk) >= PLAN_CHUNK:
            planner.add(chunk)
            chunk = []
    if chunk:
        planner.add(chunk)
    planner.settle()
    return planner.plan(population)


def sample_summary(plan: Plan) -> SampleSummary | None:
    """What a sampled run drew (None: the plan was not sampled)."""
    if plan.sample is None:
        return None
    return SampleSummary(
        seed=plan.sample.seed,
        records=plan.sample.records,
        items=plan.sample.items,
        records_drawn=plan.records,
        records_of=plan.population,
        items_drawn=plan.items_drawn,
        items_of=plan.items_of,
    )


def sample_notes(drawn: SampleSummary, metrics: Sequence[MetricSummary]) -> list[str]:
    """What a sampled run says once: how many records and items were drawn of how many, and where the figures
    count more items than were drawn (verdicts earlier runs stored for these records are counted too)."""
    notes = []
    if drawn.records is not None:
        if drawn.records >= drawn.records_of:
            notes.append(
                f"sample: {option('Sample.records')} {drawn.records} is not less than the dataset's "
                f"{drawn.records_of} record(s): every record is judged"
            )
        else:
            notes.append(
                f"sample: {drawn.records_drawn} of {drawn.records_of} records drawn at random (seed {drawn.seed}; "
                "ranked by a seeded hash of each record id, so the file's order does not matter)"
            )
    if drawn.items is not None:
        notes += _item_notes(drawn, metrics)
    return notes


def _item_notes(drawn: SampleSummary, metrics: Sequence[MetricSummary]) -> list[str]:
    assert drawn.items is not None
    if not drawn.items_of:
        return [
            f"{option('Sample.items')} {drawn.items}: no metric here judges items one by one (each: chunks / "
            "triples); nothing sampled"
        ]
    counts = ", ".join(f"{name} {n} of {drawn.items_of[name]}" for name, n in drawn.items_drawn.items())
    notes = [f"items sampled: at most {drawn.items} per record (seed {drawn.seed}): {counts} items drawn"]
    for m in metrics:
        n = drawn.items_drawn.get(m.spec)
        if n is not None and m.items is not None and m.items > n:
            notes.append(
                f"{m.spec}: the figures count {m.items} items, {m.items - n} more than drawn: every verdict "
                "stored for these records is counted, and earlier runs judged more of their items"
            )
    return notes
