"""``greval annotate users add | list`` and ``greval annotate status --spec``: the reviewers of a team.

Passwords are generated, written to a file readable by its owner only, and never printed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click
from rich.console import Console
from rich.table import Table

from greval.annotation import server
from greval.annotation.adjudicate import adjudicate, pull_adjudicated
from greval.annotation.argilla import connect
from greval.annotation.progress import BREAK_SECONDS, dataset_status
from greval.annotation.reviewers import PASSWORDS_FILE, ROLES, Role, add_reviewer
from greval.annotation.reviewers import list_reviewers as reviewers_of
from greval.cli.annotate_sync import connection_options, opened, spec_option, store_option
from greval.cli.bundles import ConnectionFlags
from greval.store.backend import display

F = TypeVar("F", bound=Callable[..., Any])


def server_options(func: F) -> F:
    """--api-url / --api-key (env ARGILLA_API_URL / ARGILLA_API_KEY), --workspace, --data-dir."""
    opts = [
        click.option(
            "--api-url",
            envvar="ARGILLA_API_URL",
            default=None,
            help="An external Argilla [default: the embedded server].",
        ),
        click.option(
            "--api-key",
            envvar="ARGILLA_API_KEY",
            default=None,
            help="Its owner API key [default: the embedded server's].",
        ),
        click.option("--workspace", default=None, help="Argilla workspace [default: the server's]."),
        click.option(
            "--data-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Data directory of the embedded server (as given to `annotate up`).",
        ),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def default_passwords_file(api_url: str | None, data_dir: Path | None) -> Path:
    """The embedded server's data directory, else greval's Argilla home (one file, keyed by server URL)."""
    if api_url is None:
        return server.credentials_file(data_dir).parent / PASSWORDS_FILE
    return server.argilla_home() / PASSWORDS_FILE


@click.group("users")
def users() -> None:
    """Reviewers: Argilla users who annotate or adjudicate."""


@users.command("add")
@click.argument("name")
@click.option(
    "--role", type=click.Choice(ROLES), required=True, help="annotator: reviews; adjudicator: settles disagreements."
)
@click.option(
    "--passwords-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where the generated password is written (0600) [default: reviewers.json beside the embedded server's "
    "credentials, or in greval's Argilla home for an external server].",
)
@server_options
def add_cmd(
    name: str,
    role: str,
    passwords_file: Path | None,
    api_url: str | None,
    api_key: str | None,
    workspace: str | None,
    data_dir: Path | None,
) -> None:
    """Create an Argilla user as a reviewer; its password goes to a private file, never to the screen."""
    path = passwords_file or default_passwords_file(api_url, data_dir)
    conn = connect(api_url, api_key, data_dir, workspace)
    try:
        rev = add_reviewer(conn, name, cast(Role, role), path, workspace)
    finally:
        conn.close()
    click.echo(f"Added {rev.name} as {role} (Argilla user, workspace {rev.workspace!r}) at {conn.url}.")
    click.echo(f"Password written to {path} (readable by you only); hand it to {rev.name} privately.")


@users.command("list")
@server_options
def list_cmd(api_url: str | None, api_key: str | None, workspace: str | None, data_dir: Path | None) -> None:
    """The server's users with their reviewer roles (from workspace membership)."""
    conn = connect(api_url, api_key, data_dir, workspace)
    try:
        rows = reviewers_of(conn, workspace)
    finally:
        conn.close()
    table = Table("user", "reviewer role", "Argilla role")
    for r in rows:
        table.add_row(r.name, ", ".join(r.roles) or "-", r.argilla_role)
    Console().print(table)


def print_status(
    dataset: str, api_url: str | None, api_key: str | None, workspace: str | None, data_dir: Path | None
) -> None:
    """The per-reviewer progress table of one dataset."""
    conn = connect(api_url, api_key, data_dir, workspace)
    try:
        st = dataset_status(conn, dataset, workspace)
    finally:
        conn.close()
    done = f"{st.completed} of {st.records}" if st.completed is not None else f"? of {st.records}"
    click.echo(f"Dataset {st.dataset!r}: {done} records completed (Argilla's task distribution).")
    table = Table("reviewer", "assigned", "submitted", "discarded", "drafts", "pending", "median s/label")
    for r in st.reviewers:
        med = f"{r.median_seconds:.1f} (n={r.gaps})" if r.median_seconds is not None else "-"
        table.add_row(r.name, str(r.assigned), str(r.submitted), str(r.discarded), str(r.drafts), str(r.pending), med)
    Console().print(table)
    if not st.assigned:
        click.echo("No assignment (push --overlap N assigns): every reviewer is shown every record.")
    click.echo(
        f"median s/label: median gap between a reviewer's consecutive submitted or discarded answers "
        f"(Argilla's updated_at), gaps over {BREAK_SECONDS // 60} min left out as breaks; n = gaps."
    )


@click.command("adjudicate")
@store_option
@spec_option
@click.option(
    "--pull",
    "pull_back",
    is_flag=True,
    help="Fetch the adjudicators' answers into the store instead (kept beside the reviewers' labels).",
)
@connection_options
def adjudicate_cmd(
    store_path: str,
    spec_name: str,
    pull_back: bool,
    argilla: ConnectionFlags,
) -> None:
    """Send records whose reviewers disagree to the adjudicators; with --pull, fetch their labels (the gold)."""
    dataset, workspace = argilla.dataset, argilla.workspace
    with opened(store_path, argilla) as (store, conn):
        assert conn is not None
        if pull_back:
            res = pull_adjudicated(store, conn, spec_name, dataset=dataset, workspace=workspace)
            who = ", ".join(f"{a} {k}" for a, k in sorted(res.by_annotator.items())) or "nobody yet"
            click.echo(
                f"Dataset {res.dataset!r}: {res.records} disputed records, {res.submitted} adjudicated ({who}); "
                f"stored in {display(store_path)} as dataset {res.dataset!r}."
            )
            names = ",".join(sorted(res.by_annotator)) or "NAME"
            click.echo(
                f"Use them as the gold: greval agreement --spec {spec_name} --dataset "
                f"{(dataset or spec_name)} --dataset {res.dataset} --gold adjudicated:{names}"
            )
            return
        adj = adjudicate(store, conn, spec_name, dataset=dataset, workspace=workspace)
    made = "created" if adj.created else "updated"
    click.echo(
        f"{adj.disputed} of {adj.reviewed} records reviewed by two or more people are disputed; sent to dataset "
        f"{adj.dataset!r} in workspace {adj.workspace!r} ({made}), where the adjudicators answer."
    )
    click.echo(f"Then: greval annotate adjudicate --spec {spec_name} --pull")
