"""``greval annotate push | pull | import-labels``: judge verdicts to Argilla and human answers back.

The ``annotate`` group of ``greval.cli.annotate`` names them in its table. User mistakes are
``UserError`` subclasses (one line, exit 2); API keys are read from flags or the environment and never
printed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from greval.annotation.argilla import DEFAULT_BATCH, Connection
from greval.annotation.assign import Overlap
from greval.annotation.errors import AnnotationError
from greval.annotation.labels_import import import_labels
from greval.annotation.pull import pull
from greval.annotation.push import push, unusable_note
from greval.annotation.selection import STRATEGIES, Strategy
from greval.cli.bundles import ConnectionFlags, connection_options_for
from greval.cli.common import read_limit_options
from greval.cli.common import store_option as common_store_option
from greval.cli.flags import for_terminal
from greval.dataset.limits import ReadLimits
from greval.store.backend import display
from greval.store.backend import exists as store_exists
from greval.store.store import Store

connection_options = connection_options_for("the spec's name")


store_option = common_store_option(default=None, required=True, dest="store_path", help="Verdicts and human labels.")
spec_option = click.option("--spec", "spec_name", required=True, help="Metric (spec name) to review.")


@contextlib.contextmanager
def opened(
    store_path: str, argilla: ConnectionFlags, need_argilla: bool = True
) -> Iterator[tuple[Store, Connection | None]]:
    """The store (which must exist) and, when ``need_argilla``, a connection to the Argilla server."""
    if not store_exists(store_path):
        raise AnnotationError(f"{display(store_path)}: no such store (run `greval run` first)")
    conn = argilla.connect() if need_argilla else None
    try:
        with Store(store_path) as store:
            yield store, conn
    finally:
        if conn is not None:
            conn.close()


class PushBar:
    """A rich progress bar that appears only once there is something to push (errors before stay one line)."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("pushing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        )
        self.task: TaskID | None = None

    def start(self, total: int) -> None:
        self.progress.start()
        self.task = self.progress.add_task("push", total=total)

    def advance(self, k: int) -> None:
        if self.task is not None:
            self.progress.advance(self.task, k)

    def __enter__(self) -> PushBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


@click.command("push")
@store_option
@spec_option
@click.option(
    "--select",
    "strategy",
    type=click.Choice(STRATEGIES),
    default="all",
    show_default=True,
    help="all; random sample; stratified by the judge's verdict; uncertain first + random control.",
)
@click.option("--n", "n", type=click.IntRange(min=1), default=None, help="How many items to select.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random choices.")
@click.option(
    "--control-share",
    type=click.FloatRange(0, 1),
    default=0.2,
    show_default=True,
    help="With --select uncertain: share of --n drawn at random as a control slice.",
)
@click.option("--blind", is_flag=True, help="Hide the judge's verdict and reasoning from annotators.")
@click.option(
    "--annotators-per-record",
    type=click.IntRange(min=1),
    default=None,
    help="Submitted answers needed before a record counts as done (Argilla task distribution) "
    "[default: 1 for a new dataset, an existing dataset keeps its own].",
)
@click.option(
    "--force",
    is_flag=True,
    help="Apply an --annotators-per-record that differs from the existing dataset's "
    "(every record's progress is recounted).",
)
@click.option(
    "--overlap",
    type=click.IntRange(min=1),
    default=None,
    help="Assign each record to this many annotators, balanced and seeded (--seed), and need that many "
    "submitted answers (Argilla task distribution); records keep the reviewers they already have.",
)
@click.option(
    "--reviewers",
    default=None,
    help="With --overlap: comma-separated annotators to assign [default: every annotator of the workspace].",
)
@click.option("--judge", default=None, help="Judge label or key, when several judged this spec.")
@click.option("--batch-size", type=click.IntRange(1, 1000), default=DEFAULT_BATCH, show_default=True)
@connection_options
def push_cmd(
    store_path: str,
    spec_name: str,
    strategy: str,
    n: int | None,
    seed: int,
    control_share: float,
    blind: bool,
    annotators_per_record: int | None,
    force: bool,
    overlap: int | None,
    reviewers: str | None,
    judge: str | None,
    batch_size: int,
    argilla: ConnectionFlags,
) -> None:
    """Push a spec's verdicts to Argilla for people to label (idempotent: re-running updates)."""
    if reviewers is not None and overlap is None:
        raise AnnotationError("--reviewers chooses whom --overlap assigns: give --overlap N too")
    names = tuple(n.strip() for n in (reviewers or "").split(",") if n.strip())
    spread = Overlap(overlap, names, seed) if overlap is not None else None
    bar = PushBar(Console(stderr=True))
    with opened(store_path, argilla) as (store, conn), bar:
        assert conn is not None
        res = push(
            store,
            conn,
            spec_name,
            dataset=argilla.dataset,
            workspace=argilla.workspace,
            strategy=cast(Strategy, strategy),
            n=n,
            seed=seed,
            control_share=control_share,
            blind=blind,
            annotators_per_record=annotators_per_record,
            force=force,
            judge=judge,
            batch_size=batch_size,
            overlap=spread,
            on_start=bar.start,
            on_progress=bar.advance,
        )
    change = res.distribution_change
    if change is not None:
        done = f"; {change.completed} of {change.total} records were completed" if change.total is not None else ""
        click.echo(
            f"Changed annotators per record of dataset {res.dataset!r} from {change.before} to {change.after}"
            f"{done} (Argilla recounts every record's progress)."
        )
    parts = ", ".join(f"{k} {v}" for k, v in sorted(res.by_selection.items()))
    click.echo(
        f"Pushed {res.pushed} of {res.population} items of {spec_name!r} to dataset {res.dataset!r} "
        f"(workspace {res.workspace!r}; {res.strategy}: {parts or 'nothing'}) in {res.seconds:.1f}s."
    )
    click.echo(f"Selection recorded as push {res.push_id} in {display(store_path)}.")
    if res.updated:
        what = " and ".join(
            {"guidelines": "guidelines", "question": "question's title and description"}[u] for u in res.updated
        )
        click.echo(f"Updated the dataset's {what} from spec {spec_name!r} (the spec changed since the last push).")
    if res.assigned:
        loads = ", ".join(f"{k} {v}" for k, v in res.assigned.items())
        click.echo(f"Assigned to reviewers (records each): {loads}.")
    for note in res.notes:
        click.echo(f"note: {for_terminal(note)}", err=True)
    missing = unusable_note(res.unusable, res.unit)
    if missing:  # nothing the user gave disappears without a word
        retry = "; run the `greval run` that judged them again with --retry-errors, then push again"
        click.echo(f"note: {missing}{retry if set(res.unusable) - {'skipped'} else ''}", err=True)


@click.command("pull")
@store_option
@spec_option
@connection_options
def pull_cmd(store_path: str, spec_name: str, argilla: ConnectionFlags) -> None:
    """Fetch annotators' answers from Argilla into the store's human labels (idempotent)."""
    with opened(store_path, argilla) as (store, conn):
        assert conn is not None
        res = pull(store, conn, spec_name, dataset=argilla.dataset, workspace=argilla.workspace)
    click.echo(
        f"Dataset {res.dataset!r}: {res.records} records; {res.submitted} submitted, "
        f"{res.discarded} discarded, {res.drafts} drafts; {res.pending} records without a submitted answer."
    )
    if res.by_annotator:
        table = Table("annotator", "submitted")
        for name, k in sorted(res.by_annotator.items()):
            table.add_row(name, str(k))
        Console().print(table)
    if res.unknown:
        click.echo(f"{res.unknown} records were not pushed by greval (no record hash) and were skipped.")
    for user_id, k in sorted(res.unnamed.items()):
        click.echo(
            f"note: {k} answer(s) by Argilla user {user_id} skipped, 0 kept: this API key cannot name that user "
            "(only an owner's key lists every user); pull with an owner's key to keep them",
            err=True,
        )
    shared = f" as {res.stored} labels (one per id of records sharing a content)" if res.stored != res.answers else ""
    click.echo(
        f"Stored {res.answers} answers{shared} ({res.changed} new or changed since the last pull of {res.dataset!r})"
        f" in {display(store_path)}."
    )


@click.command("import-labels")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@store_option
@spec_option
@click.option("--record-id", "record_id_col", required=True, help="Column holding the record id.")
@click.option("--label", "label_col", required=True, help="Column holding the label (or integer value).")
@click.option("--item-id", "item_id_col", default=None, help="Column holding the chunk / triple id (many specs).")
@click.option(
    "--annotator",
    "annotator_col",
    default=None,
    help="Column naming the annotator.  [required: this or --annotator-name]",
)
@click.option(
    "--annotator-name", default=None, help="One annotator name for every row.  [required: this or --annotator]"
)
@click.option("--comment", "comment_col", default=None, help="Column with the annotator's comment.")
@click.option("--to-argilla", is_flag=True, help="Also store them in Argilla as the annotators' answers.")
@connection_options
@read_limit_options
def import_labels_cmd(
    file: Path,
    store_path: str,
    spec_name: str,
    record_id_col: str,
    label_col: str,
    item_id_col: str | None,
    annotator_col: str | None,
    annotator_name: str | None,
    comment_col: str | None,
    to_argilla: bool,
    argilla: ConnectionFlags,
    limits: ReadLimits,
) -> None:
    """Load existing human labels (CSV / TSV / JSONL / JSON) into the store, and optionally into Argilla.

    Each label needs its annotator: a column of the file (--annotator COL) or one name for every row
    (--annotator-name NAME); give exactly one of the two."""
    with opened(store_path, argilla, need_argilla=to_argilla) as (store, conn):
        res = import_labels(
            store,
            file,
            spec_name,
            record_id_col=record_id_col,
            label_col=label_col,
            item_id_col=item_id_col,
            annotator_col=annotator_col,
            annotator_name=annotator_name,
            comment_col=comment_col,
            conn=conn,
            dataset=argilla.dataset,
            workspace=argilla.workspace,
            limits=limits,
        )
    who = ", ".join(f"{a} {k}" for a, k in sorted(res.annotators.items()))
    click.echo(f"Imported {res.stored} labels of {spec_name!r} from {file.name} ({who}) as dataset {res.dataset!r}.")
    if to_argilla:
        click.echo(f"Stored them as answers in Argilla dataset {res.dataset!r} ({res.to_argilla} records).")
