"""``greval annotate``: run the embedded Argilla server (setup, up, down, status, credentials).

The group's table also names push / pull / import-labels (``greval.cli.annotate_sync``, which needs the
Argilla SDK), imported only when one of them runs.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import ParamSpec, TypeVar

import click

from greval.annotation import server
from greval.cli.common import fail
from greval.cli.lazy import Lazy, LazyGroup

P = ParamSpec("P")
R = TypeVar("R")


def _user_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Print AnnotationServerError as one line on stderr (the one error renderer) and exit 2: not bugs."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except server.AnnotationServerError as exc:
            fail(exc, 2)

    return wrapper


data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the Argilla database, credentials, pid and log live [default: GREVAL_HOME/argilla/data].",
)


# Every `greval annotate` command, where it lives and its short help (checked by tests/test_cli_startup.py).
ANNOTATE_COMMANDS: dict[str, Lazy] = {
    "adjudicate": Lazy(
        "greval.cli.annotate_reviewers:adjudicate_cmd",
        "Send records whose reviewers disagree to the adjudicators; with --pull, fetch their labels (the gold).",
    ),
    "credentials": Lazy(
        "greval.cli.annotate:credentials_cmd",
        "Print the embedded Argilla server's login: username, password and API key.",
    ),
    "down": Lazy("greval.cli.annotate:down_cmd", "Stop the Argilla server started by `up`."),
    "import-labels": Lazy(
        "greval.cli.annotate_sync:import_labels_cmd",
        "Load existing human labels (CSV / TSV / JSONL / JSON) into the store, and optionally into Argilla.",
    ),
    "pull": Lazy(
        "greval.cli.annotate_sync:pull_cmd",
        "Fetch annotators' answers from Argilla into the store's human labels (idempotent).",
    ),
    "push": Lazy(
        "greval.cli.annotate_sync:push_cmd",
        "Push a spec's verdicts to Argilla for people to label (idempotent: re-running updates).",
    ),
    "setup": Lazy(
        "greval.cli.annotate:setup_cmd",
        "Create the Argilla server's own virtual environment (done automatically by `up`).",
    ),
    "status": Lazy(
        "greval.cli.annotate:status_cmd",
        "Print whether the Argilla server is running, and its URL; with --spec, each reviewer's progress.",
    ),
    "users": Lazy("greval.cli.annotate_reviewers:users", "Reviewers: Argilla users who annotate or adjudicate."),
    "up": Lazy(
        "greval.cli.annotate:up_cmd",
        "Start the Argilla server in the background and print how to log in (never the password itself).",
    ),
}


@click.group("annotate", cls=LazyGroup, lazy=ANNOTATE_COMMANDS)
def annotate() -> None:
    """Human review of judge verdicts in a local Argilla server (no Docker, Elasticsearch or Redis)."""


@click.command("setup")
@click.option("--force", is_flag=True, help="Reinstall even if the environment looks complete.")
@_user_errors
def setup_cmd(force: bool) -> None:
    """Create the Argilla server's own virtual environment (done automatically by `up`)."""
    python = server.ensure_venv(force=force)
    click.echo(f"Argilla server {server.ARGILLA_SERVER_VERSION} environment: {python.parent.parent}")


@click.command("up")
@click.option("--port", type=click.IntRange(1, 65535), default=server.DEFAULT_PORT, show_default=True)
@click.option("--host", default=server.DEFAULT_HOST, show_default=True)
@data_dir_option
@_user_errors
def up_cmd(port: int, host: str, data_dir: Path | None) -> None:
    """Start the Argilla server in the background and print how to log in (never the password itself)."""
    info = server.start(port=port, data=data_dir, host=host)
    if info.reused:  # decided under start()'s lock: another `up` may have started it a moment ago
        click.echo(f"Argilla is already running (pid {info.pid}).")
    else:
        click.echo(f"Argilla is running (pid {info.pid}).")
    where = f" --data-dir {shlex.quote(str(data_dir))}" if data_dir else ""
    click.echo(f"  URL:         {info.url}")
    click.echo(f"  username:    {info.username}")
    click.echo(f"  workspace:   {info.workspace}")
    click.echo(f"  data:        {info.data_dir}")
    # The password and API key stay in their file (0600): a terminal's scrollback and CI logs are not private.
    click.echo(f"  credentials: {server.credentials_file(info.data_dir)} (readable by you only)")
    click.echo(f"Show the password and API key with: greval annotate credentials{where}")
    click.echo(f"Stop it with: greval annotate down{where}")


@click.command("credentials")
@data_dir_option
@_user_errors
def credentials_cmd(data_dir: Path | None) -> None:
    """Print the embedded Argilla server's login: username, password and API key."""
    creds = server.read_credentials(data_dir)
    if not creds.get("password") or not creds.get("api_key"):
        raise server.AnnotationServerError(
            f"no credentials in {server.credentials_file(data_dir)}: start the server once with `greval annotate up`"
        )
    click.echo(f"username:  {creds.get('username', '')}")
    click.echo(f"password:  {creds['password']}")
    click.echo(f"API key:   {creds['api_key']}")
    click.echo(f"workspace: {creds.get('workspace', 'argilla')}")


@click.command("down")
@data_dir_option
@_user_errors
def down_cmd(data_dir: Path | None) -> None:
    """Stop the Argilla server started by `up`."""
    if server.stop(data_dir):
        click.echo("Argilla stopped.")
    else:
        click.echo("Argilla was not running.")


@click.command("status")
@data_dir_option
@click.option("--spec", "spec_name", default=None, help="Show each reviewer's progress on this spec's dataset.")
@click.option("--dataset", default=None, help="With --spec: the Argilla dataset [default: the spec's name].")
@click.option("--api-url", envvar="ARGILLA_API_URL", default=None, help="With --spec: an external Argilla.")
@click.option("--api-key", envvar="ARGILLA_API_KEY", default=None, help="With --spec: its API key.")
@click.option("--workspace", default=None, help="With --spec: Argilla workspace [default: the server's].")
@_user_errors
def status_cmd(
    data_dir: Path | None,
    spec_name: str | None,
    dataset: str | None,
    api_url: str | None,
    api_key: str | None,
    workspace: str | None,
) -> None:
    """Print whether the Argilla server is running, and its URL; with --spec, each reviewer's progress."""
    if spec_name is not None:
        from greval.cli.annotate_reviewers import print_status  # needs the Argilla SDK

        print_status(dataset or spec_name, api_url, api_key, workspace, data_dir)
        return
    st = server.status(data_dir)
    if st.running:
        healthy = st.url is not None and server.healthy(st.url)
        state = "running" if healthy else "starting or unresponsive"
        click.echo(f"{state}: {st.url} (pid {st.pid}, data {st.data_dir})")
    else:
        click.echo(f"stopped (data {st.data_dir})")
