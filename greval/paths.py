"""Where greval keeps things: bundled resources (specs, annotation server code) and its data directory."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from greval.errors import UserError

_PKG = Path(__file__).resolve().parent


def _bundled(name: str) -> Path:
    """A resource shipped in the wheel under greval/_bundled, or the source checkout's copy."""
    inside = _PKG / "_bundled" / name
    if inside.is_dir():
        return inside
    return _PKG.parent / name


def metric_specs_dir() -> Path:
    """The predefined metric specs."""
    return _bundled("metric_specs")


def argilla_server_dir() -> Path:
    """The embedded Argilla server's code (runs in its own virtual environment)."""
    return _bundled("argilla_server")


def examples_dir() -> Path:
    """Bundled example datasets with human labels (used by ``greval quickstart``)."""
    return _bundled("examples")


def data_dir() -> Path:
    """greval's own data: the Argilla venv and database, the llama-server build, models.

    ``GREVAL_HOME`` overrides; otherwise ``$XDG_DATA_HOME/greval`` or ``~/.local/share/greval``.
    """
    env = os.environ.get("GREVAL_HOME")
    if env:
        path = Path(env).expanduser()
    else:
        base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        path = Path(base) / "greval"
    path.mkdir(parents=True, exist_ok=True)
    return path


def private_dir(path: Path) -> None:
    """Create ``path`` and any missing parent readable by the owner only (0700), as PostgreSQL does with its
    data directory. Directories that exist keep their mode: they are the user's."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            d.mkdir(mode=0o700)


def private_file(path: Path) -> bool:
    """Create ``path`` empty and readable by the owner only (0600) if it does not exist, its missing
    directories 0700; whether it was created. An existing file keeps its mode (it is the user's)."""
    private_dir(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    return True


def rewrite_private(path: Path) -> IO[bytes]:
    """Open a log greval rewrites from scratch (truncated) for writing, readable by the owner only (0600, also
    when an older greval left it 0644), its missing directories 0700."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")


def output_dir(path: Path) -> None:
    """A folder greval writes the user's files into (a report's, an export's): :func:`private_dir`, and a folder
    that cannot be made (a file in the way, no permission) is one line naming it."""
    try:
        private_dir(path)
        if not path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
    except OSError as exc:
        raise UserError(f"cannot write into {path}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def private_output(path: Path) -> Iterator[Path]:
    """A new file beside ``path``, readable by the owner only (0600), for the block to write (its missing
    directories made 0700); renamed onto ``path`` when the block ends, removed when it raises. Everything greval
    writes for the user (exports, reports, pages, evidence) goes through here: the data in them is the user's
    alone, and a reader never sees half a file. A file that was at ``path`` is replaced, so it ends 0600 too."""
    output_dir(path.parent)
    part = path.with_name(f".{path.name[:200]}.{secrets.token_hex(4)}.part")
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as exc:  # a folder that cannot be made, a file in the way, no permission: the user's to fix
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o600)  # exactly: a umask cannot take the owner's own access away either
    finally:
        os.close(fd)
    try:
        yield part
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def write_private(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through :func:`private_output`: 0600, whole or not at all."""
    with private_output(path) as part:
        part.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
