"""The one table from an option field (as stages name it in messages, greval.errors.option) to the
command-line flag that sets it. Only cli/ knows flags: a stage's error says `pair_by`, the terminal says
--pair-by."""

from __future__ import annotations

from greval.errors import render_options

#: field (bare, or qualified as `Model.field` where one name means two flags) → flag.
FLAGS: dict[str, str] = {}


def for_terminal(message: str) -> str:
    """A stage's message with its option fields written as the flags a terminal user types."""
    return render_options(message, FLAGS)
