"""A watch's options, in one frozen bundle (the CLI builds it from its flags; stages name its fields)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from greval.runner.options import RunOptions
from greval.watch.budget import Limits
from greval.watch.review import Routing
from greval.watch.sampling import Rules
from greval.watch.windows import Baseline

__all__ = ["WatchOptions", "watch_id"]


class WatchOptions(BaseModel):
    """What to watch, how to sample, what to spend, how to compare, and where alarms go."""

    model_config = ConfigDict(frozen=True)

    source: str = Field(description="phoenix://HOST:PORT/PROJECT, or a folder where trace exports land.")
    specs: tuple[str, ...] = Field(
        description="The metrics (names or spec files): each judged by its production version."
    )
    name: str | None = Field(None, description="Tells two watches of one source apart (default: the source).")
    rules: Rules = Field(default_factory=Rules)
    limits: Limits = Field(default_factory=Limits)
    window_s: float = Field(3600.0, gt=0, description="Window length: traces are grouped by when they started.")
    settle_s: float = Field(
        60.0, ge=0, description="A window is closed (its review share drawn) this long after it ends; a file is read "
        "once it is this old."
    )  # fmt: skip
    page_size: int = Field(200, ge=1, le=1000, description="Traces read, judged and committed together.")
    max_spans: int = Field(10_000, ge=1, description="A trace with more spans is not judged (one line).")
    baseline: Baseline = Field(default_factory=Baseline)
    routing: Routing | None = Field(None, description="The share of each window sent to people (None: none).")
    run: RunOptions = Field(default_factory=RunOptions, description="How each page is judged (concurrency, engine).")
    resamples: int = Field(1000, ge=100, description="Bootstrap resamples per interval.")
    junit: Path | None = Field(None, description="Write each pass's checks here as JUnit XML.")
    page: Path | None = Field(None, description="Write the watch's page into this folder after each pass.")


def watch_id(key: str, name: str | None) -> str:
    """A watch's id in the store: its name, else its source (the same watch across restarts)."""
    return hashlib.sha256(f"{name or ''}\x1f{key}".encode()).hexdigest()[:16]
