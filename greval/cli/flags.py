"""The one table from an option field (as stages name it in messages, greval.errors.option) to the
command-line flag that sets it. Only cli/ knows flags: a stage's error says `pair_by`, the terminal says
--pair-by."""

from __future__ import annotations

import shlex

from greval.errors import Remedy, render_options

#: field (bare, or qualified as `Model.field` where one name means two flags) → flag.
FLAGS: dict[str, str] = {
    # agreement
    "AgreementOptions.mapping": "--relabel",
    "missing_values": "--missing-values",
}


def for_terminal(message: str) -> str:
    """A stage's message with its option fields written as the flags a terminal user types."""
    return render_options(message, FLAGS)


def remedy_text(remedy: Remedy) -> str:
    """A stage's remedy as the command a terminal user types: "run `greval store migrate --store URL` once"."""
    words = ["greval", remedy.command]
    for name, value in remedy.options.items():
        words.append(FLAGS.get(name, f"`{name}`"))
        if value:
            words.append(value if value.isupper() else shlex.quote(value))  # a placeholder (URL, NAME) as it is
    return f"run `{' '.join(words)}`" + (f" {remedy.why}" if remedy.why else "")


def error_text(error: str | Exception) -> str:
    """A user error for the terminal: its option fields as flags, and its remedy (a UserError's, or any error's
    ``remedy`` attribute), if any, as a command line."""
    text = for_terminal(str(error))
    remedy = getattr(error, "remedy", None)
    return f"{text}; {remedy_text(remedy)}" if isinstance(remedy, Remedy) else text
