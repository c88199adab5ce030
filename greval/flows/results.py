"""What :func:`greval.evaluate` returns: a handle on one run's verdicts in the store, read as the user asks —
a DataFrame (one row per record, a column per metric), the dataset scores with CIs, the worst records,
agreement with people. Every figure is read from the store and computed where greval computes it
(:mod:`greval.store.results`, :mod:`greval.report.scores`, :mod:`greval.agreement`).
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from greval.agreement.agreement import compute_agreement
from greval.agreement.bootstrap import RESAMPLES, Resampling
from greval.agreement.models import AgreementOptions, Estimate
from greval.agreement.scale import agreement_scale
from greval.errors import DataError, UserError
from greval.gate.checks import check
from greval.report.format import fmt_ci, fmt_number
from greval.report.scores import run_items, score_rows
from greval.runner import RunSummary
from greval.spec import BaseSpec, CategoricalScale, Spec
from greval.store.results import metric_notes, record_rows, verdict_frame
from greval.store.store import Store

if TYPE_CHECKING:
    import pandas as pd

    from greval.agreement.models import AgreementReport
    from greval.gate.checks import Check
    from greval.report.scores import ScoreRow

#: What the wide frame shows of each metric, one column each: ``METRIC.score`` …
FIELDS = ("score", "label", "reason", "status")


class Results:
    """One evaluation: its run in the store (:attr:`summary`), read on demand.

    ``to_pandas()``: one row per record (in the data's order), a column per metric and field
    (``faithfulness.score``, ``.label``, ``.reason``, ``.status``); ``summary()``: each metric's dataset score
    with its 95 % CI; ``worst(metric)``: the lowest-scored records; ``agreement(human=…)``: the judge against
    people's labels. In a notebook it shows itself as the summary table."""

    def __init__(
        self,
        store: str | Store,
        summary: RunSummary,
        specs: Sequence[BaseSpec],
        asked: Sequence[str],
        ids: Sequence[str],
        notes: Sequence[str] = (),
        positional: bool = True,
        origin: Callable[[Sequence[str]], str] | None = None,
    ) -> None:
        self.store = store
        self.run = summary
        self.specs = {s.name: s for s in specs}
        self.asked = list(asked)
        self.ids = list(ids)
        self.positional = positional
        found = [n for m in summary.metrics for n in metric_notes(m, origin=origin)]
        self.notes = list(dict.fromkeys([*notes, *summary.notes, *found]))

    # ------------------------------------------------------------------------------------------- basics
    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def metrics(self) -> list[str]:
        """Every metric of the run, dependencies included, in run order."""
        return [m.spec for m in self.run.metrics]

    @property
    def calls(self) -> int:
        """Model calls this evaluation made (0 when the store had every verdict)."""
        return self.run.calls

    @contextlib.contextmanager
    def _open(self) -> Iterator[Store]:
        if isinstance(self.store, Store):
            yield self.store
            return
        with Store(self.store) as st:
            yield st

    def _items(self, st: Store, metric: str | None = None) -> list[dict[str, Any]]:
        """Item rows of this run's metrics (or one) on its records, in run order."""

        pairs = [(m.spec_key, m.judge_key) for m in self.run.metrics if metric is None or m.spec == metric]
        return run_items(st, self.run_id, pairs)

    def _metric(self, metric: str | None, judged: bool = False) -> str:
        """The metric named, or the only one asked for (a judge metric, when ``judged``)."""
        names = [n for n in self.metrics if not judged or isinstance(self.specs.get(n), Spec)]
        if metric is None:
            asked = [n for n in self.asked if n in names] or names
            if len(asked) != 1:
                raise UserError(f"several metrics here ({', '.join(asked) or 'none'}): name one, metric=…")
            return asked[0]
        if metric not in names:
            raise UserError(f"no {'judge ' if judged else ''}metric {metric!r} here; there are: {', '.join(names)}")
        return metric

    # ------------------------------------------------------------------------------------------- frames
    def to_pandas(self, level: Literal["record", "item"] = "record", wide: bool = True) -> pd.DataFrame:
        """The verdicts as a DataFrame. ``wide``: one row per record id in the data's order (per (record id,
        item id) for ``level="item"``), columns ``METRIC.score``, ``.label``, ``.reason``, ``.status`` per
        metric; else the long table :func:`greval.load_results` returns, for this run's records only."""
        import pandas as pd

        if level not in ("record", "item"):
            raise UserError(f"level {level!r}: 'record' or 'item'")
        with self._open() as st:
            items = self._items(st)
            if not wide:
                return verdict_frame(st, items, level)
            specs = {key: st.any_spec(key) for key in dict.fromkeys(r["spec_key"] for r in items)}
        rows = record_rows(items, specs) if level == "record" else items
        cells: dict[tuple[str, ...], dict[str, Any]] = {}
        for r in rows:
            key = (str(r["record_id"]),) if level == "record" else (str(r["record_id"]), str(r["item_id"]))
            cells.setdefault(key, {}).update({f"{r['spec']}.{f}": r[f] for f in FIELDS})
        columns = [f"{m}.{f}" for m in self.metrics for f in FIELDS]
        order = {rid: i for i, rid in enumerate(self.ids)}
        keys = sorted(cells, key=lambda k: (order.get(k[0], len(order)), k[1:]))
        if level == "record":
            keys += [(rid,) for rid in self.ids if (rid,) not in cells]
            index: pd.Index[Any] = pd.Index([k[0] for k in keys], name="record_id")
        else:
            index = pd.MultiIndex.from_tuples(keys, names=["record_id", "item_id"])
        return pd.DataFrame([cells.get(k, {}) for k in keys], index=index, columns=columns)

    def scores(self, *, resamples: int = RESAMPLES, seed: int = 0) -> list[ScoreRow]:
        """Each metric's figures and dataset score with its bootstrap CI (:mod:`greval.report.scores`)."""

        with self._open() as st:
            return score_rows(st, self._items(st), resampling=Resampling(resamples=resamples, seed=seed))

    def checks(
        self,
        *,
        min_score: float | None = None,
        max_score: float | None = None,
        ci: Literal["value", "lower", "upper"] = "value",
    ) -> list[tuple[str, Check]]:
        """(metric, check) for each metric asked for and each bound given: its dataset score (the point value,
        or an end of its 95 % CI) ``>= min_score`` / ``<= max_score`` — the test ``greval gate`` makes of
        ``score>=X`` (an undefined score fails, saying why)."""

        if ci not in ("value", "lower", "upper"):
            raise UserError(f"ci {ci!r}: 'value', 'lower' or 'upper'")
        bounds = [(op, x) for op, x in ((">=", min_score), ("<=", max_score)) if x is not None]
        if not bounds:
            return []
        rows = {r.metric: r for r in self.scores()}
        out = []
        for name in self.asked:
            row = rows.get(name)
            est = row.estimate() if row is not None else Estimate(value=None, n=0, note="no verdict")
            out += [(name, check("score", est, op, x, ci)) for op, x in bounds]
        return out

    def summary(self) -> pd.DataFrame:
        """One row per metric: its dataset score (the figure ``greval run`` prints) with a 95 % bootstrap CI,
        the records scored, failed and skipped, and what this evaluation judged or found in the store."""
        import pandas as pd

        done = {m.spec: m for m in self.run.metrics}
        rows = []
        for row in self.scores():
            f, s, m = row.figures, row.score, done[row.metric]
            rows.append(
                {
                    "metric": row.metric,
                    "score": f.mean_score,
                    "ci_low": s.ci_low,
                    "ci_high": s.ci_high,
                    "scored": f.scored,
                    "records": f.records,
                    "failed": f.failed + f.partial,
                    "skipped": f.skipped,
                    "judged": m.judged,
                    "reused": m.reused,
                    "aggregate": f.aggregate,
                    "note": s.note,
                }
            )
        return pd.DataFrame(rows).set_index("metric") if rows else pd.DataFrame()

    def worst(self, metric: str | None = None, n: int = 5) -> pd.DataFrame:
        """The ``n`` lowest-scored records of a metric (then the failed ones): record id, score, label, the
        reason (a per-item metric's: its lowest item's, ``ITEM: LABEL — reason``), status and error."""
        import pandas as pd

        name = self._metric(metric)
        with self._open() as st:
            items = self._items(st, name)
            recs = record_rows(items, {key: st.any_spec(key) for key in {r["spec_key"] for r in items}})
        order = {rid: i for i, rid in enumerate(self.ids)}
        recs.sort(key=lambda r: (r["score"] is None, r["score"] or 0.0, order.get(str(r["record_id"]), 0)))
        rows = []
        for r in recs[:n]:
            why = r["reason"] or _item_reason([i for i in items if i["record_id"] == r["record_id"]])
            rows.append({"record_id": r["record_id"], "score": r["score"], "label": r["label"], "reason": why,
                         "status": r["status"], "error": r["error"]})  # fmt: skip
        return pd.DataFrame(rows, columns=["record_id", "score", "label", "reason", "status", "error"])

    # ---------------------------------------------------------------------------------------- agreement
    def agreement(
        self,
        human: Any = None,
        *,
        metric: str | None = None,
        resamples: int = RESAMPLES,
        seed: int = 0,
        bootstrap: int | None = None,
    ) -> AgreementReport:
        """The judge's agreement with people: the report ``greval agreement`` prints (κ, accuracy … with CIs
        from ``resamples`` bootstrap resamples seeded by ``seed``; ``bootstrap`` is the earlier name of
        ``resamples``).

        ``human``: None for the labels in the store (pulled from Argilla or imported); a field of the records
        (``"human_label"``, a column of the data); labels by record id (a dict, or a Series indexed by record id),
        or one per row in the data's order (a list, a Series); or a DataFrame with ``record_id``, ``label``
        and optionally ``item_id`` (required for a per-item metric) and ``annotator``."""
        from greval.agreement.from_store import store_frame

        name = self._metric(metric, judged=True)
        spec = self.specs[name]
        assert isinstance(spec, Spec)
        done = next(m for m in self.run.metrics if m.spec == name)
        options = AgreementOptions(resamples=resamples if bootstrap is None else bootstrap, seed=seed)
        with self._open() as st:
            if human is None:
                frame, scale, _ = store_frame(st, name, done.judge_key, "item", done.spec_hash)
                return compute_agreement(frame, scale, options)
            items = self._items(st, name)
            labels = self._labels(human, spec, st)
        return compute_agreement(_joined(spec, items, labels), agreement_scale(spec), options)

    def _labels(self, human: Any, spec: Spec, st: Store) -> list[dict[str, Any]]:
        """People's labels as rows (record_id, item_id, annotator, human)."""
        import pandas as pd

        if isinstance(human, str):
            data = {rec.id: rec.data for rec in st.records_with_ids(self.ids)}
            if not any(human in d for d in data.values()):
                raise DataError(f"no record has a field {human!r} to read people's labels from")
            return [{"record_id": rid, "item_id": "", "human": data.get(rid, {}).get(human)} for rid in self.ids]
        if isinstance(human, pd.DataFrame):
            return _frame_labels(human)
        if isinstance(human, Sequence) and not isinstance(human, str | bytes):
            human = dict(enumerate(human))  # one label per row of the data, in its order
        if isinstance(human, pd.Series | Mapping):
            pairs = list(human.items())
            known = set(self.ids)
            if pairs and all(str(k) in known for k, _ in pairs):
                return [{"record_id": str(k), "item_id": "", "human": v} for k, v in pairs]
            if len(pairs) == len(self.ids) and self.positional:
                return [
                    {"record_id": rid, "item_id": "", "human": v} for rid, (_, v) in zip(self.ids, pairs, strict=True)
                ]
            raise DataError(
                f"human: {len(pairs)} labels whose keys are not this data's record ids, and not one per record "
                f"({len(self.ids)}) in the data's order; give them by record id"
            )
        raise DataError(f"human: a {type(human).__name__}; give a field name, labels by record id or a DataFrame")

    # ------------------------------------------------------------------------------------------ display
    def _headline(self) -> str:
        r = self.run
        where = self.store.name if isinstance(self.store, Store) else str(self.store)
        return (
            f"greval evaluation {r.run_id}: {r.records} records, judge {r.judge}, {r.calls} calls in "
            f"{r.seconds:.1f}s; store {where}"
        )

    def _repr_html_(self) -> str:

        table = self.summary()
        body = "".join(
            f"<tr><td>{html.escape(str(m))}</td><td>{fmt_number(row['score'])}</td>"
            f"<td>{_ci(row['ci_low'], row['ci_high'])}</td><td>{row['scored']}/{row['records']}</td>"
            f"<td>{row['failed']}</td><td>{row['skipped']}</td><td>{row['judged']}</td><td>{row['reused']}</td></tr>"
            for m, row in table.iterrows()
        )
        head = "".join(
            f"<th>{c}</th>" for c in ("metric", "score", "95% CI", "scored", "failed", "skipped", "judged", "reused")
        )
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        return (
            f"<div><p>{html.escape(self._headline())}</p><table><thead><tr>{head}</tr></thead><tbody>{body}"
            f"</tbody></table>{f'<ul>{notes}</ul>' if notes else ''}</div>"
        )

    def __repr__(self) -> str:

        lines = [self._headline()]
        for m in self.run.metrics:
            lines.append(f"  {m.spec}: score {fmt_number(m.mean_score)} ({m.scored} of {m.records} records scored)")
        return "\n".join(lines)


def _ci(low: float | None, high: float | None) -> str:

    class _Interval:
        ci_low, ci_high = low, high

    return fmt_ci(_Interval())


def _item_reason(items: Sequence[Mapping[str, Any]]) -> str | None:
    """A per-item metric's reason for a record: its lowest-scored ok item's (``ITEM: LABEL — reason``)."""
    ok = [i for i in items if i["status"] == "ok" and i["item_id"] != ""]
    if not ok:
        return None
    low = min(ok, key=lambda i: (i["score"] is None, i["score"] if i["score"] is not None else 0.0))
    label = low["label"] if low["label"] is not None else low["value"]
    return f"{low['item_id']}: {label} — {low['reason']}" if low["reason"] else f"{low['item_id']}: {label}"


def _frame_labels(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Labels from a DataFrame: ``record_id`` (or ``id``), ``label`` (or ``human``), ``item_id``, ``annotator``."""
    rid = next((c for c in ("record_id", "id") if c in frame.columns), None)
    lab = next((c for c in ("label", "human", "value") if c in frame.columns), None)
    if rid is None or lab is None:
        raise DataError(
            f"human: the DataFrame needs a record_id and a label column; it has {', '.join(map(str, frame.columns))}"
        )
    out = []
    for r in frame.to_dict("records"):
        row = {"record_id": str(r[rid]), "item_id": str(r.get("item_id") or ""), "human": r[lab]}
        if "annotator" in frame.columns:
            row["annotator"] = r["annotator"]
        out.append(row)
    return out


def _joined(spec: Spec, items: Sequence[Mapping[str, Any]], labels: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The agreement stage's long frame: each person's label beside the judge's verdict on the same record
    (and item); a failed verdict is the judge's missing answer (the invalid-answer policy decides)."""
    import pandas as pd

    categorical = isinstance(spec.scale, CategoricalScale)
    verdicts = {(str(i["record_id"]), str(i["item_id"])): i for i in items}
    unknown = sorted({str(r["record_id"]) for r in labels} - {k[0] for k in verdicts})
    if unknown:
        raise DataError(f"human: labels for record ids this evaluation has no verdict of: {', '.join(unknown[:5])}")
    if spec.each and any(not r["item_id"] for r in labels):
        raise DataError(
            f"{spec.name} judges each of a record's {spec.each} apart: give labels per item "
            "(a DataFrame with record_id, item_id and label)"
        )
    rows = []
    for r in labels:
        v = verdicts.get((r["record_id"], r["item_id"]))
        ok = v is not None and v["status"] == "ok"
        judge = (v["label"] if categorical else v["value"]) if ok and v is not None else None
        item = r["record_id"] + (f"/{r['item_id']}" if r["item_id"] else "")
        rows.append({"item": item, "judge": judge, "human": r["human"], "group": r["record_id"], **(
            {"annotator": r["annotator"]} if "annotator" in r else {})})  # fmt: skip
    return pd.DataFrame(rows)
