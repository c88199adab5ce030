"""Launch argilla-server 2.8.0 without Elasticsearch, Redis or Docker.

Run with the Argilla venv's python (greval does it: ``greval annotate up``)::

    python serve.py --data-dir DIR --host 127.0.0.1 --port 6900

argilla-server reads its settings when it is imported, so everything here happens in a fixed
order: environment first, then the Redis stand-in (fakeredis), then our search engine, then
the database migrations (alembic, called directly: the server's typer CLI breaks on current
click), then greval's ingest patches (``ingest_patch.py``; not with ``--stock``), then the owner
user, and finally uvicorn serving the API and the bundled UI.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import logging
import os
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CREDENTIALS_FILE = "credentials.json"
_LOGGER = logging.getLogger("greval.serve")
_BACKGROUND: set[asyncio.Task[None]] = set()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6900)
    parser.add_argument("--log-level", default=os.environ.get("GREVAL_ARGILLA_LOG_LEVEL", "info"))
    parser.add_argument(
        "--stock",
        action="store_true",
        help="Serve argilla-server's own record ingest, without greval's patches (ingest_patch.py; benchmarks).",
    )
    return parser.parse_args(argv)


def configure_environment(data_dir: Path) -> None:
    """Point argilla-server at our SQLite file and engine; must run before any argilla_server import."""
    # The database holds the owner's API key in plain text: the directory is the user's alone.
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    env = {
        "ARGILLA_HOME_PATH": str(data_dir),
        "ARGILLA_DATABASE_URL": f"sqlite+aiosqlite:///{data_dir / 'argilla.db'}",
        "ARGILLA_SEARCH_ENGINE": "greval",
        "ARGILLA_REDIS_URL": "redis://in-process/0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "0"),
        "ARGILLA_SHOW_HUGGINGFACE_SPACE_PERSISTENT_STORAGE_WARNING": "false",
    }
    os.environ.update(env)


def patch_redis() -> None:
    """Every Redis connection argilla-server or rq makes goes to one in-process fakeredis server."""
    import fakeredis
    import redis

    server = fakeredis.FakeServer()

    def from_url(url: str, **kwargs: Any) -> fakeredis.FakeRedis:
        return fakeredis.FakeRedis(server=server)

    redis.from_url = from_url  # type: ignore[assignment]
    redis.Redis.from_url = classmethod(lambda cls, url, **kw: fakeredis.FakeRedis(server=server))  # type: ignore[assignment,method-assign]


def run_jobs_in_process() -> None:
    """Run argilla-server's rq jobs inside the server process instead of a separate worker.

    The one that matters is the record-status recomputation after a dataset update: it writes to
    the search index, which lives in this process. Each job is still enqueued (so ``/api/v1/jobs``
    can report it) and then run as a task on the server's event loop.
    """
    from argilla_server.jobs import dataset_jobs, hub_jobs, webhook_jobs
    from rq.job import Job, JobStatus

    def in_process(func: Callable[..., Any]) -> None:
        original_delay: Callable[..., Job] = func.delay  # type: ignore[attr-defined]

        async def run(job: Job, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            job.set_status(JobStatus.STARTED)
            try:
                if inspect.iscoroutinefunction(func):
                    await func(*args, **kwargs)
                else:
                    await asyncio.to_thread(func, *args, **kwargs)
            except Exception:
                _LOGGER.exception("in-process job %s failed", getattr(func, "__name__", func))
                job.set_status(JobStatus.FAILED)
            else:
                job.set_status(JobStatus.FINISHED)
            finally:
                if job.origin:
                    from argilla_server.jobs.queues import DEFAULT_QUEUE, HIGH_QUEUE

                    for queue in (DEFAULT_QUEUE, HIGH_QUEUE):
                        queue.remove(job)

        def delay(*args: Any, **kwargs: Any) -> Job:
            job = original_delay(*args, **kwargs)
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                asyncio.run(run(job, args, kwargs))
                return job
            task = loop.create_task(run(job, args, kwargs))
            _BACKGROUND.add(task)
            task.add_done_callback(_BACKGROUND.discard)
            return job

        func.delay = delay  # type: ignore[attr-defined]

    in_process(dataset_jobs.update_dataset_records_status_job)
    in_process(hub_jobs.import_dataset_from_hub_job)
    in_process(hub_jobs.export_dataset_to_hub_job)
    in_process(webhook_jobs.notify_event_job)


def register_search_engine() -> None:
    """Importing the module registers it under the name ``greval`` (see ``SearchEngine.register``)."""
    sys.path.insert(0, str(HERE))
    import greval_search  # noqa: F401


def migrate() -> None:
    """``alembic upgrade head`` on the SQLite file, as ``argilla_server database migrate`` does."""
    from alembic import command
    from alembic.config import Config
    from argilla_server.database import ALEMBIC_CONFIG_FILE

    command.upgrade(Config(ALEMBIC_CONFIG_FILE), "head")


def load_credentials(data_dir: Path) -> dict[str, str]:
    """Owner credentials: from the environment, else the stored file, else newly generated (0600)."""
    path = data_dir / CREDENTIALS_FILE
    stored: dict[str, str] = {}
    if path.exists():
        stored = json.loads(path.read_text())
    creds = {
        "username": os.environ.get("GREVAL_ARGILLA_USERNAME") or stored.get("username") or "greval",
        "password": os.environ.get("GREVAL_ARGILLA_PASSWORD") or stored.get("password") or secrets.token_urlsafe(12),
        "api_key": os.environ.get("GREVAL_ARGILLA_API_KEY") or stored.get("api_key") or secrets.token_urlsafe(24),
        "workspace": os.environ.get("GREVAL_ARGILLA_WORKSPACE") or stored.get("workspace") or "argilla",
    }
    return creds


def save_credentials(data_dir: Path, creds: dict[str, str]) -> None:
    path = data_dir / CREDENTIALS_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(creds, fh, indent=2)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


async def ensure_owner(creds: dict[str, str]) -> bool:
    """Create the owner user, its API key and a workspace on first start; returns True if created."""
    from argilla_server.contexts import accounts
    from argilla_server.database import AsyncSessionLocal, async_engine
    from argilla_server.models import UserRole, Workspace, WorkspaceUser

    created = False
    try:
        async with AsyncSessionLocal() as db:
            user = await accounts.get_user_by_username(db, creds["username"])
            if user is None:
                user = await accounts.create_user(
                    db,
                    {
                        "first_name": creds["username"],
                        "last_name": None,
                        "username": creds["username"],
                        "role": UserRole.owner,
                        "password": creds["password"],
                    },
                )
                user.api_key = creds["api_key"]
                await db.commit()
                created = True
            workspace = await Workspace.get_by(db, name=creds["workspace"])
            if workspace is None:
                workspace = await accounts.create_workspace(db, {"name": creds["workspace"]})
            if await WorkspaceUser.get_by(db, workspace_id=workspace.id, user_id=user.id) is None:
                await WorkspaceUser.create(db, workspace_id=workspace.id, user_id=user.id)
    finally:
        # The pool's connections belong to this event loop; uvicorn runs its own.
        await async_engine.dispose()
    return created


def main(argv: list[str] | None = None) -> None:
    started = time.monotonic()
    # Files this process creates (argilla.db and its journals, server_id.dat, credentials) are 0600.
    # greval also starts us with this umask; set it here too for direct runs.
    os.umask(0o077)
    args = parse_args(argv)
    data_dir: Path = args.data_dir.expanduser().resolve()
    configure_environment(data_dir)
    patch_redis()
    register_search_engine()
    run_jobs_in_process()

    migrate()
    # alembic's fileConfig disables every logger that existed before it ran; ours included.
    for name in ("greval.serve", "greval.search"):
        logging.getLogger(name).disabled = False
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    _LOGGER.info("migrations done after %.1fs", time.monotonic() - started)

    if args.stock:
        _LOGGER.info("ingest patches not applied: --stock")
    else:
        import ingest_patch

        ingest_patch.apply()

    creds = load_credentials(data_dir)
    created = asyncio.run(ensure_owner(creds))
    if created:
        save_credentials(data_dir, creds)
    elif not (data_dir / CREDENTIALS_FILE).exists():
        _LOGGER.warning("owner user %r already existed; its credentials are not stored here", creds["username"])
    _LOGGER.info("owner user %r ready (credentials in %s)", creds["username"], data_dir / CREDENTIALS_FILE)

    import uvicorn
    from argilla_server._app import app

    _LOGGER.info("app ready after %.1fs; serving on http://%s:%d", time.monotonic() - started, args.host, args.port)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)


if __name__ == "__main__":
    main()
