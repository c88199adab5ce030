"""Cache parsed question / metadata-property settings in argilla-server 2.8.0 (greval's embedded server only).

Why: argilla-server validates every record of a bulk upsert against its dataset's settings, and each
``MetadataProperty.parsed_settings`` / ``Question.parsed_settings`` access builds a new pydantic
``TypeAdapter`` of a discriminated union (a core schema built from scratch) and validates the stored JSON
again: per record, per metadata property, per suggestion. That was about half the server's CPU on a push.

What: both properties are replaced by one that keeps the parsed settings in a small LRU cache keyed by the
row's class, id, dataset id and the *content* of its settings (canonical JSON). A dataset whose settings
change (a question or metadata property updated, deleted, re-created) therefore never gets a stale object:
the new content is a new key. Missing entries are parsed with one ``TypeAdapter`` per settings type, built
once. The parsed objects are read, never mutated, by the callers in 2.8.0 (record metadata checks,
suggestion and response validators, the question-update validator).

Safety: :func:`apply` patches only argilla-server :data:`WRITTEN_FOR`, and only if both properties still
look like the ones this was written for; otherwise it changes nothing and says why in one log line. It is
called by ``serve.py`` (the process greval starts), never on import.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from typing import Any

WRITTEN_FOR = "2.8.0"
MAX_ENTRIES = 4096
_LOGGER = logging.getLogger("greval.serve")


class SettingsCache:
    """Parsed settings by (kind, row id, dataset id, canonical settings JSON); least recently used dropped."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str, str, str], Any] = OrderedDict()
        self._lock = threading.Lock()  # sync validators may run in worker threads
        self.hits = 0
        self.misses = 0

    def get(self, kind: str, row: Any, parse: Any) -> Any:
        settings = row.settings
        key = (kind, str(row.id), str(row.dataset_id), json.dumps(settings, sort_keys=True, default=str))
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return found
        parsed = parse(settings)
        with self._lock:
            self.misses += 1
            self._entries[key] = parsed
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return parsed

    def __len__(self) -> int:
        return len(self._entries)


CACHE = SettingsCache()


def _looks_stock(cls: type) -> bool:
    """Whether ``cls.parsed_settings`` is still 2.8.0's property (builds a TypeAdapter from ``self.settings``)."""
    prop = cls.__dict__.get("parsed_settings")
    fget = getattr(prop, "fget", None)
    code = getattr(fget, "__code__", None)
    return isinstance(prop, property) and code is not None and {"TypeAdapter", "settings"} <= set(code.co_names)


def apply() -> bool:
    """Patch argilla-server's two ``parsed_settings`` properties; False (and a log line) if it does not fit."""
    try:
        from argilla_server._version import __version__
        from argilla_server.api.schemas.v1.questions import QuestionSettings
        from argilla_server.models.database import MetadataProperty, Question
        from argilla_server.models.metadata_properties import MetadataPropertySettings
        from pydantic import TypeAdapter
    except ImportError as exc:
        _LOGGER.warning("settings cache not applied: argilla-server's layout is not %s's (%s)", WRITTEN_FOR, exc)
        return False
    if __version__ != WRITTEN_FOR:
        _LOGGER.warning(
            "settings cache not applied: argilla-server %s (written for %s); records are validated unpatched",
            __version__,
            WRITTEN_FOR,
        )
        return False
    if not (_looks_stock(Question) and _looks_stock(MetadataProperty)):
        _LOGGER.warning("settings cache not applied: parsed_settings is not argilla-server %s's", WRITTEN_FOR)
        return False
    question_adapter: TypeAdapter[Any] = TypeAdapter(QuestionSettings)
    metadata_adapter: TypeAdapter[Any] = TypeAdapter(MetadataPropertySettings)

    def question_settings(self: Any) -> Any:
        return CACHE.get("question", self, question_adapter.validate_python)

    def metadata_settings(self: Any) -> Any:
        return CACHE.get("metadata", self, metadata_adapter.validate_python)

    Question.parsed_settings = property(question_settings, doc="Parsed settings, cached by content (greval).")  # type: ignore[method-assign,assignment]
    MetadataProperty.parsed_settings = property(  # type: ignore[method-assign,assignment]
        metadata_settings, doc="Parsed settings, cached by content (greval)."
    )
    _LOGGER.info(
        "settings cache applied (argilla-server %s): parsed question / metadata settings are reused", __version__
    )
    return True
