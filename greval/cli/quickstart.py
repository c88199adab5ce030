"""``greval quickstart``: the whole loop on a bundled example, offline, in one idempotent command.

spec + dataset -> judge (the configured one, else the embedded local judge) -> store -> embedded Argilla
(verdicts as suggestions) -> the example's human labels of 20 of the 30 records (the other 10 wait in Argilla,
with the judge's suggestion, for the user's label) -> agreement report (the files ``greval report`` writes).
A second run reuses everything: the store answers every judgement (no judge call, no judge server), the
Argilla dataset and its records keep their ids, the labels are upserted, the user's own answers are kept.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource
from rich.markup import escape

from greval.annotation.server import DEFAULT_PORT
from greval.cli.bundle import gathered
from greval.cli.bundles import RunFlags
from greval.cli.common import judge_options
from greval.paths import output_dir

if TYPE_CHECKING:
    from greval.annotation.argilla import Connection
    from greval.annotation.push import PushResult
    from greval.annotation.server import ServerInfo
    from greval.flows.run import DatasetRun
    from greval.llm.config import JudgeChoice
    from greval.store.annotation import ReviewCounts
    from greval.store.store import Store

DEFAULT_BOOTSTRAP = 1000


@click.command("quickstart")
@click.option(
    "--dir",
    "workdir",
    default="greval-quickstart",
    show_default=True,
    type=click.Path(),
    help="Workspace: the example data, the store and the report are written here.",
)
@judge_options
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="Port of the embedded Argilla.")
@click.option("--no-argilla", is_flag=True, help="Skip the Argilla step (judge and report only).")
@click.option(
    "--argilla-data",
    type=click.Path(),
    default=None,
    help="Data directory of the embedded Argilla [greval's data directory].",
)
@click.option(
    "--bootstrap", type=int, default=DEFAULT_BOOTSTRAP, show_default=True, help="Bootstrap resamples for CIs."
)
@click.option("--retry-errors", is_flag=True, help="Judge again the records an earlier run recorded as errors.")
@gathered("run", RunFlags)
def quickstart_cmd(
    workdir: str,
    judge: JudgeChoice,
    port: int,
    no_argilla: bool,
    argilla_data: str | None,
    bootstrap: int,
    run: RunFlags,
) -> None:
    """Run greval's whole loop on a bundled example, offline, in one command.

    \b
    1. writes a workspace with 30 BEGIN dialogue turns (CC BY 4.0), their human attribution
       labels and a matching spec;
    2. judges them (your --judge, else OpenAI when OPENAI_API_KEY is set, else the embedded
       llama.cpp judge — a tiny model that only makes the loop run, not a judge to trust);
    3. starts the embedded Argilla and pushes the verdicts as suggestions;
    4. imports the example's human labels of 20 records (into the store and into Argilla);
       the others wait in Argilla, with the judge's suggestion, for your label;
    5. writes the agreement report and prints where everything is, how to label the open
       records, and the commands to do the same on your own data.

    Running it again reuses everything: no new judge call, the same Argilla dataset, your
    answers in Argilla kept (and fetched into the store and the report).
    """
    data = Path(argilla_data).expanduser().resolve() if argilla_data else None
    work = Path(workdir).expanduser().resolve()  # every path printed works from any directory
    given = click.get_current_context().get_parameter_source("port") is not ParameterSource.DEFAULT
    _quickstart(_Options(work, judge, port, no_argilla, bootstrap, data, run, port_given=given))


@dataclass(frozen=True)
class _Options:
    """The quick start as the flags chose it."""

    work: Path
    judge: JudgeChoice
    port: int = DEFAULT_PORT
    no_argilla: bool = False
    bootstrap: int = DEFAULT_BOOTSTRAP
    argilla_data: Path | None = None
    run: RunFlags = field(default_factory=RunFlags)
    port_given: bool = False  # --port on the command line: a taken one is an error, not replaced

    def again(self, judge_ref: str) -> list[str]:
        """This quick start as a command that judges its failed records again (with the judge it used)."""
        from greval.cli.common import greval_argv, judge_args

        argv = [*greval_argv(), "quickstart", "--dir", str(self.work), *judge_args(self.judge, judge_ref)]
        argv += ["--port", str(self.port)] if self.port != DEFAULT_PORT else []
        argv += ["--no-argilla"] if self.no_argilla else []
        argv += ["--argilla-data", str(self.argilla_data)] if self.argilla_data else []
        argv += ["--bootstrap", str(self.bootstrap)] if self.bootstrap != DEFAULT_BOOTSTRAP else []
        return [*argv, "--retry-errors"]


def _step(text: str) -> None:
    from greval.cli.common import console, say

    say(text, console, hang=6)


def _quickstart(opts: _Options) -> None:
    from greval.agreement.models import AgreementReport
    from greval.cli.common import out
    from greval.cli.flags import FLAGS
    from greval.cli.workspace import SPEC, write_workspace
    from greval.report.store_report import build, write
    from greval.report.terminal import print_labels, print_report

    t0 = time.perf_counter()
    port = _argilla_port(opts)  # before any long step: a taken port is said now, not after the judging
    work = opts.work
    written = write_workspace(work)
    _step(
        f"[bold]1/5[/] workspace {escape(str(work))}/" + (f" (wrote {', '.join(written)})" if written else " (reused)")
    )
    store_path = work / "greval.sqlite"
    done = _judge(opts, store_path)
    argilla = _review(opts, store_path, done, port)

    report_dir = work / "report"
    output_dir(report_dir)
    rep = build(store_path, [SPEC], bootstrap_resamples=opts.bootstrap, out_dir=report_dir, names=FLAGS)
    write(rep, report_dir, FLAGS)  # the same files `greval report -o report_dir` writes
    metric = rep.metrics[0]
    page = report_dir / (metric.agreement_page or f"{SPEC}.agreement.html")
    _step(f"[bold]5/5[/] agreement report written to {escape(str(report_dir))}/")
    agreement = AgreementReport.model_validate_json(page.with_suffix(".json").read_text(encoding="utf-8"))
    print_report(out, agreement, 3, SPEC, names=FLAGS)
    print_labels(out, rep)  # "attribution: 20 human labels — 20 imported from …"

    click.echo("")
    for line in _closing(opts, store_path, page, done, argilla):
        click.echo(line)
    click.echo("")
    click.echo(f"done in {time.perf_counter() - t0:.0f}s")


def _judge(opts: _Options, store_path: Path) -> DatasetRun:
    """Step 2: judge the example into the store; the summary, and how to judge failed records again."""
    from greval.cli.common import ProgressBar, print_run_event, print_summary
    from greval.cli.workspace import SPEC
    from greval.dataset.source import DataSource
    from greval.flows.run import RunEvent, RunPlanned, run_dataset
    from greval.spec import load_spec_file

    def step(event: RunPlanned) -> None:
        _step(
            f"[bold]2/5[/] judging {event.records} records with {SPEC} — judge {escape(event.judge)}: "
            f"{event.judgements} judgement(s) to make"
        )

    def said(event: RunEvent) -> None:
        print_run_event(event, step)

    source = DataSource(data=opts.work / "records.jsonl")
    specs = load_spec_file(opts.work / "attribution.yaml")
    with ProgressBar(False) as hook:
        done = run_dataset(source, specs, opts.judge, store_path, opts.run.options(), said, progress=hook)
    print_summary(done.summary, retry=opts.again(done.ref))
    return done


@dataclass
class _Argilla:
    info: ServerInfo
    custom_data: bool  # started with --argilla-data: commands need --data-dir
    dataset: str  # the Argilla dataset the quick start reviews in
    counts: ReviewCounts | None = None  # what the dataset holds for people (the store's one definition)
    notes: list[str] = field(default_factory=list)


def _review(opts: _Options, store_path: Path, done: DatasetRun, port: int) -> _Argilla | None:
    """Steps 3 and 4: push the verdicts to the embedded Argilla, import the example's labels of the first
    records (into the store and Argilla), fetch the user's own answers, count what waits for a label."""
    from greval.annotation.argilla import connect
    from greval.annotation.pull import pull
    from greval.annotation.push import push
    from greval.cli.workspace import SPEC
    from greval.store.store import Store

    with Store(store_path) as st:
        if opts.no_argilla:
            _step("[bold]3/5[/] Argilla skipped (--no-argilla)")
            stored = _import_labels(st, opts.work, None)
            _step(f"[bold]4/5[/] human labels: {stored} stored from human_labels.csv")
            return None
        argilla = _start_argilla(port, opts)
        conn = connect(argilla.info.url, argilla.info.api_key, workspace=argilla.info.workspace)
        try:
            pushed = push(st, conn, SPEC)
            argilla.dataset = pushed.dataset
            _step(
                f"      {pushed.pushed} verdicts pushed as suggestions to dataset '{escape(pushed.dataset)}' "
                f"({'created' if pushed.created else 'updated'}) at {argilla.info.url}"
            )
            _say_unpushed(pushed, opts.again(done.ref))
            stored = _import_labels(st, opts.work, conn)
            fetched = pull(st, conn, SPEC, dataset=argilla.dataset)
        finally:
            conn.close()
        argilla.counts = st.review_counts(SPEC, argilla.dataset)
    mine = f"; {fetched.changed} answer(s) of yours fetched from Argilla" if fetched.changed else ""
    _step(
        f"[bold]4/5[/] human labels: {stored} stored from human_labels.csv (its first records), also in Argilla "
        f"as the BEGIN annotators' answers{mine}; {_waiting(argilla.counts)}"
    )
    return argilla


def _say_unpushed(pushed: PushResult, retry: list[str]) -> None:
    """The verdicts a push could not send (errors: nothing the user gave disappears without a word), and the
    command that judges them again and pushes them."""
    from greval.annotation.push import unusable_note
    from greval.cli.common import command_lines, console

    missing = unusable_note(pushed.unusable, pushed.unit)
    if missing is None:
        return
    them = "it" if sum(pushed.unusable.values()) == 1 else "them"
    _step(f"      [yellow]note:[/] {escape(missing)}; this judges {them} again and pushes {them}:")
    for line in command_lines(retry, console.width, indent="        "):
        console.print(line, highlight=False, markup=False)


def _waiting(counts: ReviewCounts) -> str:
    return f"{counts.labelled} of {counts.units} records labelled, {counts.waiting} wait for your label"


def _import_labels(st: Store, work: Path, conn: Connection | None) -> int:
    """The example's human labels: with Argilla, of the first IMPORTED records only (the others wait there, with
    the judge's suggestion, for the user's own label), into the store and Argilla; else all, into the store."""
    from greval.annotation.labels_import import import_labels
    from greval.cli.workspace import IMPORTED, SPEC, first_records, write_csv
    from greval.dataset.tables import read_rows

    labels_file = work / "human_labels.csv"
    rows = first_records(read_rows(labels_file), None if conn is None else IMPORTED)
    with tempfile.TemporaryDirectory(prefix="greval-quickstart-") as tmp:
        subset = Path(tmp) / labels_file.name
        write_csv(subset, rows)
        imported = import_labels(
            st, subset, SPEC, record_id_col="record_id", label_col="label", annotator_col="annotator", conn=conn
        )
    return imported.stored


def _argilla_port(opts: _Options) -> int:
    """The embedded Argilla's port, chosen before any long step. Its own server (this data directory's) is
    reused by step 3 whatever the port; a port held by anything else is named in one line: given with --port,
    an error; the default, replaced by a free port."""
    from greval.annotation import server
    from greval.cli.common import fail

    if opts.no_argilla or server.status(opts.argilla_data).running:
        return opts.port
    holder = server.port_holder(server.DEFAULT_HOST, opts.port)
    if holder is None:
        return opts.port
    if opts.port_given:
        fail(f"port {opts.port} is taken by {holder}: choose another --port, or stop it", 2)
    port = server.free_port()
    _step(f"[yellow]note:[/] {escape(f'port {opts.port} is taken by {holder}: the embedded Argilla takes {port}')}")
    return port


def _start_argilla(port: int, opts: _Options) -> _Argilla:
    """Start (or reuse) the embedded Argilla, saying honestly which of the three it does."""
    from greval.annotation import server
    from greval.cli.common import fail
    from greval.cli.workspace import SPEC

    current = server.status(opts.argilla_data)
    if current.running and current.url:
        doing = f"reusing the server running at {current.url}"
    elif server.venv_ready():
        doing = "starting …"
    else:
        doing = f"creating its environment (once, {server.SETUP_ESTIMATE}), then starting it …"
    _step(f"[bold]3/5[/] embedded Argilla: {doing}")

    def on_line(line: str) -> None:
        _step(f"      {escape(line)}")

    try:
        try:
            info = server.start(port, opts.argilla_data, on_line=on_line)
        except server.PortInUseError:
            if opts.port_given:
                raise
            # taken while the judge ran: the default port is anyone's, so take another
            info = server.start(server.free_port(), opts.argilla_data, on_line=on_line)
    except server.AnnotationServerError as exc:
        # Its message may carry a build log's last lines: printed as they are, not as rich markup.
        fail(exc)
    custom = info.data_dir != server.default_data_dir()
    return _Argilla(info=info, custom_data=custom, dataset=SPEC)


class _Lines:
    """Plain lines at the output's width: prose wrapped between words, commands folded between arguments."""

    def __init__(self) -> None:
        from greval.cli.common import out

        self.width = out.width
        self.lines: list[str] = []

    def text(self, text: str, hang: str = "") -> None:
        from greval.cli.common import wrap_plain

        self.lines += wrap_plain(text, self.width, hang=hang)

    def command(self, argv: list[str]) -> None:
        from greval.cli.common import command_lines

        self.lines += command_lines(argv, self.width)

    def blank(self) -> None:
        self.lines.append("")


def _closing(opts: _Options, store: Path, page: Path, done: DatasetRun, argilla: _Argilla | None) -> list[str]:
    """Where everything is and what to type next: plain lines that fit the output's width, every command
    complete and runnable from any directory."""
    from greval.cli.common import greval_argv
    from greval.cli.workspace import SPEC

    gv, out = greval_argv(), _Lines()
    data_dir = ["--data-dir", str(argilla.info.data_dir)] if argilla is not None and argilla.custom_data else []
    if argilla is not None:
        info = argilla.info
        # the password stays in its file (0600): a terminal's scrollback and CI logs are not private
        out.text(f"Argilla     {info.url}   login: {info.username}, password: shown by", hang=" " * 12)
        out.command([*gv, "annotate", "credentials", *data_dir])
        state = f": {_waiting(argilla.counts)}" if argilla.counts is not None else ""
        out.text(f"  dataset   '{argilla.dataset}' in workspace '{info.workspace}'{state}", hang=" " * 12)
    for name, path in (("Report", store.parent / "report" / "index.html"), ("  agreement", page)):
        out.text(f"{name:<11} {path}", hang=" " * 12)
    out.text(f"Store       {store}", hang=" " * 12)
    out.text(f"Workspace   {opts.work}", hang=" " * 12)
    out.blank()
    if argilla is not None:
        out.text(
            f"Label the open records yourself: open {argilla.info.url}, log in, open the dataset "
            f"'{argilla.dataset}' and submit a label for each record (the judge's verdict is pre-selected as a "
            "suggestion). Then fetch your answers into the store and rebuild the report:"
        )
        out.command([*gv, "annotate", "pull", "--store", str(store), "--spec", SPEC, *data_dir])
    else:
        out.text("Rebuild the report (after adding labels with greval annotate import-labels):")
    out.command([*gv, "report", "--store", str(store), "-o", str(store.parent / "report")])
    out.blank()
    _own_data(out, opts, done, argilla is None, data_dir)
    out.blank()
    started = "Argilla" if argilla is not None else "the Argilla that greval annotate up started"
    out.text(f"Stop {started} when you are done (the labels stay in its data directory):")
    out.command([*gv, "annotate", "down", *data_dir])
    return out.lines


def _own_data(out: _Lines, opts: _Options, done: DatasetRun, up: bool, data_dir: list[str]) -> None:
    """The commands that do the same on the user's own data, and what the predefined metrics read."""
    from greval.cli.common import greval_argv, judge_args
    from greval.cli.workspace import OWN_SPECS

    gv, first, judge = greval_argv(), OWN_SPECS[0], judge_args(opts.judge, done.ref)
    out.text(
        "The same on your own data: a JSONL, JSON, CSV or Parquet file with the columns question, answer and "
        "chunks (a list of texts), here my_data.jsonl:"
    )
    out.command(
        [*gv, "run", "my_data.jsonl", *(a for s in OWN_SPECS for a in ("-s", s)), *judge, "--store", "my.sqlite"]
    )
    if up:
        out.command([*gv, "annotate", "up", *(["--port", str(opts.port)] if opts.port != DEFAULT_PORT else [])])
    out.command([*gv, "annotate", "push", "--store", "my.sqlite", "--spec", first, *data_dir])
    out.command([*gv, "annotate", "pull", "--store", "my.sqlite", "--spec", first, *data_dir])
    out.command([*gv, "report", "--store", "my.sqlite", "-o", "my-report"])
    if done.ref == "local" or done.ref.startswith(("gguf:", "local:")):
        out.text(
            f"{' '.join(judge)} is a tiny embedded model, only for trying the loop: name a real judge, e.g. "
            "--judge openai:gpt-4o-mini with OPENAI_API_KEY set."
        )
    out.text(
        f"{OWN_SPECS[0]} judges each answer against its question, {OWN_SPECS[1]} each chunk's relevance to it; "
        "hallucination counts the chunks the answer contradicts; answer_alignment also needs expected_answer. "
        "Columns named differently: add --map question=YOUR_COLUMN (one per column) to the run command. Every "
        "predefined metric and the columns it reads:"
    )
    out.command([*gv, "spec", "list"])
