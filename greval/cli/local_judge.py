"""``greval local-judge``: serve, inspect and (where no prebuilt engine installs) build the embedded llama.cpp
judge (greval.llm.local)."""

from __future__ import annotations

import signal
import time

import click

from greval.cli.common import fail
from greval.llm.local import (
    DEFAULT_CTX_SIZE,
    LocalJudgeError,
    build_info,
    bundled_model_path,
    ensure_llama_server,
    find_engine,
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
    """Build llama-server from source once into greval's data folder (minutes: a C++ build).

    Only needed where pip has no xllamacpp wheel (the prebuilt engine scripts/setup.sh installs); with both,
    the wheel serves unless GREVAL_LLAMA_ENGINE=build."""
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
        click.echo(f"engine:   {info.engine}")
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
    """Show which engine serves the local judge (prebuilt or built) and which model it uses."""
    try:
        engine = find_engine()
    except LocalJudgeError as exc:
        fail(str(exc), 1)  # a wrong GREVAL_LLAMA_* setting: not a flag's mistake, but no traceback either
    if engine is None:
        click.echo(
            "engine: none yet (pip install xllamacpp, or the first use builds llama-server from source into "
            f"{llama_server_dir()}: `greval local-judge build`)"
        )
    else:
        click.echo(f"engine: {engine.label}" + (f": {engine.binary}" if engine.binary is not None else ""))
        info = build_info() if engine.kind == "build" else None
        if info:
            click.echo(f"  llama-cpp-python {info.get('llama_cpp_python_version')}, "
                       f"built {info.get('built_at')} in {info.get('build_seconds')} s")  # fmt: skip
    try:
        model = bundled_model_path()
    except LocalJudgeError as exc:
        click.echo(f"default model: missing: {exc}")
    else:
        click.echo(f"default model: {model} ({model_identity(model)})")
