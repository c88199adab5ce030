"""greval's errors. Every exception greval raises on purpose is a :class:`GrevalError`, so a caller can catch
"any greval failure" in one clause; the families under it say whose it is: :class:`UserError` (a mistake in the
user's input: the CLI prints it in one line and exits 2, without a traceback), :class:`StoreUnavailable` (a store
that stopped answering), and the stages' own (a judge call, the local judge, the Argilla server, a served
request). Failures that are data — a judgement's error verdict, a skipped record — stay data: they are stored and
counted, never raised."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field


class GrevalError(Exception):
    """The root of every exception greval raises on purpose (``except greval.GrevalError``)."""


class UserError(GrevalError):
    """A mistake in the user's input (a file, a flag, a spec) rather than a bug in greval; ``remedy``: a greval
    command that would fix it, as facts (the CLI writes it out after the message)."""

    exit_code = 2

    def __init__(self, *args: object, remedy: Remedy | None = None) -> None:
        super().__init__(*args)
        self.remedy = remedy

    def __str__(self) -> str:
        # Printed as one line: a line break or terminal control character quoted from a file is escaped.
        return super().__str__().translate(_ONE_LINE)


#: Characters str.splitlines() breaks on, and other C0 controls (a terminal escape), except tab.
_ONE_LINE = {c: ascii(chr(c))[1:-1] for c in [*range(0x20), 0x7F, 0x85, 0x2028, 0x2029] if c != 0x09}


class SpecError(UserError):
    """A spec that cannot be loaded: names the file, the field path and what is wrong."""

    def __init__(self, file: str, path: str, message: str) -> None:
        self.file = file
        self.path = path
        self.message = message
        where = f"{file}: {path}: " if path else f"{file}: "
        super().__init__(f"{where}{message}")


class DataError(UserError):
    """A dataset that cannot be read or mapped onto the fields a spec needs."""


class LimitExceeded(DataError):
    """A data file past one of the limits that bound what reading it may cost
    (:class:`greval.dataset.limits.ReadLimits`); ``limit`` names the field, and the message says to raise it
    (:func:`option`: the command line shows its flag)."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(f"{message}; to read it anyway, raise {option(limit)}")
        self.limit = limit


class StoreUnavailable(GrevalError):
    """The store stopped answering (a PostgreSQL server gone for longer than the wait allowed, a SQLite file
    that cannot be written): not the user's mistake, but printed the same way, in one line (with what is
    stored and how to resume), and exit code 75 (EX_TEMPFAIL: try again later)."""

    exit_code = 75

    def __str__(self) -> str:
        return super().__str__().translate(_ONE_LINE)


class Terminated(GrevalError, KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: what runs stops cleanly and records that it was interrupted (the CLI's
    signal handler raises it; exit code 143 instead of 130)."""


def first_line(exc: BaseException) -> str:
    """An exception as one line for a user-facing message: its text's first line, else its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


#: An option field named inside a message: `name` or `Model.name` between backticks.
_OPTION = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)`")


def option(name: str) -> str:
    """Name an option field in a user-facing message. Stages speak of their options' fields, never of
    command-line flags: a Python caller reads `pair_by`, and the CLI shows its flag instead
    (greval/cli/flags.py renders the message through :func:`render_options`)."""
    return f"`{name}`"


def render_options(text: str, names: Mapping[str, str]) -> str:
    """``text`` with every option field that ``names`` knows replaced by its name there (a flag, for the
    CLI); a qualified `Model.field` falls back to the bare field's entry. Unknown fields stay as written."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        found = names.get(name) or names.get(name.rpartition(".")[2])
        return found if found is not None else m.group(0)

    return _OPTION.sub(sub, text)


@dataclass(frozen=True)
class Remedy:
    """A greval command that would fix a user error, as facts: the command's name (``"store migrate"``), the
    option fields to give with their values (``""`` for a switch) and, in words, when or why to run it. Stages
    never write command lines; the CLI does, after the message ("…; run `greval store migrate --store URL`
    once"), and a Python caller finds the facts in ``UserError.remedy``."""

    command: str  # its name, and any arguments it needs, as placeholders in capitals: "run DATA"
    options: Mapping[str, str] = field(default_factory=dict)
    why: str = ""
