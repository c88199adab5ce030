"""What the local judge's modules share: its user-facing error (:mod:`greval.llm.gguf`'s), environment numbers,
and log tails."""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path

from greval.llm.gguf import LocalJudgeError

__all__ = ["LocalJudgeError", "env_int", "log_tail"]


def env_int(name: str, default: int, minimum: int = 1) -> int:
    """An integer setting from the environment (``default`` when unset); a bad value is a LocalJudgeError."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise LocalJudgeError(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise LocalJudgeError(f"{name} must be at least {minimum}, got {value}")
    return value


def log_tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a log file, to show with a failure (empty if unreadable)."""
    try:
        with path.open(errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except OSError:
        return ""
