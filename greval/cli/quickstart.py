"""``greval quickstart``: the whole loop on a bundled example, offline, in one idempotent command.

spec + dataset -> judge (the configured one, else the embedded local judge) -> store -> embedded Argilla
(verdicts as suggestions) -> the example's human labels of 20 of the 30 records (the other 10 wait in Argilla,
with the judge's suggestion, for the user's label) -> agreement report (the files ``greval report`` writes).
A second run reuses everything: the store answers every judgement (no judge call, no judge server), the
Argilla dataset and its records keep their ids, the labels are upserted, the user's own answers are kept.
"""

from __future__ import annotations

import shlex
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from greval.annotation.server import DEFAULT_PORT
from greval.cli.common import judge_options

if TYPE_CHECKING:
    from greval.annotation.argilla import Connection
    from greval.annotation.server import ServerInfo
    from greval.llm.config import JudgeChoice


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
@click.option("--bootstrap", type=int, default=1000, show_default=True, help="Bootstrap resamples for CIs.")
def quickstart_cmd(
    workdir: str,
    judge: JudgeChoice,
    port: int,
    no_argilla: bool,
    argilla_data: str | None,
    bootstrap: int,
) -> None:
    """Run greval's whole loop on a bundled example, offline, in one command.

    \b
    1. writes a workspace with 30 BEGIN dialogue turns (CC BY 4.0), their human attribution
       labels and a matching spec;
    2. judges them (your --judge, else OpenAI when OPENAI_API_KEY is set, else the embedded
       llama.cpp judge — a tiny model that only makes the loop run, not a judge to trust);
    3. starts the embedded Argilla and pushes the verdicts as suggestions;
    4. imports the example's human labels of 20 records (into the store and into Argilla);
       the other 10 wait in Argilla, with the judge's suggestion, for your label;
    5. writes the agreement report and prints where everything is, how to label the open
       records, and the commands to do the same on your own data.

    Running it again reuses everything: no new judge call, the same Argilla dataset, your
    answers in Argilla kept.
    """
    _quickstart(Path(workdir), judge, port, no_argilla, bootstrap, argilla_data)


def _quickstart(
    work: Path,
    judge: JudgeChoice,
    port: int,
    no_argilla: bool,
    bootstrap: int,
    argilla_data: str | None = None,
) -> None:
    from greval.agreement.models import AgreementReport
    from greval.annotation.argilla import connect
    from greval.annotation.labels_import import import_labels
    from greval.annotation.push import push
    from greval.cli.agreement import print_report
    from greval.cli.common import ProgressBar, console, notice, out, print_summary
    from greval.cli.report import print_labels
    from greval.dataset.tables import read_rows
    from greval.report.store_report import build, write
    from greval.spec import load_spec_file
    from greval.store.store import Store
    from greval.workflows import (
        IMPORTED,
        SPEC,
        DataNote,
        RunEvent,
        first_records,
        run_dataset,
        write_csv,
        write_workspace,
    )

    t0 = time.perf_counter()
    work = work.expanduser().resolve()  # every path printed works from any directory
    written = write_workspace(work)
    console.print(
        f"[bold]1/5[/] workspace {escape(str(work))}/" + (f" (wrote {', '.join(written)})" if written else " (reused)"),
        highlight=False,
    )
    store_path = work / "greval.sqlite"

    def said(event: RunEvent) -> None:
        if isinstance(event, DataNote):
            console.print(f"[yellow]note:[/] {escape(event.text)}", highlight=False)
            return
        console.print(
            f"[bold]2/5[/] judging {event.records} records with {SPEC} — judge {escape(event.judge)}: "
            f"{event.judgements} judgement(s) to make",
            highlight=False,
        )

    with ProgressBar(False) as hook:
        done = run_dataset(
            load_spec_file(work / "attribution.yaml"),
            work / "records.jsonl",
            store_path,
            judge,
            notify=notice,
            on_event=said,
            progress=hook,
        )
    print_summary(done.summary)
    records = done.summary.records
    argilla: _Argilla | None = None
    with Store(store_path) as st:
        conn = None
        if no_argilla:
            console.print("[bold]3/5[/] Argilla skipped (--no-argilla)")
        else:
            argilla = _start_argilla(port, argilla_data)
            conn = connect(argilla.info.url, argilla.info.api_key, workspace=argilla.info.workspace)
        try:
            if conn is not None and argilla is not None:
                pushed = push(st, conn, SPEC)
                argilla.dataset = pushed.dataset
                console.print(
                    f"      {pushed.pushed} verdicts pushed as suggestions to dataset '{escape(pushed.dataset)}' "
                    f"({'created' if pushed.created else 'updated'}) at {argilla.info.url}",
                    highlight=False,
                )
            labels_file = work / "human_labels.csv"
            # With Argilla, the example's labels of the first IMPORTED records only: the others wait there,
            # with the judge's suggestion, for the user's own label.
            rows = first_records(read_rows(labels_file), None if conn is None else IMPORTED)
            with tempfile.TemporaryDirectory(prefix="greval-quickstart-") as tmp:
                subset = Path(tmp) / labels_file.name
                write_csv(subset, rows)
                imported = import_labels(
                    st,
                    subset,
                    SPEC,
                    record_id_col="record_id",
                    label_col="label",
                    annotator_col="annotator",
                    conn=conn,
                )
            if conn is not None and argilla is not None:
                labelled = len({r["record_id"] for r in rows})
                console.print(
                    f"[bold]4/5[/] human labels: {imported.stored} stored from human_labels.csv (its first "
                    f"{labelled} records), also in Argilla as the BEGIN annotators' answers; the other "
                    f"{records - labelled} records are left for you to label",
                    highlight=False,
                )
                argilla.progress = _progress_of(conn, argilla)
            else:
                console.print(f"[bold]4/5[/] human labels: {imported.stored} stored from human_labels.csv")
        finally:
            if conn is not None:
                conn.close()

    report_dir = work / "report"
    report_dir.mkdir(exist_ok=True)
    rep = build(store_path, [SPEC], bootstrap_resamples=bootstrap, out_dir=report_dir)
    write(rep, report_dir)  # the same files `greval report -o report_dir` writes
    metric = rep.metrics[0]
    page = report_dir / (metric.agreement_page or f"{SPEC}.agreement.html")
    console.print(f"[bold]5/5[/] agreement report written to {escape(str(report_dir))}/", highlight=False)
    agreement = AgreementReport.model_validate_json(page.with_suffix(".json").read_text(encoding="utf-8"))
    print_report(out, agreement, 3, SPEC)
    print_labels(rep)  # "attribution: 20 human labels — 20 imported from …"

    click.echo("")
    for line in _closing(work, store_path, report_dir, page, done.ref, judge.base_url, argilla, port):
        click.echo(line)
    click.echo("")
    click.echo(f"done in {time.perf_counter() - t0:.0f}s")


@dataclass
class _Argilla:
    info: ServerInfo
    custom_data: bool  # started with --argilla-data: commands need --data-dir
    dataset: str  # the Argilla dataset the quick start reviews in
    progress: tuple[int, int] | None = None  # (labelled, total) records of the dataset


def _start_argilla(port: int, argilla_data: str | None) -> _Argilla:
    """Start (or reuse) the embedded Argilla, saying honestly which of the three it does."""
    from greval.annotation import server
    from greval.cli.common import console, fail
    from greval.workflows import SPEC

    data = Path(argilla_data).expanduser().resolve() if argilla_data else None
    current = server.status(data)
    if current.running and current.url:
        doing = f"reusing the server running at {current.url}"
    elif server.venv_ready():
        doing = "starting …"
    else:
        doing = "creating its environment (once, about a minute), then starting it …"
    console.print(f"[bold]3/5[/] embedded Argilla: {doing}", highlight=False)
    try:
        info = server.start(port, data, on_line=lambda line: console.print(f"      {escape(line)}", highlight=False))
    except server.AnnotationServerError as exc:
        # Its message may carry a build log's last lines: printed as they are, not as rich markup.
        fail(str(exc))
    return _Argilla(info=info, custom_data=info.data_dir != server.default_data_dir(), dataset=SPEC)


def _progress_of(conn: Connection, argilla: _Argilla) -> tuple[int, int] | None:
    """(labelled, total) records of the quick start's Argilla dataset, None when the server will not say."""
    from greval.annotation.argilla import dataset_progress, find_dataset

    found = find_dataset(conn, argilla.dataset, argilla.info.workspace)
    return dataset_progress(conn, str(found["id"])) if found else None


def _q(path: Path) -> str:
    return shlex.quote(str(path))


def _closing(
    work: Path,
    store: Path,
    report_dir: Path,
    page: Path,
    judge: str,
    base_url: str | None,
    argilla: _Argilla | None,
    port: int,
) -> list[str]:
    """Where everything is and what to type next: plain lines (nothing cut at 80 columns), every command
    complete and runnable from any directory."""
    from greval.workflows import OWN_SPECS, SPEC, greval_command

    data_dir = f" --data-dir {_q(argilla.info.data_dir)}" if argilla is not None and argilla.custom_data else ""
    gv = greval_command()
    lines = []
    if argilla is not None:
        info = argilla.info
        # the password stays in its file (0600): a terminal's scrollback and CI logs are not private
        lines.append(f"Argilla     {info.url}   login: {info.username}, password: {gv} annotate credentials{data_dir}")
        state = ""
        if argilla.progress is not None:
            done, total = argilla.progress
            state = f": {done} of {total} records labelled, {total - done} wait for your label"
        lines.append(f"  dataset   '{argilla.dataset}' in workspace '{info.workspace}'{state}")
    lines.append(f"Report      {report_dir / 'index.html'}")
    lines.append(f"  agreement {page}")
    lines.append(f"Store       {store}")
    lines.append(f"Workspace   {work}")
    lines.append("")
    if argilla is not None:
        lines.append(
            f"Label the open records yourself: open {argilla.info.url}, log in, open the dataset '{argilla.dataset}'"
        )
        lines.append("and submit a label for each record (the judge's verdict is pre-selected as a suggestion).")
        lines.append("Then fetch your answers into the store and rebuild the report:")
        lines.append(f"  {gv} annotate pull --store {_q(store)} --spec {SPEC}{data_dir}")
    else:
        lines.append("Rebuild the report (after adding labels with greval annotate import-labels):")
    lines.append(f"  {gv} report --store {_q(store)} -o {_q(report_dir)}")
    lines.append("")
    judge_args = f"--judge {shlex.quote(judge)}" + (f" --base-url {shlex.quote(base_url)}" if base_url else "")
    first = OWN_SPECS[0]
    lines.append("The same on your own data: a JSONL, JSON, CSV or Parquet file with the columns question, answer")
    lines.append("and chunks (a list of texts), here my_data.jsonl:")
    lines.append(f"  {gv} run my_data.jsonl {' '.join(f'-s {s}' for s in OWN_SPECS)} {judge_args} --store my.sqlite")
    if argilla is None:
        lines.append(f"  {gv} annotate up" + (f" --port {port}" if port != DEFAULT_PORT else ""))
    lines.append(f"  {gv} annotate push --store my.sqlite --spec {first}{data_dir}")
    lines.append(f"  {gv} annotate pull --store my.sqlite --spec {first}{data_dir}")
    lines.append(f"  {gv} report --store my.sqlite -o my-report")
    if judge == "local" or judge.startswith(("gguf:", "local:")):
        lines.append(f"{judge_args} is a tiny embedded model, only for trying the loop: name a real judge, e.g.")
        lines.append("--judge openai:gpt-4o-mini with OPENAI_API_KEY set.")
    lines.append(
        f"{OWN_SPECS[0]} judges each answer against its question, {OWN_SPECS[1]} each chunk's relevance to it;"
    )
    lines.append("hallucination counts the chunks the answer contradicts; answer_alignment also needs expected_answer.")
    lines.append("Columns named differently: add --map question=YOUR_COLUMN (one per column) to greval run.")
    lines.append("Every predefined metric and the columns it reads: greval spec list")
    lines.append("")
    started = "Argilla" if argilla is not None else "the Argilla that greval annotate up started"
    lines.append(f"Stop {started} when you are done (the labels stay in its data directory):")
    lines.append(f"  {gv} annotate down{data_dir}")
    return lines
