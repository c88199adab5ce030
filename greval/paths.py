"""Where greval keeps things: bundled resources (specs, annotation server code) and its data directory."""

from __future__ import annotations

import os
from pathlib import Path

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
