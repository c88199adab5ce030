"""Where greval keeps things: bundled resources (specs, annotation server code) and its data directory."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO

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


def annotation_dir() -> Path:
    """The embedded Argilla server's code (runs in its own virtual environment)."""
    return _bundled("annotation")


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
