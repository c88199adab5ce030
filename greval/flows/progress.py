"""A run's progress, drawn where its user looks. The runner reports ``(done, total, errors)`` through its one
hook (:data:`greval.runner.ProgressHook`); this module draws it: a rich bar on a terminal, an HTML bar
updated in place in a Jupyter notebook (no widget library needed), nothing elsewhere.

A notebook's output belongs to the cell that runs, so the notebook bar draws only from the thread that made
it: reports arriving from greval's loop thread are kept, and the waiting caller draws them (``poll``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from rich.console import Console

#: Least time between two redraws of the notebook bar (seconds); the last report is always drawn.
REDRAW_S = 0.2


class Progress:
    """What every bar offers: a context manager whose value is the runner's hook, and ``poll`` for the
    thread that waits for the run (a no-op where the bar draws itself)."""

    def __enter__(self) -> Progress:
        return self

    def __call__(self, done: int, total: int, errors: int) -> None:
        """The runner's report."""

    def poll(self) -> None:
        """Draw what was reported meanwhile (from the thread that owns the output)."""

    def __exit__(self, *exc: object) -> None:
        """Draw the last report and stop."""


class TerminalProgress(Progress):
    """A rich progress bar with rate, ETA and error count, shown from the runner's first report on, so that
    what comes before (the plan, a judge server starting) prints above it. Quiet when ``console`` is not a
    terminal, unless ``GREVAL_PROGRESS=1``."""

    def __init__(self, console: Console, quiet: bool = False) -> None:
        self.quiet = quiet or (not console.is_terminal and os.environ.get("GREVAL_PROGRESS") != "1")
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        self.bar = RichProgress(
            TextColumn("[bold]judging"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TextColumn("[red]{task.fields[errors]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.task: Any = None

    def __call__(self, done: int, total: int, errors: int) -> None:
        if self.quiet:
            return
        if self.task is None:  # the first report: judging starts (after any judge server is up)
            self.bar.start()
            self.task = self.bar.add_task("judging", total=total, rate="", errors="")
        elapsed = self.bar.tasks[0].elapsed or 0.0
        rate = f"{done / elapsed:.1f}/s" if elapsed > 0 and done else ""
        self.bar.update(self.task, completed=done, rate=rate, errors=f"{errors} errors" if errors else "")

    def __exit__(self, *exc: object) -> None:
        if self.task is not None:
            self.bar.stop()


class NotebookProgress(Progress):
    """An HTML ``<progress>`` bar in the running cell's output, updated in place (IPython's display ids)."""

    def __init__(self) -> None:
        self.owner = threading.get_ident()
        self.started = time.monotonic()
        self.state: tuple[int, int, int] | None = None
        self.drawn: tuple[int, int, int] | None = None
        self.last = 0.0
        self.handle: Any = None
        self.lock = threading.Lock()

    def __call__(self, done: int, total: int, errors: int) -> None:
        with self.lock:
            self.state = (done, total, errors)
        if threading.get_ident() == self.owner:
            self.poll()

    def poll(self, force: bool = False) -> None:
        with self.lock:
            state = self.state
        now = time.monotonic()
        if state is None or state == self.drawn or (not force and now - self.last < REDRAW_S and state[0] < state[1]):
            return
        from IPython.display import display

        show: Any = display  # untyped in some IPython releases

        self.drawn, self.last = state, now
        bundle = self.bundle(*state, elapsed=now - self.started)
        if self.handle is None:
            self.handle = show(bundle, raw=True, display_id=True)
        else:
            self.handle.update(bundle, raw=True)

    @staticmethod
    def bundle(done: int, total: int, errors: int, elapsed: float) -> dict[str, str]:
        """The bar as a display bundle: HTML, and the same line as plain text (nbconvert, a terminal console)."""
        rate = f" · {done / elapsed:.1f}/s" if elapsed > 0 and done else ""
        failed = f" · {errors} error{'s' if errors != 1 else ''}" if errors else ""
        text = f"judging {done}/{total}{rate}{failed} · {elapsed:.0f}s"
        html = (
            f'<div class="greval-progress"><progress value="{done}" max="{max(total, 1)}" '
            f'style="width:40%;vertical-align:middle"></progress> {text}</div>'
        )
        return {"text/plain": text, "text/html": html}

    def __exit__(self, *exc: object) -> None:
        self.poll(force=True)


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython's ZMQ shell); IPython is not imported to find out."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def progress_for(show: bool) -> Progress:
    """The bar for where this process runs: a notebook's, a terminal's (stderr), or none (``show`` False)."""
    if not show:
        return Progress()
    if in_notebook():
        return NotebookProgress()

    return TerminalProgress(Console(stderr=True))
