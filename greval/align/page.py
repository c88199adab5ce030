"""The align page: the decision (the test-part comparison with its CI, beside the human ceiling), every candidate
fold by fold, the final spec's few-shot examples and the diff. One self-contained HTML file."""

from __future__ import annotations

from html import escape

from greval.align.decide import fmt_gain, fmt_gain_ci, table_line
from greval.align.ledger import describe
from greval.align.models import REPORT_NAME, AlignResult, CandidateResult
from greval.align.price import usd_line
from greval.report.agreement import CSS
from greval.report.format import fmt_ci, fmt_number


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _decision(r: AlignResult) -> str:
    name = REPORT_NAME[r.objective]
    verdict = "adopted" if r.adopted else "not adopted"
    parts = [f"<h2>Decision: {verdict}</h2><p>{escape(r.decision.message)}</p>"]
    d = r.decision.difference
    if d is not None:
        rows = [
            [f"{escape(r.spec)}@{escape(r.old_hash)} (current)", fmt_number(d.old), "", ""],
            [f"{escape(r.spec)}@{escape(r.new_hash or '')} (winner)", fmt_number(d.new), "", ""],
            ["gain", fmt_gain(d.gain), escape(fmt_gain_ci(d)), escape(d.note or "")],
        ]
        parts.append(_table([f"on the test part: {name}", "value", f"{d.level:.0%} CI", "note"], rows))
        weighting = "design-weighted (1/π), " if d.weighted else ""
        parts.append(
            f"<p class=note>{d.n_units} test units of {d.n_records} records, which no search step read; "
            f"{weighting}{d.resamples} paired bootstrap resamples of {escape(d.unit)}, seed {r.split.seed}. "
            f"Adopted only when the lower bound exceeds {r.decision.min_gain:g}.</p>"
        )
    for t in r.decision.tables:
        head = ["people's label ↓ / judge's →", *t.labels, "invalid"]
        rows = [[escape(lab), *map(str, t.confusion[i])] for i, lab in enumerate(t.labels)]
        parts.append(f"<p>{escape(table_line(t))}</p>" + _table(head, rows))
    if r.ledger is not None:
        parts.append("<h2>The ledger of these labels</h2>" + "".join(f"<p>{escape(x)}</p>" for x in describe(r.ledger)))
    c = r.decision.ceiling
    if c is not None:
        ceiling = f"{fmt_number(c.value)} {fmt_ci(c)}".strip()
        parts.append(
            f"<p>Human ceiling (people's mean pairwise {escape(c.metric)} over every item two of them labelled, "
            f"n = {c.n}, as <code>greval agreement</code> reports it): {ceiling} "
            f"<span class=note>{escape(c.note or '')}</span></p>"
        )
    return "".join(parts)


def _candidates(r: AlignResult) -> str:
    k = len(r.split.fold_units)
    header = ["round", "candidate", "status", f"CV {REPORT_NAME[r.objective]}"]
    header += [f"fold {i + 1}" for i in range(k)] + ["calls this run", "tokens this run", "note"]

    def row(c: CandidateResult) -> list[str]:
        mark = " ★" if c.id == r.best.id else ""
        folds = {f.fold: f for f in c.folds}
        cells = [fmt_number(folds[i].score) if i in folds else "" for i in range(k)]
        return [
            str(c.round),
            escape(c.description) + mark,
            escape(c.status),
            fmt_number(c.cv),
            *cells,
            str(c.cost.calls),
            str(c.cost.tokens),
            escape(c.note or ""),
        ]

    return (
        "<h2>Candidates × folds</h2>"
        + _table(header, [row(c) for c in r.candidates])
        + (
            f"<p class=note>Each fold's score is the fold's instance on that fold's units, the instance learnt from "
            f"the other folds only; CV is the objective over every search unit's out-of-fold answer. Search stopped: "
            f"{escape(r.stopped)}. ★ the best by CV.</p>"
        )
    )


def _usd(r: AlignResult) -> str:
    """The money the calls cost, at the price table a run's summary uses, and where its prices come from."""
    return usd_line(r.usd, r.prices) + (f" ({r.prices})" if r.usd is not None and r.usd.usd is not None else "")


def render_page(r: AlignResult) -> str:
    """The whole page."""
    s = r.split
    parts = [
        f"<h1>greval align: {escape(r.spec)}@{escape(r.old_hash)}</h1>",
        f"<p>judge {escape(r.judge)}, optimizer {escape(r.optimizer)}; objective {REPORT_NAME[r.objective]}; "
        f"labels from {escape(', '.join(r.datasets))}"
        + (f", each unit's the gold {escape(r.gold)}" if r.gold else "")
        + f". Split once by record (seed {s.seed}): search part "
        f"{s.units_search} units of {s.records_search} records in {len(s.fold_units)} folds "
        f"({', '.join(map(str, s.fold_units))} units), test part {s.units_test} units of {s.records_test} records. "
        f"Spent {r.spent.calls} calls, {r.spent.tokens} tokens ({r.spent.tokens_in} prompt, "
        f"{r.spent.tokens_cached} of them cached; {r.spent.tokens_out} answer)"
        + (f" (budget: {r.budget_calls} calls)" if r.budget_calls is not None else "")
        + (f" (budget: {r.budget_tokens} tokens)" if r.budget_tokens is not None else "")
        + f"; cost {escape(_usd(r))}.</p>",
        _decision(r),
        _candidates(r),
    ]
    if r.examples:
        rows = [[escape(e.unit), escape(e.answer), escape(e.reason), escape(e.reason_from)] for e in r.examples]
        parts.append(
            "<h2>The winner's few-shot examples</h2>" + _table(["unit", "answer", "reason", "reason from"], rows)
        )
    if r.diff:
        parts.append(f"<h2>Diff</h2><pre>{escape(r.diff)}</pre>")
    for note in r.notes:
        parts.append(f"<p class=note>note: {escape(note)}</p>")
    title = f"greval align: {escape(r.spec)}"
    head = f"<!doctype html><html><head><meta charset=utf-8><title>{title}</title><style>{CSS}</style></head>"
    return f"{head}<body>{''.join(parts)}</body></html>"


__all__ = ["render_page"]
