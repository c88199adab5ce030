"""User-facing errors: the CLI prints them in one line and exits 2, without a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input (a file, a flag, a spec) rather than a bug in greval."""

    exit_code = 2


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
