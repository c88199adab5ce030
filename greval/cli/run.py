"""``greval run``: judge a dataset with one or more metric specs."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from greval.cli.bundle import gathered
from greval.cli.bundles import MAP_OPTION, DataFlags, RunFlags
from greval.cli.common import (
    ProgressBar,
    call_options,
    command_line,
    console,
    interrupted_exit,
    judge_options,
    print_run_event,
    print_summary,
    read_limit_options,
    run_signals,
    store_option,
    store_wait_option,
)
from greval.cli.flags import for_terminal

if TYPE_CHECKING:
    from greval.llm.config import JudgeChoice


@click.command("run")
@click.argument("data", type=click.Path())
@click.option(
    "-s",
    "--spec",
    "spec_refs",
    multiple=True,
    required=True,
    help="Spec file or predefined metric name; repeat for several. Dependencies are added.",
)
@store_option(help="Where verdicts are kept (created if missing; reused to resume).")
@store_wait_option("before stopping with the command that resumes; each write is made again once it is back.")
@judge_options
@click.option(
    "-c",
    "--concurrency",
    type=int,
    default=None,
    help="Model calls in flight at most [8; the embedded judge: its parallel slots].",
)
@click.option("--no-adaptive", is_flag=True, help="Keep concurrency fixed even when rate limited.")
@call_options
@MAP_OPTION
@click.option("--id-column", default=None, help="Column holding record ids [id, else a content hash].")
@click.option("--limit", type=int, default=None, help="Judge only the first N records.")
@click.option(
    "--sample",
    "sample_n",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Judge N records drawn at random without replacement (after --map and --limit), ranked by a seeded hash "
    "of each record id (the id column, else the content hash): the file's order does not matter, the same N and "
    "seed draw the same records (a re-run resumes, paying nothing twice) and a larger N draws a superset.",
)
@click.option(
    "--sample-items",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Per-item (each: chunks / triples) judge metrics: judge at most N items per record, drawn by the seed and "
    "the record's content; item ids and verdicts are unchanged, so a larger N judges only the extra items. "
    "Pipelines and computed metrics score every item.",
)
@click.option(
    "--sample-seed",
    type=int,
    default=None,
    metavar="S",
    help="Seed of --sample / --sample-items [0]. (--seed is the judge model's sampling seed, part of the judge's "
    "identity; this one only chooses what is judged.)",
)
@click.option("--retry-errors", is_flag=True, help="Judge again what earlier runs recorded as errors.")
@click.option(
    "--no-direct",
    is_flag=True,
    help="Send every call through LangChain's ainvoke. By default an OpenAI-compatible model with no "
    "callback, tracer or cache attached is called with the same request minus LangChain's per-call "
    "overhead (less client CPU, see the README's benchmarks); LangSmith tracing, callbacks or a cache "
    "switch that off by themselves.",
)
@click.option(
    "--logprobs",
    is_flag=True,
    help="Ask the judge (OpenAI-compatible: OpenAI, vLLM, llama-server …) for token log-probabilities and store "
    "each new verdict's token_confidence: the probability of its label, or of its value among the scale's values. "
    "Works with json_schema / json_mode answers (a tool call's arguments get none). Verdicts already stored are "
    "not judged again for it.",
)
@click.option(
    "--top-logprobs",
    type=click.IntRange(0, 20),
    default=10,
    show_default=True,
    help="Alternatives per token with --logprobs (a value scale needs as many as it has values).",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where the judging runs. local: this process (one core's worth of client CPU, enough for a provider's "
    "rate limit). ray: the pending records are split into shards judged by Ray tasks, each with its own share of "
    "--concurrency and of the rate limit; this process plans, shows one progress bar and records one run. Every "
    "task opens --store itself: use a PostgreSQL store for workers on other machines. Needs greval[ray].",
)
@click.option(
    "--ray-address",
    default=None,
    metavar="auto|ray://HOST:PORT",
    help="With --engine ray: the cluster to join ('auto': the one this machine belongs to, e.g. inside a Ray "
    "job; ray://HOST:PORT: a remote head's Ray Client port). Default: start a "
    "private local cluster on 127.0.0.1.",
)
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="With --engine ray: split the pending records into N tasks [the cluster's CPU count]. --concurrency is "
    "divided among them (at least 1 each).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Judge in N local processes against the same store (one event loop feeds about 128 calls in flight) "
    "[one per 128 of --concurrency, at most one per core; 1 for the embedded judge].",
)
@click.option(
    "--promote",
    is_flag=True,
    help="When the run finishes, make the versions it judged their metrics' production versions (what gate, "
    "agreement, report and export read by default). Without it, a run of an edited spec file leaves production "
    "where it was and says so; a metric's first run always sets it.",
)
@click.option(
    "--experiment",
    "experiment",
    default=None,
    metavar="WHAT",
    help="Record this run as an experiment (e.g. --experiment 'judge gpt-4o'): stored and resumable, but never what "
    "a reader reads by default, and it changes no production version. Compare it with `greval report --compare`.",
)
@click.option(
    "--dataset-name",
    default=None,
    metavar="NAME",
    help="A name for this dataset, kept with the run: `greval history` compares runs of the same name.",
)
@read_limit_options
@click.option("--quiet", is_flag=True, help="No progress bar.")
@gathered("data", DataFlags)
@gathered("run", RunFlags)
def run_cmd(
    spec_refs: Sequence[str],
    store: str,
    store_wait: float,
    judge: JudgeChoice,
    quiet: bool,
    data: DataFlags,
    run: RunFlags,
) -> None:
    """Judge DATA (JSONL, JSON, CSV or Parquet) with one or more metric specs.

    DATA may also be a LangSmith, Langfuse or Phoenix trace export (recognised by its shape: no --map needed) or
    a Phoenix project, phoenix://HOST:PORT/PROJECT[?last=24h&root=NAME&limit=N], whose traces are read through
    Phoenix's client (key: PHOENIX_API_KEY) and get every verdict back as annotations (docs/integrations.md).

    \b
    Every verdict is written to the store the moment it arrives. Running the same command again makes
    no model call for what is already judged; a killed run resumes with only the missing verdicts;
    editing a spec re-judges that spec only.

    \b
    Examples:
      greval run rag.jsonl -s answer_alignment -s chunk_evaluation --judge openai:gpt-4o-mini
      greval run out.csv -s my_metric.yaml --map question=query --map chunks=contexts \\
          --judge openai:qwen2.5-7b --base-url http://localhost:8000/v1 -c 32
      greval run big.jsonl -s chunk_evaluation --sample 200 --sample-items 5 --sample-seed 1
      greval run 'phoenix://localhost:6006/my-app?last=24h' -s chunk_evaluation -s answer_alignment
      greval run big.jsonl -s answer_similarity --engine ray --shards 8 \\
          --store postgresql://greval@db.internal/greval --ray-address auto
    """
    from greval.flows.run import RunInterrupted, run_dataset
    from greval.spec import resolve_specs

    run.check()
    specs = resolve_specs(spec_refs)
    asked = [s.name for s in resolve_specs(spec_refs, with_dependencies=False)]  # the others are pulled in
    opts = run.options()
    source = data.source()
    resume = command_line(click.get_current_context().meta.get("greval.argv", sys.argv[1:]))
    try:
        with ProgressBar(quiet) as hook, run_signals(resume, lambda: hook.__exit__(None, None, None)):
            done = run_dataset(
                source, specs, judge, store, opts, print_run_event, asked=asked, progress=hook, store_wait=store_wait
            )
    except RunInterrupted as exc:  # the run recorded itself as interrupted, with its summary
        interrupted_exit(exc, f"{exc.stored}; re-run the same command to resume")
    summary = done.summary
    print_summary(summary, origin=done.origin)
    for note in summary.notes:  # said once per run, not per verdict
        console.print(f"[yellow]note:[/] {escape(for_terminal(note))}", highlight=False)
    if summary.empty_metrics:
        names = ", ".join(m.spec for m in summary.empty_metrics)
        console.print(f"[bold red]no verdict at all[/] for {names} (see the notes above)", highlight=False)
        sys.exit(1)
