"""``greval local-judge``: build, serve and inspect the embedded llama.cpp judge (greval.llm.local)."""

from __future__ import annotations

import os
import signal
import time

import click

from greval.cli.common import fail
from greval.llm.local import (
    DEFAULT_CTX_SIZE,
    ENV_SERVER,
    LocalJudgeError,
    build_info,
    bundled_model_path,
    ensure_llama_server,
    find_llama_server,
    llama_server_dir,
    model_identity,
    start_local_judge,
)


@click.group("local-judge")
def local_judge() -> None:
    """Build and run the offline judge (llama.cpp's llama-server with a bundled small model)."""


@local_judge.command("build")
@click.option("--force", is_flag=True, help="Rebuild even if a build exists.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def build_command(force: bool, quiet: bool) -> None:
    """Build llama-server once into greval's data folder (several minutes on 2 cores)."""
    started = time.monotonic()
    try:
        path = ensure_llama_server(progress=not quiet, force=force)
    except LocalJudgeError as exc:
        fail(str(exc), 1)  # the build failed: not the user's mistake, but no traceback either
    click.echo(f"{path}  ({time.monotonic() - started:.1f} s)")


@local_judge.command("serve")
@click.option(
    "--model",
    "model_spec",
    default="local",
    show_default=True,
    help="'local' (bundled SmolLM2) or gguf:/path/to/model.gguf.",
)
@click.option("--threads", type=click.IntRange(min=1), default=None, help="CPU threads [env GREVAL_LLAMA_THREADS].")
@click.option(
    "--parallel",
    type=click.IntRange(min=1),
    default=None,
    help="Concurrent request slots [env GREVAL_LLAMA_PARALLEL, default 2].",
)
@click.option(
    "--ctx-size",
    type=click.IntRange(min=64),
    default=DEFAULT_CTX_SIZE,
    show_default=True,
    help="Context tokens per slot.",
)
@click.option("--port", type=click.IntRange(min=0, max=65535), default=0, help="Port (0 = any free port).")
def serve_command(model_spec: str, threads: int | None, parallel: int | None, ctx_size: int, port: int) -> None:
    """Run the local judge in the foreground until Ctrl-C; prints its base_url."""
    try:
        server = start_local_judge(model_spec, threads=threads, parallel=parallel, ctx_size=ctx_size, port=port)
    except LocalJudgeError as exc:
        fail(str(exc), 2)
    info = server.info
    signal.signal(signal.SIGTERM, _raise_interrupt)  # a supervisor's SIGTERM stops the server too
    # Everything after the start is inside the try: a Ctrl-C that lands while the banner is printed must
    # stop the server too (it did not, and a test caught the race).
    try:
        click.echo(f"base_url: {info.base_url}")
        click.echo(f"model:    {info.model}  ({info.identity})")
        click.echo(f"slots:    {info.parallel} x {info.ctx_size} tokens, {info.threads} threads, pid {info.pid}")
        click.echo(f"log:      {info.log_path}")
        click.echo("Ctrl-C to stop.", err=True)
        code = server.wait()
    except KeyboardInterrupt:
        code = 0
    finally:
        server.stop()
    if code not in (0, -signal.SIGTERM):
        raise click.ClickException(f"llama-server exited with code {code}; see {info.log_path}")


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@local_judge.command("status")
def status_command() -> None:
    """Show whether llama-server is built and which model the local judge uses."""
    try:
        binary = find_llama_server()
    except LocalJudgeError as exc:
        fail(str(exc), 1)  # the build failed: not the user's mistake, but no traceback either
    if binary is None:
        click.echo(f"llama-server: not built (run `greval local-judge build`; goes to {llama_server_dir()})")
    else:
        source = f"from ${ENV_SERVER}" if os.environ.get(ENV_SERVER) else "built"
        click.echo(f"llama-server: {binary} ({source})")
        info = build_info() if not os.environ.get(ENV_SERVER) else None
        if info:
            click.echo(f"  llama-cpp-python {info.get('llama_cpp_python_version')}, "
                       f"built {info.get('built_at')} in {info.get('build_seconds')} s")  # fmt: skip
    try:
        model = bundled_model_path()
    except LocalJudgeError as exc:
        click.echo(f"default model: missing: {exc}")
    else:
        click.echo(f"default model: {model} ({model_identity(model)})")
