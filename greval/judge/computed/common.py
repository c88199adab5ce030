"""What every computed-metric family shares: the error a record cannot be scored with, the record
verdict, and reading a field as texts."""

from __future__ import annotations

import importlib
import math
import re
import threading
from types import ModuleType
from typing import Any

from greval.errors import GrevalError
from greval.types import RECORD_ITEM, ErrorKind, ItemVerdict


class ComputeError(GrevalError):
    """A record this metric cannot score (e.g. a field of the wrong type): an error verdict, not a crash.

    ``kind`` is the verdict's :class:`~greval.types.ErrorKind`: the record's data by default; ``UNKNOWN``
    for what is missing around it (an optional library, the packaged model, a spec's table).
    """

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.INVALID_INPUT) -> None:
        super().__init__(message)
        self.kind = kind


_IMPORT_LOCK = threading.Lock()
_IMPORTED: dict[str, ModuleType] = {}


def library(module: str, package: str) -> ModuleType:
    """``module`` (of the pip package ``package``), imported by one thread at a time, once per process.

    Computed metrics score in worker threads, and a run starts several at once: nltk's package imports its
    submodules from its ``__init__``, so ROUGE (rouge-score imports nltk) and BLEU (nltk.tokenize) importing
    it in two threads at once could leave one of them a partially initialised module ("cannot import name
    'sent_tokenize' … most likely due to a circular import"), and the run failed. An import that fails is
    this metric's error verdict on every record, with the reason, instead of a crashed run."""
    found = _IMPORTED.get(module)
    if found is not None:
        return found
    with _IMPORT_LOCK:
        if module not in _IMPORTED:
            try:
                _IMPORTED[module] = importlib.import_module(module)
            except ImportError as exc:
                raise ComputeError(
                    f"importing {module} ({package}, a dependency of greval) failed: {exc}; reinstall {package} "
                    "with pip",
                    ErrorKind.UNKNOWN,
                ) from None
        return _IMPORTED[module]


def record_verdict(score: float | None, reason: str, label: str | None = None) -> ItemVerdict:
    """The record-level verdict (a NaN score is no score)."""
    return ItemVerdict(
        item_id=RECORD_ITEM,
        score=None if score is None or math.isnan(score) else float(score),
        label=label,
        reason=reason,
    )


def units_of(score: float | None, n: int) -> int:
    """``outputs["units"]``: how many items the record score is a mean or share over (``n``), 0 without a
    score. A dataset's micro average pools records by it: sum(score x units) / sum(units)."""
    return 0 if score is None or math.isnan(score) else n


_WORD = re.compile(r"\w+")


def word_tokens(text: str) -> list[str]:
    """The word tokens computed metrics count and compare: lower-cased runs of Unicode word characters
    (regex ``\\w+``: letters, digits, underscore), nothing removed (stop words are kept)."""
    return _WORD.findall(text.lower())


def texts(value: Any) -> list[str]:
    """A field as a list of texts: a string, or a list of strings (several references)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(v) for v in value if v is not None and str(v).strip()]
    return [] if value is None else [str(value)]


def short(text: str, n: int = 80) -> str:
    """A text on one line, cut to ``n`` characters for reasons and outputs."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
