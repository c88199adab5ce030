"""The ``greval`` command line. User mistakes print one line and exit 2; nothing prints a traceback for them."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from greval.cli.lazy import Lazy, LazyGroup
from greval.errors import UserError


def _console(stderr: bool) -> Console:
    """A terminal gets its own width; a file or pipe a wide one, so tables are not cut at 80 columns and
    words are not wrapped apart (COLUMNS still wins)."""
    stream = sys.stderr if stderr else sys.stdout
    wide = stream.isatty() or "COLUMNS" in os.environ
    return Console(stderr=stderr, soft_wrap=True, width=None if wide else 200)


console = _console(stderr=True)
out = _console(stderr=False)


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: what runs stops cleanly and records that it was interrupted."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def interrupted_exit(exc: BaseException, message: str) -> None:
    """One line, then the shell's code for the signal (130 for Ctrl-C, 143 for SIGTERM)."""
    console.print(f"[yellow]interrupted:[/] {message}", highlight=False)
    sys.exit(143 if isinstance(exc, Terminated) else 130)


class GrevalGroup(LazyGroup):
    """Turns user errors into one line and exit code 2; Ctrl-C and SIGTERM into one line and 130 / 143.

    Its commands are resolved inside ``invoke``, so a lazily imported command gets the same treatment."""

    def invoke(self, ctx: click.Context) -> Any:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            return super().invoke(ctx)
        except UserError as exc:
            console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            interrupted_exit(exc, "everything done so far is stored; run the same command again to resume")


# ------------------------------------------------------------------------------------- command table
# Every command of `greval`, where it lives and its short help (the first sentence of its docstring;
# tests/test_cli_startup.py checks they agree). A command's module is imported only when the command runs
# or its help is asked for, so `greval --help` imports no stage. No `except ImportError`: a module that
# cannot be imported fails loudly when its command is used.
COMMANDS: dict[str, Lazy] = {
    "agreement": Lazy(
        "greval.cli.agreement:agreement",
        "Agreement between an LLM judge and human labels in FILE (csv/tsv/jsonl/json/parquet, .gz ok), or in a "
        "greval store (--store S --spec NAME).",
    ),
    "annotate": Lazy(
        "greval.cli.annotate:annotate",
        "Human review of judge verdicts in a local Argilla server (no Docker, Elasticsearch or Redis).",
    ),
    "local-judge": Lazy(
        "greval.llm.local:local_judge",
        "Build and run the offline judge (llama.cpp's llama-server with a bundled small model).",
    ),
    "quickstart": Lazy(
        "greval.cli.quickstart:quickstart_cmd",
        "Run greval's whole loop on a bundled example, offline, in one command.",
    ),
    "reliability": Lazy(
        "greval.quality.reliability:reliability_cmd",
        "Position bias and model dependence of a judge: re-judge a sample with chunks / triples and labels "
        "reordered, report how often verdicts flip, and how well a panel of judge models agrees.",
    ),
    "report": Lazy(
        "greval.report.store_report:report_cmd",
        "Write an HTML report of a store: metrics, systems side by side, judge-vs-human agreement.",
    ),
    "results": Lazy("greval.cli:results", "Read verdicts out of a store."),
    "run": Lazy("greval.cli:run_cmd", "Judge DATA (JSONL, JSON, CSV or Parquet) with one or more metric specs."),
    "spec": Lazy("greval.cli:spec", "Inspect, validate and document metric specs."),
}

SPEC_COMMANDS: dict[str, Lazy] = {
    "lint": Lazy(
        "greval.quality.authoring:spec_lint",
        "Lint spec files for what makes judges unreliable; print FILE: FIELD: [rule] message.",
    ),
    "list": Lazy("greval.cli:spec_list", "List the predefined metric specs shipped with greval."),
    "new": Lazy(
        "greval.quality.authoring:spec_new",
        "Draft a new metric spec with the judge model: evaluation steps and scale descriptions.",
    ),
    "schema": Lazy(
        "greval.cli:spec_schema",
        "Write the JSON Schema of spec files, for editor validation and autocompletion.",
    ),
    "show": Lazy(
        "greval.cli:spec_show",
        "Print a spec (file or predefined name) with its hash, and the prompt the judge receives.",
    ),
    "try": Lazy(
        "greval.quality.authoring:spec_try",
        "Judge a few human-labelled records with a draft spec and print judge–human agreement.",
    ),
    "validate": Lazy(
        "greval.cli:spec_validate",
        "Validate spec files; print each spec's name and hash, or the first error as FILE: FIELD: PROBLEM.",
    ),
}

RESULTS_COMMANDS: dict[str, Lazy] = {
    "export": Lazy(
        "greval.cli:results_export",
        "Export verdicts (value/label, reason, tokens, latency …) to CSV, JSONL or Parquet.",
    ),
    "runs": Lazy("greval.cli:results_runs", "List the runs recorded in a store."),
}


@click.group(
    cls=GrevalGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)
@click.version_option(package_name="greval")
def main() -> None:
    """greval — LLM judges for RAG and GraphRAG that people can check.

    \b
    Write a metric as a YAML spec, run it over your dataset, review the verdicts in Argilla, and measure
    how well the judge agrees with people.

    \b
      greval spec list                          predefined metrics
      greval run data.jsonl --spec answer_alignment --judge openai:gpt-4o-mini
      greval results export --format csv -o verdicts.csv
    """


# ----------------------------------------------------------------------------------------------- spec
@click.group("spec", cls=LazyGroup, lazy=SPEC_COMMANDS)
def spec() -> None:
    """Inspect, validate and document metric specs."""


@click.command("list")
def spec_list() -> None:
    """List the predefined metric specs shipped with greval."""
    from rich.table import Table

    from greval.spec import CategoricalScale, Spec, bundled_specs, load_spec_file

    table = Table(title="Predefined metric specs", show_lines=False)
    for col in ("name", "kind", "target", "scale", "inputs", "hash"):
        table.add_column(col, no_wrap=col in ("name", "hash"))
    for name, path in bundled_specs().items():
        s = next(x for x in load_spec_file(path) if x.name == name)
        scale = inputs = ""
        if isinstance(s, Spec):
            sc = s.scale
            scale = ", ".join(sc.names) if isinstance(sc, CategoricalScale) else f"{sc.min}–{sc.max}"
            inputs = ", ".join(s.inputs)
        else:
            inputs = ", ".join(s.required_inputs())
        table.add_row(name, s.kind, s.each or "record", scale, inputs, s.hash)
    out.print(table)


@click.command("show")
@click.argument("ref")
def spec_show(ref: str) -> None:
    """Print a spec (file or predefined name) with its hash, and the prompt the judge receives."""
    import yaml

    from greval.judge.judge import system_prompt, verdict_models
    from greval.spec import Spec, resolve_specs

    for s in resolve_specs([ref], with_dependencies=False):
        if not isinstance(s, Spec):
            out.print(f"[bold]{s.name}[/]  hash {s.hash}  kind {s.kind}")
            out.print(yaml.safe_dump(s.canonical(), sort_keys=False, allow_unicode=True), highlight=False)
            continue
        answer, _ = verdict_models(s)
        out.print(f"[bold]{s.name}[/]  hash {s.hash}  target {s.each or 'record'}")
        out.print(system_prompt(s, "json_schema", answer.model_json_schema()), highlight=False)


@click.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path())
def spec_validate(files: Sequence[str]) -> None:
    """Validate spec files; print each spec's name and hash, or the first error as FILE: FIELD: PROBLEM."""
    from greval.judge.verdict import check_judge
    from greval.spec import Spec, load_spec_file

    failed = False
    for f in files:
        try:
            for s in load_spec_file(f):
                if isinstance(s, Spec):
                    check_judge(s)  # what building its judge checks: verdict schema, outputs, few-shot examples
                out.print(f"[green]ok[/] {f}: {s.name} ({s.hash})", highlight=False)
        except UserError as exc:
            console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            failed = True
    if failed:
        sys.exit(2)


@click.command("schema")
@click.option("-o", "--output", type=click.Path(), help="Write to a file instead of stdout.")
def spec_schema(output: str | None) -> None:
    """Write the JSON Schema of spec files, for editor validation and autocompletion.

    \b
    VS Code (YAML extension): add to the top of a spec file
      # yaml-language-server: $schema=./greval-spec.schema.json
    """
    from greval.spec import spec_json_schema

    text = json.dumps(spec_json_schema(), indent=2, ensure_ascii=False)
    if output:
        Path(output).write_text(text + "\n", encoding="utf-8")
        console.print(f"wrote {output}")
    else:
        click.echo(text)


# ------------------------------------------------------------------------------------------------ run
def _parse_map(values: Sequence[str]) -> dict[str, str]:
    mapping = {}
    for v in values:
        field, sep, column = v.partition("=")
        if not sep or not field or not column:
            raise UserError(f"--map {v!r}: write FIELD=COLUMN, e.g. --map question=query")
        mapping[field.strip()] = column.strip()
    return mapping


def judge_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The flags that choose and parameterise the judge model (shared by every command that judges)."""
    opts = [
        click.option(
            "--judge",
            "judge_ref",
            envvar="GREVAL_JUDGE",
            default=None,
            show_envvar=True,
            help="provider:model, e.g. openai:gpt-4o-mini; any OpenAI-compatible server with --base-url; "
            "gguf:/path/model.gguf or 'local' for the embedded llama.cpp judge.",
        ),
        click.option(
            "--base-url",
            envvar="OPENAI_BASE_URL",
            show_envvar=True,
            help="OpenAI-compatible endpoint (vLLM, llama.cpp, Ollama, LiteLLM …). Key: OPENAI_API_KEY.",
        ),
        click.option("--temperature", type=float, default=None, help="Sampling temperature [spec, else 0]."),
        click.option("--max-tokens", type=int, default=None, help="Cap on the judge's answer length."),
        click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds per request."),
        click.option("--samples", type=int, default=None, help="Judge samples per item; majority verdict [1]."),
        click.option("--seed", type=int, default=None, help="Sampling seed, for servers that honour it."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


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
@click.option(
    "--store",
    default="greval.sqlite",
    show_default=True,
    type=click.Path(),
    help="SQLite file where verdicts are kept (created if missing; reused to resume).",
)
@judge_options
@click.option(
    "-c",
    "--concurrency",
    type=int,
    default=None,
    help="Model calls in flight at most [8; the embedded judge: its parallel slots].",
)
@click.option("--no-adaptive", is_flag=True, help="Keep concurrency fixed even when rate limited.")
@click.option(
    "--method",
    type=click.Choice(["auto", "json_schema", "function_calling", "json_mode"]),
    default="auto",
    show_default=True,
    help="Structured-output method (auto falls back when refused).",
)
@click.option("--max-attempts", type=int, default=6, show_default=True, help="Tries per call on 429/5xx/timeouts.")
@click.option(
    "--map",
    "maps",
    multiple=True,
    metavar="FIELD=COLUMN",
    help="Read FIELD from COLUMN (dotted paths reach nested JSON), e.g. --map question=query.",
)
@click.option("--id-column", default=None, help="Column holding record ids [id, else a content hash].")
@click.option("--limit", type=int, default=None, help="Judge only the first N records.")
@click.option("--retry-errors", is_flag=True, help="Judge again what earlier runs recorded as errors.")
@click.option(
    "--no-direct",
    is_flag=True,
    help="Send every call through LangChain's ainvoke. By default an OpenAI-compatible model with no "
    "callback, tracer or cache attached is called with the same request minus LangChain's per-call "
    "overhead (less client CPU, see the README's benchmarks); LangSmith tracing, callbacks or a cache "
    "switch that off by themselves.",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def run_cmd(
    data: str,
    spec_refs: Sequence[str],
    store: str,
    judge_ref: str | None,
    base_url: str | None,
    temperature: float | None,
    max_tokens: int | None,
    timeout: float,
    samples: int | None,
    seed: int | None,
    concurrency: int | None,
    no_adaptive: bool,
    method: str,
    max_attempts: int,
    maps: Sequence[str],
    id_column: str | None,
    limit: int | None,
    retry_errors: bool,
    no_direct: bool,
    quiet: bool,
) -> None:
    """Judge DATA (JSONL, JSON, CSV or Parquet) with one or more metric specs.

    \b
    Every verdict is written to the store the moment it arrives. Running the same command again makes
    no model call for what is already judged; a killed run resumes with only the missing verdicts;
    editing a spec re-judges that spec only.

    \b
    Examples:
      greval run rag.jsonl -s answer_alignment -s chunk_evaluation --judge openai:gpt-4o-mini
      greval run out.csv -s my_metric.yaml --map question=query --map chunks=contexts \\
          --judge openai:qwen2.5-7b --base-url http://localhost:8000/v1 -c 32
    """
    from greval._sync import run_sync
    from greval.dataset.records import load_records
    from greval.llm.retry import RetryPolicy
    from greval.runner import RunOptions, arun, plan_work
    from greval.spec import resolve_specs
    from greval.store.store import Store

    specs = resolve_specs(spec_refs)
    notes: list[str] = []
    records = load_records(data, _parse_map(maps), id_column, limit, notes=notes)
    for note in notes:  # nothing the user gave disappears without a word
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    defaults = next((s.judge for s in specs if s.judge.model), specs[0].judge)
    # Computed metrics (ROUGE, BLEU, citations …) need no judge: none is resolved, started or required.
    needs_judge = any(s.needs_model for s in specs)
    ref = judge_ref or defaults.model or (default_judge() if needs_judge else "computed:greval")
    opts = RunOptions(
        concurrency=concurrency or (local_concurrency() if is_local_ref(ref) else 8),
        adaptive=not no_adaptive,
        method=method,
        retry=RetryPolicy(max_attempts=max_attempts),
        retry_errors=retry_errors,
        direct=not no_direct,
    )
    cfg = resolve_judge(
        ref,
        base_url=base_url,
        temperature=temperature if temperature is not None else defaults.temperature,
        max_tokens=max_tokens or defaults.max_tokens,
        timeout=timeout,
        samples=samples or defaults.samples,
        seed=seed,
    )
    with Store(store) as st:
        plan = plan_work(specs, records, st, cfg, retry_errors)
        todo, computed = plan.judgements, plan.computed
        work = [f"{todo} judgement(s) to make"] if needs_judge else []
        work += [f"{computed} computed score(s) to make"] if computed or not needs_judge else []
        distinct = len({r.hash for r in records})
        same = (
            f" ({len(records) - distinct} share their content with another: judged once)"
            if distinct < len(records)
            else ""
        )
        console.print(
            f"{'judging' if needs_judge else 'scoring'} [bold]{len(records)}[/] records{same} with "
            f"{', '.join(s.name for s in specs)} — "
            + (f"judge {cfg.label}, " if needs_judge else "")
            + f"store {store}, {', '.join(work)}",
            highlight=False,
        )
        try:
            with serve_judge(cfg, needed=todo > 0) as live, _progress(quiet) as hook:
                summary = run_sync(
                    arun(specs, records, st, live, options=opts, dataset=str(data), progress=hook, plan=plan)
                )
        except KeyboardInterrupt as exc:
            # The run recorded itself as interrupted, with its summary, before run_sync returned.
            last = st.query("SELECT summary FROM runs WHERE pid=? ORDER BY started_at DESC LIMIT 1", (os.getpid(),))
            metrics = json.loads(last[0]["summary"] or "{}").get("metrics", []) if last else []
            kept = sum(m.get("verdicts", 0) for m in metrics)
            made = sum(m.get("judged", 0) for m in metrics)
            interrupted_exit(
                exc,
                f"{kept} verdict(s) stored ({made} judgement(s) made by this run); re-run the same command to resume",
            )
    print_summary(summary)
    if summary.empty_metrics:
        names = ", ".join(m.spec for m in summary.empty_metrics)
        console.print(f"[bold red]no verdict at all[/] for {names} (see the notes above)", highlight=False)
        sys.exit(1)


LOCAL_MAX_TOKENS = 400


def local_concurrency() -> int:
    """Calls in flight for the embedded judge: its parallel slots (more would only queue and time out)."""
    try:
        return max(1, int(os.environ.get("GREVAL_LLAMA_PARALLEL", "2")))
    except ValueError:
        return 2


def is_local_ref(ref: str) -> bool:
    """Whether a --judge reference names the embedded llama.cpp judge (``local`` or ``gguf:…``)."""
    return ref == "local" or ref.startswith(("gguf:", "local:"))


def resolve_judge(ref: str, **params: Any) -> Any:
    """The judge's configuration and identity, without starting anything (a local model is only hashed)."""
    from greval.llm.config import JudgeConfig

    if is_local_ref(ref):
        # Small local models sometimes loop inside their reason until the context is full; a cap keeps a
        # bad answer to seconds (it is then retried as unparsable) instead of minutes.
        params["max_tokens"] = params.get("max_tokens") or LOCAL_MAX_TOKENS
    cfg = JudgeConfig.parse(ref, **params)
    if cfg.provider in ("gguf", "local"):
        from greval.llm.local import LocalJudgeError, model_identity, resolve_local_model

        try:
            path = resolve_local_model("local" if cfg.provider == "local" else f"gguf:{cfg.model}")
            cfg = cfg.model_copy(update={"identity_override": model_identity(path)})
        except LocalJudgeError as exc:
            raise UserError(str(exc)) from None
    return cfg


@contextlib.contextmanager
def serve_judge(cfg: Any, needed: bool = True) -> Iterator[Any]:
    """For a local model, run the embedded llama-server while the block runs (only when calls are needed)."""
    if cfg.provider not in ("gguf", "local") or not needed:
        yield cfg
        return
    from greval.llm.local import LocalJudgeError, LocalJudgeServer

    try:
        server = LocalJudgeServer(model=None if cfg.provider == "local" else cfg.model)
        console.print("starting the embedded local judge (llama.cpp) …")
        info = server.__enter__()
    except LocalJudgeError as exc:
        raise UserError(str(exc)) from None
    try:
        console.print(
            f"local judge {info.identity} at {info.base_url} ({info.threads} threads, {info.parallel} slots)",
            highlight=False,
        )
        yield cfg.model_copy(update={"model": info.model, "base_url": info.base_url})
    finally:
        server.__exit__(None, None, None)


@contextlib.contextmanager
def judge_session(ref: str, **params: Any) -> Iterator[Any]:
    """Resolve the judge and, for a local model, serve it for the duration of the block."""
    with serve_judge(resolve_judge(ref, **params)) as cfg:
        yield cfg


def default_judge() -> str:
    """The configured judge, else OpenAI when a key is set, else the embedded local judge."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        return "openai:gpt-4o-mini"
    console.print(
        "[yellow]no judge configured[/] (no --judge, GREVAL_JUDGE or OPENAI_API_KEY): using the "
        "embedded local judge, a tiny model that is NOT a judge to trust — it only lets the loop run "
        "offline."
    )
    return "local"


class _progress:
    """A rich progress bar with rate, ETA and error count, fed by the runner's hook."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet or (not console.is_terminal and os.environ.get("GREVAL_PROGRESS") != "1")
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn("[bold]judging"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TextColumn("[red]{task.fields[errors]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.task: Any = None

    def __enter__(self) -> Callable[[int, int, int], None]:
        if not self.quiet:
            self.bar.start()
        return self.update

    def update(self, done: int, total: int, errors: int) -> None:
        if self.quiet:
            return
        if self.task is None:
            self.task = self.bar.add_task("judging", total=total, rate="", errors="")
        elapsed = self.bar.tasks[0].elapsed or 0.0
        rate = f"{done / elapsed:.1f}/s" if elapsed > 0 and done else ""
        self.bar.update(self.task, completed=done, rate=rate, errors=f"{errors} errors" if errors else "")

    def __exit__(self, *exc: object) -> None:
        if not self.quiet:
            self.bar.stop()


def print_summary(summary: Any) -> None:
    """Per metric: this run's work, then the figures of every record it was given (the same figures
    ``greval report`` and ``greval results`` show), and a note for everything that was not scored."""
    from greval.store.results import metric_notes, not_scored

    dup = summary.records - summary.distinct_contents
    from rich.table import Table

    table = Table(
        title=f"run {summary.run_id} — {summary.records} records"
        + (f" ({dup} with the same content as another: judged once)" if dup > 0 else "")
        + f", judge {summary.judge}, {summary.calls} calls in {summary.seconds:.1f}s"
    )
    for col in ("metric", "judged", "reused", "ok", "not scored", "distribution", "mean score", "tokens in/out"):
        table.add_column(col, overflow="fold")
    for m in summary.metrics:
        dist = "  ".join(f"{k}:{v}" for k, v in m.distribution.items())
        unscored = not_scored(m.model_dump())
        items = f" ({m.items_ok}/{m.items} items)" if m.items is not None else ""
        table.add_row(
            m.spec,
            str(m.judged),
            str(m.reused),
            f"{m.ok}{items}",
            unscored or "—",
            dist,
            "—" if m.mean_score is None else f"{m.mean_score:.3f}",
            f"{m.tokens_in}/{m.tokens_out}",
        )
    out.print(table)
    for m in summary.metrics:
        for note in metric_notes(m):
            console.print(f"[yellow]note:[/] {note}", highlight=False)


# -------------------------------------------------------------------------------------------- results
@click.group("results", cls=LazyGroup, lazy=RESULTS_COMMANDS)
def results() -> None:
    """Read verdicts out of a store."""


@click.command("export")
@click.option("--store", default="greval.sqlite", show_default=True, type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(), help="Output file.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "jsonl", "parquet"]),
    default=None,
    help="Default: from the output file's suffix.",
)
@click.option("--spec", default=None, help="Only this metric.")
@click.option(
    "--level",
    type=click.Choice(["item", "record"]),
    default="item",
    show_default=True,
    help="'record' aggregates chunk / triple verdicts into one score per record.",
)
def results_export(store: str, output: str, fmt: str | None, spec: str | None, level: str) -> None:
    """Export verdicts (value/label, reason, tokens, latency …) to CSV, JSONL or Parquet."""
    from greval.store.results import export_results

    n = export_results(store, output, fmt, spec, "record" if level == "record" else "item")
    console.print(f"wrote {n} rows to {output}")


@click.command("runs")
@click.option("--store", default="greval.sqlite", show_default=True, type=click.Path(exists=True, dir_okay=False))
def results_runs(store: str) -> None:
    """List the runs recorded in a store."""
    import time as _t

    from rich.table import Table

    from greval.store.results import not_scored
    from greval.store.store import Store

    with Store(store) as st:
        table = Table(title=f"runs in {store}")
        for col in ("run", "started", "status", "dataset", "records", "calls", "metric: not scored"):
            table.add_column(col)
        for r in st.runs():
            summ = json.loads(r["summary"] or "{}")
            # The run's stored summary: the same figures `greval run` printed (greval.store.results).
            metrics = summ.get("metrics") or [{"spec": name} for name in json.loads(r["specs"] or "[]")]
            per_metric = [f"{m['spec']}: " + (not_scored(m) or ("—" if "ok" in m else "?")) for m in metrics]
            table.add_row(
                r["run_id"],
                _t.strftime("%Y-%m-%d %H:%M", _t.localtime(r["started_at"])),
                r["status"],
                r["dataset"] or "",
                str(summ.get("records", "")),
                str(summ.get("calls", "")),
                "\n".join(per_metric),
            )
        out.print(table)
