"""``greval results``: read verdicts out of a store."""

from __future__ import annotations

import json

import click

from greval.cli.common import console, print_table, store_option
from greval.cli.lazy import Lazy, LazyGroup
from greval.store.backend import display

RESULTS_COMMANDS: dict[str, Lazy] = {
    "export": Lazy(
        "greval.cli.results:results_export",
        "Export verdicts (value/label, reason, tokens, latency …) to CSV, JSONL or Parquet.",
    ),
    "runs": Lazy("greval.cli.results:results_runs", "List the runs recorded in a store."),
}


# -------------------------------------------------------------------------------------------- results
@click.group("results", cls=LazyGroup, lazy=RESULTS_COMMANDS)
def results() -> None:
    """Read verdicts out of a store."""


@click.command("export")
@store_option(must_exist=True)
@click.option("-o", "--output", required=True, type=click.Path(), help="Output file.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "jsonl", "parquet"]),
    default=None,
    help="Default: from the output file's suffix.",
)
@click.option("--spec", default=None, help="Only this metric: NAME (its production version) or NAME@HASH.")
@click.option(
    "--level",
    type=click.Choice(["item", "record"]),
    default="item",
    show_default=True,
    help="'record' aggregates chunk / triple verdicts into one score per record.",
)
@click.option(
    "--all-versions",
    is_flag=True,
    help="Every version of each metric (experiments aside), not only its production version.",
)
def results_export(store: str, output: str, fmt: str | None, spec: str | None, level: str, all_versions: bool) -> None:
    """Export verdicts (value/label, reason, tokens, latency …) to CSV, JSONL or Parquet.

    By default each metric's production version (`greval spec versions NAME` lists the others)."""
    from greval.store.export import export_results

    what = _versions_read(store, spec, all_versions)
    n = export_results(store, output, fmt, spec, "record" if level == "record" else "item", all_versions=all_versions)
    console.print(f"wrote {n} rows of {what} to {output}", highlight=False)


def _versions_read(store: str, spec: str | None, all_versions: bool) -> str:
    """What an export reads, in words: ``supported@1a2b… (production)``, or how many metrics."""
    from greval.store.store import Store

    with Store(store) as st:
        if spec is not None and not all_versions:
            return st.metric_version(spec).said()
        keys = st.reader_keys(spec, all_versions=all_versions)
    which = "every version" if all_versions else "the production version"
    return f"{which} of {spec or 'each metric'} ({len(keys)} version(s))"


@click.command("runs")
@store_option(must_exist=True)
def results_runs(store: str) -> None:
    """List the runs recorded in a store."""
    import time as _t

    from rich.markup import escape
    from rich.table import Table

    from greval.cli.common import price_source, say, tokens_text
    from greval.errors import UserError
    from greval.llm.prices import cost_text, load_prices, prices_path, run_cost
    from greval.store.store import Store

    try:
        prices = load_prices()
    except UserError as exc:
        say(f"[yellow]note:[/] no cost shown: {escape(str(exc))}", console, hang=6)
        prices = None
    with Store(store) as st:
        table = Table(title=f"runs in {display(store)}")
        cols = ("run", "started", "status", "dataset", "records", "calls", "tokens, cost")
        for col in (*cols, "metric: score (not scored)"):
            table.add_column(col)
        for r in st.runs():
            summ = json.loads(r["summary"] or "{}")
            # The run's stored summary: the same figures `greval run` printed (greval.store.results).
            metrics = summ.get("metrics") or [{"spec": name} for name in json.loads(r["specs"] or "[]")]
            spent = [{**m, "judge": m.get("judge") or summ.get("judge")} for m in metrics]
            tokens = [sum(int(m.get(k) or 0) for m in metrics) for k in ("tokens_in", "tokens_cached", "tokens_out")]
            cost = cost_text(run_cost(spent, prices)) if prices is not None and summ else "—"
            per_metric = [_metric_line(m) for m in metrics]
            recs = str(summ.get("records", ""))
            samp = summ.get("sample") or {}
            if samp.get("records") is not None and samp.get("records_drawn", 0) < samp.get("records_of", 0):
                recs += f" of {samp['records_of']} (sample, seed {samp['seed']})"
            if samp.get("items") is not None:
                recs += f"\n≤ {samp['items']} items/record"
            # an experiment (greval.store.versions) is never what a reader reads by default: said in the listing
            what = f"\nexperiment: {r['purpose'] or 'side run'}" if r.get("kind") == "experiment" else ""
            named = f" ({r['dataset_name']})" if r.get("dataset_name") else ""
            table.add_row(
                r["run_id"],
                _t.strftime("%Y-%m-%d %H:%M", _t.localtime(r["started_at"])),
                r["status"] + what,
                (r["dataset"] or "") + named,
                recs,
                str(summ.get("calls", "")),
                f"{tokens_text(*tokens)}, {cost}" if summ else "",
                "\n".join(per_metric),
            )
        print_table(table)
    if prices is not None:
        say(escape(f"tokens: prompt · of them cached · completion; cost: {price_source(prices_path())}"), console)


def _metric_line(m: dict[str, object]) -> str:
    """One metric of a run as the listing shows it: the dataset score the run's summary printed (the stored
    summary's ``mean_score``, greval.store.results' figure, written as every command writes it) and the records
    it did not score; "?" for a run with no summary yet (still going, or killed)."""
    from greval.report.format import fmt_number
    from greval.store.results import not_scored

    if "ok" not in m:
        return f"{m['spec']}: ?"
    score = m.get("mean_score")
    unscored = not_scored(m)
    return f"{m['spec']}: {fmt_number(score if isinstance(score, int | float) else None)}" + (
        f" ({unscored})" if unscored else ""
    )
