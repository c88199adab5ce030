"""The one error type of push / pull / import: a ``UserError`` (one line, exit 2), no Argilla import."""

from __future__ import annotations

from greval.errors import UserError


class AnnotationError(UserError):
    """Something the user can fix about a push / pull / import (bad flag, unknown spec, server refused)."""
