"""``greval watch``: continuous evaluation of a live system's traces, a pass at a time.

A pass reads the source a page at a time after the cursors the store keeps (:mod:`greval.watch.sources`), samples
each page (:mod:`greval.watch.sampling`), admits what the rate cap and the day's budget allow
(:mod:`greval.watch.budget`), judges the admitted traces with each metric's production version through the one
front door of every run (:func:`greval.flows.run.arun_dataset`), writes the verdicts back to Phoenix as annotations,
and commits the page (:mod:`greval.store.watch`: exactly once across restarts and kills). Then it computes the
figures of the windows it touched and compares each with its baseline (:mod:`greval.watch.windows`), sends each
closed window's review share to the queue (:mod:`greval.watch.review`), and raises alarms
(:mod:`greval.watch.alarms`). :class:`Watch` runs one pass (``--once``) or passes forever (``--every``), with a
health endpoint, back-off while the source fails, and a clean stop on SIGTERM between pages.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greval._sync import run_sync
from greval.dataset.records import HashedRow
from greval.dataset.source import DataSource
from greval.errors import GrevalError, UserError
from greval.flows.run import DataNote, JudgeNote, JudgeRef, RunEvent, arun_dataset, choose_judge
from greval.judge.outcome import config_for
from greval.llm.config import JudgeConfig
from greval.llm.prices import Price, calls_cost, load_prices, price_for
from greval.runner.options import RunSummary
from greval.spec import BaseSpec, Spec, order_specs, resolve_specs
from greval.store.results import missing_fields
from greval.store.store import Store, spec_keys
from greval.store.watch import Decision, Outcome, PageCommit
from greval.traces.assemble import root_of
from greval.traces.source import TraceRows, field_origin
from greval.traces.spans import Span
from greval.types import ErrorKind
from greval.watch.alarms import load_webhook, post_alarm, write_checks
from greval.watch.budget import budget_room, day_start, rate_room
from greval.watch.options import WatchOptions, watch_id
from greval.watch.review import deliver, route_window
from greval.watch.sampling import chosen, offset, stratum_of, trace_fields, window_of
from greval.watch.service import Backoff, Health
from greval.watch.sources import Page, SeenTrace, SourceError, WatchSource, open_source, position_of, position_text
from greval.watch.where import Expr
from greval.watch.windows import Scope, WindowFigures, evaluate

if TYPE_CHECKING:
    from greval.annotation.argilla import Connection

__all__ = ["PassReport", "Watch", "production_specs"]

#: Error kinds that say the judge, not the trace, failed: the page is tried again later, not committed.
_JUDGE_DOWN = frozenset(k.value for k in ErrorKind if k.retryable or k.fatal)


@dataclass
class PassReport:
    """What one pass did, and the lines to say (each one line)."""

    read: int = 0
    sampled: int = 0
    judged: int = 0
    held: int = 0
    problems: int = 0
    windows: list[WindowFigures] = field(default_factory=list)
    alarms: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    reviewed: int = 0
    written: int = 0
    stopped: bool = False
    #: (metric, why) -> traces the metric did not apply to (an input it requires is absent): said once a pass.
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)

    @property
    def in_alarm(self) -> int:
        return sum(1 for w in self.windows if w.alarms)

    def say(self, line: str) -> None:
        if line not in self.lines:
            self.lines.append(line)


def production_specs(store: Store, refs: Sequence[str]) -> tuple[list[BaseSpec], list[str], list[str]]:
    """(the specs to judge in dependency order, the names asked for, notes): each metric's production version
    in the store, else the spec as given (its first run makes it production). A spec file whose version is not
    production is noted, and production is judged."""
    chosen_specs: dict[str, BaseSpec] = {}
    asked: list[str] = []
    notes: list[str] = []
    for ref in refs:
        looks_like_file = Path(ref).suffix in (".yaml", ".yml", ".json") or Path(ref).exists()
        given = (
            resolve_specs([ref], with_dependencies=False) if looks_like_file or not store.production_key(ref) else []
        )
        for spec in given or [store.any_spec(str(store.production_key(ref)))]:
            asked.append(spec.name)
            chosen_specs[spec.name] = _production(store, spec, ref, notes)
    pending = [d for s in chosen_specs.values() for d in s.depends_on if d not in chosen_specs]
    while pending:
        name = pending.pop()
        if name in chosen_specs:
            continue
        key = store.production_key(name)
        spec = store.any_spec(key) if key else resolve_specs([name], with_dependencies=False)[0]
        chosen_specs[name] = spec
        pending += [d for d in spec.depends_on if d not in chosen_specs]
    return order_specs(list(chosen_specs.values())), list(dict.fromkeys(asked)), notes


def _production(store: Store, spec: BaseSpec, ref: str, notes: list[str]) -> BaseSpec:
    key = store.production_key(spec.name)
    if key is None:
        return spec
    production = store.any_spec(key)
    if production.hash != spec.hash:
        notes.append(
            f"{spec.name}: the watch judges its production version {production.hash[:12]}; {ref} is version "
            f"{spec.hash[:12]} (promote it with `greval spec promote {spec.name}@{spec.hash[:12]}` to watch it)"
        )
    return production


@dataclass
class _Pass:
    """What one pass works with: the specs (production now), the judge, the cursors, and what it did."""

    specs: list[BaseSpec]
    asked: list[str]
    keys: dict[str, str]
    judges: dict[str, str]  # metric -> the key of the judge its verdicts are stored under
    cfg: JudgeConfig
    price: Price | None
    positions: dict[str, list[Any] | None]
    expr: Expr | None
    report: PassReport
    touched: dict[str, set[float]] = field(default_factory=dict)
    latest: bool = True
    summaries: dict[str, RunSummary] = field(default_factory=dict)  # run id -> its summary (what write-back reads)


@dataclass(eq=False)
class _Trace:
    """A trace of a page on its way: as read, as a row, where it falls, which metrics still need it."""

    seen: SeenTrace
    row: HashedRow
    window: float
    needs: list[str] = field(default_factory=list)  # metrics whose cursor is before it
    todo: list[str] = field(default_factory=list)  # of those, the ones it is still to be judged or written for


class Watch:
    """One watch of one source into one store (see the module doc). ``connect``: opens an Argilla connection for
    the review queue (None: the queue stays in the store); ``stop``: set to stop between pages; ``say``: where
    lines go as they happen (the pass's report has them too)."""

    def __init__(
        self,
        store: Store,
        opts: WatchOptions,
        judge: JudgeRef,
        *,
        connect: Callable[[], Connection] | None = None,
        stop: threading.Event | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.opts = opts
        self.judge = judge
        self.connect = connect
        self.stop = stop or threading.Event()
        self.say = say or (lambda line: None)
        self.src: WatchSource = open_source(opts.source, opts.max_spans, opts.settle_s)
        self.id = watch_id(self.src.key, opts.name)
        self.expr = opts.rules.expr()
        self.hook = load_webhook()
        self.health = Health(self.src.label)
        store.register_watch(self.id, self.src.label, opts.model_dump(mode="json", exclude={"run"}))

    def close(self) -> None:
        self.src.close()

    # --------------------------------------------------------------------------------------------- a pass
    def once(self, *, latest: bool = True) -> PassReport:
        """One pass (from synchronous code: it runs on greval's own loop); ``latest``: compute each metric's
        latest window even when the pass did not touch it (what ``--once`` reports; an idle service pass does not)."""
        return run_sync(self.apass(latest=latest))

    async def apass(self, *, latest: bool = True) -> PassReport:
        """Read everything new, judge what the rules admit, then the windows: figures, alarms, review."""
        p = self._start()
        p.latest = latest
        for page in self.src.pages(self._after(p), self.opts.page_size):
            await self._page(p, page)
            if self.stop.is_set():
                p.report.stopped = True
                break
        for (metric, why), n in p.report.skipped.items():  # as greval run says it, where the field is read
            names = missing_fields(why)
            p.report.say(f"{metric}: {n} trace(s) skipped — {why}" + (f" — {field_origin(names)}" if names else ""))
        self._windows(p)
        return p.report

    def _start(self) -> _Pass:
        specs, asked, notes = production_specs(self.store, self.opts.specs)
        _, cfg = choose_judge(specs, self.judge, lambda text: None)
        price = price_for(cfg.label, load_prices())  # each trace's cost, budget or not: the page shows it
        if self.opts.limits.usd_per_day is not None and price is None and any(s.needs_model for s in specs):
            raise UserError(f"a budget in US dollars needs the judge's price: {cfg.label} is in no price table")
        stored = self.store.watch_positions(self.id)
        positions = {m: position_of(stored.get(m)) for m in ["", *asked]}
        report = PassReport()
        for note in notes:
            report.say(note)
        judges = {s.name: config_for(s, cfg).key for s in specs}
        return _Pass(specs, asked, spec_keys(specs), judges, cfg, price, positions, self.expr, report)

    def _after(self, p: _Pass) -> list[Any] | None:
        """Where the slowest cursor stands (None: a metric new to this watch reads from the start)."""
        mine = [p.positions[m] for m in p.asked]
        if any(pos is None for pos in mine):
            return None
        return min(pos for pos in mine if pos is not None)

    async def _page(self, p: _Pass, page: Page) -> None:
        commit = PageCommit()
        for note in page.notes:
            p.report.say(note)
        traces = self._rows(p, page, commit)
        self._sample(p, traces, commit)
        for t in traces:
            t.needs = [m for m in p.asked if (pos := p.positions[m]) is None or t.seen.position > pos]
            for m in t.needs:
                p.touched.setdefault(m, set()).add(t.window)
        runs = await self._judge(p, traces)
        if runs is None:
            return  # stopped while the rate cap held traces back: the page is read again next time
        commit.written = self._write_back(p, traces, runs)
        for m in ["", *p.asked]:
            pos = p.positions[m]
            if pos is None or pos < page.end:
                commit.positions[m] = position_text(page.end)
                p.positions[m] = page.end
        self.store.commit_page(self.id, commit)
        p.report.read += len(page.traces)

    def _rows(self, p: _Pass, page: Page, commit: PageCommit) -> list[_Trace]:
        """The page's readable traces as rows, each trace alone (a session's traces are not put together: a
        conversation keeps growing while it is watched); problems counted and said."""
        out: list[_Trace] = []
        src_pos = p.positions[""]
        for t in page.traces:
            window = window_of(t.started, self.opts.window_s)
            if t.problem is not None:
                p.report.problems += 1
                p.report.say(t.problem)
                if src_pos is None or t.position > src_pos:
                    commit.count(window, "!oversize" if "more than" in t.problem else "!malformed", seen=1)
                continue
            for span in t.spans:
                span.session_id = None
            rows = TraceRows(self.src.label, functools.partial(_alone, t.spans))
            try:
                (row,) = list(rows)
            except (GrevalError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
                p.report.say(f"{self.src.label}: trace {t.trace_id}: {exc}")
                commit.count(window, "!malformed", seen=1)
                continue
            out.append(_Trace(t, row, window))
        return out

    def _sample(self, p: _Pass, traces: list[_Trace], commit: PageCommit) -> None:
        """Which traces the rules choose: fresh ones drawn now (counted in ``commit``), the others as drawn before."""
        src_pos = p.positions[""]
        fresh = [t for t in traces if src_pos is None or t.seen.position > src_pos]
        new = {id(t) for t in fresh}
        known = self.store.sampled_traces(self.id, [t.seen.trace_id for t in traces if id(t) not in new])
        counts = {k: v[1] for k, v in self.store.stratum_counts(self.id, {t.window for t in fresh}).items()}
        rules = self.opts.rules
        drawn: set[str] = set(known)
        for t in fresh:
            root = root_of(t.seen.spans)
            fields = trace_fields(t.row.data, t.seen.attributes, root.metadata, root.name, t.seen.started)
            stratum = stratum_of(fields, rules.strata)
            matched = p.expr is None or p.expr.matches(fields)
            k = counts.get((t.window, stratum), 0)
            pick = matched and chosen(k, rules.rate, offset(rules.seed, t.window, stratum))
            counts[t.window, stratum] = k + int(matched)
            commit.count(t.window, stratum, seen=1, matched=int(matched), sampled=int(pick))
            if pick:
                commit.sampled.append((t.seen.trace_id, t.window, stratum))
                drawn.add(t.seen.trace_id)
        traces[:] = [t for t in traces if t.seen.trace_id in drawn]
        p.report.sampled += sum(1 for t in traces if id(t) in new)

    # ----------------------------------------------------------------------------------------- judging
    async def _judge(self, p: _Pass, traces: list[_Trace]) -> dict[str, list[HashedRow]] | None:
        """Admit and judge what the page's chosen traces still need; run id -> rows judged (for write-back); None
        when stopped while the rate cap held traces back."""
        ids = [t.seen.trace_id for t in traces]
        states = {m: self.store.item_states(self.id, m, ids) for m in p.asked}
        for t in traces:  # what is left to judge: new, admitted, or judged and not written back yet
            t.todo = [m for m in t.needs if states[m].get(t.seen.trace_id, ("", 0.0))[0] in ("", "admitted", "judged")]
        undecided = [t for t in traces if any(t.seen.trace_id not in states[m] for m in t.todo)]
        later = {id(t) for t in undecided}
        ready = [t for t in traces if t.todo and id(t) not in later]
        runs: dict[str, list[HashedRow]] = {}
        if ready:  # decided by a pass that was stopped or killed before it committed the page
            since = min(states[m][t.seen.trace_id][1] for t in ready for m in t.todo)
            await self._run(p, ready, runs, since)
        while undecided:
            n = await self._room(p, len(undecided))
            if n is None:
                return None
            held = n == 0
            chunk, undecided = (undecided, []) if held else (undecided[:n], undecided[n:])
            decisions = [Decision(m, t.seen.trace_id, t.window, "over_budget" if held else "admitted")
                         for t in chunk for m in t.todo if t.seen.trace_id not in states[m]]  # fmt: skip
            now = time.time()
            self.store.decide(self.id, decisions, now)
            if held:
                p.report.held += len(chunk)
                p.report.say(f"the day's budget is spent: {len(chunk)} chosen trace(s) held back, not judged today")
            else:
                await self._run(p, chunk, runs, now)
        return runs

    async def _room(self, p: _Pass, want: int) -> int | None:
        """How many traces may be admitted now (0: the budget is spent; None: stopped while the rate cap held)."""
        limits = self.opts.limits
        while True:
            now = time.time()
            room, wait = rate_room(self.store.admitted_since(self.id, now - 60.0), limits.rate_per_min, now)
            budget = budget_room(
                limits, self.store.watch_spend(self.id, day_start(now)), self.store.trace_spend_peak(self.id)
            )
            if budget == 0:
                return 0
            if room != 0:
                return min(x for x in (want, room, budget) if x is not None)
            if await self._sleep(wait):
                return None

    async def _sleep(self, seconds: float) -> bool:
        """Sleep, waking early when stopped; True when stopped."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.stop.is_set():
                return True
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return self.stop.is_set()

    async def _run(self, p: _Pass, chunk: Sequence[_Trace], runs: dict[str, list[HashedRow]], since: float) -> None:
        """Judge ``chunk`` through the front door of every run; its outcomes recorded, with what the judgements
        written since ``since`` (when the chunk was admitted) spent."""
        names = sorted({m for t in chunk for m in t.todo})
        specs = [s for s in p.specs if s.name in names or any(s.name in _deps(p.specs, n) for n in names)]
        hashes = [t.row.hash for t in chunk]
        retry = any(
            kind in _JUDGE_DOWN
            for m in names
            for kind in self.store.judgement_errors(p.keys[m], p.judges[m], hashes).values()
        )
        opts = self.opts.run.model_copy(update={"retry_errors": retry, "dataset_name": f"watch {self.src.label}"})
        source = DataSource(data=[t.row.record() for t in chunk], name=f"watch {self.src.label}")
        done = await arun_dataset(source, specs, p.cfg, self.store, opts, self._event(p.report), asked=names)
        outcomes = self._outcomes(p, chunk, names, done.summary, since)
        self.store.record_outcomes(self.id, outcomes)
        runs[done.summary.run_id] = [t.row for t in chunk]
        p.summaries[done.summary.run_id] = done.summary
        p.report.judged += sum(1 for o in outcomes if o.status != "skipped")
        for m in done.summary.metrics:
            if m.spec in names:
                p.report.skipped.update({(m.spec, why): n for why, n in m.skipped_why.items()})

    def _event(self, report: PassReport) -> Callable[[RunEvent], None]:
        def on(event: RunEvent) -> None:
            if isinstance(event, DataNote | JudgeNote):
                report.say(event.text)

        return on

    def _outcomes(
        self, p: _Pass, chunk: Sequence[_Trace], names: Sequence[str], summary: RunSummary, since: float
    ) -> list[Outcome]:
        """Each (trace, metric)'s outcome and spend; a judge that failed as a whole (unreachable, refused) is an
        error: the page is not committed, and is judged again on the next try."""
        out: list[Outcome] = []
        down: list[str] = []
        for m in names:
            found = self.store.judgement_outcomes(p.keys[m], p.judges[m], [t.row.hash for t in chunk], since)
            for t in chunk:
                if m not in t.todo or t.row.hash not in found:
                    continue
                status, kind, spent = found[t.row.hash]
                if status == "error" and kind in _JUDGE_DOWN:
                    down.append(kind or "unknown")
                tokens, usd = None, None
                if spent is not None:
                    t_in, t_out, cached = spent
                    tokens = t_in + t_out
                    usd = calls_cost(p.price, t_in, cached, t_out).usd if p.price is not None else None
                final = {"ok": "judged", "error": "failed"}.get(status, "skipped")
                out.append(Outcome(m, t.seen.trace_id, final, t.row.id, t.row.hash, summary.run_id, tokens, usd))
        if down:
            raise SourceError(
                f"the judge {p.cfg.label} failed on {len(down)} judgement(s) ({', '.join(sorted(set(down)))}); "
                "the page is judged again on the next try",
                transient=not any(k in ("auth", "not_found") for k in down),
            )
        return out

    def _write_back(
        self, p: _Pass, traces: Sequence[_Trace], runs: Mapping[str, list[HashedRow]]
    ) -> list[tuple[str, str]]:
        """Each run's verdicts back to the source (Phoenix: only what is not there already); what went back."""
        if not self.src.writes_back or not runs:
            return []
        by_id = {t.seen.trace_id: t for t in traces}
        for run_id, rows in runs.items():
            mine = [by_id[r.id].seen.spans for r in rows if r.id in by_id]
            back = self.src.rows(mine)
            list(back)  # where each record's verdicts go
            for line in back.after_run(self.store, p.summaries[run_id], p.specs):
                if "record(s)" in line:  # what was not judged or failed (the count of what went back is summed)
                    p.report.say(line)
        judged = {m: self.store.item_states(self.id, m, list(by_id)) for m in p.asked}
        written = [(m, tid) for m in p.asked for tid, (s, _) in judged[m].items() if s == "judged"]
        p.report.written += len(written)
        return written

    # ----------------------------------------------------------------------------------------- windows
    def _windows(self, p: _Pass) -> None:
        """Figures of the windows this pass touched, closed or people labelled since, and of each metric's latest;
        alarms; the review share."""
        now = time.time()
        for m in p.asked:
            scope = Scope(self.id, m, p.keys[m], next(s.hash for s in p.specs if s.name == m), p.judges[m],
                          self.opts.window_s)  # fmt: skip
            spec = next(s for s in p.specs if s.name == m)
            routing = self.opts.routing
            closed = self.store.windows_to_route(self.id, m, self.opts.window_s, now - self.opts.settle_s)
            if routing is not None and not p.report.stopped:  # a window's design is drawn once it is all read
                for start in closed:
                    n = route_window(self.store, scope, spec, start, routing)
                    if n:
                        p.report.reviewed += n
            latest = self.store.item_windows(self.id, m)[-1:] if p.latest else []
            relabelled = self.store.relabelled_windows(self.id, m)
            wanted = sorted({*p.touched.get(m, set()), *latest, *closed, *relabelled})
            for w, new in evaluate(self.store, scope, wanted, self.opts.baseline, self.opts.resamples):
                p.report.windows.append(w)
                if new:
                    p.report.alarms += w.alarms
            self._deliver(p, scope, spec)
        self._post(p)
        if self.opts.junit is not None:
            write_checks(self.opts.junit, self.src.label, p.report.windows)

    def _deliver(self, p: _Pass, scope: Scope, spec: BaseSpec) -> None:

        if self.connect is None or self.opts.routing is None or not isinstance(spec, Spec):
            return
        try:
            conn = self.connect()
            try:
                sent = deliver(self.store, conn, scope, spec, self.opts.routing, p.cfg.label)
            finally:
                conn.close()
        except GrevalError as exc:
            p.report.say(f"review queue: not sent to Argilla now ({exc}); sent on a later pass")
            return
        if sent:
            p.report.say(f"review queue: {sent} unit(s) of {spec.name} sent to Argilla")

    def _post(self, p: _Pass) -> None:
        if self.hook is None:
            return
        for metric, start, figures in self.store.alarms_to_post(self.id):
            problem = post_alarm(self.hook, self.src.label, figures)
            if problem is None:
                self.store.mark_posted(self.id, metric, start)
                p.report.say(f"alarm posted to the webhook {self.hook.shown}: {metric}, window {figures.get('label')}")
            else:
                p.report.say(problem)
                return

    # ----------------------------------------------------------------------------------------- service
    def serve(
        self, every_s: float, on_pass: Callable[[PassReport], None], on_error: Callable[[str, float], None]
    ) -> None:
        """Pass after pass, ``every_s`` apart, until :attr:`stop` is set. A source that fails (or a judge that
        cannot be reached) is said in one line and tried again with back-off; it never ends the service."""
        backoff = Backoff(first=min(5.0, max(1.0, every_s)), most=max(60.0, every_s * 10))
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                report = self.once(latest=self.health.passes == 0)
            except SourceError as exc:
                wait = backoff.next()
                self.health.failed(str(exc), wait)
                on_error(str(exc), wait)
                self.stop.wait(wait)
                continue
            backoff.reset()
            self.health.passed(report.read, report.judged, report.in_alarm)
            on_pass(report)
            self.stop.wait(max(0.0, every_s - (time.monotonic() - started)))
        self.health.stopping = True


def _deps(specs: Sequence[BaseSpec], name: str) -> set[str]:
    """Every metric ``name`` depends on, however deep."""
    by_name = {s.name: s for s in specs}
    out: set[str] = set()
    stack = list(by_name[name].depends_on) if name in by_name else []
    while stack:
        d = stack.pop()
        if d not in out:
            out.add(d)
            stack += list(by_name[d].depends_on) if d in by_name else []
    return out


def _alone(spans: list[Span]) -> list[list[Span]]:
    return [spans]
