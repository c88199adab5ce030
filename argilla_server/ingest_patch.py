"""Two patches to argilla-server 2.8.0's record ingest, applied only by greval's embedded server (``serve.py``).

1. Parsed settings are cached. Why: argilla-server validates every record of a bulk upsert against its
dataset's settings, and each ``MetadataProperty.parsed_settings`` / ``Question.parsed_settings`` access
builds a new pydantic ``TypeAdapter`` of a discriminated union (a core schema built from scratch) and
validates the stored JSON again: per record, per metadata property, per suggestion. With 12 metadata
properties that was about half the server's CPU on a push.

What: both properties are replaced by one that keeps the parsed settings in a small LRU cache keyed by the
row's class, id, dataset id and the *content* of its settings (canonical JSON). A dataset whose settings
change (a question or metadata property updated, deleted, re-created) therefore never gets a stale object:
the new content is a new key. Missing entries are parsed with one ``TypeAdapter`` per settings type, built
once. The parsed objects are read, never mutated, by the callers in 2.8.0 (record metadata checks,
suggestion and response validators, the question-update validator).

2. Webhook events are built only when a webhook is enabled. Why: after a bulk upsert argilla-server builds
a webhook event for every record — it reloads the record's dataset with five relationships (six queries)
and serialises the record — and only then asks whether any webhook is enabled (one more query), to do
nothing when none is. That was about a third of the server's time on a push. Now the bulk paths ask first,
at most once a second per database session; with a webhook enabled every event is built and sent as before.

Safety: :func:`apply` patches only argilla-server :data:`WRITTEN_FOR`, and each patch only if what it
replaces still looks like what it was written for; otherwise that patch changes nothing and one log line says
why. It is called by ``serve.py`` (the process greval starts; not with ``--stock``), never on import.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
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


def apply() -> list[str]:
    """Apply every patch that fits this argilla-server; returns the names of those applied."""
    done = []
    if apply_settings_cache():
        done.append("settings cache")
    if apply_webhook_skip():
        done.append("webhook skip")
    return done


def _version() -> str | None:
    try:
        from argilla_server._version import __version__
    except ImportError:
        return None
    return str(__version__)


def apply_settings_cache() -> bool:
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


class WebhookCheck:
    """Whether any webhook is enabled, asked of the database at most once per ``ttl`` seconds per session."""

    def __init__(self, ask: Callable[[Any], Awaitable[Any]], ttl: float = 1.0) -> None:
        self.ask = ask
        self.ttl = ttl
        self._known: weakref.WeakKeyDictionary[Any, tuple[float, bool]] = weakref.WeakKeyDictionary()

    async def any_enabled(self, db: Any) -> bool:
        now = time.monotonic()
        known = self._known.get(db)
        if known is not None and now - known[0] < self.ttl:
            return known[1]
        enabled = len(await self.ask(db)) > 0
        self._known[db] = (now, enabled)
        return enabled


def apply_webhook_skip() -> bool:
    """Make the bulk record paths skip building webhook events when no webhook is enabled."""
    version = _version()
    if version != WRITTEN_FOR:
        _LOGGER.warning("webhook skip not applied: argilla-server %s (written for %s)", version, WRITTEN_FOR)
        return False
    try:
        from argilla_server.bulk import records_bulk
        from argilla_server.contexts.webhooks import list_enabled_webhooks
        from argilla_server.webhooks.v1.records import notify_record_event
    except ImportError as exc:
        _LOGGER.warning("webhook skip not applied: argilla-server's layout is not %s's (%s)", WRITTEN_FOR, exc)
        return False
    if getattr(records_bulk, "notify_record_event_v1", None) is not notify_record_event:
        _LOGGER.warning("webhook skip not applied: records_bulk.notify_record_event_v1 is not %s's", WRITTEN_FOR)
        return False
    check = WebhookCheck(list_enabled_webhooks)

    async def notify_if_any_webhook(db: Any, record_event: Any, record: Any) -> list[Any]:
        if not await check.any_enabled(db):
            return []
        return list(await notify_record_event(db, record_event, record))

    records_bulk.notify_record_event_v1 = notify_if_any_webhook
    _LOGGER.info("webhook skip applied (argilla-server %s): record events are built only for enabled webhooks", version)
    return True
