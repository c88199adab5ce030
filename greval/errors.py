"""User-facing errors: the CLI prints them in one line and exits 2, without a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input (a file, a flag, a spec) rather than a bug in greval."""

    exit_code = 2

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


def first_line(exc: BaseException) -> str:
    """An exception as one line for a user-facing message: its text's first line, else its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
