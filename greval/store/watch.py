"""``greval watch``'s state (schema 8): how far each watch has read its source, what its sampling chose, each chosen
trace's way through every metric, and each window's figures and alarm.

Exactly-once rests on two transactions per page of the source (:mod:`greval.flows.watch`): :meth:`WatchState.decide`
records which chosen traces are admitted or held back by the daily budget before any of them is judged (so a page
read again after a crash decides nothing anew), and :meth:`WatchState.commit_page` moves every cursor past the page
in the same transaction as the page's counts, the traces it chose and what became of them. A page killed between
the two is read again from the source: its verdicts are in the store (no call is made again) and what went back to
Phoenix is there already (nothing is written again).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from greval.store.backend import DB, batched
from greval.store.connection import StoreFile
from greval.store.lookups import UnitVerdict

#: A watch item's statuses: decided (``admitted``, ``over_budget``), then what judging made of it.
DONE = ("judged", "written", "failed", "skipped")


class Decision(NamedTuple):
    """One chosen trace for one metric, decided before judging."""

    metric: str
    trace_id: str
    window_start: float
    status: str  # admitted | over_budget


class Outcome(NamedTuple):
    """What judging made of an admitted trace for one metric."""

    metric: str
    trace_id: str
    status: str  # judged | failed | skipped
    record_id: str
    record_hash: str
    run_id: str
    tokens: int | None  # None: what judging made was there before (it cost nothing now)
    usd: float | None


@dataclass
class PageCommit:
    """Everything one page changes, written in one transaction (:meth:`WatchState.commit_page`)."""

    positions: dict[str, str] = field(default_factory=dict)  # metric ('' = the sampling's) -> position (JSON)
    strata: dict[tuple[float, str], list[int]] = field(
        default_factory=dict
    )  # (window, stratum) -> seen, matched, sampled
    sampled: list[tuple[str, float, str]] = field(default_factory=list)  # (trace id, window, stratum)
    written: list[tuple[str, str]] = field(default_factory=list)  # (metric, trace id) written back

    def count(self, window: float, stratum: str, seen: int = 0, matched: int = 0, sampled: int = 0) -> None:
        got = self.strata.setdefault((window, stratum), [0, 0, 0])
        got[0] += seen
        got[1] += matched
        got[2] += sampled


class Spend(NamedTuple):
    """What a watch spent (tokens, and US dollars where the judge has a price) and has admitted unjudged."""

    tokens: int
    usd: float
    pending: int  # traces admitted, not judged yet


class WindowRow(NamedTuple):
    """A window of one metric, as stored."""

    window_start: float
    window_end: float
    spec_key: str | None
    figures: dict[str, Any] | None
    alarm: str | None
    alarmed_at: float | None
    posted_at: float | None
    routed_at: float | None
    review_units: int | None


class WatchState(StoreFile):
    """The ``watch_*`` tables (see the module doc)."""

    # ----------------------------------------------------------------------------------------- the watch
    def register_watch(self, watch_id: str, source: str, config: Mapping[str, Any]) -> None:
        """Record a watch (its source as messages name it, never a key; its options as JSON)."""
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT INTO watches (watch_id, source, config, created_at, updated_at) VALUES (?,?,?,?,?)"
                " ON CONFLICT (watch_id) DO UPDATE SET config=excluded.config, updated_at=excluded.updated_at",
                (watch_id, source, json.dumps(config, sort_keys=True, default=str), now, now),
            )

    def watches(self) -> list[dict[str, Any]]:
        """Every watch of the store, oldest first."""
        rows = self._rows("SELECT watch_id, source, config, created_at, updated_at FROM watches ORDER BY created_at")
        return [
            {"watch_id": w, "source": s, "config": json.loads(c), "created_at": a, "updated_at": u}
            for w, s, c, a, u in rows
        ]

    def watch_positions(self, watch_id: str) -> dict[str, str]:
        """Metric (``''``: the sampling) -> how far it has read the source (JSON, the source's own position)."""
        rows = self._rows("SELECT metric, position FROM watch_cursors WHERE watch_id=?", (watch_id,))
        return {str(m): str(p) for m, p in rows}

    def sampled_traces(self, watch_id: str, trace_ids: Sequence[str]) -> dict[str, tuple[float, str]]:
        """Of ``trace_ids``, those the watch's sampling chose: trace id -> (window, stratum)."""
        out: dict[str, tuple[float, str]] = {}
        for chunk in batched(list(dict.fromkeys(trace_ids)), 500):
            rows = self._rows(
                "SELECT trace_id, window_start, stratum FROM watch_traces WHERE watch_id=?"
                f" AND trace_id IN ({','.join('?' * len(chunk))})",
                (watch_id, *chunk),
            )
            out.update({str(t): (float(w), str(s)) for t, w, s in rows})
        return out

    def stratum_counts(self, watch_id: str, windows: Iterable[float]) -> dict[tuple[float, str], tuple[int, int, int]]:
        """(window, stratum) -> (seen, matched, sampled) so far, for the given windows."""
        out: dict[tuple[float, str], tuple[int, int, int]] = {}
        for chunk in batched(sorted(set(windows)), 500):
            rows = self._rows(
                "SELECT window_start, stratum, seen, matched, sampled FROM watch_strata WHERE watch_id=?"
                f" AND window_start IN ({','.join('?' * len(chunk))})",
                (watch_id, *chunk),
            )
            out.update({(float(w), str(s)): (int(a), int(b), int(c)) for w, s, a, b, c in rows})
        return out

    # ------------------------------------------------------------------------------------- the items
    def item_states(self, watch_id: str, metric: str, trace_ids: Sequence[str]) -> dict[str, tuple[str, float]]:
        """Of ``trace_ids``, those already decided for ``metric``: trace id -> (status, when it was decided)."""
        out: dict[str, tuple[str, float]] = {}
        for chunk in batched(list(dict.fromkeys(trace_ids)), 500):
            rows = self._rows(
                "SELECT trace_id, status, decided_at FROM watch_items WHERE watch_id=? AND metric=?"
                f" AND trace_id IN ({','.join('?' * len(chunk))})",
                (watch_id, metric, *chunk),
            )
            out.update({str(t): (str(s), float(d)) for t, s, d in rows})
        return out

    def decide(self, watch_id: str, decisions: Sequence[Decision], at: float) -> None:
        """Record decisions taken before judging (a decision already recorded stays as it was)."""
        with self._tx() as db:
            db.executemany(
                "INSERT INTO watch_items (watch_id, metric, trace_id, window_start, status, decided_at)"
                " VALUES (?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                [(watch_id, d.metric, d.trace_id, d.window_start, d.status, at) for d in decisions],
            )

    def commit_page(self, watch_id: str, page: PageCommit) -> None:
        """One page done, in one transaction: its cursors, counts, chosen traces and outcomes."""
        now = time.time()

        def write(db: DB) -> None:
            db.executemany(
                "INSERT INTO watch_cursors (watch_id, metric, position, updated_at) VALUES (?,?,?,?)"
                " ON CONFLICT (watch_id, metric) DO UPDATE SET position=excluded.position,"
                " updated_at=excluded.updated_at",
                [(watch_id, m, p, now) for m, p in page.positions.items()],
            )
            db.executemany(
                "INSERT INTO watch_strata (watch_id, window_start, stratum, seen, matched, sampled)"
                " VALUES (?,?,?,?,?,?) ON CONFLICT (watch_id, window_start, stratum) DO UPDATE SET"
                " seen=watch_strata.seen+excluded.seen, matched=watch_strata.matched+excluded.matched,"
                " sampled=watch_strata.sampled+excluded.sampled",
                [(watch_id, w, s, *n) for (w, s), n in page.strata.items()],
            )
            db.executemany(
                "INSERT INTO watch_traces (watch_id, trace_id, window_start, stratum) VALUES (?,?,?,?)"
                " ON CONFLICT DO NOTHING",
                [(watch_id, *t) for t in page.sampled],
            )
            db.executemany(
                "UPDATE watch_items SET status='written' WHERE watch_id=? AND metric=? AND trace_id=?"
                " AND status='judged'",
                [(watch_id, m, t) for m, t in page.written],
            )

        with self._tx() as db:  # not run again whole: its counts add up
            write(db)

    def record_outcomes(self, watch_id: str, outcomes: Sequence[Outcome]) -> None:
        """What judging made of admitted traces (their spend counts against the day's budget from now on)."""
        now = time.time()
        with self._tx() as db:
            db.executemany(
                "UPDATE watch_items SET status=?, record_id=?, record_hash=?, run_id=?, judged_at=?,"
                " tokens=COALESCE(?, tokens), usd=COALESCE(?, usd)"
                " WHERE watch_id=? AND metric=? AND trace_id=? AND status NOT IN ('written', 'over_budget')",
                [
                    (
                        o.status,
                        o.record_id,
                        o.record_hash,
                        o.run_id,
                        now,
                        o.tokens,
                        o.usd,
                        watch_id,
                        o.metric,
                        o.trace_id,
                    )
                    for o in outcomes
                ],
            )

    # ----------------------------------------------------------------------------------- spend and rate
    def watch_spend(self, watch_id: str, since: float) -> Spend:
        """What the watch's traces decided since ``since`` spent, and how many admitted ones wait to be judged."""
        done = ",".join(f"'{s}'" for s in DONE)
        row = self._rows(
            "SELECT COALESCE(SUM(tokens), 0), COALESCE(SUM(usd), 0),"
            " COUNT(DISTINCT CASE WHEN status='admitted' THEN trace_id END)"
            f" FROM watch_items WHERE watch_id=? AND decided_at>=? AND (status IN ({done}) OR status='admitted')",
            (watch_id, since),
        )[0]
        return Spend(int(row[0]), float(row[1]), int(row[2]))

    def trace_spend_peak(self, watch_id: str, last: int = 500) -> tuple[int, float] | None:
        """The most a judged trace of the watch cost (tokens, US dollars over its metrics), over its last ``last``
        judged traces; None before any was judged."""
        rows = self._rows(
            "SELECT MAX(t), MAX(u) FROM (SELECT SUM(COALESCE(tokens, 0)) AS t, SUM(COALESCE(usd, 0)) AS u,"
            " MAX(judged_at) AS at FROM watch_items WHERE watch_id=? AND judged_at IS NOT NULL GROUP BY trace_id"
            " ORDER BY at DESC LIMIT ?) recent",
            (watch_id, last),
        )
        if not rows or rows[0][0] is None:
            return None
        return int(rows[0][0]), float(rows[0][1] or 0.0)

    def admitted_since(self, watch_id: str, since: float) -> list[float]:
        """When each trace admitted since ``since`` was admitted (oldest first): what the rate cap counts."""
        rows = self._rows(
            "SELECT MIN(decided_at) AS at FROM watch_items WHERE watch_id=? AND decided_at>? AND status!='over_budget'"
            " GROUP BY trace_id ORDER BY at",
            (watch_id, since),
        )
        return [float(r[0]) for r in rows]

    def judgement_outcomes(
        self, spec_key: str, judge_key: str, hashes: Sequence[str], since: float
    ) -> dict[str, tuple[str, str | None, tuple[int, int, int | None] | None]]:
        """record hash -> (status, error kind, (tokens in, tokens out, cached tokens) when the judgement was written
        since ``since`` — made for the watch —, else None: reused from before, it cost the watch nothing)."""
        rows = self._rows_for(
            "SELECT record_hash, status, error_kind, updated_at, COALESCE(tokens_in, 0), COALESCE(tokens_out, 0),"
            " tokens_cached FROM judgements WHERE spec_key=? AND judge_key=?",
            (spec_key, judge_key),
            hashes,
        )
        return {
            str(h): (str(s), k, (int(a), int(b), None if c is None else int(c)) if float(at) >= since else None)
            for h, s, k, at, a, b, c in rows
        }

    def judgement_errors(self, spec_key: str, judge_key: str, hashes: Sequence[str]) -> dict[str, str]:
        """record hash -> error kind of the stored judgements of those records that are errors."""
        rows = self._rows_for(
            "SELECT record_hash, error_kind FROM judgements WHERE spec_key=? AND judge_key=? AND status='error'",
            (spec_key, judge_key),
            hashes,
        )
        return {str(h): str(k or "unknown") for h, k in rows}

    # ---------------------------------------------------------------------------------------- windows
    def window_items(self, watch_id: str, metric: str, windows: Sequence[float]) -> list[dict[str, Any]]:
        """The watch's items of ``metric`` in ``windows``: trace id, window, status, record id / hash, run, spend."""
        out: list[dict[str, Any]] = []
        cols = [
            "trace_id",
            "window_start",
            "status",
            "record_id",
            "record_hash",
            "run_id",
            "tokens",
            "usd",
            "review_batch",
        ]
        for chunk in batched(sorted(set(windows)), 200):
            rows = self._rows(
                f"SELECT {', '.join(cols)} FROM watch_items WHERE watch_id=? AND metric=?"
                f" AND window_start IN ({','.join('?' * len(chunk))}) ORDER BY window_start, decided_at, trace_id",
                (watch_id, metric, *chunk),
            )
            out += [dict(zip(cols, r, strict=True)) for r in rows]
        return out

    def window_strata(self, watch_id: str, windows: Sequence[float]) -> dict[float, dict[str, tuple[int, int, int]]]:
        """window -> stratum -> (seen, matched, sampled)."""
        out: dict[float, dict[str, tuple[int, int, int]]] = {}
        for (w, s), n in self.stratum_counts(watch_id, windows).items():
            out.setdefault(w, {})[s] = n
        return out

    def watch_windows(self, watch_id: str, metric: str, *, last: int | None = None) -> list[WindowRow]:
        """The windows of ``metric`` the watch has seen, oldest first (``last``: only the latest so many)."""
        sql = (
            "SELECT window_start, window_end, spec_key, figures, alarm, alarmed_at, posted_at, routed_at, review_units"
            " FROM watch_windows WHERE watch_id=? AND metric=? ORDER BY window_start DESC"
        )
        rows = self._rows(sql + (f" LIMIT {int(last)}" if last else ""), (watch_id, metric))
        return [
            WindowRow(float(a), float(b), k, json.loads(f) if f else None, al, at, po, ro, ru)
            for a, b, k, f, al, at, po, ro, ru in reversed(rows)
        ]

    def relabelled_windows(self, watch_id: str, metric: str) -> list[float]:
        """Windows of ``metric`` whose records people labelled since the window's figures were computed (their
        agreement is computed again)."""
        rows = self._rows(
            "SELECT DISTINCT w.window_start FROM watch_windows w JOIN watch_items i ON i.watch_id = w.watch_id"
            " AND i.metric = w.metric AND i.window_start = w.window_start JOIN human_labels h"
            " ON h.spec_name = i.metric AND h.record_hash = i.record_hash AND h.record_id = i.record_id"
            " WHERE w.watch_id=? AND w.metric=? AND h.updated_at > w.updated_at ORDER BY w.window_start",
            (watch_id, metric),
        )
        return [float(r[0]) for r in rows]

    def watch_metrics(self, watch_id: str) -> list[str]:
        """The metrics a watch has windows of."""
        rows = self._rows("SELECT DISTINCT metric FROM watch_windows WHERE watch_id=? ORDER BY metric", (watch_id,))
        return [str(r[0]) for r in rows]

    def watch_window(self, watch_id: str, metric: str, start: float) -> WindowRow | None:
        """One window of ``metric`` (None: never stored)."""
        rows = self._rows(
            "SELECT window_start, window_end, spec_key, figures, alarm, alarmed_at, posted_at, routed_at, review_units"
            " FROM watch_windows WHERE watch_id=? AND metric=? AND window_start=?",
            (watch_id, metric, start),
        )
        if not rows:
            return None
        a, b, k, f, al, at, po, ro, ru = rows[0]
        return WindowRow(float(a), float(b), k, json.loads(f) if f else None, al, at, po, ro, ru)

    def item_windows(self, watch_id: str, metric: str, since: float | None = None) -> list[float]:
        """The windows ``metric`` has items in (from ``since`` on), oldest first."""
        rows = self._rows(
            "SELECT DISTINCT window_start FROM watch_items WHERE watch_id=? AND metric=? AND window_start>=?"
            " ORDER BY window_start",
            (watch_id, metric, since if since is not None else float("-inf")),
        )
        return [float(r[0]) for r in rows]

    def save_window(
        self, watch_id: str, metric: str, window: tuple[float, float], spec_key: str, figures: Mapping[str, Any],
        alarm: str | None,
    ) -> bool:  # fmt: skip
        """Store a window's figures and alarm; True when the alarm is new (the window was not in alarm before)."""
        now = time.time()
        with self._tx() as db:
            before = db.execute(
                "SELECT alarm FROM watch_windows WHERE watch_id=? AND metric=? AND window_start=?",
                (watch_id, metric, window[0]),
            ).fetchone()
            db.execute(
                "INSERT INTO watch_windows (watch_id, metric, window_start, window_end, spec_key, figures, alarm,"
                " alarmed_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (watch_id, metric, window_start)"
                " DO UPDATE SET window_end=excluded.window_end, spec_key=excluded.spec_key, figures=excluded.figures,"
                " alarm=excluded.alarm, alarmed_at=COALESCE(watch_windows.alarmed_at, excluded.alarmed_at),"
                " updated_at=excluded.updated_at",
                (watch_id, metric, window[0], window[1], spec_key, json.dumps(figures, default=str), alarm,
                 now if alarm else None, now),
            )  # fmt: skip
        return alarm is not None and (before is None or before[0] is None)

    def alarms_to_post(self, watch_id: str) -> list[tuple[str, float, dict[str, Any]]]:
        """(metric, window start, figures) of every window in alarm whose webhook POST has not gone through."""
        rows = self._rows(
            "SELECT metric, window_start, figures FROM watch_windows WHERE watch_id=? AND alarm IS NOT NULL"
            " AND posted_at IS NULL ORDER BY window_start, metric",
            (watch_id,),
        )
        return [(str(m), float(w), json.loads(f) if f else {}) for m, w, f in rows]

    def mark_posted(self, watch_id: str, metric: str, window_start: float) -> bool:
        """Claim a window's alarm for its one webhook POST: True the first time only."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE watch_windows SET posted_at=? WHERE watch_id=? AND metric=? AND window_start=?"
                " AND posted_at IS NULL AND alarm IS NOT NULL",
                (time.time(), watch_id, metric, window_start),
            )
            return bool(cur.rowcount)

    # ------------------------------------------------------------------------------------------ review
    def window_units(self, spec_key: str, judge_key: str, hashes: Sequence[str]) -> list[UnitVerdict]:
        """One judge's ok verdicts of a metric version on the given records (a window's), by record then item."""
        rows = self._rows_for(
            "SELECT record_hash, item_id, record_id, label, value, confidence, reason, token_confidence FROM verdicts"
            " WHERE spec_key=? AND judge_key=? AND status='ok'",
            (spec_key, judge_key),
            hashes,
        )
        units = [
            UnitVerdict(
                record_hash=h, item_id=i, record_id=r, label=lab, value=v, confidence=c, reason=why, token_confidence=t
            )
            for h, i, r, lab, v, c, why, t in rows
        ]
        return sorted(units, key=lambda u: (u.record_hash, u.item_id))

    def windows_to_route(self, watch_id: str, metric: str, seconds: float, closed_before: float) -> list[float]:
        """Windows of ``metric`` closed (their end before ``closed_before``) with judged items no review batch has
        considered yet (a window's first batch, or traces that reached the source after it was routed)."""
        done = ",".join(f"'{s}'" for s in DONE)
        rows = self._rows(
            "SELECT DISTINCT window_start FROM watch_items WHERE watch_id=? AND metric=? AND window_start + ? <= ?"
            f" AND review_batch IS NULL AND status IN ({done}) ORDER BY window_start",
            (watch_id, metric, seconds, closed_before),
        )
        return [float(r[0]) for r in rows]

    def queue_review(
        self, watch_id: str, metric: str, window: tuple[float, float], batch: tuple[int, Sequence[str]],
        push: Mapping[str, Any], units: Sequence[Mapping[str, Any]],
    ) -> bool:  # fmt: skip
        """Add one review batch of a window — its number, and the traces it considered — to the watch's review push
        (made by the first), marking those traces in the same transaction; False when one of them was considered
        by a batch already (nothing written: routed exactly once)."""
        now = time.time()
        number, traces = batch
        with self._tx() as db:
            for chunk in batched(list(traces), 500):
                taken = db.execute(
                    "SELECT COUNT(*) FROM watch_items WHERE watch_id=? AND metric=? AND review_batch IS NOT NULL"
                    f" AND trace_id IN ({','.join('?' * len(chunk))})",
                    (watch_id, metric, *chunk),
                ).fetchone()[0]
                if taken:
                    return False
            db.execute(
                "INSERT INTO annotation_pushes (push_id, spec_name, spec_key, spec_hash, judge_key, dataset, workspace,"
                " api_url, strategy, params, population, selected, pushed, status, attempts, created_at, updated_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,0,'queued',1,?,?) ON CONFLICT (push_id) DO UPDATE SET"
                " params=excluded.params, population=annotation_pushes.population+excluded.population,"
                " selected=annotation_pushes.selected+excluded.selected, updated_at=excluded.updated_at",
                (push["push_id"], push["spec_name"], push["spec_key"], push["spec_hash"], push["judge_key"],
                 push["dataset"], push.get("workspace"), push.get("api_url") or "", push["strategy"],
                 json.dumps(push["params"], sort_keys=True), push["population"], len(units), now, now),
            )  # fmt: skip
            db.executemany(
                "INSERT INTO annotation_selection (push_id, spec_name, record_hash, item_id, record_id, argilla_id,"
                " stratum, probability, rank, pushed_at) VALUES (?,?,?,?,?,?,?,?,?,NULL) ON CONFLICT DO NOTHING",
                [
                    (push["push_id"], push["spec_name"], u["record_hash"], u["item_id"], u["record_id"],
                     u["argilla_id"], u["stratum"], u["probability"], u["rank"])
                    for u in units
                ],
            )  # fmt: skip
            db.executemany(
                "UPDATE watch_items SET review_batch=? WHERE watch_id=? AND metric=? AND trace_id=?",
                [(number, watch_id, metric, t) for t in traces],
            )
            db.execute(
                "INSERT INTO watch_windows (watch_id, metric, window_start, window_end, updated_at) VALUES (?,?,?,?,?)"
                " ON CONFLICT DO NOTHING",
                (watch_id, metric, window[0], window[1], now),
            )
            db.execute(
                "UPDATE watch_windows SET routed_at=?, review_units=COALESCE(review_units, 0)+?"
                " WHERE watch_id=? AND metric=? AND window_start=?",
                (now, len(units), watch_id, metric, window[0]),
            )
        return True

    def push_params(self, push_id: str) -> dict[str, Any] | None:
        """A push's parameters (None: no such push)."""
        rows = self._rows("SELECT params FROM annotation_pushes WHERE push_id=?", (push_id,))
        return json.loads(rows[0][0]) if rows else None

    def unpushed_units(self, push_id: str, limit: int = 1000) -> list[dict[str, Any]]:
        """A push's selected units not yet sent to Argilla (what a delivery sends next)."""
        cols = ["record_hash", "item_id", "record_id", "argilla_id", "stratum", "probability", "rank"]
        rows = self._rows(
            f"SELECT {', '.join(cols)} FROM annotation_selection WHERE push_id=? AND pushed_at IS NULL"
            f" ORDER BY rank, record_hash, item_id LIMIT {int(limit)}",
            (push_id,),
        )
        return [dict(zip(cols, r, strict=True)) for r in rows]

    def pushed_count(self, push_id: str) -> int:
        rows = self._rows(
            "SELECT COUNT(*) FROM annotation_selection WHERE push_id=? AND pushed_at IS NOT NULL", (push_id,)
        )
        return int(rows[0][0])
